"""guard's activations of a transformers Llama, full fine-tuning and LoRA, against autograd's saved tensors on CPU
(tests/fidelity/hf_activations.py): each layer to the byte, and what LoRA changes in the rest of the model."""

from __future__ import annotations

import pytest

from tests.fidelity.hf_activations import CASES, REFERENCE, collect
from tests.fidelity.rows import failures

pytest.importorskip("transformers")
pytest.importorskip("peft")
pytestmark = [pytest.mark.fidelity, pytest.mark.oracle, pytest.mark.slow]


@pytest.fixture(scope="module")
def rows(tmp_path_factory):
    return collect(tmp_path_factory.mktemp("hf_activations"))


def test_every_case_was_measured(rows):
    assert {r.case for r in rows if r.component == "one layer"} == set(CASES)


def test_each_layer_matches_the_census_to_the_byte(rows):
    chosen = [r for r in rows if r.component == "one layer"]
    assert chosen and not failures(chosen), "\n".join(failures(chosen))


def test_what_lora_changes_outside_the_layers_matches(rows):
    chosen = [r for r in rows if r.component.startswith("rest of the model")]
    assert len(chosen) == len(CASES) - len(REFERENCE) and not failures(chosen), "\n".join(failures(chosen))


def test_a_padded_batch_costs_the_repeated_kv_and_the_mask_copy(rows):
    """Hand check of the census: h 256, 8 heads of 32, 2 K/V heads, b 2, s 128, bf16. Padding repeats K and V
    from 2 to 8 heads (2 x 2 x 128 x (256 - 64) x 2 bytes) and adds the [2, 1, 128, 128] bf16 mask copy."""
    measured = {r.case: r.measured for r in rows if r.component == "one layer"}
    extra = 2 * 2 * 128 * (256 - 64) * 2 + 2 * 128 * 128 * 2
    assert measured["full, padded batch"] - measured["full, packed batch"] == extra
