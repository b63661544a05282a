"""The --explain lines of one stage's estimate: the stash, logits and padding formulas with their numbers."""

from __future__ import annotations

from guard.job.training_job import TrainingJob
from guard.memory.params import Inventory, padding_params
from guard.units import GIB, MIB


def stage_explain(setup: TrainingJob, inv: Inventory, chunks, sizes: list[float], inflight: float, stash: float,
             logits_stored: float, logits_transient: float) -> list[str]:
    """The stash, logits and padding formulas with their numbers, for --explain."""
    mib = MIB
    all_layers = [i for c in chunks for i in c.layers]
    explain: list[str] = []
    if len(chunks) == 1 and all_layers:
        explain.append(f"activations = {inflight} microbatches x {sizes[0] / mib:,.1f} MiB (the stage's "
                       f"{len(all_layers)} layers, one microbatch) = {stash / GIB:.2f} GiB")
    elif all_layers:
        explain.append(f"activations = {inflight} virtual microbatches over chunks of "
                       f"{[round(x / mib, 1) for x in sizes]} MiB (interleaved order simulated) = "
                       f"{stash / GIB:.2f} GiB")
    if logits_stored:
        kept = "16-bit, Transformer Engine fused loss" if setup.fused_cross_entropy else "fp32 softmax for backward"
        explain.append(f"logits: s x b x V / t = {setup.seq_length // setup.layout.seq_shards} x {setup.micro_batch} x "
                       f"{setup.vocab} / {setup.layout.tp}; kept {logits_stored / mib:,.1f} MiB ({kept}) "
                       f"+ transient {logits_transient / mib:,.1f} MiB")
    if padding_params(setup, inv):
        explain.append(f"vocabulary padding: {padding_params(setup, inv):,} of the embedding parameters "
                       f"(vocab {setup.arch.vocab:,} padded to {setup.vocab:,})")
    return explain
