"""guard's per-rank parameter counts, bucket by bucket, against real megatron-core GPT models on the meta device."""

from __future__ import annotations

import pytest

from tests.fidelity.megatron_params import CASES, collect
from tests.fidelity.rows import failures

pytestmark = [pytest.mark.fidelity]
pytest.importorskip("megatron.core")
pytest.importorskip("torch")


@pytest.fixture(scope="module")
def rows(tmp_path_factory):
    return collect(tmp_path_factory.mktemp("megatron_params"))


@pytest.mark.parametrize("name", list(CASES))
def test_every_rank_and_bucket_matches_megatron_core(rows, name):
    mine = [r for r in rows if r.case.split()[0] == name]
    assert {r.component for r in mine} >= {"embedding", "head", "expert", "tp_sharded", "tp_replicated", "total"}
    assert not failures(mine), "\n".join(failures(mine))


def test_hand_count_of_the_tied_gpt_tp2_pp2(rows):
    # h = 512, 8 layers (4 per stage), ffn 2048, LayerNorm, biases, 1024 learned positions, TP 2;
    # vocab 32,000 is a multiple of 128 x TP, so it is not padded.
    h, ffn, tp, vocab, positions, layers = 512, 2048, 2, 32000, 1024, 4
    # column/row-parallel weights and column-parallel biases, split over TP:
    # QKV h x 3h + 3h, attention output h x h, fc1 h x ffn + ffn, fc2 ffn x h = 1,574,656 per layer
    sharded = (h * 3 * h + 3 * h + h * h + h * ffn + ffn + ffn * h) // tp * layers
    # on every TP rank: two LayerNorms (weight + bias) and the row-parallel biases of attention output and fc2
    replicated = (2 * 2 * h + h + h) * layers
    hand = {
        "pp0": {"embedding": vocab * h // tp + positions * h, "head": 0, "tp_sharded": sharded,
                "tp_replicated": replicated},
        # the last stage keeps its own copy of the tied word embeddings, plus the final LayerNorm
        "pp1": {"embedding": 0, "head": vocab * h // tp + 2 * h, "tp_sharded": sharded,
                "tp_replicated": replicated},
    }
    assert hand["pp0"]["embedding"] == 8_716_288 and sharded == 6_298_624 and replicated == 12_288
    got = {(r.case.split()[1], r.component): r for r in rows if r.case.split()[0] == "gpt_tied_layernorm_bias_tp2_pp2"}
    for stage, buckets in hand.items():
        for bucket, count in buckets.items():
            assert got[stage, bucket].measured == count, (stage, bucket)
            assert got[stage, bucket].predicted == count, (stage, bucket)
        assert got[stage, "total"].measured == sum(buckets.values())
