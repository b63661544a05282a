"""`guard estimate` for people: one row per class of identical ranks, the verdict, the assumptions, --explain."""

from __future__ import annotations

from typing import TextIO

from guard.memory import overheads, save_host
from guard.memory.estimate import Estimate, StageEstimate
from guard.units import GIB, MIB, gib

COLUMNS = (("params", "params"), ("grads", "grads"), ("optimizer", "optim"), ("activations", "acts"),
           ("embedding_activations", "emb"), ("logits", "logits"), ("buffers", "buffers"),
           ("transient", "transient"), ("runtime", "runtime"))
# a column for each model or engine a preference or RL trainer adds, where the estimate has one
EXTRA_COLUMNS = (("reference", "ref model"), ("vllm_engine", "vLLM"), ("generation", "gen KV"), ("teacher", "teacher"),
                 ("cuda_graph_buffers", "graph bufs"))


def columns(est: Estimate) -> tuple[tuple[str, str], ...]:
    return COLUMNS + tuple(c for c in EXTRA_COLUMNS if any(c[0] in st.components for st in est.stages))


def _classes(est: Estimate) -> list[list[StageEstimate]]:
    """Consecutive pipeline stages that predict the same bytes share a row."""
    groups: list[list[StageEstimate]] = []
    for st in est.stages:
        if groups and groups[-1][-1].components == st.components and groups[-1][-1].layers == st.layers:
            groups[-1].append(st)
        else:
            groups.append([st])
    return groups


def rows(est: Estimate) -> list[list[str]]:
    out = []
    for group in _classes(est):
        first, last = group[0], group[-1]
        lo, hi = est.stage_ranks(first.pp_rank).start, est.stage_ranks(last.pp_rank).stop - 1
        ranks = str(lo) if lo == hi else f"{lo}-{hi}"
        pp = str(first.pp_rank) if first is last else f"{first.pp_rank}-{last.pp_rank}"
        row = [ranks, pp, str(first.layers), f"{first.inflight:g}"]
        row += [gib(first.components[key]) for key, _ in columns(est)]
        row.append(gib(first.peak_bytes))
        row.append(f"{100 * first.peak_bytes / est.capacity:.0f}%" if est.capacity else "-")
        out.append(row)
    return out


def header(est: Estimate) -> list[str]:
    return ["ranks", "pp", "layers", "in-flight"] + [label for _, label in columns(est)] + ["peak GiB", "of GPU"]


def verdict(est: Estimate) -> str:
    peak = est.peak_stage
    where = f"rank {est.stage_ranks(peak.pp_rank).start} (pipeline stage {peak.pp_rank}, {peak.phase})"
    if est.refusals:
        first = est.refusals[0]
        more = f" (and {len(est.refusals) - 1} more: guard check lists them)" if len(est.refusals) > 1 else ""
        return (f"WILL NOT START: {first.code} at {first.path}:{first.line}:{first.col}: {first.message}{more}; "
                f"as written, its peak would be {gib(peak.peak_bytes)} GiB on {where}")
    if est.capacity is None:
        return f"peak {gib(peak.peak_bytes)} GiB on {where}; no GPU given (--gpu NAME or --gpu-memory SIZE)"
    margin = est.capacity - peak.peak_bytes
    word = {"fits": "FITS", "may not fit": "MAY NOT FIT", "does not fit": "DOES NOT FIT"}[est.verdict]
    name = "a GPU" if est.gpu.name == "custom" else est.gpu.name
    return (f"{word} on {name} ({gib(est.capacity)} GiB usable): peak {gib(peak.peak_bytes)} GiB on {where}, "
            f"margin {margin / GIB:+.2f} GiB" + _band(est))


def _band(est: Estimate) -> str:
    """The peak stage's stated margin, and what makes an unbounded one unbounded."""
    m = est.peak_stage.margin
    if m is None:
        return ""
    if m.upper is None:
        unbounded = [what for what, bound in m.added if bound is None]
        return (f"; between {gib(m.lower)} GiB and an unbounded upper ({unbounded[0]}"
                f"{f' and {len(unbounded) - 1} more' if len(unbounded) > 1 else ''})")
    return f"; between {gib(m.lower)} and {gib(m.upper)} GiB"


def _plain_table(head: list[str], body: list[list[str]], out: TextIO) -> None:
    widths = [max(len(r[i]) for r in [head] + body) for i in range(len(head))]
    for r in [head] + body:
        out.write("  ".join(cell.rjust(w) for cell, w in zip(r, widths)).rstrip() + "\n")


