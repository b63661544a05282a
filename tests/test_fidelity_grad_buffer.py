"""Megatron's gradient buffer (and the distributed optimizer's parameter buffer) against megatron-core's own
DistributedDataParallel, built on CPU around a small real GPT model (tests/fidelity/megatron_ddp_probe.py).

Megatron-LM runs bf16 with grad_reduce_in_fp32 (validate_args sets accumulate_allreduce_grads_in_fp32), so the
buffer holds 4 bytes per parameter whatever the parameters' dtype. With the distributed optimizer megatron-core
pads every parameter's start to 64 elements and every bucket's end to lcm(DP, 128)
(param_and_grad_buffer.py, _pad_start_of_param_if_needed / _pad_end_of_bucket_if_needed); guard prices the
bucket ends only, so the parameter starts bound its error: under 64 elements per tensor.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from guard.intake.read import read
from guard.intake.request import Request
from guard.memory.estimate import estimate_stage
from guard.settings import Settings
from tests.fidelity.launch import run_json_probe

pytest.importorskip("megatron.core")
PROBE = Path(__file__).parent / "fidelity" / "megatron_ddp_probe.py"
ARGS = ("--num-layers 2 --hidden-size 72 --num-attention-heads 4 --seq-length 128 --max-position-embeddings 128 "
        "--micro-batch-size 1 --global-batch-size 1 --vocab-size 1024")  # the probe's model (MODEL there)


@pytest.fixture(scope="module")
def measured() -> dict:
    return run_json_probe(str(PROBE))


def _guard(flags: str):
    settings = Settings()
    settings.world_size = 1
    return estimate_stage(read(Request(megatron_args=(f"{ARGS} {flags}",)), settings).job.required(), 0)


@pytest.mark.parametrize(("case", "flags"), [("bf16-ddp", "--bf16"), ("fp32-ddp", "")])
def test_the_gradient_buffer_is_four_bytes_per_parameter(measured, case, flags):
    stage = _guard(flags)
    run = measured[case]
    assert stage.inventory.total == run["params"]
    assert stage.components["grads"] == run["grad_bytes"] and run["padding"] == 0


@pytest.mark.parametrize(("case", "flags", "param_bytes"), [("bf16-do", "--bf16", 2), ("fp32-do", "", 4)])
def test_the_distributed_optimizers_buffers_and_their_padding(measured, case, flags, param_bytes):
    stage = _guard(flags + " --use-distributed-optimizer")
    run = measured[case]
    padding_elements = stage.terms["buffers"]["gradient-buffer padding"] / (param_bytes + 4)
    # the bucket end guard prices, and the per-parameter starts it does not, at most 63 elements each
    assert padding_elements <= run["padding"] <= padding_elements + 63 * run["tensors"]
    assert stage.components["grads"] == 4 * run["params"]
    assert run["grad_bytes"] == 4 * (run["params"] + run["padding"])
    # the parameters live in the parameter buffer: guard's params term is that buffer without its padding
    assert stage.components["params"] == run["param_buffer_bytes"] - param_bytes * run["padding"]
