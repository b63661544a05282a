"""FT0xx: a LLaMA-Factory / axolotl / TRL training config and the DeepSpeed file it names, judged as a pair."""

from __future__ import annotations

from guard.rules.finetune_context import FineTuneCheck
from guard.job.adapter import resolve_targets, supports
from guard.rules.context import fmt
from guard.rules.registry import check, rule

HF_DS = "transformers integrations/deepspeed.py: HfTrainerDeepSpeedConfig.trainer_config_process / finalize"
LF_QUANT = "LLaMA-Factory src/llamafactory/model/model_utils/quantization.py"

MISMATCH = rule(
    "FT001", "trainer-deepspeed-mismatch", "error",
    "A DeepSpeed value, not \"auto\", that differs from what the training config gives the Trainer.",
    what="Fills the DeepSpeed file's \"auto\" values the way the HF Trainer does (micro batch, accumulation, "
         "train batch size with the world size, gradient clipping, optimizer and scheduler learning rate, "
         "betas, eps, weight decay, fp16/bf16), and reports each written value that differs from the "
         "training config's (or the framework's default).",
    why="transformers refuses the job before training: `ValueError: Please correct the following DeepSpeed "
        "config values that mismatch TrainingArguments values: - ds bf16.enabled=True vs hf "
        "bf16|bf16_full_eval=False`.",
    example="# train.yaml\nbf16: false\nfp16: true\ndeepspeed: ds.json\n# ds.json\n{\"bf16\": {\"enabled\": true}}",
    use_instead="# ds.json\n{\"bf16\": {\"enabled\": \"auto\"}, \"fp16\": {\"enabled\": \"auto\"}}",
    references=(HF_DS,),
)

DS_NOT_FOUND = rule(
    "FT002", "deepspeed-file-not-found", "error",
    "The `deepspeed:` path of a training config names no file.",
    what="Looks for the DeepSpeed file from the working directory and from the training config's folder up.",
    why="TrainingArguments fails at start: `ValueError: Expected a string path to an existing deepspeed config, "
        "or a dictionary, or a base64 encoded string.`",
    example="deepspeed: examples/deepspeed/ds_z3_confg.json",
    use_instead="deepspeed: examples/deepspeed/ds_z3_config.json",
    references=("transformers integrations/deepspeed.py: HfDeepSpeedConfig",),
)

SEQ_DEFAULTED = rule(
    "FT003", "sequence-length-defaulted", "warning",
    "No sequence length in the training config: the framework truncates every sample to its default.",
    what="Reports a config without `cutoff_len` (LLaMA-Factory, 2048), `sequence_len` (axolotl, 512) or "
         "`max_length` (TRL SFT, 1024).",
    why="Samples longer than the default are cut without a word, and the memory the job needs is the "
        "default's, not the one you had in mind.",
    example="base_model: meta-llama/Meta-Llama-3-8B\nadapter: lora",
    use_instead="base_model: meta-llama/Meta-Llama-3-8B\nadapter: lora\nsequence_len: 4096",
    references=("axolotl utils/schemas/config.py (sequence_len: 512)",
                "LLaMA-Factory hparams/data_args.py (cutoff_len: 2048)", "TRL trainer/sft_config.py (max_length)"),
)

SEQ_BEYOND = rule(
    "FT004", "sequence-beyond-positions", "warning",
    "The sequence length exceeds the model's max_position_embeddings.",
    what="Compares `cutoff_len` / `sequence_len` / `max_length` with the model's config (a local folder or a "
         "known preset).",
    why="RoPE models run past the positions they were trained on without an error and degrade; the "
        "config says nothing of rope scaling.",
    example="model_name_or_path: meta-llama/Llama-2-7b-hf\ncutoff_len: 8192",
    use_instead="model_name_or_path: meta-llama/Llama-2-7b-hf\ncutoff_len: 4096",
)

QUANT_ZERO3 = rule(
    "FT005", "quantization-incompatible-with-zero3", "error",
    "A quantized base that LLaMA-Factory refuses under DeepSpeed ZeRO-3.",
    what="Reports `quantization_bit: 8` (bitsandbytes), and HQQ or EETQ quantization, with a ZeRO-3 DeepSpeed "
         "file.",
    why="LLaMA-Factory raises at load: `ValueError: Only 4-bit quantized model can use fsdp+qlora or auto "
        "device map.` (8-bit) or `... quantization is incompatible with DeepSpeed ZeRO-3 or FSDP.`",
    example="quantization_bit: 8\ndeepspeed: ds_z3_config.json",
    use_instead="quantization_bit: 4\ndeepspeed: ds_z3_config.json",
    references=(LF_QUANT,),
)

QLORA_NON_REENTRANT = rule(
    "FT006", "qlora-zero3-non-reentrant-checkpointing", "warning",
    "QLoRA under ZeRO-3 with non-reentrant gradient checkpointing.",
    what="Reports QLoRA with a ZeRO-3 DeepSpeed file and gradient checkpointing with use_reentrant false "
         "(axolotl's and transformers 5's default).",
    why="axolotl warns that it \"may result in a CheckpointError about recomputed values\": "
        "`torch.utils.checkpoint.CheckpointError: Recomputed values for the following tensors have different "
        "metadata than during the forward pass`.",
    example="adapter: qlora\nload_in_4bit: true\ngradient_checkpointing: true\ndeepspeed: zero3.json",
    use_instead="gradient_checkpointing_kwargs:\n  use_reentrant: true",
    references=("axolotl utils/schemas/validation.py: warn_qlora_zero3_w_use_reentrant",),
)

