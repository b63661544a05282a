"""Megatron-DeepSpeed's pipeline model: DeepSpeed's PipelineModule partitions GPTModelPipe's layer specs, so layers
need not divide the stages. guard's partition (guard/job/deepspeed_pipe.py) against DeepSpeed's own functions."""

from __future__ import annotations

import json
import random

import pytest

from conftest import FIXTURES, run_guard
from guard.job import deepspeed_pipe

ds_utils = pytest.importorskip("deepspeed.runtime.utils")


def test_the_partition_is_deepspeeds_on_random_weights():
    rng = random.Random(7)
    for _ in range(300):
        n, m = rng.randint(1, 45), rng.randint(1, 10)
        weights = [rng.choice([0, 0, 1, 1, 1, 3]) for _ in range(n)]
        expected = [int(p) for p in ds_utils.partition_balanced(weights, m)]
        assert deepspeed_pipe.partition_balanced(weights, m) == expected
        assert deepspeed_pipe.partition_uniform(n, m) == list(ds_utils.partition_uniform(n, m))


@pytest.mark.parametrize("method, bigscience, tied", [("type:transformer", False, True), ("type:transformer", False,
                         False), ("type:transformer|embedding", True, True), ("uniform", True, True)])
@pytest.mark.parametrize("layers, pp", [(30, 4), (24, 4), (70, 8), (5, 4)])
def test_stage_layers_are_what_deepspeed_computes_for_gptmodelpipes_specs(method, bigscience, tied, layers, pp):
    specs = deepspeed_pipe.specs(layers, bigscience, tied)
    if method == "uniform":
        parts = ds_utils.partition_uniform(len(specs), pp)
    else:  # PipelineModule._find_layer_type: a regex search over each spec's class name
        import re
        pattern = re.compile(method.split(":", 1)[1], re.IGNORECASE)
        parts = ds_utils.partition_balanced([1 if n != "fn" and pattern.search(n) else 0 for n in specs], pp)
    expected = [specs[parts[s]:parts[s + 1]].count("ParallelTransformerLayerPipe") for s in range(pp)]
    assert deepspeed_pipe.stage_layers(layers, pp, method, bigscience, tied) == expected
    assert sum(expected) == layers


def test_thirty_layers_over_four_stages_are_priced_as_deepspeed_splits_them():
    script = str(FIXTURES / "ds_pipe" / "bigscience_pp4.sh")
    code, out, err = run_guard("check", "--isolated", "--format", "json", script)
    assert code == 0 and not [d for d in json.loads(out) if d["severity"] == "error"], out
    code, out, err = run_guard("estimate", "--isolated", "--format", "json", script)
    assert code == 0, err
    layers = {r["pp_rank"]: r["layers"] for r in json.loads(out)["ranks"]}
    # type:transformer|embedding weighs the two embedding specs as layers: 32 items over 4 stages, 8 each, so the
    # first and last stages hold 7 transformer layers (hand count; DeepSpeed's function agrees above)
    assert [layers[s] for s in range(4)] == [7, 8, 8, 7]


def test_without_the_pipeline_model_megatrons_even_split_still_applies():
    code, out, _ = run_guard("check", "--isolated", "--format", "json", str(FIXTURES / "ds_pipe" / "no_pipe.sh"))
    assert code == 1 and "MLM106" in {d["code"] for d in json.loads(out)}
