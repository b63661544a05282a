"""One parser flag as a record: from an `add_argument` call or a config dataclass field, with its deprecation."""

from __future__ import annotations

import re
from typing import Any

import libcst as cst

from guard.megatron.cst_values import code, dotted, value_or_expr
from guard.megatron.dataclass_flags import dataclass_fields, field_flag
from guard.megatron.source_tree import Found, SourceTree

# A help text or message that says the flag itself is deprecated (not one that mentions another's).
DEPRECATED = re.compile(r"^\W*deprecated|\bdeprecated[.:;,]|\bis deprecated|\bare deprecated|"
                        r"no longer (valid|used|supported)|has no effect", re.I)
# In help text only a sentence that starts with "Deprecated" is about the flag itself.
HELP_DEPRECATED = re.compile(r"(^|[.!]\s+)\W*deprecated\b|no longer (valid|used|supported)", re.I)
REPLACEMENT = re.compile(r"\buse (--[a-z0-9][a-z0-9_-]*)", re.I)
ACTION_DEFAULTS = {"store_true": False, "store_false": True, "count": None}


def argument_flag(module: str, function: str, node: cst.Call, group: str, notes: list[str]) -> dict[str, Any] | None:
    """`group.add_argument(...)` in `module.function` as a record; None (and a note) without literal names."""
    names = []
    kwargs: dict[str, Any] = {}
    for arg in node.args:
        if arg.keyword is None and arg.star == "":
            value = value_or_expr(arg.value)
            if isinstance(value, str):
                names.append(value)
        elif arg.keyword is not None:
            key = arg.keyword.value
            if key in ("type", "action") and not isinstance(arg.value, cst.SimpleString):
                kwargs[key] = dotted(arg.value) or " ".join(code(arg.value).split())
            else:
                kwargs[key] = value_or_expr(arg.value)
        else:
            notes.append(f"{module}: **kwargs in {code(node)[:60]} not expanded")
    if not names:
        notes.append(f"{module}: add_argument without literal names: {code(node)[:80]}")
        return None
    action = kwargs.pop("action", "store")
    dest = kwargs.pop("dest", None) or _default_dest(names)
    default = kwargs.pop("default", ACTION_DEFAULTS.get(action))
    return {"option_strings": names, "dest": dest, "action": action, "type": kwargs.pop("type", None),
            "nargs": kwargs.pop("nargs", None), "choices": kwargs.pop("choices", None),
            "default": default, "const": kwargs.pop("const", None),
            "required": kwargs.pop("required", False) is True, "help": _one_line(kwargs.pop("help", "")),
            "group": group, "origin": f"{module}:{function}"}


def dataclass_flags(tree: SourceTree, found: Found, exclude: list[str], title: str,
                    notes: list[str]) -> list[dict[str, Any]]:
    """The flags ArgumentGroupFactory builds from the dataclass `found` in group `title`."""
    out = []
    for f in dataclass_fields(tree, found):
        if f["name"] in exclude or not f["init"]:
            continue
        flag = field_flag(tree, f)
        if flag is None:
            notes.append(f"{found.node.name.value}.{f['name']}: annotation "
                         f"{code(f['annotation'])} has no argparse form (not excluded)")
            continue
        flag.update({"group": title, "origin": f"{f['module']}:{found.node.name.value}.{f['name']}",
                     "required": False, "const": None, "help": _one_line(flag.get("help", ""))})
        out.append(flag)
    return out


def finish_flag(flag: dict[str, Any], condition: str | None) -> dict[str, Any]:
    """Add the `if` the flag is defined under, and the deprecation its help text announces."""
    if condition:
        flag["condition"] = condition
    help_text = flag.get("help") or ""
    if isinstance(help_text, str) and HELP_DEPRECATED.search(help_text):
        flag["deprecated"] = {"message": help_text}
        match = REPLACEMENT.search(help_text)
        if match:
            flag["deprecated"]["replacement"] = match.group(1)
    return flag


def _default_dest(names: list[str]) -> str:
    longs = [n for n in names if n.startswith("--")]
    return (longs or names)[0].lstrip("-").replace("-", "_")


def _one_line(text: Any) -> str:
    if not isinstance(text, str):
        return ""
    return " ".join(text.split())
