"""Issue 25's six symptoms of one cause, each as it was seen: guard launch let a job run unchecked, and check and
estimate disagreed, because each read the job its own way. Now one intake reads it, and they cannot."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from conftest import ROOT, run_guard

FIXTURES = ROOT / "tests" / "fixtures" / "launch"
# Llama-2-13B's shape on one GPU: ~250 GiB of model states, where 24 GiB are free
MEGATRON_13B = ["--num-layers", "40", "--hidden-size", "5120", "--num-attention-heads", "40", "--seq-length", "4096",
                "--max-position-embeddings", "4096", "--micro-batch-size", "1", "--vocab-size", "32000", "--bf16"]


def _launch(workdir: Path, *argv: str, free: str = "24GiB:23GiB", **env: str) -> subprocess.CompletedProcess:
    (workdir / "show_argv.py").write_bytes((FIXTURES / "show_argv.py").read_bytes())
    base = {k: v for k, v in os.environ.items() if not k.startswith(("GUARD_", "RANK", "LOCAL_RANK", "WORLD_SIZE"))}
    base.update(GUARD_SIMULATED_GPUS=free, PYTHONWARNINGS="ignore", OMP_NUM_THREADS="1", **env)
    return subprocess.run([sys.executable, "-m", "guard", "launch", *argv], cwd=workdir, env=base,
                          capture_output=True, text=True, timeout=240)


def test_a_single_python_process_is_rank_0_of_1_and_is_checked(tmp_path):
    """`guard launch --policy abort -- python train.py <13B flags>` on one 24 GiB GPU started the job unchecked
    (no RANK, no LOCAL_RANK): it is rank 0 of 1, and aborts."""
    run = _launch(tmp_path, "--policy", "abort", "--", sys.executable, "show_argv.py", *MEGATRON_13B)
    assert run.returncode == 3 and "TRAINING STARTED" not in run.stdout, run.stderr[-2000:]
    assert "guard launch: abort: 1 of 1 ranks would run out of memory" in run.stderr


def test_mpirun_ranks_are_armed_by_open_mpis_variables(tmp_path):
    """`guard launch -- mpirun -np 2 python train.py` ran unchecked: Open MPI sets OMPI_COMM_WORLD_RANK, not RANK."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    shutil.copy(FIXTURES / "fakes" / "mpirun", bin_dir / "mpirun")
    path = os.pathsep.join([str(bin_dir), os.environ["PATH"]])
    run = _launch(tmp_path, "--", "mpirun", "-np", "2", "-x", "GUARD_SIMULATED_GPUS", "-x", "MASTER_PORT",
                  sys.executable, "show_argv.py", *MEGATRON_13B, "--tensor-model-parallel-size", "2",
                  PATH=path, MASTER_PORT=str(_port()), CUDA_DEVICE_MAX_CONNECTIONS="1")
    assert run.returncode == 3 and "TRAINING STARTED" not in run.stdout, run.stderr[-2000:]
    assert "guard launch: abort: 2 of 2 ranks would run out of memory" in run.stderr


def _port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_bad_headroom_stops_before_anything_starts(tmp_path):
    """`--headroom abc` was parsed raw in each rank: every rank printed 'Error in sitecustomize' and trained."""
    run = _launch(tmp_path, "--headroom", "abc", "--", sys.executable, "show_argv.py", *MEGATRON_13B)
    assert run.returncode == 2 and run.stdout == "" and "TRAINING STARTED" not in run.stdout
    assert run.stderr.count("\n") == 1 and "argument --headroom" in run.stderr


def test_zero_optimization_true_is_stage_1_for_check_and_estimate(tmp_path):
    """DeepSpeed's read_zero_config_deprecated reads `"zero_optimization": true` as stage 1; estimate priced 0."""
    base = {"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1, "bf16": {"enabled": True}}
    (tmp_path / "bool.json").write_text(json.dumps({**base, "zero_optimization": True}))
    (tmp_path / "one.json").write_text(json.dumps({**base, "zero_optimization": {"stage": 1}}))
    code, out, _ = run_guard("check", "--isolated", str(tmp_path / "bool.json"), "--format", "json")
    assert any(d["code"] == "DS104" and "true means stage 1" in d["message"] for d in json.loads(out))
    job = ["--model", "llama-2-7b", "--seq-length", "2048", "--world-size", "8", "--format", "json"]
    _, written_bool, _ = run_guard("estimate", str(tmp_path / "bool.json"), *job)
    _, written_one, _ = run_guard("estimate", str(tmp_path / "one.json"), *job)
    as_bool, as_one = json.loads(written_bool), json.loads(written_one)
    assert as_bool["layout"]["zero_stage"] == 1
    assert [r["components"] for r in as_bool["ranks"]] == [r["components"] for r in as_one["ranks"]]


def test_layers_left_for_no_middle_stage_are_refused_by_check_and_estimate():
    """8 layers, 4 stages, 4 first and 4 last: megatron-core's 'Mismatch: 0 middle layers remaining but 2 middle
    PP stages available'. check said MLM108 and estimate said FITS with two empty stages."""
    args = ("--num-layers 8 --hidden-size 1024 --num-attention-heads 16 --seq-length 1024 --max-position-embeddings "
            "1024 --micro-batch-size 1 --pipeline-model-parallel-size 4 --decoder-first-pipeline-num-layers 4 "
            "--decoder-last-pipeline-num-layers 4 --vocab-size 32000 --bf16")
    message = "Mismatch: 0 middle layers remaining but 2 middle PP stages available"
    code, out, _ = run_guard("check", "--isolated", "--megatron-args", args, "--world-size", "4")
    assert code == 1 and "MLM108" in out and message in out
    code, out, err = run_guard("estimate", "--isolated", "--megatron-args", args, "--world-size", "4", "--gpu",
                               "H100-SXM")
    assert code == 2 and out == "" and message in err and "FITS" not in err


def test_the_readmes_fine_tuning_example_gets_a_plan():
    """`guard plan examples/finetune/llama3_lora_sft.yaml --world-size 8 --gpu A100-80GB` ended in an internal
    error: the planner's rule check expected a command or a DeepSpeed config. Candidates are judged in memory."""
    code, out, err = run_guard("plan", str(ROOT / "examples/finetune/llama3_lora_sft.yaml"), "--world-size", "8",
                               "--gpu", "A100-80GB", "--format", "json")
    assert code == 0 and "internal error" not in err, err
    report = json.loads(out)
    assert report["candidates"] and all(c["layout"]["world_size"] == 8 for c in report["candidates"])
    assert all(c["peak_bytes"] <= report["gpu"]["capacity_bytes"] for c in report["candidates"])
    assert all(any("does not write LLaMA-Factory" in r for r in c["refused"]) for c in report["candidates"])


def test_a_bug_is_a_traceback_that_asks_for_a_report(monkeypatch, capsys):
    """Bad input is one line and exit 2; anything else is guard's own bug: the traceback and where to send it."""
    from guard import cli
    from guard.commands import check

    def broken(args, settings):
        raise KeyError("a bug")

    monkeypatch.setattr(check, "run", broken)
    code = cli.main(["check", "--isolated", str(ROOT / "examples/deepspeed/ds_config_zero2.json")])
    err = capsys.readouterr().err
    assert code == cli.BUG and "Traceback (most recent call last)" in err and "KeyError: 'a bug'" in err
    assert "please report it" in err
