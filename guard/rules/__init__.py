"""Lint rules, one module per family; importing a module registers its rules and checks."""

from __future__ import annotations

import importlib

FAMILIES = (
    "general",
    "ds_syntax",
    "ds_keys",
    "ds_defaults",
    "ds_values",
    "ds_auto",
    "ds_batch",
    "ds_precision",
    "ds_zero",
    "ds_optimizer",
    "ds_scheduler",
    "ds_misc",
    "accelerate",
    "finetune",
    "finetune_trainer",
    "finetune_pair",
    "post_training",
    "mlm_args",
    "mlm_parallel",
    "mlm_shape",
    "mlm_training",
    "mlm_required",
    "mlm_advice",
    "mds",
    "launch",
    "memory",
    "memory_finetune",
)

# Families that judge a document as written (syntax, keys, values, "auto" placement, flags as a parser sees
# them); every other one judges the job (guard/rules/context.py JUDGED_BY_JOB says which values it reads there).
DOCUMENT_FAMILIES = frozenset({"general", "ds_syntax", "ds_keys", "ds_defaults", "ds_values", "ds_auto", "ds_classes",
                               "accelerate", "mlm_args", "mlm_required", "launch"})

_loaded = False


def load_all() -> None:
    global _loaded
    if not _loaded:
        for name in FAMILIES:
            importlib.import_module(f"guard.rules.{name}")
        _loaded = True
