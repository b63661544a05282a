"""Which keys of a LLaMA-Factory, axolotl or TRL / HF Trainer training config say what, and each one's default.

Defaults are the frameworks' own (commits recorded in docs/finetune.md):
- LLaMA-Factory ff6d4d12: hparams/model_args.py, finetuning_args.py, data_args.py, and the HF
  TrainingArguments it extends.
- axolotl 067b021c: utils/schemas/config.py, training.py, peft.py; core/builders/base.py
  (gradient_checkpointing_kwargs default {"use_reentrant": False}); loaders/model.py (QLoRA's
  BitsAndBytesConfig: double quantization on, quant_storage bf16).
- TRL f2cd5771: trainer/model_config.py (lora_r 16, lora_alpha 32, lora_dropout 0.05, attn_implementation None),
  sft_config.py (max_length 1024, packing false, packing_strategy "bfd", padding_free false, gradient_checkpointing
  true); transformers 5.24 TrainingArguments.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# transformers TrainingArguments defaults shared by all three (training_args.py; optim: adamw_torch_fused with
# torch >= 2.8, lr_scheduler_type: linear)
HF_TRAINER = {"micro_batch": 8, "grad_accum": 1, "bf16": False, "fp16": False, "max_grad_norm": 1.0,
              "learning_rate": 5e-5, "weight_decay": 0.0, "adam_beta1": 0.9, "adam_beta2": 0.999,
              "adam_epsilon": 1e-8, "optim": "adamw_torch_fused", "lr_scheduler": "linear",
              "save_only_model": False, "deepspeed": None, "gradient_checkpointing": False,
              "liger": False, "neftune": None, "torch_compile": False, "modules_to_save": None,
              "use_reentrant": False, "load_best_model_at_end": False, "auto_find_batch_size": False,
              "fsdp": None, "fsdp_config": None}
# canonical field -> the key that writes it, where the frameworks agree with TrainingArguments
TRAINER_KEYS = {"micro_batch": "per_device_train_batch_size", "grad_accum": "gradient_accumulation_steps",
                "bf16": "bf16", "fp16": "fp16", "max_grad_norm": "max_grad_norm", "learning_rate": "learning_rate",
                "weight_decay": "weight_decay", "adam_beta1": "adam_beta1", "adam_beta2": "adam_beta2",
                "adam_epsilon": "adam_epsilon", "optim": "optim", "lr_scheduler": "lr_scheduler_type",
                "liger": "use_liger_kernel", "neftune": "neftune_noise_alpha", "torch_compile": "torch_compile",
                "save_only_model": "save_only_model", "deepspeed": "deepspeed",
                "gradient_checkpointing": "gradient_checkpointing", "load_best_model_at_end": "load_best_model_at_end",
                "auto_find_batch_size": "auto_find_batch_size", "fsdp": "fsdp", "fsdp_config": "fsdp_config"}


@dataclass(frozen=True)
class Dialect:
    name: str  # "llamafactory", "axolotl", "trl"
    title: str
    keys: dict[str, str]  # canonical field -> key
    defaults: dict[str, Any]  # canonical field -> the framework's default
    older: dict[str, str] = field(default_factory=dict)  # an older key -> its field, read when the newer is unwritten


# axolotl utils/schemas/config.py: attn_implementation (None), and the deprecated boolean flags that
# normalize_attn_implementation maps onto it (enums.py LEGACY_ATTN_FLAG_TO_IMPL), all None by default
AXOLOTL_ATTENTION = ("attn_implementation", "xformers_attention", "sage_attention", "flex_attention",
                     "flash_attention", "sdp_attention", "eager_attention")

LLAMAFACTORY = Dialect("llamafactory", "LLaMA-Factory", {
    **TRAINER_KEYS, "model": "model_name_or_path", "method": "finetuning_type", "lora_rank": "lora_rank",
    "lora_alpha": "lora_alpha", "lora_dropout": "lora_dropout", "lora_target": "lora_target",
    "quant_bits": "quantization_bit", "quant_method": "quantization_method", "double_quant": "double_quantization",
    "seq_len": "cutoff_len", "packing": "packing", "no_gradient_checkpointing": "disable_gradient_checkpointing",
    "use_reentrant": "use_reentrant_gc", "stage": "stage", "pure_bf16": "pure_bf16",
    "liger": "enable_liger_kernel", "modules_to_save": "additional_target", "pref_loss": "pref_loss",
    "ref_model": "ref_model"},
    {**HF_TRAINER, "method": "lora", "lora_rank": 8, "lora_alpha": None, "lora_dropout": 0.0, "lora_target": "all",
     "quant_bits": None, "quant_method": "bnb", "double_quant": True, "seq_len": 2048, "packing": None,
     "no_gradient_checkpointing": False, "use_reentrant": True, "stage": "sft", "pure_bf16": False,
     "pref_loss": "sigmoid", "ref_model": None})

AXOLOTL = Dialect("axolotl", "axolotl", {
    **TRAINER_KEYS, "model": "base_model", "method": "adapter", "lora_rank": "lora_r", "lora_alpha": "lora_alpha",
    "lora_dropout": "lora_dropout", "lora_target": "lora_target_modules", "lora_target_linear": "lora_target_linear",
    "load_in_4bit": "load_in_4bit", "load_in_8bit": "load_in_8bit", "seq_len": "sequence_len",
    "micro_batch": "micro_batch_size", "packing": "sample_packing", "optim": "optimizer",
    "lr_scheduler": "lr_scheduler", "liger": "liger_fused_linear_cross_entropy",
    "modules_to_save": "lora_modules_to_save", "context_parallel": "context_parallel_size", "tiled_mlp": "tiled_mlp",
    "activation_offloading": "activation_offloading",
    "plugins": "plugins", "rl": "rl",
    "gradient_checkpointing_kwargs": "gradient_checkpointing_kwargs", **{k: k for k in AXOLOTL_ATTENTION}},
    {**HF_TRAINER, **{k: None for k in AXOLOTL_ATTENTION},
     "method": None, "lora_rank": None, "lora_alpha": None, "lora_dropout": 0.0, "lora_target": None,
     "lora_target_linear": None, "load_in_4bit": False, "load_in_8bit": False, "double_quant": True,
     "seq_len": 512, "micro_batch": 1, "bf16": "auto", "packing": None, "gradient_checkpointing_kwargs": None,
     "context_parallel": None, "tiled_mlp": None, "activation_offloading": None, "plugins": None, "rl": None},
    {"sequence_parallel_degree": "context_parallel"})  # axolotl's name for it before context_parallel_size

TRL = Dialect("trl", "TRL / HF Trainer", {
    **TRAINER_KEYS, "model": "model_name_or_path", "method": "use_peft", "lora_rank": "lora_r",
    "lora_alpha": "lora_alpha", "lora_dropout": "lora_dropout", "lora_target": "lora_target_modules",
    "load_in_4bit": "load_in_4bit", "load_in_8bit": "load_in_8bit", "double_quant": "use_bnb_nested_quant",
    "seq_len": "max_length", "packing": "packing", "gradient_checkpointing_kwargs": "gradient_checkpointing_kwargs",
    "attn_implementation": "attn_implementation", "padding_free": "padding_free",
    "packing_strategy": "packing_strategy", "load_dtype": "dtype", "modules_to_save": "lora_modules_to_save",
    "activation_offloading": "activation_offloading", "vision": "vision_tower",
    # DPO/KTO/GRPO/RLOO configs (their defaults depend on the method: guard/job/post_training.py)
    "beta": "beta", "precompute_ref": "precompute_ref_log_probs", "use_vllm": "use_vllm", "vllm_mode": "vllm_mode",
    "vllm_share": "vllm_gpu_memory_utilization", "vllm_sleep": "vllm_enable_sleep_mode",
    "num_generations": "num_generations", "generation_batch": "generation_batch_size",
    "steps_per_generation": "steps_per_generation", "ds3_gather": "ds3_gather_for_generation",
    "completion_len": "max_completion_length"},
    {**HF_TRAINER, "attn_implementation": None, "padding_free": False, "packing_strategy": "bfd",
     "method": False, "lora_rank": 16, "lora_alpha": 32, "lora_dropout": 0.05, "lora_target": None,
     "load_in_4bit": False, "load_in_8bit": False, "double_quant": False, "seq_len": 1024, "packing": False,
     "gradient_checkpointing": True, "gradient_checkpointing_kwargs": None,
     # model_config.py: ModelConfig.dtype "float32" since TRL 0.27 (unlike from_pretrained's "auto");
     # base_config.py: bf16 None becomes `not fp16`, so True unless fp16 is asked for
     "load_dtype": "float32", "bf16": True, "activation_offloading": False, "vision": None,
     "beta": None, "precompute_ref": False, "use_vllm": False, "vllm_mode": None, "vllm_share": None,
     "vllm_sleep": False, "rl_method": "sft", "num_generations": 8, "generation_batch": None,
     "steps_per_generation": None, "ds3_gather": True, "completion_len": None},
    # SFTConfig's spelling before TRL 0.20 renamed it max_length; ModelConfig's before dtype
    {"max_seq_length": "seq_len", "torch_dtype": "load_dtype"})

# OpenRLHF 0.11 (3c3be623, openrlhf/cli/train_dpo.py, train_kto.py, train_sft.py): argparse flags, dotted since 0.10.2
# (--model.model_name_or_path, --train.micro_batch_size, --ds.zero_stage, ...), flat before (--pretrain,
# --micro_train_batch_size, --zero_stage, ..., 0.8.11 27817f1c); it builds its DeepSpeed config itself
# (openrlhf/utils/deepspeed/deepspeed_utils.py get_train_ds_config: guard/job/openrlhf.py)
OPENRLHF = Dialect("openrlhf", "OpenRLHF", {
    **TRAINER_KEYS, "optim": "optim", "learning_rate": "adam.lr", "lr_scheduler": "lr_scheduler",
    "model": "model.model_name_or_path", "micro_batch": "train.micro_batch_size", "global_batch": "train.batch_size",
    "seq_len": "data.max_len", "gradient_checkpointing": "model.gradient_checkpointing_enable",
    "use_reentrant": "model.gradient_checkpointing_reentrant", "lora_rank": "ds.lora.rank",
    "lora_alpha": "ds.lora.alpha", "lora_dropout": "ds.lora.dropout", "lora_target": "ds.lora.target_modules",
    "load_in_4bit": "ds.load_in_4bit", "zero_stage": "ds.zero_stage", "adam_offload": "ds.adam_offload",
    "ref_offload": "ref.offload", "param_dtype": "ds.param_dtype", "bf16": "bf16", "beta": "model.beta",
    "packing": "ds.packing_samples", "liger": "ds.use_liger_kernel", "attn_implementation": "ds.attn_implementation",
    "ref_model": "ref.model_name_or_path", "max_grad_norm": "max_norm", "overlap_comm": "ds.overlap_comm",
    "grad_accum": "gradient_accumulation_steps"},
    {**HF_TRAINER, "optim": "adam", "lr_scheduler": "cosine_with_min_lr", "learning_rate": 1e-5,
     "micro_batch": 8, "global_batch": 128, "seq_len": 512, "gradient_checkpointing": False, "use_reentrant": False,
     "lora_rank": 0, "lora_alpha": 16, "lora_dropout": 0.0, "lora_target": "all-linear", "load_in_4bit": False,
     "zero_stage": 2, "adam_offload": False, "ref_offload": False, "param_dtype": "bf16", "bf16": False,
     "beta": 0.1, "packing": False, "liger": False, "attn_implementation": "flash_attention_2", "ref_model": None,
     "max_grad_norm": 1.0, "overlap_comm": False, "rl_method": "sft", "method": None, "load_in_8bit": False,
     "double_quant": True},  # models/actor.py: nf4 with bnb_4bit_use_double_quant=True
    {"pretrain": "model", "micro_train_batch_size": "micro_batch", "train_batch_size": "global_batch",
     "max_len": "seq_len", "gradient_checkpointing": "gradient_checkpointing",
     "gradient_checkpointing_use_reentrant": "use_reentrant", "lora_rank": "lora_rank", "lora_alpha": "lora_alpha",
     "lora_dropout": "lora_dropout", "target_modules": "lora_target", "load_in_4bit": "load_in_4bit",
     "zero_stage": "zero_stage", "adam_offload": "adam_offload", "ref_offload": "ref_offload",
     "beta": "beta", "packing_samples": "packing", "use_liger_kernel": "liger", "flash_attn": "attn_implementation",
     "ref_pretrain": "ref_model", "overlap_comm": "overlap_comm", "learning_rate": "learning_rate"})

# A program that takes TrainingArguments but shows nothing of TRL: the Trainer's own defaults (no gradient
# checkpointing); the sequence length has no TrainingArguments field, so TRL SFT's is assumed and said so,
# unless the program's own TrainingArguments subclass adds `model_max_length` (Stanford Alpaca's train.py,
# FastChat, LLaVA: the tokenizer pads or truncates every sample to it, so it is the longest sequence).
# Its model loads as from_pretrained's default does in transformers 5 (dtype "auto": the checkpoint's dtype).
HF_PROGRAM = Dialect("trl", "HF Trainer (TRL SFT defaults)", TRL.keys,
                     {**TRL.defaults, "gradient_checkpointing": False, "load_dtype": "auto", "bf16": False},
                     {**TRL.older, "model_max_length": "seq_len"})
TRL_FLAGS = {"use_peft", "lora_r", "max_length", "max_seq_length", "packing", "dataset_text_field", "lora_alpha"}

LLAMAFACTORY_MARKERS = {"finetuning_type", "cutoff_len", "lora_target", "template", "quantization_bit",
                        "disable_gradient_checkpointing"}
AXOLOTL_MARKERS = {"base_model", "sequence_len", "micro_batch_size", "adapter", "lora_target_linear",
                   "sample_packing", "datasets"}
# a `trl sft --config` file: ModelConfig / ScriptArguments keys, or any TrainingArguments key, beside the model
TRL_MARKERS = {"use_peft", "max_length", "max_seq_length", "output_dir", "num_train_epochs", "dataset_name",
               "dataset_config", "dataset_train_split", "report_to", "lr_scheduler_type", "torch_dtype", "dtype",
               "max_steps", "logging_steps", "save_steps", "eval_strategy", "warmup_ratio", "optim",
               *TRAINER_KEYS.values()}


def detect(data: Any) -> Dialect | None:
    """The framework a training config is written for, by its keys (None: not a training config)."""
    if not isinstance(data, dict):
        return None
    keys = set(data)
    if "zero_optimization" in keys or "train_micro_batch_size_per_gpu" in keys:  # a DeepSpeed config
        return None
    if "model_name_or_path" in keys and keys & LLAMAFACTORY_MARKERS:
        return LLAMAFACTORY
    if "base_model" in keys and len(keys & AXOLOTL_MARKERS) >= 2:
        return AXOLOTL
    if keys & {"model_name_or_path", "deepspeed"} and keys & TRL_MARKERS:
        return TRL
    return None
