"""`Trainer(..., callbacks=[guard.plugins.hf.GuardCallback()])`: the launch check when training begins, on
the Trainer's arguments (per-device batch, accumulation, DeepSpeed config, gradient checkpointing) and the
model's config, at GUARD_SEQ_LENGTH (default: the model's positions). The weights are loaded by then: an
abort stops the job before its first step, not before it loads; guard launch stops it earlier."""

from __future__ import annotations

import os

from guard.plugins.in_process import already_checked, run_check, settings_from_environment


class GuardCallback:
    """A transformers TrainerCallback (duck-typed: every other event is a no-op)."""

    def __getattr__(self, name: str):
        if name.startswith("on_"):
            return lambda *args, **kwargs: None
        raise AttributeError(name)

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        if already_checked():
            return
        verdict = run_check(request_for(args, model))
        if verdict.action == "rewrite":
            raise SystemExit("guard: the Trainer's arguments cannot be rewritten once it is built: restart with "
                             f"{verdict.reason}")


def request_for(args, model):
    """The job the Trainer runs: its DeepSpeed config (or plain DP), model, batch and checkpointing."""
    from guard.job import hf_config
    from guard.job.from_deepspeed import read_deepspeed
    from guard.job.from_inputs import JobSource
    from guard.job.origin import Origin
    from guard.launch.command import LaunchRequest

    settings = settings_from_environment()
    config = args.deepspeed if isinstance(args.deepspeed, dict) else {}
    if isinstance(args.deepspeed, str):
        import json

        with open(args.deepspeed, encoding="utf-8") as handle:
            config = json.load(handle)
    arch = hf_config.from_dict(model.config.to_dict(), "the model's config")
    seq = int(os.environ.get("GUARD_SEQ_LENGTH", "0")) or arch.max_positions
    config = {**config, "train_micro_batch_size_per_gpu": args.per_device_train_batch_size,
              "gradient_accumulation_steps": args.gradient_accumulation_steps}
    job = read_deepspeed(config, "the Trainer's arguments", arch, settings.world_size,
                         world_origin=Origin("launcher", "WORLD_SIZE"), seq_length=seq,
                         gradient_checkpointing=bool(args.gradient_checkpointing),
                         precision="bf16" if args.bf16 else "fp16" if args.fp16 else "fp32",
                         gpus_per_node=settings.gpus_per_node or 8)
    return LaunchRequest(["Trainer"], JobSource(job), settings.world_size)
