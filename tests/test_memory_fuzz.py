"""Hypothesis over random jobs: the estimate never crashes, and its invariants hold for every layout."""

from __future__ import annotations

import pytest

import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import run_guard
from guard.job.architecture import Architecture
from guard.memory.estimate import COMPONENTS, estimate
from guard.job.stages import even_chunks
from guard.job.training_job import TrainingJob, new_job


@st.composite
def setups(draw) -> TrainingJob:
    heads = draw(st.sampled_from([4, 8, 16]))
    groups = draw(st.sampled_from([g for g in (1, 2, 4, heads) if heads % g == 0]))
    hidden = heads * draw(st.sampled_from([16, 32, 64]))
    tp = draw(st.sampled_from([t for t in (1, 2, 4) if groups % t == 0 or t == 1]))
    pp = draw(st.sampled_from([1, 2, 4]))
    vpp = draw(st.sampled_from([1, 2])) if pp > 1 else 1
    layers = pp * vpp * draw(st.integers(1, 3))
    experts = draw(st.sampled_from([None, 4, 8]))
    ep = draw(st.sampled_from([1, 2])) if experts else 1
    cp = draw(st.sampled_from([1, 2]))
    dp = ep * draw(st.sampled_from([1, 2, 4]))
    arch = Architecture(num_layers=layers, hidden=hidden, heads=heads, query_groups=groups,
                        kv_channels=hidden // heads, ffn_hidden=4 * hidden, vocab=draw(st.integers(100, 5000)),
                        max_positions=1024, gated_mlp=draw(st.booleans()),
                        norm=draw(st.sampled_from(["layernorm", "rmsnorm"])), tied_embeddings=draw(st.booleans()),
                        num_experts=experts, moe_ffn_hidden=hidden if experts else None,
                        hidden_dropout=draw(st.sampled_from([0.0, 0.1])))
    framework = draw(st.sampled_from(["megatron", "deepspeed"]))
    setup = new_job(arch=arch, framework=framework, world_size=tp * pp * cp * dp, tp=tp, pp=pp, vpp=vpp, cp=cp,
                  ep=ep, etp=tp, sequence_parallel=tp > 1 and draw(st.booleans()),
                  seq_length=cp * draw(st.sampled_from([64, 256, 1024])), micro_batch=draw(st.integers(1, 4)),
                  num_microbatches=draw(st.integers(1, 12)), params_dtype=draw(st.sampled_from(["bf16", "fp16",
                                                                                                 "fp32"])),
                  distributed_optimizer=draw(st.booleans()), zero_stage=draw(st.integers(0, 3)),
                  recompute=draw(st.sampled_from(["none", "selective", "full"])),
                  recompute_method=draw(st.sampled_from(["uniform", "block"])),
                  recompute_num_layers=draw(st.integers(1, 3)),
                  attention=draw(st.sampled_from(["flash", "unfused"])),
                  offload_optimizer=draw(st.sampled_from(["none", "cpu"])))
    setup.chunks = even_chunks(layers, pp, vpp)
    return setup


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(setups())
def test_invariants(setup):
    result = estimate(setup)
    assert len(result.stages) == setup.layout.pp
    assert sum(st.layers for st in result.stages) == setup.arch.num_layers
    for stage in result.stages:
        assert all(stage.components[k] >= 0 for k in COMPONENTS)
        # assembled term by term, the components must account for the peak phase's own total, no more or less
        assert stage.peak_bytes - stage.components["runtime"] == pytest.approx(stage.phases[stage.phase], abs=8)
        assert stage.phases[stage.phase] == max(stage.phases.values())
        # the stated margin brackets the prediction (margin.py): nothing it subtracts or adds has the wrong sign
        assert stage.margin.lower <= stage.margin.predicted == stage.peak_bytes
        assert stage.margin.upper is None or stage.margin.upper >= stage.margin.predicted
    # more microbatches never lower the first stage
    setup.num_microbatches += 4
    assert estimate(setup).stages[0].peak_bytes >= result.stages[0].peak_bytes


FLAGS = st.lists(st.sampled_from([
    "--num-layers 4", "--num-layers 0", "--hidden-size 64", "--hidden-size 63", "--num-attention-heads 4",
    "--num-attention-heads 0", "--seq-length 128", "--micro-batch-size 2", "--global-batch-size 7",
    "--tensor-model-parallel-size 2", "--pipeline-model-parallel-size 2", "--num-layers-per-virtual-pipeline-stage 1",
    "--vocab-size 1000", "--bf16", "--fp16", "--use-distributed-optimizer", "--swiglu", "--num-experts 4",
    "--expert-model-parallel-size 2", "--recompute-granularity full", "--recompute-method block",
    "--recompute-num-layers 9", "--sequence-parallel", "--context-parallel-size 2", "--moe-layer-freq [1]*4",
    "--pipeline-model-parallel-layout E|tt|tt|L", "--decoder-first-pipeline-num-layers 3",
    "--group-query-attention", "--num-query-groups 3", "--ffn-hidden-size 0", "--fp8-format hybrid",
]), max_size=14)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(FLAGS, st.sampled_from(["1", "2", "4", "8"]))
def test_random_command_lines_never_crash(flags, world):
    argv = "pretrain_gpt.py " + " ".join(flags)
    code, out, err = run_guard("estimate", "--megatron-args", argv, "--world-size", world, "--gpu-memory", "8GiB",
                               "--format", "json")
    assert "internal error" not in err and "Traceback" not in err, (argv, err)
    assert code in (0, 1, 2), (argv, err)
    if code != 2:
        assert json.loads(out)["ranks"]
    else:
        assert len(err.strip().splitlines()) == 1
