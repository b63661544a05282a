"""The vocabulary size as Megatron resolves it: program defaults (args_defaults) in the flag tables, and
guard/job/vocab.py on tiny tokenizer files written by hand in tests/fixtures/vocab/.

Expected counts come from the fixtures' contents (listed below) and from Megatron's tokenizer code:
megatron/training/tokenizer/tokenizer.py at core_v0.16.1 ("legacy"), megatron/core/tokenizers at main
d98e8a6 ("core"), megatron/tokenizer/tokenizer.py at Megatron-DeepSpeed f4157be.

  vocab.json      5 entries: hello, world, Ġthe, !, <|endoftext|>
  vocab.txt       7 lines: [PAD] [UNK] [CLS] [SEP] [MASK] hello world
  tokenizer.json  BPE, model vocab h e l o he <|endoftext|> (6); added <|endoftext|> (in it), <|pad|> (new)
  unigram/        Unigram, vocab <unk> ▁a ▁b c (4); added <unk> (in it), <mask> (new)
  tiny.model      pieces <unk>(UNKNOWN) <s>(CONTROL) </s>(CONTROL) ▁hello ▁world; TrainerSpec without piece names
  custom.model    pieces <unk>(UNKNOWN) [BOS](CONTROL) </s>(CONTROL) <pad>(USER_DEFINED) ▁a ▁b;
                  TrainerSpec bos_piece (field 46) = "[BOS]"
"""

from __future__ import annotations

import dataclasses
import struct
import textwrap
from pathlib import Path

import pytest

from conftest import FIXTURES
from guard.job import vocab
from guard.job.vocab import TokenizerArgs, resolve_vocabulary
from guard.megatron import derived, flag_table
from guard.megatron.entrypoints import extract_program_defaults
from guard.megatron.schema_gen import build_table

VOCAB = FIXTURES / "vocab"
TABLES = ("core_v0.16.1", "main-d98e8a6", "megatron-deepspeed-f4157be")


def size_of(tokenizer: str | None, builder: str = "legacy", **flags) -> vocab.Vocabulary:
    return resolve_vocabulary(TokenizerArgs(tokenizer_type=tokenizer, **flags), builder=builder, search_dirs=[VOCAB])


# -- program defaults -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("ref", TABLES)
def test_pretrain_gpt_defaults_to_gpt2_bpe(ref):
    # pretrain_gpt.py passes args_defaults={'tokenizer_type': 'GPT2BPETokenizer'} at all three commits
    table = flag_table.load(ref)
    for program in ("pretrain_gpt.py", "$MEGATRON/pretrain_gpt.py", "/opt/Megatron-LM/pretrain_gpt.py"):
        assert table.program_default(program, "tokenizer_type") == "GPT2BPETokenizer", (ref, program)


@pytest.mark.parametrize("ref, program, expected", [
    ("core_v0.16.1", "pretrain_bert.py", "BertWordPieceLowerCase"),  # pretrain_bert.py:201
    ("core_v0.16.1", "pretrain_t5.py", "BertWordPieceLowerCase"),  # pretrain_t5.py:291
    ("core_v0.16.1", "pretrain_mamba.py", "GPT2BPETokenizer"),  # pretrain_mamba.py:365
    ("main-d98e8a6", "$M/examples/bert/pretrain_bert.py", "BertWordPieceLowerCase"),  # examples/bert/...:185
    ("main-d98e8a6", "pretrain_bert.py", None),  # run bare, it is a top-level script main does not have
    ("main-d98e8a6", "pretrain_mamba.py", "GPT2BPETokenizer"),  # runpy.run_path("pretrain_hybrid.py")
    ("main-d98e8a6", "examples/multimodal/train.py", "GPT2BPETokenizer"),  # train.py:389
    ("main-d98e8a6", "$M/examples/post_training/modelopt/finetune.py", "HuggingFaceTokenizer"),  # finetune.py:582
    ("main-d98e8a6", "train_rl.py", None),  # args_defaults={}
    ("megatron-deepspeed-f4157be", "pretrain_bert.py", "BertWordPieceLowerCase"),  # pretrain_bert.py:165
    ("megatron-deepspeed-f4157be", "finetune_llama.py", None),  # pretrain(...) without args_defaults
    ("megatron-deepspeed-f4157be", "generate_samples_gpt.py", None),  # two scripts by that name: ambiguous
    ("megatron-deepspeed-f4157be", "tools/generate_samples_gpt.py", "GPT2BPETokenizer"),
    ("main-d98e8a6", "my_own_script.py", None),
    ("main-d98e8a6", "", None),
])
def test_program_tokenizer_defaults(ref, program, expected):
    assert flag_table.load(ref).program_default(program, "tokenizer_type") == expected


