"""guard's ZeRO model states against DeepSpeed itself: 1, 2 and 4 CPU ranks, stages 0-3, bf16/fp32, offload, and
on 2 ranks the zero_optimization keys that change the stage 1-2 gradient path (PATH_CASES).

The probe (deepspeed_zero_probe.py) sorts every live tensor storage of each rank into parameters, gradients,
fp32 master weights, optimizer moments and the rest; this module asks guard about the same model (an HF
GPT-2 config) and the same DeepSpeed config, rank by rank, and pairs each measured component with the
guard terms that price it. Two things are left out of both sides, by name: the Adam `step` counters (one
4-byte tensor per parameter tensor, kept on the host by torch under CUDA too) and 0-d scalars (norms, flags).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from guard.memory.estimate import estimate_stage
from guard.job.from_deepspeed import read_deepspeed
from guard.job.world import World
from guard.job.origin import Origin
from guard.job.hf_config import from_dict
from guard.memory.params import rank_inventory
from guard.memory.states import zero_states
from guard.memory.zero_paths import WAITING, gradient_path
from tests.fidelity.launch import run_torchrun_probe
from tests.fidelity.rows import Row

PROBE = Path(__file__).with_name("deepspeed_zero_probe.py")
MODEL = {"model_type": "gpt2", "n_embd": 128, "n_layer": 2, "n_head": 4, "vocab_size": 1000, "n_positions": 64}
SEQ, MICRO_BATCH = MODEL["n_positions"], 2
BUCKETS = dict(reduce_bucket=50_000, prefetch_bucket=20_000, persistence_threshold=0, max_live=100_000)
WORLD_SIZES = (1, 2, 4)
SCALAR_BYTES = 8  # 0-d tensors: norms (float64), loss scale, overflow flags
LAUNCH_TIMEOUT = 1200  # seconds per world size; 4 ranks took 1.5-2.5 min on 2 cores busy with other work


# zero_optimization keys that change the stage 1-2 gradient path (stage_1_and_2.py), run on 2 ranks:
# name -> (keys, dtypes, offload devices)
PATH_CASES = {
    "contiguous_gradients_false": ({"contiguous_gradients": False}, ("bf16", "fp32"), ("none",)),
    "overlap_comm": ({"overlap_comm": True}, ("bf16",), ("none", "cpu")),
    "contiguous_gradients_false-overlap_comm": ({"contiguous_gradients": False, "overlap_comm": True}, ("bf16",),
                                                ("none",)),
    "reduce_scatter_false": ({"reduce_scatter": False}, ("bf16",), ("none",)),
    "round_robin_gradients": ({"round_robin_gradients": True}, ("bf16",), ("none",)),
}
PATH_WORLD = 2
# Ulysses: DeepSpeed's device mesh of DP 2 x SP 2 on 4 ranks; ZeRO partitions over the sequence-data-parallel group
# (all 4), not DP alone. Run last: the mesh is process-global once made.
ULYSSES = {"sequence_parallel_size": 2, "data_parallel_size": 2}
ULYSSES_WORLD = 4


class AtMost(Row):
    """A bound, not a prediction: guard's named terms must cover what was measured."""

    @property
    def ok(self) -> bool:
        return self.measured <= self.predicted


@dataclass(frozen=True)
class EitherOf(Row):
    """Two exact predictions, both made before the measurement is seen: the measurement must be one of them."""

    alternative: float = 0.0

    @property
    def ok(self) -> bool:
        return self.measured in (self.predicted, self.alternative)


