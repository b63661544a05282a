"""DS3xx: the batch-size triangle train_batch_size = micro * grad_accum * data-parallel size."""

from __future__ import annotations

from guard.diagnostic import Related
from guard.rules.context import DsConfig
from guard.rules.registry import check, rule

TBS, MICRO, GAS = "train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps"
ASSERTION = ("Check batch related parameters. train_batch_size is not equal to "
             "micro_batch_per_gpu * gradient_acc_step * world_size")

TRIANGLE = rule(
    "DS301", "batch-triangle-mismatch", "error",
    "train_batch_size, micro batch and gradient accumulation do not multiply out.",
    what="With all three batch keys given, checks `train_batch_size == micro * gas * W`: for the "
         "data-parallel size W given by `--world-size`, or, without it, that some positive integer W "
         "satisfies it.",
    why="DeepSpeed asserts it when the engine starts: `AssertionError: Check batch related "
        "parameters. train_batch_size is not equal to micro_batch_per_gpu * gradient_acc_step * "
        "world_size 8 != 2 * 1 * 1`. The most common DeepSpeed launch failure: a config that "
        "hard-codes all three is valid for exactly one GPU count.",
    example='{"train_batch_size": 8, "train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 1}   # on 8 GPUs',
    use_instead='{"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 1}',
    references=("deepspeed/runtime/config.py: DeepSpeedConfig._batch_assertion",
                "https://github.com/deepspeedai/DeepSpeed/issues/6914",
                "https://github.com/bigcode-project/starcoder/issues/77"),
)

FLOOR_DIVISION = rule(
    "DS302", "batch-floor-division", "error",
    "Two batch keys given and DeepSpeed's floor division derives a zero or inconsistent third.",
    what="With two of the three batch keys, replays how DeepSpeed derives the third with integer "
         "division (`gas = train_batch_size // micro // W`, `micro = train_batch_size // W // gas`) "
         "and reports a result of 0 or one that breaks the triangle.",
    why="DeepSpeed does not round up or warn: `train_batch_size=30, micro=4` on 8 GPUs gives "
        "`gas = 0` ('Gradient accumulation steps: 0 has to be greater than 0'); `100, 4` on 8 GPUs "
        "gives `gas = 3` and then `100 != 4 * 3 * 8`.",
    example='{"train_batch_size": 30, "train_micro_batch_size_per_gpu": 4}',
    use_instead='{"train_batch_size": 32, "train_micro_batch_size_per_gpu": 4}',
    references=("deepspeed/runtime/config.py: DeepSpeedConfig._set_batch_related_parameters",),
)

NO_BATCH = rule(
    "DS303", "batch-size-missing", "error",
    "Neither train_batch_size nor train_micro_batch_size_per_gpu is given.",
    what="Reports a plain DeepSpeed config with neither of the two keys DeepSpeed needs.",
    why="DeepSpeed stops with `AssertionError: Either train_batch_size or "
        "train_micro_batch_size_per_gpu needs to be provided`. The HF Trainer only fills keys "
        "that are present, so HF configs need them too (as \"auto\").",
    example='{"gradient_accumulation_steps": 4}',
    use_instead='{"train_micro_batch_size_per_gpu": 8, "gradient_accumulation_steps": 4}',
    references=("deepspeed/runtime/config.py: DeepSpeedConfig._set_batch_related_parameters",),
)

HF_INCOMPLETE = rule(
    "DS304", "hf-batch-key-missing", "warning",
    'HF/accelerate config: train_batch_size is "auto" but a key it is computed from is missing.',
    what='In an HF/accelerate config, reports `train_batch_size: "auto"` without '
         "`gradient_accumulation_steps` or `train_micro_batch_size_per_gpu`.",
    why="The Trainer fills `train_batch_size = world * micro * grad_accum` from its own arguments "
        "but only fills keys that exist: a missing `gradient_accumulation_steps` stays 1 for "
        "DeepSpeed, and the triangle assertion fires (`256 != 8 * 1 * 8`) as soon as the Trainer "
        "accumulates gradients.",
    example='{"train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto"}',
    use_instead='{"train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto"}',
    references=("https://github.com/sahil280114/codealpaca/issues/14",),
)

PINNED = rule(
    "DS305", "batch-pinned-to-one-world-size", "info",
    "All three batch keys are hard-coded: the config fits exactly one data-parallel size.",
    what="Reports a config that gives all three batch keys as numbers, naming the only "
         "data-parallel size it works with.",
    why="Moving the job to another GPU count (or changing TP/PP, which changes the data-parallel "
        "size) breaks DeepSpeed's batch assertion. Giving two of the three lets DeepSpeed derive "
        "the third for any size.",
    example='{"train_batch_size": 64, "train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 2}',
    use_instead='{"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 2}',
)


def _written(ctx: DsConfig) -> dict[str, int]:
    """The batch keys the job read as positive numbers from this config (guard/job/from_deepspeed.py), by key."""
    job = ctx.job
    values = {TBS: ("global_batch", job.global_batch), MICRO: ("micro_batch", job.micro_batch),
              GAS: ("num_microbatches", job.num_microbatches)}
    return {key: value for key, (field, value) in values.items() if job.origin(field).kind == "key"}


def _world(ctx: DsConfig) -> str:
    dp = ctx.job.layout.dp if ctx.job.origin("layout.world").kind != "default" else None
    return f"world_size({dp})" if dp else "world_size"


