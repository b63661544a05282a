"""The Trainer's optimizer names priced against the optimizers themselves on CPU: bitsandbytes' 8-bit and 32-bit
states (block scales, quantile maps, the fp32 fallback under 4096 elements) and torch's AdamW."""

from __future__ import annotations

import pytest

from guard.job.trainer_optim import named, state_bytes

torch = pytest.importorskip("torch")
bnb = pytest.importorskip("bitsandbytes")

SIZES = [100, 4095, 4096, 5000 * 300, 257 * 16 + 3]  # under the 8-bit minimum, at it, large, not a block multiple
CLASSES = {"adamw_bnb_8bit": lambda p: bnb.optim.AdamW(p, lr=1e-3, optim_bits=8),
           "paged_adamw_8bit": lambda p: bnb.optim.PagedAdamW8bit(p, lr=1e-3),
           "paged_adamw_32bit": lambda p: bnb.optim.PagedAdamW32bit(p, lr=1e-3),
           "lion_8bit": lambda p: bnb.optim.Lion8bit(p, lr=1e-3),
           "lion_32bit": lambda p: bnb.optim.Lion32bit(p, lr=1e-3),
           "adamw_torch": lambda p: torch.optim.AdamW(p, lr=1e-3, foreach=True),
           "sgd": lambda p: torch.optim.SGD(p, lr=1e-3)}


@pytest.mark.parametrize("name", sorted(CLASSES))
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_state_bytes_are_what_the_optimizer_allocates(name, dtype):
    params = [torch.nn.Parameter(torch.randn(n, dtype=getattr(torch, dtype))) for n in SIZES]
    optimizer = CLASSES[name](params)
    sum(p.float().sum() for p in params).backward()
    optimizer.step()
    seen = sum(t.numel() * t.element_size() for s in optimizer.state.values() for k, t in s.items()
               if torch.is_tensor(t) and k != "step")
    assert state_bytes(named(name), SIZES, 4 if dtype == "float32" else 2) == seen


def test_names_guard_does_not_price_are_said_so():
    assert named("adafactor").family == "" and named("galore_adamw").family == ""
    assert named("paged_adamw_8bit").paged and named("adamw_torch").impl == "torch"
