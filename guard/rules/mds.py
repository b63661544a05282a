"""MDS0xx: Megatron-DeepSpeed command lines checked against the DeepSpeed JSON they load."""

from __future__ import annotations

from typing import TYPE_CHECKING

from guard.diagnostic import Related
from guard.rules.context import flag
from guard.rules.registry import check, rule

if TYPE_CHECKING:  # annotations only: a DeepSpeed-only check never imports the Megatron context
    from guard.rules.megatron_context import MegatronCheck

ZERO_STAGE = rule(
    "MDS001", "zero-stage-mismatch", "error",
    "--zero-stage differs from zero_optimization.stage in the DeepSpeed config.",
    what="Compares Megatron-DeepSpeed's `--zero-stage` (default 1.0) with the JSON stage.",
    why="DeepSpeed's engine takes the stage from the JSON, while Megatron-DeepSpeed uses "
        "--zero-stage to decide `zero.Init` and parameter gathering: ZeRO-3 in the JSON with "
        "--zero-stage 1 builds the full model on every GPU first; the reverse wraps a stage-1 "
        "engine in zero.Init.",
    example="--zero-stage 1   # ds_config: {\"zero_optimization\": {\"stage\": 3}}",
    use_instead="--zero-stage 3",
)

BATCH = rule(
    "MDS002", "deepspeed-batch-mismatch", "error",
    "train_batch_size / train_micro_batch_size_per_gpu differ from --global-batch-size / --micro-batch-size.",
    what="Compares the JSON batch keys with Megatron's flags, and checks the JSON's own batch "
         "triangle with the data-parallel size of Megatron's grid (world / (TP x PP)).",
    why="DeepSpeed asserts the JSON batch triangle at initialize (with the data-parallel size of "
        "the pipeline grid), then Megatron overrides train_batch_size every step; a mismatch "
        "either stops the job or trains with a batch the config does not show "
        "(Megatron-DeepSpeed run_deepspeed_example: 64 vs 1024).",
    example='--global-batch-size 1024   # ds_config: {"train_batch_size": 64}',
    use_instead='--global-batch-size 1024   # ds_config: {"train_batch_size": 1024}',
)

PRECISION = rule(
    "MDS003", "deepspeed-precision-mismatch", "error",
    "--fp16/--bf16 disagree with fp16.enabled/bf16.enabled in the DeepSpeed config.",
    what="Compares Megatron's precision flags with the JSON precision sections.",
    why="Megatron builds the model in one dtype and DeepSpeed's optimizer wrapper expects "
        "another: fp16 loss scaling on a bf16 model, or fp32 master weights missing.",
    example='--bf16   # ds_config: {"fp16": {"enabled": true}}',
    use_instead='--bf16   # ds_config: {"bf16": {"enabled": true}}',
)

ZERO_PIPELINE = rule(
    "MDS004", "zero-with-pipeline-engine", "error",
    "ZeRO stage 2 or 3 with DeepSpeed's pipeline engine (no --no-pipeline-parallel).",
    what="Without `--no-pipeline-parallel`, Megatron-DeepSpeed wraps the model in DeepSpeed's "
         "PipelineModule (even with PP = 1); reports a JSON ZeRO stage above 1 in that case.",
    why="DeepSpeed's PipelineEngine asserts 'ZeRO-2 and ZeRO-3 are incompatible with pipeline "
        "parallelism' (Megatron-DeepSpeed#474, DeepSpeed#568).",
    example='--pipeline-model-parallel-size 1   # ds_config: {"zero_optimization": {"stage": 3}}',
    use_instead="--pipeline-model-parallel-size 1 --no-pipeline-parallel",
    references=("https://github.com/deepspeedai/Megatron-DeepSpeed/issues/474",),
)

UNUSED = rule(
    "MDS005", "deepspeed-config-unused", "warning",
    "--deepspeed_config without --deepspeed (or --deepspeed without a config).",
    what="Reports a DeepSpeed config passed without `--deepspeed`, which Megatron-DeepSpeed then "
         "ignores, and `--deepspeed` without `--deepspeed_config`.",
    why="Without --deepspeed the job trains with Megatron's own optimizer and none of the ZeRO "
        "settings; without a config DeepSpeed stops at initialize.",
    example="--deepspeed_config ds_config.json",
    use_instead="--deepspeed --deepspeed_config ds_config.json",
)

