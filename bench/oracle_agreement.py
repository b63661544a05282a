"""Print the agreement table between DeepSpeed's DeepSpeedConfig and `guard check` (plain-DeepSpeed judgement)."""

from __future__ import annotations

import collections
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

import deepspeed_oracle as oracle  # noqa: E402


def main() -> None:
    corpus = ROOT.parent / "shared" / "corpus"
    jobs = oracle.config_files(corpus if corpus.is_dir() else None)
    verdicts = oracle.run_deepspeed(jobs)
    errors = oracle.run_guard(jobs)
    print(f"{len(jobs)} JSON configs (corpus, rule fixtures, examples), world size 8 unless a fixture gives one\n")
    print(oracle.format_table(oracle.agreement(verdicts, errors)))
    codes = collections.Counter(d["code"] for v in verdicts if v["accepted"] for d in errors[v["path"]])
    print("\nguard errors on configs DeepSpeedConfig accepts (checked later by the engine, or HF-only):")
    for code, count in sorted(codes.items()):
        print(f"  {code}: {count}")
    missed = [v for v in verdicts if not v["accepted"] and not errors[v["path"]]]
    for verdict in missed:
        print(f"MISSED {verdict['path']}: {verdict['error']}")


if __name__ == "__main__":
    main()
