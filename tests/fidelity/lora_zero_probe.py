"""Measure a peft LoRA model's states per rank under DeepSpeed ZeRO 0-3 on CPU: a transformers Llama built from a
config (random weights, nothing downloaded), bf16, LoRA on every linear layer, one AdamW step after a warm-up.

Run under torchrun: python -m torch.distributed.run --nproc-per-node N tests/fidelity/lora_zero_probe.py
CASES.json OUT_DIR. Writes OUT_DIR/<rank>.json: per case, after the second backward and step, the bytes of
every live CPU storage sorted into params / grads / master / moments / other (deepspeed_zero_probe.census), and the
parameter bytes split into frozen and trainable. The model is built the way the HF Trainer builds it: under
deepspeed.zero.Init for ZeRO-3 (transformers' is_deepspeed_zero3_enabled), in bf16 otherwise; peft then adds
fp32 adapters (autocast_adapter_dtype).
"""

from __future__ import annotations

import os
import sys

import torch


def _probe_helpers():
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir))
    import deepspeed_zero_probe
    from deepspeed_oracle import skip_shm_comm_build

    skip_shm_comm_build()
    return deepspeed_zero_probe


def _param_bytes(model) -> dict[str, int]:
    out = {"frozen": 0, "trainable": 0}
    for p in model.parameters():
        data = p.ds_tensor if hasattr(p, "ds_tensor") else p.data
        out["trainable" if p.requires_grad else "frozen"] += data.numel() * data.element_size()
    return out


def run_case(case: dict, model_config: dict, helpers) -> dict:
    import deepspeed
    import peft
    import transformers

    baseline = helpers.live_tensors()
    torch.manual_seed(0)
    zero = {"stage": case["stage"], "reduce_bucket_size": case["reduce_bucket"],
            "allgather_bucket_size": case["reduce_bucket"]}
    if case["stage"] == 3:
        zero.update(stage3_prefetch_bucket_size=case["prefetch_bucket"], stage3_param_persistence_threshold=0,
                    stage3_max_live_parameters=case["max_live"])
    config = {"train_micro_batch_size_per_gpu": case["micro_batch"], "gradient_accumulation_steps": 1,
              "zero_optimization": zero, "zero_allow_untested_optimizer": True, "bf16": {"enabled": True},
              "steps_per_print": 10**9}
    hf_config = transformers.LlamaConfig(**model_config)
    if case["stage"] == 3:
        with deepspeed.zero.Init(config_dict_or_path=config, dtype=torch.bfloat16):
            model = transformers.LlamaForCausalLM(hf_config)
    else:
        model = transformers.LlamaForCausalLM(hf_config).to(torch.bfloat16)
    model = peft.get_peft_model(model, peft.LoraConfig(r=case["rank"], lora_alpha=2 * case["rank"],
                                                       target_modules="all-linear", lora_dropout=0.0))
    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW([{"params": trainable, "weight_decay": 0.0}], lr=1e-4, foreach=False)
    engine, *_ = deepspeed.initialize(model=model, optimizer=optimizer, config=config)
    ids = torch.randint(0, model_config["vocab_size"], (case["micro_batch"], case["seq"]))
    for _ in range(2):  # the first step creates the Adam moments; measure the second
        loss = engine(input_ids=ids, labels=ids).loss
        engine.backward(loss)
        del loss
        helpers.settle()
        after_backward = helpers.census(engine, baseline)
        engine.step()
    after = helpers.census(engine, baseline)
    for moment in (after_backward, after):
        moment.pop("_grad_ptrs", None)
    result = {"case": case, "after_backward": after_backward, "after_step": after,
              "param_bytes": _param_bytes(engine.module),
              "trainable_dtype": str(trainable[0].dtype)}
    if hasattr(engine, "destroy"):
        engine.destroy()
    return result


def main() -> None:
    helpers = _probe_helpers()
    helpers.run_ranks(lambda case, model: run_case(case, model, helpers))

if __name__ == "__main__":
    main()
