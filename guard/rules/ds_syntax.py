"""DS0xx: syntax that DeepSpeed and the strict-JSON readers (transformers, accelerate) treat differently."""

from __future__ import annotations

from collections import defaultdict

from guard.diagnostic import Related
from guard.rules.context import DsConfig
from guard.rules.registry import check, rule

DUPLICATE_KEY = rule(
    "DS001", "duplicate-key", "error",
    "The same key appears twice in one object.",
    what="Reports every key that is written more than once in the same JSON/YAML object, at any depth.",
    why="DeepSpeed reads configs with a duplicate-key hook and refuses them (`ValueError: Duplicate "
        "keys in DeepSpeed config`), while Python's json module, used by transformers and accelerate, "
        "silently keeps the last value, so the same file means different things to different tools.",
    example='{\n  "zero_optimization": {"stage": 2, "stage": 3}\n}',
    use_instead='{\n  "zero_optimization": {"stage": 3}\n}',
    references=("deepspeed/runtime/config_utils.py: dict_raise_error_on_duplicate_keys",),
)

HJSON_ONLY = rule(
    "DS002", "hjson-only-syntax", "warning",
    "Comments, trailing commas, unquoted keys or single quotes: valid for DeepSpeed, not for strict JSON.",
    what="Reports syntax that DeepSpeed's hjson reader accepts but strict JSON does not: comments "
         "(`//`, `#`, `/* */`), trailing commas, unquoted keys, single-quoted strings and members "
         "separated only by a newline. One diagnostic per kind, at its first occurrence.",
    why="transformers (`HfDeepSpeedConfig`), accelerate and Megatron-DeepSpeed load the same file "
        "with `json.load`, which fails on these. A config that works with the `deepspeed` launcher "
        "breaks when the job moves to the HF Trainer.",
    example='{\n  "train_batch_size": 32,  // global batch\n}',
    use_instead='{\n  "train_batch_size": 32\n}',
)

BOM = rule(
    "DS003", "byte-order-mark", "warning",
    "The file starts with a UTF-8 byte-order mark.",
    what="Reports a UTF-8 byte-order mark (BOM) at the start of the file.",
    why="`json.load` on a file opened as UTF-8 keeps the BOM and fails with 'Unexpected UTF-8 BOM', "
        "so transformers and accelerate refuse a file that an editor made look fine.",
    example="\\ufeff{\"train_batch_size\": 32}",
    use_instead="{\"train_batch_size\": 32}",
)

NON_FINITE = rule(
    "DS004", "non-finite-number", "error",
    "NaN or Infinity written as a number.",
    what="Reports the literals `NaN`, `Infinity` and `-Infinity`.",
    why="They are not JSON. Python's json accepts them, but DeepSpeed's hjson reader takes them "
        "as the start of an unquoted string: `HjsonDecodeError: Bad key name (eof)` when a `}` "
        "follows on the same line, a string value otherwise. No DeepSpeed setting is meaningful "
        "at infinity.",
    example='{"fp16": {"loss_scale": Infinity}}',
    use_instead='{"fp16": {"loss_scale": 0}}',
)

_NAMES = {"comment": "a comment", "trailing comma": "a trailing comma", "unquoted key": "an unquoted key",
          "single-quoted string": "a single-quoted string", "missing comma": "a missing comma"}


@check(DUPLICATE_KEY, target="document")
def duplicate_keys(ctx: DsConfig) -> None:
    for dup in ctx.doc.duplicates:
        key = dup.pointer.rsplit("/", 1)[-1]
        first = Related(f"first {key!r} is here", ctx.doc.path, dup.first)
        ctx.report_at(DUPLICATE_KEY, dup.again, dup.pointer,
                      f"duplicate key {key!r} (first at line {dup.first.line}); DeepSpeed rejects the "
                      "file, while json.load would silently keep this last value",
                      help="keep one of the two entries", related=[first])


@check(HJSON_ONLY, NON_FINITE, target="document")
def lenient_syntax(ctx: DsConfig) -> None:
    if ctx.doc.format != "json":
        return
    by_kind = defaultdict(list)
    for item in ctx.doc.leniencies:
        by_kind[item.kind].append(item.span)
    for kind, spans in by_kind.items():
        if kind == "non-finite number":
            for span in spans:
                ctx.report_at(NON_FINITE, span, None, "NaN/Infinity is not a JSON number; DeepSpeed's "
                              "hjson reader reads it as an unquoted string or fails",
                              help="write a finite number")
            continue
        more = f" ({len(spans)} in this file)" if len(spans) > 1 else ""
        ctx.report_at(HJSON_ONLY, spans[0], None,
                      f"{_NAMES.get(kind, kind)}{more}: DeepSpeed's hjson reader accepts it, but "
                      "transformers, accelerate and Megatron-DeepSpeed read configs with strict json.load",
                      help="remove it to make the file strict JSON", data={"kind": kind, "count": len(spans)})


@check(BOM, target="document")
def byte_order_mark(ctx: DsConfig) -> None:
    if ctx.doc.has_bom:
        ctx.report_at(BOM, ctx.span(), None, "file starts with a UTF-8 byte-order mark; json.load "
                      "in transformers/accelerate fails with 'Unexpected UTF-8 BOM'",
                      help="save the file as UTF-8 without BOM")