CLIENT_OFFLOAD = rule(
    "MDS006", "offload-with-megatron-optimizer", "error",
    "Optimizer offload in the JSON while Megatron-DeepSpeed passes its own GPU optimizer.",
    what="Reports `zero_optimization.offload_optimizer.device` cpu/nvme (or the deprecated `cpu_offload: "
         "true`) without `--cpu-optimizer`, or with `--cpu-optimizer --cpu_torch_adam` (which builds "
         "torch.optim.AdamW instead of DeepSpeedCPUAdam), unless `zero_force_ds_cpu_optimizer` is false.",
    why="Megatron-DeepSpeed always hands DeepSpeed a client optimizer; ZeRO-Offload refuses it: "
        "`ZeRORuntimeException: You are using ZeRO-Offload with a client provided optimizer` "
        "(Megatron-DeepSpeed#298).",
    example='ds_config: {"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}}}',
    use_instead="--cpu-optimizer   # DeepSpeedCPUAdam",
    references=("https://github.com/deepspeedai/Megatron-DeepSpeed/issues/298",),
)


def _rel(s: MegatronCheck, *path: str) -> list[Related]:
    where = s.cmd.deepspeed_config.locate(*path) if s.cmd.deepspeed_config else None
    if where is None:
        return []
    file, span = where
    return [Related(f"{'.'.join(path)} in {s.cmd.deepspeed_config.label}", file, span)]


@check(UNUSED, target="megatron")
def deepspeed_flags(s: MegatronCheck) -> None:
    cmd = s.cmd
    if cmd.flavour != "megatron-deepspeed":
        return
    has_config = cmd.given("deepspeed_config") or cmd.given("deepscale_config")
    on = s.job.framework == "megatron-deepspeed"  # the reader's: --deepspeed (or its default) is on
    if has_config and not on and cmd.v("deepscale") is not True:
        s.report(UNUSED, "deepspeed_config", "--deepspeed_config without --deepspeed: Megatron-DeepSpeed "
                 "does not use DeepSpeed and the config is ignored", help="add --deepspeed")
    elif on and not has_config:
        s.report(UNUSED, "deepspeed", "--deepspeed without --deepspeed_config: DeepSpeed has no config "
                 "to initialize with", help="add --deepspeed_config ds_config.json")


@check(ZERO_STAGE, BATCH, PRECISION, ZERO_PIPELINE, CLIENT_OFFLOAD, target="megatron")
def cross_check(s: MegatronCheck) -> None:
    ds = s.cmd.deepspeed_config
    if s.job.framework != "megatron-deepspeed":
        return
    if ds is None:
        _flag_stage_with_pipeline(s)
        return
    # the job's stage is the config's when it writes one (guard/job/megatron_training.py reads it once)
    stage = s.job.zero_stage if s.job.origin("zero_stage").kind == "key" else None
    zero = ds.data.get("zero_optimization")
    _zero_stage(s, ds, stage)
    _batch(s, ds)
    _triangle(s, ds)
    _precision(s, ds)
    _zero_with_pipeline(s, ds, stage)
    _client_offload(s, ds, zero)


def _flag_stage_with_pipeline(s: MegatronCheck) -> None:
    """The JSON is not available: --zero-stage is the stage the script says it runs."""
    stage = s.job.zero_stage
    if s.cmd.given("zero_stage") and stage >= 2 and s.cmd.v("no_pipeline_parallel") is not True:
        s.report(ZERO_PIPELINE, "zero_stage", f"--zero-stage {stage} with DeepSpeed's pipeline engine "
                 "(no --no-pipeline-parallel): ZeRO-2 and ZeRO-3 are incompatible with pipeline "
                 "parallelism", at_value=True,
                 help="add --no-pipeline-parallel (needs PP 1), or use ZeRO stage 0/1")


def _zero_stage(s: MegatronCheck, ds, stage: int | None) -> None:
    """--zero-stage (as written, else Megatron-DeepSpeed's default) against the config's stage, which wins."""
    written = s.cmd.written("zero_stage")
    try:
        flag_stage = float(written) if written else s.cmd.default("zero_stage")
    except ValueError:
        flag_stage = None
    if stage is not None and isinstance(flag_stage, (int, float)) and int(flag_stage) != stage and \
            s.cmd.known("zero_stage"):
        s.report(ZERO_STAGE, "zero_stage", f"--zero-stage {flag_stage:g} but the DeepSpeed config "
                 f"({ds.label}) has zero_optimization.stage {stage}", at_value=s.cmd.given("zero_stage"),
                 related=_rel(s, "zero_optimization", "stage"), help=f"use --zero-stage {stage}")


def _batch(s: MegatronCheck, ds) -> None:
    """The JSON's batch keys against Megatron's batch flags."""
    for key, dest, mine in (("train_batch_size", "global_batch_size", s.job.global_batch),
                            ("train_micro_batch_size_per_gpu", "micro_batch_size", s.job.micro_batch)):
        value = ds.data.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and s.cmd.given(dest) and value != mine:
            s.report(BATCH, dest, f"{key} is {value} in the DeepSpeed config ({ds.label}) but "
                     f"{s.cmd.option(dest)} is {mine}", at_value=True, related=_rel(s, key))


