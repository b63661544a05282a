"""How fast each kind of kernel runs on one GPU, from the public kernel benchmarks in schemas/gpus/kernels.json.

GEMMs reach the GPU's measured maximum dense matmul rate (MAMF), less for small GEMMs and for FP8 at small K;
attention runs at the published flash/cuDNN rates for its sequence and head dim; memory-bound kernels at the
measured fraction of HBM bandwidth plus a tiny-kernel floor; collectives at NCCL's bus bandwidth for their message
size. A GPU without its own row uses a named stand-in, and every number says where it came from (`sources`).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from functools import lru_cache

from guard.resources import load_json, schemas_dir

BLACKWELL = ("B200", "B300", "GB200", "GB300")


@lru_cache(maxsize=1)
def table() -> dict:
    """The public table, with any GPU's own measurements (schemas/gpus/measured/<GPU>/) laid over it."""
    from guard.memory.gpu_choice import choose_gpu
    from guard.plan.measured_kernels import merge

    data = load_json("gpus", "kernels.json")
    for folder in sorted(p for p in (schemas_dir() / "gpus" / "measured").glob("*") if p.is_dir()):
        files = {name: json.loads((folder / f"{name}.json").read_text(encoding="utf-8"))
                 for name in ("kernels", "layers") if (folder / f"{name}.json").is_file()}
        gpu = (choose_gpu(folder.name).entry or {}).get("name")
        if gpu:
            merge(data, gpu, files.get("kernels"), files.get("layers"), f"schemas/gpus/measured/{folder.name}")
    return data


def stepped(rows: list[list[float]], size: float) -> float:
    """The value of the first (largest) threshold `size` reaches."""
    return next((value for threshold, value in rows if size >= threshold), rows[-1][1])


def interpolated(points: list[list[float]], x: float) -> float:
    """Linear in log(x) between measured points; flat beyond the ends."""
    if x <= points[0][0]:
        return points[0][1]
    for (x0, y0), (x1, y1) in zip(points, points[1:]):
        if x <= x1:
            return y0 + (y1 - y0) * math.log(x / x0) / math.log(x1 / x0)
    return points[-1][1]


