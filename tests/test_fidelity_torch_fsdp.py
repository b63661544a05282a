"""guard's torch FSDP2 shards against torch's own `fully_shard` on 2 and 3 CPU ranks (tests/fidelity/
torch_fsdp_probe.py), to the byte: parameters and gradients in padded chunks on every rank, optimizer states in the
rank's own rows; and Megatron-LM's --use-torch-fsdp2 states built on them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import run_guard
from guard.memory.torch_fsdp import local_bytes, padded_bytes
from tests.fidelity.launch import run_torchrun_probe

pytestmark = [pytest.mark.fidelity, pytest.mark.oracle]
PROBE = Path(__file__).resolve().parent / "fidelity" / "torch_fsdp_probe.py"


@pytest.fixture(scope="module", params=[2, 3])
def measured(request, tmp_path_factory):
    world = request.param
    return world, run_torchrun_probe(PROBE, world, {}, tmp_path_factory.mktemp(f"fsdp{world}"), 600)


@pytest.mark.parametrize("policy", ["fp32", "bf16_mp"])
def test_states_per_rank_to_the_byte(measured, policy):
    """The mixed-precision policy casts what is gathered, not what is kept: fp32 shards, gradients and moments."""
    world, ranks = measured
    for rank, seen in enumerate(ranks):
        case = seen[policy]
        shapes = [tuple(s) for s in case["shapes"].values()]
        assert case["params"] == padded_bytes(shapes, world, 4)
        assert case["grads"] == padded_bytes(shapes, world, 4)
        assert case["moments"] == 2 * local_bytes(shapes, world, rank, 4)


def test_three_ranks_pad_and_the_last_rank_holds_fewer_moments(measured):
    """1000 embedding rows over 3 ranks: chunks of 334, 334, 332; every rank stores 334 rows of weights."""
    world, ranks = measured
    if world != 3:
        pytest.skip("padding shows on 3 ranks")
    assert ranks[0]["fp32"]["params"] == ranks[2]["fp32"]["params"]
    assert ranks[2]["fp32"]["moments"] < ranks[0]["fp32"]["moments"]


def test_megatron_torch_fsdp2_shards_every_state(tmp_path):
    """Megatron --use-torch-fsdp2 on 8 ranks (DP 8): bf16 weights and gradients, 12 bytes of fp32 main weights and
    moments, each a parameter count / 8; the fp32 gradient copies only in the step."""
    script = tmp_path / "run.sh"
    script.write_text("torchrun --nproc_per_node 8 pretrain_gpt.py --num-layers 8 --hidden-size 1024 "
                      "--num-attention-heads 16 --seq-length 2048 --max-position-embeddings 2048 --micro-batch-size 1 "
                      "--global-batch-size 64 --bf16 --vocab-size 32000 --use-torch-fsdp2 "
                      "--no-gradient-accumulation-fusion\n")
    code, out, err = run_guard("estimate", str(script), "--format", "json")
    assert code == 0, out + err
    data = json.loads(out)
    comps = data["ranks"][0]["components"]
    total = data["model"]["param_count"]
    assert comps["params"] == comps["grads"] == -(-total // 8) * 2
    assert comps["optimizer"] == -(-total // 8) * 12
