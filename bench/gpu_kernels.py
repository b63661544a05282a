"""Measure, on one GPU, the kernel speeds guard plan's step time uses, and write them as a table guard loads.

Run on the GPU machine: python bench/gpu_kernels.py --out schemas/gpus/measured/GPU/kernels.json [--budget 330].
It measures, within the time budget (default 5.5 minutes; about 90 s on an H200), on random data:
- dense GEMMs in bf16 (and FP8 through torch._scaled_mm where the GPU has it) over a sweep of M, N and K, each
  shape repeated for at least `--hold` seconds (sustained clocks, not a boost burst): the maximum and the
  fall with size and with K;
- attention forward and backward through torch's SDPA with the flash and the cuDNN backends, causal, head dims 64
  and 128, 1k-16k tokens (counting 4 s^2 h d / 2 FLOPs forward, 2.5x backward, as flash-attention's benchmark does);
- memory-bound kernels (copy, add, LayerNorm, RMSNorm, SiLU, softmax, cross entropy) by bytes moved, 64 KiB to 1 GiB;
- torch's fused AdamW over a 256M-parameter fp32 shard (seconds per step, bytes per parameter moved);
- pinned host-to-device and device-to-host copies;
- the host's cost to issue a kernel (many tiny kernels back to back, timed on the host).
Every row records the shape and dtype; the file says which GPU, driver, torch and CUDA measured it.
guard/plan/measured_kernels.py lays schemas/gpus/measured/<GPU>/kernels.json over the public table for that GPU.
`--dry` runs one tiny shape of each on this CPU (the test suite's check that the script still runs).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

SEQS = (1024, 2048, 4096, 8192, 16384)


def _timed(fn, hold: float, sync) -> float:
    """Seconds per call, calling `fn` for at least `hold` seconds after a warm-up."""
    for _ in range(3):
        fn()
    sync()
    calls, start = 0, time.perf_counter()
    while True:
        fn()
        calls += 1
        if calls % 8 == 0:
            sync()
            elapsed = time.perf_counter() - start
            if elapsed >= hold:
                return elapsed / calls


GRAPH_BELOW_S = 60e-6  # a kernel shorter than this is timed inside a CUDA graph
GRAPH_CALLS = 64


def _gpu_timed(fn, hold: float, torch, device: str) -> tuple[float, bool]:
    """(seconds per call, whether timed as a graph). Back-to-back eager calls of a short kernel measure the host's
    issue (about 10 us a call), not the GPU: such a kernel is captured GRAPH_CALLS times in one CUDA graph and the
    graph replayed, which times the GPU alone (kernels queued back to back, as in a GPU-bound step)."""
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    seconds = _timed(fn, hold, sync)
    if device != "cuda" or seconds >= GRAPH_BELOW_S:
        return seconds, False
    try:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # warm-up off the capture, as torch.cuda.graph's documentation asks
            for _ in range(3):
                fn()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for _ in range(GRAPH_CALLS):
                fn()
        return _timed(graph.replay, hold, sync) / GRAPH_CALLS, True
    except RuntimeError as err:  # a kernel that cannot be captured keeps its eager time, marked as such
        print(f"  graph capture failed: {err}", file=sys.stderr)
        return seconds, False


# squares for the fall with size; M = N = 8192 for the fall with K; then transformer-shaped GEMMs (tokens x out x in)
GEMM_SHAPES = ([(n, n, n) for n in (256, 512, 1024, 2048, 4096, 8192)]
               + [(8192, 8192, k) for k in (512, 1024, 2048, 4096, 16384)]
               + [(4096, 12288, 4096), (4096, 4096, 4096 * 4), (4096, 16384, 4096), (16384, 1024, 1024),
                  (16384, 3072, 1024), (8192, 2048, 512), (32768, 4096, 4096), (4096, 4096, 32768)])
FP8_SHAPES = [(n, n, n) for n in (1024, 4096, 8192)] + [(8192, 8192, k) for k in (512, 1024, 2048, 4096, 16384)]


def gemms(torch, hold: float, deadline: float, device: str = "cuda") -> dict:
    """bf16 GEMMs by shape; FP8 (per-tensor scales, torch._scaled_mm) with and without fast accumulation, which
    Transformer Engine uses in the forward and not in the backward."""
    out = {"bf16": [], "fp8": [], "bf16_columns": "m, n, k, TFLOP/s, timed in a CUDA graph",
           "fp8_columns": "m, n, k, TFLOP/s, TFLOP/s with use_fast_accum, timed in a CUDA graph"}
    fp8 = device == "cuda" and hasattr(torch, "_scaled_mm") and torch.cuda.get_device_capability() >= (8, 9)
    for m, n, k in GEMM_SHAPES if device == "cuda" else [(64, 64, 64)]:
        if time.perf_counter() > deadline:
            break
        a = torch.randn(m, k, device=device, dtype=torch.bfloat16)
        b = torch.randn(k, n, device=device, dtype=torch.bfloat16)
        seconds, graphed = _gpu_timed(lambda: a @ b, hold, torch, device)
        out["bf16"].append([m, n, k, 2 * m * n * k / seconds / 1e12, graphed])
        if fp8 and (m, n, k) in FP8_SHAPES:
            a8 = a.to(torch.float8_e4m3fn)
            b8 = b.t().contiguous().to(torch.float8_e4m3fn).t()  # column-major, as cuBLASLt's FP8 GEMM needs
            one = torch.ones((), device=device)
            row = [m, n, k]
            for fast in (False, True):
                try:
                    seconds, graphed = _gpu_timed(lambda: torch._scaled_mm(
                        a8, b8, scale_a=one, scale_b=one, out_dtype=torch.bfloat16, use_fast_accum=fast),
                        hold, torch, device)
                    row.append(2 * m * n * k / seconds / 1e12)
                except RuntimeError as err:
                    print(f"  fp8 {m}x{n}x{k}: {err}", file=sys.stderr)
                    break
            if len(row) == 5:
                out["fp8"].append(row + [graphed])
        del a, b
    return out


def attention(torch, hold: float, deadline: float) -> dict:
    """Causal attention forward and backward per SDPA backend (torch's FlashAttention-2 and cuDNN's fused
    attention, which Transformer Engine runs on Hopper), head dims 64 and 128, 16k tokens per call."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    sdpa = torch.nn.functional.scaled_dot_product_attention
    out = {"columns": "head dim, sequence, forward TFLOP/s, backward TFLOP/s, forward s, backward s"}
    for name, backend in (("flash2", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION)):
        rows = []
        for d in (64, 128):
            heads = 2048 // d
            for s in SEQS:
                if time.perf_counter() > deadline:
                    break
                b = max(1, 16384 // s)
                q, k, v = (torch.randn(b, heads, s, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
                           for _ in range(3))
                flops = 4 * b * heads * s * s * d / 2
                try:
                    with sdpa_kernel(backend):
                        fwd = _timed(lambda: sdpa(q, k, v, is_causal=True), hold, torch.cuda.synchronize)
                        grad = torch.randn_like(q)
                        both = _timed(lambda: torch.autograd.grad(sdpa(q, k, v, is_causal=True), (q, k, v), grad),
                                      hold, torch.cuda.synchronize)
                except RuntimeError as err:
                    print(f"  attention {name} d{d} s{s}: {err}", file=sys.stderr)
                    break
                bwd = max(both - fwd, 1e-9)
                rows.append([d, s, flops / fwd / 1e12, 2.5 * flops / bwd / 1e12, fwd, bwd])
        out[name] = rows
    return out


def memory(torch, hold: float, deadline: float, device: str = "cuda") -> dict:
    """Bytes moved per second by the memory-bound kernels a layer runs, by tensor size (rows of hidden 4096)."""
    F = torch.nn.functional
    rows = []
    for size in (1 << 16, 1 << 20, 1 << 24, 1 << 27, 1 << 30) if device == "cuda" else (1 << 16,):
        if time.perf_counter() > deadline:
            break
        x = torch.randn(size // 2, device=device, dtype=torch.bfloat16)
        y = torch.empty_like(x)
        z = torch.randn_like(x)
        seconds, graphed = _gpu_timed(lambda: y.copy_(x), hold, torch, device)
        rows.append(["copy", size, 2 * size / seconds / 1e9, seconds, graphed])
        seconds, graphed = _gpu_timed(lambda: torch.add(x, z, out=y), hold, torch, device)
        rows.append(["add", size, 3 * size / seconds / 1e9, seconds, graphed])
        h = 4096
        t = x[: (size // 2) // h * h].view(-1, h)
        if t.numel():
            w = torch.ones(h, device=device, dtype=torch.bfloat16)
            labels = torch.randint(0, h, (t.shape[0],), device=device)
            for name, fn, moved in (("layernorm", lambda: F.layer_norm(t, (h,), w, w), 2),
                                    ("rmsnorm", lambda: F.rms_norm(t, (h,), w), 2),
                                    ("silu", lambda: F.silu(t), 2),
                                    ("softmax", lambda: torch.softmax(t, -1), 2),
                                    ("cross_entropy", lambda: F.cross_entropy(t, labels), 1)):
                seconds, graphed = _gpu_timed(fn, hold / 2, torch, device)
                rows.append([name, size, moved * t.numel() * 2 / seconds / 1e9, seconds, graphed])
    return {"columns": "kernel, bytes of input, GB/s counting input and output bytes, seconds, timed in a CUDA graph",
            "rows": rows}


def adam(torch, hold: float, device: str = "cuda") -> dict:
    """torch's fused AdamW over one fp32 shard: seconds per step and the HBM bytes a parameter moves at that rate."""
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    n = 256 * 2**20 if device == "cuda" else 2**16
    p = torch.zeros(n, device=device, requires_grad=True)
    p.grad = torch.randn(n, device=device)
    opt = torch.optim.AdamW([p], fused=device == "cuda")
    seconds = _timed(opt.step, hold, sync)
    return {"params": n, "seconds": seconds, "note": "fp32 param, grad, exp_avg, exp_avg_sq: 16 bytes read, "
                                                     "12 written per parameter"}


def host(torch, hold: float, device: str = "cuda") -> dict:
    """The host's cost to issue one tiny eager kernel, and pinned host-device copies."""
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    x = torch.zeros(1, device=device)
    sync()
    calls, start = 20000, time.perf_counter()
    for _ in range(calls):
        x.add_(1)
    issue = (time.perf_counter() - start) / calls
    sync()
    if device != "cuda":
        return {"issue_s_per_kernel": issue}
    pinned = torch.empty(1 << 28, dtype=torch.uint8, pin_memory=True)
    dev = torch.empty(1 << 28, dtype=torch.uint8, device="cuda")
    h2d = _timed(lambda: dev.copy_(pinned, non_blocking=True), hold / 2, sync)
    d2h = _timed(lambda: pinned.copy_(dev, non_blocking=True), hold / 2, sync)
    return {"issue_s_per_kernel": issue, "h2d_bytes_per_s": (1 << 28) / h2d, "d2h_bytes_per_s": (1 << 28) / d2h}


def _smi() -> str:
    """The GPU's clocks and power limit as nvidia-smi reports them (sustained rates depend on both)."""
    import subprocess

    try:
        return subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,power.limit,clocks.max.sm,"
                               "clocks.max.mem,memory.total", "--format=csv,noheader"], capture_output=True,
                              text=True, timeout=20).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--budget", type=float, default=330.0, help="seconds in all")
    parser.add_argument("--hold", type=float, default=1.0, help="seconds each GEMM shape runs")
    parser.add_argument("--dry", action="store_true", help="this CPU, one tiny shape of each (the test suite's check)")
    args = parser.parse_args()
    import torch

    device = "cpu" if args.dry else "cuda"
    hold = 0.01 if args.dry else args.hold
    start = time.perf_counter()
    deadline = start + args.budget
    if args.dry:
        result = {"gpu": "cpu (dry run)", "sms": 0}
    else:
        props = torch.cuda.get_device_properties(0)
        result = {"gpu": props.name, "sms": props.multi_processor_count, "nvidia_smi": _smi()}
    result.update({"torch": torch.__version__, "cuda": torch.version.cuda, "measured_by": "bench/gpu_kernels.py",
                   "hold_s": hold})
    result["host"] = host(torch, hold, device)
    result["adam"] = adam(torch, hold, device)
    result["gemm"] = gemms(torch, hold, start + 0.6 * args.budget, device)
    if not args.dry:
        result["attention"] = attention(torch, hold / 2, start + 0.85 * args.budget)
    result["memory"] = memory(torch, hold / 2, deadline, device)
    best = max((row[3] for row in result["gemm"]["bf16"]), default=math.nan)
    result["gemm"]["max_bf16_tflops"] = best
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1))
    issue = result["host"]["issue_s_per_kernel"] * 1e6
    print(f"{result['gpu']}: bf16 GEMM max {best:.1f} TFLOP/s, host issue {issue:.1f} us/kernel, "
          f"{time.perf_counter() - start:.0f} s; written to {args.out}")


if __name__ == "__main__":
    main()
