"""The step-time model's kernel speeds against the public kernel measurements they come from, and the terms the
planted step-time bugs broke, each against a hand count from its source."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from guard.intake.read import read
from guard.intake.request import Request
from guard.memory.gpu_choice import choose_gpu
from guard.plan.collectives import collective_seconds
from guard.plan.hardware import hardware
from guard.plan.layer_time import layer_time
from guard.plan.step_time import step_time
from guard.settings import Settings as GuardSettings

A100 = hardware(choose_gpu("A100-80GB"), "bf16")
H100 = hardware(choose_gpu("H100-SXM"), "bf16")


def megatron_job(args: str, world: int):
    chosen = GuardSettings()
    chosen.world_size = world
    return read(Request(megatron_args=(args,)), chosen).job.required()


@pytest.mark.parametrize("nbytes, microseconds", [
    # nccl-tests all_reduce_perf on 8 A100 (stas00/ml-engineering network/README.md#L1216-L1241): the time column
    (32768, 43.83), (1 << 20, 101.9), (64 << 20, 684.6), (1 << 30, 8203.9), (16 << 30, 127997)])
def test_an_all_reduce_takes_the_time_nccl_tests_measured(nbytes, microseconds):
    assert collective_seconds(A100, "all_reduce", nbytes, 8, False) * 1e6 == pytest.approx(microseconds, rel=0.01)


def test_a_tiny_all_reduce_costs_the_smallest_measured_message():
    assert collective_seconds(A100, "all_reduce", 8, 8, False) == collective_seconds(A100, "all_reduce", 32768, 8,
                                                                                        False)


def test_a_large_gemm_runs_at_the_measured_maximum():
    """MAMF on H100 SXM: 794.5 TFLOP/s in bf16 (ml-engineering compute/accelerator/README.md#L354). A GEMM of
    2 x 8192 x 8192 x 8192 = 1.1 TFLOP (>= 128 GFLOP: no size fall) over 2048 tiles of 256 x 128 on 132 SMs
    (16 waves, 2048 / 2112 filled)."""
    seconds = H100.gemm_seconds(8192, 8192, 8192)
    assert seconds == pytest.approx(2 * 8192 ** 3 / (794.5e12 * 2048 / 2112), rel=1e-3)


def test_fp8_gemms_fall_at_small_k():
    """DeepGEMM's FP8 table (README.md#L54-L59): K = 512 runs at 775 of the 1520 TFLOP/s of K = 16384."""
    fp8 = hardware(choose_gpu("H100-SXM"), "bf16")
    big, small = fp8.gemm_seconds(4096, 32768, 16384, fp8=True), fp8.gemm_seconds(4096, 32768, 512, fp8=True)
    rate_big, rate_small = 2 * 4096 * 32768 * 16384 / big, 2 * 4096 * 32768 * 512 / small
    assert rate_small / rate_big == pytest.approx(775 / 1520, rel=0.01)
    assert rate_big == pytest.approx(1402.6e12 * (4096 / 256 * 32768 / 128) / (32 * 132), rel=0.01)  # MAMF fp8


def test_flash_attention_runs_at_the_published_rate():
    """cuDNN causal forward at head dim 128, 8k tokens on H100: 529 TFLOP/s (flash-attention assets/
    flash3_fp16_fwd.png), counting 4 s^2 h d / 2 FLOPs (benchmark_flash_attention.py)."""
    batched, s, d = 16, 8192, 128
    seconds = H100.attention_seconds("cudnn", batched, s, s, d, backward=False)
    assert seconds == pytest.approx(4 * batched * s * s * d / 2 / 529e12, rel=1e-6)


def test_memory_bound_kernels_at_the_measured_hbm_fraction_plus_the_floor():
    """H100: ~3050 of 3350 GB/s on a large copy, and 1.2 us for the smallest kernel (pytorch#161104)."""
    assert H100.memory_seconds(1e9) == pytest.approx(1e9 / 3050e9 + 1.2e-6, rel=0.01)


TP = ("--num-layers 2 --hidden-size 4096 --num-attention-heads 32 --seq-length 2048 --max-position-embeddings 2048 "
      "--micro-batch-size 1 --global-batch-size 8 --vocab-size 51200 --bf16 --tensor-model-parallel-size 4")


def test_tp_runs_two_all_reduces_per_layer_each_way():
    """Shoeybi et al. 2019 (Megatron-LM, fig. 4): without SP a layer all-reduces its [s, b, h] output twice in the
    forward (after attention and after the MLP) and twice in the backward."""
    job = megatron_job(TP, 4)
    lt = layer_time(job, H100, 0)
    one = collective_seconds(H100, "all_reduce", 2 * 2048 * 1 * 4096, 4, False)
    assert lt.forward.comm["TP all-reduce"] == pytest.approx(2 * one)
    assert lt.backward.comm["TP all-reduce"] == pytest.approx(2 * one)


def test_tp_comm_overlap_hides_what_the_gemms_cover():
    job = megatron_job(TP, 4)
    plain = layer_time(job, H100, 0)
    job.step.tp_comm_overlap = True
    hidden = layer_time(job, H100, 0)
    gemms = sum(v for k, v in plain.forward.gemm.items() if "core" not in k)
    assert hidden.forward.comm["TP all-reduce"] == pytest.approx(max(0.0, plain.forward.comm["TP all-reduce"]
                                                                     - gemms))


PIPE = ("--num-layers 16 --hidden-size 2048 --num-attention-heads 16 --seq-length 2048 --max-position-embeddings "
        "2048 --micro-batch-size 1 --global-batch-size 64 --vocab-size 51200 --bf16 --pipeline-model-parallel-size 4")


def test_the_interleaved_bubble_is_the_plain_bubble_over_v():
    """Narayanan et al. 2021: the bubble is (p - 1) / v of the stage's time; the stages here differ only by the
    embedding and the loss, so v = 2 halves it to within those."""
    plain = step_time(megatron_job(PIPE, 4), H100)
    interleaved = step_time(megatron_job(PIPE + " --num-layers-per-virtual-pipeline-stage 2", 4), H100)
    assert interleaved.terms["pipeline bubble"] / plain.terms["pipeline bubble"] == pytest.approx(0.5, rel=0.05)


def test_fp8_runs_the_linear_gemms_faster_and_adds_its_casts():
    job = megatron_job(TP.replace("--tensor-model-parallel-size 4", ""), 1)
    base = layer_time(job, H100, 0)
    fp8 = layer_time(dataclasses.replace(job, step=dataclasses.replace(job.step, fp8="hybrid")), H100, 0)
    assert fp8.forward.gemm["MLP fc1"] < base.forward.gemm["MLP fc1"]
    assert "FP8 casts" in fp8.forward.memory and "FP8 casts" not in base.forward.memory


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(layers=st.sampled_from([8, 24, 48]), hidden=st.sampled_from([1024, 4096, 8192, 12288]),
       heads=st.sampled_from([8, 32, 64]), seq=st.sampled_from([1024, 4096, 8192]), tp=st.sampled_from([1, 2, 8]),
       pp=st.sampled_from([1, 4]), micro=st.sampled_from([1, 2, 4]), gpu=st.sampled_from(
           ["A100-80GB", "H100-SXM", "H200", "B200", "GB200", "MI300X", "L40S"]),
       recompute=st.sampled_from(["", " --recompute-granularity full --recompute-method uniform "
                                      "--recompute-num-layers 1", " --recompute-granularity selective"]))
def test_no_layout_beats_the_gemm_table(layers, hidden, heads, seq, tp, pp, micro, gpu, recompute):
    """A predicted MFU above the largest fraction of peak the GEMM table lets a GEMM reach is a bug: every FLOP
    runs in a GEMM or an attention kernel, neither faster than that. The FLOPs are Narayanan et al.'s count
    (eq. 3, no recompute) with the causal mask's half of the score square left out, since flash attention skips
    it: 72 B s L h^2 (1 + s / 12h + V / 12Lh); the MFU guard prints counts the whole square, as Megatron does."""
    world = tp * pp * 2
    args = (f"--num-layers {layers} --hidden-size {hidden} --num-attention-heads {heads} --seq-length {seq} "
            f"--max-position-embeddings {seq} --micro-batch-size {micro} --global-batch-size {micro * 2 * 8} "
            f"--vocab-size 51200 --bf16 --tensor-model-parallel-size {tp} --pipeline-model-parallel-size {pp}"
            + (" --sequence-parallel" if tp > 1 else "") + recompute)
    job = megatron_job(args, world)
    hw = hardware(choose_gpu(gpu), "bf16")
    seconds = step_time(job, hw).seconds
    batch = micro * 2 * 8
    executed = 72 * batch * seq * layers * hidden ** 2 * (1 + seq / (12 * hidden) + job.vocab / (12 * layers * hidden))
    assert 0 < executed / (seconds * world * hw.peak_flops) <= hw.speeds.gemm_fraction("bf16")


def test_current_scaling_reads_each_tensor_once_more():
    """Transformer Engine's current ("tensorwise") scaling takes the amax in its own pass (2 bytes read per
    element) before the cast (2 read, 1 written): 5 bytes against delayed scaling's 3."""
    job = megatron_job(TP.replace("--tensor-model-parallel-size 4", ""), 1)
    casts = {}
    for recipe in ("delayed", "tensorwise"):
        fp8 = dataclasses.replace(job, step=dataclasses.replace(job.step, fp8="hybrid", fp8_recipe=recipe))
        casts[recipe] = layer_time(fp8, H100, 0).forward.memory["FP8 casts"]
    floor = 1.2e-6
    assert (casts["tensorwise"] - floor) / (casts["delayed"] - floor) == pytest.approx(5 / 3)


def test_an_all_to_all_runs_at_the_speed_of_its_per_peer_pieces():
    """8 ranks exchanging 64 MiB each send 8 MiB pieces: the bus bandwidth nccl-tests measured for 8 MiB
    messages (109.93 of 234.89 GB/s on A100), not for 64 MiB (171.54)."""
    seconds = collective_seconds(A100, "all_to_all", 64 << 20, 8, False)
    assert seconds == pytest.approx(7 / 8 * (64 << 20) / (234.89e9 * 0.468), rel=0.01)


MOE = ("--num-layers 4 --hidden-size 1024 --ffn-hidden-size 4096 --num-attention-heads 16 --num-experts 8 "
       "--moe-router-topk 2 --seq-length 2048 --max-position-embeddings 2048 --micro-batch-size 1 "
       "--global-batch-size 64 --bf16 --vocab-size 32000 --moe-grouped-gemm --expert-model-parallel-size {ep}")


def _moe_terms(ep: int, imbalance: float) -> dict:
    job = megatron_job(MOE.format(ep=ep), 8)
    job.step.moe_imbalance = imbalance
    lt = layer_time(job, H100, 0)
    return {**lt.forward.gemm, **lt.forward.memory, **lt.forward.comm}


def test_a_stated_imbalance_prices_the_busiest_expert_rank():
    """--moe-imbalance 2: the busiest EP rank gets twice its share of the 2048 x top-2 routed tokens. Its expert
    GEMMs do twice the FLOPs (at no lower efficiency, so at most twice the time), and every all-to-all piece it
    receives doubles: 2048 tokens x 2 (top-k) x 1024 hidden x 2 bytes x 2, split over the 8 ranks."""
    even, busy = _moe_terms(8, 1.0), _moe_terms(8, 2.0)
    for term in ("experts fc1", "experts fc2"):
        assert 1.5 < busy[term] / even[term] <= 2.0 + 1e-9
    assert busy["router"] == even["router"]  # every rank routes its own tokens
    doubled = 2048 * 2 * 1024 * 2 * 2
    assert busy["EP all-to-all"] == pytest.approx(2 * collective_seconds(H100, "all_to_all", doubled, 8, False))
    # EP = 1: every expert is local, the rank's routed tokens are the same whatever the routing
    assert _moe_terms(1, 2.0) == _moe_terms(1, 1.0)
