"""An OpenRLHF training command as guard prices it: the trainer its module runs, and the DeepSpeed config OpenRLHF
builds from its flags (it has no DeepSpeed file).

From OpenRLHF 0.11 (3c3be623): openrlhf/utils/deepspeed/deepspeed_utils.py get_train_ds_config (ZeRO stage
--ds.zero_stage, the optimizer offloaded to the host with --ds.adam_offload, overlap_comm with --ds.overlap_comm,
reduce_scatter under ZeRO-3, bf16 or fp16 by --ds.param_dtype, gradient_clipping --max_norm) and deepspeed.py
get_ds_train_config (train_micro_batch_size_per_gpu and train_batch_size from the flags); the reference model is
another engine of get_eval_ds_config: ZeRO-3 when training at stage 3, else stage 0 (a whole copy on every rank).
"""

from __future__ import annotations

from guard.job.finetune_config import as_int

# openrlhf.cli.<module> -> the method guard prices (None: named, not priced)
MODULES = {"train_sft": "sft", "train_dpo": "dpo", "train_kto": "kto", "train_vl_dpo": "dpo",
           "train_rm": None, "train_prm": None, "train_kd": None, "train_ppo": None, "train_ppo_ray": None,
           "train_grpo": None, "train_grpo_ray": None, "train_opd": None, "train_es_ray": None,
           "train_search_ppo": None}
NOT_PRICED = {"train_rm": "a reward model (a value head over paired rows)", "train_prm": "a process reward model",
              "train_kd": "knowledge distillation (a teacher model beside the student)",
              "train_ppo": "PPO's actor, critic, reference and reward models",
              "train_ppo_ray": "PPO/GRPO on Ray: actor, critic, reference and reward groups and vLLM engines",
              "train_grpo": "GRPO's actor, reference and generation", "train_grpo_ray": "GRPO on Ray with vLLM engines"}


def module_of(program: str) -> str | None:
    """`openrlhf.cli.train_dpo` -> "train_dpo"; None for another program."""
    parts = program.split(".")
    return parts[2] if len(parts) == 3 and parts[:2] == ["openrlhf", "cli"] else None


def deepspeed_config(ft) -> dict:
    """The DeepSpeed config get_ds_train_config builds from the flags of `ft` (an OPENRLHF FineTuneConfig)."""
    stage = as_int(ft.get("zero_stage"))
    zero = {"stage": stage, "offload_param": {"device": "none"},
            "offload_optimizer": {"device": "cpu" if ft.flag("adam_offload") else "none", "pin_memory": True}}
    if ft.flag("overlap_comm"):
        zero.update(overlap_comm=True, contiguous_gradients=True)
    if stage == 3:
        zero["reduce_scatter"] = True
    dtype = ft.precision()
    return {"train_micro_batch_size_per_gpu": ft.get("micro_batch"), "gradient_accumulation_steps": "auto",
            "zero_optimization": zero, "bf16": {"enabled": dtype == "bf16"}, "fp16": {"enabled": dtype == "fp16"},
            "gradient_clipping": ft.get("max_grad_norm")}


def gradient_accumulation(ft, world: int | None) -> int | None:
    """train_batch_size / (micro-batch x processes), as DeepSpeed derives it; None without a world."""
    micro, batch = as_int(ft.get("micro_batch")), as_int(ft.get("global_batch"))
    if not world or not micro or not batch:
        return None
    return max(1, batch // (micro * world))
