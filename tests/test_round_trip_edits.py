"""Single rewrites of a script and a DeepSpeed config, the expected text written by hand, and what is refused."""

from __future__ import annotations

import dataclasses
import shutil

import pytest
from conftest import ROOT
from test_round_trip import read_config, read_script, relayout

from guard.job.edits import Edit, apply_edits
from guard.job.write_deepspeed import deepspeed_edits
from guard.job.write_megatron import megatron_edits, megatron_flags


# -- single rewrites, the expected text written by hand -----------------------------------------------------
def test_apply_edits_keeps_insertion_order_and_refuses_overlaps():
    text = "ab\ncd\n"
    edits = [Edit("f", (2, 1), (2, 2), "X"), Edit("f", (1, 3), (1, 3), "1"), Edit("f", (1, 3), (1, 3), "2")]
    assert apply_edits(text, edits) == "ab12\nXd\n"
    with pytest.raises(ValueError):
        apply_edits(text, [Edit("f", (1, 1), (1, 3), ""), Edit("f", (1, 2), (2, 1), "")])


SCRIPT = """#!/bin/bash
TP=2
torchrun --nproc-per-node 8 pretrain_gpt.py \\
    --tensor-model-parallel-size $TP --pipeline-model-parallel-size=2 \\
    --micro-batch-size 1 --bf16 \\
    --sequence-parallel
"""


def test_script_rewrite_is_a_minimal_edit(tmp_path):
    script = tmp_path / "train.sh"
    script.write_text(SCRIPT)
    cmd, old = read_script(script)
    new = dataclasses.replace(relayout(old, tp=4, pp=1, sequence_parallel=False), micro_batch=2, global_batch=4,
                              distributed_optimizer=True)
    rewrite = megatron_edits(cmd, old, new)
    assert rewrite.refused == []
    assert apply_edits(SCRIPT, list(rewrite)) == """#!/bin/bash
TP=4
torchrun --nproc-per-node 8 pretrain_gpt.py \\
    --tensor-model-parallel-size $TP --pipeline-model-parallel-size=1 \\
    --micro-batch-size 2 --bf16 \\
    --use-distributed-optimizer
"""
    # appended flags cannot turn --sequence-parallel off, so the layout is left out whole
    flags = megatron_flags(old, new)
    assert list(flags) == ["--micro-batch-size", "2", "--use-distributed-optimizer"]
    assert [r.field for r in flags.refused] == ["layout.sequence_parallel", "layout.tp", "layout.pp"]


def test_a_variable_with_other_uses_or_no_value_is_refused(tmp_path):
    text = SCRIPT.replace("TP=2\n", "MBS=1\nGBS=$((MBS * 8))\n").replace("$TP", "$UNSET_TP").replace(
        "--micro-batch-size 1", "--micro-batch-size $MBS")
    script = tmp_path / "train.sh"
    script.write_text(text)
    cmd, old = read_script(script)
    rewrite = megatron_edits(cmd, old, dataclasses.replace(old, micro_batch=2, layout=dataclasses.replace(
        old.layout, tp=4, sequence_parallel=True)))
    reasons = {r.field: r.reason for r in rewrite.refused}
    assert "used at lines 3, 6" in reasons["micro_batch"] and "$UNSET_TP" in reasons["layout.tp"], reasons
    assert list(rewrite) == []


CONFIG = """{
    "train_micro_batch_size_per_gpu": 4,
    "bf16": {"enabled": true}
}
"""


def test_deepspeed_keys_are_added_in_the_files_style(tmp_path):
    path = tmp_path / "ds.json"
    doc, old, _ = read_config(path, CONFIG)
    new = dataclasses.replace(old, zero_stage=2, offload_optimizer="cpu", num_microbatches=2, global_batch=64)
    assert apply_edits(CONFIG, list(deepspeed_edits(doc, old, new))) == """{
    "train_micro_batch_size_per_gpu": 4,
    "bf16": {"enabled": true},
    "gradient_accumulation_steps": 2,
    "zero_optimization": {
        "stage": 2,
        "offload_optimizer": {
            "device": "cpu"
        }
    }
}
"""
    auto = CONFIG.replace(": 4", ': "auto"')
    doc, old, cli = read_config(path, auto)
    rewrite = deepspeed_edits(doc, old, dataclasses.replace(old, micro_batch=2, zero_stage=1))
    assert cli == {"micro_batch": 1} and [r.field for r in rewrite.refused] == ["micro_batch"]
    assert apply_edits(auto, list(rewrite)).endswith('"bf16": {"enabled": true},\n    "zero_optimization": '
                                                     '{\n        "stage": 1\n    }\n}\n')


def test_megatron_deepspeed_config_heredoc_and_flag_change_together(tmp_path):
    source = ROOT / "examples" / "megatron-deepspeed" / "zero3_with_pipeline.sh"
    script = tmp_path / source.name
    shutil.copy(source, script)
    cmd, old = read_script(script)
    assert old.zero_stage == 3  # the heredoc's stage wins over --zero-stage 1
    rewrite = megatron_edits(cmd, old, dataclasses.replace(old, zero_stage=2))
    lines = apply_edits(script.read_text(), list(rewrite)).splitlines()
    assert lines[4] == "ZERO_STAGE=2" and lines[21].endswith("--deepspeed_config ds_config.json --zero-stage 2")
    assert len(rewrite) == 2 and rewrite.refused == []
