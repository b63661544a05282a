"""TrainingJob: the one description of a training job that rules, the memory model and the planner read."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from guard.errors import InputError
from guard.job.adapter import Adapter
from guard.job.architecture import Architecture
from guard.job.cuda_graphs import CudaGraphs
from guard.job.layout import ParallelLayout
from guard.job.origin import Origin
from guard.job.post_training import PostTraining
from guard.job.stages import Chunk, LayoutError
from guard.job.step_settings import StepSettings

DTYPE_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2, "fp8": 1, "uint8": 1}


class IncompleteJob(InputError):
    """The job lacks a value a feature needs (the message names the value and how to give it)."""


@dataclass
class TrainingJob:
    """Pure data. Readers fill it (each value with an Origin in `origins`), features read it.

    `missing` holds what could not be read and why (an unresolved variable, no launcher, no vocabulary):
    the rules judge what is known; the estimate refuses with the first reason (`require`).
    """

    arch: Architecture | None
    framework: str  # "megatron", "deepspeed" (HF model under DeepSpeed), "megatron-deepspeed"
    layout: ParallelLayout = field(default_factory=ParallelLayout)
    # batch
    seq_length: int = 2048
    micro_batch: int = 1
    global_batch: int | None = None
    num_microbatches: int = 1
    microbatch_group: int | None = None  # interleaved schedule's G (default pp)
    padded_vocab: int | None = None
    vocab_divisible_by: int | None = None  # Megatron pads the vocabulary to a multiple of this x TP
    chunks: list[list[Chunk]] = field(default_factory=list)  # [pp_rank][chunk], from layout.split
    # precision and optimizer
    params_dtype: str = "bf16"
    grads_dtype: str = "fp32"  # the gradient buffer (Megatron main_grad / DeepSpeed reduce dtype)
    optimizer: str = "adam"  # adam (also AdamW) or sgd
    sgd_momentum: bool = True
    optimizer_impl: str = "fused"  # fused (Apex/TE/DeepSpeed FusedAdam) | torch (foreach: temporaries at step)
    main_params_dtype: str = "fp32"
    exp_avg_dtype: str = "fp32"
    exp_avg_sq_dtype: str = "fp32"
    # sharding: Megatron's distributed optimizer, or DeepSpeed ZeRO with the keys that choose its code paths
    distributed_optimizer: bool = False
    torch_fsdp2: bool = False  # Megatron --use-torch-fsdp2 (memory/torch_fsdp.py)
    fsdp_sharding: str | None = None  # Megatron FSDP --data-parallel-sharding-strategy (None: no Megatron FSDP)
    fsdp_double_buffer: bool = False  # Megatron FSDP --fsdp-double-buffer: at most two units gathered
    fsdp_comm_unit: int | None = None  # --suggested-communication-unit-size (elements; None: derived)
    optimizer_instances: int = 1  # Megatron --num-distributed-optimizer-instances: each shards over DP x CP / this
    zero_stage: int = 0
    zero_keys: dict[str, Any] = field(default_factory=dict)  # contiguous_gradients, overlap_comm, ...
    offload_optimizer: str = "none"  # none | cpu | nvme
    offload_param: str = "none"
    zero_buckets: dict[str, float] = field(default_factory=dict)
    param_groups: list[list[int]] | None = None  # numel of each tensor per optimizer group (ZeRO's flat layout)
    ds_pipeline: bool = False  # DeepSpeed's pipeline engine schedule
    frozen: tuple[str, ...] = ()  # parts whose weights get no gradient or optimizer state ("language model", ...)
    adapter: Adapter | None = None  # LoRA/QLoRA: only the adapter trains; the base is frozen (maybe quantized)
    teacher: Architecture | None = None  # Megatron distillation: the teacher the student carries (distillation.py)
    post_training: PostTraining | None = None  # TRL DPO/KTO/GRPO/RLOO: reference model, paired rows, vLLM share
    hf_ddp: bool = False  # the HF Trainer without DeepSpeed: torch DDP over every rank, no ZeRO
    hf_fsdp: str | None = None  # ... or torch FSDP with this sharding strategy (job/hf_fsdp.py)
    hf_saves: bool = True  # the HF Trainer saves the model (memory/save_host.py); OpenRLHF saves its own way
    # hf_ddp, full fine-tuning: the dtype the weights are kept in (their gradients and torch AdamW's moments follow
    # it; no master copy); params_dtype stays the compute dtype autocast runs in
    weights_dtype: str | None = None
    trainer_optim: str = ""  # hf_ddp: the Trainer's optim name (guard/job/trainer_optim.py prices its states)
    # activations
    recompute: str = "none"  # none | selective | full
    recompute_method: str = "uniform"
    recompute_num_layers: int = 1
    recompute_modules: tuple[str, ...] = ("core_attn",)
    distribute_saved_activations: bool = False
    offload_modules: tuple[str, ...] = ()  # Megatron --fine-grained-activation-offloading --offload-modules
    attention: str = "flash"  # flash (flash/fused/cuDNN: no s^2 term) | unfused
    eager: bool = False  # eager PyTorch ops (transformers models): unfused norms, rotary, SwiGLU
    # transformers: a batch padded to its longest sample hands SDPA a materialised mask (memory/hf_layers.py);
    # one sample, or packed ones of one length, run causal without it
    padded_batches: bool = True
    mask_bytes: int = 1  # dropout masks: CUDA's fused dropout keeps 1 byte; the CPU path keeps the activation dtype
    softmax_bytes: int | None = None  # unfused attention probabilities (None: the activation dtype; fp32 on CPU)
    # norms: fused (TE, Apex, torch on CUDA: the input and fp32 statistics) | torch_cpu (torch's CPU kernels:
    # LayerNorm keeps its statistics in the activation dtype, RMSNorm runs composite and keeps fp32 copies)
    norm_kernel: str = "fused"
    rope_kernel: str = "fused"  # fused (no per-layer copies) | unfused (cos and sin cast copies for Q and for K)
    fused_cross_entropy: bool = False  # Transformer Engine's fused loss: the 16-bit logits kept, no fp32 copy
    # TRL's fused LM head (memory/chunked_head.py): the tokens each row scores through it; 0: whole logits
    scored_tokens: int = 0
    # Megatron --defer-embedding-wgrad-compute: the last stage keeps the output layer's input and logits gradient
    # of up to --wgrad-deferral-limit microbatches (0: all) until the pipeline flush; None: not deferred
    wgrad_deferral_limit: int | None = None
    cuda_graphs: CudaGraphs | None = None  # Megatron's per-layer CUDA graphs (guard/memory/cuda_graphs.py)
    mtp_layers: int = 0  # Megatron --mtp-num-layers (multi-token prediction on the loss stage)
    linear_impl: str = "torch"  # torch (nn.Linear) | megatron (its tensor_parallel layers) | transformer_engine
    moe_dispatcher: str = "allgather"  # Megatron --moe-token-dispatcher-type
    moe_grouped_gemm: bool = False  # Megatron --moe-grouped-gemm
    moe_capacity_factor: float | None = None  # Megatron --moe-expert-capacity-factor (None: dropless)
    moe_pad_to_capacity: bool = False  # --moe-pad-expert-input-to-capacity: every expert gets exactly its capacity
    # experts weight their activation by the routing probabilities in one fused kernel (weighted SwiGLU/GeGLU);
    # unfused, the activation output is kept by the multiply besides the fc2 input
    moe_weighted_act_fused: bool = True
    blas_workspace_config: str | None = None  # CUBLAS_WORKSPACE_CONFIG of the launch (torch's workspace)
    checkpoint_partition: bool = False  # DeepSpeed activation checkpointing: partition_activations
    checkpoint_cpu: bool = False  # DeepSpeed cpu_checkpointing
    overlap_param_gather: bool = False
    overlap_grad_reduce: bool = False  # gradient buckets reduced during the last backward (timing only)
    step: StepSettings = field(default_factory=StepSettings)  # what changes the step's time only (guard/plan)
    gpu: str | None = None  # the GPU it runs on (a catalog name or a size), when known
    overrides: dict[str, float] = field(default_factory=dict)  # runtime/buffer terms set by the user (--set)
    origins: dict[str, Origin] = field(default_factory=dict)
    overruled: dict[str, tuple[Any, Origin]] = field(default_factory=dict)  # a value given, and a stronger one won
    stage_problem: LayoutError | None = None  # why the layers do not split (missing["stages"] says it too)
    unmodelled: list[tuple[str, str]] = field(default_factory=list)  # (feature, setting that asks for it)
    missing: dict[str, str] = field(default_factory=dict)  # value -> why it is not known
    notes: list[str] = field(default_factory=list)

    # -- reading ------------------------------------------------------------------------------------
    @property
    def dp(self) -> int:
        return self.layout.dp or 1

    @property
    def vocab(self) -> int:
        return self.padded_vocab or self.arch.vocab

    @property
    def rows(self) -> int:
        """Rows through one forward: the micro-batch, twice it where chosen and rejected go together (DPO)."""
        return self.micro_batch * (self.post_training.rows if self.post_training else 1)

    @property
    def deferred_wgrad(self) -> int:
        """Microbatches whose output-layer wgrad waits for the flush (tensor_parallel/layers.py)."""
        if self.wgrad_deferral_limit is None:
            return 0
        limit = self.wgrad_deferral_limit
        return min(limit, self.num_microbatches) if limit > 0 else self.num_microbatches

    def mtp_in(self, chunk: Chunk) -> int:
        """MTP layers a chunk holds: where the layout string puts 'm', else with the loss (megatron-core)."""
        if not self.mtp_layers:
            return 0
        placed = any(c.mtp for stage in self.chunks for c in stage)
        return chunk.mtp if placed else (self.mtp_layers if chunk.loss else 0)

    def origin(self, key: str) -> Origin:
        return self.origins.get(key) or Origin("default", key)

    def require(self, layout: bool = True) -> None:
        """Refuse a job the memory model cannot price: a layout that cannot run (unless `layout` is False: the
        planner searches other layouts), then the first missing value."""
        problems = [p for p in self.layout.problems(self.arch.num_experts if self.arch else None)
                    if p.code != "unknown"]
        if problems and layout:
            world = self.origins.get("layout.world")
            why = f" ({world.describe()})" if world and "world" in problems[0].fields else ""
            raise IncompleteJob(f"{self.origin('command').path or 'the job'}: {problems[0].message}{why}")
        missing = dict(self.missing)
        if not layout and self.global_batch:  # what only the layout makes unknown: the planner picks another
            missing.pop("batch", None)
            missing.pop("stages", None)
        if missing:
            raise IncompleteJob(next(iter(missing.values())))

    def required(self) -> "TrainingJob":
        """The job itself once `require` passes (for one-expression use)."""
        self.require()
        return self

    def add_unmodelled(self, feature: str, setting: str, origin: Origin | None = None) -> None:
        """A feature whose memory the model leaves out, named with the setting (and where) that asks for it."""
        if (feature, setting) not in self.unmodelled:
            self.unmodelled.append((feature, setting))
        if origin is not None:
            self.origins[f"unmodelled:{feature}"] = origin

    # -- changing (the planner and the launcher) ---------------------------------------------------
    def with_layout(self, layout: ParallelLayout, origin: Origin | None = None) -> "TrainingJob":
        """A copy on another layout: DP, microbatches and the stage split follow."""
        job = replace(self, layout=layout, origins=dict(self.origins), notes=list(self.notes),
                      unmodelled=list(self.unmodelled), missing=dict(self.missing), overruled=dict(self.overruled))
        if self.global_batch and layout.dp:
            job.num_microbatches = max(1, self.global_batch // (self.micro_batch * layout.dp))
        if self.arch is not None:
            job.chunks = layout.split(self.arch.num_layers)
            if self.vocab_divisible_by and layout.tp:  # megatron/training/tokenizer: pad to divisible_by x TP
                multiple = self.vocab_divisible_by * layout.tp
                job.padded_vocab = -(-self.arch.vocab // multiple) * multiple
        if origin is not None:
            job.origins["layout"] = origin
        return job


LAYOUT_FIELDS = {"world_size": "world", "gpus_per_node": "gpus_per_node", "tp": "tp", "pp": "pp", "vpp": "vpp",
                 "cp": "cp", "ep": "ep", "etp": "etp", "ulysses": "ulysses", "sequence_parallel": "sequence_parallel"}


def new_job(arch: Architecture | None, framework: str, **values: Any) -> TrainingJob:
    """A job from flat values: the layout's degrees (world_size, tp, pp, ...) go to its ParallelLayout."""
    layout = {LAYOUT_FIELDS[k]: values.pop(k) for k in list(values) if k in LAYOUT_FIELDS}
    if framework == "deepspeed":  # DeepSpeed reduces in the model's dtype unless told (as from_deepspeed reads it)
        values.setdefault("grads_dtype", values.get("params_dtype", TrainingJob.params_dtype))
    return TrainingJob(arch=arch, framework=framework, layout=ParallelLayout(**layout), **values)
