"""Read a LLaMA-Factory / axolotl / TRL training config (and the DeepSpeed file it names) into a TrainingJob."""

from __future__ import annotations

from guard.inputs import find_near
from guard.job.adapter import Adapter, adapter_tensors, resolve_targets, supports
from guard.job.architecture import Architecture
from guard.job.ddp_weights import weights_dtype
from guard.job.deepspeed_values import cpu_optimizer_forced
from guard.job.param_groups import hf_tensors
from guard.job.trainer_optim import TORCH_ADAMW, named
from guard.job.finetune_config import OFF, FineTuneConfig
from guard.job.from_deepspeed import read_deepspeed
from guard.job.origin import Origin
from guard.job.finetune_post import read_trainer_method
from guard.job.hf_fsdp import read_fsdp
from guard.job.training_job import IncompleteJob, TrainingJob
from guard.job.world import World

# the dtype bitsandbytes stores packed 4-bit weights as: LLaMA-Factory quantization.py and axolotl loaders/model.py
# set bnb_4bit_quant_storage to the compute dtype ("crucial for fsdp+qlora"); TRL and OpenRLHF (models/actor.py)
# leave bitsandbytes' uint8
QUANT_STORAGE = {"llamafactory": None, "axolotl": "bf16", "trl": "uint8", "openrlhf": "uint8"}
# trainer options that change GPU memory and that guard names rather than prices (each with its key and line)
UNPRICED_OPTIONS = {
    "liger": "Liger kernels (the fused linear cross entropy never holds the whole logits; fused RMSNorm, SwiGLU and "
             "RoPE save other tensors): transformers' own layers are priced",
    "modules_to_save": "modules_to_save (full trainable copies of those modules, with their gradients and optimizer "
                       "states)",
    "neftune": "NEFTune (a noised copy of the embedding output)",
    "torch_compile": "torch.compile (fused kernels save other tensors than eager layers)",
    "context_parallel": "sequence (context) parallelism: each rank of the group holds its share of the sequence's "
                        "activations; priced as if one rank held the whole sequence",
    "tiled_mlp": "tiled MLP (the MLP runs the sequence in tiles: its activations are a tile's)",
    "activation_offloading": "activation offloading to host memory",
    "vision": "a vision tower and projector (LLaVA-style multimodal training): the language model alone is priced"}
# axolotl plugins that replace layers whose memory guard prices (integrations/cut_cross_entropy, liger)
PLUGINS = {"cut_cross_entropy": "Cut Cross-Entropy (the loss never holds the whole logits)",
           "liger": "Liger kernels (fused linear cross entropy, RMSNorm, SwiGLU, RoPE)"}


def deepspeed_file(ft: FineTuneConfig) -> str | None:
    """The DeepSpeed file the config names, when it exists (None: no `deepspeed:` key, or not found)."""
    if not isinstance(ft.get("deepspeed"), str) or not ft.get("deepspeed"):
        return None
    place = ft.where("deepspeed")  # a flag's path is found from the script that gives it
    return find_near(ft.get("deepspeed"), place.path if place else ft.path)


def at(ft: FineTuneConfig, name: str) -> str:
    """`path:line:col` of a value: its key in the file, or its flag on the command line."""
    place = ft.where(name)
    span = (place.value if place else ft.anchor)
    return f"{place.path if place else ft.path}:{span.line}:{span.col}"


