"""A fine-tuning framework's training config read once: each canonical value, written or defaulted, located."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from guard.diagnostic import FILE_START, Span
from guard.job.finetune_dialects import Dialect, detect
from guard.job.origin import Origin
from guard.sources.document import Document, escape

TRUE = {"true", "1", "yes", "on"}
OFF = (None, False, "", [], {}, "none")  # a trainer option written but switched off


def as_int(value) -> int | None:
    """A value as argparse's type=int reads it (a command line gives text); None when it is not one."""
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


@dataclass(frozen=True)
class Where:
    """Where one value is written: a key of the config file, or a flag (or `key=value`) on a command line."""

    path: str
    key: Span  # the key or the flag
    value: Span  # its value (the flag itself for a switch given alone)
    pointer: str  # "/cutoff_len" in a file, "--cutoff_len" on a command line
    kind: str = "key"  # "key" or "flag"


@dataclass
class FineTuneConfig:
    dialect: Dialect
    doc: Document  # the config file; for a command line alone, the script it is written in
    values: dict[str, Any] = field(default_factory=dict)  # canonical field -> value (written, else default)
    written: dict[str, str] = field(default_factory=dict)  # canonical field -> the key as written
    places: dict[str, Where] = field(default_factory=dict)  # canonical field -> where it is written
    anchor: Span = FILE_START  # where an unwritten value is reported: the file's start, or the command

    @property
    def path(self) -> str:
        return self.doc.path

    def get(self, name: str) -> Any:
        return self.values.get(name, self.dialect.defaults.get(name))

    def where(self, name: str) -> Where | None:
        place = self.places.get(name)
        key = self.written.get(name)
        if place is None and key:  # a config built by hand: located in its document
            pointer = "/" + escape(key)
            place = Where(self.path, self.doc.span(pointer), self.doc.span(pointer, key=False), pointer)
        return place

    def span(self, name: str, value: bool = False) -> Span:
        place = self.where(name)
        return (place.value if value else place.key) if place else self.anchor

    def origin(self, name: str) -> Origin:
        place = self.where(name)
        if place is None:
            return Origin("default", self.dialect.keys.get(name, name),
                          reason=f"{self.dialect.title}'s default {self.get(name)!r}")
        label = place.pointer if place.kind == "flag" else self.written[name]
        return Origin(place.kind, label, place.path, place.key.line, place.key.col, place.pointer)

    def put(self, key: str, value: Any, where: Where) -> bool:
        """Set the framework's `key` (a command-line override, or a key of the file) to `value`, written at
        `where`; False when the key is none guard reads."""
        names = [n for n, k in self.dialect.keys.items() if k == key]
        older = self.dialect.older.get(key)
        if older and self.dialect.keys[older] not in self.written.values():
            names = [older]  # an older spelling, read when the newer key is not written
        for name in names:
            self.values[name], self.written[name], self.places[name] = value, key, where
        return bool(names)

    def given(self, name: str, value: Any, where: Where) -> None:
        """A value the command itself says rather than a key (the `dpo` of `trl dpo`): read, and located there."""
        self.values[name], self.places[name] = value, where

    # -- what the values mean ------------------------------------------------------------------------
    def flag(self, name: str) -> bool:
        value = self.get(name)
        return value.strip().lower() in TRUE if isinstance(value, str) else bool(value)

    @property
    def method(self) -> str:
        """"full", "freeze", "lora" or "qlora" (a LoRA over a quantized base)."""
        raw = self.get("method")
        if self.dialect.name == "trl":
            kind = "lora" if self.flag("method") else "full"
        elif self.dialect.name == "axolotl":
            kind = str(raw).lower() if raw else "full"
        elif self.dialect.name == "openrlhf":  # --ds.lora.rank N > 0: a LoRA adapter (openrlhf/models/actor.py)
            kind = "lora" if isinstance(self.get("lora_rank"), int) and self.get("lora_rank") > 0 else "full"
        else:
            kind = str(raw or "lora").lower()
        if kind == "oft":
            return kind
        return "qlora" if kind in ("lora", "qlora") and self.quant_bits else kind

    @property
    def quant_bits(self) -> int | None:
        if self.dialect.name == "llamafactory":
            bits = self.get("quant_bits")
            return bits if isinstance(bits, int) and not isinstance(bits, bool) else None
        return 4 if self.flag("load_in_4bit") else 8 if self.flag("load_in_8bit") else None

    @property
    def gradient_checkpointing(self) -> bool:
        if self.dialect.name == "llamafactory":
            return not self.flag("no_gradient_checkpointing")
        value = self.get("gradient_checkpointing")
        return value not in (False, None, "false", "False")  # axolotl's "offload" modes checkpoint too

    @property
    def reentrant(self) -> bool:
        if self.dialect.name in ("llamafactory", "openrlhf"):
            return self.flag("use_reentrant")
        kwargs = self.get("gradient_checkpointing_kwargs")
        if isinstance(kwargs, dict) and "use_reentrant" in kwargs:
            return bool(kwargs["use_reentrant"])
        return False  # axolotl core/builders/base.py; transformers 5 modeling_utils: {"use_reentrant": False}

    @property
    def lora_rank(self) -> int:
        rank = self.get("lora_rank")
        return rank if isinstance(rank, int) and rank > 0 else 8  # peft LoraConfig(r=8)

    @property
    def lora_alpha(self) -> float:
        alpha = self.get("lora_alpha")
        if isinstance(alpha, (int, float)) and not isinstance(alpha, bool):
            return alpha
        return 2 * self.lora_rank if self.dialect.name == "llamafactory" else 8  # finetuning_args / peft default

    @property
    def lora_target(self):
        if self.dialect.name == "axolotl" and self.flag("lora_target_linear"):
            return "all-linear"
        return self.get("lora_target")

    def precision(self) -> str:
        """The training dtype the config asks for: bf16, fp16 or fp32 (axolotl's "auto": bf16; OpenRLHF's
        --ds.param_dtype, bf16 by default, or before 0.10.2 its --bf16 switch, fp16 without it)."""
        if self.dialect.name == "openrlhf":
            if "param_dtype" in self.written or "bf16" not in self.written:
                return str(self.get("param_dtype"))
            return "bf16" if self.flag("bf16") else "fp16"
        bf16 = self.get("bf16")
        if "bf16" not in self.written and self.flag("fp16"):  # TRL's bf16 default is `not fp16`
            return "fp16"
        if bf16 == "auto" or self.flag("bf16"):
            return "bf16"
        return "fp16" if self.flag("fp16") else "fp32"


def read(doc: Document, dialect: Dialect | None = None) -> FineTuneConfig | None:
    """The training config in `doc`, or None when it is not one guard knows (`dialect`: the framework that
    reads it, when the command that runs it says so)."""
    dialect = dialect or detect(doc.data)
    if dialect is None or not isinstance(doc.data, dict):
        return None
    config = FineTuneConfig(dialect, doc)
    for key, value in doc.data.items():
        if isinstance(key, str):
            pointer = "/" + escape(key)
            config.put(key, value, Where(doc.path, doc.span(pointer), doc.span(pointer, key=False), pointer))
    return config
