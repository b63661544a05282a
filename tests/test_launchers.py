"""guard launch in front of every launcher of the registry (guard/launchers): the job starts when it fits, the
hook is armed in every rank (abort: exit 3, no rank reaches the training script), and warn lets it run with the
report. Two ranks on localhost (one for a plain Python process), GPUs simulated; srun, mpirun and mpiexec are
stand-ins that start their ranks with the variables the real ones give (tests/fixtures/launch/fakes), and the
stand-in for Open MPI hands a rank only what `-x` names, as Open MPI does on another host."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT

FIXTURES = ROOT / "tests" / "fixtures" / "launch"
FAKES = FIXTURES / "fakes"
TIMEOUT = 240
MODEL = ["--model", "gpt3-125m", "--seq-length", "2048"]  # the DeepSpeed program's model, for guard
BIN = Path(sys.executable).parent
LLAMA = "meta-llama/Llama-2-7b-hf"  # a preset by its Hub name: LoRA on it needs ~14 GiB, not 6


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _program(config: str = "ds16.json") -> list[str]:
    return [sys.executable, "show_argv.py", "--deepspeed_config", config]


def _accelerate(port: int) -> list[str]:
    return [str(BIN / "accelerate"), "launch", "--multi_gpu", "--num_processes", "2", "--num_machines", "1",
            "--mixed_precision", "no", "--dynamo_backend", "no", "--main_process_port", str(port)]


# name -> (guard's options, the launcher command for a free port, ranks)
LAUNCHERS = {
    "torchrun": (MODEL, lambda p: [str(BIN / "torchrun"), "--nproc-per-node", "2", "--rdzv-backend", "c10d",
                                   "--rdzv-endpoint", f"127.0.0.1:{p}", "show_argv.py", "--deepspeed_config",
                                   "ds16.json"], 2),
    "python -m torch.distributed.run": (MODEL, lambda p: [sys.executable, "-m", "torch.distributed.run",
                                                          "--nproc-per-node", "2", "--master-port", str(p),
                                                          "show_argv.py", "--deepspeed_config", "ds16.json"], 2),
    "python -m torch.distributed.launch": (MODEL, lambda p: [sys.executable, "-m", "torch.distributed.launch",
                                                             "--nproc-per-node", "2", "--master-port", str(p),
                                                             "--use-env", "show_argv.py", "--deepspeed_config",
                                                             "ds16.json"], 2),
    "deepspeed": (MODEL, lambda p: [str(BIN / "deepspeed"), "--num_gpus", "2", "--master_port", str(p),
                                    "show_argv.py", "--deepspeed_config", "ds16.json"], 2),
    "accelerate launch": (MODEL, lambda p: [*_accelerate(p), "show_argv.py", "--deepspeed_config", "ds16.json"], 2),
    "srun": (MODEL, lambda p: ["srun", "--ntasks", "2", *_program()], 2),
    "mpirun (Open MPI)": (MODEL, lambda p: ["mpirun", "-np", "2", "-x", "GUARD_SIMULATED_GPUS", "-x", "MASTER_PORT",
                                            "-x", "OMP_NUM_THREADS", *_program()], 2),
    "mpiexec (MPICH / Intel MPI)": (MODEL, lambda p: ["mpiexec", "-n", "2", *_program()], 2),
    "python (one process)": (MODEL, lambda p: _program("ds8.json"), 1),
    "llamafactory-cli": ([], lambda p: ["llamafactory-cli", "train", "lmf.yaml"], 2),
    "axolotl": ([], lambda p: ["axolotl", "train", "axolotl.yml", "--", "--num_processes", "2"], 2),
    "trl": ([], lambda p: ["trl", "sft", "--config", "trl.yaml", "--num_processes", "2"], 2),
}
# free memory per scenario: the DeepSpeed jobs (gpt3-125m, micro-batch 8) need ~20 GiB, the LoRA ones ~14 GiB
SCENARIOS = {"start": ("80GiB:79GiB", "abort"), "abort": ("80GiB:6GiB", "abort"), "warn": ("80GiB:6GiB", "warn")}


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    (tmp_path / "show_argv.py").write_bytes((FIXTURES / "show_argv.py").read_bytes())
    config = (FIXTURES / "ds_config.json").read_text()
    (tmp_path / "ds16.json").write_text(config.replace('"train_batch_size": 32', '"train_batch_size": 16'))
    (tmp_path / "ds8.json").write_text(config.replace('"train_batch_size": 32', '"train_batch_size": 8'))
    common = "per_device_train_batch_size: 1\nbf16: true\n"
    (tmp_path / "lmf.yaml").write_text(f"model_name_or_path: {LLAMA}\nstage: sft\nfinetuning_type: lora\n"
                                       f"lora_target: all\ncutoff_len: 1024\n{common}")
    (tmp_path / "axolotl.yml").write_text(f"base_model: {LLAMA}\nadapter: lora\nlora_r: 8\nlora_target_linear: true\n"
                                          "sequence_len: 1024\nmicro_batch_size: 1\nbf16: true\n")
    (tmp_path / "trl.yaml").write_text(f"model_name_or_path: {LLAMA}\nuse_peft: true\nmax_length: 1024\n{common}"
                                       "output_dir: out\n")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for fake in ("srun", "mpirun", "mpiexec"):
        shutil.copy(FAKES / fake, bin_dir / fake)
    shutil.copy(FAKES / "train_stub.py", bin_dir / "train_stub.py")
    for tool in ("llamafactory-cli", "axolotl", "trl"):  # Python console scripts, as the real ones are
        (bin_dir / tool).write_text(f"#!{sys.executable}\n" + (FAKES / "trainer_cli.py").read_text())
        (bin_dir / tool).chmod(0o755)
    return tmp_path


def _env(workdir: Path, free: str, port: int) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GUARD_", "TORCHELASTIC", "RANK", "LOCAL_RANK",
                                                                   "WORLD_SIZE", "MASTER_"))}
    env.update(GUARD_SIMULATED_GPUS=free, DS_ACCELERATOR="cpu", PYTHONWARNINGS="ignore", OMP_NUM_THREADS="1",
               MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), FORCE_TORCHRUN="1", NPROC_PER_NODE="2",
               PATH=os.pathsep.join([str(workdir / "bin"), str(BIN), env.get("PATH", "")]))
    return env


@pytest.mark.parametrize("scenario", list(SCENARIOS))
@pytest.mark.parametrize("name", list(LAUNCHERS))
def test_every_launcher_starts_arms_aborts_and_warns(workdir, name, scenario):
    options, command, ranks = LAUNCHERS[name]
    free, policy = SCENARIOS[scenario]
    port = _port()
    run = subprocess.run([sys.executable, "-m", "guard", "launch", *options, "--policy", policy,
                          "--exchange-timeout", "60", "--", *command(port)], cwd=workdir,
                         env=_env(workdir, free, port), capture_output=True, text=True, timeout=TIMEOUT)
    text = run.stdout + run.stderr
    started = text.count("TRAINING STARTED")
    if scenario == "start":
        assert run.returncode == 0 and started == ranks, text[-3000:]
        assert "guard launch: run: every rank fits" in text
    elif scenario == "abort":
        assert run.returncode == 3 and started == 0, text[-3000:]
        assert f"guard launch: abort: {ranks} of {ranks} ranks would run out of memory" in text
    else:
        assert run.returncode == 0 and started == ranks, text[-3000:]
        assert f"guard launch: run: {ranks} of {ranks} ranks would run out of memory" in text
