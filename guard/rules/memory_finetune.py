"""MEM001/MEM003-MEM005 for fine-tuning and post-training configs (with --gpu): a predicted OOM, told by what causes
it where a preference or RL trainer's own terms do: a colocated vLLM's share, a reference model replicated on every
rank."""

from __future__ import annotations

from dataclasses import replace

from guard.rules.finetune_context import FineTuneCheck
from guard.rules.memory import NOT_ESTIMATED, PREDICTED_OOM
from guard.rules.registry import check, rule

VLLM_BESIDE_TRAINING = rule(
    "MEM004", "colocated-vllm-beyond-gpu", "error",
    "A colocated vLLM's share and the training peak beside it exceed the GPU.",
    what="With a GPU known, prices the training peak of a TRL GRPO/RLOO job (`guard estimate`) and adds the share "
         "of the GPU's total memory that colocated vLLM holds (vllm_gpu_memory_utilization); reports when the job "
         "would fit without that share, with the largest share that leaves the training peak room.",
    why="vLLM reserves its whole share at start-up and keeps it while the policy trains in the same process "
        "(no sleep mode): the first backward runs out of memory, after vLLM and the model have loaded.",
    example="trl grpo --use_vllm --vllm_mode colocate --vllm_gpu_memory_utilization 0.9 (an 8B policy, ZeRO-2)",
    use_instead="a smaller vllm_gpu_memory_utilization, --vllm_enable_sleep_mode, or vllm_mode server on other GPUs",
    references=("TRL trainer/grpo_trainer.py: GRPOTrainer.__init__ (LLM(gpu_memory_utilization=...))",
                "guard/job/post_training.py"),
)

REPLICATED_REFERENCE = rule(
    "MEM005", "replicated-reference-beyond-gpu", "error",
    "A reference model copied whole onto every rank takes the job past the GPU, and sharding or precomputing it "
    "would fit.",
    what="With a GPU known, reports a DPO/KTO/GRPO/RLOO job predicted out of memory whose reference model is a "
         "whole copy on each rank (TRL's prepare_deepspeed forces ZeRO stage 0 on it below ZeRO-3), when ZeRO-3 "
         "(the reference sharded like the policy) or precompute_ref_log_probs (no reference kept) is predicted "
         "to fit; it names which.",
    why="The reference is as large as the policy's 16-bit weights; below ZeRO-3 every rank holds all of it, which "
        "users rarely expect from a config that says ZeRO-2.",
    example="trl dpo --model_name_or_path meta-llama/Meta-Llama-3-8B --deepspeed zero2.json (on 40 GiB GPUs)",
    use_instead="a ZeRO-3 DeepSpeed config, --precompute_ref_log_probs (DPO/KTO), or --use_peft",
    references=("TRL trl/models/utils.py: prepare_deepspeed", "guard/job/post_training.py"),
)

# the config key that drives each term, to place MEM001 (the ones a user changes to shrink it)
DRIVERS = {"activations": "micro_batch", "embedding_activations": "micro_batch", "logits": "micro_batch",
           "transient": "micro_batch", "reference": "rl_method", "generation": "num_generations",
           "vllm_engine": "vllm_share", "optimizer": "deepspeed", "params": "deepspeed", "grads": "deepspeed"}


@check(PREDICTED_OOM, NOT_ESTIMATED, VLLM_BESIDE_TRAINING, REPLICATED_REFERENCE, target="finetune")
def finetune_memory(ctx: FineTuneCheck) -> None:
    if not (ctx.gpu or ctx.gpu_memory):
        return
    from guard.job.training_job import IncompleteJob
    from guard.memory.estimate import estimate
    from guard.memory.gpu_choice import choose_gpu
    from guard.units import gib

    gpu = choose_gpu(ctx.gpu, ctx.gpu_memory)
    named = f"a GPU with {gib(gpu.usable_bytes)} GiB" if gpu.name == "custom" else gpu.name
    try:
        ctx.job.require()
    except IncompleteJob as err:
        ctx.report(NOT_ESTIMATED, "model", f"memory not estimated: {err}", value=False)
        return
    result = estimate(ctx.job, gpu)
    if result.fits is not False:
        return
    worst, usable = result.peak_stage, result.capacity
    if _vllm(ctx, worst, usable, gpu, gib) or _reference(ctx, worst, usable, gpu, named, estimate, gib):
        return
    dominant = max(worst.components, key=worst.components.get)
    ctx.report(PREDICTED_OOM, DRIVERS.get(dominant, "micro_batch"),
               f"predicted out of memory on {named}: peak {gib(worst.peak_bytes)} GiB ({worst.phase}) of "
               f"{gib(usable)} GiB usable; largest term: {dominant} {gib(worst.components[dominant])} GiB",
               help="run `guard estimate --explain` on this job for every term", value=False)


def _vllm(ctx: FineTuneCheck, worst, usable: int, gpu, gib) -> bool:
    engine = worst.components.get("vllm_engine", 0)
    training = worst.peak_bytes - engine
    if not engine or training > usable:
        return False
    share = ctx.job.post_training.vllm_share
    room = max(0.0, (usable - training) / gpu.memory_bytes)
    ctx.report(VLLM_BESIDE_TRAINING, "vllm_share",
               f"colocated vLLM holds {share:g} of the GPU ({gib(engine)} GiB) beside a training peak of "
               f"{gib(training)} GiB ({worst.phase}): {gib(worst.peak_bytes)} GiB of {gib(usable)} GiB usable",
               help=f"vllm_gpu_memory_utilization {int(room * 100) / 100:g} or less leaves the training peak room "
                    "(the engine's weights and KV cache must fit in it), or vllm_enable_sleep_mode",
               value=ctx.ft.where("vllm_share") is not None)
    return True


def _reference(ctx: FineTuneCheck, worst, usable: int, gpu, named: str, estimate, gib) -> bool:
    job, post = ctx.job, ctx.job.post_training
    if post is None or post.reference != "replica":
        return False
    fixes = []
    if not job.hf_ddp and job.zero_stage < 3:
        sharded = replace(job, zero_stage=3)  # the reference's engine follows the stage (memory/post_training.py)
        fixes.append(("ZeRO-3 (the reference sharded like the policy)", estimate(sharded, gpu)))
    if post.method in ("dpo", "kto"):
        precomputed = replace(job, post_training=replace(post, reference="precomputed"))
        fixes.append(("precompute_ref_log_probs (no reference kept)", estimate(precomputed, gpu)))
    fitting = [(name, result) for name, result in fixes if result.fits]
    if not fitting:
        return False
    ctx.report(REPLICATED_REFERENCE, "rl_method",
               f"predicted out of memory on {named}: peak {gib(worst.peak_bytes)} GiB of {gib(usable)} GiB "
               f"usable, {gib(worst.components['reference'])} GiB of it a whole reference model on every rank; "
               + "; ".join(f"with {name} the peak is {gib(r.peak_stage.peak_bytes)} GiB" for name, r in fitting),
               help=f"use {fitting[0][0].split(' (')[0]}", value=False)
    return True
