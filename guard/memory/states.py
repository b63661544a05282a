"""Model states per rank: parameters, gradients and optimizer states under Megatron or DeepSpeed ZeRO."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from guard.job.stages import Chunk
from guard.job.training_job import DTYPE_BYTES, TrainingJob
from guard.memory import adapter_states, megatron_fsdp, muon, torch_fsdp, zero_paths
from guard.memory.ddp_states import BUCKETS, ddp_terms
from guard.memory.overheads import zero_bucket
from guard.memory.params import Inventory
from guard.memory.zero_layout import ZeroLayout, largest_tensor, layout_for, zero_layout


@dataclass
class States:
    params: int = 0
    grads: int = 0
    optimizer: int = 0
    step_transient: int = 0  # allocated only while optimizer.step() runs
    # allocated by the step and held until the next step's zero_grad: in the step and after it, not in the
    # forward/backward (Megatron's fp32 copies of 16-bit gradients)
    step_held: int = 0
    host: int = 0  # CPU RAM this rank's offloaded states take
    explain: list[str] = field(default_factory=list)
    terms: dict[str, int] = field(default_factory=dict)  # device-resident states by name
    step_terms: dict[str, int] = field(default_factory=dict)  # what the optimizer step allocates, by name
    host_terms: dict[str, int] = field(default_factory=dict)  # offloaded states by name
    # stage 1: gradients held from the end of autograd's backward until the epilogue frees them, beside the
    # partition and the buffers (activations are freed by then); in neither phase of estimate.py yet
    reduce_terms: dict[str, int] = field(default_factory=dict)


def moment_bytes(setup: TrainingJob) -> int:
    """Optimizer moments per parameter: Adam/AdamW keep two, SGD with momentum one."""
    if setup.optimizer == "sgd":
        return 4 if setup.sgd_momentum else 0
    return DTYPE_BYTES[setup.exp_avg_dtype] + DTYPE_BYTES[setup.exp_avg_sq_dtype]


def master_bytes(setup: TrainingJob) -> int:
    """fp32 (or --main-params-dtype) master weights exist only when the model's params are 16-bit."""
    return 0 if setup.params_dtype == "fp32" else DTYPE_BYTES[setup.main_params_dtype]


