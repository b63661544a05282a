"""Training configs of LLaMA-Factory, axolotl and TRL: read with the frameworks' defaults, judged as a pair with
the DeepSpeed file they name, and priced (the shapes of the frameworks' own examples, written here)."""

from __future__ import annotations

import json

import pytest

from conftest import run_guard

DS_AUTO = {"train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto",
           "gradient_accumulation_steps": "auto", "gradient_clipping": "auto", "bf16": {"enabled": "auto"},
           "zero_optimization": {"stage": 3, "reduce_bucket_size": "auto",
                                 "stage3_gather_16bit_weights_on_model_save": True}}


def _write(tmp_path, name: str, text: str, ds: dict | None = None):
    if ds is not None:
        (tmp_path / "ds.json").write_text(json.dumps(ds))
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def _codes(out: str) -> list[str]:
    return sorted(word for line in out.splitlines() for word in line.split() if word[:2] == "FT" and word[2:].isdigit())


def test_llamafactory_lora_zero3_passes_and_prices_the_adapter(tmp_path):
    path = _write(tmp_path, "sft.yaml", "model_name_or_path: meta-llama/Meta-Llama-3-8B-Instruct\nstage: sft\n"
                  "finetuning_type: lora\nlora_rank: 16\nlora_target: all\ncutoff_len: 2048\n"
                  "per_device_train_batch_size: 1\ngradient_accumulation_steps: 8\nbf16: true\ndeepspeed: ds.json\n",
                  DS_AUTO)
    code, out, _ = run_guard("check", path)
    assert code == 0, out
    code, out, _ = run_guard("estimate", path, "--world-size", "8", "--format", "json")
    data = json.loads(out)
    assert code == 0 and data["model"]["trainable_param_count"] == 41_943_040  # peft's count, by hand in
    assert data["layout"]["zero_stage"] == 3 and data["layout"]["seq_length"] == 2048  # test_lora_memory.py


def test_mismatch_between_training_config_and_deepspeed_file_is_an_error(tmp_path):
    ds = dict(DS_AUTO, gradient_accumulation_steps=4, bf16={"enabled": True})
    path = _write(tmp_path, "qlora.yml", "base_model: meta-llama/Llama-2-7b-hf\nadapter: qlora\nload_in_4bit: true\n"
                  "sequence_len: 2048\nmicro_batch_size: 2\ngradient_accumulation_steps: 2\nbf16: false\n"
                  "fp16: true\ngradient_checkpointing: true\ndeepspeed: ds.json\ndatasets: []\n", ds)
    code, out, _ = run_guard("check", path)
    assert code == 1
    assert _codes(out) == ["FT001", "FT001", "FT006"], out  # GAS 4 vs 2, bf16 true vs false; QLoRA + non-reentrant


def test_sequence_length_left_to_the_default_and_beyond_positions(tmp_path):
    missing = _write(tmp_path, "a.yml", "base_model: meta-llama/Llama-2-7b-hf\nadapter: lora\nmicro_batch_size: 1\n")
    assert _codes(run_guard("check", missing)[1]) == ["FT003"]
    beyond = _write(tmp_path, "b.yaml", "model_name_or_path: meta-llama/Llama-2-7b-hf\nfinetuning_type: lora\n"
                    "cutoff_len: 8192\n")
    code, out, _ = run_guard("check", beyond)
    assert _codes(out) == ["FT004"] and "4096" in out


def test_eight_bit_under_zero3_and_an_unknown_target(tmp_path):
    path = _write(tmp_path, "c.yaml", "model_name_or_path: Qwen/Qwen2.5-7B\nfinetuning_type: lora\ncutoff_len: 1024\n"
                  "quantization_bit: 8\nlora_target: q_proj,c_attn\nbf16: true\ndeepspeed: ds.json\n", DS_AUTO)
    assert _codes(run_guard("check", path)[1]) == ["FT005", "FT008"]


def test_missing_deepspeed_file(tmp_path):
    path = _write(tmp_path, "d.yaml", "model_name_or_path: x\nfinetuning_type: lora\ncutoff_len: 1024\n"
                  "deepspeed: nowhere.json\n")
    assert _codes(run_guard("check", path)[1]) == ["FT002"]


def test_unknown_model_is_a_one_line_error(tmp_path):
    path = _write(tmp_path, "e.yaml",
                  "model_name_or_path: someone/unknown-7b\nfinetuning_type: lora\ncutoff_len: 512\n")
    code, _, err = run_guard("estimate", path)
    assert code == 2 and "give --hf-config" in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("dropout,extra", [(0.0, 0), (0.1, 1)])
def test_trl_defaults(tmp_path, dropout, extra):
    """TRL's ModelConfig: lora_r 16 on peft's default targets (q_proj, v_proj for Llama)."""
    path = _write(tmp_path, "trl.yaml", f"model_name_or_path: mistralai/Mistral-7B-v0.1\nuse_peft: true\n"
                  f"lora_dropout: {dropout}\nmax_length: 2048\nper_device_train_batch_size: 1\nbf16: true\n")
    code, out, _ = run_guard("estimate", path, "--format", "json")
    data = json.loads(out)
    # q: 16 x (4096 + 4096), v: 16 x (4096 + 1024), 32 layers
    assert code == 0 and data["model"]["trainable_param_count"] == 32 * 16 * (8192 + 5120)
    assert data["model"]["adapter"]["targets"] == ["q_proj", "v_proj"] and data["layout"]["zero_stage"] == 0


def test_a_batch_the_trainer_fills_is_not_pinned_to_one_world(tmp_path):
    """train_batch_size "auto": the Trainer writes world x 1 x 8 at each launch (here torchrun's 8 ranks), so the
    filled file draws no DS305; a train_batch_size written as 64 does pin the job to 64 / (1 x 8) = 8 ranks."""
    (tmp_path / "ds.json").write_text(json.dumps(DS_AUTO))
    script = tmp_path / "run.sh"
    script.write_text("torchrun --nproc_per_node 8 train.py --model_name_or_path meta-llama/Meta-Llama-3-8B-Instruct "
                      "--per_device_train_batch_size 1 --gradient_accumulation_steps 8 --bf16 --deepspeed ds.json "
                      "--max_length 2048 --output_dir out\n")
    code, out, _ = run_guard("check", str(script))
    assert code == 0 and "DS305" not in out, out
    path = _write(tmp_path, "sft.yaml", "model_name_or_path: meta-llama/Meta-Llama-3-8B-Instruct\nstage: sft\n"
                  "finetuning_type: lora\ncutoff_len: 2048\nper_device_train_batch_size: 1\n"
                  "gradient_accumulation_steps: 8\nbf16: true\ndeepspeed: ds.json\n",
                  dict(DS_AUTO, train_batch_size=64))
    code, out, _ = run_guard("check", path)
    assert code == 0 and "DS305" in out and "data-parallel size of 8" in out, out