ADAPTER_SAVED_EMPTY = rule(
    "FT007", "lora-adapter-saved-empty-under-zero3", "warning",
    "LoRA under ZeRO-3 without stage3_gather_16bit_weights_on_model_save: the adapter file is written empty.",
    what="Reports a LoRA/QLoRA job whose ZeRO-3 DeepSpeed file does not set "
         "`stage3_gather_16bit_weights_on_model_save: true`.",
    why="Trainer.save_model cannot gather the weights, logs 'Saving the full checkpoint instead', saves the "
        "model with an empty state dict and removes only the full-model weight files: adapter_model."
        "safetensors stays, holding no weights. The adapter is recoverable only through zero_to_fp32.py.",
    example="{\"zero_optimization\": {\"stage\": 3}}",
    use_instead="{\"zero_optimization\": {\"stage\": 3, \"stage3_gather_16bit_weights_on_model_save\": true}}",
    references=("transformers trainer.py: save_model (remove_dummy_checkpoint)",),
)

UNKNOWN_TARGET = rule(
    "FT008", "lora-target-not-in-model", "error",
    "A LoRA target module that the model does not have.",
    what="Resolves the LoRA targets against the model's linear layers (when guard knows the model).",
    why="peft refuses: `ValueError: Target modules {...} not found in the base model. Please check the target "
        "modules and try again.`",
    example="lora_target: q_proj,v_proj,c_attn",
    use_instead="lora_target: q_proj,v_proj",
    references=("peft tuners/tuners_utils.py: inject_adapter",),
)


@check(MISMATCH, DS_NOT_FOUND, target="finetune")
def pair(ctx: FineTuneCheck) -> None:
    if ctx.ds_missing:
        ctx.report(DS_NOT_FOUND, "deepspeed", f"deepspeed file {ctx.ft.get('deepspeed')!r} not found (looked from "
                   "the working directory and from this file's folder up)")
    for m in ctx.mismatches:
        where = m.source if m.source in ctx.ft.written else "deepspeed"
        ctx.report(MISMATCH, where, f"ds {'.'.join(m.path)}={fmt(m.ds_value)} vs hf {m.hf_key}={fmt(m.hf_value)}: "
                   "transformers refuses the mismatch", help=f"set {'.'.join(m.path)} to \"auto\" in the "
                   "DeepSpeed file", related=ctx.ds_related(*m.path, message="the DeepSpeed value"))


@check(SEQ_DEFAULTED, SEQ_BEYOND, target="finetune")
def sequence(ctx: FineTuneCheck) -> None:
    key = ctx.ft.dialect.keys["seq_len"]
    if "seq_len" not in ctx.ft.written:
        ctx.report(SEQ_DEFAULTED, "seq_len", f"no {key}: {ctx.ft.dialect.title} truncates every sample to "
                   f"{ctx.ft.get('seq_len')} tokens", help=f"write {key}: N")
        return
    seq, arch = ctx.ft.get("seq_len"), ctx.arch
    if arch and arch.max_positions and isinstance(seq, int) and seq > arch.max_positions:
        ctx.report(SEQ_BEYOND, "seq_len", f"{key} {seq} exceeds the model's max_position_embeddings "
                   f"{arch.max_positions} ({arch.name})")


@check(QUANT_ZERO3, QLORA_NON_REENTRANT, ADAPTER_SAVED_EMPTY, target="finetune")
def adapter_under_zero3(ctx: FineTuneCheck) -> None:
    ft = ctx.ft
    if ctx.zero_stage != 3 or ft.method not in ("lora", "qlora"):
        return
    method = str(ft.get("quant_method") or "bnb").lower()
    if ft.dialect.name == "llamafactory" and ft.quant_bits and (ft.quant_bits != 4 or method in ("hqq", "eetq")):
        message = ("Only 4-bit quantized model can use fsdp+qlora or auto device map." if method == "bnb" else
                   f"{method.upper()} quantization is incompatible with DeepSpeed ZeRO-3 or FSDP.")
        ctx.report(QUANT_ZERO3, "quant_bits", f"quantization_bit {ft.quant_bits} ({method}) with ZeRO-3: "
                   f"LLaMA-Factory raises '{message}'")
    if ft.method == "qlora" and ft.gradient_checkpointing and not ft.reentrant:
        where = "gradient_checkpointing_kwargs" if "gradient_checkpointing_kwargs" in ft.written else "method"
        ctx.report(QLORA_NON_REENTRANT, where, "QLoRA under ZeRO-3 with non-reentrant gradient checkpointing may "
                   "fail with 'CheckpointError: Recomputed values ... have different metadata'",
                   help="set gradient_checkpointing_kwargs: {use_reentrant: true}")
    if ctx.zero("stage3_gather_16bit_weights_on_model_save") is not True:
        ctx.report(ADAPTER_SAVED_EMPTY, "deepspeed", "LoRA under ZeRO-3 without "
                   "stage3_gather_16bit_weights_on_model_save: the saved adapter_model.safetensors holds no weights",
                   help="set \"stage3_gather_16bit_weights_on_model_save\": true in zero_optimization",
                   related=ctx.ds_related("zero_optimization", message="the ZeRO-3 section"))


@check(UNKNOWN_TARGET, target="finetune")
def lora_targets(ctx: FineTuneCheck) -> None:
    if ctx.arch is None or not supports(ctx.arch) or ctx.ft.method not in ("lora", "qlora"):
        return
    _, unknown = resolve_targets(ctx.ft.lora_target, ctx.arch)
    if unknown:
        ctx.report(UNKNOWN_TARGET, "lora_target", f"LoRA target{'s' if len(unknown) > 1 else ''} "
                   f"{', '.join(unknown)} not in {ctx.arch.name}; peft raises 'Target modules ... not found in "
                   "the base model'")
