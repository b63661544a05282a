"""guard check on a fork's script: the first run (the fork's flag table extracted from its checkout), the
next runs (the table from the cache), and the same script judged with a vendored table, in one run.

    python bench/fork_tables.py CHECKOUT SCRIPT     # e.g. a Yuan-2.0 checkout and one of its scripts
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time


def timed(argv: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "guard", "check", "--isolated", *argv], env=env, capture_output=True)
    return time.perf_counter() - start


def main() -> None:
    checkout, script = sys.argv[1], sys.argv[2]
    env = dict(os.environ, GUARD_CACHE_DIR=tempfile.mkdtemp(prefix="guard-bench-cache-"))
    baseline = min(timed(["--megatron-version", "main", "--megatron-args=--num-layers 2"], env) for _ in range(3))
    first = timed(["--megatron-source", checkout, script], env)
    cached = min(timed(["--megatron-source", checkout, script], env) for _ in range(3))
    vendored = min(timed([script], env) for _ in range(3))
    print("guard check, whole process (python start-up included), best of 3 where repeated")
    print(f"  baseline (a one-flag command line, vendored table)  {baseline:6.2f} s")
    print(f"  fork script, first run (table extracted)             {first:6.2f} s  (+{first - baseline:.2f} s)")
    print(f"  fork script, cached table                            {cached:6.2f} s  (+{cached - baseline:.2f} s)")
    print(f"  fork script, no source (upstream table, info only)   {vendored:6.2f} s  (+{vendored - baseline:.2f} s)")


if __name__ == "__main__":
    main()
