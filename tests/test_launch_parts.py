"""guard launch's pieces on their own: the decision (numbers by hand), the simulated GPUs, the device a rank
samples, the start-up hook (inert, once, chained), the command reader and the refusal before start."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from guard.launch import probe
from guard.launch.command import read_launch, replace_config
from guard.launch.context import LaunchContext, RankPrediction
from guard.launch.decision import available, decide, headroom
from guard.job.from_inputs import JobInputs
from guard.settings import Settings
from guard.units import GIB

from conftest import ROOT, run_guard

HOOK = ROOT / "guard" / "launch" / "hook"


class NoPlan:
    candidates: list = []


def context(policy: str = "abort", unmodelled=(), peaks=(10, 20), lower=(4, 4), room: str = "0") -> LaunchContext:
    ranks = [RankPrediction(r, 0, int(p * GIB), int(lo * GIB), "activations", int(0.5 * GIB))
             for r, (p, lo) in enumerate(zip(peaks, lower))]
    return LaunchContext(policy, ["micro_batch"], room, ["torchrun", "x.py"], {}, {}, ranks, list(unmodelled))


def samples(*free_gib: float, source: str = "simulated") -> list[dict]:
    return [{"rank": r, "host": "h", "device": str(r), "total": 80 * GIB, "free": int(f * GIB), "others": [],
             "source": source} for r, f in enumerate(free_gib)]


def test_every_rank_that_fits_runs():
    verdict = decide(context(), samples(15, 25), lambda *_: NoPlan())
    assert verdict.action == "run"
    assert "the tightest, rank 0, has 5.0 GiB to spare" in verdict.reason  # 15 - 10 < 25 - 20


def test_one_short_rank_aborts_and_is_named():
    verdict = decide(context(), samples(15, 19), lambda *_: NoPlan())
    assert verdict.action == "abort" and verdict.reason == "1 of 2 ranks would run out of memory"
    assert verdict.report[0].startswith("rank 1 (pipeline stage 0; h, GPU 1): needs 20.0 GiB")
    assert "short by 1.0 GiB" in verdict.report[0]


def test_headroom_is_taken_from_free_memory():
    assert headroom("10%", 80 * GIB) == 8 * GIB and headroom("2GiB", 80 * GIB) == 2 * GIB
    verdict = decide(context(room="10%"), samples(15, 27), lambda *_: NoPlan())  # 27 - 8 < 20
    assert verdict.action == "abort"


def test_a_torch_sample_already_paid_for_the_cuda_context():
    """mem_get_info runs after this process made its context; the prediction counts the context too."""
    ctx = context()
    (torch_sample,) = samples(19.6, source="torch")[:1]
    assert available(ctx, torch_sample, ctx.ranks[1]) == int(19.6 * GIB) + int(0.5 * GIB)


def test_unmodelled_features_abort_only_when_the_certain_part_does_not_fit():
    ctx = context(unmodelled=["fp8"])
    warned = decide(ctx, samples(15, 19), lambda *_: NoPlan())  # the peak misses, the lower bound (4) fits
    assert warned.action == "run" and "does not model some features (fp8)" in warned.reason
    aborted = decide(ctx, samples(15, 3), lambda *_: NoPlan())  # even the lower bound misses
    assert aborted.action == "abort" and "lower bound" in aborted.report[0]


def test_warn_runs_and_rewrite_without_a_layout_aborts():
    assert decide(context("warn"), samples(5, 5), lambda *_: NoPlan()).action == "run"
    verdict = decide(context("rewrite"), samples(5, 5), lambda *_: NoPlan())
    assert verdict.action == "abort" and any("no layout within --allow micro_batch fits" in r for r in verdict.report)


def test_simulated_gpus_per_local_rank():
    assert probe.simulated(0, "80GiB:78GiB,80GiB:40GiB") == (80 * GIB, 78 * GIB)
    assert probe.simulated(1, "80GiB:78GiB,80GiB:40GiB") == (80 * GIB, 40 * GIB)
    assert probe.simulated(5, "80GiB:78GiB") == (80 * GIB, 78 * GIB)  # one entry: every local rank
    with pytest.raises(probe.ProbeError, match="GUARD_SIMULATED_GPUS"):
        probe.simulated(0, "80:78")  # sizes need a unit


def test_the_device_a_rank_samples_honours_cuda_visible_devices(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,GPU-abc")
    assert probe._visible(0) == "3" and probe._visible(1) == "GPU-abc"
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert probe._visible(2) == "2"


def _python(code: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("GUARD_", "RANK", "LOCAL_RANK"))}
    return subprocess.run([sys.executable, "-c", code], env={**base, **env}, capture_output=True, text=True,
                          timeout=60)


def test_the_hook_is_inert_without_its_variable_and_chains_the_users_sitecustomize(tmp_path):
    (tmp_path / "sitecustomize.py").write_text("print('USER SITECUSTOMIZE')\n")
    path = os.pathsep.join([str(HOOK), str(tmp_path), str(ROOT)])
    run = _python("print('SCRIPT')", {"PYTHONPATH": path, "RANK": "0", "LOCAL_RANK": "0"})
    assert run.stdout.split() == ["USER", "SITECUSTOMIZE", "SCRIPT"], run.stderr


def test_the_hook_runs_once_per_rank_not_in_its_children(tmp_path):
    """A worker started by a rank inherits GUARD_LAUNCH_DONE and leaves the hook alone."""
    path = os.pathsep.join([str(HOOK), str(ROOT)])
    run = _python("import os; print(os.environ.get('GUARD_LAUNCH_DONE'))",
                  {"PYTHONPATH": path, "RANK": "0", "LOCAL_RANK": "0", "GUARD_LAUNCH": "/nonexistent",
                   "GUARD_LAUNCH_DONE": "1234"})
    assert run.returncode == 0 and run.stdout.strip() == "1234", run.stderr


def test_the_launcher_command_is_read_with_guards_readers():
    request = read_launch(["torchrun", "--nnodes", "2", "--nproc-per-node", "4", "train.py", "--deepspeed",
                           str(ROOT / "examples/memory/ds_zero3_llama2_7b.json")],
                          JobInputs(model="llama-2-7b", seq_length=2048), Settings())
    assert request.world == 8 and request.source.job.zero_stage == 3 and request.source.command is None
    assert replace_config(["x.py", "--deepspeed=a.json", "--deepspeed_config", "a.json"], "a.json", "b.json") == \
        ["x.py", "--deepspeed=b.json", "--deepspeed_config", "b.json"]


def test_a_job_with_errors_is_not_started(tmp_path):
    code, out, err = run_guard("launch", "--model", "gpt2", "--seq-length", "1024", "--", "torchrun",
                               "--nproc-per-node", "2", "train.py", "--deepspeed_config",
                               str(ROOT / "examples/deepspeed/ds_config_broken.json"))
    assert code == 1
    assert "DS301" in err and "guard launch: not started: the job has errors" in err


def test_no_command_is_a_usage_error():
    code, _, err = run_guard("launch", "--")
    assert code == 2 and err.startswith("guard launch: give the launcher command after --")


def test_a_rank_that_never_reports_is_named_not_waited_for(monkeypatch):
    """Rank 0 of 3 hosts the exchange (no agent store); ranks 1 and 2 never come: after the timeout the
    message names them."""
    import socket
    import time

    from guard.launch import exchange

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", str(port))
    monkeypatch.delenv("TORCHELASTIC_USE_AGENT_STORE", raising=False)
    talk = exchange.Exchange(0, 3, timeout=2)
    started = time.monotonic()
    with pytest.raises(exchange.ExchangeTimeout, match="ranks 1, 2 of 3 did not report within 2 s"):
        talk.gather({"rank": 0})
    assert time.monotonic() - started < 10