def megatron_states(setup: TrainingJob, inv: Inventory, chunks: list[Chunk] | None = None,
                    dp_rank: int | None = None) -> States:
    """Megatron DDP + (distributed) optimizer: the grad buffer is full size, the optimizer shards over DP x CP."""
    p_b, g_b = DTYPE_BYTES[setup.params_dtype], DTYPE_BYTES[setup.grads_dtype]
    # 16-bit grads with 16-bit params: the step copies the gradients to fp32 (Megatron's table: 20 B/param), and
    # they live from the step until the next step's zero_grad: optimizer.py _copy_model_grads_to_main_grads
    # (`main_param.grad = model_param.main_grad.float()`), zero_grad(set_to_none) on fp32_from_float16_groups,
    # called by training.py train_step before the forward
    grad_copy = 4 if (setup.params_dtype != "fp32" and g_b < 4) else 0
    per_param_opt = master_bytes(setup) + moment_bytes(setup)
    dense, expert = inv.dense, inv.bucket("expert")
    # several optimizer instances: each shards over its part of DP x CP (distributed_data_parallel.py
    # intra_dp_cp_group / intra_expt_dp_group), so a rank holds `instances` times more
    d_dense = max(1, setup.dp * setup.layout.cp // setup.optimizer_instances) if setup.distributed_optimizer else 1
    d_expert = max(1, setup.layout.expert_dp // setup.optimizer_instances) if setup.distributed_optimizer else 1
    out = States(params=(dense + expert) * p_b, grads=(dense + expert) * g_b)
    out.optimizer = math.ceil(dense * per_param_opt / d_dense) + math.ceil(expert * per_param_opt / d_expert)
    out.step_held = math.ceil(dense * grad_copy / d_dense) + math.ceil(expert * grad_copy / d_expert)
    if setup.optimizer == "muon" and chunks is not None:
        out.optimizer = muon.optimizer_bytes(setup, chunks, master_bytes(setup), dp_rank)
        out.explain = [f"params = {dense + expert:,} x {p_b} B, grads {g_b} B; optimizer: Muon keeps one "
                       f"momentum per 2-D weight, Adam two moments for the rest, fp32 masters "
                       + ("(layer-wise distributed: whole tensors dealt to DP ranks by size)"
                          if setup.distributed_optimizer else "(every rank)")]
        return out
    if setup.fsdp_sharding:
        weights, optim, grads = megatron_fsdp.sharded(setup)
        out.params = megatron_fsdp.per_rank(setup, inv, p_b, weights)
        out.grads = megatron_fsdp.per_rank(setup, inv, g_b, grads)
        out.optimizer = megatron_fsdp.per_rank(setup, inv, per_param_opt + grad_copy, optim)
        out.step_held = 0
        out.explain = [(f"Megatron FSDP {setup.fsdp_sharding}: params {p_b} B, grads {g_b} B, optimizer "
                        f"{per_param_opt} B per parameter; sharded over DP x CP (experts: expert DP): "
                        f"params {weights}, grads {grads}, optimizer {optim}")]
        return out
    out.explain = [
        f"params = {dense + expert:,} x {p_b} B ({setup.params_dtype})",
        f"grads = {dense + expert:,} x {g_b} B ({setup.grads_dtype} gradient buffer, full size on every rank)",
        f"optimizer = {per_param_opt} B/param (master {master_bytes(setup)} + moments {moment_bytes(setup)})"
        + (" + the fp32 gradient copy 4 B/param from the step to the next zero_grad" if grad_copy else "")
        + (f" / {d_dense} (distributed optimizer over DP x CP"
           + (f" / {setup.optimizer_instances} instances" if setup.optimizer_instances > 1 else "") + ")"
           if d_dense > 1 else "")
        + (f"; experts {expert:,} / {d_expert} (expert data-parallel group)" if expert and d_expert > 1 else ""),
    ]
    return out


def zero_states(setup: TrainingJob, inv: Inventory, dp_rank: int | None = None) -> States:
    """DeepSpeed ZeRO stage 0-3 as DeepSpeed 0.19.8 keeps them, term by term (measured on CPU ranks:
    tests/fidelity/deepspeed_zero.py). dp_rank None: the data-parallel rank that holds the most.

    - Stage 0 with 16-bit params wraps the optimizer in FP16/BF16_Optimizer: full fp32 master weights, and
      fp32 copies of all gradients during the step.
    - Stages 1-3 always keep an fp32 master partition, even for fp32 models (a copy the inner optimizer updates).
    - Stages 1 and 2 share stage_1_and_2.py: both end the backward holding only the gradients of the tensors
      that touch this rank's slice (the ZeRO paper's P_os keeps full gradients). The step flattens them (a
      copy) and converts that to fp32 (another, for 16-bit models) before the inner optimizer runs. Which
      path reduces them (and what else it holds meanwhile) follows the zero_optimization keys: zero_paths.py;
      stage 1 without overlap_comm holds every gradient until the post-backward reduce (`reduce_terms`).
    - Stage 3 copies its gradient partition to fp32 for the step, whatever the model's dtype.
    """
    psi, n, stage = inv.total, setup.layout.zero_shards(setup.zero_stage) or 1, setup.zero_stage
    p_b = DTYPE_BYTES[setup.params_dtype]
    groups = zero_paths.ordered_groups(setup, setup.param_groups, n)  # round_robin_gradients reorders
    layout = layout_for(groups, psi, n, stage)
    out = States()
    step_tensor = _zero_terms(setup, out, psi, groups, layout, dp_rank)
    # torch's (foreach) Adam allocates sqrt(exp_avg_sq) as a new fp32 tensor; fused Adam works in place
    if _torch_adam(setup):
        out.step_terms["torch Adam sqrt(exp_avg_sq) temporary"] = step_tensor * 4
    if stage in (1, 2):
        out.reduce_terms = zero_paths.reduce_terms(setup, psi, p_b, zero_bucket(setup, "reduce_bucket_size"),
                                                   largest_tensor(setup), groups, dp_rank)
        out.explain += zero_paths.path_explain(setup)
    if layout.padding and stage:  # the padding is inside the flat groups / partitions priced above
        out.explain.append(f"alignment padding: {layout.padding:,} elements over the flat groups / partitions")
    if setup.offload_optimizer != "none":
        # the optimizer lives in host RAM: master, moments, a persistent fp32 gradient partition, and (stages
        # 1-2) a 16-bit copy of the parameter partition plus a pinned staging buffer of the largest tensor
        part = layout.partition
        out.host_terms = {"fp32 master weights": out.terms.pop("fp32 master weights"),
                          "optimizer moments": out.terms.pop("optimizer moments"),
                          "fp32 gradient partition": part * 4}
        if stage == 3:
            out.host_terms["gradient partition"] = out.terms.pop("gradients")
        elif stage:
            out.terms.pop("gradients")
            out.host_terms["16-bit parameter partition"] = part * p_b
            out.host_terms["pinned gradient staging (largest tensor)"] = largest_tensor(setup) * p_b
        out.step_terms = {}
    if setup.offload_param != "none" and stage == 3:
        out.host_terms["parameter partition"] = out.terms.pop("parameters")
    out.params = out.terms.get("parameters", 0)
    out.grads = out.terms.get("gradients", 0)
    out.optimizer = out.terms.get("fp32 master weights", 0) + out.terms.get("optimizer moments", 0)
    out.step_transient = sum(out.step_terms.values())
    out.host = sum(out.host_terms.values())
    _zero_explain(setup, out, n)
    return out


def _zero_terms(setup: TrainingJob, out: States, psi: int, groups: list[list[int]] | None, layout: ZeroLayout,
                dp_rank: int | None) -> int:
    """Fill the device terms and the step's copies; returns the elements of the step's largest copy."""
    stage, n, low = setup.zero_stage, setup.layout.zero_shards(setup.zero_stage) or 1, setup.params_dtype != "fp32"
    p_b, moments, part = DTYPE_BYTES[setup.params_dtype], moment_bytes(setup), layout.partition
    if stage == 0:
        out.terms = {"parameters": psi * p_b, "gradients": psi * p_b, "fp32 master weights": psi * 4 if low else 0,
                     "optimizer moments": psi * moments}
        out.step_terms = {"fp32 gradient copies": psi * 4 if low else 0}
        return psi
    grad_elems = max(layout.grad_buffers) if dp_rank is None else layout.grad_buffers[dp_rank]
    # the gradient partitions are in the config's dtype (grad_accum_dtype), even for parameters kept fp32
    out.terms = {"parameters": (layout.flat if stage < 3 else part) * p_b,
                 "gradients": grad_elems * DTYPE_BYTES[setup.grads_dtype],
                 "fp32 master weights": part * 4, "optimizer moments": part * moments}
    if stage == 3:  # one fp32 buffer sized for the largest sub-group, reused by each
        step_tensor = min(int(setup.zero_buckets.get("sub_group_size", 1e9)), layout.largest_group_partition)
        out.step_terms = {"fp32 gradient copy": step_tensor * 4}
        return step_tensor
    # group by group: flatten (a copy), convert to fp32 (another, for 16-bit models), step, free
    step_tensor, freed = _stage12_step_group(setup, groups, psi, n, layout, dp_rank)
    out.step_terms = {"flattened gradient partition": step_tensor * p_b,
                      "fp32 gradient copy": step_tensor * 4 if low else 0}
    if freed:
        out.step_terms["gradients of the groups already stepped, freed"] = -freed
    return step_tensor


def _zero_explain(setup: TrainingJob, out: States, n: int) -> None:
    where = {0: "every rank holds everything", 1: "optimizer states partitioned", 2: "optimizer states and "
             "gradients partitioned", 3: "parameters, gradients and optimizer states partitioned"}[setup.zero_stage]
    out.explain.insert(0, f"ZeRO-{setup.zero_stage} over DP={n} ({where}): " + ", ".join(
        f"{name} {value:,} B" for name, value in out.terms.items()))
    if out.step_terms:
        out.explain.append("during the step: " + ", ".join(f"{k} {v:,} B" for k, v in out.step_terms.items()))
    if out.host_terms:
        out.explain.append(f"offload_optimizer={setup.offload_optimizer}: in host RAM " + ", ".join(
            f"{k} {v:,} B" for k, v in out.host_terms.items()))
    if out.reduce_terms:
        out.explain.append("after autograd's backward, until the epilogue frees them (activations freed by then; "
                           "not yet a phase of the estimate): "
                           + ", ".join(f"{k} {v:,} B" for k, v in out.reduce_terms.items()))


def _torch_adam(setup: TrainingJob) -> bool:
    return setup.optimizer_impl == "torch" and setup.optimizer == "adam"


def _stage12_step_group(setup: TrainingJob, groups: list[list[int]] | None, psi: int, n: int, layout: ZeroLayout,
                        dp_rank: int | None) -> tuple[int, int]:
    """(partition the step's copies are priced for, gradient bytes freed before that group steps).

    stage_1_and_2.py step(): with contiguous gradients every group's gradients are views of one buffer
    (grads_in_partition) that lives until the last group, so the largest group prices the copies; without, each
    group's gradients are freed (free_grad_in_param_list) before the next group flattens its own, so the peak is
    the group whose copies, less what the groups before it freed, are largest."""
    if (zero_paths.gradient_path(setup).contiguous or not groups or sum(map(sum, groups)) != psi
            or len(groups) < 2):
        return layout.largest_group_partition, 0
    p_b = DTYPE_BYTES[setup.params_dtype]
    per_byte = p_b + (4 if setup.params_dtype != "fp32" else 0) + (4 if _torch_adam(setup) else 0)
    per_group = [zero_layout([g], n, setup.zero_stage) for g in groups]
    index, freed = zero_paths.step_release([g.grad_buffers for g in per_group],
                                           [g.partition * per_byte for g in per_group], p_b, dp_rank)
    return per_group[index].partition, freed


def model_states(setup: TrainingJob, inv: Inventory, dp_rank: int | None = None,
                 chunks: list[Chunk] | None = None) -> States:
    """dp_rank None: the data-parallel rank that holds the most; chunks: the stage's (Muon deals their tensors)."""
    if setup.adapter is not None:
        return _adapter_states(setup, dp_rank)
    if setup.hf_ddp:
        return ddp_states(setup, inv)
    if setup.framework == "megatron" and setup.torch_fsdp2:
        out = _torch_fsdp2_states(setup, inv)
    else:
        out = megatron_states(setup, inv, chunks, dp_rank) if setup.framework == "megatron" else \
            zero_states(setup, inv, dp_rank)
    if "language model" in setup.frozen:
        # requires_grad False: DDP allocates no gradient buffer and the optimizer holds no state for these
        # weights (megatron/core/distributed/distributed_data_parallel.py and optimizer/__init__.py take
        # only parameters that require grad); only the weights stay
        out.grads = out.optimizer = out.step_transient = out.step_held = out.host = 0
        out.terms = {k: v for k, v in out.terms.items() if k == "parameters"}
        out.step_terms, out.host_terms, out.reduce_terms = {}, {}, {}
        out.explain.append("the language model is frozen (--freeze-LM): no gradients, no optimizer state")
    return out


def _torch_fsdp2_states(setup: TrainingJob, inv: Inventory) -> States:
    """Megatron --use-torch-fsdp2: every state sharded over DP x CP (torch_fsdp.py)."""
    parts = torch_fsdp.megatron_states(setup, inv)
    # the fp32 gradient copies are Float16OptimizerWithFloat16Params' own, living to the next zero_grad
    # (megatron_states' step_held)
    out = States(params=parts["params"], grads=parts["grads"], optimizer=parts["optimizer"],
                 step_held=parts["step"], terms={k: v for k, v in parts.items() if k != "step"})
    out.explain = [f"torch FSDP2 over DP x CP = {setup.dp * setup.layout.cp}: " +
                   ", ".join(f"{k} {v:,} B" for k, v in parts.items())]
    return out


def ddp_states(setup: TrainingJob, inv: Inventory) -> States:
    """Full fine-tuning under the HF Trainer without DeepSpeed (ddp_states.py: no master copy, one dtype)."""
    terms, step, dtype = ddp_terms(setup, inv)
    if setup.hf_fsdp:
        terms = torch_fsdp.hf_states(setup, terms)
        step = {k: math.ceil(v / torch_fsdp.hf_shards(setup)) for k, v in step.items()}
    out = States(params=terms["parameters"], grads=terms["gradients"] + terms.get(BUCKETS, 0),
                 optimizer=terms["optimizer moments"], step_transient=sum(step.values()), terms=terms,
                 step_terms=step)
    how = f"torch FSDP ({setup.hf_fsdp})" if setup.hf_fsdp else "torch DDP"
    out.explain = [f"{how} over DP={setup.dp}, no ZeRO, torch's optimizer: weights, gradients and moments in "
                   f"{dtype}, no master copy: " + ", ".join(f"{k} {v:,} B" for k, v in terms.items())]
    if step:
        out.explain.append("during the step: " + ", ".join(f"{k} {v:,} B" for k, v in step.items()))
    return out


def _adapter_states(setup: TrainingJob, dp_rank: int | None) -> States:
    """LoRA / QLoRA (adapter_states.py): the optimizer's states over the adapter, plus the frozen base."""
    sub, inv = adapter_states.adapter_job(setup)
    out = zero_states(sub, inv, dp_rank)
    out.explain[0] = out.explain[0].replace("ZeRO-0 over", "no ZeRO (torch DDP) over") if setup.hf_ddp \
        else out.explain[0]
    out.terms["trainable adapter parameters"] = out.terms.pop("parameters", 0)
    buckets = adapter_states.ddp_buckets(setup, inv.total)
    if buckets:
        out.terms["DDP gradient buckets (a copy of the gradients)"] = buckets
    frozen = {k: v for k, v in adapter_states.frozen_bytes(setup).items() if v}
    out.terms.update(frozen)
    if setup.offload_param != "none" and setup.zero_stage == 3 and not setup.hf_ddp:  # ZeRO-Infinity moves them too
        for key in frozen:
            out.host_terms[key] = out.terms.pop(key)
        out.host = sum(out.host_terms.values())
        frozen = {}
    out.params = out.terms["trainable adapter parameters"] + sum(frozen.values())
    out.grads = out.terms.get("gradients", 0) + buckets
    out.explain.append(f"LoRA r={setup.adapter.rank} on {', '.join(setup.adapter.targets)}: {inv.total:,} trainable "
                       f"parameters in {adapter_states.trainable_dtype(setup)}; "
                       + ", ".join(f"{k} {v:,} B" for k, v in frozen.items()))
    return out
