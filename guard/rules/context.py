"""What a DeepSpeed rule sees: the config as written and as DeepSpeed reads it, the judging context, and the job
read from it (the ZeRO stage, the batch and the world come from the job, read once)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterator

from guard.deepspeed_schema import SchemaIndex
from guard.diagnostic import Diagnostic, Related, Span
from guard.rules.registry import Rule
from guard.sources.document import Document, escape

MISSING = object()
# Keys whose values the job holds (guard/job/from_deepspeed.py reads them once): a job-level rule reads the job.
JUDGED_BY_JOB = frozenset({("zero_optimization", "stage"), ("train_batch_size",), ("train_micro_batch_size_per_gpu",),
                           ("gradient_accumulation_steps",)})


class HeldValue(AssertionError):
    """A job-level rule read, from the document, a value the job holds (a bug in the rule: read the job)."""


@dataclass
class DsConfig:
    """A DeepSpeed config inside a document (the whole file, or part of a GPT-NeoX YAML)."""

    doc: Document
    data: dict[str, Any]
    schema: SchemaIndex
    kind: str = "deepspeed"  # "deepspeed" (a config file), "neox" (part of a NeoX YAML) or "accelerate"
    context: str = "deepspeed"  # "hf": HF Trainer/accelerate fill "auto"; "deepspeed": plain
    context_reason: str = ""
    version: tuple[int, ...] = (0,)
    version_text: str = ""
    job: Any = None  # guard.job.training_job.TrainingJob read from this config (its stage, batch, world)
    strict: bool = False  # a job-level rule is running: values the job holds are read from it, not here
    # Who calls deepspeed.initialize: "deepspeed" (a plain script: DeepSpeed builds the optimizer from the
    # config), "megatron-deepspeed" (passes its own optimizer), "hf" (HF Trainer / accelerate).
    framework: str = "deepspeed"
    batch_filled: bool = False  # the HF Trainer wrote train_batch_size from its own arguments, for this launch
    # Top-level key -> JSON pointer of its base in the document (NeoX merges and renames keys).
    origin: dict[str, str] = field(default_factory=dict)
    diagnostics: list[Diagnostic] = field(default_factory=list)

    # -- reading values ----------------------------------------------------------------------
    def get(self, *path: str, default: Any = None) -> Any:
        if self.strict and tuple(path) in JUDGED_BY_JOB:
            raise HeldValue(f"{'.'.join(path)}: the job holds this value; a job-level rule reads it from the job")
        return self._lookup(path, default)

    def _lookup(self, path: tuple[str, ...], default: Any) -> Any:
        node: Any = self.data
        for token in path:
            if not isinstance(token, str):  # a default passed positionally would be read as a key
                raise TypeError(f"path tokens must be strings, got {token!r}; pass default=...")
            if not isinstance(node, dict) or token not in node:
                return default
            node = node[token]
        return node

    def written(self, *path: str, default: Any = None) -> Any:
        """The value as written, for rules about the writing itself ("auto" left where the Trainer fills it)."""
        return self._lookup(path, default)

    def has(self, *path: str) -> bool:
        """Whether the key is written (a fact of the document, whoever holds its value)."""
        return self._lookup(path, MISSING) is not MISSING

    def section(self, name: str) -> dict[str, Any]:
        value = self.data.get(name)
        return value if isinstance(value, dict) else {}

    @property
    def builds_optimizer(self) -> bool:
        """Whether DeepSpeed builds the optimizer from the `optimizer` section.

        Megatron-DeepSpeed always passes its own (setup_model_and_optimizer: deepspeed.initialize(
        optimizer=get_megatron_optimizer(...))), and DeepSpeed then never reads the section.
        """
        return self.framework != "megatron-deepspeed"

    def written_key(self, *path: str) -> str | None:
        """The key that sets the field at `path` as written: its name, or the deprecated spelling DeepSpeed
        copies into it (`cpu_offload` for `offload_optimizer`); None when neither is written."""
        parent = self.get(*path[:-1]) if path[:-1] else self.data
        if not isinstance(parent, dict):
            return None
        if path[-1] in parent:
            return path[-1]
        for key in parent:
            node = self.schema.node((*path[:-1], key)) or {}
            if node.get("deprecated") and node.get("x-new-param") == path[-1]:
                return key
        return None

    def offload_device(self, block: str) -> Any:
        """`zero_optimization.<block>.device` as DeepSpeed reads it, the deprecated booleans included:
        `cpu_offload` / `cpu_offload_param` true become a cpu block (zero/config.py new_param_fn)."""
        key = self.written_key("zero_optimization", block)
        value = self.get("zero_optimization", key) if key else None
        if key == block:
            return value.get("device") if isinstance(value, dict) else None
        return "cpu" if key and flag(value, False) else None

    @property
    def is_hf(self) -> bool:
        return self.context == "hf"

    def walk(self) -> Iterator[tuple[tuple[str, ...], Any]]:
        """Every (path, value) pair, depth first; list items get their index as a string."""
        stack: list[tuple[tuple[str, ...], Any]] = [((), self.data)]
        while stack:
            path, value = stack.pop()
            yield path, value
            if isinstance(value, dict):
                stack.extend(((*path, str(k)), v) for k, v in reversed(list(value.items())))
            elif isinstance(value, list):
                stack.extend(((*path, str(i)), v) for i, v in reversed(list(enumerate(value))))

    # -- locating and reporting ----------------------------------------------------------------
    def pointer(self, *path: str) -> str:
        if not path:
            return ""
        base = self.origin.get(path[0], "/" + escape(path[0]))
        return base + "".join("/" + escape(str(t)) for t in path[1:])

    def span(self, *path: str, key: bool = True) -> Span:
        return self.doc.span(self.pointer(*path), key=key)

    def report(self, rule: Rule, path: tuple[str, ...], message: str, *, help: str | None = None,
               at_value: bool = False, related: list[Related] | None = None,
               data: dict[str, Any] | None = None) -> Diagnostic:
        """Report `rule` at the key (or value) that `path` names in the config."""
        return self.report_at(rule, self.span(*path, key=not at_value), self.pointer(*path), message,
                              help=help, related=related, data=data)

    def report_at(self, rule: Rule, span: Span, pointer: str | None, message: str, *,
                  help: str | None = None, related: list[Related] | None = None,
                  data: dict[str, Any] | None = None) -> Diagnostic:
        diag = rule.diagnostic(self.doc.path, message, span, pointer, help=help, related=related, data=data)
        self.diagnostics.append(diag)
        return diag


_WORDS = {"true": True, "false": False, "1": True, "0": False, "yes": True, "no": False,
          "on": True, "off": False}


def flag(value: Any, default: bool, *, pydantic: bool = True) -> bool:
    """A boolean setting as DeepSpeed reads it.

    pydantic sections convert "true"/"false" strings and 0/1; dict sections and the top level
    test plain truthiness. A missing value or "auto" (dropped, or not filled) means the default.
    """
    if isinstance(value, bool):
        return value
    if value is None or value == "auto":
        return default
    if not pydantic:
        return bool(value)
    if isinstance(value, str):
        return _WORDS.get(value.strip().lower(), default)
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    return default


def fmt(value: Any) -> str:
    """A value as it is written in JSON, for messages."""
    import json

    try:
        return json.dumps(value)
    except (TypeError, ValueError):
        return repr(value)
