"""What guard launch adds to a node's start-up: `guard launch -- torchrun` against the same `torchrun` alone,
measured in the same run (one node, 2 ranks on gloo, GPUs simulated; median of 5). Target: at most 3 s."""

from __future__ import annotations

import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures" / "launch"
REPEATS = 5


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _timed(command: list[str], cwd: str, env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run(command, cwd=cwd, env=env, check=True, capture_output=True)
    return time.perf_counter() - start


def main() -> None:
    work = tempfile.mkdtemp(prefix="guard-bench-")
    (Path(work) / "show_argv.py").write_bytes((FIXTURES / "show_argv.py").read_bytes())
    config = (FIXTURES / "ds_config.json").read_text().replace('"train_batch_size": 32', '"train_batch_size": 16')
    (Path(work) / "ds_config.json").write_text(config)  # 8 x 1 x 2 ranks
    env = {**os.environ, "GUARD_SIMULATED_GPUS": "80GiB:79GiB", "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}

    def torchrun() -> list[str]:
        return [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc-per-node", "2",
                "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{_port()}", "show_argv.py",
                "--deepspeed_config", "ds_config.json"]

    guard = [sys.executable, "-m", "guard", "launch", "--model", "gpt3-125m", "--seq-length", "2048", "--"]
    bare, wrapped = [], []
    for _ in range(REPEATS):
        bare.append(_timed(torchrun(), work, env))
        wrapped.append(_timed(guard + torchrun(), work, env))
    b, w = statistics.median(bare), statistics.median(wrapped)
    print(f"one node, 2 ranks, median of {REPEATS} runs (GPUs simulated)\n")
    print(f"{'torchrun alone':34} {b:6.2f} s")
    print(f"{'guard launch -- torchrun':34} {w:6.2f} s  ({w / b:.2f}x)")
    print(f"overhead per node: {w - b:.2f} s (target 3 s: {'met' if w - b <= 3 else 'MISSED'})")


if __name__ == "__main__":
    main()