def read_finetune(ft: FineTuneConfig, arch: Architecture | None, world: World, *, deepspeed: dict | None = None,
                  label: str | None = None, locate=None, named_missing: bool = False) -> TrainingJob:
    """The job a training config describes; `deepspeed`: the DeepSpeed config the Trainer hands over ("auto" filled
    by guard/job/trainer_fill.py; None: no DeepSpeed, the Trainer runs DDP), read from `label`. Never raises: what
    it cannot know goes to job.missing."""
    values = {}
    problems = {}
    for name in ("micro_batch", "grad_accum", "seq_len"):
        value = ft.get(name)
        if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
            values[name] = value
        else:
            problems[name] = f"{at(ft, name)}: {ft.dialect.keys[name]} is {value!r}: a positive integer is needed"
    ddp = deepspeed is None
    if ddp:
        deepspeed = {"train_micro_batch_size_per_gpu": values.get("micro_batch", "auto"),
                     "gradient_accumulation_steps": values.get("grad_accum", 1)}
        label, locate = ft.path, None
    # the micro-batch is in the config: the Trainer's own where it said "auto" (a written one that differs is FT001)
    job = read_deepspeed(deepspeed, label or ft.path, arch, world, seq_length=values.get("seq_len"),
                         precision=ft.precision(),
                         gradient_checkpointing=ft.gradient_checkpointing, locate=locate)
    for name, key in (("micro_batch", "batch"), ("grad_accum", "batch"), ("seq_len", "seq_length")):
        if name in problems:
            job.missing[key] = problems[name]
    if named_missing:
        job.missing["deepspeed"] = (f"{at(ft, 'deepspeed')}: deepspeed file {ft.get('deepspeed')!r} not found "
                                    "(looked from the working directory and from this file's folder up)")
    job.hf_ddp = ddp
    job.hf_saves = ft.dialect.name != "openrlhf"
    job.padded_batches = job.micro_batch > 1 and not _packed(ft)
    dtype_key = "fp16" if ft.precision() == "fp16" and "fp16" in ft.written else "bf16"
    for key, name in (("seq_length", "seq_len"), ("micro_batch", "micro_batch"), ("params_dtype", dtype_key)):
        job.origins[key] = ft.origin(name)
    if ft.gradient_checkpointing:
        job.origins["recompute"] = ft.origin("no_gradient_checkpointing" if ft.dialect.name == "llamafactory"
                                             else "gradient_checkpointing")
    job.origins["command"] = Origin("key", f"the {ft.dialect.title} training "
                                    f"{'command' if ft.doc.format == 'argv' else 'config'}", ft.path)
    if (fsdp := _fsdp(ft, job)) is not None:
        job.missing["fsdp"] = fsdp
    elif job.hf_fsdp:
        over = "each node" if job.hf_fsdp.startswith("hybrid") else "every rank"
        job.notes.append(f"torch FSDP ({job.hf_fsdp}) over {over}: weights, gradients and optimizer states sharded "
                         "as memory/torch_fsdp.py prices them")
    elif job.hf_ddp:
        job.notes.append("no DeepSpeed file: the HF Trainer runs torch DDP (its own optimizer, no ZeRO)")
    if arch is not None:
        _model_choices(job, ft, arch)
    _optimizer(job, ft, deepspeed if not ddp else None)
    _unpriced(job, ft)
    read_trainer_method(job, ft)
    return job


def _model_choices(job: TrainingJob, ft: FineTuneConfig, arch: Architecture) -> None:
    """The tuning method, and without DeepSpeed the dtype the full model's weights are kept in."""
    try:
        _method(job, ft, arch)
    except IncompleteJob as err:
        job.missing["adapter"] = str(err)
    if job.hf_ddp and job.adapter is None:
        job.weights_dtype, why = weights_dtype(ft, arch)
        job.notes.append(f"weights: {why}")
        if "load_dtype" in ft.written:
            job.origins["weights_dtype"] = ft.origin("load_dtype")


def _fsdp(ft: FineTuneConfig, job: TrainingJob) -> str | None:
    """torch FSDP, read into job.hf_fsdp (hf_fsdp.py); why it is refused (None: priced, or no FSDP).
    TrainingArguments.fsdp ("full_shard auto_wrap offload", a list in axolotl) turns it on; axolotl's fsdp_config
    alone does too (fsdp_version 2 configs write no `fsdp` list)."""
    for name in ("fsdp", "fsdp_config") if ft.dialect.name == "axolotl" else ("fsdp",):
        value = ft.get(name)
        if name in ft.written and value not in OFF:
            strategy, why = read_fsdp(value if name == "fsdp" else [], ft.get("fsdp_config"))
            if why:
                return f"{at(ft, name)}: {ft.dialect.keys[name]} {value!r}: {why}"
            job.hf_fsdp = strategy
            job.origins["hf_fsdp"] = ft.origin(name)
            return None
    return None


