"""Host RAM of the HF Trainer's model save (guard/memory/save_host.py): by hand, and against DeepSpeed on 2 CPU
ranks (tests/fidelity/save_host_probe.py calls what Trainer.save_model calls and counts the host tensors)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from guard.job.finetune_config import read
from guard.intake.finetune import finetune_subject
from guard.settings import Settings
from guard.job.hf_config import from_dict
from guard.job.origin import Origin
from guard.memory import save_host
from guard.memory.estimate import estimate
from guard.job import presets
from guard.job.training_job import new_job
from guard.report.memory_json import to_dict
from guard.sources.loader import load_document
from tests.fidelity.launch import run_torchrun_probe

MODEL = {"model_type": "llama", "hidden_size": 128, "intermediate_size": 344, "num_hidden_layers": 2,
         "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 1000, "max_position_embeddings": 128,
         "tie_word_embeddings": False}
# by hand: 2 x 128,000 embedding and head + 2 layers of (q, o 128x128; k, v 128x64; gate, up, down 128x344;
# two norms of 128) + the final norm
BASE = 2 * 1000 * 128 + 2 * (2 * 128 * 128 + 2 * 128 * 64 + 3 * 128 * 344 + 2 * 128) + 128
# LoRA r=8 on every linear layer: 8 x (in + out) per module, 7 modules, 2 layers
ADAPTER = 2 * 8 * ((128 + 128) * 2 + (128 + 64) * 2 + (128 + 344) * 3)
PROBE = Path(__file__).parent / "fidelity" / "save_host_probe.py"


def _job(tmp_path: Path, stage: int, method: str, world: int = 2, gather: bool = True, deepspeed: bool = True,
         gpus_per_node: int | None = None):
    (tmp_path / "model").mkdir(parents=True, exist_ok=True)
    (tmp_path / "model" / "config.json").write_text(json.dumps(MODEL))
    (tmp_path / "ds.json").write_text(json.dumps({"train_micro_batch_size_per_gpu": "auto", "bf16": {"enabled": "auto"},
                                                  "zero_optimization": {"stage": stage}}))
    ds = f"deepspeed: {tmp_path / 'ds.json'}\n" if deepspeed else ""
    (tmp_path / "train.yaml").write_text(
        f"model_name_or_path: {tmp_path / 'model'}\nstage: sft\nfinetuning_type: {method}\nlora_rank: 8\n"
        f"lora_target: all\ncutoff_len: 64\nper_device_train_batch_size: 1\nbf16: true\n{ds}")
    ft = read(load_document(str(tmp_path / "train.yaml")))
    job = finetune_subject(ft, Settings(world_size=world, gpus_per_node=gpus_per_node or world), load=load_document, arch=from_dict(MODEL, "llama-tiny")).job
    # from_deepspeed.py keeps only the path keys of zero_optimization: the gather flag is set here by hand
    job.zero_keys[save_host.GATHER_KEY] = gather
    return job


def test_the_hand_counts():
    assert BASE == 619_136 and ADAPTER == 36_992


@pytest.mark.parametrize("stage, method, rank0, others", [
    (3, "lora", ADAPTER * 4, 0),  # only the adapter, fp32 (built after zero.Init, never cast)
    (3, "full", BASE * 2, 0),  # the whole bf16 model on rank 0
    (2, "lora", BASE * 2 + ADAPTER * 2, BASE * 2 + ADAPTER * 2),  # every rank clones base + bf16 adapter
    (1, "full", BASE * 2, BASE * 2),
])
def test_each_path_by_hand(tmp_path, stage, method, rank0, others):
    held = save_host.save_host(_job(tmp_path, stage, method))
    assert (held.rank0, held.other_ranks) == (rank0, others)


def test_zero3_without_gather_copies_nothing_and_lora_ignores_the_flag(tmp_path):
    assert save_host.save_host(_job(tmp_path, 3, "full", gather=False)).rank0 == 0
    assert save_host.save_host(_job(tmp_path, 3, "lora", gather=False)).rank0 == ADAPTER * 4


def test_ddp_saves_on_rank_0_alone(tmp_path):
    held = save_host.save_host(_job(tmp_path, 0, "lora", deepspeed=False))
    assert (held.rank0, held.other_ranks) == (ADAPTER * 4, 0)  # peft's fp32 adapter, nothing casts it
    held = save_host.save_host(_job(tmp_path, 0, "full", deepspeed=False))
    assert held.rank0 == BASE * 2  # one shard: far under 50 GB


def test_per_node_sums_the_ranks_of_rank_0s_node(tmp_path):
    job = _job(tmp_path, 2, "lora", world=4, gpus_per_node=2)
    assert save_host.host_bytes_at_save_per_node(job) == 2 * (BASE * 2 + ADAPTER * 2)


def test_largest_shard_of_a_70b_model():
    """Llama-2-70B in bf16 (137,953,296,384 B) in 50 GB shards, tensor by tensor in state-dict order. A layer is
    q, k, v, o (134,217,728 + 2 x 16,777,216 + 134,217,728 B), gate, up, down (469,762,048 B each), two norms
    (16,384 B each): 1,711,308,800 B. Shard 1: the embedding (524,288,000 B), 28 layers, and layer 28's q..up
    (1,241,513,984 B); its down_proj would pass 5e10. Shard 2: that down_proj and the norms (469,794,816 B),
    28 layers, then q..up again: 49,627,955,200 B. Shard 3 is the rest (38.6 GB): shard 1 is the largest."""
    job = new_job(arch=presets.load("llama-2-70b"), framework="deepspeed", world_size=8)
    job.hf_ddp = True
    assert save_host.largest_shard_bytes(job) == 524_288_000 + 28 * 1_711_308_800 + 1_241_513_984


def test_json_and_text_carry_it(tmp_path):
    import io

    from guard.report import memory_text

    est = estimate(_job(tmp_path, 2, "lora"))
    assert to_dict(est)["host_bytes_at_save"] == 2 * (BASE * 2 + ADAPTER * 2)
    out = io.StringIO()
    memory_text.write(est, out)
    assert "host RAM at each checkpoint save" in out.getvalue()


@pytest.mark.oracle
@pytest.mark.fidelity
@pytest.mark.slow
def test_against_deepspeed_on_two_cpu_ranks(tmp_path):
    pytest.importorskip("deepspeed")
    pytest.importorskip("peft")
    cases = {f"zero{s}_{m}": {"stage": s, "lora": m == "lora", "rank": 8} for s in (2, 3) for m in ("lora", "full")}
    model = {k: v for k, v in MODEL.items() if k != "model_type"}
    measured = run_torchrun_probe(PROBE, 2, {"model": model, "cases": cases}, tmp_path / "probe", 600)
    for name, case in cases.items():
        held = save_host.save_host(_job(tmp_path / name, case["stage"], "lora" if case["lora"] else "full"))
        assert [measured[r][name]["host_bytes"] for r in (0, 1)] == [held.rank0, held.other_ranks], name
