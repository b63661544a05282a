"""guard launch end to end: real torchrun on localhost, two agents as two "nodes" of two ranks each (gloo),
GPU memory simulated with GUARD_SIMULATED_GPUS; and the pieces (decision, probe, hook) on their own."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import ROOT

FIXTURES = ROOT / "tests" / "fixtures" / "launch"
TIMEOUT = 240
MODEL = ["--model", "gpt3-125m", "--seq-length", "2048"]  # what the DeepSpeed program trains, for guard


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env(simulated: str, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GUARD_", "TORCHELASTIC", "RANK", "LOCAL_RANK"))}
    env.update(GUARD_SIMULATED_GPUS=simulated, DS_ACCELERATOR="cpu", PYTHONWARNINGS="ignore",
               OMP_NUM_THREADS="1", **extra)
    return env


def _node_command(guard_args: list[str], program: list[str], port: int, nodes: int = 2) -> list[str]:
    return [sys.executable, "-m", "guard", "launch", *guard_args, "--exchange-timeout", "60", "--",
            sys.executable, "-m", "torch.distributed.run", "--nnodes", str(nodes), "--nproc-per-node", "2",
            "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", "guard-test",
            "--max-restarts", "0", *program]


def two_nodes(guard_args: list[str], program: list[str], env: dict[str, str], cwd: Path) -> list:
    """Both nodes' guard launch, run at once; (returncode, stdout + stderr) of each."""
    port = _port()
    procs = [subprocess.Popen(_node_command(guard_args, program, port), cwd=cwd, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True) for _ in range(2)]
    out = []
    for proc in procs:
        try:
            text, _ = proc.communicate(timeout=TIMEOUT)
        except subprocess.TimeoutExpired:
            for p in procs:
                p.kill()
            pytest.fail("guard launch hung")
        out.append((proc.returncode, text))
    return out


def _ran(results) -> bool:
    """Both nodes exited 0, or a node's agent lost the rendezvous store when the other agent (its host) had
    already exited after the job finished: torchrun's own shutdown race on one machine, not guard's doing."""
    def ok(code: int, text: str) -> bool:
        race = "DistNetworkError" in text and "Failed to recv" in text and "elastic_launch" in text
        return code == 0 or (code == 1 and race)

    return all(ok(code, text) for code, text in results)


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    for name in ("show_argv.py", "ds_step.py", "ds_config.json"):
        (tmp_path / name).write_bytes((FIXTURES / name).read_bytes())
    # the same config for one node of two ranks: 8 x 1 x 2
    config = (FIXTURES / "ds_config.json").read_text().replace('"train_batch_size": 32', '"train_batch_size": 16')
    (tmp_path / "ds16.json").write_text(config)
    return tmp_path


def test_abort_exits_3_and_names_the_short_ranks(workdir):
    # local rank 1 of each node has 6 GiB free: global ranks 1 and 3 cannot hold gpt3-125m at micro-batch 8 (fp32)
    results = two_nodes(MODEL, ["show_argv.py", "--deepspeed_config", "ds_config.json"],
                        _env("80GiB:79GiB,80GiB:6GiB"), workdir)
    assert [code for code, _ in results] == [3, 3]
    text = "".join(t for _, t in results)
    assert "TRAINING STARTED" not in text  # no rank reached the training script
    assert "guard launch: abort: 2 of 4 ranks would run out of memory" in text
    assert "rank 1 (pipeline stage 0" in text and "rank 3 (pipeline stage 0" in text
    assert "rank 0 (" not in text and "rank 2 (" not in text
    assert "nearest layouts that fit" in text and "simulated by GUARD_SIMULATED_GPUS" in text


def test_warn_reports_and_runs(workdir):
    results = two_nodes(MODEL + ["--policy", "warn"], ["show_argv.py", "--deepspeed_config", "ds_config.json"],
                        _env("80GiB:1GiB"), workdir)
    assert _ran(results)
    text = "".join(t for _, t in results)
    assert "guard launch: run: 4 of 4 ranks would run out of memory" in text
    assert text.count("TRAINING STARTED") == 4


def test_a_job_that_fits_runs_untouched(workdir):
    results = two_nodes(MODEL, ["show_argv.py", "--deepspeed_config", "ds_config.json"], _env("80GiB:79GiB"),
                        workdir)
    assert _ran(results)
    text = "".join(t for _, t in results)
    assert "guard launch: run: every rank fits" in text
    assert text.count("argv ['--deepspeed_config', 'ds_config.json']") == 4


