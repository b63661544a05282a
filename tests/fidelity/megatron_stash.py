"""guard's pipeline schedule and activation stash per rank against megatron-core 0.16.1's own schedules on CPU.

megatron_stash_probe.py records, per pipeline rank, the order of forwards and backwards (and the chunk of
each), the bytes each forward saves for backward, and the peaks of microbatches in flight and of saved
bytes alive at once. guard reads the equivalent Megatron-LM command line and is told the kernel path the
CPU run takes (unfused attention, softmax kept in fp32, LayerNorm statistics in bf16), where it differs
from a GPU run.

Attribution of the edges: "stashed layer activation bytes" compares what TransformerLayers save (guard's
"activations"); "stashed activation bytes" adds what the first virtual stage saves outside the layers
(token and position ids: guard's "embedding_activations") and the last one (final norm, output layer,
cross entropy: guard's "logits"). The probe's causal mask is shared by every microbatch and not counted.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from guard.intake.read import read
from guard.intake.request import Request
from guard.memory.activations import chunk_stored
from guard.memory.estimate import estimate
from guard.memory.schedule import order
from guard.settings import Settings
from tests.fidelity.megatron_stash_probe import FFN, HEADS, HIDDEN, MICRO_BATCH, SEQ, VOCAB
from tests.fidelity.rows import Row

PROBE = Path(__file__).with_name("megatron_stash_probe.py")
# 1F1B over m < p, m = p and m > p; interleaved with the default group G = p (m a multiple of p, which
# 0.16.1 requires then) and with G > p, where the last group takes the remainder (G = 3, m = 5: groups 3 + 2)
CASES = {
    **{f"1f1b_p{p}_m{m}": dict(pp=p, layers=2 * p, microbatches=m) for p in (2, 4) for m in (1, 2, 3, 4, 8)},
    "interleaved_p2_v2_m2": dict(pp=2, vpp=2, layers=4, microbatches=2),
    "interleaved_p2_v2_m4": dict(pp=2, vpp=2, layers=4, microbatches=4),
    "interleaved_p2_v2_g3_m5": dict(pp=2, vpp=2, group=3, layers=4, microbatches=5),
    "interleaved_p4_v2_m4": dict(pp=4, vpp=2, layers=8, microbatches=4),
    "interleaved_p4_v2_m8": dict(pp=4, vpp=2, layers=8, microbatches=8),
    "interleaved_p4_v2_g5_m9": dict(pp=4, vpp=2, group=5, layers=8, microbatches=9),
}
STASH_TOLERANCE = 0.02  # the per-layer activation model's tolerance (tests/fidelity/megatron_activations.py)


def megatron_flags(case: dict) -> str:
    pp, vpp, m = case["pp"], case.get("vpp", 1), case["microbatches"]
    flags = (f"--num-layers {case['layers']} --hidden-size {HIDDEN} --num-attention-heads {HEADS} "
             f"--ffn-hidden-size {FFN} --seq-length {SEQ} --max-position-embeddings {SEQ} "
             f"--micro-batch-size {MICRO_BATCH} --global-batch-size {MICRO_BATCH * m} --vocab-size {VOCAB} "
             f"--make-vocab-size-divisible-by 1 --bf16 --hidden-dropout 0 --attention-dropout 0 "
             f"--untie-embeddings-and-output-weights --transformer-impl local "
             f"--pipeline-model-parallel-size {pp}")
    if vpp > 1:
        flags += f" --num-layers-per-virtual-pipeline-stage {case['layers'] // (pp * vpp)}"
    if case.get("group"):
        flags += f" --microbatch-group-size-per-virtual-pipeline-stage {case['group']}"
    return flags


def guard_setup(case: dict):
    request = Request(megatron_args=(f"pretrain_gpt.py {megatron_flags(case)}",))
    setup = read(request, Settings(world_size=case["pp"])).job.required()
    # the CPU kernel path: unfused attention keeping the fp32 softmax (and 16-bit copy), torch's CPU LayerNorm
    # (statistics in bf16); no dropout, so no masks
    setup.attention, setup.softmax_bytes, setup.mask_bytes, setup.norm_kernel = "unfused", 4, 2, "torch_cpu"
    return setup


def run_probe(workdir: Path) -> dict:
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "cases.json").write_text(json.dumps(CASES))
    proc = subprocess.run([sys.executable, str(PROBE), str(workdir / "cases.json"), str(workdir / "out.json")],
                          capture_output=True, text=True, timeout=600)
    if proc.returncode:
        raise RuntimeError(f"megatron stash probe failed:\n{proc.stderr[-3000:]}")
    return json.loads((workdir / "out.json").read_text())


def common_prefix(a: list, b: list) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def collect(workdir: Path) -> list[Row]:
    measured = run_probe(workdir)
    rows = []
    for name, case in CASES.items():
        setup = guard_setup(case)
        result = estimate(setup)
        for seen in measured[name]:
            r = seen["pp_rank"]
            stage, label = result.stages[r], f"{name} / pp rank {r}"
            if "error" in seen:  # the schedule refused the layout: no comparison is possible, so fail loudly
                raise RuntimeError(f"{label}: {seen['error']}")
            steps = [(kind, chunk) for kind, chunk, *_ in seen["events"]]
            predicted = order(case["pp"], r, case["microbatches"], case.get("vpp", 1), case.get("group"))
            first_forward = {chunk: b for kind, chunk, *b in reversed(seen["events"]) if kind == "F"}
            c = stage.components
            rows += [
                Row(label, "schedule steps in order", common_prefix(predicted, steps), len(steps),
                    note="forwards and backwards, with their model chunk, that guard's order() gets right"),
                Row(label, "in-flight microbatches", stage.inflight, seen["peak_inflight"],
                    note="forwards started minus backwards finished, virtual microbatches when interleaved"),
                Row(label, "one-microbatch layer bytes",
                    sum(chunk_stored(setup, ch.layers)[0] for ch in setup.chunks[r]),
                    sum(b[0] for b in first_forward.values()), STASH_TOLERANCE,
                    note="first forward of each chunk, TransformerLayer saves only"),
                Row(label, "stashed layer activation bytes", c["activations"], seen["peak_layer_bytes"],
                    STASH_TOLERANCE, note="guard 'activations' vs the peak of TransformerLayer saves alive"),
                Row(label, "stashed activation bytes", c["activations"] + c["embedding_activations"] + c["logits"],
                    seen["peak_saved_bytes"], STASH_TOLERANCE,
                    note="+ token/position ids on the first virtual stage, + final norm, output layer and "
                         "loss on the last (guard keeps one microbatch of those)"),
            ]
    return rows
