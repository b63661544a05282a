"""guard plan: the search's promises (properties over random jobs), the user's own layout, the command line."""

from __future__ import annotations

import dataclasses
import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import ROOT

from guard.checker import Checker
from guard.intake.read import read
from guard.intake.request import Request
from guard.judge import Judge
from guard.memory.estimate import estimate
from guard.memory.gpu_choice import choose_gpu
from guard.plan import space
from guard.plan.rewrite import write_candidate
from guard.plan.search import plan
from guard.settings import Settings
from guard.units import GIB


def source_of(args: str, world: int, gpus_per_node: int = 8):
    cfg = Settings()
    cfg.world_size, cfg.gpus_per_node = world, gpus_per_node
    return read(Request(megatron_args=(args,)), cfg), cfg


@st.composite
def small_jobs(draw):
    layers = draw(st.sampled_from([4, 6, 8, 12]))
    heads = draw(st.sampled_from([4, 8, 16]))
    hidden = heads * draw(st.sampled_from([32, 64]))
    world = draw(st.sampled_from([1, 2, 4, 8, 16]))
    seq = draw(st.sampled_from([512, 1024, 2048]))
    gbs = world * draw(st.sampled_from([1, 2, 4, 8]))
    args = (f"--num-layers {layers} --hidden-size {hidden} --num-attention-heads {heads} --seq-length {seq} "
            f"--max-position-embeddings {seq} --micro-batch-size 1 --global-batch-size {gbs} --vocab-size 32000 "
            "--bf16")
    capacity = draw(st.sampled_from([0.5, 1, 2, 4]))
    return args, world, capacity


def _rules_on_rewrite(src, cfg, cand) -> list[str]:
    """Errors and warnings guard check reports on the rewritten command line, as text read again, and not on the
    user's: the in-memory verification the plan used must agree with the written change."""
    written = write_candidate(src, cand.job)
    label = src.command.path
    checker = Checker(cfg)
    before = {(d.code, d.pointer) for d in checker.run([], [src.argv_text]).diagnostics}
    after = checker.run([], [written.after.get(label, src.argv_text)]).diagnostics
    return [f"{d.code} {d.message}" for d in after if d.severity.value in ("error", "warning")
            and (d.code, d.pointer) not in before]


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(small_jobs())
def test_shown_layouts_fit_every_rank_and_pass_every_rule(case):
    args, world, capacity = case
    src, cfg = source_of(args, world)
    gpu = choose_gpu("H100", f"{capacity}GiB")
    result = plan(src.job, gpu, top=3, verify=Judge(cfg).verify(src))
    # the user's layout is always there, as the flags write it: TP 1, PP 1, micro-batch 1, nothing recomputed
    mine = result.current.knobs
    assert (mine.layout.tp, mine.layout.pp, mine.layout.world, mine.micro_batch, mine.recompute) == \
        (1, 1, world, 1, "none")
    for cand in result.candidates:
        full = estimate(cand.job, gpu)
        assert all(st.peak_bytes <= gpu.usable_bytes for st in full.stages)
        assert cand.job.layout.world == world and cand.job.global_batch == src.job.global_batch
        assert cand.job.seq_length == src.job.seq_length
        assert _rules_on_rewrite(src, cfg, cand) == []
    times = [c.time.seconds for c in result.candidates]
    assert times == sorted(times)


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(small_jobs())
def test_more_memory_never_removes_a_candidate(case):
    args, world, capacity = case
    src, _ = source_of(args, world)
    small = plan(src.job, choose_gpu("H100", f"{capacity}GiB"), top=1)
    large = plan(src.job, choose_gpu("H100", f"{capacity * 2}GiB"), top=1)

    def without_recompute(knobs):  # more memory may let the same layout drop recompute: faster, not gone
        return dataclasses.replace(knobs, recompute="", recompute_method="", recompute_layers=0)

    roomy = {without_recompute(c.knobs): c.time.seconds for c in large.feasible}
    for cand in small.feasible:
        assert roomy[without_recompute(cand.knobs)] <= cand.time.seconds * (1 + 1e-12)


