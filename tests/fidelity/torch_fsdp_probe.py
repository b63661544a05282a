"""Measure torch FSDP2's states on each CPU rank: a small model (an embedding, three blocks of odd widths, a head)
under `fully_shard` per block and at the root, torch's AdamW, one step, without and with a bf16 mixed-precision
policy. Writes OUT_DIR/<rank>.json: the parameters' shapes and the bytes of the storages the parameters, their
gradients and the optimizer's states hold on this rank (each storage once).

    python -m torch.distributed.run --nproc-per-node N tests/fidelity/torch_fsdp_probe.py CASES.json OUT_DIR
"""

from __future__ import annotations

import json
import os
import sys

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

def storages(tensors) -> int:
    """Bytes of the distinct storages behind these tensors (a DTensor's local shard)."""
    seen, total = set(), 0
    for tensor in tensors:
        if tensor is None:
            continue
        storage = getattr(tensor, "_local_tensor", tensor).untyped_storage()
        if storage.data_ptr() not in seen and storage.nbytes():
            seen.add(storage.data_ptr())
            total += storage.nbytes()
    return total


class Block(nn.Module):
    def __init__(self, h: int, f: int):
        super().__init__()
        self.up, self.down, self.norm = nn.Linear(h, f), nn.Linear(f, h, bias=False), nn.LayerNorm(h)

    def forward(self, x):
        return x + self.down(torch.relu(self.up(self.norm(x))))


class Model(nn.Module):
    def __init__(self, v: int = 1000, h: int = 64, f: int = 172, n: int = 3):
        super().__init__()
        self.emb, self.head = nn.Embedding(v, h), nn.Linear(h, v, bias=False)
        self.blocks = nn.ModuleList(Block(h, f) for _ in range(n))

    def forward(self, ids):
        x = self.emb(ids)
        for block in self.blocks:
            x = block(x)
        return self.head(x)


def main() -> None:
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    mesh = init_device_mesh("cpu", (world,))
    out = {}
    policies = (("fp32", None), ("bf16_mp", MixedPrecisionPolicy(param_dtype=torch.bfloat16,
                                                                  reduce_dtype=torch.float32)))
    for name, mp in policies:
        torch.manual_seed(0)
        model = Model()
        shapes = {n: list(p.shape) for n, p in model.named_parameters()}
        kw = {"mesh": mesh} | ({"mp_policy": mp} if mp else {})
        for block in model.blocks:
            fully_shard(block, **kw)
        fully_shard(model, **kw)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=False)
        ids = torch.randint(0, 1000, (2, 16))
        params = storages(p for p in model.parameters())
        model(ids).float().sum().backward()
        grads = storages(p.grad for p in model.parameters())
        opt.step()
        moments = storages(t for state in opt.state.values() for t in state.values()
                           if torch.is_tensor(t) and t.dim() > 0)
        out[name] = {"shapes": shapes, "params": params, "grads": grads, "moments": moments}
    with open(os.path.join(sys.argv[2], f"{rank}.json"), "w") as handle:
        json.dump(out, handle)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
