"""Megatron's fine-grained activation offloading: which saved tensors leave the GPU, and what stays meanwhile.

megatron/core/pipeline_parallel/fine_grained_activation_offload.py (megatron-core 0.16.1): with
--fine-grained-activation-offloading, each module named in --offload-modules runs under saved-tensor hooks,
and every tensor it saves for backward of at least min_offloaded_tensor_size elements (1024 x 1024,
TransformerConfig) is copied to pinned host memory at the module's group_commit and its GPU storage
released. The warm-up iteration offloads too (should_bulk_offload returns True while is_warmup).
What stays on the GPU per layer: the rest. Beside the stash, two layers' offloaded groups: the last group
of each name is kept (post_warmup_callback's offload margin, so the reload never blocks backward) while the
layer before it is reloaded ahead (bulk_reload_group).
"""

from __future__ import annotations

from guard.job.training_job import DTYPE_BYTES, TrainingJob

MIN_ELEMENTS = 1024 * 1024
# layer_terms' labels -> the offload module that saves them (a pair: both norms, half each)
MODULE_OF = {
    "norm inputs": ("attn_norm", "mlp_norm"), "norm inputs (checkpointed)": ("attn_norm", "mlp_norm"),
    "norm statistics": ("attn_norm", "mlp_norm"),
    "QKV input (norm output)": ("qkv_linear",),
    "Q": ("core_attn",), "K, V": ("core_attn",), "Q (rotated/copied)": ("core_attn",),
    "K (rotated/repeated)": ("core_attn",), "QKV output (kept by a view)": ("core_attn",),
    "softmax output": ("core_attn",), "softmax output, 16-bit copy": ("core_attn",),
    "softmax statistics (fp32)": ("core_attn",), "attention dropout mask": ("core_attn",),
    "attention dropout output": ("core_attn",),
    "attention output (projection input)": ("attn_proj",),
    "permuted tokens (expert input)": ("expert_fc1",),
    "expert fc1 output": ("moe_act",),
}


def offloaded_share(setup: TrainingJob, label: str, nbytes: float) -> float:
    """The bytes of one layer term that go to the host (0 when its module is not offloaded or it is small)."""
    modules = MODULE_OF.get(label, ())
    if not setup.offload_modules or not modules:
        return 0.0
    share = sum(m in setup.offload_modules for m in modules) / len(modules)
    act = DTYPE_BYTES["fp32" if setup.params_dtype == "fp32" else "bf16"]
    each = nbytes / len(modules) / act  # elements of one module's tensor (the pair's terms are two tensors)
    return nbytes * share if each >= MIN_ELEMENTS else 0.0


def split(setup: TrainingJob, terms: dict[str, float]) -> tuple[float, float]:
    """(bytes kept on the GPU, bytes offloaded) of one layer's saved tensors."""
    away = sum(offloaded_share(setup, label, n) for label, n in terms.items())
    return sum(terms.values()) - away, away


KEPT_LAYERS = 2  # the margin layer kept and the one reloaded ahead of it
