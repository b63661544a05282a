"""--hf-config: every supported family read into an architecture whose parameter count matches the
count the model's publishers state (safetensors metadata on the Hugging Face Hub, papers)."""

from __future__ import annotations

import json

import pytest

from guard.cli import main
from guard.job.hf_config import HfConfigError, from_dict
from guard.memory.params import model_param_count

# Architecture keys of the official config.json files; expected totals as published (exact where the Hub
# shows the safetensors count, e.g. Llama-2-7b-hf "6,738,415,616 params").
CONFIGS = {
    "llama-2-7b": ({"model_type": "llama", "hidden_size": 4096, "intermediate_size": 11008, "num_hidden_layers": 32,
                    "num_attention_heads": 32, "num_key_value_heads": 32, "vocab_size": 32000,
                    "max_position_embeddings": 4096, "tie_word_embeddings": False}, 6_738_415_616),
    "llama-2-70b": ({"model_type": "llama", "hidden_size": 8192, "intermediate_size": 28672, "num_hidden_layers": 80,
                     "num_attention_heads": 64, "num_key_value_heads": 8, "vocab_size": 32000,
                     "tie_word_embeddings": False}, 68_976_648_192),
    "llama-3-8b": ({"model_type": "llama", "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
                    "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 128256,
                    "tie_word_embeddings": False}, 8_030_261_248),
    "mistral-7b": ({"model_type": "mistral", "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
                    "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 32000,
                    "tie_word_embeddings": False}, 7_241_732_096),
    "mixtral-8x7b": ({"model_type": "mixtral", "hidden_size": 4096, "intermediate_size": 14336,
                      "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
                      "vocab_size": 32000, "num_local_experts": 8, "num_experts_per_tok": 2,
                      "tie_word_embeddings": False}, 46_702_792_704),
    "qwen2.5-7b": ({"model_type": "qwen2", "hidden_size": 3584, "intermediate_size": 18944, "num_hidden_layers": 28,
                    "num_attention_heads": 28, "num_key_value_heads": 4, "vocab_size": 152064,
                    "tie_word_embeddings": False}, 7_615_616_512),
    "gpt2": ({"model_type": "gpt2", "n_embd": 768, "n_layer": 12, "n_head": 12, "n_positions": 1024,
              "vocab_size": 50257}, 124_439_808),
    "gpt-neox-20b": ({"model_type": "gpt_neox", "hidden_size": 6144, "intermediate_size": 24576,
                      "num_hidden_layers": 44, "num_attention_heads": 64, "vocab_size": 50432,
                      "tie_word_embeddings": False}, 20_554_567_680),
    "falcon-7b": ({"model_type": "falcon", "hidden_size": 4544, "num_hidden_layers": 32, "num_attention_heads": 71,
                   "vocab_size": 65024, "multi_query": True, "parallel_attn": True, "bias": False,
                   "new_decoder_architecture": False}, 6_921_720_704),
}


@pytest.mark.parametrize("name", list(CONFIGS))
def test_parameter_count_matches_the_published_count(name):
    config, expected = CONFIGS[name]
    assert model_param_count(from_dict(config, name)) == expected


def test_qwen3_moe_and_deepseek_moe_layers():
    qwen3 = from_dict({"model_type": "qwen3_moe", "hidden_size": 2048, "intermediate_size": 6144,
                       "num_hidden_layers": 48, "num_attention_heads": 32, "num_key_value_heads": 4, "head_dim": 128,
                       "vocab_size": 151936, "num_experts": 128, "num_experts_per_tok": 8,
                       "moe_intermediate_size": 768, "tie_word_embeddings": False})
    assert qwen3.qk_norm and qwen3.kv_channels == 128 and qwen3.moe_layers is None
    assert model_param_count(qwen3) == pytest.approx(30.5e9, rel=0.01)  # "Qwen3-30B-A3B: 30.5B in total"
    deepseek = from_dict({"model_type": "deepseek", "hidden_size": 2048, "intermediate_size": 10944,
                          "num_hidden_layers": 28, "num_attention_heads": 16, "vocab_size": 102400,
                          "n_routed_experts": 64, "n_shared_experts": 2, "num_experts_per_tok": 6,
                          "moe_intermediate_size": 1408, "first_k_dense_replace": 1, "moe_layer_freq": 1})
    assert deepseek.moe_layers[0] is False and all(deepseek.moe_layers[1:])
    assert deepseek.shared_expert_ffn == 2 * 1408
    assert model_param_count(deepseek) == pytest.approx(16.4e9, rel=0.02)  # "DeepSeekMoE 16B: 16.4B parameters"


@pytest.mark.parametrize("bad,message", [
    ({"model_type": "t5"}, "not supported"),
    ({"model_type": "llama", "hidden_size": 4096}, "num_attention_heads"),
    ({"model_type": "llama", "hidden_size": "big", "num_attention_heads": 32}, "hidden_size"),
])
def test_bad_configs_are_one_line_errors(bad, message):
    with pytest.raises(HfConfigError, match=message):
        from_dict(bad)


def test_cli_bad_hf_config_exits_2(tmp_path, capsys):
    path = tmp_path / "config.json"
    path.write_text("{not json")
    code = main(["estimate", "--deepspeed", "examples/deepspeed/ds_config_zero3_hf.json", "--hf-config", str(path),
                 "--world-size", "8", "--seq-length", "2048", "--micro-batch-size", "1", "--precision", "bf16"])
    err = capsys.readouterr().err
    assert code == 2 and str(path) in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_cli_hf_config_with_zero3(tmp_path, capsys):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(CONFIGS["llama-2-7b"][0]))
    code = main(["estimate", "--deepspeed", "examples/deepspeed/ds_config_zero3_hf.json", "--hf-config", str(path),
                 "--world-size", "8", "--seq-length", "2048", "--micro-batch-size", "1", "--precision", "bf16",
                 "--format", "json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and out["layout"]["zero_stage"] == 3 and len(out["ranks"]) == 8
    psi = 6_738_415_616
    comps = out["ranks"][0]["components"]
    assert comps["params"] == pytest.approx(2 * psi / 8, abs=16)  # ZeRO-3: this rank's bf16 partition
