"""Cold wall time of `guard check` on one config and on the corpus, beside check-jsonschema in the same run."""

from __future__ import annotations

import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCHEMA = ROOT / "schemas" / "deepspeed" / "0.19.8" / "config.schema.json"
REPEATS = 5


def cold(cmd: list[str], repeats: int = REPEATS) -> float:
    """Median wall time of a fresh process (import costs included, as in a pre-commit hook)."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        subprocess.run(cmd, capture_output=True, cwd=ROOT)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    corpus = ROOT.parent / "shared" / "corpus"
    one = ROOT / "examples" / "deepspeed" / "ds_config_zero3_hf.json"
    files = sorted(str(p) for d in ("deepspeed", "deepspeed-bad") for p in (corpus / d).glob("*")
                   if p.suffix in (".json", ".yml", ".yaml")) if corpus.is_dir() else []
    guard = [sys.executable, "-m", "guard", "check", "--isolated", "--exit-zero"]
    cjs = shutil.which("check-jsonschema") or str(Path(sys.executable).with_name("check-jsonschema"))
    rows = [("guard, 1 file", cold(guard + [str(one)]), 0.15)]
    baseline = [("check-jsonschema, 1 file", cold([cjs, "--schemafile", str(SCHEMA), str(one)]))]
    if files:
        rows.append((f"guard, {len(files)} files", cold(guard + files), 0.6))
        baseline.append((f"check-jsonschema, {len(files)} files", cold([cjs, "--schemafile", str(SCHEMA)] + files)))
    python = cold([sys.executable, "-c", "pass"])
    print(f"cold wall time, median of {REPEATS} runs (python startup alone: {python:.3f} s)\n")
    print(f"{'command':34} {'seconds':>8} {'target':>8} {'vs check-jsonschema':>21}")
    for (name, seconds, target), (_, base) in zip(rows, baseline):
        verdict = "" if target is None else ("ok" if seconds <= target else "MISSED")
        print(f"{name:34} {seconds:8.3f} {target:8.2f} {seconds / base:19.2f}x  {verdict}")
    for name, base in baseline:
        print(f"{name:34} {base:8.3f}")


if __name__ == "__main__":
    main()
