"""FT016-FT018: TRL GRPO/RLOO configs that the trainer refuses at start-up, and a colocated vLLM share that leaves
the trainer little of its GPU (TRL f2cd5771 trainer/grpo_config.py GRPOConfig.__post_init__)."""

from __future__ import annotations

from guard.job.finetune_config import as_int
from guard.job.post_training import generation_batch
from guard.rules.finetune_context import FineTuneCheck
from guard.rules.registry import check, rule

GRPO_CONFIG = "TRL f2cd5771 trainer/grpo_config.py: GRPOConfig.__post_init__"
SERVER_DEFAULT = 0.9  # vLLM's own gpu_memory_utilization default (a server alone on its GPU)

GENERATION_GROUPS = rule(
    "FT016", "generation-batch-splits-prompt-groups", "error",
    "The GRPO generation batch is not a multiple of num_generations: the trainer refuses.",
    what="Computes the generation batch as GRPOConfig does (generation_batch_size, else per_device_train_batch_size "
         "x processes x steps_per_generation, whose default is gradient_accumulation_steps) and reports it when "
         "num_generations does not divide it; also a generation_batch_size that the global batch does not divide.",
    why="GRPOConfig raises `ValueError: generation_batch_size (12) must be divisible by num_generations (8).`: "
        "each prompt's completions are compared with each other, so a batch must hold whole groups.",
    example="trl grpo --per_device_train_batch_size 3 --num_generations 8 --num_processes 4",
    use_instead="trl grpo --per_device_train_batch_size 4 --num_generations 8 --num_processes 4",
    references=(GRPO_CONFIG,),
)

TOO_FEW_GENERATIONS = rule(
    "FT017", "grpo-needs-two-generations", "error",
    "num_generations below 2: GRPO refuses.",
    what="Reports num_generations 0 or 1 for `trl grpo`.",
    why="GRPOConfig raises `ValueError: GRPO requires at least 2 generations per prompt to calculate the "
        "advantages.`: the advantage is a completion's reward against its group's.",
    example="trl grpo --num_generations 1",
    use_instead="trl grpo --num_generations 4",
    references=(GRPO_CONFIG,),
)

SERVER_SHARE = rule(
    "FT018", "colocated-vllm-server-share", "info",
    "A colocated vLLM given vLLM's server default share of the GPU.",
    what="Reports vllm_gpu_memory_utilization of 0.9 or more with use_vllm in colocate mode: vLLM takes that "
         "share of every training GPU's total memory at start-up and holds it while the policy trains beside it "
         "(guard estimate --gpu prices both).",
    why="0.9 is vLLM's default for a server alone on its GPU; TRL lowered its colocate default from 0.9 to 0.3 "
        "after runs went out of memory, and vLLM refuses to start when less than its share is free.",
    example="trl grpo --use_vllm --vllm_mode colocate --vllm_gpu_memory_utilization 0.9",
    use_instead="trl grpo --use_vllm --vllm_mode colocate --vllm_gpu_memory_utilization 0.3 "
                "(or --vllm_enable_sleep_mode, or vllm_mode server on other GPUs)",
    references=(GRPO_CONFIG, "TRL trainer/grpo_trainer.py: GRPOTrainer.__init__ (LLM(gpu_memory_utilization=...))"),
)


@check(GENERATION_GROUPS, TOO_FEW_GENERATIONS, SERVER_SHARE, target="finetune")
def grpo_config(ctx: FineTuneCheck) -> None:
    ft = ctx.ft
    if ft.dialect.name != "trl" or str(ft.get("rl_method")) not in ("grpo", "rloo"):
        return
    generations = as_int(ft.get("num_generations"))
    if ft.get("rl_method") == "grpo" and generations is not None and generations < 2:
        ctx.report(TOO_FEW_GENERATIONS, "num_generations", f"num_generations {generations}: GRPO raises 'GRPO "
                   "requires at least 2 generations per prompt to calculate the advantages'",
                   help="num_generations 2 or more (8 by default)")
    _groups(ctx, generations)
    post = ctx.job.post_training
    if post is not None and post.vllm_share is not None and post.vllm_share >= SERVER_DEFAULT:
        ctx.report(SERVER_SHARE, "vllm_share", f"vllm_gpu_memory_utilization {post.vllm_share:g} in colocate mode: "
                   f"vLLM holds {post.vllm_share:.0%} of every training GPU beside the policy",
                   help="0.3 (TRL's colocate default), --vllm_enable_sleep_mode, or vllm_mode server")


def _groups(ctx: FineTuneCheck, generations: int | None) -> None:
    """GRPOConfig's generation batch (post_training.generation_batch), and its two divisibility refusals."""
    ft, world = ctx.ft, ctx.job.layout.world
    per_device = as_int(ft.get("micro_batch"))
    if not generations or not per_device or not world:
        return
    batch, how = generation_batch(ft, per_device, world)
    global_batch = per_device * world
    if as_int(ft.get("generation_batch")) is not None and batch % global_batch:
        ctx.report(GENERATION_GROUPS, "generation_batch", f"generation_batch_size {batch} is not divisible by "
                   f"the global batch {per_device} x {world} = {global_batch}: GRPOConfig raises "
                   "'generation_batch_size must be divisible by the global batch size'",
                   help=f"a multiple of {global_batch}")
        return
    if batch % generations:
        ctx.report(GENERATION_GROUPS, "num_generations", f"{how} is not divisible by num_generations "
                   f"{generations}: GRPOConfig raises 'generation_batch_size ({batch}) must be divisible by "
                   f"num_generations ({generations})'", help="make the generation batch a multiple of num_generations")
