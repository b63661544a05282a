"""Model states per rank: parameters, gradients and optimizer states under Megatron or DeepSpeed ZeRO."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from guard.memory.params import Inventory
from guard.job.training_job import DTYPE_BYTES, TrainingJob
from guard.memory.zero_layout import largest_tensor, layout_for


@dataclass
class States:
    params: int = 0
    grads: int = 0
    optimizer: int = 0
    step_transient: int = 0  # allocated only while optimizer.step() runs
    host: int = 0  # CPU RAM this rank's offloaded states take
    explain: list[str] = field(default_factory=list)
    terms: dict[str, int] = field(default_factory=dict)  # device-resident states by name
    step_terms: dict[str, int] = field(default_factory=dict)  # what the optimizer step allocates, by name
    host_terms: dict[str, int] = field(default_factory=dict)  # offloaded states by name


def moment_bytes(setup: TrainingJob) -> int:
    """Optimizer moments per parameter: Adam/AdamW keep two, SGD with momentum one."""
    if setup.optimizer == "sgd":
        return 4 if setup.sgd_momentum else 0
    return DTYPE_BYTES[setup.exp_avg_dtype] + DTYPE_BYTES[setup.exp_avg_sq_dtype]


def master_bytes(setup: TrainingJob) -> int:
    """fp32 (or --main-params-dtype) master weights exist only when the model's params are 16-bit."""
    return 0 if setup.params_dtype == "fp32" else DTYPE_BYTES[setup.main_params_dtype]


def megatron_states(setup: TrainingJob, inv: Inventory) -> States:
    """Megatron DDP + (distributed) optimizer: the grad buffer is full size, the optimizer shards over DP x CP."""
    p_b, g_b = DTYPE_BYTES[setup.params_dtype], DTYPE_BYTES[setup.grads_dtype]
    # 16-bit grads with 16-bit params: the optimizer keeps fp32 copies of the gradients (Megatron's table: 20 B/param)
    grad_copy = 4 if (setup.params_dtype != "fp32" and g_b < 4) else 0
    per_param_opt = master_bytes(setup) + moment_bytes(setup) + grad_copy
    dense, expert = inv.dense, inv.bucket("expert")
    d_dense = setup.dp * setup.layout.cp if setup.distributed_optimizer else 1
    d_expert = setup.layout.expert_dp if setup.distributed_optimizer else 1
    out = States(params=(dense + expert) * p_b, grads=(dense + expert) * g_b)
    out.optimizer = math.ceil(dense * per_param_opt / d_dense) + math.ceil(expert * per_param_opt / d_expert)
    out.explain = [
        f"params = {dense + expert:,} x {p_b} B ({setup.params_dtype})",
        f"grads = {dense + expert:,} x {g_b} B ({setup.grads_dtype} gradient buffer, full size on every rank)",
        f"optimizer = {per_param_opt} B/param (master {master_bytes(setup)} + moments {moment_bytes(setup)}"
        f"{' + fp32 grad copy 4' if grad_copy else ''})"
        + (f" / {d_dense} (distributed optimizer over DP x CP)" if d_dense > 1 else "")
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
      copy) and converts that to fp32 (another, for 16-bit models) before the inner optimizer runs.
    - Stage 3 copies its gradient partition to fp32 for the step, whatever the model's dtype.
    """
    psi, n, stage = inv.total, setup.layout.zero_shard or 1, setup.zero_stage
    low = setup.params_dtype != "fp32"
    p_b = DTYPE_BYTES[setup.params_dtype]
    moments = moment_bytes(setup)
    layout = layout_for(setup.param_groups, psi, n, stage)
    grad_elems = max(layout.grad_buffers) if dp_rank is None else layout.grad_buffers[dp_rank]
    part = layout.partition
    out = States()
    if stage == 0:
        master = psi * 4 if low else 0
        out.terms = {"parameters": psi * p_b, "gradients": psi * p_b, "fp32 master weights": master,
                     "optimizer moments": psi * moments}
        out.step_terms = {"fp32 gradient copies": psi * 4 if low else 0}
        step_tensor = psi
    else:
        params = layout.flat if stage < 3 else part
        out.terms = {"parameters": params * p_b, "gradients": grad_elems * p_b, "fp32 master weights": part * 4,
                     "optimizer moments": part * moments}
        if stage == 3:  # one fp32 buffer sized for the largest sub-group, reused by each
            step_tensor = min(int(setup.zero_buckets.get("sub_group_size", 1e9)), layout.largest_group_partition)
            out.step_terms = {"fp32 gradient copy": step_tensor * 4}
        else:  # group by group: flatten (a copy), convert to fp32 (another, for 16-bit models), step, free
            step_tensor = layout.largest_group_partition
            out.step_terms = {"flattened gradient partition": step_tensor * p_b,
                              "fp32 gradient copy": step_tensor * 4 if low else 0}
    # torch's (foreach) Adam allocates sqrt(exp_avg_sq) as a new fp32 tensor; fused Adam works in place
    if setup.optimizer_impl == "torch" and setup.optimizer == "adam":
        out.step_terms["torch Adam sqrt(exp_avg_sq) temporary"] = step_tensor * 4
    if layout.padding and stage:  # the padding is inside the flat groups / partitions priced above
        out.explain.append(f"alignment padding: {layout.padding:,} elements over the flat groups / partitions")
    if setup.offload_optimizer != "none":
        # the optimizer lives in host RAM: master, moments, a persistent fp32 gradient partition, and (stages
        # 1-2) a 16-bit copy of the parameter partition plus a pinned staging buffer of the largest tensor
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
    where = {0: "every rank holds everything", 1: "optimizer states partitioned", 2: "optimizer states and "
             "gradients partitioned", 3: "parameters, gradients and optimizer states partitioned"}[stage]
    out.explain.insert(0, f"ZeRO-{stage} over DP={n} ({where}): " + ", ".join(
        f"{name} {value:,} B" for name, value in out.terms.items()))
    if out.step_terms:
        out.explain.append("during the step: " + ", ".join(f"{k} {v:,} B" for k, v in out.step_terms.items()))
    if out.host_terms:
        out.explain.append(f"offload_optimizer={setup.offload_optimizer}: in host RAM " + ", ".join(
            f"{k} {v:,} B" for k, v in out.host_terms.items()))
    return out


def model_states(setup: TrainingJob, inv: Inventory, dp_rank: int | None = None) -> States:
    out = megatron_states(setup, inv) if setup.framework == "megatron" else zero_states(setup, inv, dp_rank)
    if "language model" in setup.frozen:
        # requires_grad False: DDP allocates no gradient buffer and the optimizer holds no state for these
        # weights (megatron/core/distributed/distributed_data_parallel.py and optimizer/__init__.py take
        # only parameters that require grad); only the weights stay
        out.grads = out.optimizer = out.step_transient = out.host = 0
        out.terms = {k: v for k, v in out.terms.items() if k == "parameters"}
        out.step_terms, out.host_terms = {}, {}
        out.explain.append("the language model is frozen (--freeze-LM): no gradients, no optimizer state")
    return out
