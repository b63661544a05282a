"""DeepSpeed's own DeepSpeedConfig judges every JSON config of the corpus, the fixtures and the examples.

Every config DeepSpeed rejects must get at least one error from guard. Where guard reports an
error on a config that DeepSpeedConfig accepts, the rule must be one whose condition DeepSpeed
checks later than its config object (the engine at `deepspeed.initialize`, the optimizer or
scheduler constructor, ZeRO-3 initialisation); the reasons below come from each rule's docs.
"""

from __future__ import annotations

import importlib.util

import pytest

import deepspeed_oracle as oracle
from conftest import CORPUS

pytestmark = pytest.mark.oracle

CHECKED_AFTER_CONFIG = {
    "DS201": "an unfilled \"auto\" crashes where the engine uses it (optimizer/scheduler constructor, clipping)",
    "DS404": "the master-weights offload requirement is asserted by the engine when it builds the ZeRO optimizer",
    "DS405": "data_types.param_dtype is compared with the model dtype by the engine",
    "DS501": "prescale/predivide with reduce-scatter is refused in DeepSpeedEngine._configure_zero_optimizer",
    "DS505": "nvme_path is asserted by zero.Init / the ZeRO-3 offload setup",
    "DS507": "the client-optimizer offload check happens when the engine receives the optimizer",
    "DS508": "offload and clipping limits of compute_grad_norm=false are checked in stage_1_and_2.py",
    "DS510": "MoE/AutoEP ZeRO constraints are asserted by the engine",
    "DS511": "managed_gradient_accumulation limits are asserted by the engine",
    "DS601": "the optimizer type is resolved by DeepSpeedEngine._configure_basic_optimizer",
    "DS602": "max_grad_norm in optimizer params is refused by the engine",
    "DS603": "optimizer params become constructor kwargs: TypeError when the engine builds it",
    "DS604": "the scheduler type is resolved by the engine",
    "DS605": "scheduler params become constructor kwargs: TypeError when the engine builds it",
    "DS606": "int-only scheduler params are checked in the scheduler constructor",
    "DS607": "a missing required scheduler argument fails in the scheduler constructor",
    "DS608": "lamb's dynamic-loss-scale requirement is asserted by the engine",
    "DS609": "the untested-optimizer assertion is in the engine's ZeRO optimizer setup",
    "DS610": "1-bit optimizers with ZeRO are refused by the engine",
    "DS611": "the removed 1-bit optimizers fail when the engine resolves the optimizer name",
}


@pytest.fixture(scope="module")
def judged():
    if importlib.util.find_spec("deepspeed") is None:
        pytest.skip("deepspeed is not installed (pip install -e '.[test]')")
    jobs = oracle.config_files(CORPUS if CORPUS.is_dir() else None)
    return jobs, oracle.run_deepspeed(jobs), oracle.run_guard(jobs)


def test_guard_flags_every_config_deepspeed_rejects(judged):
    _, verdicts, errors = judged
    missed = [f"{v['path']}: DeepSpeed says {v['error']}" for v in verdicts
              if not v["accepted"] and not errors[v["path"]]]
    assert not missed, "\n".join(missed)


def test_errors_on_accepted_configs_are_explained(judged):
    _, verdicts, errors = judged
    unexplained = [f"{v['path']}: {d['code']} {d['message']}" for v in verdicts if v["accepted"]
                   for d in errors[v["path"]] if d["code"] not in CHECKED_AFTER_CONFIG]
    assert not unexplained, "\n".join(unexplained)


def test_the_comparison_covers_real_configs(judged):
    jobs, verdicts, errors = judged
    table = oracle.agreement(verdicts, errors)
    print("\n" + oracle.format_table(table))
    assert len(jobs) >= 50
    assert table["rejected/flagged"] > 0 and table["accepted/clean"] > 0