def _unpriced(job: TrainingJob, ft: FineTuneConfig) -> None:
    """Trainer options that change memory and that guard names rather than prices, each at its key."""
    for name, feature in UNPRICED_OPTIONS.items():
        value = ft.get(name)
        off = value in OFF or (type(value) is int and value <= 1)  # a degree of 1
        if name in ft.written and not off:
            job.add_unmodelled(feature, ft.written[name], ft.origin(name))
    plugins = ft.get("plugins") if "plugins" in ft.written else None
    for plugin in plugins if isinstance(plugins, list) else []:
        feature = next((f for key, f in PLUGINS.items() if key in str(plugin).lower()), None)
        if feature:
            job.add_unmodelled(f"{feature}: axolotl plugin {plugin}", "plugins", ft.origin("plugins"))


def _optimizer(job: TrainingJob, ft: FineTuneConfig, ds_config: dict | None) -> None:
    """The Trainer's optim: priced without DeepSpeed (full fine-tuning: trainer_optim.py); with DeepSpeed and no
    optimizer section ZeRO wraps it, and a non-AdamW one is named unmodelled (a CPU offload replaces it: FT015)."""
    opt = named(ft.get("optim") or "adamw_torch_fused")
    key = ft.dialect.keys["optim"]
    if ds_config is not None:
        if "optimizer" not in ds_config and not cpu_optimizer_forced(ds_config) and opt.name not in TORCH_ADAMW:
            job.add_unmodelled(f"{key} {opt.name} under DeepSpeed (priced as AdamW)", key, ft.origin("optim"))
        return
    job.trainer_optim = opt.name
    if job.adapter is not None:
        if opt.name not in TORCH_ADAMW:
            job.add_unmodelled(f"{key} {opt.name} on the adapter (priced as AdamW)", key, ft.origin("optim"))
        return
    if not opt.family:
        job.add_unmodelled(f"{key} {opt.name} (priced as AdamW)", key, ft.origin("optim"))
    elif opt.bits == 8 and (job.arch is None or hf_tensors(job.arch) is None):
        job.add_unmodelled(f"{key} {opt.name}: 8-bit states per tensor of a model whose tensors guard does not "
                           "list (priced as one tensor)", key, ft.origin("optim"))
    if opt.paged:
        job.notes.append(f"{key} {opt.name}: paged states live in CUDA unified memory, priced as resident")


def _packed(ft: FineTuneConfig) -> bool:
    """Samples packed to one length (no padding): LLaMA-Factory packs by default in pre-training (data_args.py)."""
    if ft.get("packing") is None:
        return ft.dialect.name == "llamafactory" and ft.get("stage") == "pt"
    return ft.flag("packing")


def _method(job: TrainingJob, ft: FineTuneConfig, arch: Architecture) -> None:
    """LoRA / QLoRA: the adapter, and ZeRO's flat groups over its tensors alone."""
    method = ft.method
    if method in ("freeze", "oft"):
        job.add_unmodelled(f"{ft.dialect.title} {method} tuning (priced as full fine-tuning)",
                           ft.dialect.keys["method"], ft.origin("method"))
        return
    if method not in ("lora", "qlora"):
        return
    if not supports(arch):
        raise IncompleteJob(f"{ft.path}: LoRA is priced for dense Llama-like models (Llama, Mistral, Qwen2/3, "
                            f"Gemma); {arch.name or 'this model'} is not one")
    targets, _unknown = resolve_targets(ft.lora_target, arch)
    if not targets:
        raise IncompleteJob(f"{ft.path}: {ft.dialect.keys.get('lora_target')} {ft.lora_target!r} matches no "
                            "linear layer of the model")
    bits = ft.quant_bits
    storage = QUANT_STORAGE[ft.dialect.name] or job.params_dtype
    job.adapter = Adapter(method, ft.lora_rank, ft.lora_alpha, float(ft.get("lora_dropout") or 0.0), targets,
                          quant_bits=bits, double_quant=ft.flag("double_quant"), quant_storage=storage)
    job.param_groups = [[n for _, n in adapter_tensors(job.adapter, arch)]]
    job.origins["adapter"] = ft.origin("method")
    if bits and ft.dialect.name == "llamafactory" and str(ft.get("quant_method")).lower() != "bnb":
        job.add_unmodelled(f"{ft.get('quant_method')} quantization (priced as bitsandbytes)",
                           "quantization_method", ft.origin("quant_method"))
