"""guard's pipeline stash per rank against megatron-core's own 1F1B and interleaved schedules run on CPU.

The probe (megatron_schedule_probe.py) counts microbatches in flight and the saved-for-backward bytes alive
at once on every pipeline rank. guard reads the equivalent Megatron-LM command line and is told the kernel
path the CPU run takes (unfused softmax kept in fp32, local layers), the one difference from a GPU run.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from guard.megatron.from_script import job_from_argv
from guard.memory.estimate import estimate
from guard.memory.from_megatron import setup_from_job
from guard.settings import Settings
from tests.fidelity.megatron_schedule_probe import FFN, HEADS, HIDDEN, MICRO_BATCH, SEQ, VOCAB
from tests.fidelity.rows import Row

PROBE = Path(__file__).with_name("megatron_schedule_probe.py")
# name: pipeline size, virtual stages, layers, microbatches (m < p included; interleaving needs m % p == 0)
CASES = {
    "1f1b_p2_m1": dict(pp=2, layers=4, microbatches=1),
    "1f1b_p2_m3": dict(pp=2, layers=4, microbatches=3),
    "1f1b_p2_m8": dict(pp=2, layers=4, microbatches=8),
    "1f1b_p4_m2": dict(pp=4, layers=4, microbatches=2),
    "1f1b_p4_m3": dict(pp=4, layers=8, microbatches=3),
    "1f1b_p4_m8": dict(pp=4, layers=8, microbatches=8),
    "interleaved_p2_v2_m2": dict(pp=2, vpp=2, layers=4, microbatches=2),
    "interleaved_p2_v2_m4": dict(pp=2, vpp=2, layers=4, microbatches=4),
    "interleaved_p4_v2_m4": dict(pp=4, vpp=2, layers=8, microbatches=4),
    "interleaved_p4_v2_m8": dict(pp=4, vpp=2, layers=8, microbatches=8),
}
STASH_TOLERANCE = 0.02  # the per-layer activation model's tolerance (fidelity/megatron_activations.py)


def megatron_flags(case: dict) -> str:
    pp, vpp, m = case["pp"], case.get("vpp", 1), case["microbatches"]
    flags = (f"--num-layers {case['layers']} --hidden-size {HIDDEN} --num-attention-heads {HEADS} "
             f"--ffn-hidden-size {FFN} --seq-length {SEQ} --max-position-embeddings {SEQ} "
             f"--micro-batch-size {MICRO_BATCH} --global-batch-size {MICRO_BATCH * m} --vocab-size {VOCAB} "
             f"--make-vocab-size-divisible-by 1 --bf16 --hidden-dropout 0 --attention-dropout 0 "
             f"--untie-embeddings-and-output-weights --pipeline-model-parallel-size {pp}")
    if vpp > 1:
        flags += f" --num-layers-per-virtual-pipeline-stage {case['layers'] // (pp * vpp)}"
    return flags


def predict(case: dict):
    job = job_from_argv(f"pretrain_gpt.py {megatron_flags(case)}", "<fidelity>", Settings(world_size=case["pp"]))
    setup = setup_from_job(job)
    # the CPU run's kernel path: unfused attention whose softmax is kept in fp32 (no dropout, so no masks)
    setup.attention, setup.softmax_bytes = "unfused", 4
    return estimate(setup)


def collect(workdir: Path) -> list[Row]:
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "cases.json").write_text(json.dumps(CASES))
    proc = subprocess.run([sys.executable, str(PROBE), str(workdir / "cases.json"), str(workdir / "out.json")],
                          capture_output=True, text=True, timeout=900)
    if proc.returncode:
        raise RuntimeError(f"megatron schedule probe failed:\n{proc.stderr[-3000:]}")
    measured = json.loads((workdir / "out.json").read_text())
    rows = []
    for name, case in CASES.items():
        result = predict(case)
        for seen in measured[name]:
            stage = result.stages[seen["pp_rank"]]
            label = f"{name} / pp rank {seen['pp_rank']}"
            c = stage.components
            stash = c["activations"] + c["embedding_activations"] + c["logits"]
            rows.append(Row(label, "microbatches in flight", stage.inflight, seen["peak_inflight"]))
            rows.append(Row(label, "stashed activation bytes", stash, seen["peak_saved_bytes"], STASH_TOLERANCE,
                            note="layers x in flight, + embedding output (first stage), + logits (last stage)"))
    return rows
