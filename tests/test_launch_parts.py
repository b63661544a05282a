"""guard launch's pieces on their own: the decision (numbers by hand), the simulated GPUs, the device a rank
samples, which process is a rank (the launcher records), the start-up hook (inert, once, chained, failing
closed), the context in the environment, the exchange (one decider), the command reader, and what is refused
before anything starts."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

import pytest

from guard.launch import exchange, probe
from guard.launch.context import LaunchContext, Ranks, StagePrediction
from guard.launch.decision import available, decide
from guard.launch.in_rank import NotARank, entry_point, identify
from guard.units import GIB

from conftest import ROOT, run_guard

HOOK = ROOT / "guard" / "launch" / "hook"
TORCH_VARS = [["RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE"]]


class NoPlan:
    candidates: list = []


def context(policy: str = "abort", unmodelled=(), peaks=(10, 20), lower=(4, 4), room=(0, 0.0),
            world: int | None = None) -> LaunchContext:
    """One pipeline stage per entry of `peaks`; with `world` ranks, each stage has world / stages of them."""
    stages = [StagePrediction(r, int(p * GIB), int(lo * GIB), "activations", int(0.5 * GIB))
              for r, (p, lo) in enumerate(zip(peaks, lower))]
    return LaunchContext(policy, ["micro_batch"], list(room), ["torchrun", "x.py"], {}, {}, world or len(stages),
                         stages, Ranks("torchrun", TORCH_VARS, ["torchrun"]), list(unmodelled))


def samples(*free_gib: float, source: str = "simulated", total_gib: float = 80) -> list[dict]:
    return [{"rank": r, "host": "h", "device": str(r), "total": int(total_gib * GIB), "free": int(f * GIB),
             "others": [], "source": source} for r, f in enumerate(free_gib)]


def test_every_rank_that_fits_runs():
    verdict = decide(context(), samples(15, 25), lambda *_: NoPlan())
    assert verdict.action == "run"
    assert "the tightest, rank 0, has 5.0 GiB to spare" in verdict.reason  # 15 - 10 < 25 - 20


def test_one_short_rank_aborts_and_is_named():
    verdict = decide(context(), samples(15, 19), lambda *_: NoPlan())
    assert verdict.action == "abort" and verdict.reason == "1 of 2 ranks would run out of memory"
    assert verdict.report[0].startswith("rank 1 (pipeline stage 1; h, GPU 1): needs 20.0 GiB")
    assert "short by 1.0 GiB" in verdict.report[0]


def test_the_headroom_is_taken_once():
    """80 GiB GPU, 29 GiB free, 10 % headroom (8 GiB), a 20 GiB peak: 29 - 8 = 21 >= 20, so it runs (taken twice,
    29 - 16 = 13 would abort); at 27 GiB free, 27 - 8 = 19 < 20 aborts."""
    ctx = context(peaks=(20,), lower=(4,), room=(0, 0.10))
    assert decide(ctx, samples(29), lambda *_: NoPlan()).action == "run"
    assert available(ctx, samples(29)[0], ctx.stages[0]) == 21 * GIB
    assert decide(ctx, samples(27), lambda *_: NoPlan()).action == "abort"
    sized = context(peaks=(20,), lower=(4,), room=(2 * GIB, 0.0))  # --headroom 2GiB: 21 - 2 = 19 < 20
    assert decide(sized, samples(21), lambda *_: NoPlan()).action == "abort"
    assert decide(sized, samples(22), lambda *_: NoPlan()).action == "run"


def test_a_rank_takes_the_prediction_of_its_stage():
    """8 ranks, 2 stages: ranks 0-3 are stage 0 (10 GiB), ranks 4-7 stage 1 (20 GiB); rank 5 with 15 GiB free is
    short, rank 2 with 15 GiB is not."""
    ctx = context(world=8)
    free = [79, 79, 15, 79, 79, 15, 79, 79]
    verdict = decide(ctx, samples(*free), lambda *_: NoPlan())
    assert verdict.action == "abort" and verdict.reason == "1 of 8 ranks would run out of memory"
    assert verdict.report[0].startswith("rank 5 (pipeline stage 1")


def test_a_torch_sample_already_paid_for_the_cuda_context():
    """mem_get_info runs after this process made its context; the prediction counts the context too."""
    ctx = context()
    (torch_sample,) = samples(19.6, source="torch")[:1]
    assert available(ctx, torch_sample, ctx.stages[1]) == int(19.6 * GIB) + int(0.5 * GIB)


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


def test_thousands_of_short_ranks_are_summarised():
    ctx = context(peaks=(20,), lower=(4,), world=4096)
    verdict = decide(ctx, samples(*[5] * 4096), lambda *_: NoPlan())
    assert verdict.reason == "4096 of 4096 ranks would run out of memory"
    assert len([r for r in verdict.report if r.startswith("rank ")]) == 8
    assert "... and 4088 more ranks short of memory" in verdict.report


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


# -- which process is a rank -----------------------------------------------------------------------------
@pytest.mark.parametrize(("argv", "entry"), [
    (["/usr/bin/python3", "/venv/bin/torchrun", "--nproc-per-node", "2", "x.py"], "torchrun"),
    (["python", "-u", "-m", "deepspeed.launcher.launch", "--world_info=e30=", "x.py"], "deepspeed.launcher.launch"),
    (["python", "-X", "dev", "-mtorch.distributed.run", "x.py"], "torch.distributed.run"),
    (["python", "-W", "ignore", "train.py", "--lr", "1"], "train.py"),
    (["python", "-c", "print(1)"], ""),
])
def test_the_entry_point_of_a_python_process(argv, entry):
    assert entry_point(argv) == entry


def test_ranks_agents_and_a_process_that_is_neither():
    ctx = context(world=2)
    assert identify(ctx, {"RANK": "1", "LOCAL_RANK": "1", "WORLD_SIZE": "2"}, ["python", "x.py"]) == (1, 1, 2)
    assert identify(ctx, {}, ["python", "/bin/torchrun", "x.py"]) is None  # torchrun's agent: its workers are checked
    with pytest.raises(NotARank, match="none of the rank variables of torchrun"):
        identify(ctx, {}, ["python", "helper.py"])  # several ranks expected, no way to tell which: fail closed
    alone = LaunchContext("abort", [], [0, 0.0], ["python", "x.py"], {}, {}, 1, ctx.stages[:1], Ranks("python", []))
    assert identify(alone, {}, ["python", "x.py"]) == (0, 0, 1)  # one process, no launcher: rank 0 of 1


def test_open_mpi_and_hydra_ranks_are_read_from_their_own_variables():
    from guard.launch.preflight import ranks_of
    from guard.intake.launch import read_launch
    from guard.intake.request import Request
    from guard.settings import Settings

    subject = read_launch(["mpirun", "-np", "2", "python", "show_argv.py", "--deepspeed_config",
                           str(ROOT / "tests/fixtures/launch/ds_config.json")], Request(model="gpt3-125m",
                                                                                         seq_length=2048),
                          Settings(world_size=2))
    ranks = ranks_of(subject)
    ctx = context(world=2)
    ctx.ranks = ranks
    assert ranks.launcher == "mpirun"
    assert identify(ctx, {"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_LOCAL_RANK": "1",
                          "OMPI_COMM_WORLD_SIZE": "2"}, ["python", "show_argv.py"]) == (1, 1, 2)
    assert identify(ctx, {"PMI_RANK": "0", "MPI_LOCALRANKID": "0", "PMI_SIZE": "2"}, ["python", "x"]) == (0, 0, 2)


def test_the_context_travels_in_the_environment_compressed():
    ctx = context(world=4096, peaks=[10] * 64, lower=[4] * 64)
    text = ctx.encode()
    assert text.startswith("z:") and len(text) < 8 * 1024  # 64 stages, 4096 ranks: a few KiB
    again = LaunchContext.decode(text)
    assert again.prediction(4095).pp_rank == 63 and again.prediction(0).pp_rank == 0
    assert again.world == 4096 and again.ranks.variables == TORCH_VARS


# -- the start-up hook in a real Python process ----------------------------------------------------------
def _python(code: str, env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("GUARD_", "RANK", "LOCAL_RANK", "WORLD_SIZE"))}
    return subprocess.run([sys.executable, "-c", code, *args], env={**base, **env}, capture_output=True, text=True,
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
                  {"PYTHONPATH": path, "RANK": "0", "LOCAL_RANK": "0", "GUARD_LAUNCH": "unreadable",
                   "GUARD_LAUNCH_DONE": "1234"})
    assert run.returncode == 0 and run.stdout.strip() == "1234", run.stderr


@pytest.mark.parametrize(("policy", "code"), [("abort", 3), ("warn", 0)])
def test_a_hook_that_cannot_read_its_context_fails_closed(tmp_path, policy, code):
    """An unreadable context (a bug, a truncated variable): under abort the process stops with 3 and one line,
    leaving the verdict for guard launch; under warn it runs, said so."""
    path = os.pathsep.join([str(HOOK), str(ROOT)])
    run = _python("print('SCRIPT')", {"PYTHONPATH": path, "GUARD_LAUNCH": "{not json", "GUARD_LAUNCH_POLICY": policy,
                                      "GUARD_LAUNCH_DIR": str(tmp_path)})
    assert run.returncode == code, run.stderr
    assert ("SCRIPT" in run.stdout) == (policy == "warn")
    assert run.stderr.count("\n") == 1 and "guard launch: the check failed" in run.stderr
    assert ('"action": "abort"' in (tmp_path / "verdict.json").read_text()) if policy == "abort" else True


def test_a_python_without_guard_fails_closed(tmp_path):
    """The ranks run another Python, where guard is not installed (the virtual environment's base interpreter):
    the hook cannot import the check, so the process stops rather than train unchecked."""
    base = getattr(sys, "_base_executable", sys.executable)
    run = subprocess.run([base, "-s", "-c", "print('SCRIPT')"], capture_output=True, text=True, timeout=60,
                         env={"PATH": os.environ["PATH"], "PYTHONPATH": str(HOOK), "GUARD_LAUNCH": "x"})
    if "SCRIPT" in run.stdout and run.returncode == 0 and "guard" not in run.stderr:
        pytest.skip("guard is importable from the base interpreter too")
    assert run.returncode == 3 and "SCRIPT" not in run.stdout
    assert "the check cannot run in" in run.stderr and "ModuleNotFoundError" in run.stderr


# -- the exchange: one decider, O(N) --------------------------------------------------------------------
def _store(port: int = 0):
    """A store server (port 0: a free one), or a client of the one on `port`: each rank has its own client."""
    from datetime import timedelta

    import torch.distributed as dist

    return dist.TCPStore("127.0.0.1", port, is_master=port == 0, timeout=timedelta(seconds=30),
                         wait_for_workers=False)


def test_every_rank_gets_the_deciders_one_verdict(monkeypatch):
    monkeypatch.delenv("TORCHELASTIC_USE_AGENT_STORE", raising=False)
    server, world, got = _store(), 6, {}

    def rank(r: int) -> None:
        talk = exchange.Exchange(r, world, timeout=20, store=_store(server.port))
        talk.publish({"rank": r, "free": r})
        if r == exchange.DECIDER:
            seen = talk.collect()
            talk.announce({"action": "run", "reason": f"saw {[s['rank'] for s in seen]}"})
            got[r] = f"saw {[s['rank'] for s in seen]}"
        else:
            got[r] = talk.verdict()["reason"]

    threads = [threading.Thread(target=rank, args=(r,)) for r in range(world)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert got == {r: "saw [0, 1, 2, 3, 4, 5]" for r in range(world)}


def test_a_rank_that_never_reports_is_named_not_waited_for(monkeypatch):
    """The decider of 3 ranks; ranks 1 and 2 never come: after the timeout the message names them."""
    monkeypatch.delenv("TORCHELASTIC_USE_AGENT_STORE", raising=False)
    talk = exchange.Exchange(0, 3, timeout=2, store=_store())
    talk.publish({"rank": 0})
    started = time.monotonic()
    with pytest.raises(exchange.ExchangeTimeout, match="ranks 1, 2 of 3 did not report within 2 s"):
        talk.collect()
    assert time.monotonic() - started < 10


# -- refused before anything starts --------------------------------------------------------------------
def test_the_launcher_command_is_read_with_guards_readers():
    from guard.intake.launch import read_launch, replace_config
    from guard.intake.request import Request
    from guard.settings import Settings

    subject = read_launch(["torchrun", "--nnodes", "2", "--nproc-per-node", "4", "train.py", "--deepspeed",
                           str(ROOT / "examples/memory/ds_zero3_llama2_7b.json")],
                          Request(model="llama-2-7b", seq_length=2048), Settings())
    assert subject.job.layout.world == 8 and subject.job.zero_stage == 3 and subject.command is None
    assert replace_config(["x.py", "--deepspeed=a.json", "--deepspeed_config", "a.json"], "a.json", "b.json") == \
        ["x.py", "--deepspeed=b.json", "--deepspeed_config", "b.json"]


def test_a_job_with_errors_is_not_started(tmp_path):
    code, out, err = run_guard("launch", "--model", "gpt2", "--seq-length", "1024", "--", "torchrun",
                               "--nproc-per-node", "2", "train.py", "--deepspeed_config",
                               str(ROOT / "examples/deepspeed/ds_config_broken.json"))
    assert code == 1
    assert "DS301" in err and "guard launch: not started: the job has errors" in err


@pytest.mark.parametrize(("argv", "message"), [
    (["--"], "guard launch: give the launcher command after --"),
    (["--headroom", "abc", "--", "torchrun", "x.py"], "argument --headroom: expected a size"),
    (["--headroom", "150%", "--", "torchrun", "x.py"], "argument --headroom: a percentage between 0 and 100"),
    (["--allow", "tp,warp", "--", "torchrun", "x.py"], "argument --allow: unknown knob warp"),
    (["--policy", "maybe", "--", "torchrun", "x.py"], "argument --policy: must be one of abort, warn, rewrite"),
    (["--exchange-timeout", "0", "--", "torchrun", "x.py"], "argument --exchange-timeout: must be a positive"),
    (["--", "bash", "run.sh"], "no launcher or Python program"),
    (["--model", "gpt2", "--seq-length", "1024", "--", "deepspeed", "--hostfile", "HOSTFILE", "train.py",
      "--deepspeed_config", str(ROOT / "examples/deepspeed/ds_config_zero2.json")],
     "deepspeed starts the ranks of 2 nodes itself"),
    (["--model", "gpt2", "--seq-length", "1024", "--", "srun", "--export=NONE", "--ntasks", "2", "python",
      "train.py", "--deepspeed_config", str(ROOT / "examples/deepspeed/ds_config_zero2.json")],
     "srun --export=NONE keeps guard's variables from the tasks"),
])
def test_bad_input_starts_nothing_and_is_one_line_with_exit_2(tmp_path, argv, message):
    (tmp_path / "HOSTFILE").write_text("node1 slots=8\nnode2 slots=8\n")
    argv = [str(tmp_path / "HOSTFILE") if a == "HOSTFILE" else a for a in argv]
    code, out, err = run_guard("launch", *argv)
    assert code == 2 and out == "" and err.count("\n") == 1, err
    assert message in err and "Traceback" not in err
