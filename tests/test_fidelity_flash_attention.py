"""The flash-attention path of guard's layer (the default on GPUs: no s^2 scores) against what a fused attention
kernel really saves for backward, measured with torch's own fused CPU kernel.

torch's `scaled_dot_product_attention` on CPU runs `_scaled_dot_product_flash_attention_for_cpu`, which, like
the CUDA flash kernels (flash-attn's `_flash_attn_forward` returns q, k, v, out and softmax_lse; Transformer
Engine's FusedAttnFunc saves the same plus the RNG state), saves Q, K and V as given, the output, and the
fp32 log-sum-exp of every (head, token). guard's terms: "Q", "K, V", "softmax statistics (fp32)" and the
output, which is also the projection's input ("attention output (projection input)").
"""

from __future__ import annotations

import pytest

from guard.intake.read import read
from guard.intake.request import Request
from guard.memory.activations import layer_terms
from guard.settings import Settings

torch = pytest.importorskip("torch")
FLASH_TERMS = ("Q", "K, V", "softmax statistics (fp32)", "attention output (projection input)")


def _saved_bytes(b: int, heads: int, groups: int, s: int, d: int) -> int:
    """Bytes of the distinct storages the fused kernel saves for backward (a tensor saved twice counts once)."""
    q = torch.randn(b, heads, s, d, dtype=torch.bfloat16, requires_grad=True)
    k = torch.randn(b, groups, s, d, dtype=torch.bfloat16, requires_grad=True)
    v = torch.randn(b, groups, s, d, dtype=torch.bfloat16, requires_grad=True)
    saved: dict[int, int] = {}

    def pack(tensor):
        saved[tensor.untyped_storage().data_ptr()] = tensor.untyped_storage().nbytes()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        extra = {"enable_gqa": True} if groups < heads else {}
        out = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True, **extra)
    if "Flash" not in type(out.grad_fn).__name__:
        pytest.skip(f"torch ran {type(out.grad_fn).__name__}, not its fused flash kernel")
    return sum(saved.values())


@pytest.mark.parametrize(("heads", "groups"), [(4, 4), (8, 2)])
def test_flash_attention_saves_what_guard_prices(heads, groups):
    b, s, hidden = 2, 128, 256
    d = hidden // heads
    args = (f"--num-layers 1 --hidden-size {hidden} --num-attention-heads {heads} --seq-length {s} "
            f"--max-position-embeddings {s} --micro-batch-size {b} --global-batch-size {b} --vocab-size 1024 "
            "--bf16 --attention-dropout 0 --hidden-dropout 0")
    if groups < heads:
        args += f" --group-query-attention --num-query-groups {groups}"
    settings = Settings()
    settings.world_size = 1
    job = read(Request(megatron_args=(args,)), settings).job.required()
    assert job.attention == "flash"
    terms = layer_terms(job, 0)
    assert sum(terms[name] for name in FLASH_TERMS) == _saved_bytes(b, heads, groups, s, d)