def test_program_default_applies_only_where_the_parsed_value_is_none():
    """validate_args: `if getattr(args, key, None) is not None: warn, keep it; else: setattr(args, key, default)`."""
    table = flag_table.load("main-d98e8a6")
    program = "tools/run_text_generation_server.py"  # {'no_load_rng': True, 'no_load_optim': True,
    assert table.program_defaults(program)["exit_on_missing_checkpoint"] is True  # 'exit_on_missing_checkpoint': True}
    assert table.default("no_load_rng") is None  # store_true with default=None in arguments.py
    assert table.program_default(program, "no_load_rng") is True
    assert table.default("exit_on_missing_checkpoint") is False  # store_true, default False: never None
    assert table.program_default(program, "exit_on_missing_checkpoint") is None
    assert table.program_default(program, "tokenizer_type") is None  # not among its defaults


def test_tables_record_defaults_for_every_program_with_a_tokenizer_default():
    # `git grep args_defaults` at core_v0.16.1: these top-level programs pass a tokenizer_type
    recorded = flag_table.load("core_v0.16.1").data["program_defaults"]
    with_tokenizer = {k for k, v in recorded.items() if "tokenizer_type" in v and "/" not in k}
    assert with_tokenizer == {"pretrain_bert.py", "pretrain_gpt.py", "pretrain_ict.py", "pretrain_mamba.py",
                              "pretrain_t5.py", "pretrain_vlm.py"}


@pytest.mark.parametrize("ref, builder", [("core_v0.16.1", "legacy"), ("main-d98e8a6", "core"),
                                          ("megatron-deepspeed-f4157be", "megatron-deepspeed")])
def test_tokenizer_builder(ref, builder):
    # core_v0.16.1's global_vars imports megatron.training.tokenizer (legacy) whatever --legacy-tokenizer says
    assert flag_table.load(ref).tokenizer_builder == builder


SCRIPTS = {
    "pretrain_x.py": """
        from megatron.training import pretrain
        if __name__ == "__main__":
            pretrain(provider, args_defaults={'tokenizer_type': 'GPT2BPETokenizer', 'seq_length': 2 ** 11})
        """,
    "pretrain_old.py": """
        import os, runpy
        runpy.run_path(os.path.join(os.path.dirname(__file__), "pretrain_x.py"), run_name="__main__")
        """,
    "tools/serve.py": """
        initialize_megatron(args_defaults={'no_load_rng': True, 'tokenizer_type': make_name(), **more})
        parse_and_validate_args(args_defaults={'no_load_rng': False})
        """,
    "tools/dynamic.py": "initialize_megatron(args_defaults=build_defaults())\n",
    "megatron/training/training.py": "def pretrain(args_defaults={}):\n    initialize(args_defaults=args_defaults)\n",
    "tests/test_thing.py": "pretrain(args_defaults={'tokenizer_type': 'NullTokenizer'})\n",
    "empty.py": "pretrain(args_defaults={})\n",
}


def test_extractor_reads_args_defaults(tmp_path):
    for rel, text in SCRIPTS.items():
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip())
    defaults, notes = extract_program_defaults(tmp_path)
    assert defaults == {
        "pretrain_x.py": {"tokenizer_type": "GPT2BPETokenizer", "seq_length": 2048},
        "pretrain_old.py": {"tokenizer_type": "GPT2BPETokenizer", "seq_length": 2048},  # runs pretrain_x.py
    }  # tools/serve.py: no_load_rng is True in one call, False in the other; the rest is not literal
    assert len(notes) == 4, notes  # make_name(), **more, no_load_rng both ways, build_defaults()
    assert any("tools/dynamic.py: args_defaults=build_defaults()" in n for n in notes)
    assert not any("training.py" in n for n in notes)  # the library passing its parameter on is no program's


