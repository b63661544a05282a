"""guard's memory prediction against the real GPU memory of Megatron-LM's CI runs (../shared/research/gpu_truth).

Each run logged `allocated_bytes.all.peak` and `.current` (after the step) on global rank world - 1: the last
pipeline stage, the last TP/CP/EP/DP rank. guard's prediction for that stage is compared without the terms the
caching allocator does not count (CUDA context, NCCL communicators, fragmentation: the "runtime" component).
After the step only the model states and persistent buffers are allocated. Prints each run, then the summary:
median |error|, and the share within 5 % and 10 %. A run guard cannot read is listed, not hidden.
"""

from __future__ import annotations

import json
import shlex
import statistics
import sys
import tempfile
from pathlib import Path

from guard.intake.read import read
from guard.intake.request import Request
from guard.memory.estimate import estimate_stage
from guard.memory.margin import stage_margin
from guard.settings import Settings

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT.parent / "shared" / "research" / "gpu_truth" / "megatron_ci_calibration.jsonl"
GPT2_VOCAB = 50257  # pretrain_gpt.py's default tokenizer (GPT-2 BPE) with GPT-2's vocab file (the data's README)
GPUS = {"H100": "H100-SXM", "A100": "A100-80GB", "GB200": "GB200"}  # the catalog entries of the CI's GPUs


def launch_script(run: dict) -> str:
    """The run as its CI launched it: the case's environment, torchrun over the nodes, pretrain_gpt.py."""
    per_node = 4 if run["gpu"] == "GB200" else 8
    args = run["args"] if "--vocab-size" in run["args"] else f"{run['args']} --vocab-size {GPT2_VOCAB}"
    exports = "".join(f"export {k}={shlex.quote(str(v))}\n" for k, v in run["env"].items())
    return (f"#!/bin/bash\n{exports}torchrun --nproc_per_node {per_node} --nnodes {run['world_size'] // per_node} "
            f"pretrain_gpt.py {args}\n")


def predict(run: dict, with_band: bool = False):
    """(peak allocated, allocated after the step) of the last stage, in bytes; with_band: and its stated margin
    (lower, upper or None when unbounded), on the same allocated basis (the runtime term left out)."""
    settings = Settings()
    settings.gpu = GPUS[run["gpu"]]
    with tempfile.TemporaryDirectory() as folder:
        script = Path(folder) / "run.sh"
        script.write_text(launch_script(run))
        job = read(Request(paths=(str(script),)), settings).job.required()
    # the logging rank is last in every group: its data-parallel index is the last one
    stage = estimate_stage(job, job.layout.pp - 1, dp_rank=job.dp * job.layout.cp - 1)
    runtime = stage.components["runtime"]
    peak = stage.peak_bytes - runtime
    if not with_band:
        return peak, stage.resident_bytes
    m = stage_margin(job, stage, job.chunks[job.layout.pp - 1])
    band = (m.lower - runtime, None if m.upper is None else m.upper - runtime)
    return peak, stage.resident_bytes, band, bool(job.arch.num_experts)


def _summary(name: str, errors: list[float]) -> str:
    if not errors:
        return f"{name}: no run priced"
    absolute = [abs(e) for e in errors]
    within = lambda limit: 100 * sum(a <= limit for a in absolute) / len(absolute)  # noqa: E731
    return (f"{name}: median |error| {100 * statistics.median(absolute):.1f} %, within 5 %: {within(0.05):.0f} %, "
            f"within 10 %: {within(0.10):.0f} % ({len(errors)} runs)")


def load_runs() -> list[dict]:
    return [json.loads(line) for line in DATA.read_text().splitlines() if line.strip()]


def main() -> None:
    if not DATA.is_file():
        sys.exit(f"{DATA} is not present")
    runs = load_runs()
    peaks, after, bands = [], [], []
    print(f"{'case':58} {'gpu':5} {'peak GiB':>8} {'guard':>7} {'err %':>6} {'after GiB':>9} {'guard':>7} {'err %':>6}")
    for run in runs:
        try:
            peak, states, band, moe = predict(run, with_band=True)
        except Exception as err:  # noqa: BLE001 - a run guard cannot read is a finding of this bench
            print(f"{run['case'][:58]:58} {run['gpu']:5} not priced: {str(err)[:70]}")
            continue
        real_peak, real_after = run["mem_max_allocated_bytes_last"], run["mem_allocated_bytes_last"]
        peaks.append(peak / real_peak - 1)
        bands.append((band, real_peak, peak, moe))
        after.append(states / real_after - 1)
        print(f"{run['case'][:58]:58} {run['gpu']:5} {real_peak / 2**30:8.2f} {peak / 2**30:7.2f} "
              f"{100 * peaks[-1]:6.1f} {real_after / 2**30:9.2f} {states / 2**30:7.2f} {100 * after[-1]:6.1f}")
    print()
    print(_summary("peak (max_memory_allocated)", peaks))
    print(_summary("after the step (memory_allocated)", after))
    print(_band_summary(bands))


def _band_summary(bands: list) -> str:
    """How often the measured peak lies within the stated margin, and how wide the bounded margins are."""
    bounded = [(lo, hi, real, peak, moe) for (lo, hi), real, peak, moe in bands if hi is not None]
    held = sum(lo <= real <= hi for lo, hi, real, _, _ in bounded)
    dense = [(hi - lo) / peak for lo, hi, _, peak, moe in bounded if not moe]
    width = f", median width {100 * statistics.median(dense):.1f} % of the prediction (dense)" if dense else ""
    return (f"stated margin: the measured peak within [lower, upper] on {held} of {len(bounded)} runs with a bounded "
            f"upper ({len(bands) - len(bounded)} more unbounded){width}")


if __name__ == "__main__":
    main()
