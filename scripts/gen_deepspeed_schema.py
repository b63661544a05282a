"""Generate schemas/deepspeed/<version>/config.schema.json from the installed DeepSpeed's own definitions."""

from __future__ import annotations

import argparse
import functools
import json
import sys
from pathlib import Path
from typing import Any, NamedTuple
from unittest import mock

import libcst as cst
from libcst.helpers import get_full_name_for_node

ROOT = Path(__file__).resolve().parent.parent
GENERATED_BY = "scripts/gen_deepspeed_schema.py"
ENTRY = ("deepspeed", "initialize", "config")  # deepspeed.initialize(config=...) hands the dict to DeepSpeedConfig
NOT_FOLLOWED = ("deepspeed.module_inject",)  # AutoEP's 'expert_parallel' parser: outside guard's scope, left free-form

# Sections validated by a DeepSpeedConfigModel (extra="forbid"): JSON pointer -> (module, class).
PYDANTIC = {
    "zero_optimization": ("deepspeed.runtime.zero.config", "DeepSpeedZeroConfig"),
    "fp16": ("deepspeed.runtime.precision_config", "DeepSpeedFP16Config"),
    "bf16": ("deepspeed.runtime.precision_config", "DeepSpeedBF16Config"),
    "bfloat16": ("deepspeed.runtime.precision_config", "DeepSpeedBF16Config"),
    "comms_logger": ("deepspeed.comm.config", "CommsLoggerConfig"),
    "tensorboard": ("deepspeed.monitor.config", "TensorBoardConfig"),
    "wandb": ("deepspeed.monitor.config", "WandbConfig"),
    "csv_monitor": ("deepspeed.monitor.config", "CSVConfig"),
    "comet": ("deepspeed.monitor.config", "CometConfig"),
    "hybrid_engine": ("deepspeed.runtime.config", "HybridEngineConfig"),
    "compile": ("deepspeed.compile.config", "CompileConfig"),
    "timers/throughput": ("deepspeed.utils.config", "DeepSpeedThroughputTimerConfig"),
    "tensor_parallel": ("deepspeed.runtime.tensor_parallel.config", "TPTrainingConfig"),
    "weight_quantization": ("deepspeed.inference.config", "WeightQuantConfig"),
}

# Types where DeepSpeed's default is None or absent, so the source gives no type: taken from
# shared/research/lint_rules.md §1.3 and §1.6 (types only; keys and defaults still come from the source).
NULLABLE = {"type": ["integer", "null"]}
TYPES: dict[str, dict[str, Any]] = {
    **{p: {"type": ["integer", "null"], "minimum": 1} for p in
       ("train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps")},
    **{p: NULLABLE for p in ("steps_per_print", "vocabulary_size", "activation_checkpointing/number_checkpoints",
                             "autotuning/max_train_batch_size", "autotuning/model_info/num_params",
                             "autotuning/model_info/hidden_size", "autotuning/model_info/num_layers",
                             "data_efficiency/data_sampling/dynamic_batching/max_batch_size")},
    **{p: {"type": ["string", "null"]} for p in
       ("communication_data_type", "seq_parallel_communication_data_type", "log_level", "optimizer/type",
        "scheduler/type", "flops_profiler/output_file", "autotuning/metric_path", "autotuning/model_info_path",
        "checkpoint/writer/data_parallel")},
    "sequence_parallel_size": {"type": "integer"}, "data_parallel_size": {"type": "integer"},
    "data_efficiency/data_sampling/dynamic_batching/max_tokens": {"type": "integer"},
    "autotuning/arg_mappings": {"type": ["object", "null"]}, "checkpoint/writer": {"type": ["object", "null"]},
    "torch_autocast/lower_precision_safe_modules": {"type": "array", "items": {"type": "string"}},
    # DeepSpeed's own check: 'keep_in_fp32_modules must be "auto" or a list of name patterns'.
    "data_types/keep_in_fp32_modules": {"anyOf": [{"const": "auto"}, {"type": "array", "items": {"type": "string"}}]},
    "pipeline/stages": {"type": ["string", "integer"]},  # "auto" is a sentinel for a stage count
    "datastates_ckpt": {"type": ["object", "boolean"]},  # enabled iff the value is not False
    "expert_parallel": {"type": "object"},
    "optimizer/params": {"type": "object"}, "scheduler/params": {"type": "object"},  # kwargs of the class
    "optimizer/params/max_grad_norm": {"type": "number"},
    "torch_autocast/dtype": {"type": "string"},
    **{f"data_types/{k}": {"type": ["string", "null"]} for k in ("grad_accum_dtype", "param_dtype", "buffer_dtype")},
    "data_efficiency/data_sampling/curriculum_learning/curriculum_metrics": {"type": "object"},
}
# Values DeepSpeed checks after .lower()/.upper(): pointer -> (module, constant holding the allowed values).
CHOICES = {
    "gradient_allreduce_op": ("deepspeed.runtime.constants", "GRADIENT_ALLREDUCE_OP_SUPPORTED"),
    "checkpoint/tag_validation": ("deepspeed.runtime.model_checkpointing.constants", "CHECKPOINT_TAG_VALIDATION_MODES"),
    "checkpoint/writer/type": ("deepspeed.runtime.model_checkpointing.constants", "CHECKPOINT_WRITER_TYPES"),
    "checkpoint/writer/data_parallel": ("deepspeed.runtime.model_checkpointing.constants",
                                        "CHECKPOINT_DATA_PARALLEL_UNITS"),
}


