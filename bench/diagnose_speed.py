"""guard diagnose on a long log: 1 GB of Megatron-style training output with one OOM at its end, read in a
stream; its wall time beside `wc -l` on the same file in the same run (the floor of reading it at all)."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time

SIZE = 10**9
LINE = (" iteration      {n:>6}/ 100000 | consumed samples: 1234 | elapsed time per iteration (ms): 812.3 | "
        "learning rate: 1.0E-04 | lm loss: 2.1E+00\n")
OOM = ("[rank7]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 226.00 MiB. GPU 7 has a total capacity "
       "of 79.15 GiB of which 210.38 MiB is free. Of the allocated memory 77.81 GiB is allocated by PyTorch, and "
       "336.73 MiB is reserved by PyTorch but unallocated.\n")


def main() -> None:
    path = os.path.join(tempfile.mkdtemp(prefix="guard-bench-"), "train.log")
    with open(path, "w") as handle:
        block = "".join(LINE.format(n=n) for n in range(10000))
        while handle.tell() < SIZE:
            handle.write(block)
        handle.write(OOM)
    size = os.path.getsize(path)
    start = time.perf_counter()
    subprocess.run(["wc", "-l", path], check=True, capture_output=True)
    floor = time.perf_counter() - start
    start = time.perf_counter()
    run = subprocess.run([sys.executable, "-m", "guard", "diagnose", path, "--format", "json"], capture_output=True,
                         text=True)
    took = time.perf_counter() - start
    os.remove(path)
    found = len(__import__("json").loads(run.stdout)["events"]) if run.returncode == 0 else 0
    print(f"log: {size / 1e9:.2f} GB, one OOM at the end")
    print(f"{'wc -l':24} {floor:7.2f} s")
    print(f"{'guard diagnose':24} {took:7.2f} s  ({took / floor:.0f}x wc; {size / took / 1e6:.0f} MB/s); "
          f"events found: {found}, exit {run.returncode}")


if __name__ == "__main__":
    main()
