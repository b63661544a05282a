"""Per-layer activation bytes against a real megatron-core 0.16.1 forward on CPU (saved-tensor hooks).

The CPU path keeps the softmax in fp32 and dropout masks in the activation dtype (CUDA's fused kernels keep
16-bit probabilities and 1-byte masks), so guard is asked for those two dtypes; everything else is the
accounting guard uses on GPUs. See tests/megatron_activation_oracle.py for how the bytes are measured.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from guard.memory.activations import layer_terms
from guard.memory.architecture import Architecture
from guard.memory.setup import Setup

pytest.importorskip("megatron.core")
pytest.importorskip("torch")

CASES = {
    "gpt_layernorm_gelu_dropout": dict(layers=2, hidden=256, heads=8, ffn=1024, vocab=1024, seq=128, batch=2,
                                       dropout=0.1),
    "gpt_no_dropout": dict(layers=2, hidden=256, heads=8, ffn=1024, vocab=1024, seq=128, batch=2),
    "gqa_swiglu_rope": dict(layers=2, hidden=256, heads=8, groups=2, ffn=688, vocab=1024, seq=128, batch=2,
                            swiglu=True, bias=False, position="rope"),
}


@pytest.fixture(scope="module")
def measured(tmp_path_factory) -> dict:
    folder = tmp_path_factory.mktemp("acts")
    (folder / "cases.json").write_text(json.dumps(CASES))
    script = Path(__file__).with_name("megatron_activation_oracle.py")
    proc = subprocess.run([sys.executable, str(script), str(folder / "cases.json"), str(folder / "out.json")],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads((folder / "out.json").read_text())


@pytest.mark.parametrize("name", list(CASES))
def test_layer_activations_match_megatron_core_on_cpu(measured, name):
    c = CASES[name]
    arch = Architecture(num_layers=c["layers"], hidden=c["hidden"], heads=c["heads"],
                        query_groups=c.get("groups") or c["heads"], kv_channels=c["hidden"] // c["heads"],
                        ffn_hidden=c["ffn"], vocab=c["vocab"], max_positions=c["seq"],
                        gated_mlp=c.get("swiglu", False), position_embedding=c.get("position", "learned_absolute"),
                        linear_bias=c.get("bias", True), hidden_dropout=c.get("dropout", 0.0),
                        attention_dropout=c.get("dropout", 0.0))
    setup = Setup(arch=arch, framework="megatron", world_size=1, seq_length=c["seq"], micro_batch=c["batch"],
                  attention="unfused", mask_bytes=2, softmax_bytes=4)
    predicted = sum(layer_terms(setup, 1).values())
    # the last layer: layer 0 also saves the causal mask, once for the whole model
    real = measured[name]["per_layer"][-1]
    # 1 %: the unfused rotary embedding keeps cos/sin copies per layer (4 s d bytes), fused RoPE does not
    assert predicted == pytest.approx(real, rel=0.01), (name, predicted, real)


def test_dropout_costs_what_the_paper_says(measured):
    """Korthikanti: attention dropout keeps a mask and an output (here 2 + 2 bytes) per score, hidden dropout
    two masks of s b h; the difference between the two GPT runs is exactly that."""
    c = CASES["gpt_no_dropout"]
    s, b, h, a = c["seq"], c["batch"], c["hidden"], c["heads"]
    extra = measured["gpt_layernorm_gelu_dropout"]["per_layer"][-1] - measured["gpt_no_dropout"]["per_layer"][-1]
    # fp32 softmax (4) feeds dropout, whose 16-bit output (2) and mask (2) are kept instead of a 16-bit copy (2)
    assert extra == 2 * a * s * s * b + 2 * 2 * s * b * h
