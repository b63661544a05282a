"""The GPU kit's LoRA and QLoRA cases: a transformers Llama (random weights) with a peft adapter, trained as
LLaMA-Factory trains it, beside guard's prediction for the LLaMA-Factory config that describes the same job.

As LLaMA-Factory's prepare_model_for_training and init_adapter do: the base in bf16 (QLoRA: bitsandbytes NF4 with
double quantization, bf16 compute), gradient checkpointing (reentrant) with input gradients enabled, LoRA on every
linear with its weights in fp32; the HF Trainer's bf16 autocast and torch's AdamW over the adapter. Three steps on
the GPU, one on the CPU (dry run; QLoRA is skipped there: bitsandbytes' 4-bit training kernels are CUDA's).
bitsandbytes travels as a wheel (.whl/) like megatron-core.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

RANK = 16
SEQ, MICRO = 2048, 2
CASES = {"lora r16 llama": None, "qlora r16 llama (nf4)": 4}


def lf_config(work: Path, bits: int | None, seq: int) -> Path:
    """The LLaMA-Factory config guard prices for the case (the model folder holds config.json)."""
    path = work / f"lf_{bits or 16}.yaml"
    lines = [f"model_name_or_path: {work / 'llama'}", "stage: sft", "do_train: true", "finetuning_type: lora",
             f"lora_rank: {RANK}", "lora_target: all", f"cutoff_len: {seq}",
             f"per_device_train_batch_size: {MICRO}", "gradient_accumulation_steps: 1", "bf16: true"]
    if bits:
        lines.append(f"quantization_bit: {bits}")
    path.write_text("\n".join(lines) + "\n")
    return path


def train(config: dict, bits: int | None, device: str, work: Path, steps: int) -> dict:
    """Build the adapter model as LLaMA-Factory does and train `steps` steps; the trainable count and, on a GPU,
    the allocator's peak after the steps."""
    import peft
    import torch
    import transformers

    torch.manual_seed(0)
    model_kwargs = {k: v for k, v in config.items() if k != "model_type"}
    if bits:
        folder = work / "llama_weights"
        if not folder.is_dir():  # random weights saved once, loaded quantized as from_pretrained does
            transformers.LlamaForCausalLM(transformers.LlamaConfig(**model_kwargs)).to(torch.bfloat16) \
                .save_pretrained(folder)
        quant = transformers.BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4",
                                                bnb_4bit_use_double_quant=True, bnb_4bit_compute_dtype=torch.bfloat16)
        torch.cuda.empty_cache()
        model = transformers.LlamaForCausalLM.from_pretrained(folder, quantization_config=quant,
                                                              torch_dtype=torch.bfloat16, device_map={"": 0})
    else:
        model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**model_kwargs)).to(torch.bfloat16).to(device)
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": True})
    model.enable_input_require_grads()
    model = peft.get_peft_model(model, peft.LoraConfig(r=RANK, lora_alpha=2 * RANK, lora_dropout=0.0,
                                                       target_modules="all-linear"))
    trainable = [p for p in model.parameters() if p.requires_grad]
    for p in trainable:
        p.data = p.data.float()
    optimizer = torch.optim.AdamW(trainable, lr=1e-4)
    seq = min(SEQ, config["max_position_embeddings"])
    ids = torch.randint(0, config["vocab_size"], (MICRO, seq), device=device)
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    model.train()
    for _ in range(steps):
        with torch.autocast(device, dtype=torch.bfloat16):
            loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    return {"trainable": sum(p.numel() for p in trainable)}


def peft_rows(device: str, gpu: str | None, deadline: float, work: Path, config: dict, predicted, measure, row):
    """One row per case: measured (measure(torch)), guard's prediction (predicted(request, gpu)), row(...)."""
    import torch

    from guard.intake.request import Request

    (work / "llama").mkdir(exist_ok=True)
    (work / "llama" / "config.json").write_text(json.dumps(config))
    rows = []
    for name, bits in CASES.items():
        if bits and device == "cpu":
            rows.append({"case": name, "skipped": "CPU dry run (bitsandbytes' 4-bit kernels need CUDA)"})
            continue
        if time.monotonic() > deadline:
            rows.append({"case": name, "skipped": "out of time"})
            continue
        start = time.perf_counter()
        try:
            built = train(config, bits, device, work, 3 if device == "cuda" else 1)
            measured = {**measure(torch), "trainable_count": built["trainable"]}
            seq = min(SEQ, config["max_position_embeddings"])
            guard = predicted(Request(paths=(str(lf_config(work, bits, seq)),)), gpu)
            rows.append(row(name, measured, guard, time.perf_counter() - start))
        except Exception as err:  # noqa: BLE001 - a case that fails is a finding of the kit
            rows.append({"case": name, "error": f"{type(err).__name__}: {err}"[:300]})
        print(json.dumps(rows[-1]), flush=True)
    return rows
