"""guard plan's step time against the iteration times of Megatron-LM's CI runs (../shared/research/gpu_truth):
small models (12 layers, hidden 512) whose steps are a few milliseconds of math, so what they measure is the
fixed per-step cost the model does not price (kernel launches, Python, the optimizer's many small kernels,
logging). Printed as predicted / measured - 1 per run, and per GPU: a check, not a fitted term."""

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
    errors: dict[str, list[float]] = {}
    print(f"{'case':64} {'gpu':5} {'measured s':>10} {'guard s':>8} {'error':>7}")
    for run in runs:
        try:
            predicted = predict(run)
        except Exception as err:  # a run guard cannot read is reported, not hidden
            print(f"{run['case'][:64]:64} {run['gpu']:5} not priced: {str(err)[:60]}")
            continue
        measured = run["iteration_time_last"]
        error = predicted / measured - 1
        errors.setdefault(run["gpu"], []).append(error)
        print(f"{run['case'][:64]:64} {run['gpu']:5} {measured:10.4f} {predicted:8.4f} {error:+7.1%}")
    print("\npredicted against measured step time, per GPU (goal: median |error| within 10 %, none beyond 25 %):")
    for gpu, values in errors.items():
        size = sorted(abs(v) for v in values)
        print(f"  {gpu:6} median |error| {statistics.median(size):6.1%}, "
              f"median error {statistics.median(values):+7.1%}, "
              f"worst {max(values, key=abs):+7.1%}, within 25 %: {sum(v <= 0.25 for v in size)}/{len(values)}")


if __name__ == "__main__":
    main()