def test_the_seed_13b_on_eight_80gb_gpus(guard):
    """The seed walk-through: Llama-2-13B dimensions, 4k context, 8 x A100-80GB; every stage of the best fits."""
    code, out, err = guard("plan", str(ROOT / "examples/memory/llama2_13b_pp4_dp2.sh"), "--gpu", "A100-80GB",
                           "--format", "json", "--explain")
    assert code == 0, err
    report = json.loads(out)
    best = report["candidates"][0]
    capacity = report["gpu"]["capacity_bytes"]
    assert best["layout"]["world_size"] == 8 and report["model"]["global_batch"] == 64
    assert best["stages"] and all(stage["peak_bytes"] <= capacity for stage in best["stages"])
    assert best["step_time_s"] <= report["current"]["step_time_s"]  # never slower than what the user has
    assert report["current"]["feasible"] is True


def test_a_layout_that_does_not_fit_is_shown_with_its_reason(guard):
    code, out, _ = guard("plan", str(ROOT / "examples/memory/llama2_13b_pp4.sh"), "--gpu", "A100-80GB")
    assert code == 0
    assert "your layout: does not fit: pipeline stage 0 needs" in out
    assert "\nyou " in out


def test_json_contract_and_the_change_as_a_diff(guard, tmp_path):
    script = tmp_path / "train.sh"
    original = (ROOT / "examples/memory/llama2_13b_pp4.sh").read_text()
    script.write_text(original)
    code, out, _ = guard("plan", str(script), "--gpu", "A100-80GB", "--format", "json", "--top", "2")
    assert code == 0
    report = json.loads(out)
    assert set(report) >= {"candidates", "current"}
    for cand in report["candidates"]:
        assert set(cand) >= {"layout", "peak_bytes", "step_time_s", "tokens_per_s_per_gpu", "mfu", "bubble",
                             "changes"}
        assert set(cand["layout"]) >= {"world_size", "tp", "pp", "dp", "cp", "ep", "vpp", "micro_batch_size",
                                       "num_microbatches", "zero_stage", "offload", "recompute",
                                       "sequence_parallel"}
        assert cand["diff"].startswith(f"--- {script}")
        assert 0 < cand["mfu"] < 1 and 0 <= cand["bubble"] < 1
        # tokens per second per GPU is the global batch's tokens over the step, over the GPUs
        assert cand["tokens_per_s_per_gpu"] == pytest.approx(64 * 4096 / cand["step_time_s"] / 4)
    assert script.read_text() == original  # the user's file is never written


def test_the_change_reads_back_as_the_candidate(tmp_path):
    script = tmp_path / "train.sh"
    script.write_text((ROOT / "examples/memory/llama2_13b_pp4.sh").read_text())
    cfg = Settings()
    src = read(Request(paths=(str(script),)), cfg)
    result = plan(src.job, choose_gpu("A100-80GB"), top=3)
    for n, cand in enumerate(result.candidates):
        written = write_candidate(src, cand.job)
        assert not written.refused
        rewritten = tmp_path / f"planned_{n}.sh"
        rewritten.write_text(written.after[str(script)])
        again = read(Request(paths=(str(rewritten),)), cfg).job
        assert space.knobs_of(again) == cand.knobs


def test_deepspeed_space_changes_zero_offload_and_accumulation(guard):
    code, out, err = guard("plan", str(ROOT / "examples/memory/ds_zero3_llama2_7b.json"), "--model", "llama-2-7b",
                           "--world-size", "8", "--seq-length", "4096", "--gpu", "A100-40GB", "--format", "json")
    assert code == 0, err
    report = json.loads(out)
    assert report["current"]["feasible"] is False and "does not fit" in report["current"]["reason"]
    for cand in report["candidates"]:
        lay = cand["layout"]
        assert lay["tp"] == 1 and lay["pp"] == 1 and lay["dp"] == 8
        assert lay["micro_batch_size"] * lay["num_microbatches"] * 8 == 256  # the global batch is kept
        assert cand["peak_bytes"] <= report["gpu"]["capacity_bytes"]
        # the config edit, and what only the training script can change (gradient checkpointing), said so
        assert '"train_micro_batch_size_per_gpu"' in cand["diff"] or '"zero_optimization"' in cand["diff"] or \
            any("--gradient_checkpointing" in r for r in cand["refused"])