def test_build_table_writes_program_defaults(tmp_path):
    (tmp_path / "megatron" / "training").mkdir(parents=True)
    (tmp_path / "megatron" / "training" / "arguments.py").write_text(textwrap.dedent("""
        import argparse
        def parse_args(extra_args_provider=None):
            parser = argparse.ArgumentParser(allow_abbrev=False)
            parser.add_argument('--tokenizer-type', type=str, default=None)
            return parser.parse_args()
        """))
    (tmp_path / "pretrain_gpt.py").write_text("pretrain(p, args_defaults={'tokenizer_type': 'GPT2BPETokenizer'})\n")
    table = build_table(tmp_path, ref="synthetic", commit="0" * 40)
    assert table["program_defaults"] == {"pretrain_gpt.py": {"tokenizer_type": "GPT2BPETokenizer"}}
    program_table = flag_table.FlagTable("synthetic", table)
    assert program_table.program_default("./pretrain_gpt.py", "tokenizer_type") == "GPT2BPETokenizer"


# -- GPT2BPETokenizer -------------------------------------------------------------------------------------------
def test_what_the_user_saw_vocab_file_without_tokenizer_type():
    table = flag_table.load("core_v0.16.1")
    program = "$MEGATRON/pretrain_gpt.py"
    result = resolve_vocabulary(TokenizerArgs(vocab_file="vocab.json"), builder=table.tokenizer_builder,
                                program=program, program_default=table.program_default(program, "tokenizer_type"),
                                search_dirs=[VOCAB])
    assert (result.size, result.tokenizer, result.tokenizer_from) == (5, "GPT2BPETokenizer",
                                                                      "args_defaults of pretrain_gpt.py")
    assert result.source == "5 entries in vocab.json" and not result.assumed
    assert result.sentence == "5 entries in vocab.json (GPT2BPETokenizer, args_defaults of pretrain_gpt.py)"


@pytest.mark.parametrize("builder", ["legacy", "core", "megatron-deepspeed"])
def test_gpt2_counts_vocab_json(builder):
    # legacy / Megatron-DeepSpeed: len(GPT2Tokenizer.encoder); core: transformers' GPT2Tokenizer, whose
    # <|endoftext|> is already one of the 5
    result = size_of("GPT2BPETokenizer", builder, vocab_file="vocab.json")
    assert (result.size, result.tokenizer_from) == (5, "--tokenizer-type")


def test_gpt2_core_adds_special_tokens_it_lacks():
    result = size_of("GPT2BPETokenizer", "core", vocab_file="vocab.json",
                     special_tokens=("<|endoftext|>", "<|im_start|>", "<|im_start|>"))
    assert result.size == 6
    # the legacy builder never reads --tokenizer-special-tokens
    assert size_of("GPT2BPETokenizer", vocab_file="vocab.json", special_tokens=("<|im_start|>",)).size == 5


def test_gpt2_without_its_file_assumes_gpt2():
    result = size_of("GPT2BPETokenizer", vocab_file="data/gpt2-vocab.json")
    assert (result.size, result.assumed) == (50257, True)
    assert result.source == "assumed: the GPT-2 BPE vocabulary (data/gpt2-vocab.json is not on this machine)"
    assert result.reason == result.source
    assert size_of("GPT2BPETokenizer").source == "assumed: the GPT-2 BPE vocabulary (no --vocab-file given)"
    # megatron: ceil(50257 / (128 * 1)) * 128, the padded size every GPT-2 Megatron log prints
    assert derived.padded_vocab_size(result.size, 128, 1) == 50304


def test_relative_paths_try_the_script_folder_first(tmp_path):
    (tmp_path / "vocab.json").write_text('{"a": 0, "b": 1, "<|endoftext|>": 2}')
    first = resolve_vocabulary(TokenizerArgs("GPT2BPETokenizer", vocab_file="vocab.json"), search_dirs=[tmp_path, VOCAB])
    later = resolve_vocabulary(TokenizerArgs("GPT2BPETokenizer", vocab_file="vocab.json"), search_dirs=[VOCAB, tmp_path])
    absolute = resolve_vocabulary(TokenizerArgs("GPT2BPETokenizer", vocab_file=str(tmp_path / "vocab.json")),
                                  search_dirs=[VOCAB])
    assert (first.size, later.size, absolute.size) == (3, 5, 3)


