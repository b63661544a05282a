"""FT0xx: a LLaMA-Factory / axolotl / TRL training config and the DeepSpeed file it names, judged as a pair."""

from __future__ import annotations

from guard.job.adapter import resolve_targets, supports
from guard.job.finetune_dialects import HF_PROGRAM
from guard.job.training_job import DTYPE_BYTES
from guard.memory.params import model_param_count
from guard.rules.context import fmt
from guard.rules.finetune_context import FineTuneCheck
from guard.rules.registry import check, rule
from guard.units import GIB

HF_DS = "transformers integrations/deepspeed.py: HfTrainerDeepSpeedConfig.trainer_config_process / finalize"
LF_QUANT = "LLaMA-Factory src/llamafactory/model/model_utils/quantization.py"
TRL_SFT = "TRL f2cd5771 trainer/sft_trainer.py: SFTTrainer.__init__"
AXOLOTL_PACKING = "axolotl 067b021c utils/schemas/validation.py: check_sample_packing_without_attention"
# axolotl utils/schemas/enums.py: ATTN_IMPLS_SUPPORTING_PACKING, plus sdpa and eager (config.py:
# attn_decontaminates_packing), and LEGACY_ATTN_FLAG_TO_IMPL in its priority order
AXOLOTL_ISOLATING = {"flash_attention_2", "flash_attention_3", "flex_attention", "xformers", "sage",
                     "kernels-community/flash-attn2", "kernels-community/flash-attn3",
                     "kernels-community/sage-attention", "sdpa", "eager"}
AXOLOTL_LEGACY = {"xformers_attention": "xformers", "sage_attention": "sage", "flex_attention": "flex_attention",
                  "flash_attention": "flash_attention_2", "sdp_attention": "sdpa", "eager_attention": "eager"}
# TRL sft_trainer.py FLASH_ATTENTION_VARIANTS
TRL_FLASH = {"flash_attention_2", "flash_attention_3", "kernels-community/flash-attn2",
             "kernels-community/flash-attn3", "kernels-community/vllm-flash-attn3"}

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
    what="Looks for the DeepSpeed file from the working directory and from the training config's folder up. A "
         "`--deepspeed` flag in a launch script is not judged: its path is relative to where the script runs.",
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
    "FT007", "lora-zero3-save-without-gather", "info",
    "LoRA under ZeRO-3 without stage3_gather_16bit_weights_on_model_save: the adapter is saved only by a "
    "transformers that gathers peft weights itself.",
    what="Reports a LoRA/QLoRA job whose ZeRO-3 DeepSpeed file does not set "
         "`stage3_gather_16bit_weights_on_model_save: true`.",
    why="transformers 5.24's Trainer.save_model gathers a peft model's trainable weights itself under ZeRO-3 "
        "(`_zero3_consolidated_16bit_state_dict(exclude_frozen_parameters=True)`), whatever the flag says. A "
        "transformers without that branch asks accelerate's get_state_dict, which refuses without the flag; the "
        "Trainer then logs 'Saving the full checkpoint instead' and writes adapter_model.safetensors with no "
        "weights (recoverable only through zero_to_fp32.py). Setting the flag saves the adapter with either.",
    example="{\"zero_optimization\": {\"stage\": 3}}",
    use_instead="{\"zero_optimization\": {\"stage\": 3, \"stage3_gather_16bit_weights_on_model_save\": true}}",
    references=("transformers trainer.py: save_model (is_deepspeed_enabled branch, remove_dummy_checkpoint)",),
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

PACKING_CROSS = rule(
    "FT009", "packing-attends-across-samples", "warning",
    "Sample packing with an attention implementation that lets packed samples attend to each other.",
    what="Reports axolotl `sample_packing: true` without a packing-capable `attn_implementation` (or legacy "
         "flag), and TRL `packing: true` (strategy bfd) without a Flash Attention `attn_implementation`.",
    why="The frameworks only log it: axolotl \"`sample_packing` without an attention backend does not handle "
        "cross-sample decontamination\"; TRL \"Using other implementations may lead to cross-contamination "
        "between samples\". Tokens of one sample then attend to the samples packed before it.",
    example="sample_packing: true\nsequence_len: 4096",
    use_instead="sample_packing: true\nsequence_len: 4096\nattn_implementation: flash_attention_2",
    references=(AXOLOTL_PACKING, TRL_SFT),
)

PADDING_FREE_UNPACKED = rule(
    "FT010", "padding-free-without-packing", "error",
    "TRL `padding_free: true` without packing while `max_length` is set.",
    what="Reports a TRL SFT config with padding_free true, packing false and a max_length (1024 by default).",
    why="SFTTrainer raises: `ValueError: When padding_free=True without packing, max_length is not enforced. "
        "Either enable packing (e.g., packing=True, packing_strategy='bfd'), provide already truncated inputs, "
        "or set max_length=None.`",
    example="padding_free: true\nmax_length: 2048",
    use_instead="padding_free: true\npacking: true\nmax_length: 2048",
    references=(TRL_SFT,),
)