def cases(world: int) -> dict[str, dict]:
    out = {}
    # offload engines run last: their host-side copies must not overlap the census of a case without offload
    for offload in ("none", "cpu"):
        for stage in range(4):
            for dtype in ("bf16", "fp32"):
                if stage == 0 and offload != "none":  # offload needs ZeRO >= 1
                    continue
                out[f"zero{stage}-{dtype}-offload_{offload}"] = dict(stage=stage, dtype=dtype, offload=offload,
                                                                    micro_batch=MICRO_BATCH, **BUCKETS)
            for name, (keys, dtypes, devices) in PATH_CASES.items():
                if world != PATH_WORLD or stage not in (1, 2) or offload not in devices:
                    continue
                for dtype in dtypes:
                    out[f"zero{stage}-{dtype}-offload_{offload}-{name}"] = dict(
                        stage=stage, dtype=dtype, offload=offload, micro_batch=MICRO_BATCH, zero_keys=keys, **BUCKETS)
    if world == ULYSSES_WORLD:
        for stage in (1, 2, 3):
            out[f"zero{stage}-bf16-offload_none-ulysses_sp2"] = dict(stage=stage, dtype="bf16", offload="none",
                                                                     micro_batch=MICRO_BATCH, ds_extra=ULYSSES,
                                                                     **BUCKETS)
    return out


def measure(world: int, workdir: Path) -> list[dict]:
    """Run the probe on `world` CPU ranks; one dict per rank: case name -> measurements."""
    return run_torchrun_probe(PROBE, world, {"model": MODEL, "cases": cases(world)}, workdir / f"world{world}",
                              LAUNCH_TIMEOUT)


def ds_config(case: dict) -> dict:
    """The DeepSpeed config the probe used (same keys), as guard reads it."""
    zero = {"stage": case["stage"], "reduce_bucket_size": case["reduce_bucket"],
            "allgather_bucket_size": case["reduce_bucket"], "stage3_prefetch_bucket_size": case["prefetch_bucket"],
            "stage3_param_persistence_threshold": case["persistence_threshold"],
            "stage3_max_live_parameters": case["max_live"]}
    if case["offload"] != "none":
        zero["offload_optimizer"] = {"device": case["offload"]}
    zero.update(case.get("zero_keys", {}))
    return {"train_micro_batch_size_per_gpu": case["micro_batch"], "zero_optimization": zero,
            "bf16": {"enabled": case["dtype"] == "bf16"}, **case.get("ds_extra", {})}


def non_scalar_bytes(moment: dict, component: str) -> int:
    """Bytes of `component`'s storages larger than a scalar (Adam's step counters and norms left out)."""
    total = 0
    for label, count in moment["items"].items():
        name, _dtype, nbytes = label.split()
        if name == component and int(nbytes) > SCALAR_BYTES:
            total += int(nbytes) * count
    return total


