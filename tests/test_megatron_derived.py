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


def _per_stage(num_layers: int, pp: int, **ask) -> list[int] | None:
    """Layers per pipeline rank from the one split (guard/job/stages.py); None where megatron-core refuses."""
    from guard.job.stages import LayoutError, SplitAsk, split

    try:
        return [sum(len(c.layers) for c in rank) for rank in split(num_layers, SplitAsk(pp, **ask))]
    except LayoutError:
        return None


def test_stage_layers():
    assert _per_stage(24, 4) == [6, 6, 6, 6]
    # embedding and loss each count as one layer: (30 + 2) / 4 = 8 per stage
    assert _per_stage(30, 4, account_embedding=True, account_loss=True) == [7, 8, 8, 7]
    assert _per_stage(30, 4, first=6, last=6) == [6, 9, 9, 6]
    assert _per_stage(30, 4, first=5) is None  # 25 layers over 3 stages
    assert _per_stage(20, 2, first=12, last=8) == [12, 8]
    assert _per_stage(24, 2, first=12, last=8) is None  # 4 layers left, no middle stage
    # 8 layers, 4 stages, 4 first and 4 last: no layer left for the 2 middle stages (TransformerConfig's Mismatch)
    assert _per_stage(8, 4, first=4, last=4) is None
    # virtual stages: 24 layers, PP 2, 3 layers per virtual stage -> 4 chunks of 3 on each rank
    assert _per_stage(24, 2, virtual_layers=3) == [12, 12]
    assert _per_stage(24, 1, vpp=2) is None  # the interleaved schedule needs PP > 1
