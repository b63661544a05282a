"""Write a changed job into a DeepSpeed config as a minimal edit: values in place, new keys in the file's style."""

from __future__ import annotations

import json
import re
from typing import Any

from guard.job.deepspeed_changes import KeyChange, config_changes
from guard.job.edits import (
    Edit,
    Refusal,
    Rewrite,
    line_starts,
    offset,
    position,
    whole_changes,
)
from guard.sources.document import Document, pointer_of

SEPARATOR = re.compile(r"\s*,\s*")
COLON = re.compile(r"\s*:\s*")


def deepspeed_edits(doc: Document, old, new) -> Rewrite:
    """Edits of `doc` (a DeepSpeed JSON/hjson/YAML config) that make guard read `new` where it read `old`.

    Refused changes ("auto" values the HF Trainer fills in, a section that is not an object, a key to add to a
    YAML file) are in `.refused`; values left alone on purpose in `.notes`.
    """
    plan = config_changes(doc.data if isinstance(doc.data, dict) else {}, old, new,
                          megatron=new.framework == "megatron-deepspeed", label=doc.path,
                          locate=lambda *keys: (doc.path, doc.span(pointer_of(keys))))
    out = Rewrite(refused=plan.refused, notes=plan.notes)
    edits = [(field, edit) for edit, field in key_edits(doc, plan.changes, out)]
    kept, dropped = whole_changes(edits, out.refused)
    out.extend(kept)
    out.refused.extend(dropped)
    return out


def key_edits(doc: Document, changes: list[KeyChange], out: Rewrite) -> list[tuple[Edit, str]]:
    """(edit, job field) for each change: replacements in place, additions grouped per enclosing object."""
    edits: list[tuple[Edit, str]] = []
    additions: dict[str, tuple[dict, list[str]]] = {}  # object pointer -> (members to add, fields)
    for change in changes:
        pointer = pointer_of(change.path)
        if pointer in doc.locations:
            current = _get(doc.data, change.path)
            if current == "auto":
                out.refused.append(_refusal(doc, change, pointer, f'{".".join(change.path)} is "auto": left for '
                                            "the HF Trainer to fill in"))
            elif current != change.value or type(current) is not type(change.value):
                span = doc.locations[pointer].value
                written = _slice(doc.text, (span.line, span.col), span.stop)
                edits.append((Edit(doc.path, (span.line, span.col), span.stop,
                                   _scalar(change.value, written, doc.format)), change.field))
            continue
        depth = max(i for i in range(len(change.path)) if pointer_of(change.path[:i]) in doc.locations or i == 0)
        parent = _get(doc.data, change.path[:depth])
        if not isinstance(parent, dict):
            where = ".".join(change.path[:depth]) or "the top level"
            out.refused.append(_refusal(doc, change, pointer_of(change.path[:depth]),
                                        f"{where} is not an object: set {'.'.join(change.path)} by hand"))
            continue
        members, fields = additions.setdefault(pointer_of(change.path[:depth]), ({}, []))
        _nest(members, change.path[depth:], change.value)
        fields.append(change.field)
    for pointer, (members, fields) in additions.items():
        if doc.format != "json":
            names = ", ".join(_dotted(pointer, members))
            out.refused.append(Refusal(", ".join(dict.fromkeys(fields)), f"adding keys to a YAML config is not "
                                       f"supported: add {names} by hand", doc.path))
            continue
        edits.append((_insert(doc, pointer, members), ", ".join(dict.fromkeys(fields))))
    return edits


# -- reading the document ---------------------------------------------------------------------------
def _get(data: Any, path: tuple[str, ...]) -> Any:
    for key in path:
        data = data.get(key) if isinstance(data, dict) else None
    return data


def _nest(members: dict, path: tuple[str, ...], value: Any) -> None:
    for key in path[:-1]:
        members = members.setdefault(key, {})
    members[path[-1]] = value


def _dotted(pointer: str, members: dict, prefix: str = "") -> list[str]:
    base = prefix or pointer.strip("/").replace("/", ".")
    out = []
    for key, value in members.items():
        name = f"{base}.{key}" if base else key
        out.extend(_dotted(pointer, value, name) if isinstance(value, dict) else [f"{name}: {json.dumps(value)}"])
    return out


