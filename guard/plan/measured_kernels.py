"""A GPU's own kernel measurements (bench/gpu_kernels.py, bench/gpu_layer.py) laid over the public kernel table.

schemas/gpus/measured/<GPU>/kernels.json is what bench/gpu_kernels.py wrote on that GPU, layers.json what
bench/gpu_layer.py wrote; both are committed as measured, and everything below derives the table's rows from them
(so a rerun on another GPU is a new folder, not an edit here). Each derived row names its file.
"""

from __future__ import annotations

import statistics
from collections import defaultdict

# kernels_per_layer row of the table for each host case bench/gpu_layer.py runs (by its layer's norm)
_NORM_ROW = {"LayerNorm": "layernorm", "RMSNorm": "rmsnorm"}


def merge(data: dict, gpu: str, kernels: dict | None, layers: dict | None, where: str) -> None:
    """Lay one GPU's measurements over `data` (the public table, in place). `gpu` is the catalog name."""
    if kernels:
        _gemm(data["gemm"], gpu, kernels, f"{where}/kernels.json")
        _attention(data["attention"], gpu, kernels, f"{where}/kernels.json")
        _memory(data["hbm"], gpu, kernels, f"{where}/kernels.json")
    if layers:
        _host(data["host"], layers, f"{where}/layers.json")


def _source(run: dict, path: str, what: str) -> str:
    return (f"{path}: bench/gpu_kernels.py on {run.get('gpu')} ({run.get('nvidia_smi', '')}; torch {run.get('torch')}, "
            f"CUDA {run.get('cuda')}), {what}")


def _gemm(g: dict, gpu: str, run: dict, path: str) -> None:
    """The best bf16 rate; FP8 as Transformer Engine runs it (forward GEMMs with fast accumulation, the two
    backward GEMMs without: one third and two thirds of the FLOPs); the fall with size (every measured shape,
    by GFLOP, against the best); FP8's further fall with K (against bf16 at the same shape)."""
    bf16 = {tuple(row[:3]): row[3] for row in run["gemm"].get("bf16", [])}
    if not bf16:
        return
    best = max(bf16.values())
    rows = g["tflops"].setdefault(gpu, {})
    rows["bf16"] = [best, _source(run, path, f"the best of {len(bf16)} shapes, each held {run.get('hold_s')} s")]
    by_gflop: dict[float, list[float]] = defaultdict(list)
    for (m, n, k), rate in bf16.items():
        by_gflop[2 * m * n * k / 1e9].append(rate / best)
    g.setdefault("by_gflop_measured", {})[gpu] = [
        [[gflop, statistics.mean(v)] for gflop, v in sorted(by_gflop.items())],
        _source(run, path, "each shape's rate over the best, by GFLOP (the mean where shapes share a size)")]
    fp8 = run["gemm"].get("fp8", [])
    if not fp8:
        return
    split, fast = max(row[3] for row in fp8), max(row[4] for row in fp8)
    rows["fp8"] = [1 / (1 / 3 / fast + 2 / 3 / split), _source(
        run, path, f"FP8 e4m3 per-tensor scales: best {fast:.0f} TFLOP/s with fast accumulation (TE's forward), "
                   f"{split:.0f} without (its backward), weighted 1:2 by FLOPs")]
    fp8_best = max(statistics.mean(row[3:5]) for row in fp8)
    by_k = []
    for m, n, k, split_rate, fast_rate, *_ in fp8:
        if m == n == 8192 and (m, n, k) in bf16:
            fall = statistics.mean((split_rate, fast_rate)) / fp8_best
            by_k.append([k, min(1.0, fall / (bf16[(m, n, k)] / best))])
    if by_k:
        g.setdefault("fp8_by_k_measured", {})[gpu] = [sorted(by_k), _source(
            run, path, "FP8 at M = N = 8192 over its best, divided by bf16's fall at the same shape")]


def _attention(a: dict, gpu: str, run: dict, path: str) -> None:
    """Forward and backward rates per backend, head dims 128 and 64, by sequence, as measured."""
    key = f"{gpu} (measured)"
    rates = {}
    for backend in ("flash2", "cudnn"):
        rows = (run.get("attention") or {}).get(backend) or []
        by_dim = {d: sorted((s, f, b) for dim, s, f, b, *_ in rows if dim == d) for d in (64, 128)}
        if not by_dim[128]:
            continue
        row = {"seq": [s for s, _, _ in by_dim[128]], "fwd": [f for _, f, _ in by_dim[128]],
               "bwd": [b for _, _, b in by_dim[128]],
               "source": _source(run, path, f"torch SDPA, {backend} backend, causal bf16, 16k tokens a call")}
        if [s for s, _, _ in by_dim[64]] == row["seq"]:
            row["fwd_64"] = [f for _, f, _ in by_dim[64]]
            row["bwd_64"] = [b for _, _, b in by_dim[64]]
        rates[backend] = row
    if rates:
        a["rates"][key] = rates
        a["gpus"][gpu] = key


def _memory(h: dict, gpu: str, run: dict, path: str) -> None:
    """The copy kernel's rate on the largest tensor over the catalog's HBM bandwidth; the smallest copy's time
    (timed inside a CUDA graph, so the GPU's and not the host's) as the floor any kernel takes."""
    from guard.memory.gpu_choice import choose_gpu

    copies = [row for row in run.get("memory", {}).get("rows", []) if row[0] == "copy"]
    peak = (choose_gpu(gpu).entry or {}).get("hbm_bandwidth_bytes_per_s")
    if not copies or not peak:
        return
    largest = max(copies, key=lambda row: row[1])
    h["fraction"][gpu] = [largest[2] * 1e9 / peak, _source(
        run, path, f"copy of {largest[1] / 2**30:.0f} GiB at {largest[2]:.0f} GB/s (read + write) of "
                   f"{peak / 1e9:.0f}")]
    graphed = [row for row in copies if len(row) > 4 and row[4]]
    if graphed:
        smallest = min(graphed, key=lambda row: row[1])
        h.setdefault("kernel_floor_measured", {})[gpu] = [smallest[3], _source(
            run, path, f"a {smallest[1] // 1024} KiB copy inside a CUDA graph")]


def _host(host: dict, run: dict, path: str) -> None:
    """Host seconds per counted kernel: megatron-core's layer on a GPU host, where the GPU idles (busy under half
    the host's time), over the kernels the CPU probe counts for that layer (the count the step model
    multiplies). cuLaunchKernel is inside the figure, so no launch cost is added to it."""
    counts = host["kernels_per_layer"]
    ratios, named = [], []
    for name, case in run.get("cases", {}).items():
        per = case["per_layer"]
        busy = per.get("gpu_busy_s")
        row = _NORM_ROW.get(case["case"].get("norm", "LayerNorm"))
        if busy is None or busy >= per["host_s"] / 2 or row is None:
            continue
        kernels = counts[row]["forward"] + counts[row]["backward"]
        ratios.append(per["host_s"] / kernels)
        named.append(f"{name} {per['host_s'] * 1e3:.2f} ms / {kernels}")
    if not ratios:
        return
    host["per_kernel_s"] = [statistics.mean(ratios), (
        f"{path}: bench/gpu_layer.py on {run.get('device')} (host CPU {run.get('cpu')}; torch {run.get('torch')}, "
        f"megatron-core {run.get('megatron_core')}): host time per layer, forward and backward, of the host-bound "
        f"cases over the probe's kernel count (" + "; ".join(named) + "), their mean")]
    host["launch_s"] = [0.0, "inside the measured per-kernel figure (bench/gpu_layer.py times the real launches)"]
