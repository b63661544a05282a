"""The tokenizer's vocabulary size as Megatron's build_tokenizer computes it, from local files only."""

from __future__ import annotations

import json
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from pathlib import Path

from guard.job.hub_cache import cached_file
from guard.job.model_catalog import entry
from guard.job.protobuf_wire import fields

GPT2_VOCAB = 50257  # entries of GPT-2's vocab.json, the file Megatron-LM main downloads when none is given
TIKTOKEN_FALLBACK = 2**17  # CustomTikTokenizer / TikTokenTokenizer when --vocab-size is not given
MAX_READ_BYTES = 128 * 2**20  # real tokenizer files are under 40 MiB; a bigger one is not a vocabulary
BERT_SPECIALS = ("[UNK]", "[SEP]", "[PAD]", "[CLS]", "[MASK]")  # transformers' BertTokenizer defaults
GPT2_SPECIALS = ("<|endoftext|>",)  # transformers' GPT2Tokenizer unk/bos/eos
SP_TYPES = ("SentencePieceTokenizer", "GPTSentencePieceTokenizer", "Llama2Tokenizer")
HF_TYPES = ("HuggingFaceTokenizer", "HFTokenizer", "MultimodalTokenizer", "SFTTokenizer", "PretrainedFromHF")
_SHARED = {"BertWordPieceLowerCase", "BertWordPieceCase", "GPT2BPETokenizer", "SentencePieceTokenizer",
           "GPTSentencePieceTokenizer", "NullTokenizer"}
_MEGATRON_LM = _SHARED | {"Llama2Tokenizer", "HuggingFaceTokenizer", "TikTokenizer", "MultimodalTokenizer",
                          "NullMultimodalTokenizer", "SFTTokenizer"}
# What each build_tokenizer builds: megatron/training/tokenizer/tokenizer.py ("legacy"),
# megatron/core/tokenizers/utils/build_tokenizer.py ("core"), Megatron-DeepSpeed's megatron/tokenizer
# (Microsoft's HFTokenizer, BigScience's PretrainedFromHF).
KNOWN = {"legacy": _MEGATRON_LM, "core": _MEGATRON_LM,
         "megatron-deepspeed": _SHARED | {"HFTokenizer", "PretrainedFromHF"}}


@dataclass(frozen=True)
class Vocabulary:
    """What build_tokenizer hands to the padding (tokenizer.vocab_size), and where guard found it."""

    size: int | None  # None: unknown (see reason)
    tokenizer: str | None  # the tokenizer type used
    tokenizer_from: str  # "--tokenizer-type", "args_defaults of pretrain_gpt.py", or "" when there is none
    source: str  # "50257 entries in data/gpt2-vocab.json"; starts with "assumed: " when assumed
    assumed: bool = False
    reason: str = ""  # why the size is unknown or assumed, naming the tokenizer

    @property
    def sentence(self) -> str:
        """The source with the tokenizer and its origin (the reason when unknown), for guard's messages."""
        return self.reason if self.size is None else f"{self.source} ({self.tokenizer}, {self.tokenizer_from})"


class _Unreadable(Exception):
    """A tokenizer file that is there but cannot be counted."""


@dataclass(frozen=True)
class TokenizerArgs:
    """The flags build_tokenizer reads, as the command gives them (None or empty when absent)."""

    tokenizer_type: str | None = None
    vocab_size: int | None = None
    vocab_file: str | None = None
    tokenizer_model: str | None = None
    vocab_extra_ids: int = 0
    special_tokens: tuple[str, ...] = ()  # --tokenizer-special-tokens: only the core builder reads it


def resolve_vocabulary(args: TokenizerArgs, *, builder: str = "legacy", program: str = "",
                       program_default: str | None = None, search_dirs: Sequence[Path] = ()) -> Vocabulary:
    """tokenizer.vocab_size as Megatron's build_tokenizer gets it (pad it with derived.padded_vocab_size).

    `builder` is FlagTable.tokenizer_builder; `program_default` FlagTable.program_default(program,
    "tokenizer_type"), used without --tokenizer-type.
    Relative paths are tried in `search_dirs` in order (the script's folder, then the current directory;
    with none, the current directory). Bad files never raise."""
    if builder not in KNOWN:
        raise ValueError(f"unknown tokenizer builder {builder!r}; one of {', '.join(KNOWN)}")
    tokenizer = args.tokenizer_type or program_default
    script = program.replace("\\", "/").rsplit("/", 1)[-1] or "the program"
    origin = "--tokenizer-type" if args.tokenizer_type else f"args_defaults of {script}" if tokenizer else ""
    if not tokenizer:
        why = "the command gives no --tokenizer-type and its program passes no default one"
        return _unknown(None, "", why, args.vocab_size)
    if tokenizer not in KNOWN[builder]:
        which = "Megatron-DeepSpeed" if builder == "megatron-deepspeed" else "Megatron-LM"
        return _unknown(tokenizer, origin, f"guard does not know tokenizer {tokenizer!r} ({which}'s "
                        "build_tokenizer has no such type; a fork's?)", args.vocab_size)
    try:
        size, source, assumed = _Sizer(args, builder, search_dirs).size(tokenizer)
    except _Unreadable as exc:
        return Vocabulary(None, tokenizer, origin, "", reason=f"{tokenizer}: {exc}; give guard --vocab-size N")
    return Vocabulary(size, tokenizer, origin, source, assumed, reason=source if assumed else "")