class Const(NamedTuple):
    value: Any
    origin: tuple[str, str] | None = None  # (NAME, module) when the value came from a named constant
    items: tuple = ()  # (key Const, value Const) pairs of a dict literal, so loop variables keep their names


@functools.lru_cache(maxsize=None)
def site() -> Path:
    import deepspeed
    return Path(deepspeed.__file__).parent.parent


@functools.lru_cache(maxsize=None)
def module(dotted: str) -> Module | None:
    base = site() / dotted.replace(".", "/")
    for path, pkg in ((base.with_suffix(".py"), False), (base / "__init__.py", True)):
        if path.is_file():
            return Module(dotted, path, pkg)
    return None


class Module:
    """One DeepSpeed source file as libcst sees it: constants, functions, classes, imports."""

    def __init__(self, dotted: str, path: Path, pkg: bool):
        self.dotted, self.rel = dotted, path.relative_to(site()).as_posix()
        self.package = dotted if pkg else dotted.rpartition(".")[0]
        self.consts: dict[str, cst.BaseExpression] = {}
        self.funcs: dict[str, cst.FunctionDef] = {}
        self.imports: dict[str, tuple[str, str]] = {}
        self.star: list[str] = []
        tree = cst.parse_module(path.read_text(encoding="utf-8"))
        for stmt in tree.body:  # only module level: a constant redefined inside `if` is not the one in effect
            self._collect(stmt, "")
            if isinstance(stmt, cst.ClassDef):
                for inner in stmt.body.body:
                    self._collect(inner, stmt.name.value + ".")
        tree.visit(_ImportCollector(self))  # imports inside functions count too (lazy imports)

    def _collect(self, stmt: cst.CSTNode, prefix: str) -> None:
        if isinstance(stmt, cst.FunctionDef):
            self.funcs[prefix + stmt.name.value] = stmt
        elif isinstance(stmt, cst.ClassDef) and not prefix:
            self.funcs[stmt.name.value] = stmt
        elif isinstance(stmt, cst.SimpleStatementLine) and isinstance(stmt.body[0], cst.Assign):
            for target in stmt.body[0].targets:
                if isinstance(target.target, cst.Name):
                    self.consts[prefix + target.target.value] = stmt.body[0].value

    def resolve_import(self, node: cst.ImportFrom) -> str:
        name = get_full_name_for_node(node.module) if node.module else ""
        if not node.relative:
            return name
        base = self.package.split(".")[:len(self.package.split(".")) - len(node.relative) + 1]
        return ".".join(base + ([name] if name else []))

    def lookup(self, table: str, name: str, seen: frozenset = frozenset()) -> tuple[Module, Any] | None:
        """Find a constant or function by name here, through `from x import name`, then `import *`."""
        if (self.dotted, name) in seen:
            return None
        seen |= {(self.dotted, name)}
        if name in getattr(self, table):
            return self, getattr(self, table)[name]
        head, _, rest = name.partition(".")
        sources = [(self.imports[head][0], self.imports[head][1] + (f".{rest}" if rest else ""))] \
            if head in self.imports else []
        for dotted, orig in sources + [(star, name) for star in self.star]:
            found = module(dotted) and module(dotted).lookup(table, orig, seen)
            if found:
                return found
        return None


