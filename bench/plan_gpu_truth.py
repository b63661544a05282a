"""guard plan's step time against the iteration times of Megatron-LM's CI runs (../shared/research/gpu_truth):
small models (12 layers, hidden 512) whose steps are a few milliseconds of math, so what they measure is the
fixed per-step cost the model does not price (kernel launches, Python, the optimizer's many small kernels,
logging). Printed as measured - predicted per run and its median per GPU: a check, not a fitted term."""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

from guard.intake.read import read
from guard.intake.request import Request
from guard.memory.gpu_choice import choose_gpu
from guard.plan.hardware import hardware
from guard.plan.step_time import replayed, step_time
from guard.settings import Settings

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT.parent / "shared" / "research" / "gpu_truth" / "megatron_ci_calibration.jsonl"
GPUS = {"H100": "H100-SXM", "A100": "A100-80GB", "GB200": "GB200"}


def predict(run: dict) -> float:
    settings = Settings()
    settings.world_size = run["world_size"]
    settings.gpus_per_node = 4 if run["gpu"] == "GB200" else 8
    args = run["args"] + ("" if "--vocab-size" in run["args"] else " --vocab-size 50257")
    job = read(Request(megatron_args=(args,)), settings).job.required()
    hw = hardware(choose_gpu(GPUS[run["gpu"]]), job.params_dtype)
    return replayed(job, step_time(job, hw)).seconds


def main() -> None:
    if not DATA.is_file():
        sys.exit(f"{DATA} is not present")
    runs = [json.loads(line) for line in DATA.read_text().splitlines() if line.strip()]
    fixed: dict[str, list[float]] = {}
    print(f"{'case':64} {'gpu':5} {'measured s':>10} {'guard s':>8} {'fixed s':>8}")
    for run in runs:
        try:
            predicted = predict(run)
        except Exception as err:  # a run guard cannot read is reported, not hidden
            print(f"{run['case'][:64]:64} {run['gpu']:5} not priced: {str(err)[:60]}")
            continue
        measured = run["iteration_time_last"]
        fixed.setdefault(run["gpu"], []).append(measured - predicted)
        print(f"{run['case'][:64]:64} {run['gpu']:5} {measured:10.4f} {predicted:8.4f} {measured - predicted:8.4f}")
    print("\nmeasured - predicted (the per-step cost guard does not price), median per GPU:")
    for gpu, values in fixed.items():
        print(f"  {gpu:6} {statistics.median(values):.3f} s over {len(values)} runs "
              f"(range {min(values):.3f} to {max(values):.3f})")


if __name__ == "__main__":
    main()
