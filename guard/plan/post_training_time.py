"""A preference or RL trainer's step (guard/job/post_training.py): the policy's forward and backward over all its
rows (DPO's chosen and rejected go through one forward), and the reference's forward without gradients over the
same rows (DPO/KTO: inside each micro-batch's loss; GRPO/RLOO with beta: once per generation over its
completions, the same count of rows per step). Generation is not priced: it is decode-bound, and vLLM's time is its
own."""

from __future__ import annotations

from dataclasses import replace


def post_training_time(job, hw, training_step):
    """`training_step(job, hw)` (step_time.py) priced over the trainer's rows, plus the reference's forward."""
    post = job.post_training
    rows = replace(job, micro_batch=job.rows, post_training=None)
    priced = training_step(rows, hw)
    if post.reference in ("replica", "sharded", "adapter", "host"):
        # the busiest stage's forward for each micro-batch: the reference runs the policy's layers, no backward
        busiest = max(priced.stages, key=lambda st: st.seconds)
        forward = job.num_microbatches * sum(busiest.forward)
        priced.terms["reference forward (no grad)"] = forward
        priced.seconds += forward
    if post.generating or post.vllm_share is not None:
        priced.explain.append("generation (transformers' generate or vLLM) is not priced: the step time is the "
                              "policy's training and the reference's forward only")
    return priced