class _ImportCollector(cst.CSTVisitor):
    def __init__(self, mod: Module):
        self.mod = mod

    def visit_ImportFrom(self, node: cst.ImportFrom) -> None:
        source = self.mod.resolve_import(node)
        if isinstance(node.names, cst.ImportStar):
            self.mod.star.append(source)
            return
        for alias in node.names:
            local = alias.asname.name.value if alias.asname else alias.name.value
            self.mod.imports.setdefault(local, (source, get_full_name_for_node(alias.name)))


def evaluate(expr: cst.BaseExpression, mod: Module, local: dict[str, Const]) -> Const | None:
    """Fold a constant expression (literals, names, f-strings, arithmetic, containers); None if not constant."""
    ev = functools.partial(evaluate, mod=mod, local=local)
    if isinstance(expr, (cst.SimpleString, cst.Integer, cst.Float)):
        return Const(expr.evaluated_value)
    if isinstance(expr, cst.ConcatenatedString):
        parts = [ev(expr.left), ev(expr.right)]
        return Const(parts[0].value + parts[1].value) if all(parts) else None
    if isinstance(expr, cst.FormattedString):
        parts = [p.value if isinstance(p, cst.FormattedStringText) else ev(p.expression) for p in expr.parts]
        return None if None in parts else Const("".join(p if isinstance(p, str) else str(p.value) for p in parts))
    if isinstance(expr, (cst.Name, cst.Attribute)):
        name = get_full_name_for_node(expr)
        if name in ("True", "False", "None"):
            return Const({"True": True, "False": False, "None": None}[name])
        if name in local:
            return local[name]
        found = mod.lookup("consts", name)
        if found and (value := evaluate(found[1], found[0], {})) is not None:
            return value._replace(origin=(name, found[0].dotted))
        return None
    if isinstance(expr, cst.UnaryOperation) and isinstance(expr.operator, cst.Minus):
        inner = ev(expr.expression)
        return inner and Const(-inner.value)
    if isinstance(expr, cst.BinaryOperation):
        left, right = ev(expr.left), ev(expr.right)
        ops = {cst.Multiply: "*", cst.Power: "**", cst.Add: "+", cst.Subtract: "-"}
        op = ops.get(type(expr.operator))
        return Const(eval(f"a {op} b", {"a": left.value, "b": right.value})) if left and right and op else None
    if isinstance(expr, (cst.List, cst.Tuple)):
        values = [ev(e.value) for e in expr.elements]
        return None if None in values else Const([v.value for v in values])
    if isinstance(expr, cst.Dict):
        pairs = [(ev(e.key), ev(e.value)) for e in expr.elements if isinstance(e, cst.DictElement)]
        if any(k is None or v is None for k, v in pairs):
            return None
        return Const({k.value: v.value for k, v in pairs}, items=tuple(pairs))
    return None


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


# --- pydantic sections -------------------------------------------------------------------------------

def _jsonable(value: Any) -> Any:
    from pydantic_core import to_jsonable_python
    # str() for values with no JSON form (torch.float16); None drops callables such as new_param_fn.
    return to_jsonable_python(value, fallback=lambda o: None if callable(o) else str(o))


def model_schema(cls: type) -> dict[str, Any]:
    """cls.model_json_schema() with nested models inlined and DeepSpeed's conventions made explicit."""
    import warnings

    import pydantic.json_schema as pjs

    class Generator(pjs.GenerateJsonSchema):
        def is_instance_schema(self, schema):  # torch.dtype (arbitrary_types_allowed) has no JSON form
            return {"type": "string", "x-python-only": True}

    # DeepSpeed puts a lambda (new_param_fn) in json_schema_extra, which pydantic cannot serialise.
    with mock.patch.object(pjs, "to_jsonable_python", _jsonable), warnings.catch_warnings():
        warnings.simplefilter("ignore", pjs.PydanticJsonSchemaWarning)  # defaults are filled in below instead
        raw = cls.model_json_schema(schema_generator=Generator)
    defs = raw.pop("$defs", {})
    models = _reachable_models(cls)
    for node in [raw, *defs.values()]:
        if node.get("title") in models:
            _patch_model(node, models[node["title"]])
    return _inline(raw, defs)