@pytest.mark.parametrize("content, says", [("[1, 2]", "not a JSON object"), ("{oops", "not JSON"),
                                           (b"\xff\xfe{}", "not UTF-8")])
def test_gpt2_bad_vocab_file_is_unknown(tmp_path, content, says):
    path = tmp_path / "vocab.json"
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    result = size_of("GPT2BPETokenizer", vocab_file=str(path))
    assert result.size is None and says in result.reason
    assert result.reason.startswith("GPT2BPETokenizer: ") and result.reason.endswith("give guard --vocab-size N")


def test_file_reads_are_capped(monkeypatch):
    monkeypatch.setattr(vocab, "MAX_READ_BYTES", 16)
    result = size_of("GPT2BPETokenizer", vocab_file="vocab.json")
    assert result.size is None and "over guard's 0 MiB read limit" in result.reason


def test_a_folder_is_not_a_vocab_file():
    result = size_of("GPT2BPETokenizer", vocab_file="unigram")
    assert result.size is None and "unigram is not a file" in result.reason


# -- BERT ----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("tokenizer, builder, extra_ids, special, expected", [
    # legacy/Megatron-DeepSpeed _BertWordPieceTokenizer: 7 lines + [BOS] + [EOS] + <extra_id_i>
    ("BertWordPieceLowerCase", "legacy", 0, (), 9),
    ("BertWordPieceCase", "legacy", 2, (), 11),
    ("BertWordPieceLowerCase", "megatron-deepspeed", 0, (), 9),
    # core: transformers' BertTokenizer on the file (its five specials are in it) + the user's special tokens;
    # BertWordPieceCase replaces them by <extra_id_0..99>
    ("BertWordPieceLowerCase", "core", 5, (), 7),
    ("BertWordPieceLowerCase", "core", 0, ("[EXTRA]", "hello"), 8),
    ("BertWordPieceCase", "core", 0, ("[EXTRA]",), 107),
])
def test_bert_vocab_txt(tokenizer, builder, extra_ids, special, expected):
    result = size_of(tokenizer, builder, vocab_file="vocab.txt", vocab_extra_ids=extra_ids, special_tokens=special)
    assert result.size == expected


def _megatron_load_vocab(path: Path) -> dict[str, int]:
    """bert_tokenization.load_vocab at core_v0.16.1, as written there (the oracle for the line rules)."""
    vocab_map, index = {}, 0
    with open(path, encoding="utf-8") as reader:
        while True:
            token = reader.readline()
            if not token:
                break
            vocab_map[token.strip()] = index
            index += 1
    return vocab_map


def test_bert_line_rules_follow_load_vocab(tmp_path):
    path = tmp_path / "vocab.txt"
    path.write_bytes(b"[PAD]\r\n[CLS]\r[SEP]\n [MASK] \n\n[PAD]\nlast")
    expected = len(_megatron_load_vocab(path)) + 2  # + [BOS], [EOS]
    assert expected == 8  # [PAD] [CLS] [SEP] [MASK] "" last, by hand
    assert size_of("BertWordPieceLowerCase", vocab_file=str(path)).size == expected


def test_bert_without_its_file_is_unknown():
    result = size_of("BertWordPieceLowerCase", vocab_file="bert-large-uncased-vocab.txt")
    assert result.size is None
    assert result.reason == ("BertWordPieceLowerCase: bert-large-uncased-vocab.txt is not on this machine; "
                             "give guard --vocab-size N")
    assert "no --vocab-file given" in size_of("BertWordPieceCase").reason


