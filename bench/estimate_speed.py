"""Cold wall time of `guard estimate` on a 1024-rank job (GPT-3 175B, TP 8 x PP 8 x DP 16, VPP 3), text and
JSON (one entry per rank), beside Python's own start-up measured in the same run (target: 0.3 s, no torch)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import lint_speed  # noqa: E402  (its cold-process timer)

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "examples" / "memory" / "gpt3_175b_tp8_pp8_vpp.sh"
REPEATS = 7
TARGET = 0.3


def main() -> None:
    python = lint_speed.cold([sys.executable, "-c", "pass"], REPEATS)
    base = [sys.executable, "-m", "guard", "estimate", "--gpu-memory", "80GiB", str(SCRIPT)]
    text = lint_speed.cold(base, REPEATS)
    as_json = lint_speed.cold(base + ["--format", "json"], REPEATS)
    modules = subprocess.run([sys.executable, "-X", "importtime", "-m", "guard", "estimate", "--gpu-memory",
                              "80GiB", str(SCRIPT)], capture_output=True, text=True).stderr
    heavy = sorted({line.split("|")[-1].strip().split(".")[0] for line in modules.splitlines()
                    if line.split("|")[-1].strip().split(".")[0] in ("torch", "deepspeed", "megatron")})
    print(f"cold wall time, median of {REPEATS} runs, 1024 ranks (GPT-3 175B, TP8 x PP8 x DP16, VPP 3)\n")
    print(f"{'guard estimate (text)':32} {text:7.3f} s  (target {TARGET} s: {'met' if text <= TARGET else 'MISSED'})")
    print(f"{'guard estimate --format json':32} {as_json:7.3f} s  (1024 rank entries; "
          f"{'met' if as_json <= TARGET else 'MISSED'})")
    print(f"{'python -c pass (startup)':32} {python:7.3f} s  guard - python startup = {text - python:.3f} s")
    print(f"heavy frameworks imported: {', '.join(heavy) if heavy else 'none'}")


if __name__ == "__main__":
    main()
