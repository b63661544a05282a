"""A fine-tuning command's arguments read the way its framework parses them, each value located at its word.

- HfArgumentParser (transformers 5.24 hf_argparser.py), for TRL and any HF Trainer program, and LLaMA-Factory
  without a config file: `--key value`, `--key=value`, the dashed spelling `--key-name`, a bool field given
  alone is True (nargs="?", const=True) or takes yes/true/t/y/1 | no/false/f/n/0, `--no_key` clears a bool
  field whose default is True, a list field takes every word up to the next option.
- OmegaConf.from_cli (LLaMA-Factory hparams/parser.py read_args): `key=value` after the config file, each
  value read as YAML and merged over the file.
- click (axolotl cli/main.py train) and fire (axolotl.cli.train): `--key-name value`, `--key-name=value`,
  `--flag/--no-flag` switches; cli/config.py _coerce_value casts a string to the type the file's value has,
  else the way YAML would.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from guard.job.finetune_config import Where
from guard.job.finetune_dialects import Dialect
from guard.shell.located import LText

BOOL_WORDS = {"yes": True, "true": True, "t": True, "y": True, "1": True,
              "no": False, "false": False, "f": False, "n": False, "0": False}
INTS = {"micro_batch", "grad_accum", "seq_len", "lora_rank", "quant_bits"}
FLOATS = {"max_grad_norm", "learning_rate", "weight_decay", "adam_beta1", "adam_beta2", "adam_epsilon",
          "lora_dropout", "lora_alpha"}
BOOLS = {"bf16", "fp16", "save_only_model", "gradient_checkpointing", "method", "load_in_4bit", "load_in_8bit",
         "double_quant", "packing", "no_gradient_checkpointing", "use_reentrant"}
# click switches of `axolotl train` (cli/config_options.py: "--x/--no-x") among the keys guard reads
AXOLOTL_SWITCHES = {"load_in_4bit", "load_in_8bit", "lora_target_linear", "fp16", "sample_packing",
                    "save_only_model"}


@dataclass(frozen=True)
class Setting:
    key: str  # the framework's key (dashes made underscores)
    value: Any
    where: Where
    known: bool = True  # False: the word is not known statically (`$BS`)


def flag_where(path: str, flag: LText, value: LText | None = None) -> Where:
    name = flag.text.split("=", 1)[0]
    return Where(path, flag.slice(0, len(name)).span(), (value or flag).span(), name, "flag")


def _fields(dialect: Dialect, key: str) -> list[str]:
    return [n for n, k in dialect.keys.items() if k == key] + ([dialect.older[key]] if key in dialect.older else [])


def hf_value(dialect: Dialect, key: str, text: str) -> Any:
    """A value as HfArgumentParser types it (the field's type; a string where guard does not know it)."""
    names = set(_fields(dialect, key))
    try:
        if names & INTS:
            return int(text)
        if names & FLOATS:
            return float(text)
    except ValueError:
        return text  # argparse refuses it; the reader says so at the flag
    if names & BOOLS and text.lower() in BOOL_WORDS:
        return BOOL_WORDS[text.lower()]
    return text


def _is_bool(dialect: Dialect, key: str) -> bool:
    names = set(_fields(dialect, key))
    return bool(names & BOOLS) or key in ("use_peft", "do_train", "load_in_4bit", "load_in_8bit")


def _negated(dialect: Dialect, key: str) -> str | None:
    """`--no_key`: the bool field it clears, when that field's default is True."""
    if not key.startswith("no_"):
        return None
    base = key[3:]
    return base if any(dialect.defaults.get(n) is True for n in _fields(dialect, base)) else None


def _option(word: LText) -> bool:
    return word.text.startswith("-") and len(word.text) > 1


def hf_args(words: list[LText], dialect: Dialect, path: str, lists: frozenset[str] = frozenset()
            ) -> tuple[list[Setting], list[LText]]:
    """(the settings, the words that are not options: positionals and values of nothing)."""
    out: list[Setting] = []
    rest: list[LText] = []
    i = 0
    while i < len(words):
        word = words[i]
        if not word.text.startswith("--") or not word.resolved:
            rest.append(word)
            i += 1
            continue
        name, eq, _ = word.text[2:].partition("=")
        key = name.replace("-", "_")
        cleared = _negated(dialect, key)
        if cleared and not eq:
            out.append(Setting(cleared, False, flag_where(path, word)))
            i += 1
            continue
        if eq:
            value = word.slice(len(name) + 3, len(word.text))
            out.append(_setting(dialect, key, value, flag_where(path, word, value)))
            i += 1
            continue
        following = words[i + 1] if i + 1 < len(words) else None
        if following is None or _option(following):
            out.append(Setting(key, True, flag_where(path, word)))  # a switch (const=True), or argparse refuses
            i += 1
        elif key in lists:
            end = i + 1
            while end < len(words) and not _option(words[end]):
                end += 1
            values = words[i + 1:end]
            where = Where(path, flag_where(path, word).key, _cover(values), "--" + name, "flag")
            out.append(Setting(key, [v.text for v in values], where, all(v.resolved for v in values)))
            i = end
        elif _is_bool(dialect, key) and following.text.lower() not in BOOL_WORDS and following.resolved:
            out.append(Setting(key, True, flag_where(path, word)))  # the word after is not a truth value
            i += 1
        else:
            out.append(_setting(dialect, key, following, flag_where(path, word, following)))
            i += 2
    return out, rest


def _setting(dialect: Dialect, key: str, value: LText, where: Where) -> Setting:
    if not value.resolved:
        return Setting(key, value.raw or value.text, where, known=False)
    return Setting(key, hf_value(dialect, key, value.text), where)


def _cover(words: list[LText]):
    from guard.diagnostic import Span

    first, last = words[0].span(), words[-1].span()
    if first.line == last.line and last.stop[1] > first.col:
        return Span(first.line, first.col, last.line, last.stop[1])
    return Span(first.line, first.col)


def dotlist(words: list[LText], path: str) -> tuple[list[Setting], list[LText]]:
    """OmegaConf.from_cli: `key=value` words, each value read as YAML (OmegaConf's loader reads 1e-4 as a
    float); a dotted key sets a nested value, which guard keeps under its top-level key's name."""
    import yaml

    out, rest = [], []
    for word in words:
        key, eq, text = word.text.partition("=")
        if not eq or not key or key.startswith("-"):
            rest.append(word)
            continue
        value_word = word.slice(len(key) + 1, len(word.text))
        where = Where(path, word.slice(0, len(key)).span(), value_word.span() if text else word.span(), key, "flag")
        if not word.resolved:
            out.append(Setting(key, word.raw or text, where, known=False))
            continue
        try:
            value = yaml.safe_load(text) if text else None
        except yaml.YAMLError:
            value = text
        if isinstance(value, str):
            value = _float(value)
        out.append(Setting(key, value, where))
    return out, rest


def _float(text: str) -> Any:
    try:
        return float(text) if any(c.isdigit() for c in text) and text.strip() == text else text
    except ValueError:
        return text


def coerce(value: Any, existing: Any = None) -> Any:
    """axolotl cli/config.py _coerce_value: a string CLI value cast to the file's type, else YAML-style."""
    if not isinstance(value, str):
        return value
    if existing is not None:
        if isinstance(existing, bool):
            return value.lower() in ("true", "1", "yes")
        for kind in (int, float):
            if isinstance(existing, kind):
                try:
                    return kind(value)
                except ValueError:
                    return value
        return value
    lower = value.lower()
    if lower in ("true", "yes", "false", "no"):
        return lower in ("true", "yes")
    if lower in ("null", "none", "~"):
        return None
    for kind in (int, float):
        try:
            return kind(value)
        except ValueError:
            pass
    return value


def axolotl_args(words: list[LText], path: str, existing: dict, switches: bool = True
                 ) -> tuple[list[Setting], list[LText]]:
    """`axolotl train CONFIG --key-name value` (click; `switches`: its --x/--no-x options) or
    `python -m axolotl.cli.train CONFIG --key_name=value` (fire). Values cast as load_cfg casts them."""
    out, rest = [], []
    i = 0
    while i < len(words):
        word = words[i]
        if not word.text.startswith("--") or not word.resolved or word.text == "--":
            rest.append(word)
            i += 1
            continue
        name, eq, _ = word.text[2:].partition("=")
        key = name.replace("-", "_")
        if switches and not eq and (key in AXOLOTL_SWITCHES or key.startswith("no_") and key[3:] in AXOLOTL_SWITCHES):
            out.append(Setting(key.removeprefix("no_"), not key.startswith("no_"), flag_where(path, word)))
            i += 1
            continue
        following = words[i + 1] if i + 1 < len(words) else None
        if eq:
            value, step = word.slice(len(name) + 3, len(word.text)), 1
        elif following is None or _option(following):
            out.append(Setting(key, True, flag_where(path, word)))  # fire: a flag alone is True
            i += 1
            continue
        else:
            value, step = following, 2
        where = flag_where(path, word, value)
        out.append(Setting(key, coerce(value.text, existing.get(key)), where) if value.resolved
                   else Setting(key, value.raw or value.text, where, known=False))
        i += step
    return out, rest
