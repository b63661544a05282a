"""Time megatron-core's GPT layer on one GPU: wall and host time per layer, the CUDA kernels it launches, peak memory.

Run on the GPU machine: python bench/gpu_layer.py --out schemas/gpus/measured/GPU/layers.json (megatron-core
installed, e.g. carried as a wheel; about a minute).
Each case is megatron-core 0.16.1's GPTModel with the local (non-TE) layer spec, built as
tests/fidelity/megatron_activation_probe.py builds it, bf16, TP = PP = 1, one rank, no optimizer: a forward and a
backward per iteration, synchronised at its end. Every case runs at two depths; their difference over the extra
layers is one layer's time, so the embedding, output layer and loss drop out. Per iteration it records the host time
until backward() returns (the CPU issuing kernels) and the wall time after the GPU finishes; the median of the
timed iterations. The tiny cases are host-bound (their arithmetic is negligible): host seconds per layer over the
kernels the layer launches (counted by torch.profiler, CUDA activity) is what schemas/gpus/kernels.json records as
`host.per_kernel_s`. The large cases are GPU-bound: tests/test_gpu_layer_fidelity.py sets guard's layer time for the
same shape against them. `--dry` runs the same code on this CPU with the small cases (the test suite's check that it
still runs).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

FIDELITY = Path(__file__).resolve().parent.parent / "tests" / "fidelity"
GPT = {"norm": "LayerNorm"}
LLAMA = {"norm": "RMSNorm", "swiglu": True, "bias": False, "position": "rope"}
# name: (case, extra layers, timed iterations); `vocab` small: the output layer cancels in the difference anyway
CASES = {
    "host gpt h64": ({**GPT, "hidden": 64, "heads": 4, "ffn": 256, "seq": 32, "batch": 2}, 8, 30),
    "host llama h64": ({**LLAMA, "hidden": 64, "heads": 4, "groups": 2, "ffn": 192, "seq": 32, "batch": 2}, 8, 30),
    "ci gpt h512 s1024 b4": ({**GPT, "hidden": 512, "heads": 8, "ffn": 2048, "seq": 1024, "batch": 4}, 8, 20),
    "ci llama h512 s1024 b4": ({**LLAMA, "hidden": 512, "heads": 8, "groups": 8, "ffn": 2048, "seq": 1024,
                                "batch": 4}, 8, 20),
    "gpt h2048 s2048 b2": ({**GPT, "hidden": 2048, "heads": 16, "ffn": 8192, "seq": 2048, "batch": 2}, 4, 10),
    "gpt h4096 s4096 b1": ({**GPT, "hidden": 4096, "heads": 32, "ffn": 16384, "seq": 4096, "batch": 1}, 2, 8),
    "llama h4096 gqa8 s4096 b1": ({**LLAMA, "hidden": 4096, "heads": 32, "groups": 8, "ffn": 14336, "seq": 4096,
                                   "batch": 1}, 2, 8),
}
DRY = ("host gpt h64", "host llama h64")


def gpu_setup() -> None:
    """One NCCL rank on GPU 0, megatron-core's parallel state and RNG tracker as its training sets them."""
    import torch
    import torch.distributed as dist

    torch.cuda.set_device(0)
    dist.init_process_group("nccl", store=dist.HashStore(), rank=0, world_size=1)
    from megatron.core import parallel_state as ps
    from megatron.core import tensor_parallel

    ps.initialize_model_parallel(1, 1)
    tensor_parallel.model_parallel_cuda_manual_seed(0)


def _kernels(run, torch) -> tuple[int | None, float | None, dict]:
    """(CUDA kernels, copies and sets one call of `run` puts on the GPU; the GPU's busy seconds, their durations
    summed; {kernel name: [calls, microseconds]}), by torch.profiler; (None, None, {}) where it fails."""
    if not torch.cuda.is_available():
        return None, None, {}
    try:
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            run()
            torch.cuda.synchronize()
        events = [e for e in prof.key_averages() if e.device_type == torch.autograd.DeviceType.CUDA]
        def micros(e) -> float:
            return getattr(e, "self_device_time_total", None) or getattr(e, "self_cuda_time_total", 0)

        by_name = {e.key[:160]: [e.count, micros(e)] for e in events}
        return sum(e.count for e in events), sum(map(micros, events)) / 1e6, by_name
    except Exception as err:  # noqa: BLE001 (a profiler that cannot start costs the count, not the run)
        print(f"  kernel count failed: {err}", file=sys.stderr)
        return None, None, {}


