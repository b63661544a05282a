"""`guard plan` for a terminal: the ranked table, the user's own layout, and the change to make."""

from __future__ import annotations

from typing import TextIO

from guard.plan.assumptions import ASSUMPTIONS
from guard.plan.search import Candidate, Plan
from guard.report.plan_json import metrics
from guard.units import GIB

HEADER = (f"{'#':>3} {'TP':>3} {'PP':>3} {'VPP':>3} {'CP':>3} {'EP':>3} {'DP':>5} {'MBS':>4} {'SP':>3} "
          f"{'recompute':<14} {'shard':<11} {'step s':>8} {'tok/s/GPU':>10} {'MFU':>6} {'bubble':>7} "
          f"{'peak GiB':>9} {'(stage)':<8} dominating")


def _shard(cand: Candidate) -> str:
    k = cand.knobs
    if k.zero_stage:
        off = "+off" if k.offload_optimizer != "none" else ""
        return f"zero{k.zero_stage}{off}{'+p' if k.offload_param != 'none' else ''}"
    return "distopt" if k.distributed_optimizer else "-"


def _row(result: Plan, cand: Candidate, label: str) -> str:
    lay, k, m = cand.job.layout, cand.knobs, metrics(result, cand)
    recompute = k.recompute if k.recompute != "full" else (
        "full" if k.recompute_method == "uniform" else f"full/{k.recompute_layers}")
    stage = f"({m['peak_pp_rank']})" if m["peak_pp_rank"] is not None else ""
    head = (f"{label:>3} {lay.tp:>3} {lay.pp:>3} {lay.vpp:>3} {lay.cp:>3} {lay.ep:>3} {lay.dp or 0:>5} "
            f"{k.micro_batch:>4} {'on' if lay.sequence_parallel else '-':>3} {recompute:<14} {_shard(cand):<11} ")
    if m["step_time_s"] is None:
        return head + f"{'-':>8} {'-':>10} {'-':>6} {'-':>7} {'-':>9}"
    return head + (f"{m['step_time_s']:>8.3f} {m['tokens_per_s_per_gpu']:>10,.0f} {m['mfu']:>6.1%} "
                   f"{m['bubble']:>7.1%} {m['peak_bytes'] / GIB:>9.1f} {stage:<8} {m['dominant']}")


def write(result: Plan, out: TextIO, *, explain: bool = False) -> None:
    job = result.current.job
    out.write(f"guard plan: {job.arch.name or 'model'} on {job.layout.world} x {result.hardware.name} "
              f"({result.capacity / GIB:.1f} GiB each after headroom), global batch {job.global_batch}, "
              f"sequence {job.seq_length}\n")
    out.write(f"tried {result.searched} settings, {len(result.feasible)} fit; "
              f"{'the fastest' if result.candidates else 'none fits'}:\n\n{HEADER}\n")
    for n, cand in enumerate(result.candidates, 1):
        out.write(_row(result, cand, str(n)) + "\n")
    current = result.current
    out.write(_row(result, current, "you") + "\n")
    out.write(f"\nyour layout: {current.reason or 'fits'}\n")
    _engine_share(out, result)
    if job.arch.num_experts:
        share = job.step.moe_imbalance
        out.write("MoE routing priced " + ("balanced (stated: --moe-imbalance X prices a busiest expert-parallel rank "
                                           "at X times its share)\n" if share == 1.0 else
                                           f"with the busiest expert-parallel rank at {share:g}x its share "
                                           f"(--moe-imbalance)\n"))
    if result.candidates:
        if result.close_calls:
            out.write("close call: the order of the first is a guess where a kernel table is 15 % off:\n")
            out.writelines(f"  {line}\n" for line in result.close_calls)
        else:
            out.write("the first holds its place with any one kind of kernel speed 15 % slower or faster\n")
    if result.measured:
        out.write("\nyour layout, measured against predicted (seconds per iteration):\n")
        for row in result.measured:
            predicted = "-" if row["predicted_s"] is None else f"{row['predicted_s']:.4f}"
            ratio = "" if row["predicted_s"] is None or not row["measured_s"] else \
                f"  {row['predicted_s'] / row['measured_s'] - 1:+.0%}"
            out.write(f"  {row['what']:28} measured {row['measured_s']:.4f}  guard {predicted}{ratio}\n")
    for n, cand in enumerate(result.candidates, 1):
        _changes(out, n, cand)
        if explain:
            _terms(out, cand)
    if explain and current.time:
        out.write("\nyour layout's step:\n")
        _terms(out, current)
        out.write("\nassumptions:\n")
        for line in ASSUMPTIONS:
            out.write(f"  - {line}\n")
        out.write("\nconstants:\n")
        for line in result.hardware.sources():
            out.write(f"  {line}\n")
    reasons: dict[str, list[Candidate]] = {}
    for cand, why in result.rejected:
        reasons.setdefault(why, []).append(cand)
    for why, cands in reasons.items():
        lay = cands[0].job.layout
        out.write(f"\nleft out after the full check, {len(cands)} faster layout{'s' if len(cands) > 1 else ''} "
                  f"(the first: TP {lay.tp} PP {lay.pp} VPP {lay.vpp} CP {lay.cp}, micro-batch "
                  f"{cands[0].knobs.micro_batch}):\n  {why}\n")


def _engine_share(out: TextIO, result: Plan) -> None:
    """A colocated vLLM whose share the planner lowered (plan/engine_share.py): by how much, for each shown."""
    written = result.current.job.post_training
    if written is None or written.vllm_share is None:
        return
    lowered = [(n, c.job.post_training.vllm_share) for n, c in enumerate(result.candidates, 1)
               if c.job.post_training.vllm_share != written.vllm_share]
    if lowered:
        out.write(f"colocated vLLM: no layout fits beside vllm_gpu_memory_utilization {written.vllm_share:g}; "
                  + ", ".join(f"#{n} at {share:g}" for n, share in lowered)
                  + " (the engine's weights and KV cache must fit in it; or vllm_enable_sleep_mode, or vllm_mode "
                    "server on other GPUs)\n")


def _changes(out: TextIO, n: int, cand: Candidate) -> None:
    written = cand.changes
    out.write(f"\n#{n}: ")
    if not written or (not written.edits and not written.refused):
        out.write("no change: this is your layout\n")
        return
    out.write("change\n")
    out.write(written.diff)
    if written.flags:
        out.write("  or append to the Megatron command: " + " ".join(written.flags) + "\n")
    for refusal in written.refused:
        out.write(f"  not written: {refusal.describe()}\n")


def _terms(out: TextIO, cand: Candidate) -> None:
    total = cand.time.seconds
    out.write("  step time by term:\n")
    for name, seconds in sorted(cand.time.terms.items(), key=lambda kv: -kv[1]):
        out.write(f"    {seconds:9.4f} s  {seconds / total:6.1%}  {name}\n")
    if cand.estimate:
        out.write("  peak memory by pipeline stage (GiB):\n    " + "  ".join(
            f"{st.pp_rank}: {st.peak_bytes / GIB:.1f}" for st in cand.estimate.stages) + "\n")
