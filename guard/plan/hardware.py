"""The GPU the step-time model prices on: the catalog's peaks and links, the kernel table's achieved speeds."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from math import ceil

from guard.errors import InputError
from guard.memory.catalog import Gpu
from guard.plan.kernels import KernelSpeeds, speeds
from guard.resources import load_json


class NoSpeeds(InputError):
    """A GPU without the figures the step-time model needs (one line, exit 2)."""


@lru_cache(maxsize=1)
def _constants() -> dict:
    return load_json("gpus", "catalog.json")["step_time"]


def _stepped(table: list[list[float]], size: float) -> float:
    """Efficiency of the first (largest) threshold the size reaches."""
    return next((eff for threshold, eff in table if size >= threshold), table[-1][1])


@dataclass(frozen=True)
class Hardware:
    """One GPU model and its node: vendor peaks from the catalog, achieved speeds from the kernel table.

    `speeds` None (a made-up GPU in tests) keeps the catalog's older flat fractions (Calculon's tables)."""

    name: str
    peak_flops: float  # dense tensor FLOP/s in the job's dtype
    sm_count: int
    hbm_bytes_per_s: float
    intra_node_bytes_per_s: float  # per direction, NVLink (or PCIe for PCIe cards)
    network_bytes_per_s: float  # per GPU, per direction
    host_link_bytes_per_s: float  # GPU <-> host, per direction
    host_memory_bytes_per_s: float  # per node
    speeds: KernelSpeeds | None = None
    dtype: str = "bf16"
    fp8_peak_flops: float = 0.0
    nvlink_domain: int = 0  # GPUs one NVLink domain joins (72 on NVL72); 0: the node
    # kernel speeds scaled by kind, to ask whether a ranking holds when a table is off (guard/plan/sensitivity.py)
    gemm_scale: float = 1.0
    attention_scale: float = 1.0
    memory_scale: float = 1.0
    comm_scale: float = 1.0
    host_scale: float = 1.0

    @property
    def constants(self) -> dict:
        return _constants()

    def gemm_seconds(self, m: float, n: float, k: float, count: float = 1.0, dtype_bytes: int = 2,
                     fp8: bool = False) -> float:
        """`count` GEMMs of m x n x k: tensor-core time at the achieved efficiency for the GEMM's size (FP8: at
        the FP8 peak and its fall with K), with wave quantization (tiles over SMs), or HBM time for its
        operands when that is longer (roofline)."""
        if m <= 0 or n <= 0 or k <= 0 or count <= 0:
            return 0.0
        flops = 2.0 * m * n * k
        tile_m, tile_n = self.constants["gemm_tile"]["value"]
        tiles = ceil(m / tile_m) * ceil(n / tile_n) * max(1, round(count))  # a batched GEMM's tiles share the waves
        waves = ceil(tiles / self.sm_count)
        quantization = tiles / (waves * self.sm_count)
        fp8 = fp8 and self.fp8_peak_flops > 0
        peak = self.fp8_peak_flops if fp8 else self.peak_flops
        gflop = flops * count / 1e9
        if self.speeds is None:
            eff = _stepped(self.constants["gemm_efficiency_by_gflop"]["value"], gflop)
        else:
            eff = self.speeds.gemm_efficiency("fp8" if fp8 else self.dtype, gflop, k)
        compute = count * flops / (peak * eff * quantization * self.gemm_scale)
        memory = self.memory_seconds(count * (1 if fp8 else dtype_bytes) * (m * k + k * n + m * n))
        return max(compute, memory)

    def attention_seconds(self, backend: str, batched: float, s_q: float, s_k: float, head_dim: int,
                          backward: bool) -> float | None:
        """Causal attention's core over `batched` (micro-batch x heads) heads of s_q queries against s_k keys,
        at the kernel table's rate for the backend (None: no data for this GPU, price it as GEMMs)."""
        if self.speeds is None:
            return None
        rate = self.speeds.attention_flops_per_s(backend, s_k, head_dim, backward, self.peak_flops)
        if rate is None:
            return None
        flops = 4 * batched * s_q * s_k * head_dim / 2 * (2.5 if backward else 1.0)  # causal: half the square
        return flops / (rate * self.attention_scale)

    def memory_seconds(self, nbytes: float, kind: str | None = None) -> float:
        """A memory-bound kernel moving `nbytes` through HBM: at the measured fraction of bandwidth (for an eager
        kernel `kind`, its measured rate against the copy kernel's), plus the time any kernel takes however small."""
        if nbytes <= 0:
            return 0.0
        if self.speeds is None:
            eff = _stepped(self.constants["hbm_efficiency_by_mb"]["value"], nbytes / 1e6)
            return nbytes / (self.hbm_bytes_per_s * eff * self.memory_scale)
        fraction = self.speeds.hbm_fraction * (self.speeds.pass_fraction(kind) if kind else 1.0)
        return nbytes / (self.hbm_bytes_per_s * fraction * self.memory_scale) + self.speeds.kernel_floor_s

    def host_link_seconds(self, nbytes: float) -> float:
        if nbytes <= 0:
            return 0.0
        eff = _stepped(self.constants["host_link_efficiency_by_mb"]["value"], nbytes / 1e6)
        return nbytes / (self.host_link_bytes_per_s * eff)

    def link(self, across_nodes: bool) -> tuple[float, float]:
        """(achieved bytes/s per direction, latency) of the link a collective runs over (the flat model)."""
        c = self.constants
        if across_nodes:
            return self.network_bytes_per_s * c["network_efficiency"]["value"], c["network_latency_s"]["value"]
        return self.intra_node_bytes_per_s * c["intra_node_efficiency"]["value"], c["intra_node_latency_s"]["value"]

    def p2p_bandwidth(self, across_nodes: bool) -> float | None:
        """One direction of a send: the measured fraction of the NIC or of the NVLink per direction."""
        if self.speeds is None:
            return None
        return (self.network_bytes_per_s if across_nodes else self.intra_node_bytes_per_s) * \
            self.speeds.p2p_fraction(across_nodes) * self.comm_scale

    @property
    def smallest_measured_message(self) -> float:
        return self.speeds.smallest_message if self.speeds else 0.0

    def bus_bandwidth(self, nbytes: float, ranks: int, across_nodes: bool, all_reduce: bool) -> float | None:
        """NCCL's measured bus bandwidth for this message (None: the flat model of `link`)."""
        if self.speeds is None:
            return None
        return self.speeds.busbw(nbytes, ranks, across_nodes, all_reduce, self.network_bytes_per_s,
                                 self.intra_node_bytes_per_s) * self.comm_scale

    @property
    def host_seconds_per_kernel(self) -> float:
        return self.speeds.host_seconds_per_kernel / self.host_scale if self.speeds else 0.0

    def sources(self) -> list[str]:
        """Every constant with where it comes from, for --explain."""
        out = [f"{self.name}: peak {self.peak_flops / 1e12:,.0f} TFLOP/s, {self.sm_count} SMs, HBM "
               f"{self.hbm_bytes_per_s / 1e9:,.0f} GB/s, intra-node {self.intra_node_bytes_per_s / 1e9:,.0f} GB/s and "
               f"network {self.network_bytes_per_s / 1e9:,.1f} GB/s per direction, host link "
               f"{self.host_link_bytes_per_s / 1e9:,.0f} GB/s (schemas/gpus/catalog.json)"]
        if self.speeds is not None:
            out += self.speeds.sources()
        out.append(f"gemm_tile = {self.constants['gemm_tile']['value']}: {self.constants['gemm_tile']['source']}")
        return out


