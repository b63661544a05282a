"""The parallel layout of a job (world, TP, PP, VPP, CP, EP, expert-TP, Ulysses SP, DP): it checks itself."""

from __future__ import annotations

from dataclasses import dataclass

from guard.job.stages import Chunk, SplitAsk, split

DEFAULT_GPUS_PER_NODE = 8  # a DGX/HGX node; used only where neither the launcher nor the user says


@dataclass(frozen=True)
class LayoutProblem:
    """Why a layout cannot run, with every factor in the message (torchtitan's ParallelDims style)."""

    code: str  # "world", "experts", "unknown"
    message: str
    fields: tuple[str, ...]  # the layout fields involved, to locate the message at their sources


@dataclass(frozen=True)
class ParallelLayout:
    """Degrees of one job. None: not known statically (an unresolved shell variable, no launcher).

    Rank order is Megatron's default tp-cp-ep-dp-pp (DeepSpeed's pipe topology agrees when cp = 1);
    Megatron-DeepSpeed's Ulysses degree (`ulysses`) multiplies the model-parallel size like CP.
    """

    world: int | None = None
    gpus_per_node: int = DEFAULT_GPUS_PER_NODE
    tp: int | None = 1
    pp: int | None = 1
    vpp: int = 1
    cp: int | None = 1
    ep: int = 1
    etp: int | None = None  # expert tensor parallel (None: the same as TP)
    ulysses: int | None = 1
    # ZeRO partitions over DP x Ulysses when an mpu gives DeepSpeed a sequence-data-parallel group (Megatron-DeepSpeed,
    # ALST); DeepSpeed's own device mesh (sequence_parallel_size with data_parallel_size) has none: ZeRO-1/2 then
    # partition over its DP axis alone, while ZeRO-3's Init, given no group, takes the whole world (zero_shards)
    ulysses_in_zero: bool = True
    sequence_parallel: bool = False  # Megatron's SP: norms and dropouts split over TP
    # how layers split over stages (--decoder-first/last-pipeline-num-layers, accounting flags, layout string)
    first_stage_layers: int | None = None
    last_stage_layers: int | None = None
    account_embedding: bool = False
    account_loss: bool = False
    layout_string: str | None = None
    virtual_layers: int | None = None  # --num-layers-per-virtual-pipeline-stage (vpp then follows the split)
    overlap_p2p: bool = True  # the interleaved schedule needs PP > 2 without it
    # Megatron-DeepSpeed's GPTModelPipe: DeepSpeed partitions the layers (guard/job/deepspeed_pipe.py):
    # (partition_method, BigScience's spec list, embeddings tied); None: megatron-core's split
    ds_pipe: tuple[str, bool, bool] | None = None
    stage_blocks: tuple[int, ...] | None = None  # Yuan 2.0's --pipeline-model-parallel-method block: layers per stage

    # -- derived sizes ------------------------------------------------------------------------------
    @property
    def model_parallel(self) -> int | None:
        parts = (self.tp, self.pp, self.cp, self.ulysses)
        if any(p is None or p < 1 for p in parts):
            return None
        return self.tp * self.pp * self.cp * self.ulysses

    @property
    def dp(self) -> int | None:
        """world / (TP x PP x CP x SP); None when unknown or when the product does not divide the world."""
        mp = self.model_parallel
        if self.world is None or mp is None or self.world % mp:
            return None
        return self.world // mp

    @property
    def seq_shards(self) -> int:
        """Ranks one sequence is split over outside attention: CP x Ulysses SP."""
        return (self.cp or 1) * (self.ulysses or 1)

    def zero_shards(self, stage: int) -> int | None:
        """Ranks ZeRO at `stage` partitions over. DeepSpeed's engine hands ZeRO the sequence-data-parallel group
        (runtime/engine.py: dp_process_group=self.seq_data_parallel_group): DP x Ulysses SP where an mpu provides
        it. Without one (utils/groups.py _get_sequence_data_parallel_group falls back to the data-parallel group)
        ZeRO-1/2 partition over DP alone, and ZeRO-3's parameters over the whole world (zero/parameter_offload.py:
        Init(data_parallel_group=None) takes the world group). tests/test_fidelity_deepspeed_zero.py measures the
        device mesh's on 4 CPU ranks."""
        if self.dp is None:
            return None
        return self.dp * (self.ulysses or 1) if self.ulysses_in_zero or stage == 3 else self.dp

    @property
    def expert_tp(self) -> int | None:
        return self.etp if self.etp is not None else self.tp

    @property
    def expert_dp(self) -> int | None:
        """Megatron's expert data-parallel group: the ranks holding one expert shard, across DP x CP."""
        if self.world is None or not self.pp or not self.expert_tp:
            return None
        return max(1, self.world // (self.expert_tp * self.ep * self.pp))

    @property
    def ranks_per_stage(self) -> int | None:
        if self.world is None or not self.pp:
            return None
        return self.world // self.pp

    def coordinates(self, rank: int) -> dict[str, int]:
        """tp, cp, dp and pp rank of a global rank (Megatron's tp-cp-ep-dp-pp order)."""
        tp, cp, dp = self.tp or 1, (self.cp or 1) * (self.ulysses or 1), self.dp or 1
        return {"tp_rank": rank % tp, "cp_rank": rank // tp % cp, "dp_rank": rank // (tp * cp) % dp,
                "pp_rank": rank // (tp * cp * dp)}

    def groups(self, kind: str) -> list[list[int]]:
        """The process groups of one kind ("tp", "cp", "dp", "pp") as Megatron's tp-cp-ep-dp-pp order forms
        them: rank = tp_rank + TP x (cp_rank + CP x (dp_rank + DP x pp_rank)), CP counting Ulysses too."""
        sizes = {"tp": self.tp or 1, "cp": (self.cp or 1) * (self.ulysses or 1), "dp": self.dp or 1,
                 "pp": self.pp or 1}
        order = ["tp", "cp", "dp", "pp"]
        strides, stride = {}, 1
        for name in order:
            strides[name] = stride
            stride *= sizes[name]
        others = [n for n in order if n != kind]
        out = []
        for index in range(stride // sizes[kind]):
            base, rest = 0, index
            for name in others:
                base += (rest % sizes[name]) * strides[name]
                rest //= sizes[name]
            out.append([base + i * strides[kind] for i in range(sizes[kind])])
        return sorted(out)

    def stage_ranks(self, pp_rank: int) -> range:
        n = self.ranks_per_stage or 1
        return range(pp_rank * n, (pp_rank + 1) * n)

    def split(self, num_layers: int) -> list[list[Chunk]]:
        """Layers to [pp rank][chunk] as megatron-core assigns them (guard/job/stages.py: the one split);
        LayoutError with megatron's reason when it cannot."""
        return split(num_layers, SplitAsk(self.pp or 1, self.vpp, self.virtual_layers, self.first_stage_layers,
                                          self.last_stage_layers, self.account_embedding, self.account_loss,
                                          self.layout_string, self.overlap_p2p, self.ds_pipe, self.stage_blocks))

    def as_dict(self) -> dict[str, int | None]:
        return {"world_size": self.world, "tp": self.tp, "pp": self.pp, "dp": self.dp, "cp": self.cp,
                "ep": self.ep, "etp": self.expert_tp, "vpp": self.vpp, "ulysses": self.ulysses,
                "gpus_per_node": self.gpus_per_node}

    # -- validation ---------------------------------------------------------------------------------
    def problems(self, num_experts: int | None = None) -> list[LayoutProblem]:
        """What initialize_model_parallel (or Megatron-DeepSpeed's mpu) refuses, every factor named."""
        out: list[LayoutProblem] = []
        named = {"tp": self.tp, "pp": self.pp, "cp": self.cp, "ulysses": self.ulysses}
        for name, value in named.items():
            if value is not None and value < 1:
                out.append(LayoutProblem("degree", f"{name}({value}) must be at least 1", (name,)))
        unknown = [name for name, value in {**named, "world": self.world}.items() if value is None]
        if unknown:
            out.append(LayoutProblem("unknown", "not known statically: " + ", ".join(unknown), tuple(unknown)))
            return out
        if out:
            return out
        factors = [(n, v) for n, v in named.items() if n in ("tp", "pp") or v != 1]
        product = self.model_parallel
        if self.world % product:
            shown = " * ".join(f"{n}({v})" for n, v in factors)
            out.append(LayoutProblem("world", f"{shown} = {product} does not divide world size {self.world}",
                                     tuple(n for n, _ in factors) + ("world",)))
        expert_grid = self.expert_tp * self.ep * self.pp
        if self.ep > 1 and self.world % expert_grid:
            out.append(LayoutProblem("experts", f"etp({self.expert_tp}) * ep({self.ep}) * pp({self.pp}) = "
                                     f"{expert_grid} does not divide world size {self.world}",
                                     ("etp", "ep", "pp", "world")))
        if num_experts and num_experts % self.ep:
            out.append(LayoutProblem("experts", f"num_experts({num_experts}) is not a multiple of ep({self.ep})",
                                     ("ep",)))
        return out
