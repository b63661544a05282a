"""Model states per rank: parameters, gradients and optimizer states under Megatron or DeepSpeed ZeRO."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from guard.memory.params import Inventory
from guard.memory.setup import DTYPE_BYTES, Setup


@dataclass
class States:
    params: int = 0
    grads: int = 0
    optimizer: int = 0
    step_transient: int = 0  # allocated only while optimizer.step() runs
    host: int = 0  # CPU RAM this rank's offloaded states take
    explain: list[str] = field(default_factory=list)


def moment_bytes(setup: Setup) -> int:
    """Optimizer moments per parameter: Adam/AdamW keep two, SGD with momentum one."""
    if setup.optimizer == "sgd":
        return 4 if setup.sgd_momentum else 0
    return DTYPE_BYTES[setup.exp_avg_dtype] + DTYPE_BYTES[setup.exp_avg_sq_dtype]


def master_bytes(setup: Setup) -> int:
    """fp32 (or --main-params-dtype) master weights exist only when the model's params are 16-bit."""
    return 0 if setup.params_dtype == "fp32" else DTYPE_BYTES[setup.main_params_dtype]


def megatron_states(setup: Setup, inv: Inventory) -> States:
    """Megatron DDP + (distributed) optimizer: the grad buffer is full size, the optimizer shards over DP x CP."""
    p_b, g_b = DTYPE_BYTES[setup.params_dtype], DTYPE_BYTES[setup.grads_dtype]
    # 16-bit grads with 16-bit params: the optimizer keeps fp32 copies of the gradients (Megatron's table: 20 B/param)
    grad_copy = 4 if (setup.params_dtype != "fp32" and g_b < 4) else 0
    per_param_opt = master_bytes(setup) + moment_bytes(setup) + grad_copy
    dense, expert = inv.dense, inv.bucket("expert")
    d_dense = setup.dp * setup.cp if setup.distributed_optimizer else 1
    d_expert = setup.expert_dp if setup.distributed_optimizer else 1
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


def zero_states(setup: Setup, inv: Inventory) -> States:
    """DeepSpeed ZeRO stage 0-3 as DeepSpeed 0.19.8 keeps them (measured: tests/test_deepspeed_zero_oracle.py).

    Stages 1 and 2 share stage_1_and_2.py: both end the backward holding only this rank's gradient
    partition (the ZeRO paper's P_os keeps full gradients). The optimizer step reads an fp32 copy of the
    gradient partition (4 B/param / N) that the paper's K = 12 does not count.
    """
    psi, n, stage = inv.total, setup.dp, setup.zero_stage
    low = setup.params_dtype != "fp32"
    p_b = DTYPE_BYTES[setup.params_dtype]
    opt_b = master_bytes(setup) + moment_bytes(setup)
    fp32_grad = 4 if low else 0
    shard = math.ceil(psi / n)
    out = States()
    out.params = psi * p_b if stage < 3 else shard * p_b
    out.grads = psi * p_b if stage == 0 else shard * p_b
    out.optimizer = psi * opt_b if stage == 0 else shard * opt_b
    step_tensor = min(int(setup.zero_buckets.get("sub_group_size", 1e9)), shard) if stage == 3 else \
        (psi if stage == 0 else shard)  # the flat fp32 tensor one optimizer.step() call sees
    # torch's (foreach) Adam allocates sqrt(exp_avg_sq) as a new fp32 tensor; fused Adam works in place
    adam_temp = 4 if (setup.optimizer_impl == "torch" and setup.optimizer == "adam") else 0
    out.step_transient = step_tensor * (fp32_grad + adam_temp)
    out.explain = [f"ZeRO-{stage} over DP={n}: params {p_b} B x {'Psi/N' if stage == 3 else 'Psi'}, "
                   f"grads {p_b} B x {'Psi/N' if stage else 'Psi'}, optimizer {opt_b} B x "
                   f"{'Psi/N' if stage else 'Psi'}; during the step an fp32 gradient copy {fp32_grad} B x "
                   f"{'Psi' if stage == 0 else 'Psi/N'} (DeepSpeed keeps it beyond the ZeRO paper's K=12)"
                   + (f"; torch Adam's sqrt(exp_avg_sq) temporary {adam_temp} B on the same tensor" if adam_temp
                      else "")]
    if setup.offload_optimizer != "none":
        # stages 1 and 2 share stage_1_and_2.py: with offload both copy the gradient partition to pinned host memory
        host = out.optimizer + out.step_transient + (out.grads if stage >= 1 else 0)
        out.host += host
        out.explain.append(f"offload_optimizer={setup.offload_optimizer}: optimizer states, fp32 gradients"
                           f"{' and the gradient partition' if stage >= 1 else ''} live in host RAM "
                           f"({host:,} B on this rank)")
        out.optimizer = 0
        out.step_transient = 0
        if stage >= 1:
            out.grads = 0
    if setup.offload_param != "none" and stage == 3:
        out.host += out.params
        out.explain.append(f"offload_param={setup.offload_param}: the parameter partition lives in host RAM")
        out.params = 0
    return out


def model_states(setup: Setup, inv: Inventory) -> States:
    if setup.framework == "megatron":
        return megatron_states(setup, inv)
    return zero_states(setup, inv)
