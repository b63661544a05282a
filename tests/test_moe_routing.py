"""MoE routing in the memory model, from megatron-core 0.16.1's router (moe_utils.py get_capacity,
apply_router_token_dropping): the expert activations of capacity-factor routing, padded and unpadded, and of
dropless routing under a stated imbalance. Expected token counts by hand."""

from __future__ import annotations

import json

import pytest

from conftest import run_guard

# 8 experts, top-2, EP 4 on 8 GPUs (DP 8, TP 1): 2048 tokens a microbatch on each rank
MOE = ("torchrun --nproc_per_node 8 pretrain_gpt.py --num-layers 2 --hidden-size 512 --num-attention-heads 8 "
       "--ffn-hidden-size 1024 --seq-length 2048 --max-position-embeddings 2048 --micro-batch-size 1 "
       "--global-batch-size 8 --bf16 --vocab-size 32000 --num-experts 8 --moe-router-topk 2 "
       "--expert-model-parallel-size 4 --use-distributed-optimizer --moe-token-dispatcher-type alltoall")
EXPERT_INPUT = "permuted tokens (expert input)"  # act x routed tokens x hidden


def _routed(tmp_path, extra: str = "", *args: str) -> float:
    """Routed token copies on the busiest rank, read back from the expert-input term (2 bytes x 512 a token)."""
    from guard.intake.read import read
    from guard.intake.request import Request
    from guard.memory.activations import layer_terms
    from guard.settings import Settings

    script = tmp_path / "run.sh"
    script.write_text(f"{MOE} {extra}\n")
    job = read(Request(paths=(str(script),)), Settings()).job.required()
    if args:
        job.step.moe_imbalance = float(args[0])
    return layer_terms(job, 0)[EXPERT_INPUT] / (2 * 512)


def test_dropless_balanced_routing_gives_each_rank_its_tokens_times_top_k(tmp_path):
    assert _routed(tmp_path) == 2048 * 2


def test_a_stated_imbalance_scales_the_busiest_ranks_experts(tmp_path):
    assert _routed(tmp_path, "", "1.5") == 2048 * 2 * 1.5


@pytest.mark.parametrize(("factor", "padded", "routed"), [
    # capacity = ceil(2048 x 2 / 8 x 1.25) = 640 per expert; padded: exactly 8 x 640
    (1.25, True, 8 * 640),
    # unpadded: at most 8 x 640 = 5120, and balanced routing sends 4096
    (1.25, False, 4096),
    # a factor below 1 drops tokens: ceil(512 x 0.5) = 256 per expert, 8 x 256 = 2048 < 4096
    (0.5, False, 2048)])
def test_capacity_factor_routing(tmp_path, factor, padded, routed):
    extra = f"--moe-expert-capacity-factor {factor}" + (" --moe-pad-expert-input-to-capacity" if padded else "")
    assert _routed(tmp_path, extra) == routed


def test_the_estimate_takes_the_stated_imbalance(tmp_path):
    script = tmp_path / "run.sh"
    script.write_text(MOE + "\n")
    balanced = json.loads(run_guard("estimate", str(script), "--format", "json")[1])
    skewed = json.loads(run_guard("estimate", str(script), "--format", "json", "--moe-imbalance", "2")[1])
    assert skewed["ranks"][0]["components"]["activations"] > balanced["ranks"][0]["components"]["activations"]


@pytest.mark.parametrize(("factor", "padded"), [(1.25, True), (1.25, False), (0.5, False)])
def test_megatron_cores_router_keeps_what_guard_prices(tmp_path, factor, padded):
    """apply_router_token_dropping itself on CPU: the token copies its final routing map keeps on one source rank,
    from a skewed top-2 routing of 2048 tokens over 8 experts, never exceed guard's count, and equal it padded."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("megatron.core")
    from megatron.core.transformer.moe.moe_utils import apply_router_token_dropping

    torch.manual_seed(0)
    logits = torch.randn(2048, 8) + torch.linspace(0, 2, 8)  # later experts favoured: an unbalanced routing
    probs, top = torch.topk(torch.softmax(logits, -1), k=2, dim=-1)
    routing_map = torch.zeros(2048, 8, dtype=torch.bool).scatter(1, top, True)
    dense = torch.zeros(2048, 8).scatter(1, top, probs)
    _, final_map = apply_router_token_dropping(dense, routing_map, router_topk=2, capacity_factor=factor,
                                               pad_to_capacity=padded)
    extra = f"--moe-expert-capacity-factor {factor}" + (" --moe-pad-expert-input-to-capacity" if padded else "")
    priced = _routed(tmp_path, extra)
    kept = int(final_map.sum())
    assert kept == priced if padded else kept <= priced
