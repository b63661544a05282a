"""The loss edge of guard's last stage against megatron-core's vocab-parallel cross entropy run on CPU.

megatron-core (tensor_parallel/cross_entropy.py) upcasts the logits with `.float()`, computes the softmax in
place in that copy and saves it for backward. The probe replays every allocation and free torch's profiler
saw: at the forward's peak the 16-bit logits it was given and the fp32 copy are alive, the copy is kept; with
fp32 logits `.float()` is the same tensor and nothing more is allocated. guard prices the kept part as the
"logits" component and the rest as the loss transient (guard/memory/activations.py, loss_bytes).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from guard.intake.read import read
from guard.intake.request import Request
from guard.memory.activations import loss_bytes
from guard.settings import Settings
from tests.fidelity.launch import run_json_probe

pytest.importorskip("megatron.core")
PROBE = Path(__file__).parent / "fidelity" / "megatron_loss_probe.py"
# the probe's shape: seq 256, micro-batch 2, vocab 4096 (already a multiple of 128: no padding)
ARGS = ("--num-layers 1 --hidden-size 64 --num-attention-heads 4 --seq-length 256 --max-position-embeddings 256 "
        "--micro-batch-size 2 --global-batch-size 2 --vocab-size 4096")
NOISE = 0.01  # bytes per logit: the per-row max, sum and target vectors are s*b values against s*b*V logits


@pytest.fixture(scope="module")
def measured() -> dict:
    return run_json_probe(str(PROBE))


def _guard(dtype_flag: str) -> tuple[float, float]:
    settings = Settings()
    settings.world_size = 1
    job = read(Request(megatron_args=(f"{ARGS} {dtype_flag}".strip(),)), settings).job.required()
    return loss_bytes(job)


@pytest.mark.parametrize(("name", "flag", "given"), [("bf16", "--bf16", 2), ("fp32", "", 4),
                                                    ("fused_bf16", "--bf16 --cross-entropy-loss-fusion", 2)])
def test_the_loss_peak_and_what_it_keeps_are_megatron_cores(measured, name, flag, given):
    logits = measured["logits"]
    kept, transient = (b / logits for b in _guard(flag))
    run = {k: v / logits for k, v in measured[name].items()}
    # alive at the peak: the logits given (`given` bytes each) and what the loss allocated on top
    assert kept + transient == pytest.approx(given + run["forward_peak"], abs=NOISE)
    # kept: the fp32 softmax; a copy for 16-bit logits, the given tensor itself for fp32 ones; the native fusion
    # (--cross-entropy-loss-fusion's default impl) keeps the same
    assert kept == pytest.approx(run["kept_for_backward"] + (given if name == "fp32" else 0), abs=NOISE)
    # the backward starts from what was kept and adds the gradient's copies: no higher than the forward's peak
    held = run["kept_for_backward"] + (given if name == "fp32" else 0)
    assert held + run["backward_peak"] <= given + run["forward_peak"] + NOISE


def test_only_transformer_engines_fused_loss_keeps_16_bit_logits_alone():
    """TE's parallel_cross_entropy writes the gradient into its 16-bit input and saves that (transformer_engine
    pytorch/cross_entropy.py): 2 bytes a logit kept, nothing more at the loss."""
    kept, transient = _guard("--bf16 --cross-entropy-loss-fusion --cross-entropy-fusion-impl te")
    logits = 256 * 2 * 4096
    assert (kept, transient) == (2 * logits, 0.0)
