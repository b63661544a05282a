"""Megatron's Muon (--optimizer muon): which tensors it orthogonalises, their states, and the layer-wise
distributed optimizer's assignment of whole tensors to data-parallel ranks.

megatron/core/optimizer/muon.py get_megatron_muon_optimizer (megatron-core 0.16.1): every 2-D parameter
that is not the word embedding or the output layer (`is_embedding_or_output_parameter`; the learned position
embedding is 2-D and unflagged, so Muon takes it) gets one momentum buffer (zeros_like the fp32 master);
the rest go to Adam (two moments). With bf16 both sit behind Float16OptimizerWithFloat16Params (fp32
masters). With the distributed optimizer (or the deprecated dist_muon), megatron/training/arguments.py
switches to LayerWiseDistributedOptimizer (optimizer/layer_wise_optimizer.py shard_params): all tensors
sorted by numel, dealt to the DP x CP ranks (experts: the expert data-parallel ranks) in ping-pong order
0..n-1, n-1..0, and masters created for the local tensors only.
"""

from __future__ import annotations

from guard.job.architecture import Architecture
from guard.job.stages import Chunk
from guard.job.training_job import TrainingJob

Tensor = tuple[int, bool, bool]  # (numel, Muon's (else Adam's), expert-parallel)


def _norm(arch: Architecture, width: int) -> list[Tensor]:
    return [(width, False, False)] * (2 if arch.norm == "layernorm" else 1)


def _mlp(arch: Architecture, ffn: int, split: int, expert: bool) -> list[Tensor]:
    glu = 2 if arch.gated_mlp else 1
    out = [(arch.hidden * ffn * glu // split, True, expert), (ffn * arch.hidden // split, True, expert)]
    if arch.linear_bias:
        out += [(ffn * glu // split, False, expert), (arch.hidden, False, expert)]
    return out


def layer_tensors(arch: Architecture, index: int, tp: int, ep: int, etp: int) -> list[Tensor]:
    """One transformer layer's parameter tensors on one rank, as megatron-core registers them."""
    h = arch.hidden
    qkv_out = arch.query_size + 2 * arch.kv_size
    out: list[Tensor] = [(h * qkv_out // tp, True, False), (arch.query_size * h // tp, True, False)]
    if arch.linear_bias or arch.qkv_bias:
        out.append((qkv_out // tp, False, False))
    if arch.linear_bias:
        out.append((h, False, False))
    for _ in range(arch.norms_per_layer):
        out += _norm(arch, h)
    if arch.qk_norm:
        out += _norm(arch, arch.kv_channels) * 2
    if not arch.is_moe_layer(index):
        return out + _mlp(arch, arch.ffn_hidden, tp, False)
    experts = arch.num_experts or 0
    out.append((experts * h, True, False))  # the router's [E, h] weight: 2-D, so Muon's
    if arch.linear_bias:
        out.append((experts, False, False))
    for _ in range(experts // ep):
        out += _mlp(arch, arch.moe_ffn_hidden or arch.ffn_hidden, etp, True)
    if arch.shared_expert_ffn:
        out += _mlp(arch, arch.shared_expert_ffn, tp, False)
    return out


def stage_tensors(setup: TrainingJob, chunks: list[Chunk]) -> list[Tensor]:
    """A pipeline rank's tensors: Muon's first, then Adam's (the chained optimizers' order), each in model order."""
    arch, lay = setup.arch, setup.layout
    h, vocab_part = arch.hidden, setup.vocab * arch.hidden // lay.tp
    out: list[Tensor] = []
    holds_embedding = any(c.embedding for c in chunks)
    for chunk in chunks:
        if chunk.embedding:
            out.append((vocab_part, False, False))
            if arch.position_embedding == "learned_absolute":
                out.append((arch.max_positions * h, True, False))
        for i in chunk.layers:
            out += layer_tensors(arch, i, lay.tp, lay.ep, lay.expert_tp)
        out += _mtp_tensors(setup, chunk)
        if chunk.loss:
            out += _norm(arch, h)
            if not arch.tied_embeddings or not holds_embedding:
                out.append((vocab_part, False, False))
    return [t for t in out if t[1]] + [t for t in out if not t[1]]


def _mtp_tensors(setup: TrainingJob, chunk: Chunk) -> list[Tensor]:
    """The MTP block params.py prices (enorm, hnorm, final norm, eh_proj, a layer of the last layer's kind) and
    the embedding GPTModel builds on an MTP stage without one (the word embeddings flagged, positions not)."""
    arch, lay = setup.arch, setup.layout
    n, out = setup.mtp_in(chunk), []
    for _ in range(n):
        out += _norm(arch, arch.hidden) * 3 + [(2 * arch.hidden * arch.hidden // lay.tp, True, False)]
        out += layer_tensors(arch, arch.num_layers - 1, lay.tp, lay.ep, lay.expert_tp)
    if n and not chunk.embedding:
        out.append((setup.vocab * arch.hidden // lay.tp, False, False))
        if arch.position_embedding == "learned_absolute":
            out.append((arch.max_positions * arch.hidden, True, False))
    return out


def state_bytes(tensor: Tensor, master: int) -> int:
    numel, orthogonalised, _ = tensor
    return numel * (master + (4 if orthogonalised else 8))


def layer_wise_share(tensors: list[Tensor], ranks: int) -> list[list[Tensor]]:
    """shard_params: the tensors each of `ranks` keeps, dealt by ascending numel in ping-pong order."""
    loop = list(range(ranks)) + list(range(ranks))[::-1]
    kept: list[list[Tensor]] = [[] for _ in range(ranks)]
    for i, tensor in enumerate(sorted(tensors, key=lambda t: t[0])):
        kept[loop[i % len(loop)]].append(tensor)
    return kept


def optimizer_bytes(setup: TrainingJob, chunks: list[Chunk], master: int, dp_rank: int | None) -> int:
    """Muon's and Adam's states on one rank (dp_rank: its DP x CP index; None: the rank that keeps the most).
    Experts are dealt over the expert data-parallel group, the rest over DP x CP; a group of one keeps all."""
    tensors = stage_tensors(setup, chunks)
    if not setup.distributed_optimizer:
        return sum(state_bytes(t, master) for t in tensors)
    dense_ranks, expert_ranks = max(1, setup.dp * setup.layout.cp), max(1, setup.layout.expert_dp or 1)
    dense = [sum(state_bytes(t, master) for t in share)
             for share in layer_wise_share([t for t in tensors if not t[2]], dense_ranks)]
    expert = [sum(state_bytes(t, master) for t in share)
              for share in layer_wise_share([t for t in tensors if t[2]], expert_ranks)]
    if dp_rank is None:
        return max(dense) + max(expert)
    # the last global rank is last in both groups; ranks map onto the expert group in order
    return dense[dp_rank] + expert[dp_rank * expert_ranks // dense_ranks]