# -- SentencePiece -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("tokenizer, builder, model, extra_ids, expected", [
    # _SentencePieceTokenizer: pieces + <CLS> <SEP> <EOD> <MASK> + <PAD> (pad_id() is -1) + sentinels;
    # <s> and </s> are CONTROL pieces, so bos_id()/eos_id() name pieces already counted
    ("SentencePieceTokenizer", "legacy", "tiny.model", 0, 10),
    ("SentencePieceTokenizer", "legacy", "tiny.model", 3, 13),
    ("SentencePieceTokenizer", "megatron-deepspeed", "tiny.model", 0, 10),
    # custom: bos_piece is [BOS] (a CONTROL piece); <pad> is USER_DEFINED, so pad_id() is -1 -> <PAD>
    ("SentencePieceTokenizer", "legacy", "custom.model", 0, 11),
    ("GPTSentencePieceTokenizer", "legacy", "custom.model", 0, 6),
    ("Llama2Tokenizer", "legacy", "tiny.model", 4, 5),
    ("GPTSentencePieceTokenizer", "megatron-deepspeed", "tiny.model", 0, 5),
    ("SentencePieceTokenizer", "core", "tiny.model", 3, 5),  # megatron/core: get_piece_size()
])
def test_sentencepiece_pieces(tokenizer, builder, model, extra_ids, expected):
    result = size_of(tokenizer, builder, tokenizer_model=model, vocab_extra_ids=extra_ids)
    assert result.size == expected, result


def test_sentencepiece_core_adds_missing_special_tokens():
    # SentencePieceTokenizer.add_special_tokens (legacy=True): a token not among the pieces takes a new id
    result = size_of("GPTSentencePieceTokenizer", "core", tokenizer_model="tiny.model",
                     special_tokens=("<s>", "<tool>", "<tool>", "<img>"))
    assert result.size == 7 and "<tool>, <img>" in result.source


def test_sentencepiece_fixture_is_the_protobuf_we_wrote():
    def field(tag: bytes, payload: bytes) -> bytes:
        return tag + bytes([len(payload)]) + payload

    def piece(text: str, score: float, kind: int | None) -> bytes:
        body = field(b"\x0a", text.encode()) + b"\x15" + struct.pack("<f", score)
        return field(b"\x0a", body + (b"\x18" + bytes([kind]) if kind else b""))

    tiny = (piece("<unk>", 0.0, 2) + piece("<s>", 0.0, 3) + piece("</s>", 0.0, 3) + piece("\u2581hello", -1.0, None)
            + piece("\u2581world", -2.0, None) + field(b"\x12", b"\x18\x01\x20\x05")
            + field(b"\x1a", field(b"\x0a", b"nmt_nfkc")))
    assert (VOCAB / "tiny.model").read_bytes() == tiny


@pytest.mark.parametrize("content", [b"", b"\x0a\x10short", b"\x0f\x00", b"\x12\x02\x18\x01"])
def test_sentencepiece_bad_model_is_unknown(tmp_path, content):
    (tmp_path / "bad.model").write_bytes(content)
    result = size_of("Llama2Tokenizer", tokenizer_model=str(tmp_path / "bad.model"))
    assert result.size is None and "is not a sentencepiece model" in result.reason


# -- Hugging Face --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("tokenizer, builder, model, special, expected", [
    # len(tokenizer): distinct model-vocab and added tokens (tokenizers' get_vocab(true).len())
    ("HuggingFaceTokenizer", "legacy", "tokenizer.json", (), 7),
    ("HuggingFaceTokenizer", "legacy", ".", (), 7),  # the folder holding tokenizer.json
    ("HuggingFaceTokenizer", "legacy", "unigram", (), 5),
    ("HuggingFaceTokenizer", "core", ".", ("<|pad|>", "<tool>"), 8),  # additional_special_tokens it lacks
    ("MultimodalTokenizer", "core", ".", ("<image>",), 7),  # its _vocab_size is taken before adding them
    ("SFTTokenizer", "legacy", "tokenizer.json", (), 7),
    ("HFTokenizer", "megatron-deepspeed", "tokenizer.json", (), 6),  # transformers' vocab_size: no added tokens
    ("PretrainedFromHF", "megatron-deepspeed", "tokenizer.json", (), 7),  # BigScience: len(tokenizer)
])
def test_huggingface_tokenizer_json(tokenizer, builder, model, special, expected):
    assert size_of(tokenizer, builder, tokenizer_model=model, special_tokens=special).size == expected


