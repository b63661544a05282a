"""Walk Megatron's arguments.py with libcst, following the parser through calls, and list every flag it defines."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import libcst as cst

from guard.megatron.cst_values import NotLiteral, code, dotted, literal, value_or_expr
from guard.megatron.flag_record import argument_flag, dataclass_flags, finish_flag
from guard.megatron.source_tree import SourceTree

ARGUMENT_FILES = ("megatron/training/arguments.py", "megatron/arguments.py")
ENTRY_FUNCTIONS = ("parse_args",)
BUILTIN_CALLS = frozenset({"int", "float", "str", "bool", "len", "list", "dict", "tuple", "set", "min", "max",
                           "print", "os", "getattr", "isinstance", "sorted", "range", "type"})


@dataclass
class Binding:
    """What a local variable holds while a function is read."""

    kind: str  # "parser", "group", "factory", "list"
    title: str = ""
    value: Any = None  # factory: (found class, exclude list); list: its items


@dataclass
class Extraction:
    flags: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    walked: list[str] = field(default_factory=list)


class FlagExtractor:
    def __init__(self, tree: SourceTree, module: str):
        self.tree = tree
        self.module = module
        self.out = Extraction()
        self._active: set[tuple[str, str]] = set()
        self._stack: list[str] = []  # the functions being read, innermost last

    # -- entry -----------------------------------------------------------------------------------
    def run(self) -> Extraction:
        for name in ENTRY_FUNCTIONS:
            found = self.tree.find(self.module, name, cst.FunctionDef)
            if found is None:
                raise ValueError(f"{self.module} has no function {name}()")
            self._walk_function(found.module, found.node, {}, parser_param=None)
        return self.out

    # -- functions ---------------------------------------------------------------------------------
    def _walk_function(self, module: str, fn: cst.FunctionDef, env: dict[str, Binding],
                       parser_param: Binding | None, args: list[Binding | None] | None = None) -> None:
        key = (module, fn.name.value)
        if key in self._active:
            return  # recursion: the flags are already being collected
        self._active.add(key)
        self._stack.append(fn.name.value)
        self.out.walked.append(f"{module}.{fn.name.value}")
        local = dict(env)
        params = [p.name.value for p in fn.params.params]
        for name, bound in zip(params, args or []):
            if bound is not None:
                local[name] = bound
        imports = self.tree.imports(module, list(fn.body.body))
        self._walk_body(module, list(fn.body.body), local, imports, condition=None)
        self._active.discard(key)
        self._stack.pop()

    def _walk_body(self, module: str, body: list[cst.CSTNode], env: dict[str, Binding],
                   imports: dict[str, str], condition: str | None) -> None:
        for stmt in body:
            if isinstance(stmt, cst.SimpleStatementLine):
                for small in stmt.body:
                    self._statement(module, small, env, imports, condition)
            elif isinstance(stmt, cst.If):
                test = " ".join(code(stmt.test).split())
                self._walk_body(module, list(stmt.body.body), env, imports, _join(condition, test))
                orelse = stmt.orelse
                while orelse is not None:
                    if isinstance(orelse, cst.If):
                        self._walk_body(module, list(orelse.body.body), env, imports,
                                        _join(condition, "elif " + code(orelse.test)))
                        orelse = orelse.orelse
                    else:
                        self._walk_body(module, list(orelse.body.body), env, imports,
                                        _join(condition, f"not ({test})"))
                        orelse = None
            elif isinstance(stmt, (cst.For, cst.While, cst.With)):
                self._walk_body(module, list(stmt.body.body), env, imports, condition)
            elif isinstance(stmt, cst.Try):
                self._walk_body(module, list(stmt.body.body), env, imports, condition)

    def _statement(self, module: str, small: cst.BaseSmallStatement, env: dict[str, Binding],
                   imports: dict[str, str], condition: str | None) -> None:
        if isinstance(small, cst.Assign) and len(small.targets) == 1:
            target = small.targets[0].target
            bound = self._expr(module, small.value, env, imports, condition)
            if isinstance(target, cst.Name):
                if bound is None and isinstance(small.value, (cst.List, cst.Tuple)):
                    try:
                        bound = Binding("list", value=list(literal(small.value)))
                    except NotLiteral:
                        bound = None
                if bound is not None:
                    env[target.value] = bound
        elif isinstance(small, cst.AugAssign) and isinstance(small.target, cst.Name):
            held = env.get(small.target.value)
            if held is not None and held.kind == "list":
                try:
                    held.value.extend(literal(small.value))
                except NotLiteral:
                    self.out.notes.append(f"could not read {code(small)}")
        elif isinstance(small, cst.Expr):
            # `group.add_argument(...),` (a stray trailing comma) is a one-element tuple
            values = [e.value for e in small.value.elements] if isinstance(small.value, cst.Tuple) \
                else [small.value]
            for value in values:
                self._expr(module, value, env, imports, condition)
        elif isinstance(small, cst.Return) and small.value is not None:
            self._expr(module, small.value, env, imports, condition)

    # -- calls -------------------------------------------------------------------------------------
    def _expr(self, module: str, node: cst.BaseExpression, env: dict[str, Binding],
              imports: dict[str, str], condition: str | None) -> Binding | None:
        if isinstance(node, cst.Name):
            return env.get(node.value)
        if not isinstance(node, cst.Call):
            return None
        func = node.func
        if isinstance(func, cst.Attribute):
            method = func.attr.value
            receiver = self._expr(module, func.value, env, imports, condition)
            if receiver is not None:
                return self._method(module, receiver, method, node, env, imports, condition)
        name = dotted(func)
        if name is None:
            return None
        if name.split(".")[-1] == "ArgumentGroupFactory":
            return self._factory(module, node, env, imports)
        passed = [self._expr(module, a.value, env, imports, condition) for a in node.args]
        if not any(p is not None and p.kind in ("parser", "group") for p in passed):
            if name.endswith("ArgumentParser"):
                return Binding("parser", title="")
            return self._parser_builder(module, name, imports)
        found = self.tree.resolve(module, name, cst.FunctionDef, imports)
        if found is None:
            self.out.notes.append(f"{module}: call {name}(parser) not followed (source not found)")
            return next(p for p in passed if p is not None)
        self._walk_function(found.module, found.node, {}, None, passed)
        # `parser = _add_x_args(parser)` keeps the parser bound
        return next((p for p in passed if p is not None and p.kind == "parser"), None)

    def _parser_builder(self, module: str, name: str, imports: dict[str, str]) -> Binding | None:
        """`parser = build_base_parser()`: a function of the checkout that makes the parser and returns it
        (Megatron of 2023 and its forks); its flags are read and the result is the parser."""
        if name.split(".")[0] in BUILTIN_CALLS:
            return None
        found = self.tree.resolve(module, name, cst.FunctionDef, imports)
        if found is None or "ArgumentParser(" not in code(found.node):
            return None
        self._walk_function(found.module, found.node, {}, None, [])
        return Binding("parser", title="")

    def _method(self, module: str, receiver: Binding, method: str, node: cst.Call,
                env: dict[str, Binding], imports: dict[str, str], condition: str | None
                ) -> Binding | None:
        if receiver.kind == "list" and method in ("append", "extend"):
            try:
                item = literal(node.args[0].value)
                receiver.value.extend(item if method == "extend" else [item])
            except (NotLiteral, IndexError):
                self.out.notes.append(f"could not read {code(node)}")
            return None
        if receiver.kind in ("parser", "group"):
            if method == "add_argument_group":
                return Binding("group", title=_title(node))
            if method == "add_mutually_exclusive_group":
                return Binding("group", title=receiver.title)
            if method == "add_argument":
                self._add_argument(module, node, receiver, condition)
                return None
        if receiver.kind == "factory" and method == "build_group":
            title = ""
            if len(node.args) > 1:
                title = str(value_or_expr(node.args[1].value))
            for arg in node.args:
                if arg.keyword and arg.keyword.value == "title":
                    title = str(value_or_expr(arg.value))
            self._dataclass_group(receiver, title, condition)
            return Binding("group", title=title)
        return None

    def _factory(self, module: str, node: cst.Call, env: dict[str, Binding], imports: dict[str, str]
                 ) -> Binding | None:
        cls_name = dotted(node.args[0].value) if node.args else None
        exclude: list[str] = []
        for arg in node.args[1:]:
            if arg.keyword is None or arg.keyword.value == "exclude":
                if isinstance(arg.value, cst.Name) and arg.value.value in env:
                    exclude = list(env[arg.value.value].value or [])
                else:
                    try:
                        exclude = list(literal(arg.value))
                    except NotLiteral:
                        self.out.notes.append(f"exclude list not read: {code(arg.value)}")
        found = self.tree.resolve(module, cls_name, cst.ClassDef, imports) if cls_name else None
        if found is None:
            self.out.notes.append(f"{module}: dataclass {cls_name} not found; its flags are missing")
            return None
        return Binding("factory", title=cls_name, value=(found, exclude))

    # -- flags -------------------------------------------------------------------------------------
    def _add_argument(self, module: str, node: cst.Call, group: Binding, condition: str | None) -> None:
        flag = argument_flag(module, self._stack[-1], node, group.title, self.out.notes)
        if flag is not None:
            self.out.flags.append(finish_flag(flag, condition))

    def _dataclass_group(self, factory: Binding, title: str, condition: str | None) -> None:
        found, exclude = factory.value
        for flag in dataclass_flags(self.tree, found, exclude, title, self.out.notes):
            self.out.flags.append(finish_flag(flag, condition))


def _title(node: cst.Call) -> str:
    for arg in node.args:
        if arg.keyword is not None and arg.keyword.value == "title":
            return str(value_or_expr(arg.value))
    if node.args and node.args[0].keyword is None:
        return str(value_or_expr(node.args[0].value))
    return ""


def _join(outer: str | None, inner: str) -> str:
    inner = " ".join(inner.split())
    return f"{outer} and {inner}" if outer else inner


def extract(root: Path, packages: dict[str, Path] | None = None) -> Extraction:
    """Flags of the Megatron checkout at `root` (Megatron-LM or Megatron-DeepSpeed layout).

    `packages` maps other top-level packages the parser calls into (Megatron-DeepSpeed calls
    `deepspeed.add_config_arguments`) to the folder that holds them.
    """
    for rel in ARGUMENT_FILES:
        if (root / rel).is_file():
            module = rel[:-3].replace("/", ".")
            return FlagExtractor(SourceTree(root, packages), module).run()
    raise ValueError(f"{root}: no {' or '.join(ARGUMENT_FILES)} (is this a Megatron-LM checkout?)")