def _precision(s: MegatronCheck, ds) -> None:
    """fp16 / bf16 enabled in the JSON and given as flags, or neither."""
    data = ds.data
    fp16 = isinstance(data.get("fp16"), dict) and flag(data["fp16"].get("enabled"), False)
    bf16 = (isinstance(data.get("bf16"), dict) and flag(data["bf16"].get("enabled"), False)) or (
        isinstance(data.get("bfloat16"), dict) and flag(data["bfloat16"].get("enabled"), False))
    for name, on_json, dest in (("fp16", fp16, "fp16"), ("bf16", bf16, "bf16")):
        on_flag = s.cmd.given(dest)
        if on_json != on_flag and (on_json or on_flag):
            if on_flag:
                message = f"--{name} is given but {name}.enabled is not true in the DeepSpeed config ({ds.label})"
            else:
                message = f"{name}.enabled is true in the DeepSpeed config ({ds.label}) but --{name} is not given"
            s.report(PRECISION, dest, message, related=_rel(s, name, "enabled"))


def _zero_with_pipeline(s: MegatronCheck, ds, stage: int | None) -> None:
    pipeline_engine = s.cmd.v("no_pipeline_parallel") is not True
    if stage is not None and stage >= 2 and pipeline_engine:
        s.report_at(ZERO_PIPELINE, s.cmd.flag_span("pipeline_model_parallel_size")
                    if s.cmd.given("pipeline_model_parallel_size") else s.cmd.anchor,
                    "--no-pipeline-parallel",
                    f"ZeRO-{stage} (DeepSpeed config {ds.label}) with DeepSpeed's pipeline engine: "
                    "ZeRO-2 and ZeRO-3 are incompatible with pipeline parallelism",
                    related=_rel(s, "zero_optimization", "stage"),
                    help="add --no-pipeline-parallel (needs PP 1), or use ZeRO stage 0/1")


def _client_offload(s: MegatronCheck, ds, zero) -> None:
    """ZeRO-Offload of the optimizer with Megatron-DeepSpeed's own (client) optimizer.

    get_megatron_optimizer builds DeepSpeedCPUAdam only for --cpu-optimizer without --cpu_torch_adam
    (that one builds torch.optim.AdamW, which DeepSpeed's _configure_optimizer refuses as well).
    """
    cmd = s.cmd
    zero = zero if isinstance(zero, dict) else {}
    key = "offload_optimizer" if "offload_optimizer" in zero else "cpu_offload"
    device = s.job.offload_optimizer  # the reader's, deprecated cpu_offload included
    cpu_adam = cmd.v("cpu_optimizer") is True and cmd.v("cpu_torch_adam", False) is not True
    if device in ("cpu", "nvme") and not cpu_adam and ds.data.get("zero_force_ds_cpu_optimizer", True) is not False:
        given = "--cpu-optimizer --cpu_torch_adam (torch.optim.AdamW)" if cmd.v("cpu_optimizer") is True \
            else "Megatron-DeepSpeed's own optimizer"
        s.report_at(CLIENT_OFFLOAD, cmd.flag_span("deepspeed_config"), "--deepspeed_config",
                    f"{key} (optimizer offload to {device!r}) with {given}: DeepSpeed refuses ZeRO-Offload "
                    "with a client optimizer that is not DeepSpeedCPUAdam",
                    related=_rel(s, "zero_optimization", *(key, "device")[:2 if key == "offload_optimizer" else 1]),
                    help="add --cpu-optimizer" + (" and drop --cpu_torch_adam" if given[0] == "-" else ""))


def _triangle(s: MegatronCheck, ds) -> None:
    """DeepSpeed asserts its batch triangle at initialize with the data-parallel size of Megatron's grid."""
    data = ds.data
    values = [data.get(k) for k in ("train_batch_size", "train_micro_batch_size_per_gpu",
                                     "gradient_accumulation_steps")]
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        return
    lay = s.job.layout
    tp, pp, world = lay.tp, lay.pp, lay.world
    if world is None or not tp or not pp or world % (tp * pp):
        return
    # the pipeline engine's grid is world / (TP x PP); with --no-pipeline-parallel, Megatron's mpu
    dp = lay.dp if s.cmd.v("no_pipeline_parallel") is True else world // (tp * pp)
    if dp is None:
        return
    tbs, micro, gas = values
    if tbs != micro * gas * dp:
        s.report_at(BATCH, s.cmd.flag_span("deepspeed_config"), "--deepspeed_config",
                    f"train_batch_size({tbs}) != micro({micro}) * gas({gas}) * data_parallel({dp}) in the "
                    f"DeepSpeed config ({ds.label}); DeepSpeed asserts it at initialize "
                    f"(data-parallel size = world {world} / (tp {tp} * pp {pp}))",
                    related=_rel(s, "train_batch_size"))
