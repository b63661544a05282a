"""Trainer options that change GPU memory: modelled (the weights' load dtype, the optimizer) or named unmodelled with
their key and line; never dropped silently. Expected bytes are hand counts from the model's parameter count."""

from __future__ import annotations

import json

import pytest

from conftest import run_guard

QWEN3_4B = 4_022_468_096  # Qwen/Qwen3-4B from guard's catalog (its count matches the published 4.0B: test_model_catalog)


def _estimate(tmp_path, text: str, name: str = "train.yaml") -> dict:
    path = tmp_path / name
    path.write_text(text)
    code, out, err = run_guard("estimate", "--offline", "--isolated", "--format", "json", "--gpu", "H100-SXM", str(path))
    assert code in (0, 1), err
    return json.loads(out)


@pytest.mark.parametrize("text, bytes_per_weight", [
    # TRL: ModelConfig.dtype "float32" unless written
    ("model_name_or_path: Qwen/Qwen3-4B\ndataset_name: x\nmax_length: 512\n", 4),
    ("model_name_or_path: Qwen/Qwen3-4B\ndataset_name: x\nmax_length: 512\ndtype: bfloat16\n", 2),
    ("model_name_or_path: Qwen/Qwen3-4B\ndataset_name: x\nmax_length: 512\ntorch_dtype: bfloat16\n", 2),
    # LLaMA-Factory full tuning upcasts the trainable weights to fp32, unless pure_bf16
    ("model_name_or_path: Qwen/Qwen3-4B\nstage: sft\nfinetuning_type: full\ncutoff_len: 512\nbf16: true\n", 4),
    ("model_name_or_path: Qwen/Qwen3-4B\nstage: sft\nfinetuning_type: full\ncutoff_len: 512\nbf16: true\n"
     "pure_bf16: true\n", 2),
    # axolotl: the dtype its bf16 flag resolves to
    ("base_model: Qwen/Qwen3-4B\nsequence_len: 512\nmicro_batch_size: 1\nbf16: true\ndatasets: []\n", 2),
])
def test_weights_gradients_and_torch_adamw_moments_follow_the_load_dtype(tmp_path, text, bytes_per_weight):
    parts = _estimate(tmp_path, text)["ranks"][0]["components"]
    assert parts["params"] == parts["grads"] == QWEN3_4B * bytes_per_weight
    assert parts["optimizer"] == 2 * QWEN3_4B * bytes_per_weight  # exp_avg, exp_avg_sq: zeros_like(param)


def test_an_8bit_optimizer_keeps_about_a_byte_per_state(tmp_path):
    parts = _estimate(tmp_path, "model_name_or_path: Qwen/Qwen3-4B\ndataset_name: x\nmax_length: 512\n"
                                "optim: adamw_bnb_8bit\n")["ranks"][0]["components"]
    # two uint8 states plus an fp32 scale per 256 elements (tensors under 4096 elements, the norms, keep fp32)
    assert 2 * QWEN3_4B < parts["optimizer"] < 2 * QWEN3_4B * (1 + 4 / 256) * 1.001


@pytest.mark.parametrize("line, key", [
    ("use_liger_kernel: true", "use_liger_kernel"), ("neftune_noise_alpha: 5", "neftune_noise_alpha"),
    ("torch_compile: true", "torch_compile"), ("lora_modules_to_save: [lm_head]", "lora_modules_to_save"),
    ("optim: adafactor", "optim")])
def test_options_guard_does_not_price_are_named_with_their_line(tmp_path, line, key):
    data = _estimate(tmp_path, f"model_name_or_path: Qwen/Qwen3-4B\ndataset_name: x\nmax_length: 512\n{line}\n")
    assert [(u["setting"], u["line"]) for u in data["unmodelled"]] == [(key, 4)]


def test_axolotl_and_llamafactory_spell_them_their_own_way(tmp_path):
    data = _estimate(tmp_path, "base_model: Qwen/Qwen3-4B\nsequence_len: 512\nmicro_batch_size: 1\nbf16: true\n"
                               "datasets: []\nliger_fused_linear_cross_entropy: true\noptimizer: galore_adamw\n")
    assert {u["setting"] for u in data["unmodelled"]} == {"liger_fused_linear_cross_entropy", "optimizer"}
    data = _estimate(tmp_path, "model_name_or_path: Qwen/Qwen3-4B\nstage: sft\nfinetuning_type: full\n"
                               "cutoff_len: 512\nbf16: true\nenable_liger_kernel: true\n", "lf.yaml")
    assert [u["setting"] for u in data["unmodelled"]] == ["enable_liger_kernel"]


def test_trls_bf16_default_is_not_fp16(tmp_path):
    bf16 = _estimate(tmp_path, "model_name_or_path: Qwen/Qwen3-4B\ndataset_name: x\nmax_length: 512\n")
    fp16 = _estimate(tmp_path, "model_name_or_path: Qwen/Qwen3-4B\ndataset_name: x\nmax_length: 512\nfp16: true\n",
                     "fp16.yaml")
    assert bf16["origins"]["params_dtype"].startswith("default: bf16")
    assert fp16["origins"]["params_dtype"].startswith("fp16 at ")


def test_a_vision_tower_is_named_and_the_language_model_alone_priced(tmp_path):
    data = _estimate(tmp_path, "model_name_or_path: Qwen/Qwen3-4B\ndataset_name: x\nmax_length: 512\n"
                               "vision_tower: openai/clip-vit-large-patch14-336\n")
    assert [u["setting"] for u in data["unmodelled"]] == ["vision_tower"]


