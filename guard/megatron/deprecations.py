"""Deprecated and removed flags, read from the messages Megatron's validate_args prints or raises."""

from __future__ import annotations

import re
from typing import Any

import libcst as cst

from guard.megatron.cst_values import dotted
from guard.megatron.flag_record import DEPRECATED, REPLACEMENT
from guard.megatron.source_tree import SourceTree

FLAG = re.compile(r"(--[a-z0-9][a-z0-9_-]*)")
EXITS = {"exit", "sys.exit", "quit"}


def validate_args_messages(tree: SourceTree, module: str) -> dict[str, dict[str, Any]]:
    """Flag -> {message, replacement?, fatal} for each deprecation message validate_args emits."""
    found = tree.find(module, "validate_args", cst.FunctionDef)
    if found is None:
        return {}
    out: dict[str, dict[str, Any]] = {}
    _scan(list(found.node.body.body), out)
    return out


def _scan(body: list[cst.CSTNode], out: dict[str, dict[str, Any]]) -> None:
    exits = any(isinstance(s, cst.SimpleStatementLine) and any(
        isinstance(x, cst.Expr) and isinstance(x.value, cst.Call) and dotted(x.value.func) in EXITS
        for x in s.body) for s in body)
    for stmt in body:
        if isinstance(stmt, cst.SimpleStatementLine):
            for small in stmt.body:
                fatal = isinstance(small, (cst.Assert, cst.Raise)) or exits
                for text in _strings(small):
                    _record(text, fatal, out)
        elif isinstance(stmt, cst.If):
            _scan(list(stmt.body.body), out)
            orelse = stmt.orelse
            while orelse is not None:
                _scan(list(orelse.body.body), out)
                orelse = orelse.orelse if isinstance(orelse, cst.If) else None
        elif hasattr(stmt, "body") and hasattr(stmt.body, "body"):
            _scan(list(stmt.body.body), out)


def _strings(node: cst.CSTNode) -> list[str]:
    """Message texts in a statement: plain strings, joined literals, and f-strings' static text."""
    texts: list[str] = []

    class Collect(cst.CSTVisitor):
        def visit_ConcatenatedString(self, n: cst.ConcatenatedString) -> bool:
            texts.append(_text(n))
            return False

        def visit_SimpleString(self, n: cst.SimpleString) -> None:
            texts.append(_text(n))

        def visit_FormattedString(self, n: cst.FormattedString) -> bool:
            texts.append(_text(n))
            return False

    node.visit(Collect())
    return texts


def _text(node: cst.BaseExpression) -> str:
    if isinstance(node, cst.SimpleString):
        value = node.evaluated_value
        return value if isinstance(value, str) else ""
    if isinstance(node, cst.ConcatenatedString):
        return _text(node.left) + _text(node.right)
    if isinstance(node, cst.FormattedString):
        return "".join(p.value if isinstance(p, cst.FormattedStringText) else "{}" for p in node.parts)
    return ""


def _record(text: str, fatal: bool, out: dict[str, dict[str, Any]]) -> None:
    keyword = DEPRECATED.search(text)
    flag = FLAG.search(text)
    # the flag must be the subject ("--x is deprecated, use --y"), not the advice after the keyword
    if keyword is None or flag is None or flag.start() > keyword.start():
        return
    removed = fatal and "no longer valid" in text
    fact: dict[str, Any] = {"message": " ".join(text.split()), "removed": removed,
                            "source": "validate_args"}
    match = REPLACEMENT.search(text)
    if match and match.group(1) != flag.group(1):
        fact["replacement"] = match.group(1)
    if flag.group(1) not in out or (removed and not out[flag.group(1)]["removed"]):
        out[flag.group(1)] = fact