def hardware(gpu: Gpu | None, dtype: str) -> Hardware:
    """The Hardware of a catalog GPU; NoSpeeds for a GPU given only by its memory size."""
    entry = gpu.entry if gpu is not None else None
    if not entry or "sm_count" not in entry:
        raise NoSpeeds("guard plan prices step time on a catalog GPU: give --gpu NAME (see guard estimate "
                       "--list-models); --gpu-memory may still set the usable memory")
    peaks = entry["peak_flops"]
    peak = peaks.get(dtype) or peaks.get("fp16") or peaks.get("fp32")
    link = entry["interconnect"]["bandwidth_bytes_per_s"] / 2  # the catalog gives the bidirectional aggregate
    kind = entry["interconnect"].get("kind", "")
    return Hardware(entry["name"], float(peak), int(entry["sm_count"]), float(entry["hbm_bandwidth_bytes_per_s"]),
                    float(link), float(entry["network"]["bandwidth_bytes_per_s"]),
                    float(entry["host_link_bytes_per_s"]), float(entry["host_memory_bandwidth_bytes_per_s"]),
                    speeds(entry["name"], {k: float(v) for k, v in peaks.items() if v}, kind),
                    "fp8" if dtype == "fp8" else ("bf16" if dtype in ("bf16", "fp16") else dtype),
                    float(peaks.get("fp8") or 0.0), int(entry.get("nvlink_domain") or 0))
