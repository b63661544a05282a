"""A distillation teacher on a student's rank (guard/job/distillation.py reads it): its weights in the compute dtype,
split over the student's tensor- and pipeline-parallel ranks, no gradients or optimizer states; on the loss stage
its output logits, detached and kept for the KD loss until the student's backward (modelopt's
DistillationModel captures the teacher's output in its forward; the loss's `targets.detach()`)."""

from __future__ import annotations

from dataclasses import replace

from guard.job.training_job import DTYPE_BYTES, TrainingJob
from guard.memory.params import rank_inventory


def teacher_weights(setup: TrainingJob, r: int) -> int:
    """Pipeline stage r's share of the teacher's weights: its layers split as the student's stages split them."""
    teacher = replace(setup, arch=setup.teacher, chunks=setup.layout.split(setup.teacher.num_layers),
                      teacher=None, padded_vocab=setup.padded_vocab)
    return rank_inventory(teacher, teacher.chunks[r]).total * DTYPE_BYTES[setup.params_dtype]


def teacher_logits(setup: TrainingJob) -> float:
    """One microbatch's teacher logits on the loss stage: [s, b, V / t] in the activation dtype."""
    act = DTYPE_BYTES["fp32" if setup.params_dtype == "fp32" else "bf16"]
    tokens = setup.seq_length / setup.layout.seq_shards * setup.rows
    return act * tokens * setup.vocab / (setup.layout.tp or 1)
