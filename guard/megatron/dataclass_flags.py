"""Flags that Megatron's ArgumentGroupFactory builds from a config dataclass, read statically."""

from __future__ import annotations

from typing import Any

import libcst as cst

from guard.megatron.cst_values import NotLiteral, code, dotted, literal, value_or_expr
from guard.megatron.source_tree import Found, SourceTree

ENUM_BASES = {"Enum", "IntEnum", "StrEnum", "enum.Enum", "enum.IntEnum", "enum.StrEnum", "Flag"}
PRIMITIVES = {"int", "float", "str", "bool"}


class TypeInference(Exception):
    """ArgumentGroupFactory cannot derive argparse settings from this annotation (it raises too)."""


def dataclass_fields(tree: SourceTree, found: Found) -> list[dict[str, Any]]:
    """Every init field of the dataclass, base classes first, as ArgumentGroupFactory sees them."""
    cls = found.node
    assert isinstance(cls, cst.ClassDef)
    fields: dict[str, dict[str, Any]] = {}
    for base in cls.bases[:1]:  # ArgumentGroupFactory and dataclasses both follow the first base
        name = dotted(base.value)
        parent = tree.resolve(found.module, name, cst.ClassDef) if name else None
        if parent is not None:
            for f in dataclass_fields(tree, parent):
                fields[f["name"]] = f
    body = list(cls.body.body)
    for index, stmt in enumerate(body):
        if not isinstance(stmt, cst.SimpleStatementLine):
            continue
        for small in stmt.body:
            if isinstance(small, cst.AnnAssign) and isinstance(small.target, cst.Name):
                f = _field(small, found.module)
                if f is not None:  # an override keeps the base field's position, as in dataclasses
                    f["doc"] = _docstring(body[index + 1]) if index + 1 < len(body) else ""
                    fields[f["name"]] = f
    return list(fields.values())


def _docstring(stmt: cst.CSTNode) -> str:
    """The string literal right after a field: ArgumentGroupFactory uses it as the flag's help."""
    if isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1 and \
            isinstance(stmt.body[0], cst.Expr) and isinstance(stmt.body[0].value, cst.SimpleString):
        value = stmt.body[0].value.evaluated_value
        return " ".join(value.split()) if isinstance(value, str) else ""
    return ""


def _field(node: cst.AnnAssign, module: str) -> dict[str, Any] | None:
    annotation = node.annotation.annotation
    if (dotted(annotation) or "").endswith("ClassVar") or (
            isinstance(annotation, cst.Subscript) and (dotted(annotation.value) or "").endswith("ClassVar")):
        return None
    out: dict[str, Any] = {"name": node.target.value, "annotation": annotation, "module": module,
                           "default": None, "meta": None, "init": True}
    value = node.value
    if isinstance(value, cst.Call) and (dotted(value.func) or "") in ("field", "dataclasses.field"):
        for arg in value.args:
            key = arg.keyword.value if arg.keyword else None
            if key == "default":
                out["default"] = value_or_expr(arg.value)
            elif key == "default_factory":
                out["default"] = _factory_value(arg.value)
            elif key == "init":
                out["init"] = value_or_expr(arg.value) is not False
            elif key == "metadata":
                try:
                    meta = literal(arg.value, names=True)
                except NotLiteral:
                    meta = None
                if isinstance(meta, dict):
                    out["meta"] = meta.get("argparse_meta")
    elif value is not None:
        out["default"] = value_or_expr(value)
    return out


def _factory_value(node: cst.BaseExpression) -> Any:
    """What default_factory() returns, for the factories seen in config dataclasses."""
    name = dotted(node)
    if name in ("list", "dict", "set", "tuple"):
        return {"list": [], "dict": {}, "set": [], "tuple": []}[name]
    if isinstance(node, cst.Lambda):
        return value_or_expr(node.body)
    return {"expr": code(node) + "()"}


def field_flag(tree: SourceTree, f: dict[str, Any]) -> dict[str, Any] | None:
    """The add_argument settings ArgumentGroupFactory derives for one field (None: it would raise)."""
    name = f["name"]
    flag: dict[str, Any] = {"option_strings": ["--" + name.replace("_", "-")], "dest": name,
                            "help": f.get("doc", ""),
                            "default": f["default"], "action": "store", "type": None,
                            "nargs": None, "choices": None}
    try:
        flag.update(_annotation_kwargs(tree, f["module"], f["annotation"]))
        if flag["type"] == "bool":
            # ArgumentGroupFactory: `action = "store_true" if default == False else "store_false"`
            store_true = flag["default"] is False or flag["default"] == 0
            flag["action"] = "store_true" if store_true else "store_false"
            flag["type"] = None
            if not store_true:
                base = name.replace("_", "-")
                flag["option_strings"] = [f"--no-{base}", f"--disable-{base}"]
    except TypeInference:
        if f["meta"] is None:
            return None
    meta = f["meta"] or {}
    for key, value in meta.items():
        if key == "arg_names":
            flag["option_strings"] = list(value)
        elif key == "type":
            flag["type"] = _type_name(value)
        else:
            flag[key] = value["name"] if isinstance(value, dict) and "name" in value and key == "action" \
                else value
    return flag


def _type_name(value: Any) -> str:
    if isinstance(value, dict) and "name" in value:
        return value["name"]
    return str(value)


def _annotation_kwargs(tree: SourceTree, module: str, node: cst.BaseExpression) -> dict[str, Any]:
    name = dotted(node)
    if name is not None:
        if name in PRIMITIVES:
            return {"type": name}
        found = tree.resolve(module, name, cst.ClassDef)
        if found is not None and _is_enum(found):
            return {"type": "enum:" + name.split(".")[-1], "choices": _enum_members(found)}
        return {"type": name}  # a class argparse calls on the string (torch.dtype, say)
    if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.BitOr):
        if dotted(node.right) == "None":
            return _annotation_kwargs(tree, module, node.left)
        raise TypeInference(code(node))
    if isinstance(node, cst.Subscript):
        origin = (dotted(node.value) or "").split(".")[-1]
        args = [e.slice.value for e in node.slice if isinstance(e.slice, cst.Index)]
        if origin == "Optional" and len(args) == 1:
            return _annotation_kwargs(tree, module, args[0])
        if origin == "Union":
            if len(args) == 2 and dotted(args[1]) == "None":
                return _annotation_kwargs(tree, module, args[0])
            raise TypeInference(code(node))
        if origin in ("list", "List") and len(args) == 1:
            inner = _annotation_kwargs(tree, module, args[0])
            return {**inner, "nargs": "+"}
        if origin == "Literal":
            choices = [literal(a) for a in args]
            return {"type": type(choices[0]).__name__, "choices": choices}
        raise TypeInference(code(node))
    if isinstance(node, cst.SimpleString):  # a forward reference "SomeClass"
        return _annotation_kwargs(tree, module, cst.parse_expression(node.evaluated_value))
    raise TypeInference(code(node))


def _is_enum(found: Found) -> bool:
    return any((dotted(b.value) or "") in ENUM_BASES for b in found.node.bases)


def _enum_members(found: Found) -> list[str]:
    """Member names: ArgumentGroupFactory parses an enum flag with `Enum[text]`."""
    members = []
    for stmt in found.node.body.body:
        if isinstance(stmt, cst.SimpleStatementLine):
            for small in stmt.body:
                if isinstance(small, cst.Assign) and len(small.targets) == 1 and \
                        isinstance(small.targets[0].target, cst.Name):
                    target = small.targets[0].target.value
                    if not target.startswith("_"):
                        members.append(target)
    return members
