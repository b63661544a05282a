"""Measure, on one GPU, the kernel speeds guard plan's step time uses, and write them as a table guard loads.

Run on the GPU machine: python bench/gpu_kernels.py --out schemas/gpus/measured/NAME.json [--budget 330].
It measures, within the time budget (default 5.5 minutes), on random data:
- dense GEMMs in bf16 (and FP8 through torch._scaled_mm where the GPU has it) over a sweep of M, N and K, each
  shape repeated for at least `--hold` seconds (sustained clocks, not a boost burst): the maximum and the
  fall with size and with K;
- attention forward and backward through torch's SDPA with the flash and the cuDNN backends, causal, head dims 64
  and 128, 1k-16k tokens (counting 4 s^2 h d / 2 FLOPs forward, 2.5x backward, as flash-attention's benchmark does);
- memory-bound kernels (copy, LayerNorm, RMSNorm, SiLU, cross entropy) by bytes moved, 64 KiB to 1 GiB;
- torch's fused AdamW over a 256M-parameter fp32 shard (seconds per step, bytes per parameter moved);
- pinned host-to-device and device-to-host copies;
- the host's cost to issue a kernel (many tiny kernels back to back, timed on the host).
Every row records the shape and dtype; the file says which GPU, driver, torch and CUDA measured it.
guard/plan/kernels.py reads schemas/gpus/measured/*.json over the public table for that GPU (rows it has).
"""

from __future__ import annotations

import argparse
import json
import math
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


def gemms(torch, hold: float, deadline: float) -> dict:
    out = {"bf16": [], "fp8": []}
    sizes = [(m, n, k) for m in (1024, 4096, 8192) for n in (4096, 8192) for k in (512, 1024, 2048, 4096, 8192, 16384)]
    for m, n, k in sizes:
        if time.perf_counter() > deadline:
            break
        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
        seconds = _timed(lambda: a @ b, hold, torch.cuda.synchronize)
        out["bf16"].append([m, n, k, 2 * m * n * k / seconds / 1e12])
        if hasattr(torch, "_scaled_mm") and torch.cuda.get_device_capability() >= (8, 9):
            a8 = a.to(torch.float8_e4m3fn)
            b8 = b.t().contiguous().to(torch.float8_e4m3fn).t()
            one = torch.ones((), device="cuda")
            try:
                seconds = _timed(lambda: torch._scaled_mm(a8, b8, scale_a=one, scale_b=one,
                                                          out_dtype=torch.bfloat16), hold, torch.cuda.synchronize)
                out["fp8"].append([m, n, k, 2 * m * n * k / seconds / 1e12])
            except RuntimeError:
                pass
        del a, b
    return out


def attention(torch, hold: float, deadline: float) -> dict:
    from torch.nn.attention import SDPBackend, sdpa_kernel

    out = {}
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
                        fwd = _timed(lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True),
                                     hold, torch.cuda.synchronize)
                        o = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
                        grad = torch.randn_like(o)
                        both = _timed(lambda: torch.autograd.grad(
                            torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True), (q, k, v), grad),
                            hold, torch.cuda.synchronize)
                except RuntimeError:
                    break
                rows.append([d, s, flops / fwd / 1e12, 2.5 * flops / max(both - fwd, 1e-9) / 1e12])
        out[name] = rows
    return out


def memory(torch, hold: float, deadline: float) -> dict:
    rows = []
    for size in (1 << 16, 1 << 20, 1 << 24, 1 << 27, 1 << 30):
        if time.perf_counter() > deadline:
            break
        x = torch.empty(size // 2, device="cuda", dtype=torch.bfloat16)
        y = torch.empty_like(x)
        seconds = _timed(lambda: y.copy_(x), hold / 2, torch.cuda.synchronize)
        rows.append(["copy", size, 2 * size / seconds / 1e9])
        h = 4096
        t = x[: (size // 2) // h * h].view(-1, h)
        if t.numel():
            w = torch.ones(h, device="cuda", dtype=torch.bfloat16)
            for name, fn in (("layernorm", lambda: torch.nn.functional.layer_norm(t, (h,), w, w)),
                             ("rmsnorm", lambda: torch.nn.functional.rms_norm(t, (h,), w)),
                             ("silu", lambda: torch.nn.functional.silu(t))):
                seconds = _timed(fn, hold / 4, torch.cuda.synchronize)
                rows.append([name, size, 2 * t.numel() * 2 / seconds / 1e9])
    return {"bytes_per_s": rows}


def adam(torch, hold: float) -> dict:
    n = 256 * 2**20
    p = torch.zeros(n, device="cuda", requires_grad=True)
    p.grad = torch.randn(n, device="cuda")
    opt = torch.optim.AdamW([p], fused=True)
    seconds = _timed(opt.step, hold, torch.cuda.synchronize)
    return {"params": n, "seconds": seconds, "bytes_per_param_at_copy_speed": None}


def host(torch, hold: float) -> dict:
    x = torch.zeros(1, device="cuda")
    torch.cuda.synchronize()
    calls, start = 20000, time.perf_counter()
    for _ in range(calls):
        x.add_(1)
    issue = (time.perf_counter() - start) / calls
    torch.cuda.synchronize()
    pinned = torch.empty(1 << 28, dtype=torch.uint8, pin_memory=True)
    dev = torch.empty(1 << 28, dtype=torch.uint8, device="cuda")
    h2d = _timed(lambda: dev.copy_(pinned, non_blocking=True), hold / 2, torch.cuda.synchronize)
    d2h = _timed(lambda: pinned.copy_(dev, non_blocking=True), hold / 2, torch.cuda.synchronize)
    return {"issue_s_per_kernel": issue, "h2d_bytes_per_s": (1 << 28) / h2d, "d2h_bytes_per_s": (1 << 28) / d2h}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--budget", type=float, default=330.0, help="seconds in all")
    parser.add_argument("--hold", type=float, default=1.0, help="seconds each GEMM shape runs")
    args = parser.parse_args()
    import torch

    start = time.perf_counter()
    deadline = start + args.budget
    props = torch.cuda.get_device_properties(0)
    result = {"gpu": props.name, "sms": props.multi_processor_count, "torch": torch.__version__,
              "cuda": torch.version.cuda, "measured_by": "bench/gpu_kernels.py"}
    result["host"] = host(torch, args.hold)
    result["adam"] = adam(torch, args.hold)
    result["gemm"] = gemms(torch, args.hold, start + 0.55 * args.budget)
    result["attention"] = attention(torch, args.hold / 2, start + 0.8 * args.budget)
    result["memory"] = memory(torch, args.hold / 2, deadline)
    best = max((row[3] for row in result["gemm"]["bf16"]), default=math.nan)
    result["gemm"]["max_bf16_tflops"] = best
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1))
    issue = result["host"]["issue_s_per_kernel"] * 1e6
    print(f"{props.name}: bf16 GEMM max {best:.1f} TFLOP/s, host issue {issue:.1f} us/kernel, "
          f"{time.perf_counter() - start:.0f} s; written to {args.out}")


if __name__ == "__main__":
    main()
