"""Megatron-LM's distillation teacher (--export-kd-teacher-load; megatron/post_training/model_builder.py): its
weights on every rank of the student's TP/PP split, in the compute dtype, and its logits kept on the loss stage.
The teacher's size is checked against a student built with the teacher's own dimensions (the model builder updates
the student's arguments with the teacher's model_config.yaml); the logits by hand."""

from __future__ import annotations

import json

from conftest import run_guard

STUDENT = ("--num-layers 8 --hidden-size 1024 --num-attention-heads 16 --ffn-hidden-size 4096")
REST = ("--seq-length 2048 --max-position-embeddings 2048 --micro-batch-size 1 --global-batch-size 64 "
        "--tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 --sequence-parallel --bf16 "
        "--vocab-size 128000 --use-distributed-optimizer")


def _ranks(tmp_path, model: str, extra: str = "") -> list[dict]:
    script = tmp_path / "run.sh"
    script.write_text(f"export CUDA_DEVICE_MAX_CONNECTIONS=1\ntorchrun --nproc_per_node 8 pretrain_gpt.py {model} "
                      f"{REST} {extra}\n")
    code, out, err = run_guard("estimate", str(script), "--format", "json")
    assert code == 0, out + err
    return json.loads(out)["ranks"]


def test_a_teacher_without_its_config_is_priced_as_the_student(tmp_path):
    """The student's own 16-bit weights per rank (the distributed optimizer keeps its fp32 copy elsewhere)."""
    ranks = _ranks(tmp_path, STUDENT, "--export-kd-teacher-load /nowhere/teacher")
    assert all(r["components"]["teacher"] == r["components"]["params"] for r in ranks)


def test_the_teachers_model_config_sets_its_size(tmp_path):
    (tmp_path / "teacher").mkdir()
    (tmp_path / "teacher" / "model_config.yaml").write_text(
        "num_layers: 12\nhidden_size: 2048\nffn_hidden_size: 8192\nnum_attention_heads: 16\n")
    distilled = _ranks(tmp_path, STUDENT, f"--export-kd-teacher-load {tmp_path / 'teacher'}")
    as_student = _ranks(tmp_path, "--num-layers 12 --hidden-size 2048 --num-attention-heads 16 "
                                  "--ffn-hidden-size 8192")
    assert [r["components"]["teacher"] for r in distilled] == [r["components"]["params"] for r in as_student]


def test_the_loss_stage_keeps_the_teachers_logits(tmp_path):
    """One microbatch in flight on the last stage: 2048 tokens x 128,000 / TP 2 logits x 2 bytes."""
    plain = _ranks(tmp_path, STUDENT)[-1]["components"]["logits"]
    distilled = _ranks(tmp_path, STUDENT, "--export-kd-teacher-load /nowhere/teacher")[-1]["components"]["logits"]
    assert distilled - plain == 2048 * 64_000 * 2
