"""Count the GPU kernels a megatron-core GPT layer launches, by running the real layer on CPU.

Run as: python tests/fidelity/megatron_kernel_count_probe.py CASES.json OUT.json. One process, TP = 1, gloo, the
local (non-TE) layer spec, the CPU patches of megatron_activation_probe.py. A TorchDispatchMode sees every ATen
operator the forward and the backward dispatch; an operator that returns an alias of its input (view, t,
transpose, expand, slice, detach, ...) or only allocates (empty*) launches no kernel; every other one launches
at least one on CUDA, which is what the count is for: the CPU issues them one by one, and that issue time bounds
a small model's step (guard/plan/cpu_issue.py). Each case is run with 1 and 2 layers: the difference is one
layer's kernels, the rest the embedding, final norm, output layer and loss. OUT.json maps each name to
{"layer": {"forward": n, "backward": n}, "outside": {"forward": n, "backward": n}, "ops": {op: count}} (the ops of
one layer's forward and backward, for reading).
"""

from __future__ import annotations

import json
import sys
from collections import Counter

NO_KERNEL = {"empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "_local_scalar_dense",
                 "set_", "lift_fresh", "resize_", "_unsafe_view"}  # _unsafe_view: a view
# whose schema does not mark the alias


def _launches(func) -> bool:
    schema = func._schema
    if schema.name.split("::")[-1] in NO_KERNEL:
        return False
    return not any(r.alias_info is not None for r in schema.returns)


def count(case: dict) -> dict:
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    from megatron_activation_probe import build

    class Counting(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.ops: Counter = Counter()

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if _launches(func):
                self.ops[func._schema.name.split("::")[-1]] += 1
            return func(*args, **(kwargs or {}))

    from megatron.core.transformer.moe import moe_utils

    found = {}
    for layers in (1, 2):
        moe_utils.get_moe_layer_wise_logging_tracker().clear()  # the aux-loss tracker is sized by the first model
        model = build({**case, "layers": layers})
        s, b = case["seq"], case["batch"]
        tokens = torch.randint(0, case["vocab"], (b, s))
        position = torch.arange(s).unsqueeze(0).expand(b, s)
        mask = torch.triu(torch.ones(1, 1, s, s, dtype=torch.bool), diagonal=1)
        forward, backward = Counting(), Counting()
        with forward:
            loss = model(tokens, position, mask, labels=tokens).float().sum()
        with backward:
            loss.backward()
        found[layers] = forward.ops, backward.ops
    (f1, b1), (f2, b2) = found[1], found[2]
    layer = {"forward": sum(f2.values()) - sum(f1.values()), "backward": sum(b2.values()) - sum(b1.values())}
    outside = {"forward": sum(f1.values()) - layer["forward"], "backward": sum(b1.values()) - layer["backward"]}
    ops = dict(sorted(((f2 - f1) + (b2 - b1)).items()))
    return {"layer": layer, "outside": outside, "ops": ops}


def main() -> None:
    sys.argv, cases_path, out_path = sys.argv[:1] + ["-", "-"], sys.argv[1], sys.argv[2]
    import megatron_activation_probe as probe

    probe.sys.argv = [probe.__file__, cases_path, out_path]
    probe.measure = lambda case, listing: count(case)  # the probe's set-up, this probe's measurement
    probe.main()


if __name__ == "__main__":
    main()
