"""guard's post-training terms against TRL's own trainers run one step on CPU (tests/fidelity/trl_trainer_probe.py):
DPO's chosen and rejected rows in one policy forward and its reference model, the tokens TRL's fused LM head scores
(on the compact path CUDA takes), the completions GRPO generates in one call, and transformers' KV cache for a batch
of completions, to the byte."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.fidelity.launch import run_bounded

pytest.importorskip("trl")
pytestmark = [pytest.mark.fidelity, pytest.mark.oracle]

PROBE = Path(__file__).resolve().parent / "fidelity" / "trl_trainer_probe.py"
MODEL = {"hidden_size": 64, "intermediate_size": 172, "num_hidden_layers": 2, "num_attention_heads": 4,
         "num_key_value_heads": 2, "vocab_size": 203, "max_position_embeddings": 256, "tie_word_embeddings": False,
         "bos_token_id": 1, "eos_token_id": 1, "pad_token_id": 0}
SPEC = {"model": MODEL,
        "dpo": {"micro_batch": 2, "prompt": 6, "completion": 5, "max_length": 64},
        "grpo": {"micro_batch": 2, "num_generations": 2, "steps_per_generation": 2, "prompt": 6, "completion": 8},
        "generate": {"batch": 3, "prompt": 7, "new_tokens": 5}}
ZERO2 = {"train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto", "bf16": {"enabled": "auto"},
         "zero_optimization": {"stage": 2}}


@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    import sys

    work = tmp_path_factory.mktemp("trl_trainers")
    (work / "spec.json").write_text(json.dumps(SPEC))
    done = run_bounded([sys.executable, str(PROBE), str(work / "spec.json"), str(work / "out.json")], timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads((work / "out.json").read_text())


def _job(tmp_path: Path, command: str, seq_length: int | None = None):
    from guard.intake.read import read
    from guard.intake.request import Request
    from guard.settings import Settings

    (tmp_path / "model").mkdir(exist_ok=True)
    (tmp_path / "model" / "config.json").write_text(json.dumps({"model_type": "llama", **MODEL}))
    (tmp_path / "ds.json").write_text(json.dumps(ZERO2))
    script = tmp_path / "run.sh"
    script.write_text(f"trl {command} --model_name_or_path {tmp_path / 'model'} --dataset_name d --output_dir out "
                      "--num_processes 1 --deepspeed ds.json\n")
    return read(Request(paths=(str(script),), seq_length=seq_length), Settings()).job


def test_dpo_runs_chosen_and_rejected_through_one_forward(measured, tmp_path):
    job = _job(tmp_path, "dpo --per_device_train_batch_size 2 --max_length 11")
    assert [rows for rows, _ in measured["dpo"]["rows"]] == [job.rows] == [4]
    assert measured["dpo"]["reference_kept"] and job.post_training.reference == "replica"


def test_dpo_scores_policy_and_reference_through_the_fused_head(measured, tmp_path):
    """Two fused-head calls per step (the policy's, then the reference's inside the same loss: guard's reference
    forward phase); each scores the completion tokens, never more than guard's rows x sequence."""
    job = _job(tmp_path, "dpo --per_device_train_batch_size 2 --max_length 11")
    scored = measured["dpo"]["scored"]
    assert len(scored) == 2 and scored[0] == scored[1]
    longest = max(length for _, length in measured["dpo"]["rows"])
    assert scored[0] <= job.rows * min(job.scored_tokens, longest)
    from guard.memory.post_training import reference_forward_bytes

    assert reference_forward_bytes(job) > 0


def test_grpo_generates_and_scores_what_guard_prices(measured, tmp_path):
    """One generate call over per_device_train_batch_size x steps_per_generation completions; every training forward
    scores micro-batch x max_completion_length tokens (the completions ran to their limit)."""
    job = _job(tmp_path, "grpo --per_device_train_batch_size 2 --num_generations 2 --steps_per_generation 2 "
               "--max_completion_length 8")
    assert measured["grpo"]["generated"] == [job.post_training.generating] == [4]
    assert set(measured["grpo"]["scored"]) == {job.rows * job.scored_tokens} == {16}


def test_the_kv_cache_of_a_batch_of_completions_to_the_byte(measured, tmp_path):
    """transformers' DynamicCache after generate: K and V of every layer for every position but the last generated
    one (7 prompt + 5 new - 1 = 11), bf16; guard prices the rank's completions at the sequence it is given."""
    from guard.memory.params import rank_inventory
    from guard.memory.post_training import generation_bytes
    from guard.memory.states import model_states

    run = measured["generate"]
    assert run["cached_positions"] == 7 + 5 - 1
    job = _job(tmp_path, "grpo --per_device_train_batch_size 3 --num_generations 3 --steps_per_generation 1",
               seq_length=run["cached_positions"])
    inv = rank_inventory(job, job.chunks[0])
    assert job.post_training.generating == 3
    assert generation_bytes(job, inv, model_states(job, inv, None, job.chunks[0])) == run["cache_bytes"]
    assert run["cache_bytes"] == 2 * 2 * 2 * 16 * 2 * 11 * 3  # K,V x layers x KV heads x head dim x bf16 x pos x rows