SAVE_HOST = rule(
    "FT011", "lora-save-copies-model-to-host", "info",
    "LoRA under DeepSpeed ZeRO 0-2: every rank copies the whole model to host RAM at each save.",
    what="Reports a LoRA/QLoRA job with a ZeRO stage 0-2 DeepSpeed file, with the size of the copy when guard "
         "knows the model.",
    why="Trainer.save_model takes accelerate's get_state_dict, which under ZeRO 0-2 returns "
        "clone_tensors_for_torch_save(model.state_dict()): a CPU copy of every weight, frozen base included, on "
        "every rank at once, before peft keeps the adapter alone. Under ZeRO-3 the Trainer gathers the trainable "
        "parameters alone (exclude_frozen_parameters=True), so only the adapter reaches rank 0's host.",
    example="# ds.json\n{\"zero_optimization\": {\"stage\": 2}}",
    use_instead="# ds.json\n{\"zero_optimization\": {\"stage\": 3, "
                "\"stage3_gather_16bit_weights_on_model_save\": true}}",
    references=("transformers trainer.py: Trainer.save_model", "accelerate accelerator.py: Accelerator.get_state_dict",
                "deepspeed checkpoint/utils.py: clone_tensors_for_torch_save"),
)


@check(MISMATCH, DS_NOT_FOUND, target="finetune")
def pair(ctx: FineTuneCheck) -> None:
    # a training config's key is checked where it is written; a launch script's --deepspeed path is relative to the
    # directory the script is run from, which guard does not know (estimate still says it cannot find the file)
    if ctx.ds_missing and ctx.ft.doc.format != "argv":
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
    # a plain HF Trainer program: TrainingArguments has no sequence length that could be left to a default; GRPO and
    # RLOO have no max_length (the sequence is the prompt and its completion: guard/job/post_training.py)
    generated = ctx.ft.dialect.name == "trl" and str(ctx.ft.get("rl_method")) in ("grpo", "rloo")
    if "seq_len" not in ctx.ft.written and ctx.ft.dialect is not HF_PROGRAM and not generated:
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
                   "stage3_gather_16bit_weights_on_model_save: transformers 5.24 still saves the adapter (its peft "
                   "branch of save_model); an older transformers writes adapter_model.safetensors with no weights",
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


def _axolotl_attention(ft) -> str | None:
    """axolotl's attn_implementation after normalize_attn_implementation (the first legacy flag set wins)."""
    written = ft.get("attn_implementation")
    if written:
        return str(written)
    return next((impl for flag, impl in AXOLOTL_LEGACY.items() if ft.flag(flag)), None)


@check(PACKING_CROSS, PADDING_FREE_UNPACKED, target="finetune")
def packing(ctx: FineTuneCheck) -> None:
    ft = ctx.ft
    if ft.dialect.name == "axolotl" and ft.flag("packing"):
        impl = _axolotl_attention(ft)
        if impl not in AXOLOTL_ISOLATING:
            backend = f"attn_implementation {impl!r}" if impl else "no attention backend"
            ctx.report(PACKING_CROSS, "packing", f"sample_packing with {backend}: axolotl warns it 'does not "
                       "handle cross-sample decontamination'",
                       help="set attn_implementation: flash_attention_2 (or flex_attention, sdpa)")
    if ft.dialect.name != "trl":
        return
    strategy = str(ft.get("packing_strategy"))
    impl = ft.get("attn_implementation")
    if ft.flag("packing") and strategy in ("bfd", "bfd_split") and impl not in TRL_FLASH:
        ctx.report(PACKING_CROSS, "packing", f"packing ({strategy}) with attn_implementation {impl!r}: TRL warns "
                   "it 'may lead to cross-contamination between samples'",
                   help="set attn_implementation: flash_attention_2, or packing: false")
    if ft.flag("padding_free") and not ft.flag("packing") and ft.get("seq_len") is not None:
        ctx.report(PADDING_FREE_UNPACKED, "padding_free", "padding_free without packing: SFTTrainer raises 'When "
                   "padding_free=True without packing, max_length is not enforced'",
                   help="set packing: true, or max_length: null")


@check(SAVE_HOST, target="finetune")
def save_host(ctx: FineTuneCheck) -> None:
    ft = ctx.ft
    if ctx.zero_stage is None or ctx.zero_stage == 3 or ft.method not in ("lora", "qlora") or not ctx.job.hf_saves:
        return
    size = "the whole model"
    if ctx.arch is not None and ft.method == "lora":
        # the engine casts every floating parameter to the config's dtype under ZeRO 0-2 (engine.py)
        nbytes = model_param_count(ctx.arch) * DTYPE_BYTES[ft.precision()]
        size = f"the whole model ({nbytes / GIB:.1f} GiB for {ctx.arch.name})"
    ctx.report(SAVE_HOST, "deepspeed", f"LoRA under ZeRO-{ctx.zero_stage}: at every save each rank copies {size} "
               "to host RAM (accelerate get_state_dict: clone_tensors_for_torch_save), frozen base included",
               help="ZeRO-3 saves gather the adapter alone (Trainer.save_model, exclude_frozen_parameters=True)",
               related=ctx.ds_related("zero_optimization", message="the ZeRO section"))
