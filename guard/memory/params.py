"""Parameters held by one pipeline rank, by sharding bucket (TP-sharded, TP-replicated, expert, embeddings)."""

from __future__ import annotations

from dataclasses import dataclass, field

from guard.job.architecture import Architecture
from guard.job.stages import Chunk
from guard.job.training_job import TrainingJob, new_job

# Buckets say how a parameter is divided across ranks: by TP, not at all, or by EP x expert-TP.
SHARDED, REPLICATED, EXPERT = "tp_sharded", "tp_replicated", "expert"


@dataclass
class Inventory:
    """Parameter counts on one rank: (bucket, item) -> count, kept per item for --explain."""

    items: dict[tuple[str, str], int] = field(default_factory=dict)

    def add(self, bucket: str, item: str, count: float) -> None:
        if count:
            key = (bucket, item)
            self.items[key] = self.items.get(key, 0) + int(count)

    def bucket(self, name: str) -> int:
        return sum(n for (b, _), n in self.items.items() if b == name)

    def merge(self, other: "Inventory", times: int = 1) -> None:
        """Add `other`'s counts `times` over (identical layers are priced once)."""
        for key, count in other.items.items():
            self.items[key] = self.items.get(key, 0) + count * times

    @property
    def total(self) -> int:
        return sum(self.items.values())

    @property
    def dense(self) -> int:
        """Parameters whose optimizer shards over the DP x CP group (everything but experts)."""
        return self.total - self.bucket(EXPERT)


def norm_size(arch: Architecture, width: int) -> int:
    return width * (2 if arch.norm == "layernorm" else 1)  # LayerNorm has a bias, RMSNorm has none


def add_layer(inv: Inventory, arch: Architecture, index: int, tp: int, ep: int, etp: int) -> None:
    """One transformer layer on one TP rank, as megatron-core builds it."""
    h, q, kv = arch.hidden, arch.query_size, arch.kv_size
    qkv_out = q + 2 * kv
    inv.add(SHARDED, "attention QKV weight", h * qkv_out / tp)
    if arch.linear_bias or arch.qkv_bias:
        inv.add(SHARDED, "attention QKV bias", qkv_out / tp)
    inv.add(SHARDED, "attention output weight", q * h / tp)
    if arch.linear_bias:
        inv.add(REPLICATED, "row-parallel biases (attention output, fc2)", h)
    inv.add(REPLICATED, "layer norms", arch.norms_per_layer * norm_size(arch, h))
    if arch.qk_norm:
        inv.add(REPLICATED, "q/k norms", 2 * norm_size(arch, arch.kv_channels))
    glu = 2 if arch.gated_mlp else 1
    if not arch.is_moe_layer(index):
        _mlp(inv, arch, arch.ffn_hidden, tp, "MLP", SHARDED)
        return
    e = arch.num_experts or 0
    ffn = arch.moe_ffn_hidden or arch.ffn_hidden
    inv.add(REPLICATED, "MoE router", h * e + (e if arch.linear_bias else 0))  # with --add-bias-linear it has a bias
    per_expert = h * ffn * glu + ffn * h + ((ffn * glu + h) if arch.linear_bias else 0)
    inv.add(EXPERT, "routed experts", per_expert * e / (ep * etp))
    if arch.shared_expert_ffn:
        _mlp(inv, arch, arch.shared_expert_ffn, tp, "shared expert", SHARDED)


def _mlp(inv: Inventory, arch: Architecture, ffn: int, tp: int, label: str, bucket: str) -> None:
    glu = 2 if arch.gated_mlp else 1
    inv.add(bucket, f"{label} fc1 weight", arch.hidden * ffn * glu / tp)
    inv.add(bucket, f"{label} fc2 weight", ffn * arch.hidden / tp)
    if arch.linear_bias:
        inv.add(bucket, f"{label} fc1 bias", ffn * glu / tp)
        if label != "MLP":
            inv.add(REPLICATED, f"{label} fc2 bias", arch.hidden)
        else:
            inv.add(REPLICATED, "row-parallel biases (attention output, fc2)", arch.hidden)


_INVENTORIES: dict[tuple, Inventory] = {}  # the planner prices thousands of settings sharing a few stages


