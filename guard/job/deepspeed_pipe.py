"""Layers to pipeline stages as DeepSpeed's PipelineModule partitions Megatron-DeepSpeed's GPTModelPipe.

With `--deepspeed` and pipeline parallelism (no `--no-pipeline-parallel`), Megatron-DeepSpeed builds GPTModelPipe, a
list of layer specs that DeepSpeed splits itself (runtime/pipe/module.py _partition_layers); megatron-core's even
split and its checks do not apply. The specs, in order (megatron/model/gpt_model.py, microsoft 070c64be and
bigscience-workshop): a cast to 16 bits, the embedding, [bigscience: a transpose], the transformer layers,
[bigscience: a transpose], the final norm, the LM head (the tied embedding again, or LMHeadPipe when untied), a cast
to fp32. Microsoft's partition_method is 'type:transformer'; BigScience's is --pp-partition-method, else the same.
"""

from __future__ import annotations

import re
from functools import lru_cache

METHODS = ("uniform", "type:")


def partition_uniform(num_items: int, num_parts: int) -> list[int]:
    """deepspeed 0.19.8 runtime/utils.py partition_uniform: the first `residual` parts get one item more."""
    if num_items <= num_parts:
        return [min(p, num_items) for p in range(num_parts + 1)]
    chunk, residual = divmod(num_items, num_parts)
    parts = [p * chunk for p in range(num_parts + 1)]
    for i in range(residual):
        for p in range(i + 1, num_parts + 1):
            parts[p] += 1
    return parts


def partition_balanced(weights: list[int], num_parts: int) -> list[int]:
    """deepspeed 0.19.8 runtime/utils.py partition_balanced: the split whose heaviest and lightest parts differ
    least (a dynamic program over prefix sums), ties going to the later boundary, as its `>=` does."""
    n, m = len(weights), num_parts
    if n <= m:
        return partition_uniform(n, m)
    inf = float("inf")
    prefix = [0]
    for w in weights:
        prefix.append(prefix[-1] + w)
    dp_max = [[inf] * (m + 1) for _ in range(n + 1)]
    dp_min = [[inf] * (m + 1) for _ in range(n + 1)]
    dp_cost = [[inf] * (m + 1) for _ in range(n + 1)]
    position = [[0] * (m + 1) for _ in range(n + 1)]
    dp_max[0][0] = dp_cost[0][0] = 0
    for i in range(1, n + 1):
        for j in range(1, min(i, m) + 1):
            for k in range(i):
                part = prefix[i] - prefix[k]
                high, low = max(dp_max[k][j - 1], part), min(dp_min[k][j - 1], part)
                if dp_cost[i][j] >= high - low:
                    dp_cost[i][j], dp_max[i][j], dp_min[i][j], position[i][j] = high - low, high, low, k
    parts = [n]
    for j in range(m, 0, -1):
        parts.append(position[parts[-1]][j])
    return parts[::-1]


def specs(num_layers: int, bigscience: bool, tied: bool) -> list[str]:
    """GPTModelPipe's layer specs by class name (lambdas and casts are "fn")."""
    transpose = ["fn"] if bigscience else []
    head = "EmbeddingPipe" if tied else "LMHeadPipe"
    return ["fn", "EmbeddingPipe", *transpose, *["ParallelTransformerLayerPipe"] * num_layers, *transpose,
            "LayerNorm", head, "fn"]


def stage_layers(num_layers: int, pp: int, method: str, bigscience: bool, tied: bool) -> list[int]:
    """Transformer layers on each pipeline stage; ValueError for a method DeepSpeed does not implement (or guard
    cannot price: 'parameters' weighs each spec by its parameter count)."""
    return list(_stage_layers(num_layers, pp, method, bigscience, tied))


@lru_cache(maxsize=256)
def _stage_layers(num_layers: int, pp: int, method: str, bigscience: bool, tied: bool) -> tuple[int, ...]:
    """Cached: the dynamic program takes about 45 ms at 96 layers over 16 stages, and the planner splits the same
    job once per candidate layout."""
    items = specs(num_layers, bigscience, tied)
    method = method.lower()
    if method == "uniform":
        parts = partition_uniform(len(items), pp)
    elif method.startswith("type:"):
        # _find_layer_type: re.search(layertype, the spec's class name, re.IGNORECASE)
        pattern = re.compile(method.split(":", 1)[1], re.IGNORECASE)
        parts = partition_balanced([1 if name != "fn" and pattern.search(name) else 0 for name in items], pp)
    else:
        raise ValueError(f"partition_method {method!r}")
    return tuple(sum(1 for name in items[parts[s]:parts[s + 1]] if name == "ParallelTransformerLayerPipe")
                 for s in range(pp))
