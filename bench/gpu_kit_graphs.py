"""The GPU kit's CUDA-graph check: what torch.cuda.max_memory_allocated sees of a graphed layer stack.

guard's CUDA-graph model (guard/memory/cuda_graphs.py) rests on one behaviour of the caching allocator: a graph's
inner tensors are counted while capture allocates them, and a replay allocates nothing, so a replayed step's
allocated peak leaves out what the graphed layers save for backward. This measures it on a stack of bf16
Linear + GELU layers: the eager forward+backward's peak above the weights, the capture's
(torch.cuda.make_graphed_callables), and the replayed forward+backward's; with guard's saved-activation count for
the eager step (each layer keeps its input and GELU's input: 2 x tokens x width x 2 bytes).
"""

from __future__ import annotations

import time

LAYERS, WIDTH, TOKENS = 8, 4096, 8192


def graph_rows(device: str) -> list[dict]:
    if device != "cuda":
        return [{"case": "cuda graph replay", "skipped": "CPU dry run (CUDA graphs need a GPU)"}]
    import torch

    start = time.perf_counter()
    torch.cuda.empty_cache()
    stack = torch.nn.Sequential(*[m for _ in range(LAYERS) for m in (torch.nn.Linear(WIDTH, WIDTH, bias=False),
                                                                     torch.nn.GELU())]).cuda().to(torch.bfloat16)
    x = torch.randn(TOKENS, WIDTH, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    base = torch.cuda.memory_allocated()

    def step(fn):
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        fn(x).float().sum().backward()
        torch.cuda.synchronize()
        return torch.cuda.max_memory_allocated() - base

    step(stack)  # gradients allocated once, as after a first step
    base = torch.cuda.memory_allocated()
    eager = step(stack)
    torch.cuda.reset_peak_memory_stats()
    graphed = torch.cuda.make_graphed_callables(stack, (x,))
    capture = torch.cuda.max_memory_allocated() - base
    kept = torch.cuda.memory_allocated() - base  # the static inputs, outputs and gradients the graph keeps
    base = torch.cuda.memory_allocated()
    replay = step(graphed)
    saved = LAYERS * 2 * TOKENS * WIDTH * 2
    return [{"case": "cuda graph replay", "seconds": round(time.perf_counter() - start, 1),
             "eager_above_weights": eager, "capture_above_weights": capture, "replay_above_static": replay,
             "static_after_capture": kept, "saved_activations_by_count": saved,
             "replay_over_eager": replay / eager if eager else None}]