def write(est: Estimate, out: TextIO, explain: bool = False, color: bool = False) -> None:
    s = est.setup
    out.write(f"model: {s.arch.name}  {est.param_count / 1e9:.2f}B parameters  vocab {s.vocab:,}"
              f"{' (padded)' if s.vocab != s.arch.vocab else ''}\n")
    lay = s.layout
    sp = f" x SP {lay.ulysses}" if lay.ulysses != 1 else ""
    layout = f"world {lay.world} = TP {lay.tp} x PP {lay.pp} x CP {lay.cp}{sp} x DP {lay.dp}"
    if lay.vpp > 1:
        layout += f", VPP {lay.vpp}"
    if s.arch.is_moe:
        layout += f", EP {lay.ep}, expert-TP {lay.expert_tp}"
    states = ("torch DDP, no ZeRO" if s.hf_ddp else f"ZeRO-{s.zero_stage}" if s.framework != "megatron" else
              "distributed optimizer" if s.distributed_optimizer else "replicated optimizer")
    out.write(f"layout: {layout}; {s.framework}, {s.params_dtype}, {states}\n")
    if s.adapter:
        a = s.adapter
        quant = f", base {a.quant_bits}-bit" + (" (double quant)" if a.double_quant and a.quant_bits == 4 else "") \
            if a.quant_bits else ""
        out.write(f"adapter: {a.method} r={a.rank} alpha={a.alpha:g} dropout={a.dropout:g} on {','.join(a.targets)}"
                  f"{quant}; {est.trainable_param_count:,} trainable of {est.param_count:,} "
                  f"({100 * est.trainable_param_count / est.param_count:.4f}%)\n")
    out.write(f"batch: seq {s.seq_length}, micro batch {s.micro_batch}, {s.num_microbatches} microbatches/step; "
              f"recompute {s.recompute}; attention {s.attention}"
              f"{', sequence parallel' if lay.sequence_parallel else ''}\n")
    out.write("sizes in GiB per rank\n")
    if color:
        _rich_table(est, out)
    else:
        _plain_table(header(est), rows(est), out)
    out.write(verdict(est) + "\n")
    host = est.host_bytes_per_node()
    if host:
        out.write(f"host RAM for offloaded states: {gib(host)} GiB per node ({lay.gpus_per_node} GPUs per node)\n")
    saved = save_host.save_host(s)
    if saved is not None and saved.rank0:
        out.write(f"host RAM at each checkpoint save: {gib(est.host_bytes_at_save())} GiB on rank 0's node "
                  f"({saved.what})\n")
    bounds = dict(est.peak_stage.margin.added) if est.peak_stage.margin else {}
    for feature, where in s.unmodelled:
        bound = bounds.get(feature)
        told = "not bounded" if bound is None else f"at most {gib(bound)} GiB more, in the upper bound"
        out.write(f"warning: {feature} ({where}) is not modelled: {told}\n")
    for note in s.notes:
        out.write(f"note: {note}\n")
    if explain:
        _explain(est, out)
    else:
        share = s.step.moe_imbalance
        routing = "balanced MoE routing" if share == 1.0 else f"the busiest EP rank's experts at {share:g}x their share"
        out.write(f"assumptions: {routing}; runtime = CUDA context + NCCL + 5% allocator overhead "
                  "(--explain prints every term with its formula and source)\n")


def _rich_table(est: Estimate, out: TextIO) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(show_edge=False, pad_edge=False)
    for i, name in enumerate(header(est)):
        table.add_column(name, justify="right", style="bold" if name == "peak GiB" else None)
    for r in rows(est):
        table.add_row(*r)
    Console(file=out, force_terminal=True, width=160).print(table)


def _explain(est: Estimate, out: TextIO) -> None:
    s = est.setup
    for st in est.stages:
        ranks = est.stage_ranks(st.pp_rank)
        shown = str(ranks.start) if len(ranks) == 1 else f"{ranks.start}-{ranks.stop - 1}"
        out.write(f"\n== pipeline stage {st.pp_rank} (ranks {shown}): {st.layers} layers in chunks "
                  f"{st.chunk_layers} ==\n")
        out.write("parameters on one rank, by bucket:\n")
        for (bucket, item), count in sorted(st.inventory.items.items()):
            out.write(f"  {bucket:14} {item:48} {count:>16,}\n")
        for line in st.explain:
            out.write(f"  {line}\n")
        out.write(f"activations: {st.inflight:g} (virtual) microbatches in flight at the peak "
                  f"({'DeepSpeed TrainSchedule' if s.ds_pipeline else 'schedule simulation'}); one layer, one "
                  f"microbatch{' (selective recompute applied)' if s.recompute == 'selective' else ''}:\n")
        for name, value in st.terms["layer activations (one microbatch)"].items():
            out.write(f"  {name:48} {value / MIB:12.2f} MiB\n")
        if s.recompute == "full":
            out.write(f"  full recompute ({s.recompute_method}, {s.recompute_num_layers} layers per checkpoint): "
                      f"only each group's input is stashed\n")
        for section in ("transient", "buffers", "cuda graph buffers", "gradient reduction", "optimizer step",
                        "runtime"):
            parts = {k: v for k, v in st.terms.get(section, {}).items() if v}
            if parts:
                out.write(f"{section}:\n")
                for name, value in parts.items():
                    out.write(f"  {name:48} {value / MIB:12.2f} MiB\n")
        shown = ", ".join(f"{name} {gib(value)} GiB" for name, value in st.phases.items())
        out.write(f"phases (allocated): {shown} -> peak in {st.phase}\n")
    out.write("\nruntime defaults (override with --set NAME=VALUE):\n")
    for name, default in {**overheads.RUNTIME_DEFAULTS, **overheads.BUFFER_DEFAULTS}.items():
        value = s.overrides.get(name, default.value)
        shown = f"{value / MIB:.0f} MiB" if default.unit == "bytes" else f"{value:g}"
        out.write(f"  {name} = {shown}: {default.source}\n")
