"""Measure the host bytes of the HF Trainer's model save per rank under DeepSpeed on CPU, by calling what
Trainer.save_model calls (transformers 5.24): ZeRO-3 + peft, engine._zero3_consolidated_16bit_state_dict(
exclude_frozen_parameters=True); ZeRO-3 without peft, the same without the filter (accelerate get_state_dict);
ZeRO 0-2, deepspeed's clone_tensors_for_torch_save(unwrapped model.state_dict()) (accelerate get_state_dict).

Run under torchrun: python -m torch.distributed.run --nproc-per-node N save_host_probe.py CASES.json OUT_DIR.
Writes OUT_DIR/<rank>.json: per case, the bytes of the distinct host tensors returned on this rank.
"""

from __future__ import annotations


import torch


def _host_bytes(state_dict) -> int:
    if state_dict is None:
        return 0
    seen = {}
    for tensor in state_dict.values():
        assert tensor.device.type == "cpu"
        seen[tensor.data_ptr()] = tensor.numel() * tensor.element_size()
    return sum(seen.values())


def run_case(case: dict, model_config: dict) -> dict:
    import deepspeed
    import peft
    import transformers
    from deepspeed.checkpoint.utils import clone_tensors_for_torch_save

    torch.manual_seed(0)
    config = {"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1,
              "zero_optimization": {"stage": case["stage"]}, "zero_allow_untested_optimizer": True,
              "bf16": {"enabled": True}, "steps_per_print": 10**9}
    hf_config = transformers.LlamaConfig(**model_config)
    if case["stage"] == 3:  # the HF Trainer builds the model under zero.Init (is_deepspeed_zero3_enabled)
        with deepspeed.zero.Init(config_dict_or_path=config, dtype=torch.bfloat16):
            model = transformers.LlamaForCausalLM(hf_config)
    else:
        model = transformers.LlamaForCausalLM(hf_config).to(torch.bfloat16)
    if case["lora"]:
        model = peft.get_peft_model(model, peft.LoraConfig(r=case["rank"], lora_alpha=2 * case["rank"],
                                                           target_modules="all-linear", lora_dropout=0.0))
    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trainable, lr=1e-4, foreach=False)
    engine, *_ = deepspeed.initialize(model=model, optimizer=optimizer, config=config)
    if case["stage"] == 3:
        state_dict = engine._zero3_consolidated_16bit_state_dict(exclude_frozen_parameters=case["lora"])
    else:
        state_dict = clone_tensors_for_torch_save(engine.module.state_dict())
    result = {"host_bytes": _host_bytes(state_dict), "tensors": len(state_dict or {})}
    if hasattr(engine, "destroy"):
        engine.destroy()
    return result


def main() -> None:
    from deepspeed_zero_probe import run_ranks  # beside this file, on sys.path as the script's folder

    run_ranks(run_case)

if __name__ == "__main__":
    main()
