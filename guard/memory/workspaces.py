"""GEMM workspaces and Megatron's global memory buffer: allocated once through the caching allocator, kept to the end.

Each size is the allocating code's own rule, for the GPU the job runs on (its compute capability, from the
catalog) and the launch environment (CUBLAS_WORKSPACE_CONFIG). They are in `max_memory_allocated` and in the
memory still allocated after the step, which is how the calibration runs see them (docs/fidelity.md).
"""

from __future__ import annotations

import re
from functools import lru_cache

from guard.job.training_job import DTYPE_BYTES, TrainingJob
from guard.memory import catalog
from guard.units import KIB, MIB

# torch aten/src/ATen/cuda/CublasHandlePool.cpp parseChosenWorkspaceSize: ":4096:2:16:8" (8 MiB + 128 KiB),
# ":4096:8" (32 MiB) on sm_90 exactly; on ROCm 32 MiB, 128 MiB on gfx94x/gfx95x; CUBLAS_WORKSPACE_CONFIG
# (":SIZE_KIB:COUNT" pairs, summed) wins.
TORCH_DEFAULT = 4096 * KIB * 2 + 16 * KIB * 8
TORCH_SM90 = 4096 * KIB * 8
TORCH_ROCM, TORCH_ROCM_GFX94 = 32 * MIB, 128 * MIB
# The cuBLAS handle pool is per thread and the workspace map is keyed by (handle, stream): the forward runs on
# the Python thread, autograd runs CUDA backward ops on its per-device thread, so two workspaces are live.
# (cuBLASLt shares them: torch's unified workspace; before it, 1 MiB more per handle for bias-fused GEMMs.)
TORCH_THREADS = 2
# Transformer Engine transformer_engine/pytorch/cpp_extensions/gemm.py get_cublas_workspace_size_bytes:
# 32 MiB (+1 KiB for NVFP4 scales, TE >= 2.8) on compute capability >= 9, else 4 MiB; one per device
# (lru_cache'd get_cublas_workspace), and tex.get_num_cublas_streams() = 4 more for grouped GEMM (MoE experts).
TE_HOPPER = 32 * MIB + KIB
TE_OTHER = 4 * MIB
TE_GROUPED_STREAMS = 4


def _capability(setup: TrainingJob) -> str | None:
    return _capability_of(setup.gpu) if setup.gpu else None


@lru_cache(maxsize=16)
def _capability_of(gpu: str) -> str | None:
    """Once per GPU name: the planner prices every stage of hundreds of layouts."""
    try:
        return (catalog.lookup(gpu).entry or {}).get("compute_capability")
    except ValueError:  # a size ("80GiB"), not a named GPU
        return None


def torch_workspace(setup: TrainingJob) -> float:
    """One cuBLAS workspace: the user's override, CUBLAS_WORKSPACE_CONFIG, or the default for the GPU.
    An unknown GPU is priced as Hopper (the larger default)."""
    if "cublas_workspace" in setup.overrides:
        return setup.overrides["cublas_workspace"]
    pairs = re.findall(r":(\d+):(\d+)", setup.blas_workspace_config or "")
    if pairs:
        return sum(int(size) * KIB * int(count) for size, count in pairs)
    cap = _capability(setup)
    if cap and cap.startswith("gfx"):
        return TORCH_ROCM_GFX94 if cap.startswith(("gfx94", "gfx95")) else TORCH_ROCM
    return TORCH_SM90 if cap in (None, "9.0") else TORCH_DEFAULT


def te_workspace(setup: TrainingJob) -> float:
    cap = _capability(setup)
    major = int(cap.split(".")[0]) if cap and cap[0].isdigit() else 9
    return TE_HOPPER if major >= 9 else TE_OTHER


def gemm_workspaces(setup: TrainingJob) -> dict[str, float]:
    out = {"cuBLAS workspaces (torch: forward thread, autograd thread)": TORCH_THREADS * torch_workspace(setup)}
    if setup.linear_impl == "transformer_engine":
        te = te_workspace(setup)
        out["Transformer Engine cuBLAS workspace"] = te
        if setup.arch is not None and setup.arch.is_moe and setup.moe_grouped_gemm:
            out["Transformer Engine grouped-GEMM workspaces"] = TE_GROUPED_STREAMS * te
    return out


def global_memory_buffer(setup: TrainingJob) -> float:
    """megatron/core/utils.py GlobalMemoryBuffer: one tensor per (name, dtype), grown to the largest request
    and never freed. The "mpu" requests, in the activation dtype:
    - transformer/dot_product_attention.py: the local (unfused) attention's scores, [b * heads/TP, s, s];
    - tensor_parallel/layers.py: the sequence-parallel all-gather of a linear's input, [s, b, h] (megatron's
      own linears; under Transformer Engine still the output layer's);
    - transformer/moe/token_dispatcher.py MoEAllGatherTokenDispatcher: tokens of TP x EP ranks, [s b EP, h]."""
    if setup.framework not in ("megatron", "megatron-deepspeed") or setup.arch is None:
        return 0.0
    act = DTYPE_BYTES["fp32" if setup.params_dtype == "fp32" else "bf16"]
    lay, b = setup.layout, setup.micro_batch
    s = setup.seq_length / lay.seq_shards
    requests = [0.0]
    if setup.linear_impl == "megatron" and setup.attention == "unfused":
        requests.append(b * setup.arch.heads / (lay.tp or 1) * s * s)
    if lay.sequence_parallel:
        requests.append(s * b * setup.arch.hidden)
    if setup.arch.is_moe and setup.moe_dispatcher == "allgather" and (lay.tp or 1) * (lay.ep or 1) > 1:
        requests.append(s / (lay.tp or 1) * b * (lay.tp or 1) * (lay.ep or 1) * setup.arch.hidden)
    return act * max(requests)