def test_rewrite_runs_a_real_deepspeed_step_on_the_new_config(workdir):
    original = (workdir / "ds_config.json").read_bytes()
    results = two_nodes(MODEL + ["--policy", "rewrite", "--allow", "micro_batch"],
                        ["ds_step.py", "--deepspeed_config", "ds_config.json"], _env("80GiB:8GiB"), workdir)
    text = "".join(t for _, t in results)
    assert _ran(results), text[-3000:]
    assert "guard launch: rewrite: rewritten to fit 8.0 GiB" in text
    # ranks print at once into one pipe: lines may be glued, so read the records, not the lines
    done = re.findall(r"STEP DONE rank (\d) micro (\d+) accumulation (\d+) config (\S+?) matches (True|False)", text)
    assert sorted(rank for rank, *_ in done) == ["0", "1", "2", "3"]
    for rank, micro, accumulation, config, matches in done:
        # micro-batch x accumulation x 4 ranks keeps the global batch of 32, with a smaller micro-batch
        assert int(micro) < 8 and int(micro) * int(accumulation) * 4 == 32 and matches == "True"
        assert "guard-launch-" in config and config.endswith(f"rank{rank}-ds_config.json")
    assert (workdir / "ds_config.json").read_bytes() == original  # the user's file, byte for byte


def test_a_rank_that_dies_in_the_exchange_does_not_hang_the_job(workdir):
    # local rank 1's sample cannot be read: it stops at once; the others must not wait for it forever
    started = time.monotonic()
    results = two_nodes(MODEL, ["show_argv.py", "--deepspeed_config", "ds_config.json"],
                        _env("80GiB:79GiB,nonsense"), workdir)
    assert time.monotonic() - started < TIMEOUT
    assert all(code != 0 for code, _ in results)
    text = "".join(t for _, t in results)
    assert "TRAINING STARTED" not in text
    assert "GUARD_SIMULATED_GPUS='nonsense'" in text or "nonsense" in text


def test_sigterm_reaches_the_launcher(workdir):
    command = _node_command(MODEL + ["--policy", "warn"], ["show_argv.py", "--deepspeed_config", "ds16.json"],
                            _port(), nodes=1)
    proc = subprocess.Popen(command, cwd=workdir, env=_env("80GiB:79GiB", SLEEP_SECONDS="120"),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + TIMEOUT
    seen = ""
    while "TRAINING STARTED" not in seen and time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        seen += line
    assert "TRAINING STARTED" in seen
    sent = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    rest, _ = proc.communicate(timeout=60)
    assert time.monotonic() - sent < 60  # the workers did not sleep their 120 s out
    assert proc.returncode != 0  # the launcher's own exit code after SIGTERM
    assert "SIGTERM" in rest or "Signal 15" in rest or proc.returncode in (-15, 143, 1)


MEGATRON = ["show_argv.py", "--num-layers", "12", "--hidden-size", "768", "--num-attention-heads", "12",
            "--seq-length", "2048", "--max-position-embeddings", "2048", "--micro-batch-size", "8",
            "--global-batch-size", "32", "--vocab-size", "50257", "--bf16", "--lr", "1e-4", "--train-iters", "10"]


def test_rewrite_appends_megatron_flags_every_rank_reads_the_same(workdir):
    command = _node_command(["--policy", "rewrite"], MEGATRON, _port(), nodes=1)
    run = subprocess.run(command, cwd=workdir, env=_env("80GiB:6GiB"), capture_output=True, text=True,
                         timeout=TIMEOUT)
    text = run.stdout + run.stderr
    assert run.returncode == 0, text[-3000:]
    argvs = re.findall(r"TRAINING STARTED rank (\d) argv (\[.*?\])", text)
    assert len(argvs) == 2 and argvs[0][1] == argvs[1][1]  # the same rewrite on every rank
    import ast

    from guard.intake.launch import read_launch
    from guard.intake.request import Request
    from guard.memory.estimate import estimate
    from guard.settings import Settings

    argv = ast.literal_eval(argvs[0][1])
    assert argv[:len(MEGATRON) - 1] == MEGATRON[1:]  # appended, nothing of the user's removed
    job = read_launch(["torchrun", "--nproc-per-node", "2", "show_argv.py", *argv], Request(), Settings()).job
    assert job.micro_batch < 8 and job.global_batch == 32  # argparse keeps the last of a repeated flag
    assert estimate(job).peak_stage.peak_bytes <= 6 * 2**30


def test_the_deepspeed_launcher_and_a_real_step(workdir):
    """deepspeed's launcher has no agent store: rank 0 hosts the exchange on MASTER_PORT and frees it before
    deepspeed.init_distributed binds it."""
    launcher = Path(sys.executable).with_name("deepspeed")  # the one installed beside this Python
    command = [sys.executable, "-m", "guard", "launch", *MODEL, "--exchange-timeout", "60", "--",
               str(launcher) if launcher.exists() else "deepspeed",
               "--num_gpus", "2", "--master_port", str(_port()), "ds_step.py", "--deepspeed_config", "ds16.json"]
    run = subprocess.run(command, cwd=workdir, env=_env("80GiB:79GiB"), capture_output=True, text=True,
                         timeout=TIMEOUT)
    text = run.stdout + run.stderr
    assert run.returncode == 0, text[-3000:]
    assert "guard launch: run: every rank fits" in text
    assert sorted(re.findall(r"STEP DONE rank (\d)", text)) == ["0", "1"]
