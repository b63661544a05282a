"""A training job as the memory model sees it: layout, batch, precision, optimizer, recompute, kernels."""

from __future__ import annotations

from dataclasses import dataclass, field

from guard.memory.architecture import Architecture

DTYPE_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2, "fp8": 1, "uint8": 1}


@dataclass
class Chunk:
    """One model chunk on one pipeline rank (a virtual stage): its layers and its edge modules."""

    layers: tuple[int, ...]  # global layer indices
    embedding: bool = False
    loss: bool = False
    virtual_stage: int = 0


@dataclass
class Origin:
    """Where a setting came from, to locate diagnostics (a flag, a config key, a CLI option, a default)."""

    label: str
    path: str | None = None
    line: int = 1
    col: int = 1
    pointer: str | None = None


@dataclass
class Setup:
    arch: Architecture
    framework: str  # "megatron", "deepspeed" (HF model under DeepSpeed), "megatron-deepspeed"
    world_size: int
    tp: int = 1
    pp: int = 1
    vpp: int = 1
    cp: int = 1
    ep: int = 1
    etp: int = 1
    sequence_parallel: bool = False
    gpus_per_node: int = 8
    seq_length: int = 2048
    micro_batch: int = 1
    num_microbatches: int = 1
    microbatch_group: int | None = None  # interleaved schedule's G (default pp)
    padded_vocab: int | None = None
    chunks: list[list[Chunk]] = field(default_factory=list)  # [pp_rank][chunk]
    # precision and optimizer
    params_dtype: str = "bf16"
    grads_dtype: str = "fp32"  # the gradient buffer (Megatron main_grad / DeepSpeed reduce dtype)
    optimizer: str = "adam"  # adam (also AdamW) or sgd
    sgd_momentum: bool = True
    optimizer_impl: str = "fused"  # fused (Apex/TE/DeepSpeed FusedAdam) | torch (foreach: temporaries at step)
    main_params_dtype: str = "fp32"
    exp_avg_dtype: str = "fp32"
    exp_avg_sq_dtype: str = "fp32"
    distributed_optimizer: bool = False
    zero_stage: int = 0  # DeepSpeed only
    offload_optimizer: str = "none"  # none | cpu | nvme
    offload_param: str = "none"
    zero_buckets: dict[str, float] = field(default_factory=dict)
    param_groups: list[list[int]] | None = None  # numel of each tensor per optimizer group (ZeRO's flat layout)
    ds_pipeline: bool = False  # DeepSpeed's pipeline engine schedule
    # activations
    recompute: str = "none"  # none | selective | full
    recompute_method: str = "uniform"
    recompute_num_layers: int = 1
    recompute_modules: tuple[str, ...] = ("core_attn",)
    distribute_saved_activations: bool = False
    attention: str = "flash"  # flash (flash/fused/cuDNN: no s^2 term) | unfused
    eager: bool = False  # eager PyTorch ops (transformers models): unfused norms, rotary, SwiGLU
    mask_bytes: int = 1  # dropout masks: CUDA's fused dropout keeps 1 byte; the CPU path keeps the activation dtype
    softmax_bytes: int | None = None  # unfused attention probabilities (None: the activation dtype; fp32 on CPU)
    # norms: fused (TE, Apex, torch on CUDA: the input and fp32 statistics) | torch_cpu (torch's CPU kernels:
    # LayerNorm keeps its statistics in the activation dtype, RMSNorm runs composite and keeps fp32 copies)
    norm_kernel: str = "fused"
    rope_kernel: str = "fused"  # fused (no per-layer copies) | unfused (cos and sin cast copies for Q and for K)
    fused_cross_entropy: bool = False
    checkpoint_partition: bool = False  # DeepSpeed activation checkpointing: partition_activations
    checkpoint_cpu: bool = False  # DeepSpeed cpu_checkpointing
    overlap_param_gather: bool = False
    overrides: dict[str, float] = field(default_factory=dict)  # runtime/buffer terms set by the user (--set)
    origins: dict[str, Origin] = field(default_factory=dict)
    unmodelled: list[tuple[str, str]] = field(default_factory=list)  # (feature, setting that asks for it)
    notes: list[str] = field(default_factory=list)

    @property
    def dp(self) -> int:
        return self.world_size // (self.tp * self.pp * self.cp)

    @property
    def expert_dp(self) -> int:
        """Megatron's expert data-parallel group: the ranks of one expert shard across DP x CP."""
        return max(1, self.world_size // (self.etp * self.ep * self.pp))

    @property
    def vocab(self) -> int:
        return self.padded_vocab or self.arch.vocab

    def origin(self, key: str) -> Origin:
        return self.origins.get(key) or Origin("default")


def even_chunks(num_layers: int, pp: int, vpp: int = 1, per_stage: list[int] | None = None) -> list[list[Chunk]]:
    """Layers to (pp rank, chunk): virtual stage k = chunk * pp + rank holds a contiguous slice."""
    if per_stage is None:
        stages = pp * vpp
        per_stage = [num_layers // stages] * stages
    chunks: list[list[Chunk]] = [[] for _ in range(pp)]
    start = 0
    total = len(per_stage)
    for vstage, count in enumerate(per_stage):
        chunk = Chunk(tuple(range(start, start + count)), embedding=vstage == 0, loss=vstage == total - 1,
                      virtual_stage=vstage)
        chunks[vstage % pp].append(chunk)
        start += count
    return chunks