def test_headroom_shrinks_what_fits():
    src, _ = source_of("--num-layers 8 --hidden-size 1024 --num-attention-heads 16 --seq-length 2048 "
                       "--max-position-embeddings 2048 --micro-batch-size 1 --global-batch-size 32 --vocab-size 32000 "
                       "--bf16", 8)
    gpu = choose_gpu("H100", "4GiB")
    roomy = plan(src.job, gpu, top=1)
    tight = plan(src.job, gpu, top=1, headroom=2 * GIB)
    assert tight.capacity == gpu.usable_bytes - 2 * GIB
    assert all(c.quick_peak <= tight.capacity for c in tight.feasible)
    assert any(c.quick_peak > tight.capacity for c in roomy.feasible)  # 2 GiB less does bind here
    assert roomy.candidates[0].time.seconds <= tight.candidates[0].time.seconds


@pytest.mark.parametrize(("argv", "message"), [
    (["--megatron-args", "--num-layers 2"], "guard plan:"),
    (["--model", "llama-2-7b", "--deepspeed", "missing.json", "--gpu", "H100"], "missing.json"),
    (["--megatron-args", "--num-layers 2 --hidden-size 64 --num-attention-heads 2 --seq-length 64 "
      "--max-position-embeddings 64 --micro-batch-size 1 --vocab-size 100", "--world-size", "2",
      "--gpu-memory", "80GiB"],
     "--gpu NAME"),
    (["--megatron-args", "--num-layers 2 --hidden-size 64 --num-attention-heads 2 --seq-length 64 "
      "--max-position-embeddings 64 --micro-batch-size 1 --vocab-size 100", "--world-size", "2", "--gpu", "H100",
      "--headroom", "120%"],
     "--headroom"),
    (["--megatron-args", "--num-layers 2 --hidden-size 64 --num-attention-heads 2 --seq-length 64 "
      "--max-position-embeddings 64 --micro-batch-size 1 --vocab-size 100", "--world-size", "2", "--gpu", "H100",
      "--allow", "tp,warp"], "--allow: unknown knob warp"),
    (["--megatron-args", "--num-layers 2 --hidden-size 64 --num-attention-heads 2 --seq-length 64 "
      "--max-position-embeddings 64 --micro-batch-size 1 --vocab-size 100", "--world-size", "2", "--gpu", "H100",
      "--moe-imbalance", "0.5"], "--moe-imbalance: must be a number of at least 1"),
])
def test_bad_input_is_one_line_and_exit_2(guard, argv, message):
    code, out, err = guard("plan", *argv)
    assert code == 2 and out == ""
    assert message in err and err.count("\n") == 1 and "Traceback" not in err


def test_a_launcher_may_allow_only_some_knobs():
    """guard launch's rewrite policy: micro-batch and recompute by default; TP/PP/CP only when allowed."""
    src, _ = source_of("--num-layers 8 --hidden-size 1024 --num-attention-heads 16 --seq-length 2048 "
                       "--max-position-embeddings 2048 --micro-batch-size 4 --global-batch-size 64 --vocab-size 32000 "
                       "--bf16 --tensor-model-parallel-size 2", 8)
    allow = frozenset({"micro_batch", "recompute"})
    result = plan(src.job, choose_gpu("H100", "3GiB"), top=5, allow=allow)
    current = space.knobs_of(src.job)
    assert result.feasible
    for cand in result.feasible:
        assert space.changed(cand.knobs, current) <= allow
        assert cand.job.layout == src.job.layout
    everything = plan(src.job, choose_gpu("H100", "3GiB"), top=5)
    assert any("tp" in space.changed(c.knobs, current) for c in everything.feasible)


def test_allow_on_the_command_line(guard):
    code, out, err = guard("plan", str(ROOT / "examples/memory/llama2_13b_pp4.sh"), "--gpu", "A100-80GB",
                           "--allow", "micro_batch,recompute", "--format", "json")
    assert code == 0, err
    for cand in json.loads(out)["candidates"]:
        assert (cand["layout"]["tp"], cand["layout"]["pp"], cand["layout"]["vpp"]) == (1, 4, 1)