def _unknown(tokenizer: str | None, origin: str, why: str, vocab_size: int | None) -> Vocabulary:
    """A tokenizer guard cannot size: --vocab-size is the best guess when the command gives one."""
    if vocab_size:
        return Vocabulary(vocab_size, tokenizer, origin, f"assumed: --vocab-size {vocab_size} ({why})", True, why)
    return Vocabulary(None, tokenizer, origin, "", reason=f"{why}: give guard --vocab-size N")


class _Sizer:
    """One tokenizer's size, read the way one build_tokenizer reads it: (size, source, assumed)."""

    def __init__(self, args: TokenizerArgs, builder: str, search_dirs: Sequence[Path]):
        self.args, self.builder, self.core = args, builder, builder == "core"
        self.dirs = [Path(d) for d in search_dirs] or [Path.cwd()]

    def find(self, name: str | None) -> Path | None:
        path = Path(name).expanduser() if name else None
        candidates = [] if path is None else [path] if path.is_absolute() else [d / path for d in self.dirs]
        return next((c for c in candidates if c.exists()), None)

    def need(self, name: str | None, flag: str) -> Path:
        if (path := self.find(name)) is None:
            raise _Unreadable(f"{name} is not on this machine" if name else f"no {flag} given")
        return path

    def size(self, tokenizer: str) -> tuple[int, str, bool]:
        family = "gpt2" if tokenizer == "GPT2BPETokenizer" else "bert" if tokenizer.startswith("BertWordPiece") \
            else "sentencepiece" if tokenizer in SP_TYPES else "huggingface" if tokenizer in HF_TYPES else ""
        if family:
            return getattr(self, family)(tokenizer)
        size = self.args.vocab_size
        if tokenizer == "TikTokenizer":  # the file only has to hold enough ranks; --vocab-size is the size
            return (size, f"{size} from --vocab-size (TikTokenizer's size)", False) if size else \
                (TIKTOKEN_FALLBACK, f"{TIKTOKEN_FALLBACK}: TikTokenizer's size without --vocab-size", False)
        if not size:  # NullTokenizer, NullMultimodalTokenizer
            raise _Unreadable("its size is --vocab-size, which the command does not give (Megatron asserts it)")
        if self.core and tokenizer == "NullTokenizer":  # megatron/core's NullTokenizer: EOD is id V-1
            return size, f"{size} from --vocab-size", False
        return size + 1, f"{size + 1}: --vocab-size {size} and the EOD token {tokenizer} appends", False

    def gpt2(self, _: str) -> tuple[int, str, bool]:
        """vocab.json entries (len(encoder)); the merges file does not change the size."""
        name, special = self.args.vocab_file, self.args.special_tokens if self.core else ()
        if (path := self.find(name)) is None:
            where = f"{name} is not on this machine" if name else "no --vocab-file given"
            added = len(set(special) - set(GPT2_SPECIALS))
            plus = f" and {added} --tokenizer-special-tokens" if added else ""
            return GPT2_VOCAB + added, f"assumed: the GPT-2 BPE vocabulary{plus} ({where})", True
        encoder = _json(path, name)
        if not isinstance(encoder, dict):
            raise _Unreadable(f"{name} is not a JSON object of token -> id")
        # the core builder loads it into transformers' GPT2Tokenizer, which adds its specials if missing
        added = _missing((*GPT2_SPECIALS, *special), encoder) if self.core else []
        return len(encoder) + len(added), _counted(len(encoder), name, added), False

    def bert(self, tokenizer: str) -> tuple[int, str, bool]:
        """vocab.txt lines; the legacy builders add [BOS], [EOS] and --vocab-extra-ids <extra_id_i>."""
        name = self.args.vocab_file
        tokens = _lines(self.need(name, "--vocab-file"), name, strip_all=not self.core)
        # core: transformers' BertTokenizer, and BertWordPieceCase gets 100 sentinels instead of the user's
        cased = tokenizer == "BertWordPieceCase"
        added = _missing((*BERT_SPECIALS, *(_sentinels(100) if cased else self.args.special_tokens)) if self.core
                         else ("[BOS]", "[EOS]", *_sentinels(self.args.vocab_extra_ids)), tokens)
        return len(tokens) + len(added), _counted(len(tokens), name, added), False

    def sentencepiece(self, tokenizer: str) -> tuple[int, str, bool]:
        """Pieces of the .model; the legacy SentencePieceTokenizer adds its specials and sentinels."""
        name = self.args.tokenizer_model
        pieces, spec = _sp_model(self.need(name, "--tokenizer-model"), name)
        vocab = {piece for piece, _ in pieces}
        if self.core:  # SentencePieceTokenizer(legacy=True) appends the special tokens it lacks
            added = _missing(self.args.special_tokens, vocab)
            return len(pieces) + len(added), _counted(len(pieces), name, added, "pieces"), False
        wanted: list[str] = []
        if tokenizer == "SentencePieceTokenizer":  # GPTSentencePiece-, Llama2Tokenizer: the pieces only
            control = {piece for piece, kind in pieces if kind == 3}  # pad_id() is -1 unless a CONTROL piece
            # id_to_piece(pad_id()) etc.: TrainerSpec's pad/bos/eos_piece (fields 48/46/47), or the fallback
            named = [(spec.get(f) or d, fb) for f, d, fb in ((48, "<pad>", "<PAD>"), (46, "<s>", "<BOS>"),
                                                            (47, "</s>", "<EOS>"))]
            wanted = ["<CLS>", "<SEP>", "<EOD>", "<MASK>", *(p if p in control else fb for p, fb in named),
                      *_sentinels(self.args.vocab_extra_ids)]
        added = _missing(wanted, vocab)
        return len(vocab) + len(added), _counted(len(vocab), name, added, "pieces"), False

    def huggingface(self, tokenizer: str) -> tuple[int, str, bool]:
        """len(AutoTokenizer) from a local tokenizer.json: model vocabulary plus added tokens it lacks."""
        name = self.args.tokenizer_model  # a path, or a Hub name: its tokenizer.json where huggingface_hub caches it
        flag = "--tokenizer-name-or-path" if tokenizer == "PretrainedFromHF" else "--tokenizer-model"
        path = self.find(name) or (cached_file(name, "tokenizer.json") if name else None)
        if path is None and name and (listed := _catalog_vocab(name)):
            return listed[0], listed[1], True
        if path is None:
            raise _Unreadable(f"{name!r} is neither a file or folder on this machine nor a Hub name whose "
                              f"tokenizer.json is in the Hugging Face cache (huggingface-cli download {name} "
                              "tokenizer.json)" if name else f"no {flag} given")
        shown = name or ""
        if path.is_dir():
            path, shown = path / "tokenizer.json", f"{shown.rstrip('/')}/tokenizer.json"
            if not path.is_file():
                raise _Unreadable(f"{name} has no tokenizer.json")
        vocab, added_tokens = _tokenizer_json(path, shown)
        if tokenizer == "PretrainedFromHF":  # BigScience's _AutoTokenizer: len(tokenizer), sentinels added
            tokens = vocab | added_tokens
            extra = _missing(_sentinels(self.args.vocab_extra_ids), tokens)
            return len(tokens) + len(extra), _counted(len(tokens), shown, extra, "tokens"), False
        if self.builder == "megatron-deepspeed":  # _HFTokenizer.vocab_size: transformers' vocab_size, no added
            return len(vocab), f"{len(vocab)} entries in the model vocabulary of {shown}", False
        tokens = vocab | added_tokens  # tokenizers' get_vocab_size(True): distinct model and added tokens
        extra = _missing(self.args.special_tokens, tokens) if self.core and tokenizer == "HuggingFaceTokenizer" \
            else []
        return len(tokens) + len(extra), _counted(len(tokens), shown, extra, "tokens"), False


