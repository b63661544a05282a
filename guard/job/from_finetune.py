"""Read a LLaMA-Factory / axolotl / TRL training config (and the DeepSpeed file it names) into a TrainingJob."""

from __future__ import annotations

from guard.inputs import find_near
from guard.job import trainer_fill
from guard.job.adapter import Adapter, adapter_tensors, resolve_targets, supports
from guard.job.architecture import Architecture
from guard.job.finetune_config import FineTuneConfig
from guard.job.from_deepspeed import read_deepspeed
from guard.job.origin import Origin
from guard.job.training_job import IncompleteJob, TrainingJob

# the dtype bitsandbytes stores packed 4-bit weights as: LLaMA-Factory quantization.py and axolotl loaders/model.py
# set bnb_4bit_quant_storage to the compute dtype ("crucial for fsdp+qlora"); TRL leaves bitsandbytes' uint8
QUANT_STORAGE = {"llamafactory": None, "axolotl": "bf16", "trl": "uint8"}


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


def read_finetune(ft: FineTuneConfig, arch: Architecture, world: int, world_origin: Origin, *, load_config,
                  gpus_per_node: int = 8) -> TrainingJob:
    """`load_config(path)` -> (data, locate) reads the DeepSpeed file; the HF Trainer's "auto" values are filled
    from the training config first (trainer_fill.py)."""
    mbs, gas, seq = ft.get("micro_batch"), ft.get("grad_accum"), ft.get("seq_len")
    for name, value in (("micro_batch", mbs), ("grad_accum", gas), ("seq_len", seq)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise IncompleteJob(f"{at(ft, name)}: {ft.dialect.keys[name]} is {value!r}: a positive integer is needed")
    inline = ft.get("deepspeed")
    path = deepspeed_file(ft)
    if isinstance(inline, dict) or path:
        data, locate = (inline, None) if isinstance(inline, dict) else load_config(path)
        filled, _ = trainer_fill.fill(data, ft, world)
        label = path or ft.path
    elif inline:
        raise IncompleteJob(f"{at(ft, 'deepspeed')}: deepspeed file {inline!r} not found (looked from the working "
                            "directory and from this file's folder up)")
    else:
        filled, locate, label = {"train_micro_batch_size_per_gpu": mbs, "gradient_accumulation_steps": gas}, None, \
            ft.path
    job = read_deepspeed(filled, label, arch, world, world_origin=world_origin, seq_length=seq, micro_batch=mbs,
                         precision=ft.precision(), gradient_checkpointing=ft.gradient_checkpointing,
                         gpus_per_node=gpus_per_node, locate=locate)
    job.hf_ddp = not (isinstance(inline, dict) or path)
    job.padded_batches = mbs > 1 and not _packed(ft)
    for key, name in (("seq_length", "seq_len"), ("micro_batch", "micro_batch"), ("params_dtype", "bf16")):
        job.origins[key] = ft.origin(name)
    if ft.gradient_checkpointing:
        job.origins["recompute"] = ft.origin("no_gradient_checkpointing" if ft.dialect.name == "llamafactory"
                                             else "gradient_checkpointing")
    job.origins["command"] = Origin("key", f"the {ft.dialect.title} training "
                                    f"{'command' if ft.doc.format == 'argv' else 'config'}", ft.path)
    if job.hf_ddp:
        job.notes.append("no DeepSpeed file: the HF Trainer runs torch DDP (AdamW from torch, no ZeRO)")
    _method(job, ft, arch)
    return job


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
