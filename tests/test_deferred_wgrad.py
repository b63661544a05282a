"""--defer-embedding-wgrad-compute priced from megatron-core 0.16.1's code (tensor_parallel/layers.py appends the
output layer's input in forward and its logits gradient in backward; schedules.py drains them after the flush).
No CPU oracle: the feature requires --gradient-accumulation-fusion (a CUDA kernel). Expected bytes by hand."""

from __future__ import annotations

import json

import pytest

from conftest import run_guard

BASE = ("torchrun --nproc_per_node 8 pretrain_gpt.py --num-layers 8 --hidden-size 1024 --num-attention-heads 16 "
        "--seq-length 2048 --max-position-embeddings 2048 --micro-batch-size 1 --global-batch-size 64 "
        "--tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 --sequence-parallel --bf16 "
        "--vocab-size 128000 --use-distributed-optimizer")


def _last_stage(tmp_path, extra: str) -> dict:
    script = tmp_path / "run.sh"
    script.write_text(f"export CUDA_DEVICE_MAX_CONNECTIONS=1\n{BASE} {extra}\n")
    code, out, err = run_guard("estimate", str(script), "--format", "json")
    assert code == 0, out + err
    return json.loads(out)["ranks"][-1]


@pytest.mark.parametrize(("extra", "deferred"), [
    # 64 / (1 x DP 2) = 32 microbatches, all deferred (limit 0)
    ("--defer-embedding-wgrad-compute", 32),
    ("--defer-embedding-wgrad-compute --wgrad-deferral-limit 4", 4)])
def test_the_last_stage_keeps_each_deferred_microbatchs_logits_gradient_and_input(tmp_path, extra, deferred):
    """n x the logits gradient (2048 tokens x 128,000 / TP 2 x 2 bytes) and n - 1 inputs (2048 / TP 2 with SP x
    1024 x 2 bytes) beyond what the loss edge keeps without deferral."""
    plain = _last_stage(tmp_path, "")
    deferring = _last_stage(tmp_path, extra)
    extra_bytes = deferred * 2048 * 64_000 * 2 + (deferred - 1) * 1024 * 1024 * 2
    assert deferring["components"]["logits"] - plain["components"]["logits"] == extra_bytes
    assert deferring["peak_bytes"] - plain["peak_bytes"] >= extra_bytes  # the runtime's allocator share grows too


def test_only_the_loss_stage_defers(tmp_path):
    assert _last_stage(tmp_path, "")["pp_rank"] == 1
    script = tmp_path / "run.sh"
    script.write_text(f"export CUDA_DEVICE_MAX_CONNECTIONS=1\n{BASE} --defer-embedding-wgrad-compute\n")
    first = json.loads(run_guard("estimate", str(script), "--format", "json")[1])["ranks"][0]
    script.write_text(f"export CUDA_DEVICE_MAX_CONNECTIONS=1\n{BASE}\n")
    assert first == json.loads(run_guard("estimate", str(script), "--format", "json")[1])["ranks"][0]
