"""Cold wall time of `guard plan` searching the full Megatron space of GPT-3 175B on 4096 GPUs (target 2 s),
beside `guard estimate` of the same job and Python's start-up, measured in the same run."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import lint_speed  # noqa: E402  (its cold-process timer)

REPEATS = 5
TARGET = 2.0
ARGS = ("--num-layers 96 --hidden-size 12288 --num-attention-heads 96 --seq-length 2048 --max-position-embeddings "
        "2048 --micro-batch-size 1 --global-batch-size 1536 --tensor-model-parallel-size 8 "
        "--pipeline-model-parallel-size 16 --bf16 --use-distributed-optimizer --sequence-parallel --vocab-size 51200")


def main() -> None:
    common = ["--megatron-args", ARGS, "--world-size", "4096", "--gpu", "H100-SXM"]
    python = lint_speed.cold([sys.executable, "-c", "pass"], REPEATS)
    estimate = lint_speed.cold([sys.executable, "-m", "guard", "estimate", *common], REPEATS)
    plan = lint_speed.cold([sys.executable, "-m", "guard", "plan", *common], REPEATS)
    report = json.loads(subprocess.run([sys.executable, "-m", "guard", "plan", *common, "--format", "json"],
                                       capture_output=True, text=True, check=True).stdout)
    search = report["search"]
    print(f"cold wall time, median of {REPEATS} runs: GPT-3 175B on 4096 x H100, global batch 1536\n")
    print(f"{'guard plan (full Megatron space)':34} {plan:7.3f} s  (target {TARGET} s: "
          f"{'met' if plan <= TARGET else 'MISSED'}); {search['tried']} settings tried, {search['fit']} fit")
    print(f"{'guard estimate (one layout)':34} {estimate:7.3f} s  plan / estimate = {plan / estimate:.1f}x")
    print(f"{'python -c pass (startup)':34} {python:7.3f} s")
    best = report["candidates"][0]
    lay = best["layout"]
    print(f"\nbest: TP {lay['tp']} PP {lay['pp']} VPP {lay['vpp']} CP {lay['cp']} DP {lay['dp']} "
          f"micro-batch {lay['micro_batch_size']} recompute {lay['recompute']}: {best['step_time_s']:.2f} s/step, "
          f"MFU {best['mfu']:.1%}; the command's own layout: {report['current']['step_time_s']:.2f} s/step")


if __name__ == "__main__":
    main()
