"""The DeepSpeed config as the HF Trainer hands it to DeepSpeed: "auto" filled from the training arguments, and
the written values it refuses because they differ from them.

transformers 5.24 integrations/deepspeed.py HfTrainerDeepSpeedConfig.trainer_config_process: fill_match
replaces "auto" with the Trainer's value and records a mismatch for any other value that differs;
trainer_config_finalize raises "Please correct the following DeepSpeed config values that mismatch
TrainingArguments values" when there is one. ZeRO's hidden-size buckets are filled in from_deepspeed.py.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

from guard.job.finetune_config import FineTuneConfig


@dataclass(frozen=True)
class Mismatch:
    path: tuple[str, ...]  # the DeepSpeed key
    ds_value: Any
    hf_key: str  # the training argument, as transformers names it
    hf_value: Any
    source: str  # the canonical field of the training config that gives it ("" when computed)


def _matches(ft: FineTuneConfig, world: int | None) -> list[tuple[tuple[str, ...], Any, str, str]]:
    """(DeepSpeed key, the Trainer's value, its name in the message, canonical field), in fill_match's order."""
    mbs, gas = ft.get("micro_batch"), ft.get("grad_accum")
    precision = ft.precision()
    out = [(("train_micro_batch_size_per_gpu",), mbs, "per_device_train_batch_size", "micro_batch"),
           (("gradient_accumulation_steps",), gas, "gradient_accumulation_steps", "grad_accum")]
    if world and isinstance(mbs, int) and isinstance(gas, int):
        out.append((("train_batch_size",), world * mbs * gas, "train_batch_size (calculated)", ""))
    out += [(("gradient_clipping",), ft.get("max_grad_norm"), "max_grad_norm", "max_grad_norm"),
            (("optimizer", "params", "lr"), ft.get("learning_rate"), "learning_rate", "learning_rate"),
            (("optimizer", "params", "betas"), [ft.get("adam_beta1"), ft.get("adam_beta2")],
             "adam_beta1+adam_beta2", "adam_beta1"),
            (("optimizer", "params", "eps"), ft.get("adam_epsilon"), "adam_epsilon", "adam_epsilon"),
            (("optimizer", "params", "weight_decay"), ft.get("weight_decay"), "weight_decay", "weight_decay"),
            (("scheduler", "params", "warmup_max_lr"), ft.get("learning_rate"), "learning_rate", "learning_rate"),
            (("fp16", "enabled"), precision == "fp16", "fp16|fp16_full_eval", "fp16"),
            (("bf16", "enabled"), precision == "bf16", "bf16|bf16_full_eval", "bf16")]
    return out


def fill(config: dict, ft: FineTuneConfig, world: int | None) -> tuple[dict, list[Mismatch]]:
    """(the config with "auto" replaced, the mismatches transformers refuses). The train batch size needs the
    world size: without it, an "auto" there stays."""
    filled = copy.deepcopy(config)
    mismatches = []
    for path, hf_value, hf_key, source in _matches(ft, world):
        node = filled
        for key in path[:-1]:
            node = node.get(key) if isinstance(node, dict) else None
        if not isinstance(node, dict) or path[-1] not in node:
            continue  # find_config_node: an absent key is neither filled nor checked
        value = node[path[-1]]
        if value == "auto":
            node[path[-1]] = hf_value
        elif value is not None and value != hf_value:
            mismatches.append(Mismatch(path, value, hf_key, hf_value, source))
    return filled, mismatches

