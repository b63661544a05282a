"""Launchers as records (torchrun, deepspeed, accelerate, srun, mpirun, Python, trainer CLIs) and their chains."""