@dataclass(frozen=True)
class KernelSpeeds:
    """One GPU's kernel speeds. `peaks` are the catalog's dense FLOP/s by dtype; `link` its interconnect kind."""

    gpu: str
    peaks: tuple[tuple[str, float], ...]
    link: str

    def _peak(self, dtype: str) -> float:
        peaks = dict(self.peaks)
        return peaks.get(dtype) or peaks.get("bf16") or peaks.get("fp16") or peaks.get("fp32") or 1.0

    def _gemm_row(self, dtype: str) -> tuple[str, float, str] | None:
        """(GPU whose row is used, measured TFLOP/s, source) for the dtype's tensor-core rate."""
        g = table()["gemm"]
        name, why = self.gpu, ""
        if name not in g["tflops"] and name in g["stand_in"]:
            name, why = g["stand_in"][name][0], f" (stand-in: {g['stand_in'][self.gpu][1]})"
        rows = g["tflops"].get(name, {})
        key = "fp8" if dtype == "fp8" else "bf16"
        if key not in rows:
            return None
        return name, rows[key][0], rows[key][1] + why

    @lru_cache(maxsize=64)  # noqa: B019 (a few frozen GPUs for the process; asked once per GEMM priced)
    def gemm_fraction(self, dtype: str) -> float:
        """The largest fraction of the dtype's peak a GEMM reaches on this GPU (MAMF / peak, at most 1)."""
        row = self._gemm_row(dtype)
        if row is None and dtype == "fp8":  # no FP8 measurement: the bf16 fraction of the FP8 peak
            return self.gemm_fraction("bf16")
        if row is None:  # a GPU the table does not name at all: the A100's fraction, as for the other stand-ins
            return KernelSpeeds("A100-80GB", tuple(_catalog_peaks("A100-80GB").items()), self.link).gemm_fraction(
                "bf16")
        name, tflops, _ = row
        if name != self.gpu:  # a stand-in: its fraction of its own peak
            other = KernelSpeeds(name, tuple(_catalog_peaks(name).items()), self.link)
            return other.gemm_fraction(dtype)
        return min(1.0, tflops * 1e12 / self._peak(dtype))

    def gemm_efficiency(self, dtype: str, gflop: float, k: float) -> float:
        """Achieved fraction of peak for one GEMM of `gflop` GFLOP with reduction dim `k` (before wave
        quantization): the GPU's maximum, times the fall with size, times FP8's fall with small K."""
        g = table()["gemm"]
        measured = g.get("by_gflop_measured", {}).get(self.gpu)
        fall = interpolated(measured[0], gflop) if measured else stepped(g["by_gflop"][0], gflop)
        eff = self.gemm_fraction(dtype) * fall
        if dtype == "fp8":
            by_k = g.get("fp8_by_k_measured", {}).get(self.gpu)
            eff *= interpolated(by_k[0], k) if by_k else stepped(g["fp8_by_k"][0], k)
        return eff

    def attention_flops_per_s(self, backend: str, seq: float, head_dim: int, backward: bool,
                              peak: float) -> float | None:
        """Causal attention's achieved FLOP/s for the backend at this sequence length and head dim, or None
        where no kernel data exist (the caller prices it as GEMMs). `peak` is the job dtype's dense peak."""
        a = table()["attention"]
        arch = a["gpus"].get(self.gpu)
        scale = 1.0
        if self.gpu in BLACKWELL:  # FlashAttention-4 / cuDNN on Blackwell: the measured ratio over Hopper's FA3
            arch, scale = "H100", a["blackwell"][0]
            backend = "flash3"
        if arch is None:
            return None
        rates = a["rates"].get(arch, {})
        row = rates.get(backend) or rates.get("flash2")
        if row is None:
            return None
        seqs = row.get("seq", a["seq"])
        own_64 = row.get("bwd_64" if backward else "fwd_64")  # a measured row's own head-dim-64 rates
        if head_dim <= 64 and own_64:
            return interpolated([[s, v] for s, v in zip(seqs, own_64)], seq) * 1e12 * scale
        values = row.get("bwd" if backward else "fwd") or row["fwd_bwd"]
        tflops = interpolated([[s, v] for s, v in zip(seqs, values)], seq)
        if head_dim <= 64:
            tflops *= interpolated([[s, r] for s, r in zip(a["seq"], a["head_dim_64"]["ratio"])], seq)
        if self.gpu not in ("H100-SXM", "H200", "A100-80GB", "A100-40GB") and self.gpu not in BLACKWELL:
            scale *= peak / _arch_peak(arch)  # a GPU running the same kernels at another peak (H20, H100 PCIe)
        return tflops * 1e12 * scale

    @property
    def hbm_fraction(self) -> float:
        h = table()["hbm"]
        return (h["fraction"].get(self.gpu) or h["stand_in"])[0]

    def pass_fraction(self, kind: str) -> float:
        """An eager kernel kind's rate over the copy kernel's (measured; hbm.eager_softmax.fraction_of_copy)."""
        return table()["hbm"]["eager_softmax"]["fraction_of_copy"][kind][0]

    @property
    def kernel_floor_s(self) -> float:
        h = table()["hbm"]
        return (h.get("kernel_floor_measured", {}).get(self.gpu) or h["kernel_floor_s"])[0]

    def busbw(self, nbytes: float, ranks: int, across_nodes: bool, all_reduce: bool,
              nic_bytes_per_s: float, link_bytes_per_s: float) -> float:
        """NCCL's bus bandwidth for a message of `nbytes`: NVLS for an all-reduce inside a node where the
        NVLink generation has it, else the ring; over the network each GPU's NIC at its achieved fraction."""
        c = table()["collectives"]
        if across_nodes:
            peak = nic_bytes_per_s * c["network_fraction"][0]
            return peak * interpolated(c["size_curve"]["network"][0], nbytes)
        rows = c["busbw"].get(self.link)
        if rows is None:  # PCIe cards, NVLink2: Calculon's efficiency of the catalog's link
            return link_bytes_per_s * 0.6 * interpolated(c["size_curve"]["ring"][0], nbytes)
        nvls = stepped(c["nvls_by_ranks"][0], ranks) if all_reduce and "nvls" in rows else 0.0
        if nvls:
            return rows["nvls"][0] * nvls * interpolated(c["size_curve"]["nvls"][0], nbytes)
        return rows["ring"][0] * interpolated(c["size_curve"]["ring"][0], nbytes)

    @property
    def smallest_message(self) -> float:
        """The smallest message the bus-bandwidth curves measure (32 KiB): smaller ones take its time."""
        return table()["collectives"]["size_curve"]["ring"][0][0][0]

    def p2p_fraction(self, across_nodes: bool) -> float:
        c = table()["collectives"]
        return c["network_fraction"][0] if across_nodes or self.link not in c["busbw"] else c["p2p_fraction"][0]

    @property
    def host_seconds_per_kernel(self) -> float:
        """CPU time to issue one kernel of megatron-core's layers: their Python, the module code and the dispatcher
        (measured by running the real layer on a CPU, bench/host_issue.py), then cuLaunchKernel."""
        h = table()["host"]
        return h["per_kernel_s"][0] + h["launch_s"][0]

    def sources(self) -> list[str]:
        """Where each of this GPU's kernel speeds comes from, for --explain."""
        out = []
        for dtype in ("bf16", "fp8"):
            row = self._gemm_row(dtype)
            if row:
                out.append(f"GEMM {dtype}: {self.gemm_fraction(dtype):.1%} of peak at most, from {row[2]}")
        g, a, h, c = table()["gemm"], table()["attention"], table()["hbm"], table()["collectives"]
        fall = g.get("by_gflop_measured", {}).get(self.gpu) or g["by_gflop"]
        by_k = g.get("fp8_by_k_measured", {}).get(self.gpu) or g["fp8_by_k"]
        out.append(f"GEMM size fall: {fall[1]}; FP8 by K: {by_k[1]}")
        arch = a["gpus"].get(self.gpu) or ("H100" if self.gpu in BLACKWELL else None)
        out.append("attention: " + ("; ".join(f"{k}: {v['source']}" for k, v in a["rates"][arch].items())
                                    if arch else "no kernel data: priced as GEMMs"))
        if self.gpu in BLACKWELL:
            out.append(f"attention on Blackwell: x{a['blackwell'][0]}, {a['blackwell'][1]}")
        hbm = h["fraction"].get(self.gpu) or h["stand_in"]
        floor = h.get("kernel_floor_measured", {}).get(self.gpu) or h["kernel_floor_s"]
        out.append(f"HBM: {hbm[0]:.0%} of peak, {hbm[1]}; tiny-kernel floor {floor[0] * 1e6:.2f} us, {floor[1]}")
        eager = h["eager_softmax"]["fraction_of_copy"]
        out.append("megatron's torch softmax passes (--no-masked-softmax-fusion), rate over the copy kernel's: " +
                   ", ".join(f"{kind} {row[0]:.2f}" for kind, row in eager.items()) +
                   f" ({eager['memcpy'][1].split(':')[0]})")
        rows = c["busbw"].get(self.link)
        out.append(f"collectives ({self.link}): " + ("; ".join(f"{k} {v[0] / 1e9:.0f} GB/s bus, {v[1]}"
                                                              for k, v in rows.items())
                                                    if rows else c["other_links"]))
        out.append(f"network: {c['network_fraction'][1]}; size curves: {c['size_curve']['ring'][1]}")
        host = table()["host"]
        out.append(f"host issue per kernel: {host['per_kernel_s'][0] * 1e6:.1f} us, {host['per_kernel_s'][1]}; plus "
                   f"{host['launch_s'][0] * 1e6:.1f} us, {host['launch_s'][1]} (a bare eager op costs about "
                   f"{host['op_dispatch_s'][0] * 1e6:.0f} us: {host['op_dispatch_s'][1]})")
        return out


@lru_cache(maxsize=32)
def _catalog_peaks(name: str) -> dict[str, float]:
    from guard.memory.gpu_choice import choose_gpu

    entry = choose_gpu(name).entry or {}
    return {k: float(v) for k, v in (entry.get("peak_flops") or {}).items() if v}


def _arch_peak(arch: str) -> float:
    return _catalog_peaks({"H100": "H100-SXM", "A100": "A100-80GB"}[arch]).get("bf16", 1.0)


def speeds(gpu: str, peaks: dict[str, float], link: str) -> KernelSpeeds:
    return KernelSpeeds(gpu, tuple(sorted(peaks.items())), link)