def rows_for(case_name: str, case: dict, world: int, rank: int, seen: dict) -> list[Row]:
    arch = from_dict(MODEL, "gpt2-tiny")
    setup = read_deepspeed(ds_config(case), "probe", arch, World(world, Origin("cli", "probe"), gpus_per_node=world),
                           seq_length=SEQ, micro_batch=MICRO_BATCH)
    # the mesh is (data_parallel, sequence_parallel): a rank's ZeRO partition is its data-parallel index
    sp = case.get("ds_extra", {}).get("sequence_parallel_size", 1)
    states = zero_states(setup, rank_inventory(setup, setup.chunks[0]), dp_rank=rank // sp)
    buffers = estimate_stage(setup, 0).terms["buffers"]
    device, host, step = states.terms, states.host_terms, states.step_terms
    label = f"{world} rank{'s' if world > 1 else ''} / rank {rank} / {case_name}"
    psi = seen["psi"]
    ab = seen["after_backward"]
    batch = MICRO_BATCH * SEQ * 8  # the int64 token ids the step was fed
    other = non_scalar_bytes(ab, "other") - batch
    if sp > 1:  # the device mesh's rank grid, an int32 tensor torch keeps on the host (distributed/device_mesh.py)
        other -= 4 * world
    # buffers alive at the end of backward: stage 3's reduce bucket, and the offload staging buffers
    # (stage 1-2's reduce bucket lives only during the backward, so it is not in this comparison)
    named = {k: v for k, v in buffers.items() if k in ("ZeRO-3 reduce bucket", "offload gradient staging "
                                                                                "(largest tensor)")}
    named.update({k: v for k, v in host.items() if k in ("16-bit parameter partition",
                                                         "pinned gradient staging (largest tensor)")})
    # stages 1-2 reduce a gradient larger than the bucket on its own, asynchronously: when backward returns
    # DeepSpeed may still hold it (seen on 4 ranks) or not. Both predictions are made here, before the
    # measurement: the buffers alone, or the buffers and that gradient, each to the byte.
    oversized = buffers.get("gradient larger than the reduce bucket", 0)
    grads_pred = device.get("gradients", 0) + host.get("gradient partition", 0) + host.get(
        "fp32 gradient partition", 0)
    master_pred = device.get("fp32 master weights", 0) + host.get("fp32 master weights", 0)
    moments_pred = device.get("optimizer moments", 0) + host.get("optimizer moments", 0)
    params_pred = device.get("parameters", 0) + host.get("parameter partition", 0)
    note = f"psi {psi:,}"
    out = [
        Row(label, "parameters (end of backward)", params_pred, ab["params"], note=note),
        Row(label, "gradients (end of backward)", grads_pred, ab["grads"],
            note="stages 1-2: every tensor touching the rank's slice, whole" if case["stage"] in (1, 2) else ""),
        Row(label, "fp32 master weights", master_pred, ab["master"]),
        Row(label, "optimizer moments", moments_pred, non_scalar_bytes(ab, "moments"),
            note="Adam step counters left out"),
        EitherOf(label, "buffers (end of backward)", sum(named.values()), other,
                 note=", ".join(named) or "none expected", alternative=sum(named.values()) + oversized)
        if oversized else Row(label, "buffers (end of backward)", sum(named.values()), other,
                              note=", ".join(named) or "none expected"),
        Row(label, "parameters (after step)", params_pred, seen["after_step"]["params"]),
        Row(label, "optimizer moments (after step)", moments_pred, non_scalar_bytes(seen["after_step"], "moments")),
    ]
    # what the step hands the inner optimizer: fp32 copies of the gradients (16-bit models; stage 3 always;
    # stages 1-2 flatten fp32 gradients into a new tensor). Offload keeps them persistently instead.
    if not host:
        handed = step.get("fp32 gradient copy", 0) + step.get("fp32 gradient copies", 0)
        if case["dtype"] == "fp32" and case["stage"] in (1, 2):
            handed += step.get("flattened gradient partition", 0)
        out.append(Row(label, "gradient copies made for the step", handed, seen["in_step"]["new_grads"]))
    return out + path_rows(label, setup, states, buffers, seen.get("end_of_autograd"))


def path_rows(label: str, setup, states, buffers: dict, end: dict | None) -> list[Row]:
    """Stages 1-2 when autograd's backward ends, before the engine's post-backward reduction, where the
    zero_optimization keys' paths differ: the reduce buckets (exact), and the gradients held, exact where stage 1
    holds every gradient; elsewhere which gradients are still waiting depends on the order autograd produced
    them, which guard does not know, so the measurement must stay within guard's terms (an "at most" row)."""
    if not end:
        return []
    buckets = buffers.get("ZeRO reduce bucket", 0) + buffers.get("second reduce bucket (overlap_comm)", 0)
    waiting = sum(v for k, v in buffers.items() if k in WAITING)
    held = sum(states.reduce_terms.values())
    rows = [Row(label, "reduce buckets (end of autograd backward)", buckets, end["buckets"],
                note=", ".join(k for k in buffers if "reduce bucket" in k and "larger" not in k) or "none expected")]
    if gradient_path(setup).holds_every_gradient:
        rows.append(Row(label, "gradients (end of autograd backward)", waiting + held, end["grads"],
                        note="stage 1 reduces after backward: every gradient"))
    else:
        rows.append(AtMost(label, "gradients (end of autograd backward, at most)", states.grads + waiting + held,
                        end["grads"], note="partition + " + ", ".join(
                            [k for k in buffers if k in WAITING] + list(states.reduce_terms))))
    return rows


def collect(workdir: Path, world_sizes=WORLD_SIZES) -> list[Row]:
    rows: list[Row] = []
    for world in world_sizes:
        per_rank = measure(world, workdir)
        for rank, measured in enumerate(per_rank):
            for name, seen in measured.items():
                rows += rows_for(name, seen["case"], world, rank, seen)
    return rows
