"""The step-time model's parts against numbers derived by hand or from the papers (not from guard's code)."""

from __future__ import annotations

import dataclasses

import pytest

from guard.intake.read import read
from guard.intake.request import Request
from guard.memory.gpu_choice import choose_gpu
from guard.plan.collectives import collective_seconds
from guard.plan.hardware import Hardware, NoSpeeds, hardware
from guard.plan.model_flops import step_model_flops
from guard.plan.pipeline_sim import simulate
from guard.plan.step_time import step_time
from guard.settings import Settings

# A made-up GPU with round numbers: 100 TFLOP/s, 10 SMs, 1 TB/s HBM, 100 GB/s NVLink, 10 GB/s network.
TOY = Hardware("toy", 100e12, 10, 1e12, 100e9, 10e9, 20e9, 200e9)


def megatron_job(args: str, world: int):
    settings = Settings()
    settings.world_size = world
    return read(Request(megatron_args=(args,)), settings).job.required()


GPT = ("--num-layers 24 --hidden-size 2304 --num-attention-heads 24 --seq-length 2048 --max-position-embeddings 2048 "
       "--micro-batch-size 2 --global-batch-size 64 --vocab-size 51200 --bf16")


def test_model_flops_are_the_ptdp_count():
    """Narayanan et al. 2021, eq. 3 without recompute: 72 B s L h^2 (1 + s/(6h) + V/(12 L h))."""
    job = megatron_job(GPT, 1)
    b, s, layers, h, v = 64, 2048, 24, 2304, 51200
    expected = 72 * b * s * layers * h * h * (1 + s / (6 * h) + v / (12 * layers * h))
    assert step_model_flops(job.arch, job.seq_length, v, b) == pytest.approx(expected, rel=1e-12)


def test_ring_collectives_by_hand():
    bandwidth, latency = TOY.link(across_nodes=False)
    assert bandwidth == pytest.approx(100e9 * 0.6)  # Calculon's NVLink efficiency, from the catalog
    nbytes, n = 1e9, 8
    assert collective_seconds(TOY, "all_reduce", nbytes, n, False) == pytest.approx(
        2 * 7 / 8 * nbytes / bandwidth + 2 * 7 * latency)
    assert collective_seconds(TOY, "all_gather", nbytes, n, False) == pytest.approx(
        7 / 8 * nbytes / bandwidth + 7 * latency)
    net, net_latency = TOY.link(across_nodes=True)
    assert net == pytest.approx(10e9 * 0.9)
    assert collective_seconds(TOY, "reduce_scatter", nbytes, 2, True) == pytest.approx(nbytes / 2 / net + net_latency)
    assert collective_seconds(TOY, "all_reduce", nbytes, 1, True) == 0.0


def test_gemm_wave_quantization_by_hand():
    """Tiles of 256 x 128 over 10 SMs: 10 tiles fill one wave; 11 need two (11/20 of the peak rate)."""
    m, k = 256, 8192
    full = TOY.gemm_seconds(m, 128 * 10, k)
    spill = TOY.gemm_seconds(m, 128 * 11, k)
    flops_full, flops_spill = 2 * m * 1280 * k, 2 * m * 1408 * k
    # both are >= 1 GFLOP and < 16: the catalog's 0.6
    assert full == pytest.approx(flops_full / (100e12 * 0.6))
    assert spill == pytest.approx(flops_spill / (100e12 * 0.6 * 11 / 20))


def test_memory_bound_gemm_takes_hbm_time():
    """A GEMM of k = 1 moves its output through HBM: roofline, not the tensor cores."""
    m = n = 8192
    seconds = TOY.gemm_seconds(m, n, 1)
    moved = 2 * (m * 1 + 1 * n + m * n)
    assert seconds == pytest.approx(moved / (1e12 * 0.9))  # >= 100 MB: the catalog's 0.9 of HBM


def test_one_f_one_b_replay_is_the_paper_bubble():
    """Equal stages: (m + p - 1)(f + b) for 1F1B, (m + (p - 1)/v)(f + b) interleaved (Narayanan et al. 2021)."""
    p, m, f, b = 4, 8, 1.0, 2.0
    assert simulate([[f]] * p, [[b]] * p, m) == pytest.approx((m + p - 1) * (f + b))
    v = 2
    chunks = [[f / v] * v for _ in range(p)], [[b / v] * v for _ in range(p)]
    assert simulate(*chunks, m) == pytest.approx((m + (p - 1) / v) * (f + b))


def test_replay_slowest_stage_paces_the_pipeline():
    """Unequal stages, by hand: the middle stage (F 2, B 4) is busy 10 x 6 = 60; it waits 1 for stage 0's
    first forward, idles 1 after its second forward (its first backward needs the last stage's F0 at 3..4 and
    B0 at 4..6), and stage 0's last backward (2) follows its last: 60 + 1 + 1 + 2 = 64."""
    forward, backward = [[1.0], [2.0], [1.0]], [[2.0], [4.0], [2.0]]
    assert simulate(forward, backward, 10) == pytest.approx(64.0)


def test_closed_form_matches_the_replay_for_equal_stages():
    job = megatron_job(GPT + " --pipeline-model-parallel-size 4", 8)
    hw = hardware(choose_gpu("A100-80GB"), "bf16")
    st = step_time(job, hw)
    replayed = simulate([s.forward for s in st.stages], [s.backward for s in st.stages], job.num_microbatches)
    assert st.pipeline == pytest.approx(replayed, rel=0.05)  # edge stages differ by the embedding and the loss
    assert sum(st.terms.values()) == pytest.approx(st.seconds)


def test_more_recompute_never_runs_faster():
    hw = hardware(choose_gpu("H100"), "bf16")
    base = megatron_job(GPT + " --tensor-model-parallel-size 2", 8)
    times = [step_time(dataclasses.replace(base, recompute=r, recompute_method="uniform"), hw).seconds
             for r in ("none", "selective", "full")]
    assert times[0] < times[1] < times[2]


def test_a_size_only_gpu_cannot_price_time():
    with pytest.raises(NoSpeeds, match="--gpu NAME"):
        hardware(choose_gpu(memory="80GiB"), "bf16")
