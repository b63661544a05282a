"""A model named as a Hub id reaches the model: the Hugging Face cache as huggingface_hub lays it out, guard's catalog,
the Hub (a stand-in download; tests never touch the network), and one refusal naming the three ways to supply it."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

from conftest import run_guard
from guard.job import hub_cache, model_ref
from guard.job.hf_config import HfConfigError, from_dict

# a Llama-shaped config with numbers no catalog entry has, so the answer can only come from the file written here
ODD = {"model_type": "llama", "hidden_size": 1536, "intermediate_size": 4608, "num_hidden_layers": 7,
       "num_attention_heads": 12, "num_key_value_heads": 4, "vocab_size": 40000, "tie_word_embeddings": False}


def _snapshot(cache: Path, repo: str, commit: str, config: dict, ref: str | None = "main") -> Path:
    """The layout huggingface_hub's cache uses (file_download.py: models--org--name/{refs,snapshots})."""
    folder = cache / ("models--" + repo.replace("/", "--"))
    (folder / "snapshots" / commit).mkdir(parents=True)
    (folder / "snapshots" / commit / "config.json").write_text(json.dumps(config))
    if ref:
        (folder / "refs").mkdir(exist_ok=True)
        (folder / "refs" / ref).write_text(commit)
    return folder / "snapshots" / commit / "config.json"


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    return tmp_path / "hub"


def test_the_cache_answers_with_the_snapshot_its_main_ref_names(cache):
    _snapshot(cache, "acme/odd-7l", "a" * 40, {**ODD, "num_hidden_layers": 99}, ref=None)
    path = _snapshot(cache, "acme/odd-7l", "b" * 40, ODD)
    arch, how = model_ref.resolve("acme/odd-7l", offline=True)
    assert (arch.num_layers, arch.hidden, arch.query_groups, arch.vocab) == (7, 1536, 4, 40000)
    assert "Hugging Face cache" in how and str(path) in how


def test_a_named_revision_is_its_own_snapshot_or_nothing(cache):
    _snapshot(cache, "acme/odd-7l", "c" * 40, ODD)
    assert hub_cache.cached_config("acme/odd-7l", "c" * 40) is not None  # a commit names its snapshot
    (cache / "models--acme--odd-7l" / "refs" / "v2").write_text("d" * 40)  # a ref whose snapshot is not cached
    assert hub_cache.cached_config("acme/odd-7l", "v2") is None


