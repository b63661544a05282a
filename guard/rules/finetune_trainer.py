"""The HF Trainer's own refusals of a fine-tuning job under DeepSpeed (transformers 5.24 Trainer.__init__)."""

from __future__ import annotations

from guard.rules.finetune_context import FineTuneCheck
from guard.rules.registry import check, rule

SAVE_ONLY_BEST = rule(
    "FT012", "save-only-model-with-load-best", "error",
    "save_only_model with load_best_model_at_end under DeepSpeed: the Trainer refuses.",
    what="Reports a training config that sets both `save_only_model` and `load_best_model_at_end` and names a "
         "DeepSpeed file.",
    why="Trainer.__init__ raises `ValueError: DeepSpeed can't be used with `save_only_model` along with "
        "`load_best_model_at_end`.`: loading the best checkpoint needs the DeepSpeed engine's state, which a "
        "model-only save does not write.",
    example="save_only_model: true\nload_best_model_at_end: true\ndeepspeed: ds_z2.json",
    use_instead="save_only_model: false\nload_best_model_at_end: true\ndeepspeed: ds_z2.json",
    references=("transformers trainer.py: Trainer.__init__ (save_only_model check)",),
)

AUTO_BATCH_ZERO3 = rule(
    "FT013", "auto-find-batch-size-with-zero3", "error",
    "auto_find_batch_size under DeepSpeed ZeRO-3: the Trainer refuses.",
    what="Reports a training config that sets `auto_find_batch_size` with a ZeRO-3 DeepSpeed file.",
    why="Trainer.__init__ raises `ValueError: `auto_find_batch_size` isn't supported yet with DeepSpeed Zero-3. "
        "Please consider using Zero-2, Zero-1, or FSDP`.",
    example="auto_find_batch_size: true\ndeepspeed: ds_z3.json",
    use_instead="per_device_train_batch_size: 4\ndeepspeed: ds_z3.json",
    references=("transformers trainer.py: Trainer.__init__ (auto_find_batch_size check)",),
)


@check(SAVE_ONLY_BEST, AUTO_BATCH_ZERO3, target="finetune")
def trainer_refusals(ctx: FineTuneCheck) -> None:
    ft = ctx.ft
    if ctx.zero_stage is None:  # no DeepSpeed file read: the Trainer runs DDP, which allows both
        return
    if ft.flag("save_only_model") and ft.flag("load_best_model_at_end"):
        ctx.report(SAVE_ONLY_BEST, "save_only_model", "save_only_model with load_best_model_at_end under DeepSpeed: "
                   "the Trainer raises 'DeepSpeed can't be used with `save_only_model` along with "
                   "`load_best_model_at_end`.'", help="drop save_only_model (or load_best_model_at_end)")
    if ctx.zero_stage == 3 and ft.flag("auto_find_batch_size"):
        ctx.report(AUTO_BATCH_ZERO3, "auto_find_batch_size", "auto_find_batch_size under ZeRO-3: the Trainer raises "
                   "'`auto_find_batch_size` isn't supported yet with DeepSpeed Zero-3'",
                   help="give per_device_train_batch_size (guard estimate says what fits)")
