"""Census of the tensors a transformers Llama (with or without a peft LoRA) saves for backward, on CPU.

Run as a script: reads {"model": LlamaConfig kwargs, "cases": {name: case}} as JSON on stdin, prints
{name: {"per_layer": bytes, "edge": bytes, "by_module": {...}}}. A case: micro_batch, seq, padded (one
sample shorter, so the attention mask is materialised), checkpointing (reentrant, per layer), and lora
(None, or rank, targets, dropout, adapter_dtype "bf16"/"fp32", autocast). Saved tensors are counted through
torch.autograd.graph's saved_tensors_hooks, once per storage, parameters and token ids left out; a layer's
bytes are (T(4) - T(2)) / 2 from models of 4 and 2 layers, the rest of the model (embedding, final norm,
head, loss, shared rotary tables) is T(2) less two layers.
"""

from __future__ import annotations

import json
import sys

import torch


def census(model_kwargs: dict, layers: int, case: dict) -> tuple[int, dict]:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(**{**model_kwargs, "num_hidden_layers": layers}, attn_implementation="sdpa")
    model = LlamaForCausalLM(config).to(torch.bfloat16)
    if case.get("checkpointing"):  # as LLaMA-Factory's prepare_model_for_training does, before the adapter
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": True})
        model.enable_input_require_grads()
    lora = case.get("lora")
    if lora:
        from peft import LoraConfig, get_peft_model

        model = get_peft_model(model, LoraConfig(r=lora["rank"], lora_alpha=2 * lora["rank"],
                                                 target_modules=lora["targets"], lora_dropout=lora["dropout"]))
        wanted = torch.float32 if lora["adapter_dtype"] == "fp32" else torch.bfloat16
        for p in model.parameters():
            if p.requires_grad:
                p.data = p.data.to(wanted)
    model.train()
    seen: dict[int, int] = {}
    owner: dict[int, str] = {}
    current = ["model"]

    def pack(t):
        storage = t.untyped_storage()
        ptr = storage.data_ptr()
        if ptr not in params and ptr not in seen:
            seen[ptr], owner[ptr] = storage.nbytes(), current[-1]
        return t

    def enter(name):
        return lambda *_: current.append(name)

    def leave(*_):
        current.pop()

    for name, module in model.named_modules():
        if name and not list(module.children()):
            module.register_forward_pre_hook(enter(name.split(".")[-1]))
            module.register_forward_hook(leave)
    b, s = case["micro_batch"], case["seq"]
    ids = torch.randint(0, model_kwargs["vocab_size"], (b, s))
    # weights, and the batch's token ids, live whether autograd saves them or not
    params = {p.untyped_storage().data_ptr() for p in model.parameters()} | {ids.untyped_storage().data_ptr()}
    mask = torch.ones(b, s, dtype=torch.long)
    if case.get("padded"):
        mask[-1, s // 2:] = 0  # a shorter sample padded on the right, as a collator pads a batch
    autocast = torch.autocast("cpu", dtype=torch.bfloat16, enabled=bool(lora and lora.get("autocast")))
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), autocast:
        out = model(input_ids=ids, attention_mask=mask, labels=ids)
    out.loss.backward()
    by_module: dict[str, int] = {}
    for ptr, size in seen.items():
        by_module[owner[ptr]] = by_module.get(owner[ptr], 0) + size
    return sum(seen.values()), by_module


def main() -> None:
    spec = json.load(sys.stdin)
    results = {}
    for name, case in spec["cases"].items():
        two, by2 = census(spec["model"], 2, case)
        four, by4 = census(spec["model"], 4, case)
        per_layer = (four - two) // 2
        results[name] = {"per_layer": per_layer, "edge": two - 2 * per_layer,
                         "by_module": {k: (by4.get(k, 0) - by2.get(k, 0)) // 2 for k in sorted(set(by2) | set(by4))}}
    json.dump(results, sys.stdout)


if __name__ == "__main__":
    main()
