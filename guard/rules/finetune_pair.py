"""FT014-FT015: what a training config and the DeepSpeed file it names silently change together."""

from __future__ import annotations

from guard.job import trainer_optim
from guard.job.deepspeed_values import cpu_optimizer_forced
from guard.rules.finetune_context import FineTuneCheck
from guard.rules.registry import check, rule

HF_OPTIM_SCHED = "transformers 5.24 integrations/deepspeed.py: deepspeed_optim_sched"
ACCELERATE_CPU_OPTIM = ("accelerate 1.15 accelerator.py: Accelerator._prepare_deepspeed (zero_force_ds_cpu_optimizer); "
                        "utils/deepspeed.py: map_pytorch_optim_to_deepspeed")
# the HF scheduler each DeepSpeed scheduler stands for (deepspeed/runtime/lr_schedules.py): the same curve, no finding
SAME_CURVE = {"WarmupLR": {"constant_with_warmup", "constant"}, "WarmupDecayLR": {"linear"},
              "WarmupCosineLR": {"cosine"}}
# the optimizers map_pytorch_optim_to_deepspeed turns into DeepSpeedCPUAdam with adamw_mode=True: torch's AdamW
# (isinstance optim.AdamW; Apex's and NPU's fused ones are other classes)
TORCH_ADAMW = {name for name in trainer_optim.TORCH_ADAMW if "apex" not in name and "npu" not in name}


DS_SCHEDULER = rule(
    "FT014", "deepspeed-scheduler-replaces-trainer-scheduler", "warning",
    "A `scheduler` section in the DeepSpeed file while the training config names another learning-rate schedule.",
    what="Reports a written lr_scheduler_type (axolotl: lr_scheduler) when the DeepSpeed file the Trainer is "
         "given has a `scheduler` section of another shape (WarmupLR for constant schedules, WarmupDecayLR for "
         "linear, WarmupCosineLR for cosine), in both files.",
    why="With a `scheduler` section the HF Trainer hands scheduling to DeepSpeed (deepspeed_optim_sched: "
        "DummyScheduler) and never builds its own: a `cosine` schedule silently runs as DeepSpeed's, e.g. "
        "WarmupLR, constant after warm-up.",
    example="# train.yaml\nlr_scheduler_type: cosine\ndeepspeed: ds.json\n# ds.json\n"
            "{\"scheduler\": {\"type\": \"WarmupLR\", \"params\": {\"warmup_num_steps\": \"auto\"}}}",
    use_instead="# ds.json: no scheduler section (the Trainer's cosine schedule runs)",
    references=(HF_OPTIM_SCHED, "deepspeed runtime/lr_schedules.py"),
)

CPU_OPTIMIZER = rule(
    "FT015", "offload-replaces-optimizer", "warning",
    "CPU optimizer offload without an `optimizer` section: accelerate replaces the Trainer's optimizer with "
    "DeepSpeedCPUAdam.",
    what="Reports a written optimizer other than torch's AdamW, or written Adam betas / epsilon, when the "
         "DeepSpeed file offloads the optimizer to the CPU, has no `optimizer` section and leaves "
         "zero_force_ds_cpu_optimizer at its default (true). The memory estimate prices DeepSpeedCPUAdam, the "
         "optimizer that runs.",
    why="accelerate's _prepare_deepspeed calls map_pytorch_optim_to_deepspeed: the requested optimizer "
        "(adamw_bnb_8bit, paged_adamw_8bit, adafactor, ...) becomes DeepSpeedCPUAdam keeping only lr and "
        "weight_decay (betas and eps back to 0.9/0.999 and 1e-8), and anything but torch's AdamW runs with "
        "adamw_mode=False: L2 weight decay instead of decoupled.",
    example="# train.yaml\noptim: adamw_bnb_8bit\ndeepspeed: ds.json\n# ds.json\n"
            "{\"zero_optimization\": {\"stage\": 2, \"offload_optimizer\": {\"device\": \"cpu\"}}}",
    use_instead="# ds.json\n{\"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": \"auto\", "
                "\"betas\": \"auto\"}}, "
                "\"zero_optimization\": {\"stage\": 2, \"offload_optimizer\": {\"device\": \"cpu\"}}}",
    references=(ACCELERATE_CPU_OPTIM, HF_OPTIM_SCHED),
)


@check(DS_SCHEDULER, CPU_OPTIMIZER, target="finetune")
def deepspeed_takes_over(ctx: FineTuneCheck) -> None:
    config = ctx.ds_config
    if not isinstance(config, dict):
        return
    ft = ctx.ft
    scheduler = config.get("scheduler")
    written = ft.get("lr_scheduler")
    if isinstance(scheduler, dict) and "lr_scheduler" in ft.written and isinstance(written, str):
        kind = str(scheduler.get("type"))
        if written.lower() not in SAME_CURVE.get(kind, set()):
            key = ft.dialect.keys["lr_scheduler"]
            message = (f"{key} {written!r} is not run: the DeepSpeed file's scheduler section ({kind}) replaces it "
                       "(transformers deepspeed_optim_sched hands scheduling to DeepSpeed)")
            ctx.report(DS_SCHEDULER, "lr_scheduler", message, help=f"remove the scheduler section, or remove {key}",
                       related=ctx.ds_related("scheduler", message="the DeepSpeed scheduler"))
            ctx.report_in_deepspeed(DS_SCHEDULER, ("scheduler",), message)
    if not cpu_optimizer_forced(config):
        return
    optim = str(ft.get("optim") or "")
    lost = [k for k in ("adam_beta1", "adam_beta2", "adam_epsilon")
            if k in ft.written and ft.get(k) != ft.dialect.defaults.get(k)]
    if "optim" in ft.written and optim.lower() not in TORCH_ADAMW:
        ctx.report(CPU_OPTIMIZER, "optim", f"{ft.dialect.keys['optim']} {optim!r} does not run: with the optimizer "
                   "offloaded to the CPU and no optimizer section, accelerate replaces it with DeepSpeedCPUAdam "
                   "(lr and weight_decay kept; L2 weight decay, not decoupled)",
                   help="add an optimizer section to the DeepSpeed file, or set zero_force_ds_cpu_optimizer: false",
                   related=ctx.ds_related("zero_optimization", "offload_optimizer", message="the offload"))
    elif lost:
        ctx.report(CPU_OPTIMIZER, lost[0], f"{', '.join(ft.dialect.keys[k] for k in lost)} not used: with "
                   "the optimizer offloaded to the CPU and no optimizer section, accelerate replaces the optimizer "
                   "with DeepSpeedCPUAdam keeping only lr and weight_decay (betas 0.9/0.999, eps 1e-8)",
                   help="add an optimizer section with \"betas\": \"auto\", \"eps\": \"auto\"",
                   related=ctx.ds_related("zero_optimization", "offload_optimizer", message="the offload"))