def _refusal(doc: Document, change: KeyChange, pointer: str, reason: str) -> Refusal:
    span = doc.span(pointer)
    return Refusal(change.field, reason, doc.path, span.line, span.col)


def _slice(text: str, start, end) -> str:
    starts = line_starts(text)
    return text[offset(starts, text, start):offset(starts, text, end)]


# -- writing values in the file's style ---------------------------------------------------------------
def _scalar(value: Any, written: str, fmt: str) -> str:
    """A value spelled as the file spells the one it replaces (quotes, True/true) or as JSON."""
    if isinstance(value, bool):
        word = "true" if value else "false"
        return word.capitalize() if written[:1] in "TF" else word
    if isinstance(value, str) and written[:1] == "'":
        return "'" + value + "'"
    if isinstance(value, str) and fmt == "yaml" and written[:1] not in "\"'" and re.fullmatch(r"[a-z]+", value):
        return value
    return json.dumps(value)


def _render(value: Any, indent: str | None, unit: str, colon: str) -> str:
    """JSON in the file's layout: one member per line at `indent` + unit, or inline when indent is None."""
    if not isinstance(value, dict):
        return json.dumps(value)
    if indent is None:
        return "{" + ", ".join(f"{json.dumps(k)}{colon}{_render(v, None, unit, colon)}" for k, v in value.items()) \
            + "}"
    inner = indent + unit
    body = (",\n" + inner).join(f"{json.dumps(k)}{colon}{_render(v, inner, unit, colon)}" for k, v in value.items())
    return "{\n" + inner + body + "\n" + indent + "}"


def _line_indent(text: str, index: int) -> str:
    start = text.rfind("\n", 0, index) + 1
    return re.match(r"[ \t]*", text[start:]).group()


def _insert(doc: Document, pointer: str, members: dict) -> Edit:
    """Add members to the object at `pointer` after its last member, separated and indented as its members are
    (and with the file's line breaks)."""
    text, starts = doc.text, line_starts(doc.text)
    newline = "\r\n" if "\r\n" in text else "\n"
    span = doc.locations[pointer].value
    a, b = offset(starts, text, (span.line, span.col)), offset(starts, text, span.stop)
    children = sorted(((offset(starts, text, (loc.key.line, loc.key.col)), offset(starts, text, loc.key.stop),
                        offset(starts, text, (loc.value.line, loc.value.col)), offset(starts, text, loc.value.stop))
                       for p, loc in doc.locations.items()
                       if loc.key is not None and p.rsplit("/", 1)[0] == pointer and p != pointer),
                      key=lambda c: c[3])
    outer = _line_indent(text, a)
    unit = "  "
    if not children:
        indent = outer if "\n" in text[a + 1:b - 1] else None
        replacement = _render(members, indent, unit, ": ").replace("\n", newline)
        return Edit(doc.path, position(text, a), position(text, b), replacement)
    key_start, key_end, value_start, value_end = children[-1]
    between = text[children[-2][3]:key_start] if len(children) > 1 else "," + text[a + 1:key_start]
    between = between.replace("\r\n", "\n")
    colon = text[key_end:value_start]
    colon = colon if COLON.fullmatch(colon) else ": "
    member_indent = _line_indent(text, key_start)
    if not SEPARATOR.fullmatch(between):
        between = ",\n" + member_indent if "\n" in between else ", "
    multiline = "\n" in between
    if multiline and len(member_indent) > len(outer) and member_indent.startswith(outer):
        unit = member_indent[len(outer):]
    body = between.join(f"{json.dumps(k)}{colon}{_render(v, member_indent if multiline else None, unit, colon)}"
                        for k, v in members.items())
    trailing = re.match(r"\s*,", text[value_end:b])
    if trailing:  # hjson's trailing comma: keep one after the new last member
        at = value_end + trailing.end()
        added = between[between.index(",") + 1:] + body + ","
    else:
        at, added = value_end, between + body
    return Edit(doc.path, position(text, at), position(text, at), added.replace("\n", newline))
