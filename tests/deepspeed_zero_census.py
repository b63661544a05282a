"""Measure DeepSpeed ZeRO model states per rank on CPU: a census of live tensors at the end of backward
and after the optimizer step. Run under torchrun: python -m torch.distributed.run --nproc-per-node N
tests/deepspeed_zero_census.py STAGE OUT_DIR. Writes OUT_DIR/<rank>.json.
"""

from __future__ import annotations

import gc
import json
import os
import sys

import torch

WIDTH, DEPTH = 512, 6  # 6 x (512*512 + 512) = 1,575,936 parameters
REDUCE_BUCKET = 200_000  # elements: small, so the census is dominated by the states and the bucket is visible


def census() -> dict[str, int]:
    """Bytes of live tensors by dtype, each storage counted once."""
    seen, out = set(), {}
    for obj in gc.get_objects():
        try:
            if not isinstance(obj, torch.Tensor) or obj.device.type != "cpu":
                continue
            storage = obj.untyped_storage()
        except Exception:  # some objects raise on isinstance/attribute access during gc walks
            continue
        key = storage.data_ptr()
        if key in seen or storage.nbytes() == 0:
            continue
        seen.add(key)
        out[str(obj.dtype)] = out.get(str(obj.dtype), 0) + storage.nbytes()
    return out


def main() -> None:
    import deepspeed

    stage, out_dir = int(sys.argv[1]), sys.argv[2]
    torch.manual_seed(0)
    model = torch.nn.Sequential(*[torch.nn.Linear(WIDTH, WIDTH) for _ in range(DEPTH)])
    psi = sum(p.numel() for p in model.parameters())
    config = {"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1, "bf16": {"enabled": True},
              "zero_optimization": {"stage": stage, "reduce_bucket_size": REDUCE_BUCKET,
                                    "allgather_bucket_size": REDUCE_BUCKET,
                                    "stage3_prefetch_bucket_size": 0, "stage3_param_persistence_threshold": 0}}
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    engine, *_ = deepspeed.initialize(model=model, optimizer=optimizer, config=config)
    before_reduce: dict[str, int] = {}
    reduce = getattr(engine.optimizer, "reduce_gradients", None)
    if reduce is not None:  # stage 1 reduces once, after the whole backward: look just before it
        def census_then_reduce(*args, **kwargs):
            gc.collect()
            before_reduce.update(census())
            return reduce(*args, **kwargs)

        engine.optimizer.reduce_gradients = census_then_reduce
    x = torch.randn(1, WIDTH, dtype=torch.bfloat16)
    for _ in range(2):  # the first step creates the Adam moments
        loss = engine(x).float().pow(2).mean()
        engine.backward(loss)
        gc.collect()
        after_backward = census()
        engine.step()
    gc.collect()
    after_step = census()
    rank = int(os.environ.get("RANK", "0"))
    with open(os.path.join(out_dir, f"{rank}.json"), "w") as handle:
        json.dump({"psi": psi, "largest_layer": WIDTH * WIDTH + WIDTH, "after_backward": after_backward,
                   "after_step": after_step, "before_reduce": before_reduce, "dp": int(os.environ.get("WORLD_SIZE", "1"))}, handle)


if __name__ == "__main__":
    main()
