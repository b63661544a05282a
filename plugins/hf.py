"""`Trainer(..., callbacks=[guard.plugins.hf.GuardCallback()])`: the launch check when training begins, on
the Trainer's arguments (per-device batch, accumulation, DeepSpeed config, gradient checkpointing) and the
model's config, at GUARD_SEQ_LENGTH (default: the model's positions). The weights are loaded by then: an
abort stops the job before its first step, not before it loads; guard launch stops it earlier."""

from __future__ import annotations

from guard.plugins.in_process import already_checked, guarded


class GuardCallback:
    """A transformers TrainerCallback (duck-typed: every other event is a no-op)."""

    def __getattr__(self, name: str):
        if name.startswith("on_"):
            return lambda *args, **kwargs: None
        raise AttributeError(name)

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        if already_checked():
            return
        verdict = guarded(lambda: trainer_subject(args, model))
        if verdict is not None:
            raise SystemExit("guard: the Trainer's arguments cannot be rewritten once it is built: restart with "
                             f"{verdict.reason}")


def trainer_subject(args, model):
    """The job the Trainer runs: its DeepSpeed config (or plain DP), model, batch and checkpointing."""
    from guard.intake.in_process import trainer_arguments
    from guard.job import hf_config

    return trainer_arguments(args, hf_config.from_dict(model.config.to_dict(), "the model's config"))
