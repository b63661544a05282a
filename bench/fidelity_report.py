"""Print guard's fidelity table: every prediction next to what the real framework measured, and a summary.

python bench/fidelity_report.py [--only deepspeed_zero,megatron_params,...] [--markdown] [--summary-only]

Runs the same harness as the `fidelity` tests (tests/fidelity/): DeepSpeed ZeRO on 1, 2 and 4 CPU ranks,
megatron-core models on the meta device, megatron-core layers forward on CPU, and megatron-core's pipeline
schedules on CPU. A part whose framework is not installed is skipped and named.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

PARTS = {  # module in tests/fidelity -> the framework it runs
    "deepspeed_zero": "deepspeed",
    "megatron_params": "megatron.core",
    "megatron_activations": "megatron.core",
    "megatron_stash": "megatron.core",
}


def run_part(name: str, workdir: Path):
    framework = PARTS[name]
    try:
        importlib.import_module(framework)
    except ImportError:
        return None, f"{framework} is not installed"
    module = importlib.import_module(f"tests.fidelity.{name}")
    start = time.perf_counter()
    (workdir / name).mkdir(parents=True)
    rows = module.collect(workdir / name)
    return rows, f"{time.perf_counter() - start:.0f} s"


def fmt(value: float) -> str:
    return f"{value:,.0f}" if abs(value) >= 100 or float(value).is_integer() else f"{value:,.3f}"


def table(rows, markdown: bool) -> list[str]:
    head = ("case", "component", "predicted", "measured", "error")
    lines = []
    body = [(r.case, r.component, fmt(r.predicted), fmt(r.measured),
             f"{r.error:+.3%}" + ("" if r.ok else "  OUT OF TOLERANCE")) for r in rows]
    if markdown:
        lines.append("| " + " | ".join(head) + " |")
        lines.append("|" + "---|" * 2 + "---:|" * 3)
        lines += ["| " + " | ".join(cells) + " |" for cells in body]
        return lines
    widths = [max(len(str(c)) for c in col) for col in zip(head, *body)]
    for cells in (head, *body):  # text columns left-aligned, numbers right-aligned
        padded = (str(c).ljust(w) if i < 2 else str(c).rjust(w) for i, (c, w) in enumerate(zip(cells, widths)))
        lines.append("  ".join(padded))
    return lines


def summary(part: str, rows) -> list[str]:
    by_component = defaultdict(list)
    for r in rows:
        by_component[r.component].append(r)
    cases = {r.case for r in rows}
    out = [f"{part}: {len(rows)} comparisons over {len(cases)} cases, {sum(not r.ok for r in rows)} out of tolerance"]
    for component, chosen in by_component.items():
        worst = max(abs(r.error) for r in chosen)
        tol = max(r.tolerance for r in chosen)
        out.append(f"  {component}: {len(chosen)} rows, max |error| {worst:.3%} (tolerance {tol:.0%})")
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default=",".join(PARTS), help="comma-separated parts: " + ", ".join(PARTS))
    parser.add_argument("--markdown", action="store_true", help="print the table as Markdown (for docs)")
    parser.add_argument("--summary-only", action="store_true")
    args = parser.parse_args()
    chosen = [p.strip() for p in args.only.split(",") if p.strip()]
    unknown = [p for p in chosen if p not in PARTS]
    if unknown:
        parser.error(f"unknown part(s): {', '.join(unknown)}")
    all_rows, summaries = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for part in chosen:
            rows, how = run_part(part, Path(tmp))
            if rows is None:
                summaries.append(f"{part}: skipped ({how})")
                continue
            all_rows += rows
            summaries += summary(part, rows) + [f"  ran in {how}"]
    if not args.summary_only:
        print("\n".join(table(all_rows, args.markdown)))
        print()
    print("\n".join(summaries))
    return 0 if all(r.ok for r in all_rows) else 1


if __name__ == "__main__":
    sys.exit(main())