def _reachable_models(cls: type) -> dict[str, type]:
    from pydantic import BaseModel
    found, todo = {}, [cls]
    while todo:
        model = todo.pop()
        found[model.__name__] = model
        for field in model.model_fields.values():
            for arg in [field.annotation, *getattr(field.annotation, "__args__", ())]:
                if isinstance(arg, type) and issubclass(arg, BaseModel) and arg.__name__ not in found:
                    todo.append(arg)
    return found


def _patch_model(node: dict[str, Any], cls: type) -> None:
    node.update({"type": "object", "additionalProperties": False, "x-unknown-keys": "rejected"})
    docs = _field_docstrings(cls)
    props = node.setdefault("properties", {})
    for name, field in cls.model_fields.items():
        key = field.alias or name
        prop = props[key]
        prop.pop("title", None)
        prop.pop("new_param_fn", None)
        if "new_param" in prop:
            prop["x-new-param"] = prop.pop("new_param")
        if "set_new_param" in prop:
            prop["x-set-new-param"] = prop.pop("set_new_param")
        prop.setdefault("description", docs.get(name) or f"{cls.__name__}.{name}")
        if prop.get("x-python-only"):
            prop["description"] += " Validated with isinstance(torch.dtype): no JSON value passes, only a " \
                                   "torch.dtype put into the dict from Python."
        if "default" not in prop and not field.is_required():
            prop["default"] = _jsonable(field.get_default(call_default_factory=True))
        if key != name:  # populate_by_name=True: the field name is accepted too, as the same field
            props[name] = {**prop, "x-alias-of": key,
                           "description": f"Same field as '{key}' (accepted because of populate_by_name=True). "
                                          + prop["description"]}


def _field_docstrings(cls: type) -> dict[str, str]:
    """Attribute docstrings (a string right after `name: type = ...`), the way Sphinx reads them."""
    import inspect
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if klass.__module__.startswith("deepspeed") and klass.__name__ != "DeepSpeedConfigModel":
            tree = cst.parse_module(Path(inspect.getsourcefile(klass)).read_text(encoding="utf-8"))
            for stmt in tree.body:
                if isinstance(stmt, cst.ClassDef) and stmt.name.value == klass.__name__:
                    docs.update(_docstrings_in(stmt.body.body))
    return docs


def _docstrings_in(body: list[cst.CSTNode]) -> dict[str, str]:
    docs, last = {}, None
    for stmt in body:
        small = stmt.body[0] if isinstance(stmt, cst.SimpleStatementLine) else None
        if isinstance(small, cst.Expr) and isinstance(small.value, cst.SimpleString) and last:
            docs[last] = " ".join(small.value.evaluated_value.split())
            last = None
        else:
            last = small.target.value if isinstance(small, cst.AnnAssign) and \
                isinstance(small.target, cst.Name) else None
    return docs


def _inline(node: Any, defs: dict[str, Any]) -> Any:
    if isinstance(node, list):
        return [_inline(n, defs) for n in node]
    if not isinstance(node, dict):
        return node
    if "$ref" in node:
        target = _inline(defs[node["$ref"].rsplit("/", 1)[1]], defs)
        node = {**target, **{k: v for k, v in node.items() if k != "$ref"}}
    node = {k: _inline(v, defs) if k not in ("default", "enum", "const") else v for k, v in node.items()}
    if "enum" in node:  # ZeroStageEnum lists 3 twice (max_stage is an alias of weights)
        node["enum"] = list(dict.fromkeys(node["enum"]))
    return node


# --- dict sections and the root ----------------------------------------------------------------------

HELPERS = ("get_scalar_param", "get_list_param", "get_dict_param")  # generic accessors: name their caller
JSON_TYPES = ((bool, "boolean"), (int, "integer"), (float, "number"), (str, "string"), (list, "array"),
              (dict, "object"))


def _node(root: dict[str, Any], path: tuple) -> dict[str, Any]:
    for key in path:
        root = root.setdefault("properties", {}).setdefault(key, {})
    return root


def _describe(path: tuple, reads: list[dict[str, Any]]) -> str:
    read = reads[0]
    caller = next((f for f in reversed(read["chain"]) if f not in HELPERS), "?")
    name = f"{read['origin'][0]} ({module(read['origin'][1]).rel})" if read["origin"] else \
        f"'{path[-1]}' (a string literal)"
    return f"DeepSpeed key {name}, read by {caller}()."


