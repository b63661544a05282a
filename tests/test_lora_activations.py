"""LoRA's activations on Llama-3-8B, derived by hand from what autograd keeps in transformers + peft (the census
of tests/test_fidelity_hf_activations.py shows the same terms on a small model)."""

from __future__ import annotations

from guard.job import presets
from guard.job.adapter import Adapter
from guard.job.training_job import new_job
from guard.memory.activations import embedding_bytes, layer_terms

ARCH = presets.load("llama-3-8b")  # h 4096, ffn 14336, 32 heads of 128, 8 K/V heads
H, FFN, KV, S = 4096, 14336, 1024, 2048


def _job(adapter=None, micro_batch=1, padded=False, **values):
    return new_job(ARCH, "deepspeed", world_size=1, zero_stage=2, seq_length=S, micro_batch=micro_batch,
                   params_dtype="bf16", eager=True, padded_batches=padded, adapter=adapter, **values)


def _layer(job) -> float:
    return sum(layer_terms(job, 1).values())


def _lora(targets, dropout=0.0):
    return Adapter("lora", 16, 32, dropout, targets)


def test_lora_on_q_and_v_keeps_less_than_full_fine_tuning_by_hand():
    """Frozen: both norms' 16-bit outputs (weight gradients), the MLP input (gate/up) and the down projection's
    input; SDPA still keeps its output. Added: lora_A's [s, 16] output for q and for v."""
    tokens = S
    dropped = 2 * 2 * tokens * H + 2 * tokens * H + 2 * tokens * FFN
    added = 2 * (2 * tokens * 16)
    assert _layer(_job()) - _layer(_job(_lora(("q_proj", "v_proj")))) == dropped - added


def test_lora_dropout_gives_each_adapted_layer_its_own_input_copy_and_mask():
    """With dropout each lora_A keeps its own dropped-out input (bf16) and CUDA keeps a 1-byte mask, so the shared
    norm output is no longer kept for q and v."""
    plain, dropped = _job(_lora(("q_proj", "v_proj"))), _job(_lora(("q_proj", "v_proj"), 0.05))
    per_target = 2 * S * H + 1 * S * H
    assert _layer(dropped) - _layer(plain) == 2 * per_target - 2 * S * H


def test_autocast_keeps_16_bit_casts_of_the_input_and_weights():
    """No DeepSpeed: the HF Trainer autocasts bf16 over fp32 adapters. lora_A(q) runs on a bf16 cast of its input
    and of its [16, 4096] weight, lora_B on a cast of its [4096, 16] weight and on lora_A's bf16 output."""
    job = _job(_lora(("q_proj",)), hf_ddp=True)
    shared = _job(_lora(("q_proj",)))  # bf16 adapter: lora_A reads the norm output itself
    own = 2 * S * H + 2 * 16 * (H + H)
    assert _layer(job) - _layer(shared) == own - 2 * S * H


def test_a_padded_batch_repeats_kv_and_keeps_the_converted_mask():
    b = 2
    extra = 2 * 2 * b * S * (H - KV) + 2 * b * S * S
    assert _layer(_job(micro_batch=b, padded=True)) - _layer(_job(micro_batch=b)) == extra


def test_the_first_layer_input_norm_saves_nothing_without_checkpointing():
    """The frozen embedding's output needs no gradient: the first norm keeps neither its fp32 input nor rstd."""
    full, lora = embedding_bytes(_job()), embedding_bytes(_job(_lora(("q_proj",))))
    assert full - lora == 4 * S * H + 4 * S
    checkpointed = embedding_bytes(_job(_lora(("q_proj",)), recompute="full"))
    assert checkpointed == full
