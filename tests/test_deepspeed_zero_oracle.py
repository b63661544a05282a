"""guard's ZeRO model states against DeepSpeed 0.19.8 itself: 2 CPU ranks under torchrun, a census of live
tensors at the end of backward (tests/deepspeed_zero_census.py). Skips without deepspeed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from guard.memory.architecture import Architecture
from guard.memory.from_deepspeed import apply_config
from guard.memory.overheads import buffers
from guard.memory.params import Inventory
from guard.memory.setup import Setup
from guard.memory.states import zero_states

pytest.importorskip("deepspeed")
pytestmark = pytest.mark.oracle

CENSUS = Path(__file__).with_name("deepspeed_zero_census.py")
RANKS = 2
SLACK = 4096  # the input batch and a few scalars (loss scale, step counters)


def _run(stage: int, out: Path) -> list[dict]:
    out.mkdir()
    env = dict(os.environ, OMP_NUM_THREADS="1")
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(RANKS),
                           "--master-port", str(29600 + stage), str(CENSUS), str(stage), str(out)],
                          capture_output=True, text=True, timeout=600, env=env, cwd=out)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return [json.loads((out / f"{r}.json").read_text()) for r in range(RANKS)]


@pytest.fixture(scope="module")
def measured(tmp_path_factory) -> dict[int, list[dict]]:
    root = tmp_path_factory.mktemp("zero")
    return {stage: _run(stage, root / str(stage)) for stage in range(4)}


def _predict(stage: int, psi: int):
    from tests.deepspeed_zero_census import REDUCE_BUCKET

    arch = Architecture(num_layers=1, hidden=512, heads=1, query_groups=1, kv_channels=512, ffn_hidden=512, vocab=1)
    setup = Setup(arch=arch, framework="deepspeed", world_size=RANKS)
    config = {"bf16": {"enabled": True}, "zero_optimization": {"stage": stage, "reduce_bucket_size": REDUCE_BUCKET}}
    apply_config(setup, config, "census")
    inv = Inventory()
    inv.add("tp_sharded", "census model", psi)
    return zero_states(setup, inv), buffers(setup, psi, 0, 0, 2)[0], REDUCE_BUCKET * 2


@pytest.mark.parametrize("stage", [0, 1, 2, 3])
def test_zero_model_states_match_deepspeed(measured, stage):
    for rank in measured[stage]:
        states, bufs, bucket = _predict(stage, rank["psi"])
        seen = rank["after_backward"]
        fp32, bf16 = seen.get("torch.float32", 0), seen.get("torch.bfloat16", 0)
        # fp32: master weights + Adam moments (whole on stage 0, this rank's partition on 1-3)
        assert abs(fp32 - states.optimizer) <= SLACK, (stage, fp32, states.optimizer)
        # bf16: parameters + gradients (+ the reduce bucket, which stage 3 always keeps)
        extra = bf16 - (states.params + states.grads)
        if stage == 3:
            assert abs(extra - bucket) <= SLACK
            assert "ZeRO-3 reduce bucket" in bufs
        else:
            assert 0 <= extra <= bucket + SLACK, (stage, extra)


def test_partitions_shrink_with_the_stage(measured):
    """The oracle itself orders the stages as the ZeRO paper says (a check on the census, not on guard)."""
    total = {s: sum(measured[s][0]["after_backward"].values()) for s in range(4)}
    assert total[3] < total[2] <= total[1] < total[0]
