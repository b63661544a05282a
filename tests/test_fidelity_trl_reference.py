"""guard's reference-model term against TRL's own prepare_deepspeed on 2 CPU ranks (tests/fidelity/
trl_reference_probe.py): below ZeRO-3 a whole bf16 copy on every rank, under ZeRO-3 each rank's partition. guard is
asked the way a user asks it: `trl dpo` naming a local model folder and a DeepSpeed file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import run_guard
from tests.fidelity.launch import run_torchrun_probe

pytest.importorskip("deepspeed")
pytest.importorskip("trl")
pytestmark = [pytest.mark.fidelity, pytest.mark.oracle]

PROBE = Path(__file__).resolve().parent / "fidelity" / "trl_reference_probe.py"
MODEL = {"model_type": "llama", "hidden_size": 128, "intermediate_size": 344, "num_hidden_layers": 2,
         "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 1000, "max_position_embeddings": 128,
         "tie_word_embeddings": False}
WORLD = 2


@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    config = {k: v for k, v in MODEL.items() if k != "model_type"}
    ranks = run_torchrun_probe(PROBE, WORLD, {"model": config, "cases": {"zero2": {"stage": 2},
                                                                         "zero3": {"stage": 3}}},
                               tmp_path_factory.mktemp("trl_reference"), 900)
    return {name: [r[name]["reference_bytes"] for r in ranks] for name in ("zero2", "zero3")}


def _guard(tmp_path: Path, stage: int) -> int:
    (tmp_path / "model").mkdir(exist_ok=True)
    (tmp_path / "model" / "config.json").write_text(json.dumps(MODEL))
    (tmp_path / "ds.json").write_text(json.dumps({"train_micro_batch_size_per_gpu": "auto",
                                                  "gradient_accumulation_steps": "auto", "bf16": {"enabled": "auto"},
                                                  "zero_optimization": {"stage": stage}}))
    script = tmp_path / "run.sh"
    script.write_text(f"trl dpo --model_name_or_path {tmp_path / 'model'} --dataset_name d --max_length 64 "
                      f"--per_device_train_batch_size 1 --num_processes {WORLD} --deepspeed ds.json "
                      "--output_dir out\n")
    code, out, err = run_guard("estimate", str(script), "--format", "json")
    assert code == 0, out + err
    return json.loads(out)["ranks"][0]["components"]["reference"]


@pytest.mark.parametrize("stage", [2, 3])
def test_the_reference_model_per_rank_to_the_byte(measured, tmp_path, stage):
    every_rank = measured[f"zero{stage}"]
    assert len(set(every_rank)) == 1  # every rank holds the same
    assert _guard(tmp_path, stage) == every_rank[0]


def test_by_hand(measured):
    """The tiny Llama's 619,136 weights (tests/test_fidelity_lora_zero.py counts them): ZeRO-2 keeps all of them in
    bf16 on each rank (prepare_deepspeed's stage 0), ZeRO-3 half of them."""
    assert measured["zero2"][0] == 619_136 * 2
    assert measured["zero3"][0] == 619_136
