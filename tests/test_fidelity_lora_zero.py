"""guard's LoRA model states, component by component and rank by rank, against peft + DeepSpeed on 1 and 2 CPU
ranks under ZeRO 0-3 (tests/fidelity/lora_zero.py), read through a LLaMA-Factory training config."""

from __future__ import annotations

import pytest

from tests.fidelity.lora_zero import MODEL, STAGES, WORLD_SIZES, collect
from tests.fidelity.rows import failures

pytest.importorskip("deepspeed")
pytest.importorskip("peft")
pytestmark = [pytest.mark.fidelity, pytest.mark.oracle]


@pytest.fixture(scope="module")
def rows(tmp_path_factory):
    return collect(tmp_path_factory.mktemp("lora_zero"))


def test_every_stage_and_rank_was_measured(rows):
    seen = {r.case for r in rows}
    assert seen == {f"{w} rank{'s' if w > 1 else ''} / rank {r} / zero{s}" for w in WORLD_SIZES for r in range(w)
                    for s in STAGES}


@pytest.mark.parametrize("component", ["frozen base parameters", "trainable adapter parameters",
                                       "parameters (end of backward)", "gradients (end of backward)",
                                       "fp32 master weights", "optimizer moments (after step)"])
def test_each_component_matches_deepspeed_to_the_byte(rows, component):
    chosen = [r for r in rows if r.component == component]
    assert chosen and not failures(chosen), "\n".join(failures(chosen))


def test_zero3_partitions_the_frozen_base_and_keeps_the_adapter_fp32(rows):
    """Hand check on the census: the tiny Llama has 619,136 weights (2 x 128,000 embedding and head, 2 layers of
    181,504, the final norm 128); ZeRO-3 on 2 ranks keeps half of them in bf16 per rank, while the adapter (built
    after zero.Init) is not cast and stays fp32."""
    h, ffn, v, kv = MODEL["hidden_size"], MODEL["intermediate_size"], MODEL["vocab_size"], 64
    layer = h * h * 2 + h * kv * 2 + 3 * h * ffn + 2 * h
    base = 2 * v * h + 2 * layer + h
    assert base == 619_136
    frozen = {r.measured for r in rows if r.component == "frozen base parameters" and r.case.endswith("zero3")
              and r.case.startswith("2 ranks")}
    assert frozen == {base * 2 // 2}
    per_layer = 8 * sum(i + o for i, o in ((h, h), (h, kv), (h, kv), (h, h), (h, ffn), (h, ffn), (ffn, h)))
    adapter = 2 * per_layer
    trainable = {r.measured for r in rows if r.component == "trainable adapter parameters"
                 and r.case == "1 rank / rank 0 / zero3"}
    assert trainable == {adapter * 4}