def test_hf_home_places_the_cache_when_hf_hub_cache_is_unset(tmp_path, monkeypatch):
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.delenv("HUGGINGFACE_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "home"))
    assert hub_cache.cache_dir() == tmp_path / "home" / "hub"
    monkeypatch.delenv("HF_HOME")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert hub_cache.cache_dir() == tmp_path / "xdg" / "huggingface" / "hub"


def test_a_local_folder_wins_over_the_cache(cache, tmp_path):
    _snapshot(cache, "acme/odd-7l", "e" * 40, {**ODD, "num_hidden_layers": 3})
    local = tmp_path / "acme" / "odd-7l"
    local.mkdir(parents=True)
    (local / "config.json").write_text(json.dumps(ODD))
    arch, how = model_ref.resolve("acme/odd-7l", str(tmp_path), offline=True)
    assert arch.num_layers == 7 and how == str(local / "config.json")


def test_catalog_names_variants_and_mirrors_share_one_architecture(cache):
    base, how = model_ref.resolve("meta-llama/Llama-3.1-8B", offline=True)
    mirror, _ = model_ref.resolve("NousResearch/Meta-Llama-3.1-8B", offline=True)
    instruct, _ = model_ref.resolve("meta-llama/Llama-3.1-8B-Instruct", offline=True)
    assert "catalog" in how and base == mirror == instruct
    # Llama 3.1 8B's published shape (Meta's model card: 32 layers, 4096 wide, 8 KV heads, 128K vocabulary)
    assert (base.num_layers, base.hidden, base.query_groups, base.vocab) == (32, 4096, 8, 128256)


def test_the_hub_is_asked_for_config_json_alone(cache, monkeypatch):
    asked = []

    def download(repo_id, filename, revision=None, etag_timeout=None):
        asked.append((repo_id, filename))
        return str(_snapshot(cache, repo_id, "f" * 40, ODD))

    monkeypatch.setattr("huggingface_hub.hf_hub_download", download)
    monkeypatch.delenv("HF_HUB_OFFLINE")
    arch, how = model_ref.resolve("acme/fresh-model")
    assert asked == [("acme/fresh-model", "config.json")] and arch.num_layers == 7 and "the Hub" in how


def test_a_hub_that_does_not_answer_is_given_up_on_quickly(cache, monkeypatch):
    release = threading.Event()
    monkeypatch.setattr("huggingface_hub.hf_hub_download", lambda *a, **k: release.wait(30))
    monkeypatch.setattr(hub_cache, "HUB_TIMEOUT_S", 0.3)
    monkeypatch.delenv("HF_HUB_OFFLINE")
    start = time.monotonic()
    with pytest.raises(model_ref.UnknownModel, match="did not answer within 0.3 s"):
        model_ref.resolve("acme/slow-model")
    release.set()
    assert time.monotonic() - start < 3


@pytest.mark.parametrize("variable", ["HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"])
def test_offline_never_asks(cache, monkeypatch, variable):
    monkeypatch.setattr("huggingface_hub.hf_hub_download", lambda *a, **k: pytest.fail("the Hub was asked"))
    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.setenv(variable, "1")
    with pytest.raises(model_ref.UnknownModel) as err:
        model_ref.resolve("acme/unknown-model")
    text = str(err.value)  # the three ways to supply it
    assert "--hf-config" in text and "--model" in text and "huggingface-cli download acme/unknown-model" in text


def test_an_unknown_name_in_a_training_config_is_one_line_with_its_place(tmp_path, cache):
    config = tmp_path / "sft.yaml"
    config.write_text("model_name_or_path: acme/unknown-model\nstage: sft\nfinetuning_type: full\n"
                      "cutoff_len: 1024\nbf16: true\n")
    code, out, err = run_guard("estimate", "--offline", "--gpu", "H100-SXM", str(config))
    assert code == 2 and err.count("\n") == 1 and f"{config}:1:21:" in err and "Traceback" not in err


def test_a_catalog_model_in_a_training_config_gets_a_number(tmp_path, cache):
    config = tmp_path / "sft.yaml"
    config.write_text("model_name_or_path: Qwen/Qwen3-4B-Instruct-2507\nstage: sft\nfinetuning_type: lora\n"
                      "lora_target: all\ncutoff_len: 1024\nbf16: true\nper_device_train_batch_size: 1\n")
    code, out, err = run_guard("estimate", "--offline", "--gpu", "H100-SXM", str(config))
    assert code == 0, err
    assert "Qwen/Qwen3-4B" in out and "FITS" in out


@pytest.mark.parametrize("model_type, family", [
    ("gpt_oss", "gpt-oss"), ("deepseek_v3", "multi-latent attention"), ("jamba", "Mamba"),
    ("llava", "multimodal"), ("qwen2_vl", "multimodal"), ("gemma3", "vision tower")])
def test_families_guard_does_not_count_are_refused_by_name(model_type, family):
    with pytest.raises(HfConfigError, match=family):
        from_dict({**ODD, "model_type": model_type})


def test_an_unknown_model_type_is_never_priced_as_a_llama():
    with pytest.raises(HfConfigError, match="'rwkv' is not supported"):
        from_dict({**ODD, "model_type": "rwkv"})


def test_mixture_of_experts_fine_tuning_is_refused_by_name(tmp_path, cache):
    config = tmp_path / "sft.yaml"
    config.write_text("model_name_or_path: mistralai/Mixtral-8x7B-v0.1\nstage: sft\nfinetuning_type: full\n"
                      "cutoff_len: 1024\nbf16: true\n")
    code, _, err = run_guard("estimate", "--offline", "--gpu", "H100-SXM", str(config))
    assert code == 2 and "mixture-of-experts" in err and "8 experts" in err


def test_a_hub_tokenizer_is_counted_from_its_cached_tokenizer_json(cache, tmp_path):
    """--tokenizer-model NAME of a HuggingFaceTokenizer: Megatron loads it with AutoTokenizer; its length is the
    tokenizer.json's model vocabulary plus added tokens (1000 + 2 here), padded to a multiple of 128."""
    folder = cache / "models--acme--tok" / "snapshots" / ("a" * 40)
    folder.mkdir(parents=True)
    vocab = {f"t{i}": i for i in range(1000)}
    (folder / "tokenizer.json").write_text(json.dumps({"model": {"vocab": vocab}, "added_tokens": [
        {"id": 1000, "content": "<|start|>"}, {"id": 1001, "content": "<|end|>"}]}))
    script = tmp_path / "train.sh"
    script.write_text("torchrun --nproc-per-node 1 pretrain_gpt.py --num-layers 2 --hidden-size 128 "
                      "--num-attention-heads 4 --seq-length 128 --max-position-embeddings 128 --micro-batch-size 1 "
                      "--tokenizer-type HuggingFaceTokenizer --tokenizer-model acme/tok\n")
    code, out, err = run_guard("estimate", "--isolated", "--format", "json", str(script))
    assert code == 0, err
    assert json.loads(out)["model"]["vocab_padded"] == 1024  # 1002 rounded up to 128's multiple
    script.write_text(script.read_text().replace("acme/tok", "acme/absent"))
    code, _, err = run_guard("estimate", "--isolated", str(script))
    assert code == 2 and "huggingface-cli download acme/absent tokenizer.json" in err


def test_guard_check_never_asks_the_hub(cache, monkeypatch, tmp_path):
    """A pre-commit hook answers at once: check reads the cache and the catalog, never the network."""
    monkeypatch.setattr("huggingface_hub.hf_hub_download", lambda *a, **k: pytest.fail("check asked the Hub"))
    monkeypatch.delenv("HF_HUB_OFFLINE")
    config = tmp_path / "sft.yaml"
    config.write_text("model_name_or_path: acme/unknown-model\nstage: sft\nfinetuning_type: lora\ncutoff_len: 512\n")
    code, _, err = run_guard("check", "--isolated", str(config))
    assert code in (0, 1) and "Traceback" not in err
