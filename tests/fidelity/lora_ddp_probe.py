"""Measure a peft LoRA model's states (or a fully trained model's: case "full") per rank under torch DDP on CPU, as
the HF Trainer runs it without DeepSpeed.

Run under torchrun: python -m torch.distributed.run --nproc-per-node N tests/fidelity/lora_ddp_probe.py CASES.json
OUT_DIR. The model is built as LLaMA-Factory / TRL build it without DeepSpeed: the base in bf16, peft's adapters in
fp32 (autocast_adapter_dtype), wrapped in DistributedDataParallel (gloo; gradient_as_bucket_view False, accelerate's
default), trained under bf16 autocast with torch's AdamW. A communication hook records each bucket's flat buffer
(the reducer's per-bucket gradient copy). Writes OUT_DIR/<rank>.json: per case, the bytes of frozen and trainable
parameters, of param.grad after the second backward, of the buckets, and of AdamW's moments after the step.
"""

from __future__ import annotations

import json
import os
import sys

import torch
import torch.distributed as dist


def run_case(case: dict, model_config: dict) -> dict:
    import peft
    import transformers
    from torch.nn.parallel import DistributedDataParallel

    torch.manual_seed(0)
    if case.get("full"):  # full fine-tuning: every weight trains, in the dtype the trainer loaded it in
        model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**model_config)).to(getattr(torch,
                                                                                                  case["dtype"]))
    else:
        model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**model_config)).to(torch.bfloat16)
        model = peft.get_peft_model(model, peft.LoraConfig(r=case["rank"], lora_alpha=2 * case["rank"],
                                                           target_modules=case["targets"], lora_dropout=0.0))
    trainable = [p for p in model.parameters() if p.requires_grad]
    ddp = DistributedDataParallel(model, bucket_cap_mb=case.get("bucket_cap_mb", 25))  # TrainingArguments default
    buckets: dict[int, int] = {}

    def record(state, bucket):
        buckets[bucket.index()] = bucket.buffer().numel() * bucket.buffer().element_size()
        return dist.all_reduce(bucket.buffer(), async_op=True).get_future().then(lambda f: f.value()[0])

    ddp.register_comm_hook(None, record)
    if case.get("optim") == "adamw_bnb_8bit":  # transformers trainer_optimizer.py: bitsandbytes' AdamW, 8-bit
        import bitsandbytes

        optimizer = bitsandbytes.optim.AdamW(trainable, lr=1e-4, optim_bits=8)
    else:
        optimizer = torch.optim.AdamW(trainable, lr=1e-4, foreach=False)
    ids = torch.randint(0, model_config["vocab_size"], (case["micro_batch"], case["seq"]))
    for _ in range(2):  # the first step creates the moments; measure the second
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = ddp(input_ids=ids, labels=ids).loss
        loss.backward()
        grads = sum(p.grad.numel() * p.grad.element_size() for p in trainable)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    # every tensor an optimizer state holds but the step counter (torch: exp_avg, exp_avg_sq; bitsandbytes: state1/2,
    # absmax1/2, qmap1/2)
    moments = sum(t.numel() * t.element_size() for s in optimizer.state.values() for k, t in s.items()
                  if torch.is_tensor(t) and k != "step")
    params = {"frozen": 0, "trainable": 0}
    for p in model.parameters():
        params["trainable" if p.requires_grad else "frozen"] += p.numel() * p.element_size()
    return {"case": case, "params": params, "grads": grads, "buckets": sum(buckets.values()),
            "bucket_count": len(buckets), "moments": moments, "trainable_dtype": str(trainable[0].dtype)}


def main() -> None:
    spec = json.load(open(sys.argv[1]))
    dist.init_process_group("gloo")
    results = {name: run_case(case, spec["model"]) for name, case in spec["cases"].items()}
    with open(os.path.join(sys.argv[2], f"{dist.get_rank()}.json"), "w") as handle:
        json.dump(results, handle, indent=1)
    # Both ranks finish their comm-hook all-reduces before the group goes: once (1 run in ~30) rank 1 aborted
    # with "terminate called without an active exception" when it tore the group down while rank 0 still sent.
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
