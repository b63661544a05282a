"""The speeds the step-time model uses, read from the GPU catalog with the source of each constant."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from math import ceil

from guard.errors import InputError
from guard.memory.catalog import Gpu
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
    """One GPU model and its node: peaks from the vendor, achieved fractions from the catalog's step_time."""

    name: str
    peak_flops: float  # dense tensor FLOP/s in the job's dtype
    sm_count: int
    hbm_bytes_per_s: float
    intra_node_bytes_per_s: float  # per direction, NVLink (or PCIe for PCIe cards)
    network_bytes_per_s: float  # per GPU, per direction
    host_link_bytes_per_s: float  # GPU <-> host, per direction
    host_memory_bytes_per_s: float  # per node

    @property
    def constants(self) -> dict:
        return _constants()

    def gemm_seconds(self, m: float, n: float, k: float, count: float = 1.0, dtype_bytes: int = 2) -> float:
        """`count` GEMMs of m x n x k: tensor-core time at the catalog's efficiency for the GEMM's size, with
        wave quantization (tiles over SMs), or HBM time for its operands when that is longer (roofline)."""
        if m <= 0 or n <= 0 or k <= 0 or count <= 0:
            return 0.0
        flops = 2.0 * m * n * k
        tile_m, tile_n = self.constants["gemm_tile"]["value"]
        tiles = ceil(m / tile_m) * ceil(n / tile_n) * max(1, round(count))  # a batched GEMM's tiles share the waves
        waves = ceil(tiles / self.sm_count)
        quantization = tiles / (waves * self.sm_count)
        eff = _stepped(self.constants["gemm_efficiency_by_gflop"]["value"], flops * count / 1e9) * quantization
        compute = count * flops / (self.peak_flops * eff)
        memory = self.memory_seconds(count * dtype_bytes * (m * k + k * n + m * n))
        return max(compute, memory)

    def memory_seconds(self, nbytes: float) -> float:
        """A memory-bound kernel moving `nbytes` through HBM."""
        if nbytes <= 0:
            return 0.0
        eff = _stepped(self.constants["hbm_efficiency_by_mb"]["value"], nbytes / 1e6)
        return nbytes / (self.hbm_bytes_per_s * eff)

    def host_link_seconds(self, nbytes: float) -> float:
        if nbytes <= 0:
            return 0.0
        eff = _stepped(self.constants["host_link_efficiency_by_mb"]["value"], nbytes / 1e6)
        return nbytes / (self.host_link_bytes_per_s * eff)

    def link(self, across_nodes: bool) -> tuple[float, float]:
        """(achieved bytes/s per direction, latency) of the link a collective runs over."""
        c = self.constants
        if across_nodes:
            return self.network_bytes_per_s * c["network_efficiency"]["value"], c["network_latency_s"]["value"]
        return self.intra_node_bytes_per_s * c["intra_node_efficiency"]["value"], c["intra_node_latency_s"]["value"]

    def sources(self) -> list[str]:
        """Every constant with where it comes from, for --explain."""
        out = [f"{self.name}: peak {self.peak_flops / 1e12:,.0f} TFLOP/s, {self.sm_count} SMs, HBM "
               f"{self.hbm_bytes_per_s / 1e9:,.0f} GB/s, intra-node {self.intra_node_bytes_per_s / 1e9:,.0f} GB/s and "
               f"network {self.network_bytes_per_s / 1e9:,.1f} GB/s per direction, host link "
               f"{self.host_link_bytes_per_s / 1e9:,.0f} GB/s (schemas/gpus/catalog.json)"]
        for name, item in self.constants.items():
            if isinstance(item, dict):
                out.append(f"{name} = {item['value']}: {item['source']}")
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
    return Hardware(entry["name"], float(peak), int(entry["sm_count"]), float(entry["hbm_bandwidth_bytes_per_s"]),
                    float(link), float(entry["network"]["bandwidth_bytes_per_s"]),
                    float(entry["host_link_bytes_per_s"]), float(entry["host_memory_bandwidth_bytes_per_s"]))
