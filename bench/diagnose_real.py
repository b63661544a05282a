"""guard diagnose on real out-of-memory logs from public issue threads, against labels taken from each thread.

    python bench/diagnose_real.py [DIR]

tests/diagnose_real/MANIFEST.tsv names each log (its thread, the cause the thread established, the failing rank
and the size asked where the log prints them, and why the label is what it is). The logs themselves are not kept
in this repository (they are other people's text): DIR (default $GUARD_OOM_REAL, else ../oom-real beside the
checkout) holds them under the manifest's file names; a missing one is counted as missing. Prints, per log, the
label against guard's first event (torchrun's root cause where the log has one), then precision and recall per
cause, and how often the rank and the size asked were read right.
"""

from __future__ import annotations

import csv
import hashlib
import os
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MANIFEST = ROOT / "tests" / "diagnose_real" / "MANIFEST.tsv"


def rows() -> list[dict]:
    with MANIFEST.open(encoding="utf-8") as handle:
        return list(csv.DictReader(handle, delimiter="\t"))


def folder(argv: list[str]) -> Path:
    if argv:
        return Path(argv[0])
    return Path(os.environ.get("GUARD_OOM_REAL") or ROOT.parent / "oom-real")


def diagnosed(path: Path) -> dict | None:
    """guard's report on one log, as `guard diagnose --format json` gives it (None: no event found)."""
    from guard.diagnose import report
    from guard.diagnose.scan import scan_file

    scan = scan_file(str(path)).finish()
    if not scan.events:
        return None
    out = report.to_dict(scan.events, scan=scan)
    return next((e for e in out["events"] if e.get("rank_from") == "torchrun's root cause"), out["events"][0])


def _int(text: str) -> int | None:
    return int(float(text)) if text not in ("", "null", "None") else None


def main() -> None:
    where = folder(sys.argv[1:])
    truth, said = [], []
    ranks = sizes = rank_total = size_total = missing = 0
    print(f"{'log':58} {'label':15} {'guard':15} rank (label/guard)")
    for row in rows():
        path = where / row["file"]
        if not path.is_file():
            missing += 1
            continue
        if hashlib.sha256(path.read_bytes()).hexdigest() != row["sha256"]:
            print(f"{row['file']}: not the text the label was made for (sha256 differs); skipped")
            missing += 1
            continue
        event = diagnosed(path)
        cause = event["cause"] if event else "none"
        truth.append(row["cause"])
        said.append(cause)
        rank = _int(row["rank"])
        if rank is not None:
            rank_total += 1
            ranks += bool(event) and event["rank"] == rank
        asked = _int(row["requested_bytes"])
        if asked is not None:
            size_total += 1
            sizes += bool(event) and event["requested_bytes"] is not None and \
                abs(event["requested_bytes"] - asked) <= 0.01 * asked
        mark = "" if cause == row["cause"] else "  <-"
        print(f"{row['file'][:58]:58} {row['cause']:15} {cause:15} {row['rank'] or '-'}/"
              f"{event['rank'] if event and event['rank'] is not None else '-'}{mark}")
    if not truth:
        sys.exit(f"no log of {MANIFEST} is in {where} (give the folder that holds them)")
    found = [(t, s) for t, s in zip(truth, said) if s != "none"]
    print(f"\n{len(truth)} logs ({missing} missing from {where}); cause right in "
          f"{sum(t == s for t, s in zip(truth, said))}/{len(truth)} (in {sum(t == s for t, s in found)}/{len(found)} "
          f"where guard found a failure: the others' excerpts lack the failing message); rank right in "
          f"{ranks}/{rank_total} that print one; size asked right in {sizes}/{size_total} that print one\n")
    print(f"{'cause':15} {'labelled':>8} {'said':>5} {'right':>5} {'precision':>9} {'recall':>7}")
    labelled, guessed = Counter(truth), Counter(said)
    for name in sorted(set(truth) | set(said)):
        right = sum(t == s == name for t, s in zip(truth, said))
        precision = f"{right / guessed[name]:.0%}" if guessed[name] else "-"
        recall = f"{right / labelled[name]:.0%}" if labelled[name] else "-"
        print(f"{name:15} {labelled[name]:8} {guessed[name]:5} {right:5} {precision:>9} {recall:>7}")


if __name__ == "__main__":
    main()
