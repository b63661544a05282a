"""Turn libcst expression nodes into plain Python values where the source spells a literal."""

from __future__ import annotations

import ast
from typing import Any

import libcst as cst

_EMPTY = cst.Module(body=[])
NAMED_CONSTANTS = {"True": True, "False": False, "None": None}


class NotLiteral(Exception):
    """The expression needs running code to know its value."""


def code(node: cst.CSTNode) -> str:
    return _EMPTY.code_for_node(node)


def literal(node: cst.BaseExpression, *, names: bool = False) -> Any:
    """The value of a literal expression (numbers, strings, lists, dicts, arithmetic on them).

    With `names`, a dict value that is a bare name (int, str, a type function) becomes
    {"name": ...} and any other expression {"expr": ...}, as argparse_meta dicts hold them.
    """
    if isinstance(node, cst.Name) and node.value in NAMED_CONSTANTS:
        return NAMED_CONSTANTS[node.value]
    if isinstance(node, (cst.SimpleString, cst.ConcatenatedString)):
        value = node.evaluated_value
        if isinstance(value, bytes):
            raise NotLiteral(code(node))
        return value
    if isinstance(node, cst.FormattedString):
        raise NotLiteral(code(node))
    if isinstance(node, (cst.List, cst.Tuple, cst.Set)):
        return [literal(e.value) for e in node.elements if isinstance(e, cst.Element)]
    if isinstance(node, cst.Dict):
        out = {}
        for element in node.elements:
            if not isinstance(element, cst.DictElement):
                raise NotLiteral(code(node))
            out[literal(element.key)] = _meta_value(element.value) if names else literal(element.value)
        return out
    if isinstance(node, (cst.Integer, cst.Float, cst.UnaryOperation, cst.BinaryOperation)):
        try:  # ast.literal_eval refuses 2**32; a tree of numbers and operators is safe to evaluate
            tree = ast.parse(code(node).strip(), mode="eval")
            if all(isinstance(n, (ast.Expression, ast.BinOp, ast.UnaryOp, ast.Constant, ast.operator,
                                  ast.unaryop)) for n in ast.walk(tree)):
                return eval(compile(tree, "<literal>", "eval"), {"__builtins__": {}})  # noqa: S307
        except (SyntaxError, ArithmeticError, ValueError, TypeError):
            pass
    raise NotLiteral(code(node))


def _meta_value(node: cst.BaseExpression) -> Any:
    try:
        return literal(node, names=True)
    except NotLiteral:
        name = dotted(node)
        return {"name": name} if name is not None else {"expr": " ".join(code(node).split())}


def value_or_expr(node: cst.BaseExpression) -> Any:
    """A literal value, or {"expr": source text} when the value is computed at run time."""
    try:
        return literal(node)
    except NotLiteral:
        return {"expr": " ".join(code(node).split())}


def dotted(node: cst.BaseExpression) -> str | None:
    """'a.b.c' for a Name/Attribute chain, else None."""
    if isinstance(node, cst.Name):
        return node.value
    if isinstance(node, cst.Attribute):
        base = dotted(node.value)
        return f"{base}.{node.attr.value}" if base else None
    return None
