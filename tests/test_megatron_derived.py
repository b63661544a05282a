"""Values Megatron derives from its flags, against numbers worked out by hand from Megatron's formulas."""

from __future__ import annotations

from guard.megatron import derived


def test_padded_vocab():
    # GPT-2's 50257 tokens, --make-vocab-size-divisible-by 128, TP 2: multiple of 256 -> 197 * 256
    assert derived.padded_vocab_size(50257, 128, 2) == 50432
    # NullTokenizer adds the EOD token: 32000 + 1 -> next multiple of 128 is 32128
    assert derived.padded_vocab_size(32000, 128, 1, null_tokenizer=True) == 32128
    assert derived.padded_vocab_size(32000, 128, 1) == 32000


def test_ffn_and_kv_channels():
    assert derived.ffn_hidden_size(4096, swiglu=False) == 16384
    # int(4 * 4096 * 2 / 3 / 64) * 64 = int(170.67) * 64
    assert derived.ffn_hidden_size(4096, swiglu=True) == 10880
    assert derived.kv_channels(4096, 32) == 128


def test_parallel_sizes_and_microbatches():
    assert derived.data_parallel_size(64, 4, 2, 2) == 4
    assert derived.num_microbatches(512, 2, 4) == 64


def test_stage_layers():
    assert derived.stage_layers(24, 4, None, None) == [6, 6, 6, 6]
    # embedding and loss each count as one layer: (30 + 2) / 4 = 8 per stage
    assert derived.stage_layers(30, 4, None, None, account_embedding=True, account_loss=True) == [7, 8, 8, 7]
    assert derived.stage_layers(30, 4, 6, 6) == [6, 9, 9, 6]
    assert derived.stage_layers(30, 4, 5, None) is None  # 25 layers over 3 stages
    assert derived.stage_layers(20, 2, 12, 8) == [12, 8]
    assert derived.stage_layers(24, 2, 12, 8) is None  # 4 layers left, no middle stage