def test_bigscience_pretrained_from_hf_adds_its_sentinels():
    # _AutoTokenizer passes additional_special_tokens=<extra_id_0..n-1> and reports len(tokenizer): 7 + 3
    assert size_of("PretrainedFromHF", "megatron-deepspeed", tokenizer_model="tokenizer.json",
                   vocab_extra_ids=3).size == 10


def test_a_hub_tokenizer_not_on_this_machine_is_sized_from_the_catalog():
    # Mistral-7B v0.3's model card: "Extended vocabulary to 32768"; the Instruct variant shares it
    result = size_of("MultimodalTokenizer", "core", tokenizer_model="mistralai/Mistral-7B-Instruct-v0.3")
    assert result.size == 32768 and result.assumed
    assert "mistralai/Mistral-7B-v0.3's config.json in guard's catalog" in result.source


def test_huggingface_hub_name_is_unknown(tmp_path):
    result = size_of("HuggingFaceTokenizer", tokenizer_model="acme/unlisted-7b")
    # not on disk, not in the (empty, in tests) Hugging Face cache, not in the catalog: the refusal says how to
    # put it there
    assert result.size is None and "'acme/unlisted-7b' is neither a file or folder" in result.reason
    assert "huggingface-cli download acme/unlisted-7b tokenizer.json" in result.reason
    assert "--vocab-size" in result.reason
    no_json = size_of("HuggingFaceTokenizer", tokenizer_model=str(tmp_path))
    assert no_json.size is None and "has no tokenizer.json" in no_json.reason
    assert "no --tokenizer-model given" in size_of("HuggingFaceTokenizer").reason


# -- sizes from --vocab-size -----------------------------------------------------------------------------------
def test_null_tokenizer():
    # legacy and Megatron-DeepSpeed _NullTokenizer: vocab_size + 1 (the EOD); megatron/core's NullTokenizer:
    # vocab_size itself (EOD is id vocab_size - 1). The caller pads `size` with null_tokenizer=False.
    assert size_of("NullTokenizer", vocab_size=1000).size == 1001
    assert size_of("NullTokenizer", "megatron-deepspeed", vocab_size=1000).size == 1001
    assert size_of("NullTokenizer", "core", vocab_size=1000).size == 1000
    assert size_of("NullMultimodalTokenizer", "core", vocab_size=1000).size == 1001
    assert derived.padded_vocab_size(size_of("NullTokenizer", vocab_size=1000).size, 128, 2) == 1024
    missing = size_of("NullTokenizer")
    assert missing.size is None and "--vocab-size" in missing.reason


def test_tiktokenizer_size_is_vocab_size():
    assert size_of("TikTokenizer", vocab_size=100000, tokenizer_model="absent.json").size == 100000
    assert size_of("TikTokenizer", "core").size == 131072  # 2**17, the fallback in both builders


# -- unknown tokenizers ----------------------------------------------------------------------------------------
def test_fork_tokenizer_is_unknown_and_named():
    result = size_of("MyForkTokenizer", vocab_file="vocab.json")
    assert result.size is None and result.tokenizer == "MyForkTokenizer"
    assert "'MyForkTokenizer'" in result.reason and result.reason.endswith("give guard --vocab-size N")
    guessed = size_of("MyForkTokenizer", vocab_size=32000)
    assert (guessed.size, guessed.assumed) == (32000, True) and guessed.source.startswith("assumed: --vocab-size")
    # Megatron-DeepSpeed's build_tokenizer has no Llama2Tokenizer
    assert size_of("Llama2Tokenizer", "megatron-deepspeed", tokenizer_model="tiny.model").size is None


def test_no_tokenizer_at_all():
    result = resolve_vocabulary(TokenizerArgs(vocab_file="vocab.json"), program="finetune_llama.py",
                                search_dirs=[VOCAB])
    assert result.size is None and result.tokenizer is None and result.tokenizer_from == ""
    assert "no --tokenizer-type" in result.reason


def test_result_is_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        size_of("NullTokenizer", vocab_size=8).size = 3  # type: ignore[misc]
    with pytest.raises(ValueError, match="unknown tokenizer builder"):
        size_of("NullTokenizer", "nemo", vocab_size=8)