def rank_inventory(setup: TrainingJob, chunks: list[Chunk]) -> Inventory:
    """Everything one rank of a pipeline stage holds, over all its model chunks (shared: callers only read it)."""
    lay = setup.layout
    key = (setup.arch, lay.tp, lay.ep, lay.expert_tp, setup.vocab, setup.mtp_layers,
           tuple(setup.mtp_in(c) for c in chunks), tuple((c.layers, c.embedding, c.loss) for c in chunks))
    try:
        found = _INVENTORIES.get(key)
    except TypeError:  # an architecture built with an unhashable field: priced without the cache
        return _inventory(setup, chunks)
    if found is None:
        if len(_INVENTORIES) > 4096:
            _INVENTORIES.clear()
        found = _INVENTORIES[key] = _inventory(setup, chunks)
    return found


def _inventory(setup: TrainingJob, chunks: list[Chunk]) -> Inventory:
    arch, tp = setup.arch, setup.layout.tp
    inv = Inventory()
    vocab = setup.vocab
    first: dict[bool, int] = {}  # a layer's parameters depend only on whether it is MoE: price one of each
    count: dict[bool, int] = {}
    for index in (i for chunk in chunks for i in chunk.layers):
        kind = arch.is_moe_layer(index)
        first.setdefault(kind, index)
        count[kind] = count.get(kind, 0) + 1
    for kind, n in count.items():
        layer = Inventory()
        add_layer(layer, arch, first[kind], tp, setup.layout.ep, setup.layout.expert_tp)
        inv.merge(layer, n)
    for chunk in chunks:
        if chunk.embedding:
            inv.add(SHARDED, "word embeddings", vocab * arch.hidden / tp)
            if arch.position_embedding == "learned_absolute":
                inv.add(REPLICATED, "position embeddings", arch.max_positions * arch.hidden)
        if mtp := setup.mtp_in(chunk):
            _add_mtp(inv, setup, chunk, mtp)
        if chunk.loss:
            inv.add(REPLICATED, "final norm", norm_size(arch, arch.hidden))
            holds_embedding = any(c.embedding for c in chunks)
            if not arch.tied_embeddings:
                inv.add(SHARDED, "output layer (LM head)", vocab * arch.hidden / tp)
            elif not holds_embedding:
                # tied weights with PP > 1: the last stage keeps its own copy, synchronised by an all-reduce
                inv.add(SHARDED, "output layer (tied copy of the word embeddings)", vocab * arch.hidden / tp)
    return inv


def model_param_count(arch: Architecture) -> int:
    """The whole model once (no padding, no TP/PP copies): the number people quote."""
    setup = new_job(arch=arch, framework="count", world_size=1)
    chunk = Chunk(tuple(range(arch.num_layers)), embedding=True, loss=True)
    return rank_inventory(setup, [chunk]).total


def padding_params(setup: TrainingJob, inv: Inventory) -> int:
    """How many of a rank's embedding parameters are vocabulary padding."""
    pad = (setup.vocab - setup.arch.vocab) * setup.arch.hidden / setup.layout.tp
    tables = sum(1 for (_, item) in inv.items if item.startswith(("word embeddings", "output layer")))
    return int(pad * tables)


def _add_mtp(inv: Inventory, setup: TrainingJob, chunk: Chunk, n: int) -> None:
    """Multi-token prediction (transformer/multi_token_prediction.py): per layer enorm, hnorm and a final
    norm, eh_proj (2h -> h, column-parallel) and one transformer layer of the last decoder layer's kind;
    GPTModel builds its own embedding on an MTP stage that has none (`pre_process or mtp_process`)."""
    arch, tp = setup.arch, setup.layout.tp
    for _ in range(n):
        inv.add(REPLICATED, "MTP norms", 3 * norm_size(arch, arch.hidden))
        inv.add(SHARDED, "MTP projection (eh_proj)", 2 * arch.hidden * arch.hidden / tp)
        layer = Inventory()
        add_layer(layer, arch, arch.num_layers - 1, tp, setup.layout.ep, setup.layout.expert_tp)
        inv.merge(layer)
    if not chunk.embedding:
        inv.add(SHARDED, "word embeddings (MTP stage copy)", setup.vocab * arch.hidden / tp)
        if arch.position_embedding == "learned_absolute":
            inv.add(REPLICATED, "position embeddings (MTP stage copy)", arch.max_positions * arch.hidden)
