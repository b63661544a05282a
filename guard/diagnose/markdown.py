"""`guard diagnose --format markdown`: the report as a page to paste into an issue or a post-mortem, with a
per-rank chart of what each failed rank needed against its GPU and guard's prediction."""

from __future__ import annotations

from typing import TextIO

from guard.units import GIB

BAR = 40  # characters of the longest bar


def _gib(n) -> str:
    return "?" if n is None else f"{n / GIB:.2f} GiB"


def write_markdown(report: dict, out: TextIO) -> None:
    events = report["events"]
    logs = sorted({e["source"] for e in events})
    out.write("# guard diagnose\n\n" + (verdict(report) + "\n\n" if events else "") +
              f"**{len(events)} out-of-memory event{'s' if len(events) != 1 else ''}** in "
              f"{len(logs)} log{'s' if len(logs) != 1 else ''}.\n\n## Events\n\n"
              "| where | rank | GPU | phase | cause | asked | free | allocated | reserved, unallocated |\n"
              "|---|---:|---:|---|---|---:|---:|---:|---:|\n")
    for e in events:
        out.write(f"| `{e['source']}:{e['line']}` | {_cell(e['rank'])} | {_cell(e['device'])} | {e['phase']} | "
                  f"**{e['cause']}** | {_gib(e['requested_bytes'])} | {_gib(e['free_bytes'])} | "
                  f"{_gib(e['allocated_bytes'])} | {_gib(e['reserved_unallocated_bytes'])} |\n")
    chart = _chart(report)
    if chart:
        out.write("\n## Per rank\n\nWhat each failed rank needed when it ran out (allocated + asked), its GPU's "
                  "total, and guard's prediction for it.\n\n```text\n" + chart + "```\n")
    out.write("\n## Why\n\n")
    for e in events:
        out.write(f"- `{e['source']}:{e['line']}` (rank {_cell(e['rank'])}): **{e['cause']}**: {e['why']}\n")
    _observed(report, out)
    out.write("\n## What to change\n\n")
    for fix in report["suggestions"]:
        ranks = ", ".join(_cell(r) for r in fix["ranks"])
        out.write(f"- **{fix['cause']}** (ranks {ranks}): {fix['fix']}\n")
    for n, fit in enumerate(report.get("layouts_that_fit") or [], 1):
        out.write(f"\n### Layout {n} that fits: {fit['changes']}\n\nPredicted peak {_gib(fit['peak_bytes'])}, "
                  f"{fit['step_time_s']:.2f} s per step.\n")
        if fit.get("flags"):
            out.write("\n```bash\n" + " ".join(fit["flags"]) + "\n```\n")
        if fit.get("diff"):
            out.write("\n```diff\n" + fit["diff"] + "```\n")
    for path, summary in (report.get("snapshots") or {}).items():
        out.write(f"\n## Snapshot `{path}`\n\nReserved {_gib(summary['reserved'])}, allocated "
                  f"{_gib(summary['allocated'])} ({summary['fragmentation']:.0%} of reserved not allocated).\n\n"
                  "| category | allocated |\n|---|---:|\n")
        for name, size in sorted(summary["by_category"].items(), key=lambda kv: -kv[1]):
            out.write(f"| {name} | {_gib(size)} |\n")


WHAT = {"cuda-oom": "ran out of GPU memory", "nccl": "could not allocate NCCL's buffers on its GPU",
        "shm": "ran out of shared memory (/dev/shm)", "host": "ran out of host RAM",
        "host-killed": "was killed by signal 9 (the kernel's OOM killer, most often)",
        "vllm-startup": "could not start vLLM: too little of its GPU was free", "vllm-kv":
        "left vLLM too little memory for its KV cache", "cublas": "could not allocate cuBLAS's workspace",
        "cudnn": "could not allocate cuDNN's workspace", "raw-cuda": "hit a CUDA out-of-memory error"}


def verdict(report: dict) -> str:
    """One paragraph to paste into an issue: what failed, where, why, and the one change to make. The failure
    spoken of is torchrun's root cause when the log has one, else the first event."""
    events = report["events"]
    first = next((e for e in events if e.get("rank_from") == "torchrun's root cause"), events[0])
    where = [f"Rank {first['rank']}" if first["rank"] is not None else "A rank the log does not name"]
    if first.get("host"):
        where[0] += f" on {first['host']}"
    if first["device"] is not None:
        physical = first.get("physical_device")
        where.append(f"GPU {first['device']}" + (f" (physical GPU {physical})" if physical is not None else ""))
    others = len(events) - 1
    fix = next(f["fix"] for f in report["suggestions"] if f["cause"] == first["cause"])
    layouts = report.get("layouts_that_fit") or []
    change = fix + (f"; or, from guard plan, the fastest layout that fits: {layouts[0]['changes']}"
                    if first["cause"] == "capacity" and layouts else "")
    return (f"**Verdict.** {', '.join(where)} {WHAT.get(first['kind'], 'failed to allocate memory')} "
            f"({first['phase']}, `{first['source']}:{first['line']}`)"
            + (f", one of {others + 1} events" if others else "")
            + f". Cause: **{first['cause']}**, {first['why']}. Change: {change}.")


def _cell(value) -> str:
    return "?" if value is None else str(value)


def _chart(report: dict) -> str:
    """One bar per failed rank: needed (allocated + asked) and, when the job is known, guard's prediction."""
    predicted = {r["rank"]: r["predicted_peak_bytes"] for r in report["ranks"] if "predicted_peak_bytes" in r}
    rows = []
    for e in report["events"]:
        if e["allocated_bytes"] is not None and e["requested_bytes"] is not None:
            rows.append((e["rank"], e["allocated_bytes"] + e["requested_bytes"], e["capacity_bytes"]))
    if not rows:
        return ""
    top = max(max(n, c or 0, predicted.get(r, 0)) for r, n, c in rows)
    lines = []
    for rank, needed, capacity in rows:
        label = f"rank {_cell(rank):>4}"
        lines.append(f"{label} needed {_bar(needed, capacity, top)} {_gib(needed)} of {_gib(capacity)}")
        if rank in predicted:
            lines.append(f"{'':9} guard  {_bar(predicted[rank], capacity, top)} {_gib(predicted[rank])}")
    return "\n".join(lines) + "\n"


def _bar(value: int, capacity: int | None, top: int) -> str:
    """Filled to `value`, a `|` where the GPU ends, padded to a common width."""
    cells = round(BAR * value / top)
    edge = round(BAR * capacity / top) if capacity else None
    text = "".join("|" if i == edge else ("█" if i < cells else " ") for i in range(BAR + 1))
    return text


def _observed(report: dict, out: TextIO) -> None:
    located = [r for r in report["ranks"] if r.get("observed")]
    if not located:
        return
    out.write("\n## guard's prediction beside the log\n\n| rank | what | guard | log | where |\n|---:|---|---:|---:|---|\n")
    for r in located:
        for row in r["observed"]:
            unit = (lambda n: f"{n:,}") if row["unit"] == "parameters" else _gib
            out.write(f"| {r['rank']} | {row['what']} | {unit(row['predicted'])} | {unit(row['observed'])} | "
                      f"`{row['where']}` |\n")
