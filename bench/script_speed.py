"""Cold wall time of `guard check` on a 500-line launch script, beside `bash -n` and shellcheck-free
baselines measured in the same run (target: 0.2 s)."""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import lint_speed  # noqa: E402  (its cold-process timer)

ROOT = Path(__file__).resolve().parent.parent
REPEATS = 7
TARGET = 0.2


def launch_script(lines: int = 500) -> str:
    """A realistic long launch script: #SBATCH header, variables, arrays, conditionals, a heredoc."""
    out = ["#!/bin/bash", "#SBATCH --nodes=4", "#SBATCH --ntasks-per-node=1", "#SBATCH --gpus-per-node=8",
           "export CUDA_DEVICE_MAX_CONNECTIONS=1", "TP=${TP:-4}", "PP=${PP:-2}", "MBS=1",
           "GBS=$((MBS * 4 * 64))", "MODE=${MODE:-pretrain}"]
    i = 0
    while len(out) < lines - 16:
        out += [f"# block {i}", f"VAR_{i}=${{VAR_{i}:-{i}}}",
                f'if [ "$MODE" = "finetune" ]; then EXTRA_{i}="--lr {i}e-6"; else EXTRA_{i}=""; fi',
                f"LIST_{i}=(", f"    --log-interval {i + 1}", ")"]
        i += 1
    out += ["cat <<EOT > ds_config.json", '{"train_micro_batch_size_per_gpu": $MBS}', "EOT",
            "ARGS=(", "    --num-layers 32 --hidden-size 4096 --num-attention-heads 32",
            "    --group-query-attention --num-query-groups 8",
            "    --seq-length 4096 --max-position-embeddings 4096",
            "    --tensor-model-parallel-size $TP --pipeline-model-parallel-size $PP --sequence-parallel",
            "    --micro-batch-size $MBS --global-batch-size $GBS --bf16 --use-distributed-optimizer",
            "    --train-iters 1000 --lr 3e-4 --min-lr 3e-5", ")",
            "srun torchrun --nnodes $SLURM_NNODES --nproc-per-node 8 pretrain_gpt.py \\",
            '    "${ARGS[@]}" "${LIST_0[@]}" --mock-data --tokenizer-type NullTokenizer --vocab-size 32000']
    return "\n".join(out) + "\n"


def cold(cmd: list[str]) -> float:
    return lint_speed.cold(cmd, REPEATS)


def main() -> None:
    folder = Path(tempfile.mkdtemp())
    script = folder / "train.sh"
    script.write_text(launch_script())
    n = len(script.read_text().splitlines())
    python = cold([sys.executable, "-c", "pass"])
    guard = cold([sys.executable, "-m", "guard", "check", "--isolated", "--exit-zero", str(script)])
    bash = cold([shutil.which("bash") or "bash", "-n", str(script)])
    print(f"cold wall time, median of {REPEATS} runs, {n}-line launch script\n")
    print(f"{'guard check':32} {guard:7.3f} s  (target {TARGET} s: {'met' if guard <= TARGET else 'MISSED'})")
    print(f"{'bash -n (parse only)':32} {bash:7.3f} s  guard / bash = {guard / bash:5.1f}x")
    print(f"{'python -c pass (startup)':32} {python:7.3f} s  guard - python startup = {guard - python:.3f} s")


if __name__ == "__main__":
    main()
