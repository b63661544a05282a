"""Measure DeepSpeed ZeRO model states per rank on CPU, component by component, for many configs in one launch.

Run under torchrun: python -m torch.distributed.run --nproc-per-node N tests/fidelity/deepspeed_zero_probe.py
CASES.json OUT_DIR. Writes OUT_DIR/<rank>.json: for each case, at three moments (end of backward, inside the
optimizer step just before the inner optimizer runs, after the step), the bytes of every live CPU tensor
storage (counted once), sorted into components by which DeepSpeed object holds it (and, under stages 1-2, the
reduce buckets and gradients held when autograd's backward ends, before the engine's post-backward reduction,
which is where the zero_optimization keys' gradient paths differ):

  params     the module's parameters (ZeRO-3: each parameter's ds_tensor partition)
  grads      p.grad and the ZeRO optimizer's gradient partitions / flat gradient buffers
  master     the fp32 master weights the inner optimizer updates
  moments    the inner optimizer's state (Adam's exp_avg and exp_avg_sq)
  other      everything else (buckets, offload staging buffers, the input batch, scalars)

Storages alive before the case began are left out, so that what earlier cases leaked is not counted.

The model is GPT-2 shaped (tied embeddings, LayerNorm, biases) in plain torch, so guard can be asked about it
with an HF config. Nothing on the training path is patched: DeepSpeed picks its CPU accelerator by itself (gloo).
Only its shared-memory all-reduce op, which training never uses, is kept from being JIT-compiled (minutes on an
empty op cache; see tests/deepspeed_oracle.py:skip_shm_comm_build).
"""

from __future__ import annotations

import gc
import json
import os
import sys
import time

import torch
from torch import nn
from torch.nn import functional as F


class Block(nn.Module):
    def __init__(self, h: int, heads: int):
        super().__init__()
        self.heads = heads
        # registered in GPT2Block's order (ln_1, attn, ln_2, mlp): ZeRO flattens parameters in this order
        self.ln_1 = nn.LayerNorm(h)
        self.c_attn, self.c_proj = nn.Linear(h, 3 * h), nn.Linear(h, h)
        self.ln_2 = nn.LayerNorm(h)
        self.c_fc, self.mlp_proj = nn.Linear(h, 4 * h), nn.Linear(4 * h, h)

    def forward(self, x):
        b, s, h = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(h, dim=-1)
        q, k, v = (t.view(b, s, self.heads, h // self.heads).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, s, h)
        x = x + self.c_proj(y)
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x))))


class TinyGPT2(nn.Module):
    """GPT-2's parameter set: wte, wpe, blocks, ln_f, and an LM head tied to wte."""

    def __init__(self, c: dict):
        super().__init__()
        h = c["n_embd"]
        self.wte, self.wpe = nn.Embedding(c["vocab_size"], h), nn.Embedding(c["n_positions"], h)
        self.h = nn.ModuleList(Block(h, c["n_head"]) for _ in range(c["n_layer"]))
        self.ln_f = nn.LayerNorm(h)
        self.lm_head = nn.Linear(h, c["vocab_size"], bias=False)
        self.lm_head.weight = self.wte.weight

    def forward(self, ids):
        x = self.wte(ids) + self.wpe(torch.arange(ids.shape[1]))
        for block in self.h:
            x = block(x)
        return self.lm_head(self.ln_f(x))


def trainer_groups(model: nn.Module) -> list[dict]:
    """The HF Trainer's optimizer groups: weight decay for everything but biases and LayerNorm parameters."""
    no_decay = {id(p) for m in model.modules() if isinstance(m, nn.LayerNorm) for p in m.parameters()}
    no_decay |= {id(p) for name, p in model.named_parameters() if name.endswith("bias")}
    params = list(model.parameters())
    return [{"params": [p for p in params if id(p) not in no_decay], "weight_decay": 0.0},
            {"params": [p for p in params if id(p) in no_decay], "weight_decay": 0.0}]


def _tensors(obj, depth: int = 0):
    """Every tensor reachable through lists, tuples and dicts."""
    if depth > 6 or obj is None:
        return
    if isinstance(obj, torch.Tensor):
        yield obj
    elif isinstance(obj, dict):
        for value in obj.values():
            yield from _tensors(value, depth + 1)
    elif isinstance(obj, (list, tuple)):
        for value in obj:
            yield from _tensors(value, depth + 1)


def _storages(obj, out: set[int]) -> None:
    for tensor in _tensors(obj):
        if tensor.untyped_storage().nbytes():
            out.add(tensor.untyped_storage().data_ptr())


# ZeRO optimizer attributes that hold gradients (stage_1_and_2.py, stage3.py, fp16/bf16 wrappers in 0.19.8)
GRAD_ATTRS = ("averaged_gradients", "grads_in_partition", "grad_partitions_flat_buffer", "fp32_groups_gradients_flat",
              "_DeepSpeedZeroOptimizer_Stage3__param_id_to_grad_partition", "fp32_groups_gradient_flat_partition")