def _catalog_vocab(name: str) -> tuple[int, str] | None:
    """A Hub tokenizer not on this machine: the vocab_size of its model's config.json in guard's catalog. The
    tokenizer's own length, which Megatron counts, is that or a little less (Qwen2: 151,646 of 152,064), so the
    padded embedding is the same or at most one padding multiple larger."""
    found = entry(name)
    config = found[1]["config"] if found else {}
    size = config.get("vocab_size") or (config.get("text_config") or {}).get("vocab_size")
    if not isinstance(size, int) or size < 1:
        return None
    return size, (f"assumed: {size}, the vocab_size of {found[0]}'s config.json in guard's catalog ({name}'s "
                  "tokenizer.json is not on this machine; its length is that or a little less)")


def _sentinels(count: int) -> list[str]:
    return [f"<extra_id_{i}>" for i in range(count or 0)]


def _missing(wanted: Sequence[str], vocab: Collection[str]) -> list[str]:
    """The tokens a tokenizer appends: those it wants that the vocabulary lacks, once each."""
    return [t for t in dict.fromkeys(wanted) if t not in vocab]


def _tokenizer_json(path: Path, shown: str) -> tuple[set[str], set[str]]:
    """The model vocabulary's tokens and the added tokens' contents of a tokenizer.json."""
    data = _json(path, shown)
    model = data.get("model") if isinstance(data, dict) else None
    vocab = model.get("vocab") if isinstance(model, dict) else None
    if isinstance(vocab, list):  # Unigram: [[piece, score], ...]
        vocab = {e[0]: None for e in vocab if isinstance(e, list) and e and isinstance(e[0], str)}
    if not isinstance(vocab, dict):
        raise _Unreadable(f"{shown} has no model.vocab")
    added = data.get("added_tokens") or []  # type: ignore[union-attr]
    return set(vocab), {t["content"] for t in added if isinstance(t, dict) and isinstance(t.get("content"), str)}


