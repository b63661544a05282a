"""guard's per-layer activations against what real megatron-core 0.16.1 layers save for backward on CPU (2 %)."""

from __future__ import annotations

import pytest

from tests.fidelity.megatron_activations import CASES, collect
from tests.fidelity.rows import failures

pytestmark = [pytest.mark.fidelity]
pytest.importorskip("megatron.core")
pytest.importorskip("torch")


@pytest.fixture(scope="module")
def rows(tmp_path_factory):
    return collect(tmp_path_factory.mktemp("megatron_activations"))


def measured(rows, name: str, component: str = "layer activations") -> float:
    return next(r.measured for r in rows if r.case == f"megatron-core {name}" and r.component == component)


@pytest.mark.parametrize("name", list(CASES))
def test_layer_activations_match_megatron_core_on_cpu(rows, name):
    mine = [r for r in rows if r.case == f"megatron-core {name}"]
    expected = {"layer activations", "global memory buffer"} | ({"multi-token prediction"} if CASES[name].get("mtp")
                                                                 else set()) | ({"recompute working set"} if CASES[name].get("recompute") == "full" else set())
    assert {r.component for r in mine} == expected
    assert not failures(mine), "\n".join(failures(mine))


def test_dropout_costs_what_the_cpu_path_keeps(rows):
    """Korthikanti: attention dropout keeps a mask and an output per score, hidden dropout two masks of s b h.
    On CPU the fp32 softmax (4 B) feeds dropout, whose 16-bit output (2) and mask in the activation dtype (2)
    are kept instead of the 16-bit copy of the probabilities (2) that the second matmul keeps without dropout;
    the two hidden dropout masks are 2 B each."""
    c = CASES["gpt_bf16_no_dropout"]
    s, b, h, a = c["seq"], c["batch"], c["hidden"], c["heads"]
    extra = measured(rows, "gpt_bf16_dropout") - measured(rows, "gpt_bf16_no_dropout")
    assert extra == 2 * a * s * s * b + 2 * 2 * s * b * h


def test_full_recompute_keeps_only_each_layers_input(rows):
    c = CASES["full_uniform_1_gpt_bf16_dropout"]
    assert measured(rows, "full_uniform_1_gpt_bf16_dropout") == 2 * c["seq"] * c["batch"] * c["hidden"]
    # the recomputed layer saves what the layer saves without recompute
    assert measured(rows, "full_uniform_1_gpt_bf16_dropout", "recompute working set") == \
        measured(rows, "gpt_bf16_dropout")


def test_layernorm_recompute_drops_both_norm_outputs_and_statistics(rows):
    """Each LayerNorm's 16-bit output (2 s b h) and its mean and rstd (2 + 2 B per token on CPU) are gone."""
    c = CASES["gpt_bf16_dropout"]
    sb, h = c["seq"] * c["batch"], c["hidden"]
    saved = measured(rows, "gpt_bf16_dropout") - measured(rows, "selective_layernorm_gpt_bf16_dropout")
    assert saved == 2 * (2 * sb * h + 4 * sb)
