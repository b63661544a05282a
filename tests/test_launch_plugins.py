"""The launch check without the wrapper: the Megatron import hook and the deepspeed.initialize wrapper under a
real torchrun (two ranks, gloo, GPUs simulated), and the HF Trainer callback in one process."""

from __future__ import annotations

import re
import subprocess
import sys
from types import SimpleNamespace

import pytest

from test_launch import FIXTURES, MEGATRON, TIMEOUT, _env, _port

ROOT_ARGS = MEGATRON[1:]


def _torchrun(script: str, args: list[str], env: dict[str, str], cwd) -> subprocess.CompletedProcess:
    (cwd / script).write_bytes((FIXTURES / script).read_bytes())
    command = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc-per-node", "2",
               "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{_port()}", "--max-restarts", "0",
               script, *args]
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=TIMEOUT)


def test_the_megatron_plugin_aborts_before_the_script_runs(tmp_path):
    run = _torchrun("megatron_plugin.py", ROOT_ARGS, _env("80GiB:6GiB"), tmp_path)
    text = run.stdout + run.stderr
    assert run.returncode != 0 and "TRAINING STARTED" not in text
    assert "guard launch: abort: 2 of 2 ranks would run out of memory" in text
    assert re.search(r"exitcode\s*:\s*3", text)  # the ranks' own exit code


def test_the_megatron_plugin_rewrites_argv_before_megatron_parses_it(tmp_path):
    run = _torchrun("megatron_plugin.py", ROOT_ARGS, _env("80GiB:6GiB", GUARD_POLICY="rewrite"), tmp_path)
    text = run.stdout + run.stderr
    assert run.returncode == 0, text[-3000:]
    argvs = re.findall(r"TRAINING STARTED rank \d argv (\[.*?\])", text)
    assert len(argvs) == 2 and argvs[0] == argvs[1] and "'--micro-batch-size', '8'" in argvs[0]
    assert argvs[0].count("--micro-batch-size") == 2  # the plugin's value appended after the user's


def test_the_deepspeed_plugin_rewrites_the_config_it_is_given(tmp_path):
    env = _env("80GiB:8GiB", GUARD_POLICY="rewrite", GUARD_ALLOW="micro_batch", GUARD_MODEL="gpt3-125m",
               GUARD_SEQ_LENGTH="2048")
    run = _torchrun("deepspeed_plugin.py", [], env, tmp_path)
    text = run.stdout + run.stderr
    assert run.returncode == 0, text[-3000:]
    assert "guard launch: rewrite: rewritten to fit 8.0 GiB" in text
    done = re.findall(r"STEP DONE rank (\d) micro (\d+) accumulation (\d+) asked 8", text)
    assert sorted(r for r, *_ in done) == ["0", "1"]
    assert all(int(m) < 8 and int(m) * int(a) * 2 == 16 for _, m, a in done)


GPT2 = {"model_type": "gpt2", "n_embd": 768, "n_layer": 12, "n_head": 12, "n_positions": 1024, "vocab_size": 50257,
        "n_inner": None, "activation_function": "gelu_new", "tie_word_embeddings": True}


def _trainer_args(batch: int) -> SimpleNamespace:
    return SimpleNamespace(deepspeed=None, per_device_train_batch_size=batch, gradient_accumulation_steps=1,
                           gradient_checkpointing=False, bf16=True, fp16=False)


def test_the_hf_callback_stops_a_job_that_does_not_fit(monkeypatch):
    from guard.plugins.hf import GuardCallback

    monkeypatch.setenv("GUARD_SIMULATED_GPUS", "80GiB:4GiB")
    monkeypatch.delenv("GUARD_LAUNCH_DONE", raising=False)
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    model = SimpleNamespace(config=SimpleNamespace(to_dict=lambda: GPT2))
    callback = GuardCallback()
    callback.on_log(None, None, None)  # every other event is a no-op
    with pytest.raises(SystemExit) as stopped:
        callback.on_train_begin(_trainer_args(32), None, None, model=model)
    assert stopped.value.code == 3


def test_the_hf_callback_lets_a_job_that_fits_run(monkeypatch):
    from guard.plugins.hf import GuardCallback

    monkeypatch.setenv("GUARD_SIMULATED_GPUS", "80GiB:79GiB")
    monkeypatch.delenv("GUARD_LAUNCH_DONE", raising=False)
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    model = SimpleNamespace(config=SimpleNamespace(to_dict=lambda: GPT2))
    assert GuardCallback().on_train_begin(_trainer_args(1), None, None, model=model) is None
