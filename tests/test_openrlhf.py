"""OpenRLHF's DPO as guard reads and prices it (OpenRLHF 0.11 3c3be623: cli/train_dpo.py, utils/deepspeed): both
flag spellings (dotted since 0.10.2, flat before), the DeepSpeed config it builds from its flags, a reference model
loaded as an engine of its own (adapters or not), and --ref.offload. Expected bytes are counted by hand from the
published parameter count."""

from __future__ import annotations

import json

import pytest

from conftest import run_guard

LLAMA3_8B = 8_030_261_248  # meta-llama/Meta-Llama-3-8B, its safetensors' total (the catalog's published count)
DOTTED = ("deepspeed --num_gpus 8 --module openrlhf.cli.train_dpo --model.model_name_or_path meta-llama/Meta-Llama-3-8B "
          "--train.micro_batch_size 1 --train.batch_size 256 --data.max_len 2048 --ds.zero_stage {stage} "
          "--ds.param_dtype bf16 --model.gradient_checkpointing_enable {extra}")
FLAT = ("deepspeed --num_gpus 8 --module openrlhf.cli.train_dpo --pretrain meta-llama/Meta-Llama-3-8B "
        "--micro_train_batch_size 1 --train_batch_size 256 --max_len 2048 --zero_stage {stage} --bf16 "
        "--gradient_checkpointing {extra}")


def _estimate(tmp_path, template: str, stage: int = 2, extra: str = "") -> dict:
    script = tmp_path / "train_dpo.sh"
    script.write_text(template.format(stage=stage, extra=extra) + "\n")
    code, out, err = run_guard("estimate", str(script), "--format", "json")
    assert code == 0, out + err
    return json.loads(out)


def test_both_spellings_read_the_same_job(tmp_path):
    dotted, flat = _estimate(tmp_path, DOTTED), _estimate(tmp_path, FLAT)
    assert dotted["ranks"] == flat["ranks"]
    layout = dotted["layout"]
    # train_batch_size 256 over 8 ranks of micro-batch 1: DeepSpeed accumulates 32 micro-batches
    assert (layout["world_size"], layout["micro_batch_size"], layout["num_microbatches"]) == (8, 1, 32)
    assert (layout["zero_stage"], layout["seq_length"]) == (2, 2048)


@pytest.mark.parametrize("extra", ["", "--ds.lora.rank 16"])
def test_the_reference_is_a_whole_bf16_copy_below_zero3_adapters_or_not(tmp_path, extra):
    """get_eval_ds_config runs the reference at stage 0 below ZeRO-3; train_dpo.py loads it as its own Actor even
    when the policy trains LoRA adapters."""
    comps = _estimate(tmp_path, DOTTED, extra=extra)["ranks"][0]["components"]
    assert comps["reference"] == LLAMA3_8B * 2


def test_zero3_shards_the_reference_and_ref_offload_moves_it_to_the_host(tmp_path):
    sharded = _estimate(tmp_path, DOTTED, stage=3)["ranks"][0]["components"]
    assert sharded["reference"] == sharded["params"] == LLAMA3_8B * 2 / 8
    offloaded = _estimate(tmp_path, DOTTED, stage=3, extra="--ref.offload")
    assert "reference" not in offloaded["ranks"][0]["components"]
    at_stage_2 = _estimate(tmp_path, DOTTED, extra="--ref.offload")
    assert at_stage_2["ranks"][0]["components"]["reference"] == LLAMA3_8B * 2  # DeepSpeed offloads under ZeRO-3 only
    assert any("ZeRO-3 only" in note for note in at_stage_2["notes"])


def test_chosen_and_rejected_go_through_one_forward(tmp_path):
    script = tmp_path / "sft.sh"
    script.write_text(DOTTED.replace("train_dpo", "train_sft").format(stage=2, extra="") + "\n")
    code, out, err = run_guard("estimate", str(script), "--format", "json")
    sft = json.loads(out)["ranks"][0]["components"]
    dpo = _estimate(tmp_path, DOTTED)["ranks"][0]["components"]
    assert dpo["activations"] == 2 * sft["activations"]


def test_ppo_on_ray_is_named_not_priced(tmp_path):
    """Ray PPO places actor, critic, reference, reward and vLLM on GPU groups of their own: named, exit 2."""
    script = tmp_path / "ppo.sh"
    script.write_text("python3 -m openrlhf.cli.train_ppo_ray --pretrain meta-llama/Meta-Llama-3-8B "
                      "--actor_num_gpus_per_node 8 --vllm_num_engines 4\n")
    code, out, err = run_guard("estimate", str(script))
    assert code == 2 and "not priced yet" in out + err


def test_the_hf_trainers_save_is_not_claimed_for_openrlhf(tmp_path):
    """FT011 and the host RAM at save describe Trainer.save_model; OpenRLHF saves with its own strategy."""
    script = tmp_path / "train_dpo.sh"
    script.write_text(DOTTED.format(stage=2, extra="--ds.lora.rank 16") + "\n")
    code, out, err = run_guard("check", "--format", "json", str(script))
    assert "FT011" not in out
    assert _estimate(tmp_path, DOTTED, extra="--ds.lora.rank 16")["host_bytes_at_save"] is None