@pytest.mark.parametrize(("degrees", "world", "why"), [
    ("--tensor-model-parallel-size 3", 8, "tp(3) * pp(1) = 3 does not divide world size 8"),
    ("--pipeline-model-parallel-size 5", 10, "24"),
])
def test_a_layout_that_cannot_run_still_gets_a_plan(guard, degrees, world, why):
    args = ("--num-layers 24 --hidden-size 2048 --num-attention-heads 16 --seq-length 2048 --max-position-embeddings "
            f"2048 --micro-batch-size 1 --global-batch-size 60 --bf16 --vocab-size 32000 {degrees}")
    code, out, err = guard("plan", "--megatron-args", args, "--world-size", str(world), "--gpu", "H100",
                           "--format", "json")
    assert code == 0, err
    report = json.loads(out)
    assert report["current"]["feasible"] is False and why in report["current"]["reason"]
    assert report["current"]["step_time_s"] is None
    for cand in report["candidates"]:
        lay = cand["layout"]
        assert world % (lay["tp"] * lay["pp"] * lay["cp"]) == 0 and 16 % lay["tp"] == 0
        assert lay["micro_batch_size"] * lay["num_microbatches"] * lay["dp"] == 60


def test_a_long_search_shows_progress_on_a_terminal(monkeypatch):
    """After a second of searching, a rich progress bar appears on stderr (a terminal only) and goes away."""
    import io

    from guard.commands import plan as plan_cmd

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    screen = Terminal()
    monkeypatch.setattr(plan_cmd.sys, "stderr", screen)
    now = [0.0]  # the time module is shared (rich reads it too): a clock that moves only when told
    monkeypatch.setattr(plan_cmd.time, "monotonic", lambda: now[0])
    with plan_cmd._Progress() as progress:
        now[0] = 0.5
        progress.update(1, 4)  # half a second in: nothing yet
        assert progress.bar is None
        now[0] = 1.5
        progress.update(2, 4)  # a second and a half: the bar starts
        assert progress.bar is not None
        progress.update(4, 4)
    assert "guard plan: searching layouts" in screen.getvalue()


def test_the_users_fastest_layout_is_shown_as_no_change(guard, tmp_path):
    """The user's own layout is always in the output (the `you` row); once the user runs the fastest layout the
    plan proposes, planning it again ranks it first and says so instead of proposing a change."""
    script = tmp_path / "train.sh"
    script.write_text((ROOT / "examples/memory/llama2_13b_pp4.sh").read_text())
    cfg = Settings()
    src = read(Request(paths=(str(script),)), cfg)
    best = plan(src.job, choose_gpu("A100-80GB"), top=1).candidates[0]
    fastest = tmp_path / "fastest.sh"
    fastest.write_text(write_candidate(src, best.job).after[str(script)])
    code, out, err = guard("plan", str(fastest), "--gpu", "A100-80GB", "--top", "3")
    assert code == 0, err
    rows = [line.split() for line in out.splitlines() if line.startswith(("  1 ", "you "))]
    assert [row[0] for row in rows] == ["1", "you"] and rows[0][1:10] == rows[1][1:10]  # same layout and knobs
    assert "#1: no change: this is your layout" in out


def test_close_calls_are_named_exactly_where_a_15_percent_change_reorders(tmp_path):
    """Each kind of kernel speed 15 % slower and faster, one at a time: the plan names a change exactly when
    re-pricing the first three layouts under it (the closed form the search ranks with) puts another one first."""
    from dataclasses import replace

    from guard.plan.sensitivity import KINDS
    from guard.plan.step_time import step_time

    src = read(Request(paths=(str(ROOT / "examples/memory/llama2_13b_pp4_dp2.sh"),)), Settings())
    result = plan(src.job, choose_gpu("H100-SXM"), top=3)
    named = " ".join(result.close_calls)
    for field, kind in KINDS.items():
        for factor, word in ((0.85, "slower"), (1.15, "faster")):
            base = [step_time(c.job, result.hardware).seconds for c in result.candidates]
            hw = replace(result.hardware, **{field: factor})
            times = [step_time(c.job, hw).seconds for c in result.candidates]
            reorders = min(range(len(times)), key=times.__getitem__) != min(range(len(base)), key=base.__getitem__)
            assert (f"with {kind} 15% {word}" in named) == reorders, (kind, word)
