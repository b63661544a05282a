"""Run megatron-core's vocab-parallel cross entropy (and its native fused one) on CPU (one gloo rank) under torch's memory profiler: the
bytes per logit alive at the forward's peak beyond the 16-bit logits it is given, and what stays for backward.

    python megatron_loss_probe.py INIT_METHOD OUT.json
"""

from __future__ import annotations

import json
import sys


def _peak_and_end(fn) -> tuple[int, int]:
    """Bytes allocated beyond the start, at the peak and at the end: every op's own allocations and frees,
    replayed in time order (the CPU allocator reports both to the profiler)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    events = sorted((e for e in prof.events() if e.self_cpu_memory_usage), key=lambda e: e.time_range.start)
    live = peak = 0
    for event in events:
        live += event.self_cpu_memory_usage
        peak = max(peak, live)
    return peak, live


def main() -> None:
    import torch
    import torch.distributed as dist
    from megatron.core import parallel_state
    from megatron.core.fusions.fused_cross_entropy import fused_vocab_parallel_cross_entropy
    from megatron.core.tensor_parallel import vocab_parallel_cross_entropy

    dist.init_process_group("gloo", init_method=sys.argv[1], rank=0, world_size=1)
    parallel_state.initialize_model_parallel(1, 1)
    s, b, vocab = 256, 2, 4096
    out = {"logits": s * b * vocab}
    tp_group = parallel_state.get_tensor_model_parallel_group()
    losses = {"bf16": (torch.bfloat16, vocab_parallel_cross_entropy), "fp32": (torch.float32,
                                                                             vocab_parallel_cross_entropy),
              # --cross-entropy-loss-fusion with its default --cross-entropy-fusion-impl native
              "fused_bf16": (torch.bfloat16, lambda logits, target: fused_vocab_parallel_cross_entropy(
                  logits, target, tp_group))}
    for name, (dtype, loss_fn) in losses.items():
        # logits from an output layer, as in GPTModel: not a leaf, so backward hands their gradient on
        hidden = torch.randn(s, b, 64, dtype=dtype, requires_grad=True)
        weight = torch.randn(vocab, 64, dtype=dtype, requires_grad=True)
        held = {"logits": torch.matmul(hidden, weight.t()), "target": torch.randint(0, vocab, (s, b))}
        peak, end = _peak_and_end(lambda: held.update(loss=loss_fn(held["logits"], held["target"])))
        del held["logits"]  # GPTModel drops its reference once the loss is computed
        back_peak, _ = _peak_and_end(lambda: held["loss"].sum().backward())
        # the output layer's own gradients (its input's and its weight's) are priced elsewhere (grads, transients)
        layer_grads = (hidden.numel() + weight.numel()) * hidden.element_size()
        out[name] = {"forward_peak": peak, "kept_for_backward": end, "backward_peak": back_peak - layer_grads}
    with open(sys.argv[2], "w") as handle:
        json.dump(out, handle)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