def _leaf(node: dict[str, Any], reads: list[dict[str, Any]], pointer: str) -> None:
    defaults = [r["default"].value for r in reads if r["default"] is not None] or _conventional_default(reads)
    default = next((d for d in defaults if d is not None), None)
    if defaults:
        node["default"] = default
    kind = next((name for t, name in JSON_TYPES if isinstance(default, t)), None)
    if pointer in TYPES:
        node.update(TYPES[pointer])
    elif kind:
        node["type"] = kind
    else:
        print(f"warning: no type for /{pointer} (no default, no research type)", file=sys.stderr)


def _conventional_default(reads: list[dict[str, Any]]) -> list[Any]:
    """KEY_DEFAULT beside KEY, for keys DeepSpeed reads with an if/else instead of .get(KEY, KEY_DEFAULT)."""
    origin = next((r["origin"] for r in reads if r.get("origin")), None)
    found = origin and module(origin[1]).lookup("consts", origin[0] + "_DEFAULT")
    return [evaluate(found[1], found[0], {}).value] if found else []


def dict_sections(reader: KeyReader, removed: dict[str, str]) -> dict[str, Any]:
    root: dict[str, Any] = {}
    for path in sorted(reader.reads):
        pointer = "/".join(path)
        if "/" + pointer not in removed and not any(pointer.startswith(p + "/") for p in PYDANTIC):
            _node(root, path)["description"] = _describe(path, reader.reads[path])
    for path in sorted(reader.reads, key=len, reverse=True):
        pointer = "/".join(path)
        if "/" + pointer in removed or pointer in PYDANTIC or any(pointer.startswith(p + "/") for p in PYDANTIC):
            continue  # removed keys live in x-removed-keys; pydantic sections get the model's own schema
        node = _node(root, path)
        if "properties" in node:
            node.update(TYPES.get(pointer, {"type": "object"}))
            if path not in reader.handed_on:  # a dict DeepSpeed copies on whole: its consumers read other keys
                node["x-unknown-keys"] = "ignored"
        elif "/" + pointer not in removed:
            _leaf(node, reader.reads[path], pointer)
        if any("deprecated" in f for r in reader.reads[path] for f in r["chain"]):
            node["deprecated"] = True  # only read by DeepSpeed's own *_deprecated code path
    return root


def removed_keys(reader: KeyReader) -> dict[str, str]:
    """Keys _reject_removed_config_keys turns into DeepSpeedConfigError, with DeepSpeed's exact message."""
    config = module("deepspeed.runtime.config")
    messages = {}
    for name in ("_REMOVED_TOP_LEVEL_CONFIG_KEYS", "_REMOVED_ZERO_CONFIG_KEYS"):
        messages.update({(name, k): v for k, v in evaluate(cst.Name(name), config, {}).value.items()})
    out = {}
    for path, reads in reader.reads.items():
        if any("_reject_removed_config_keys" in r["chain"] for r in reads):
            top = "_REMOVED_TOP_LEVEL_CONFIG_KEYS" if len(path) == 1 else "_REMOVED_ZERO_CONFIG_KEYS"
            if (top, path[-1]) in messages:
                out["/" + "/".join(path)] = messages[(top, path[-1])]
    return out


def _ci_pattern(values: list[str]) -> str:
    """Exact match ignoring case, for values DeepSpeed passes through .lower() or .upper() first."""
    import re
    alts = ["".join(f"[{c.lower()}{c.upper()}]" if c.isalpha() else re.escape(c) for c in v) for v in values]
    return "^(?:" + "|".join(alts) + ")$"


def _compared_strings(mod: Module, func: str) -> list[str]:
    """String literals a function compares its value with (`val == "fp32"`)."""
    found: list[str] = []

    class Visitor(cst.CSTVisitor):
        def visit_ComparisonTarget(self, node: cst.ComparisonTarget) -> None:
            if isinstance(node.operator, cst.Equal) and isinstance(node.comparator, cst.SimpleString):
                found.append(node.comparator.evaluated_value)

    mod.funcs[func].visit(Visitor())
    return found


def _enum_strings(mod: Module, cls: str) -> list[str]:
    """Every string spelling listed in an Enum whose members are tuples (DtypeEnum)."""
    values = []
    for name, expr in mod.consts.items():
        if name.startswith(cls + ".") and isinstance(expr, cst.Tuple):
            values += [e.value.evaluated_value for e in expr.elements if isinstance(e.value, cst.SimpleString)]
    return values


