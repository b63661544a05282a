"""Follow the config dict through DeepSpeed's functions and record every key they read from it.

A helper of gen_deepspeed_schema.py (scripts/ is on sys.path when that script runs).
"""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

import libcst as cst
from libcst.helpers import get_full_name_for_node

from ds_sources import Const, Module, evaluate

NOT_FOLLOWED = ("deepspeed.module_inject",)  # AutoEP's 'expert_parallel' parser: outside guard's scope, left free-form


class Ctx(NamedTuple):
    mod: Module
    qual: str  # "func" or "Class.method"
    env: dict[str, tuple]  # local name (or "self.attr") -> path of the config dict it holds
    consts: dict[str, Const]
    returns: list
    chain: tuple[str, ...]  # the calls that led here, outermost first


class KeyReader:
    """Follow the config dict through DeepSpeed's functions and record every key read from it.

    A path is a tuple of keys from the root of the user's JSON. Calls are followed into DeepSpeed's own
    functions with the arguments bound (so get_scalar_param(param_dict, KEY, KEY_DEFAULT) records KEY with
    KEY_DEFAULT); copy.copy(...) of a section, or storing a whole section on `self`, marks it as handed on.
    """

    def __init__(self) -> None:
        self.reads: dict[tuple, list[dict[str, Any]]] = {}
        self.handed_on: set[tuple] = set()
        self.self_env: dict[str, dict[str, tuple]] = {}
        self.memo: dict[Any, tuple | None] = {}

    def analyze(self, mod: Module, qual: str, env: dict[str, tuple], consts: dict[str, Const],
                chain: tuple[str, ...] = ()) -> tuple | None:
        key = (mod.dotted, qual, repr(sorted(env.items())), repr(sorted((k, v.value) for k, v in consts.items())))
        if key not in self.memo:
            self.memo[key] = None  # recursion guard
            ctx = Ctx(mod, qual, dict(env), dict(consts), [], chain + (qual,))
            self.walk(mod.funcs[qual].body, ctx)
            self.memo[key] = next((r for r in ctx.returns if r is not None), None)
        return self.memo[key]

    def record(self, path: tuple, key: Const | None, default: Const | None, ctx: Ctx) -> tuple | None:
        if key is None or not isinstance(key.value, str):
            return None
        path = path + (key.value,)
        self.reads.setdefault(path, []).append(
            {"origin": key.origin, "default": default, "chain": ctx.chain, "module": ctx.mod.rel})
        return path

    def walk(self, node: cst.CSTNode, ctx: Ctx) -> None:
        if isinstance(node, (cst.FunctionDef, cst.ClassDef, cst.Lambda)):
            return  # nested definitions run later, if at all
        if isinstance(node, cst.Assign):
            path = self.resolve(node.value, ctx)
            for target in node.targets:
                if path is None or not isinstance(target.target, (cst.Name, cst.Attribute)):
                    continue  # `out[KEY] = section` stores into a new dict: it does not rebind `out`
                name = get_full_name_for_node(target.target)
                if name:
                    ctx.env[name] = path
                    if name.startswith("self."):  # the whole section is kept and used elsewhere
                        self.self_env.setdefault(ctx.qual.partition(".")[0], {})[name] = path
                        self.handed_on.add(path)
        if isinstance(node, (cst.For, cst.DictComp, cst.ListComp, cst.GeneratorExp)) and self._unrolled(node, ctx):
            return
        if isinstance(node, cst.Return) and node.value is not None:
            ctx.returns.append(self.resolve(node.value, ctx))
        if isinstance(node, cst.BaseExpression):
            self.resolve(node, ctx)
        for child in node.children:
            self.walk(child, ctx)

    def _unrolled(self, node: cst.CSTNode, ctx: Ctx) -> bool:
        """Run a loop over a constant (dict.items() or a tuple) once per item, with the loop names bound."""
        loop = node if isinstance(node, cst.For) else node.for_in
        iterable, targets = loop.iter, loop.target
        if isinstance(iterable, cst.Call) and isinstance(iterable.func, cst.Attribute) \
                and iterable.func.attr.value == "items":
            iterable = iterable.func.value
        const = evaluate(iterable, ctx.mod, ctx.consts)
        if const is None or not isinstance(const.value, (dict, list)):
            return False
        names = [e.value for e in targets.elements] if isinstance(targets, cst.Tuple) else [targets]
        rows = const.items or [(Const(v),) for v in const.value]
        for row in rows:
            bound = {get_full_name_for_node(n): c for n, c in zip(names, row)}
            body = [node.body] if isinstance(node, cst.For) else \
                [node.key, node.value] if isinstance(node, cst.DictComp) else [node.elt]
            for part in body:
                self.walk(part, ctx._replace(consts={**ctx.consts, **bound}))
        return True

    def resolve(self, expr: cst.CSTNode, ctx: Ctx) -> tuple | None:
        """The config path `expr` evaluates to, recording reads on the way; None if not a config dict."""
        ev = functools.partial(evaluate, mod=ctx.mod, local=ctx.consts)
        if isinstance(expr, (cst.Name, cst.Attribute)) and (name := get_full_name_for_node(expr)):
            return ctx.env.get(name, self.self_env.get(ctx.qual.partition(".")[0], {}).get(name))
        if isinstance(expr, cst.Subscript) and len(expr.slice) == 1:
            base = self.resolve(expr.value, ctx)
            index = expr.slice[0].slice
            return None if base is None or not isinstance(index, cst.Index) else \
                self.record(base, ev(index.value), None, ctx)
        if isinstance(expr, cst.Comparison):
            for comp in expr.comparisons:
                if isinstance(comp.operator, (cst.In, cst.NotIn)) and (base := self.resolve(comp.comparator, ctx)) \
                        is not None:
                    self.record(base, ev(expr.left), None, ctx)
            return None
        if isinstance(expr, cst.Call):
            return self._call(expr, ctx)
        return None

    def _call(self, call: cst.Call, ctx: Ctx) -> tuple | None:
        func, args = call.func, [a for a in call.args if not a.star]
        if isinstance(func, cst.Attribute):
            base = self.resolve(func.value, ctx)
            method = func.attr.value
            if base is not None and method in ("get", "pop") and args:
                default = evaluate(args[1].value, ctx.mod, ctx.consts) if len(args) > 1 else \
                    Const(None) if method == "get" else None
                return self.record(base, evaluate(args[0].value, ctx.mod, ctx.consts), default, ctx)
            if base is not None and method in ("keys", "items"):
                return base
            if get_full_name_for_node(func) in ("copy.copy", "copy.deepcopy") and args:
                path = self.resolve(args[0].value, ctx)
                if path is not None:
                    self.handed_on.add(path)
                return path
            if get_full_name_for_node(func.value) == "self":
                return self._invoke(ctx.mod, ctx.qual.partition(".")[0] + "." + method, args, ctx, skip_self=True)
            return None
        name = get_full_name_for_node(func)
        found = name and ctx.mod.lookup("funcs", name)
        if not found or found[0].dotted.startswith(NOT_FOLLOWED):
            return None
        if isinstance(found[1], cst.ClassDef):  # constructing a config object runs its __init__
            qual = found[1].name.value + ".__init__"
            return self._invoke(found[0], qual, args, ctx, skip_self=True) if qual in found[0].funcs else None
        return self._invoke(found[0], found[1].name.value, args, ctx, skip_self=False)

    def _invoke(self, mod: Module, qual: str, args: list[cst.Arg], ctx: Ctx, skip_self: bool) -> tuple | None:
        if qual not in mod.funcs:
            return None
        params = list(mod.funcs[qual].params.params)[1 if skip_self else 0:]
        env, consts = {}, {}
        bound = {}
        for i, arg in enumerate(args):
            target = arg.keyword.value if arg.keyword else (params[i].name.value if i < len(params) else None)
            if target:
                bound[target] = arg.value
        for param in params:
            name = param.name.value
            if name in bound and (path := self.resolve(bound[name], ctx)) is not None:
                env[name] = path
            elif name in bound:
                if (c := evaluate(bound[name], ctx.mod, ctx.consts)) is not None:
                    consts[name] = c
            elif param.default is not None and (c := evaluate(param.default, mod, {})) is not None:
                consts[name] = c
        return self.analyze(mod, qual, env, consts, ctx.chain)

