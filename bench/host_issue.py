"""Host time megatron-core spends issuing one transformer layer, measured by running the real layer on this CPU.

A small model's step is bounded by the host: Python, the module code and the dispatcher issue each kernel, and the
GPU waits for them. This runs megatron-core's GPT layer (local spec, TP = 1, the CPU set-up of
tests/fidelity/megatron_activation_probe.py) forward and backward at a size whose arithmetic is negligible
(hidden 64, 64 tokens), with 1 and 9 layers, and prints per layer: the host milliseconds forward and backward
(the fastest of REPEATS runs, the least disturbed by the rest of the machine; difference of the two depths),
the kernels it issues (tests/fidelity/megatron_kernel_count_probe.py's count), and their ratio, the host
seconds per kernel that schemas/gpus/kernels.json records as `host.per_kernel_s` with this machine's CPU: the
CPU-only stand-in. A GPU host's own figure (bench/gpu_layer.py, schemas/gpus/measured/H200/layers.json) replaces
it. The CPU's own arithmetic at this size is inside this figure (a few microseconds a kernel), the
cuLaunchKernel call a GPU adds is not.
Run: python bench/host_issue.py (one process; set OMP_NUM_THREADS=1 for a steady figure)."""

from __future__ import annotations

import json
import platform
import statistics
import sys
import time
from pathlib import Path

FIDELITY = Path(__file__).resolve().parent.parent / "tests" / "fidelity"
REPEATS = 41
DEEP = 9
CASES = {"gpt (LayerNorm, GeLU, biases)": {"hidden": 64, "heads": 4, "ffn": 256, "seq": 32, "batch": 2, "vocab": 128},
         "llama (RMSNorm, SwiGLU, RoPE, GQA)": {"hidden": 64, "heads": 4, "groups": 2, "ffn": 192, "seq": 32,
                                                "batch": 2, "vocab": 128, "norm": "RMSNorm", "swiglu": True,
                                                "bias": False, "position": "rope"}}


def cpu_name() -> str:
    """The CPU's model name (the host cost per kernel is the CPU's)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def timed(case: dict) -> dict:
    import torch

    import megatron_activation_probe as probe
    from megatron_kernel_count_probe import count

    out = {}
    for layers in (1, DEEP):
        model = probe.build({**case, "layers": layers})
        s, b = case["seq"], case["batch"]
        tokens = torch.randint(0, case["vocab"], (b, s))
        position = torch.arange(s).unsqueeze(0).expand(b, s)
        mask = torch.triu(torch.ones(1, 1, s, s, dtype=torch.bool), diagonal=1)
        forward, backward = [], []
        for i in range(REPEATS + 5):
            start = time.perf_counter()
            loss = model(tokens, position, mask, labels=tokens).float().sum()
            mid = time.perf_counter()
            loss.backward()
            end = time.perf_counter()
            if i >= 5:  # warm-up: allocator and autograd caches
                forward.append(mid - start)
                backward.append(end - mid)
        out[layers] = min(forward), min(backward)
    kernels = count({**case, "layers": 1})["layer"]
    f = (out[DEEP][0] - out[1][0]) / (DEEP - 1)
    bw = (out[DEEP][1] - out[1][1]) / (DEEP - 1)
    return {"forward_ms": f * 1e3, "backward_ms": bw * 1e3, "kernels_forward": kernels["forward"],
            "kernels_backward": kernels["backward"],
            "per_kernel_us": (f + bw) / (kernels["forward"] + kernels["backward"]) * 1e6}


def main() -> None:
    sys.path.insert(0, str(FIDELITY))
    import megatron_activation_probe as probe

    results = {}
    probe.measure = lambda case, listing: results.setdefault(case["name"], timed(case))
    cases = {name: {**case, "name": name, "layers": 1} for name, case in CASES.items()}
    path = Path("/tmp") / "guard_host_issue_cases.json"
    path.write_text(json.dumps(cases))
    sys.argv = [probe.__file__, str(path), str(path.with_suffix(".out.json"))]
    probe.main()
    print(f"host time of one megatron-core layer (local spec), fastest of {REPEATS}, on {cpu_name()}:")
    for name, r in results.items():
        print(f"  {name:38} forward {r['forward_ms']:.2f} ms ({r['kernels_forward']} kernels), backward "
              f"{r['backward_ms']:.2f} ms ({r['kernels_backward']} kernels): {r['per_kernel_us']:.1f} us a kernel")
    per = statistics.mean(r["per_kernel_us"] for r in results.values())
    print(f"host seconds per kernel (mean of the cases): {per:.1f} us")


if __name__ == "__main__":
    main()