# ... and the fp32 master partitions, which stage 3 hands to the inner optimizer only while it steps
MASTER_ATTRS = ("single_partition_of_fp32_groups", "fp32_partitioned_groups_flat", "fp32_groups_flat",
                "fp32_groups_flat_partition")


def owners(engine) -> dict[str, set[int]]:
    model, opt = engine.module, engine.optimizer
    basic = getattr(engine, "basic_optimizer", None) or opt
    found = {name: set() for name in ("params", "grads", "master", "moments")}
    for p in model.parameters():
        _storages(getattr(p, "ds_tensor", None) if hasattr(p, "ds_tensor") else p.data, found["params"])
        _storages(p.grad, found["grads"])
    for attr in GRAD_ATTRS:
        _storages(getattr(opt, attr, None), found["grads"])
    for attr in MASTER_ATTRS:
        for tensor in _tensors(getattr(opt, attr, None)):
            _storages(tensor, found["master"])
            _storages(tensor.grad, found["grads"])  # stage 3 keeps its fp32 gradient partition here
    for group in basic.param_groups:
        for p in group["params"]:
            _storages(p.data, found["master"])
            _storages(p.grad, found["grads"])
    _storages(list(basic.state.values()), found["moments"])
    # a storage claimed twice belongs to the first owner in this order (a master weight aliasing a param: fp32)
    taken: set[int] = set()
    for name in ("params", "master", "grads", "moments"):
        found[name] -= taken
        taken |= found[name]
    return found


def live_tensors() -> dict[int, torch.Tensor]:
    """Every live CPU tensor by storage (a strong reference, so that the address is not reused)."""
    gc.collect()
    found = {}
    for obj in gc.get_objects():
        try:
            if isinstance(obj, torch.Tensor) and obj.device.type == "cpu":
                found.setdefault(obj.untyped_storage().data_ptr(), obj)
        except Exception:  # some objects raise on attribute access during a gc walk
            continue
    return found


def census(engine, baseline: dict[int, torch.Tensor]) -> dict:
    """Bytes per component of every CPU storage born since `baseline`, each counted once; each storage also
    listed as "component dtype bytes" so that a bucket or a staging buffer can be named."""
    gc.collect()
    owned = owners(engine)
    out: dict = {name: 0 for name in (*owned, "other")}
    items: dict[str, int] = {}
    grad_ptrs: dict[int, int] = {}
    seen: set[int] = set(baseline)
    for obj in gc.get_objects():
        try:
            if not isinstance(obj, torch.Tensor) or obj.device.type != "cpu":
                continue
            storage = obj.untyped_storage()
        except Exception:  # some objects raise on attribute access during a gc walk
            continue
        key, nbytes = storage.data_ptr(), storage.nbytes()
        if key in seen or nbytes == 0:
            continue
        seen.add(key)
        name = next((n for n, keys in owned.items() if key in keys), "other")
        out[name] += nbytes
        if name == "grads":
            grad_ptrs[key] = nbytes
        label = f"{name} {str(obj.dtype).replace('torch.', '')} {nbytes}"
        items[label] = items.get(label, 0) + 1
    out["items"] = items
    out["_grad_ptrs"] = grad_ptrs
    return out


def _storage_bytes(tensors) -> dict[int, int]:
    """data_ptr -> bytes of each storage, read from the tensors themselves: a gradient autograd made and no
    Python code has touched yet has no Python object, so a gc walk cannot see it."""
    out = {}
    for tensor in tensors:
        if tensor is not None and tensor.untyped_storage().nbytes():
            out[tensor.untyped_storage().data_ptr()] = tensor.untyped_storage().nbytes()
    return out


def gradient_path_census(engine, baseline: dict[int, torch.Tensor]) -> dict:
    """Stages 1-2 at the end of autograd's backward (entry to engine.allreduce_gradients): bytes of the reduce
    buckets (the ipg buffers) and of every gradient storage the ZeRO optimizer or a parameter holds, born since
    `baseline`."""
    opt = engine.optimizer
    buckets = _storage_bytes(b for bucket in opt.ipg_buckets.values() for b in bucket.buffer)
    held = [p.grad for p in engine.module.parameters()] + [getattr(opt, "grads_in_partition", None)]
    held += [t for group in opt.averaged_gradients.values() if group is not None for t in group]
    held += [p.grad for params in opt.previous_reduced_grads.values() for p in params]
    held += [g for bucket in opt.ipg_buckets.values() for g in bucket.grads]
    held += [p.grad for p in opt.extra_large_param_to_reduce.values()]
    grads = {k: v for k, v in _storage_bytes(held).items() if k not in buckets}
    return {"buckets": sum(v for k, v in buckets.items() if k not in baseline),
            "grads": sum(v for k, v in grads.items() if k not in baseline)}


