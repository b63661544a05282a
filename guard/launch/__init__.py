"""guard launch: check a job before its launcher starts it, then sample the real GPUs on every rank."""
