"""What `guard diagnose` prints: per event, per rank, and the fixes (text and the JSON contract)."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import TextIO

from guard.diagnose.causes import Cause, cause
from guard.diagnose.events import Event
from guard.diagnose.scan import LogScan
from guard.units import GIB


def to_dict(events: list[Event], snapshots: dict | None = None, compared: dict[int, dict] | None = None,
            scan: LogScan | None = None) -> dict:
    """The JSON contract; `compared`: rank -> guard's prediction beside the observations (compare.as_dict);
    `scan`: what else the logs said (the allocator's settings, the ranks' memory over time, CUDA_VISIBLE_DEVICES)."""
    rows, ranks, fixes, compared = [], {}, {}, compared or {}
    expandable = (scan is not None and scan.expandable) or \
        any(s.get("expandable_segments") for s in (snapshots or {}).values())
    visible = scan.visible_devices if scan is not None else None
    for event in events:
        o = event.oom
        c = cause(event, expandable, scan.trends.growth(event.rank) if scan is not None else None)
        if c.name == "capacity" and event.rank in compared:
            c = with_prediction(c, compared[event.rank])
        physical = visible[o.device] if visible and o.device is not None and o.device < len(visible) else None
        rows.append({"rank": event.rank, "rank_from": event.rank_from or None, "host": event.host,
                     "source": event.source, "line": event.line, "phase": event.phase,
                     "kind": o.kind, "device": o.device, "physical_device": physical,
                     "visible_devices": ",".join(map(str, visible)) if physical is not None else None,
                     "era": o.era or None, "requested_bytes": o.requested,
                     "capacity_bytes": o.total, "free_bytes": o.free, "allocated_bytes": o.allocated,
                     "reserved_unallocated_bytes": o.reserved_unallocated,
                     "other_processes": {str(pid): b for pid, b in o.processes.items()} or None,
                     "cause": c.name, "why": c.why})
        entry = ranks.setdefault(event.rank, {"rank": event.rank, "events": 0, "causes": [],
                                              **compared.get(event.rank, {})})
        entry["events"] += 1
        if c.name not in entry["causes"]:
            entry["causes"].append(c.name)
        fix = fixes.setdefault(c.name, {"cause": c.name, "fix": c.fix, "ranks": []})
        if event.rank not in fix["ranks"]:
            fix["ranks"].append(event.rank)
    out = {"events": rows, "ranks": sorted(ranks.values(), key=lambda r: (r["rank"] is None, r["rank"] or 0)),
           "suggestions": list(fixes.values())}
    if snapshots:
        out["snapshots"] = snapshots
    return out


def with_prediction(c: Cause, compared: dict) -> Cause:
    """A capacity cause names the term that dominates guard's prediction for the rank."""
    comps = compared["predicted_components"]
    top = compared["dominant"]
    return replace(c, why=f"{c.why}; guard predicts {_gib(compared['predicted_peak_bytes'])} on this rank, the "
                          f"largest term {top} ({_gib(comps[top])})")


def write_json(report: dict, out: TextIO) -> None:
    json.dump(report, out, indent=2)
    out.write("\n")


def _gib(n) -> str:
    return "?" if n is None else f"{n / GIB:.2f} GiB"


def _amount(n: int, unit: str) -> str:
    return f"{n:,} parameters" if unit == "parameters" else _gib(n)


def _job_from(report: dict) -> str:
    job = report.get("job_from")
    return f" (read from {job})" if job else ""


def write_text(report: dict, out: TextIO) -> None:
    events = report["events"]
    ranks = sorted({e["rank"] for e in events if e["rank"] is not None})
    logs = len({e["source"] for e in events})
    out.write(f"guard diagnose: {len(events)} out-of-memory event{'s' if len(events) != 1 else ''} in {logs} "
              f"log{'s' if logs != 1 else ''}" + (f" (ranks {', '.join(map(str, ranks))})" if ranks else "") + "\n")
    for e in events:
        who = f"rank {e['rank']}" if e["rank"] is not None else "rank unknown"
        who += f" ({e['rank_from']})" if e.get("rank_from") else ""
        who += f" on {e['host']}" if e.get("host") else ""
        gpu = f", GPU {e['device']}" if e["device"] is not None else ""
        if e.get("physical_device") is not None:
            gpu += f" (physical GPU {e['physical_device']}: CUDA_VISIBLE_DEVICES={e['visible_devices']})"
        out.write(f"\n{e['source']}:{e['line']}: {who}{gpu}, {e['phase']}: {e['cause']}: {e['why']}\n")
        if e["kind"] == "cuda-oom":
            out.write(f"  asked {_gib(e['requested_bytes'])}; free {_gib(e['free_bytes'])} of "
                      f"{_gib(e['capacity_bytes'])}; allocated by PyTorch {_gib(e['allocated_bytes'])}; reserved but "
                      f"unallocated {_gib(e['reserved_unallocated_bytes'])}\n")
    located = [r for r in report["ranks"] if "pp_rank" in r]
    if located:
        out.write(f"\nthe failed ranks in the job{_job_from(report)}:\n")
        for r in located:
            out.write(f"  rank {r['rank']}: TP {r['tp_rank']}, PP {r['pp_rank']}, DP {r['dp_rank']}; guard predicts "
                      f"{_gib(r['predicted_peak_bytes'])} there, most of it {r['dominant']}\n")
            for row in r.get("observed", []):
                out.write(f"    {row['what']}: guard {_amount(row['predicted'], row['unit'])}, the log "
                          f"{_amount(row['observed'], row['unit'])} ({row['where']})\n")
    out.write("\nwhat to change:\n")
    for fix in report["suggestions"]:
        ranks = ", ".join("?" if r is None else str(r) for r in fix["ranks"])
        out.write(f"  {fix['cause']} (ranks {ranks}): {fix['fix']}\n")
    for n, fit in enumerate(report.get("layouts_that_fit") or [], 1):
        out.write(f"  layout {n} that fits (guard plan): {fit['changes']}: peak {_gib(fit['peak_bytes'])}, "
                  f"{fit['step_time_s']:.2f} s/step\n")
        if fit.get("flags"):
            out.write("    append to the Megatron command: " + " ".join(fit["flags"]) + "\n")
        if fit.get("diff"):
            out.write("".join("    " + line for line in fit["diff"].splitlines(keepends=True)))
    for path, summary in (report.get("snapshots") or {}).items():
        out.write(f"\nsnapshot {path}: reserved {_gib(summary['reserved'])}, allocated {_gib(summary['allocated'])}"
                  f" ({summary['fragmentation']:.0%} of reserved not allocated)\n")
        for name, size in sorted(summary["by_category"].items(), key=lambda kv: -kv[1]):
            out.write(f"    {size / GIB:8.2f} GiB  {name}\n")
