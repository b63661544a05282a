"""What `guard diagnose` prints: per event, per rank, and the fixes (text and the JSON contract)."""

from __future__ import annotations

import json
from typing import TextIO

from guard.diagnose.causes import cause
from guard.diagnose.events import Event
from guard.units import GIB


def to_dict(events: list[Event], snapshots: dict | None = None) -> dict:
    rows, ranks, fixes = [], {}, {}
    for event in events:
        o, c = event.oom, cause(event)
        rows.append({"rank": event.rank, "source": event.source, "line": event.line, "phase": event.phase,
                     "kind": o.kind, "device": o.device, "era": o.era or None, "requested_bytes": o.requested,
                     "capacity_bytes": o.total, "free_bytes": o.free, "allocated_bytes": o.allocated,
                     "reserved_unallocated_bytes": o.reserved_unallocated,
                     "other_processes": {str(pid): b for pid, b in o.processes.items()} or None,
                     "cause": c.name, "why": c.why})
        entry = ranks.setdefault(event.rank, {"rank": event.rank, "events": 0, "causes": []})
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


def write_json(report: dict, out: TextIO) -> None:
    json.dump(report, out, indent=2)
    out.write("\n")


def _gib(n) -> str:
    return "?" if n is None else f"{n / GIB:.2f} GiB"


def write_text(report: dict, out: TextIO) -> None:
    events = report["events"]
    ranks = sorted({e["rank"] for e in events if e["rank"] is not None})
    logs = len({e["source"] for e in events})
    out.write(f"guard diagnose: {len(events)} out-of-memory event{'s' if len(events) != 1 else ''} in {logs} "
              f"log{'s' if logs != 1 else ''}" + (f" (ranks {', '.join(map(str, ranks))})" if ranks else "") + "\n")
    for e in events:
        who = f"rank {e['rank']}" if e["rank"] is not None else "rank unknown"
        gpu = f", GPU {e['device']}" if e["device"] is not None else ""
        out.write(f"\n{e['source']}:{e['line']}: {who}{gpu}, {e['phase']}: {e['cause']}: {e['why']}\n")
        if e["kind"] == "cuda-oom":
            out.write(f"  asked {_gib(e['requested_bytes'])}; free {_gib(e['free_bytes'])} of "
                      f"{_gib(e['capacity_bytes'])}; allocated by PyTorch {_gib(e['allocated_bytes'])}; reserved but "
                      f"unallocated {_gib(e['reserved_unallocated_bytes'])}\n")
    located = [r for r in report["ranks"] if "pp_rank" in r]
    if located:
        out.write("\nthe failed ranks in the job:\n")
        for r in located:
            out.write(f"  rank {r['rank']}: TP {r['tp_rank']}, PP {r['pp_rank']}, DP {r['dp_rank']}; guard predicts "
                      f"{_gib(r['predicted_peak_bytes'])} there, most of it {r['dominant']}\n")
    out.write("\nwhat to change:\n")
    for fix in report["suggestions"]:
        ranks = ", ".join("?" if r is None else str(r) for r in fix["ranks"])
        out.write(f"  {fix['cause']} (ranks {ranks}): {fix['fix']}\n")
    for n, fit in enumerate(report.get("layouts_that_fit") or [], 1):
        out.write(f"  layout {n} that fits (guard plan): {fit['changes']}: peak {_gib(fit['peak_bytes'])}, "
                  f"{fit['step_time_s']:.2f} s/step\n")
    for path, summary in (report.get("snapshots") or {}).items():
        out.write(f"\nsnapshot {path}: reserved {_gib(summary['reserved'])}, allocated {_gib(summary['allocated'])}"
                  f" ({summary['fragmentation']:.0%} of reserved not allocated)\n")
        for name, size in sorted(summary["by_category"].items(), key=lambda kv: -kv[1]):
            out.write(f"    {size / GIB:8.2f} GiB  {name}\n")
