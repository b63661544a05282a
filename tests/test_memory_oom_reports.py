"""Real out-of-memory reports from the corpus (../shared/corpus/oom-logs): guard must predict the OOM, in the
phase the log shows, and the fix that worked must fit. Skips when the corpus is absent."""

from __future__ import annotations

import json

import pytest
import yaml

from conftest import CORPUS, run_guard

# LLaMA-7B (LLaMA-1: Touvron et al. 2023, 6.74B; the config the HF conversion ships)
LLAMA_7B = {"model_type": "llama", "hidden_size": 4096, "intermediate_size": 11008, "num_hidden_layers": 32,
            "num_attention_heads": 32, "vocab_size": 32000, "max_position_embeddings": 2048,
            "tie_word_embeddings": False}
# LLaMA-Factory's README ZeRO-2 example of the time: no optimizer section (the HF Trainer's torch AdamW)
ZERO2 = {"fp16": {"enabled": "auto"}, "train_micro_batch_size_per_gpu": "auto",
         "zero_optimization": {"stage": 2, "allgather_partitions": True, "allgather_bucket_size": 5e8,
                               "reduce_scatter": True, "reduce_bucket_size": 5e8, "overlap_comm": False,
                               "contiguous_gradients": True}}


def _report(name: str) -> dict:
    path = CORPUS / "oom-logs" / f"{name}.yaml"
    if not path.is_file():
        pytest.skip("../shared/corpus/oom-logs is absent")
    return yaml.safe_load(path.read_text())


def _estimate(tmp_path, config: dict, report: dict) -> dict:
    (tmp_path / "ds.json").write_text(json.dumps(config))
    (tmp_path / "config.json").write_text(json.dumps(LLAMA_7B))
    gpus = report["gpus"]
    code, out, err = run_guard(
        "estimate", "--deepspeed", str(tmp_path / "ds.json"), "--hf-config", str(tmp_path / "config.json"),
        "--world-size", str(gpus["count"]), "--gpu-memory", f"{gpus['memory_total_reported_gib']}GiB",
        "--micro-batch-size", str(report["batch"]["per_device_train_batch_size"]),
        "--seq-length", "512",  # not in the report; the optimizer-step phase does not depend on it
        "--precision", "fp16",  # V100: no bf16
        "--format", "json")
    assert code in (0, 1), err
    return json.loads(out)


def test_llamafactory_7b_zero2_on_v100_runs_out_in_the_optimizer_step(tmp_path):
    report = _report("hiyouga__LlamaFactory__issue1221")
    assert report["parallel"]["zero_stage"] == 2 and "optimizer step" in report["phase"]
    out = _estimate(tmp_path, ZERO2, report)
    assert out["fits"] is False
    assert out["ranks"][0]["phase"] == "optimizer step"
    # the failed allocation (3.14 GiB) is one fp32 tensor of this rank's partition: guard's step transient
    # holds two of them (the fp32 gradient partition and torch Adam's sqrt(exp_avg_sq)) and the all-gather bucket
    partition = 6.74e9 / report["gpus"]["count"] * 4 / 2**30
    assert partition == pytest.approx(report["allocation_gib"], rel=0.01)
    assert out["ranks"][0]["components"]["transient"] / 2**30 >= 2 * report["allocation_gib"]


def test_llamafactory_7b_fix_zero3_fits(tmp_path):
    report = _report("hiyouga__LlamaFactory__issue1221")
    assert "ZeRO-3" in report["resolution"]
    zero3 = json.loads(json.dumps(ZERO2))
    zero3["zero_optimization"]["stage"] = 3
    assert _estimate(tmp_path, zero3, report)["fits"] is True