@check(TRIANGLE, FLOOR_DIVISION, NO_BATCH, PINNED)
def triangle(ctx: DsConfig) -> None:
    if ctx.kind == "neox":
        return  # NeoX derives the batch keys from its own arguments before DeepSpeed sees them
    given = _written(ctx)
    tbs, micro, gas = (given.get(k) for k in (TBS, MICRO, GAS))
    written = {k for k in (TBS, MICRO, GAS) if ctx.has(k)}
    if written - set(given):
        return  # "auto", strings, zero: owned by the auto and value rules
    # DeepSpeed's world_size in the batch triangle is its data-parallel size; one only assumed is judged as unknown
    world = ctx.job.layout.dp if ctx.job.origin("layout.world").kind != "default" else None
    if tbs and micro and gas:
        _all_three(ctx, tbs, micro, gas, world)
    elif tbs and micro:
        _derive(ctx, MICRO, GAS, tbs, micro, world, lambda d, w: micro * d * w)
    elif tbs and gas:
        _derive(ctx, GAS, MICRO, tbs, gas, world, lambda d, w: d * gas * w)
    elif tbs and not micro and not gas and not written - {TBS}:
        # only train_batch_size: DeepSpeed sets gas = 1 and micro = train_batch_size // W
        _derive(ctx, GAS, MICRO, tbs, 1, world, lambda d, w: d * w)
    elif not tbs and not micro and not ctx.is_hf and not (written & {TBS, MICRO}):
        ctx.report(NO_BATCH, (), "neither train_batch_size nor train_micro_batch_size_per_gpu is "
                   "given: 'Either train_batch_size or train_micro_batch_size_per_gpu needs to be provided'",
                   help="add train_micro_batch_size_per_gpu (and gradient_accumulation_steps)")


def _related(ctx: DsConfig, *keys: str) -> list[Related]:
    return [Related(f"{k} is here", ctx.doc.path, ctx.span(k)) for k in keys if ctx.has(k)]


def _all_three(ctx: DsConfig, tbs: int, micro: int, gas: int, world: int | None) -> None:
    factors = f"train_batch_size({tbs}) != micro({micro}) * gas({gas}) * {_world(ctx)}"
    related = _related(ctx, MICRO, GAS)
    if world is not None:
        if tbs != micro * gas * world:
            ctx.report(TRIANGLE, (TBS,), f"{factors}: DeepSpeed asserts '{ASSERTION} {tbs} != "
                       f"{micro} * {gas} * {world}'", at_value=True, related=related,
                       help=f"set train_batch_size to {micro * gas * world}, or drop it and let "
                            "DeepSpeed derive it", data={"expected": micro * gas * world})
        return
    if tbs % (micro * gas):
        ctx.report(TRIANGLE, (TBS,), f"{factors} for every world size: {tbs} is not a multiple of "
                   f"{micro} * {gas} = {micro * gas}", at_value=True, related=related,
                   help="make train_batch_size a multiple of micro * gas, or drop it")
        return
    dp = tbs // (micro * gas)
    if ctx.batch_filled:  # "auto" in the file: the Trainer computes it for whatever world it is launched on
        return
    ctx.report(PINNED, (TBS,), f"all three batch keys are fixed: the config only works with a "
               f"data-parallel size of {dp} ({tbs} = {micro} * {gas} * {dp})", at_value=True,
               help="drop train_batch_size so DeepSpeed derives it for any GPU count", data={"dp": dp})


def _derive(ctx: DsConfig, given: str, derived: str, tbs: int, value: int, world: int | None, product) -> None:
    """DeepSpeed's integer division for the missing key, as the job derived it (guard/job/deepspeed_values.py);
    without a world, whether any world can make it whole. `product(d, w)`: the train batch size d and w give."""
    tbs_key = TBS
    if world is None:
        if tbs % value:
            ctx.report(FLOOR_DIVISION, (tbs_key,), f"train_batch_size({tbs}) is not a multiple of "
                       f"{given}({value}): whatever the world size, DeepSpeed's floor division makes "
                       f"{derived} inconsistent", at_value=True, related=_related(ctx, given),
                       help=f"make train_batch_size a multiple of {value}")
        return
    result = ctx.job.num_microbatches if derived == GAS else ctx.job.micro_batch
    if result == 0:
        ctx.report(FLOOR_DIVISION, (tbs_key,), f"DeepSpeed derives {derived} = 0 from train_batch_size"
                   f"({tbs}), {given}({value}) and {_world(ctx)}: '{'Gradient accumulation steps' if derived == GAS else 'Micro batch size per gpu'}: 0 has to be greater than 0'",
                   at_value=True, related=_related(ctx, given),
                   help=f"use a train_batch_size of at least {product(1, world)}")
    elif product(result, world) != tbs:
        ctx.report(FLOOR_DIVISION, (tbs_key,), f"DeepSpeed derives {derived} = {result} by floor "
                   f"division, then asserts {tbs} != {product(result, world)} "
                   f"(train_batch_size is not a multiple of {product(1, world)})", at_value=True,
                   related=_related(ctx, given),
                   help=f"use train_batch_size {product(result, world)} or {product(result + 1, world)}")


@check(HF_INCOMPLETE)
def hf_incomplete(ctx: DsConfig) -> None:
    if not ctx.is_hf or ctx.written(TBS) != "auto":
        return
    missing = [k for k in (MICRO, GAS) if not ctx.has(k)]
    if missing:
        ctx.report(HF_INCOMPLETE, (TBS,), f'train_batch_size is "auto" but {" and ".join(missing)} '
                   "is missing: the Trainer fills only keys that exist, so DeepSpeed sees the default "
                   "and its batch assertion fails whenever the Trainer's value differs",
                   help=" and ".join(f'add "{k}": "auto"' for k in missing))