def _counted(count: int, shown: str | None, added: Sequence[str], unit: str = "entries") -> str:
    """'50257 entries in data/gpt2-vocab.json', with what the tokenizer adds to them."""
    if not added:
        return f"{count} {unit} in {shown}"
    listed = ", ".join(added[:3]) + (", ..." if len(added) > 3 else "")
    return f"{count + len(added)}: {count} {unit} in {shown} and {len(added)} the tokenizer adds ({listed})"


def _read(path: Path, shown: str | None) -> bytes:
    if not path.is_file():  # a folder, or a device that would never end
        raise _Unreadable(f"{shown} is not a file")
    if (size := path.stat().st_size) > MAX_READ_BYTES:
        raise _Unreadable(f"{shown} is {size >> 20} MiB, over guard's {MAX_READ_BYTES >> 20} MiB read limit")
    try:
        return path.read_bytes()
    except OSError as exc:
        raise _Unreadable(f"{shown} cannot be read ({exc.strerror})") from None


def _text(path: Path, shown: str | None) -> str:
    try:
        return _read(path, shown).decode("utf-8")
    except UnicodeDecodeError:
        raise _Unreadable(f"{shown} is not UTF-8 text") from None


def _json(path: Path, shown: str | None) -> object:
    try:
        return json.loads(_text(path, shown))
    except json.JSONDecodeError as exc:
        raise _Unreadable(f"{shown} is not JSON ({exc.msg} at line {exc.lineno})") from None


def _lines(path: Path, shown: str | None, strip_all: bool) -> set[str]:
    """Distinct tokens of a vocab.txt: Megatron's load_vocab strips each line, transformers' only the newline."""
    # a text-mode readline() ends lines at \n, \r and \r\n only (str.splitlines knows more)
    lines = _text(path, shown).replace("\r\n", "\n").replace("\r", "\n").split("\n")
    return {line.strip() if strip_all else line for line in (lines[:-1] if lines[-1] == "" else lines)}


def _sp_model(path: Path, shown: str | None) -> tuple[list[tuple[str, int]], dict[int, str]]:
    """(piece, type) for each ModelProto.pieces (field 1), and TrainerSpec's (field 2) piece names 45-48."""
    pieces: list[tuple[str, int]] = []
    spec: dict[int, str] = {}
    try:
        for field, value in fields(_read(path, shown)):
            if field == 1 and isinstance(value, bytes):
                parts = dict(fields(value))
                piece, kind = parts.get(1), parts.get(3, 1)  # SentencePiece.piece, .type (NORMAL by default)
                if not isinstance(piece, bytes) or not isinstance(kind, int):
                    raise ValueError("not a piece")
                pieces.append((piece.decode("utf-8"), kind))
            elif field == 2 and isinstance(value, bytes):
                spec.update({k: v.decode("utf-8") for k, v in fields(value) if 45 <= k <= 48
                             and isinstance(v, bytes)})
    except (ValueError, TypeError, UnicodeDecodeError):
        raise _Unreadable(f"{shown} is not a sentencepiece model") from None
    if not pieces:
        raise _Unreadable(f"{shown} is not a sentencepiece model (no pieces)")
    return pieces, spec