def value_checks(root: dict[str, Any]) -> None:
    for pointer, (dotted, const) in CHOICES.items():
        _node(root, tuple(pointer.split("/")))["pattern"] = _ci_pattern(evaluate(cst.Name(const), module(dotted), {}).value)
    config = module("deepspeed.runtime.config")
    comm = _ci_pattern(_compared_strings(config, "get_communication_data_type"))
    for key in ("communication_data_type", "seq_parallel_communication_data_type"):
        _node(root, (key,))["pattern"] = comm
    dtypes = _enum_strings(config, "DtypeEnum")  # DtypeEnum(value) is an exact, case-sensitive lookup
    _node(root, ("torch_autocast", "dtype")).update({"type": "string", "enum": dtypes})
    for key in ("grad_accum_dtype", "param_dtype", "buffer_dtype"):
        _node(root, ("data_types", key)).update({"type": ["string", "null"], "enum": dtypes + [None]})


def pipeline_defaults(reader: KeyReader) -> None:
    """get_pipeline_config merges the user's keys over a dict literal: its keys are the pipeline keys."""
    config = module("deepspeed.runtime.config")
    body = config.funcs["get_pipeline_config"].body.body
    literal = next(s.body[0].value for s in body if isinstance(s, cst.SimpleStatementLine)
                   and isinstance(s.body[0], cst.Assign) and isinstance(s.body[0].value, cst.Dict))
    for key, value in evaluate(literal, config, {}).items:
        reader.reads[("pipeline", key.value)] = [
            {"origin": None, "default": value, "chain": ("get_pipeline_config",), "module": config.rel}]


def pydantic_sections(root: dict[str, Any]) -> None:
    import importlib
    for pointer, (dotted, name) in PYDANTIC.items():
        cls = getattr(importlib.import_module(dotted), name)
        path = tuple(pointer.split("/"))
        schema = model_schema(cls)
        doc = schema.get("description", "").strip().rstrip(".")
        schema["description"] = (doc + ". " if doc else "") + f"Pydantic model {dotted}.{name}: unknown keys " \
            "are a ValidationError (extra='forbid')."
        if pointer == "bfloat16":
            schema.update({"x-legacy-alias-of": "bf16", "description": "Legacy spelling of 'bf16', read only when "
                           "'bf16' is absent (get_bfloat16_config). " + schema["description"]})
        if pointer == "zero_optimization":  # read_zero_config_deprecated: true -> stage 1, false -> stage 0
            schema = {"anyOf": [schema, {"type": "boolean", "deprecated": True, "description": "Deprecated "
                                         "boolean form: true means stage 1, false stage 0."}],
                      "description": schema["description"]}
        _node(root, path[:-1]).setdefault("properties", {})[path[-1]] = schema


def build() -> dict[str, Any]:
    import deepspeed
    reader = KeyReader()
    dotted, func, param = ENTRY
    reader.analyze(module(dotted), func, {param: ()}, {})
    pipeline_defaults(reader)
    removed = removed_keys(reader)
    root = dict_sections(reader, removed)
    value_checks(root)
    pydantic_sections(root)
    version = deepspeed.__version__
    root.update({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": f"urn:guard:schemas:deepspeed:{version}:config",
        "title": f"DeepSpeed {version} configuration",
        "description": f"Generated from DeepSpeed {version}'s own sources: pydantic models for the sections "
                       "that reject unknown keys, and the keys deepspeed.initialize/DeepSpeedConfig read "
                       "from the dict (found with libcst) for the rest. x-unknown-keys says what DeepSpeed "
                       "does with a key it does not know.",
        "type": "object", "x-unknown-keys": "ignored", "x-removed-keys": removed,
        "x-deepspeed-version": version, "x-generated-by": GENERATED_BY,
    })
    return root


def main(argv: list[str] | None = None) -> int:
    import deepspeed
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path,
                        default=ROOT / "schemas" / "deepspeed" / deepspeed.__version__ / "config.schema.json")
    args = parser.parse_args(argv)
    text = json.dumps(build(), indent=1, sort_keys=True, ensure_ascii=False) + "\n"
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text, encoding="utf-8")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