def _refusal(tmp_path, files: dict[str, str], main: str) -> str:
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    code, _out, err = run_guard("estimate", "--offline", "--isolated", "--gpu", "H100-SXM", str(tmp_path / main))
    assert code == 2, err
    return err


TRAIN = ("torchrun --nproc_per_node 8 train.py --model_name_or_path Qwen/Qwen3-4B --bf16 True "
         "--per_device_train_batch_size 4 --model_max_length 2048{extra}\n")


def test_torch_fsdp_with_cpu_offload_is_refused_by_name(tmp_path):
    # TrainingArguments.fsdp (FastChat's scripts/train_vicuna_13b.sh writes exactly this)
    err = _refusal(tmp_path, {"run.sh": TRAIN.format(extra=' --fsdp "full_shard auto_wrap offload"')}, "run.sh")
    assert "torch FSDP with CPU offload" in err and "run.sh:1:" in err


@pytest.mark.parametrize("files", [
    {"run.sh": TRAIN.format(extra=' --fsdp "full_shard auto_wrap"')},
    # accelerate wraps the Trainer's model itself: its switch, or its config file's distributed_type
    {"run.sh": TRAIN.replace("torchrun --nproc_per_node 8", "accelerate launch --use_fsdp --num_processes 8")
     .format(extra="")},
    {"run.sh": TRAIN.replace("torchrun --nproc_per_node 8", "accelerate launch --config_file fsdp.yaml")
     .format(extra=""), "fsdp.yaml": "distributed_type: FSDP\nnum_processes: 8\nfsdp_config: {}\n"},
    # axolotl: fsdp_config alone (fsdp_version 2 writes no `fsdp` list); reshard_after_forward: FULL_SHARD's
    {"run.sh": "axolotl train cfg.yaml -- --num_processes 8\n", "cfg.yaml": "base_model: Qwen/Qwen3-4B\nsequence_len: 512\n"
     "micro_batch_size: 1\nbf16: true\ndatasets: []\nfsdp_version: 2\nfsdp_config:\n  reshard_after_forward: true\n"}])
def test_torch_fsdp_full_shard_shards_every_state_over_the_world(tmp_path, files):
    """FULL_SHARD over 8 ranks: torch DDP's weights, gradients and torch AdamW's two moments, each an eighth (no DDP
    gradient buckets), in the dtype the weights were loaded in."""
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    code, out, err = run_guard("estimate", "--offline", "--isolated", "--format", "json", "--gpu", "H100-SXM",
                               str(tmp_path / "run.sh"))
    assert code in (0, 1), err
    data = json.loads(out)
    comps, psi = data["ranks"][0]["components"], data["model"]["param_count"]
    w = round(comps["params"] * 8 / psi)  # the weights' bytes per parameter: the dtype they were loaded in
    assert w in (2, 4)
    assert comps["params"] == comps["grads"] == -(-psi * w // 8)
    assert comps["optimizer"] == -(-2 * psi * w // 8)
    assert any("torch FSDP (full_shard)" in note for note in data["notes"])


def test_a_programs_model_max_length_is_its_sequence_length(tmp_path):
    # Stanford Alpaca / FastChat / LLaVA: TrainingArguments subclassed with model_max_length, which the tokenizer
    # pads or truncates every sample to
    (tmp_path / "run.sh").write_text(TRAIN.format(extra=""))
    code, out, err = run_guard("estimate", "--offline", "--isolated", "--format", "json", "--gpu", "H100-SXM",
                               str(tmp_path / "run.sh"))
    assert code in (0, 1), err
    data = json.loads(out)
    assert data["origins"]["seq_length"].startswith("--model_max_length at ")
    assert not any("no sequence length" in n for n in data["notes"])


@pytest.mark.parametrize(("extra", "launcher", "params_shards", "shards"), [
    # SHARD_GRAD_OP keeps the weights whole (gathered in forward, not resharded until the step)
    (' --fsdp "shard_grad_op auto_wrap"', "torchrun --nproc_per_node 8", 1, 8),
    # HYBRID_SHARD shards within a node (8 GPUs) and replicates across the two nodes
    (' --fsdp "hybrid_shard auto_wrap"', "torchrun --nnodes 2 --nproc_per_node 8", 8, 8)])
def test_other_fsdp_strategies(tmp_path, extra, launcher, params_shards, shards):
    (tmp_path / "run.sh").write_text(TRAIN.replace("torchrun --nproc_per_node 8", launcher).format(extra=extra))
    code, out, err = run_guard("estimate", "--offline", "--isolated", "--format", "json", "--gpu", "H100-SXM",
                               str(tmp_path / "run.sh"))
    assert code in (0, 1), err
    data = json.loads(out)
    comps, psi = data["ranks"][0]["components"], data["model"]["param_count"]
    w = round(comps["grads"] * shards / psi)
    assert w in (2, 4)
    assert comps["params"] == -(-psi * w // params_shards) and comps["grads"] == -(-psi * w // shards)


def test_an_fsdp_option_transformers_does_not_know_is_refused_with_the_list(tmp_path):
    err = _refusal(tmp_path, {"run.sh": TRAIN.format(extra=' --fsdp "full_shard sharded"')}, "run.sh")
    assert "'sharded' is not an FSDP option" in err and "run.sh:1:" in err