def settle() -> None:
    """Let the process group drop the tensors of the collectives that just returned. A census taken at once
    sometimes (about one case in forty, seen under stage 1 with offload and overlap_comm) still saw a
    largest-tensor-sized and a bucket-sized 16-bit storage that no DeepSpeed object holds, most likely still
    referenced by a gloo worker thread's finished work item (ProcessGroupGloo::workInProgress_ is reset after the
    waiting caller is woken); a barrier and a short wait let it go."""
    torch.distributed.barrier()
    time.sleep(0.2)


def run_case(case: dict, model_config: dict) -> dict:
    import deepspeed

    baseline = live_tensors()  # what earlier cases left behind (DeepSpeed keeps some engines alive)
    torch.manual_seed(0)
    model = TinyGPT2(model_config)
    if case["dtype"] == "bf16":
        model = model.to(torch.bfloat16)
    psi = sum(p.numel() for p in model.parameters())
    zero = {"stage": case["stage"], "reduce_bucket_size": case["reduce_bucket"],
            "allgather_bucket_size": case["reduce_bucket"]}
    if case["stage"] == 3:
        zero.update(stage3_prefetch_bucket_size=case["prefetch_bucket"],
                    stage3_param_persistence_threshold=case["persistence_threshold"],
                    stage3_max_live_parameters=case["max_live"])
    if case["offload"] != "none":
        zero["offload_optimizer"] = {"device": case["offload"], "pin_memory": False}
    zero.update(case.get("zero_keys", {}))  # the keys that choose the gradient path (contiguous_gradients, ...)
    config = {"train_micro_batch_size_per_gpu": case["micro_batch"], "gradient_accumulation_steps": 1,
              "zero_optimization": zero, "zero_force_ds_cpu_optimizer": False, "zero_allow_untested_optimizer": True,
              "bf16": {"enabled": case["dtype"] == "bf16"}, "steps_per_print": 10**9, **case.get("ds_extra", {})}
    optimizer = torch.optim.AdamW(trainer_groups(model), lr=1e-4, foreach=False)
    engine, *_ = deepspeed.initialize(model=model, optimizer=optimizer, config=config)
    basic = getattr(engine, "basic_optimizer", None) or engine.optimizer
    in_step: dict = {}
    inner_step = basic.step

    def census_then_step(*args, **kwargs):
        if not in_step:
            in_step.update(census(engine, baseline))
        return inner_step(*args, **kwargs)

    end_of_autograd: dict = {}
    if case["stage"] in (1, 2):  # the gradient path's holdings before the engine's post-backward reduction
        allreduce_gradients = engine.allreduce_gradients

        def census_then_reduce(*args, **kwargs):
            end_of_autograd.update(gradient_path_census(engine, baseline))
            return allreduce_gradients(*args, **kwargs)

        engine.allreduce_gradients = census_then_reduce
    ids = torch.randint(0, model_config["vocab_size"], (case["micro_batch"], model_config["n_positions"]))
    after_backward = after_step = {}
    for _ in range(2):  # the first step creates the Adam moments; measure the second
        in_step.clear()
        basic.step = census_then_step
        logits = engine(ids)
        loss = F.cross_entropy(logits.float().flatten(0, 1), ids.flatten())
        del logits
        engine.backward(loss)
        del loss
        settle()
        after_backward = census(engine, baseline)
        engine.step()
        after_step = census(engine, baseline)
    # gradient storages the step created before the inner optimizer ran (the fp32 copies it is handed)
    born = {k: v for k, v in in_step.get("_grad_ptrs", {}).items() if k not in after_backward["_grad_ptrs"]}
    in_step["new_grads"] = sum(born.values())
    for moment in (after_backward, in_step, after_step):
        moment.pop("_grad_ptrs", None)
    result = {"case": case, "psi": psi, "after_backward": after_backward, "in_step": dict(in_step),
              "after_step": after_step, "end_of_autograd": end_of_autograd,
              "optimizer": type(engine.optimizer).__name__}
    if hasattr(engine, "destroy"):  # stage 3 removes its hooks; what it still keeps is left out of the next case
        engine.destroy()
    return result


def run_ranks(run_case) -> None:
    """Under torchrun: each case of CASES.json (argv[1]) through `run_case(case, model)` on this rank, written to
    OUT_DIR/<rank>.json (argv[2]); DeepSpeed's shm communication op is not built (deepspeed_oracle.py)."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir))
    from deepspeed_oracle import skip_shm_comm_build

    skip_shm_comm_build()
    spec = json.load(open(sys.argv[1]))
    rank = int(os.environ.get("RANK", "0"))
    results = {name: run_case(case, spec["model"]) for name, case in spec["cases"].items()}
    with open(os.path.join(sys.argv[2], f"{rank}.json"), "w") as handle:
        json.dump(results, handle, indent=1)


def main() -> None:
    def with_dp(case: dict, model: dict) -> dict:
        return {**run_case(case, model), "dp": int(os.environ.get("WORLD_SIZE", "1"))}

    run_ranks(with_dp)


if __name__ == "__main__":
    main()
