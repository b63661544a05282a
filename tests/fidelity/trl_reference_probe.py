"""Measure the reference model TRL's trainers keep on each rank: TRL's own prepare_deepspeed on a transformers Llama
built from a config (random weights, nothing downloaded), on CPU ranks, after one no-grad forward (the reference's
steady state: ZeRO-3 keeps its persistent parameters gathered from the first forward on).

Run under torchrun: python -m torch.distributed.run --nproc-per-node N tests/fidelity/trl_reference_probe.py
CASES.json OUT_DIR. Writes OUT_DIR/<rank>.json: per case, the bytes of every storage the reference's parameters
hold on this rank (their data and, under ZeRO-3, their partitions), counted once each. The reference is built as
TRL's create_model_from_path builds it under the HF DeepSpeed integration: under deepspeed.zero.Init for ZeRO-3,
else whole, and handed to trl.models.utils.prepare_deepspeed with an accelerate DeepSpeed plugin of the case's
config (TRL keeps ZeRO-3, forces stage 0 otherwise).
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


def _reference_bytes(module) -> int:
    seen, total = set(), 0
    for p in module.parameters():
        for t in (p.data, getattr(p, "ds_tensor", None)):
            if t is None or t.numel() == 0:
                continue
            storage = t.untyped_storage()
            if storage.data_ptr() not in seen:
                seen.add(storage.data_ptr())
                total += storage.nbytes()
    return total


def run_case(case: dict, model_config: dict) -> dict:
    import deepspeed
    import transformers
    from accelerate import Accelerator
    from accelerate.state import AcceleratorState
    from accelerate.utils import DeepSpeedPlugin
    from trl.models.utils import prepare_deepspeed

    torch.manual_seed(0)
    config = {"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1,
              "zero_optimization": {"stage": case["stage"]}, "bf16": {"enabled": True}, "steps_per_print": 10**9}
    AcceleratorState._reset_state(True)
    accelerator = Accelerator(deepspeed_plugin=DeepSpeedPlugin(hf_ds_config=config))
    hf_config = transformers.LlamaConfig(**model_config)
    if case["stage"] == 3:
        with deepspeed.zero.Init(config_dict_or_path=config, dtype=torch.bfloat16):
            reference = transformers.LlamaForCausalLM(hf_config)
    else:
        reference = transformers.LlamaForCausalLM(hf_config)  # fp32: the engine casts it to the config's bf16
    engine = prepare_deepspeed(reference, accelerator)
    ids = torch.randint(0, model_config["vocab_size"], (1, 16))
    with torch.no_grad():
        engine(input_ids=ids)
    out = {"case": case, "reference_bytes": _reference_bytes(engine.module),
           "dtype": str(next(engine.module.parameters()).dtype)}
    if hasattr(engine, "destroy"):
        engine.destroy()
    return out


def main() -> None:
    helpers = _probe_helpers()
    helpers.run_ranks(lambda case, model: run_case(case, model))


if __name__ == "__main__":
    main()
