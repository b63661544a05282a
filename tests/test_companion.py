"""`guard estimate ds_config.json` alone: the one launch script or training config near it that uses it is priced
(guard/intake/companion.py); two are named; none leaves the old refusal."""

from __future__ import annotations

import json

from conftest import run_guard

MODEL = {"model_type": "llama", "hidden_size": 256, "intermediate_size": 688, "num_hidden_layers": 2,
         "num_attention_heads": 4, "num_key_value_heads": 4, "vocab_size": 1000, "max_position_embeddings": 512}
DS = {"train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto",
      "zero_optimization": {"stage": 2}, "bf16": {"enabled": "auto"}}


def _repo(tmp_path, scripts: int):
    (tmp_path / ".git").mkdir()
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text(json.dumps(MODEL))
    (tmp_path / "configs").mkdir()
    (tmp_path / "configs" / "zero2.json").write_text(json.dumps(DS))
    (tmp_path / "scripts").mkdir()
    for i in range(scripts):
        (tmp_path / "scripts" / f"sft{i}.yaml").write_text(
            f"model_name_or_path: {tmp_path / 'model'}\nstage: sft\nfinetuning_type: full\ncutoff_len: 256\n"
            f"bf16: true\nper_device_train_batch_size: {i + 1}\ndeepspeed: {tmp_path / 'configs' / 'zero2.json'}\n")
    (tmp_path / "scripts" / "other.sh").write_text("echo zero3.json is another file\n")
    return tmp_path / "configs" / "zero2.json"


def test_the_one_job_that_uses_a_bare_deepspeed_config_is_priced(tmp_path):
    config = _repo(tmp_path, 1)
    code, out, err = run_guard("estimate", "--isolated", "--format", "json", str(config))
    assert code == 0, err
    data = json.loads(out)
    assert data["model"]["param_count"] > 0 and data["layout"]["zero_stage"] == 2
    assert any("priced as the job that uses it" in n and "sft0.yaml" in n for n in data["notes"])


def test_two_jobs_using_it_are_named_not_chosen(tmp_path):
    config = _repo(tmp_path, 2)
    code, _, err = run_guard("estimate", "--isolated", str(config))
    assert code == 2 and "sft0.yaml" in err and "sft1.yaml" in err and err.count("\n") == 1


def test_no_job_near_it_keeps_the_refusal(tmp_path):
    config = _repo(tmp_path, 0)
    code, _, err = run_guard("estimate", "--isolated", str(config))
    assert code == 2 and "does not describe the model" in err