def timed(case: dict, layers: int, iterations: int, device: str) -> dict:
    import torch

    from megatron_activation_probe import build

    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    model = build({**case, "layers": layers, "vocab": case.get("vocab", 256)}).to(device)
    s, b = case["seq"], case["batch"]
    tokens = torch.randint(0, 256, (b, s), device=device)
    position = torch.arange(s, device=device).unsqueeze(0).expand(b, s)
    mask = torch.triu(torch.ones(1, 1, s, s, dtype=torch.bool, device=device), diagonal=1)

    def run() -> tuple[float, float]:
        model.zero_grad(set_to_none=True)
        sync()
        start = time.perf_counter()
        model(tokens, position, mask, labels=tokens).float().sum().backward()
        issued = time.perf_counter()
        sync()
        return issued - start, time.perf_counter() - start

    for _ in range(3):  # warm-up: allocator, cuBLAS handles and heuristics, autograd caches
        run()
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    host, wall = zip(*(run() for _ in range(iterations)))
    peak = torch.cuda.max_memory_allocated() if device == "cuda" else None
    kernels, busy, by_name = _kernels(run, torch)
    del model
    if device == "cuda":
        torch.cuda.empty_cache()
    return {"host_s": statistics.median(host), "wall_s": statistics.median(wall), "kernels": kernels,
            "gpu_busy_s": busy, "max_memory_allocated": peak, "by_kernel": by_name}


def measure(name: str, device: str) -> dict:
    case, extra, iterations = CASES[name]
    if device != "cuda":
        iterations = 3
    shallow = timed(case, 1, iterations, device)
    deep = timed(case, 1 + extra, iterations, device)
    per = {key: (deep[key] - shallow[key]) / extra for key in ("host_s", "wall_s")}
    if shallow["kernels"] is not None and deep["kernels"] is not None:
        per["kernels"] = (deep["kernels"] - shallow["kernels"]) / extra
        per["gpu_busy_s"] = (deep["gpu_busy_s"] - shallow["gpu_busy_s"]) / extra
        per["host_s_per_kernel"] = per["host_s"] / per["kernels"] if per["kernels"] else None
    return {"case": case, "depths": [1, 1 + extra], "iterations": iterations, "shallow": shallow, "deep": deep,
            "per_layer": per}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--dry", action="store_true", help="this CPU, the host cases only")
    args = parser.parse_args()
    sys.path.insert(0, str(FIDELITY))
    import torch

    import megatron_activation_probe as probe
    from host_issue import cpu_name

    device = "cpu" if args.dry else "cuda"
    if args.dry:
        probe.cpu_setup()
    else:
        gpu_setup()
    import megatron.core

    result = {"measured_by": "bench/gpu_layer.py", "device": torch.cuda.get_device_name(0) if device == "cuda"
              else "cpu (dry run)", "torch": torch.__version__, "cuda": torch.version.cuda,
              "megatron_core": getattr(megatron.core, "__version__", "?"), "cpu": cpu_name(), "cases": {}}
    for name in DRY if args.dry else CASES:
        start = time.perf_counter()
        result["cases"][name] = r = measure(name, device)
        per = r["per_layer"]
        print(f"{name:28} per layer: wall {per['wall_s'] * 1e3:8.3f} ms, host {per['host_s'] * 1e3:8.3f} ms, "
              f"GPU busy {(per.get('gpu_busy_s') or 0) * 1e3:8.3f} ms, "
              f"kernels {per.get('kernels')}, host/kernel "
              f"{(per.get('host_s_per_kernel') or 0) * 1e6:.1f} us ({time.perf_counter() - start:.0f} s)", flush=True)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
