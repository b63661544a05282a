"""Megatron-LM's multimodal examples: the language model runs --decoder-seq-length, --seq-length is the vision
encoder's (examples/multimodal/train.py); the encoder itself is named, never priced as part of the decoder."""

from __future__ import annotations

import json

from conftest import FIXTURES, run_guard

SCRIPT = FIXTURES / "multimodal" / "llava_sft.sh"


def test_the_decoder_is_priced_at_its_own_sequence_length():
    code, out, err = run_guard("estimate", "--isolated", "--format", "json", str(SCRIPT))
    assert code == 0, err
    data = json.loads(out)
    assert data["layout"]["seq_length"] == 2048  # --decoder-seq-length, not the encoder's 576
    assert any("vision encoder" in u["feature"] for u in data["unmodelled"])


def test_a_decoder_length_elsewhere_is_named_unmodelled(tmp_path):
    script = tmp_path / "t5.sh"
    script.write_text(SCRIPT.read_text().replace("examples/multimodal/train.py", "pretrain_gpt.py")
                      .replace("--language-model-type mistral_7b", "").replace("--vision-model-type clip", "")
                      .replace("MultimodalTokenizer", "NullTokenizer").replace(
                          "--tokenizer-model mistralai/Mistral-7B-Instruct-v0.3", "")
                      .replace("--tokenizer-prompt-format mistral", ""))
    code, out, err = run_guard("estimate", "--isolated", "--format", "json", str(script))
    assert code == 0, err
    data = json.loads(out)
    assert data["layout"]["seq_length"] == 576
    assert any(u["setting"] == "--decoder-seq-length" for u in data["unmodelled"])
