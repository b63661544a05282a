"""Generate schemas/deepspeed/<version>/optimizers.json (optimizer and LR scheduler signatures) from the installed DeepSpeed and torch."""

from __future__ import annotations

import argparse
import ast
import importlib
import inspect
import json
import sys
import textwrap
from pathlib import Path
from typing import Any

import torch
import deepspeed
from deepspeed.runtime import config as ds_config
from deepspeed.runtime import engine as ds_engine
from deepspeed.runtime import lr_schedules
from deepspeed.runtime.zero import utils as zero_utils

ROOT = Path(__file__).resolve().parent.parent
GENERATED_BY = "scripts/gen_deepspeed_optimizers.py"

# Which class `DeepSpeedEngine._configure_basic_optimizer` builds for each DeepSpeed name, by the
# condition that picks it: "torch_adam" (params.torch_adam true), "offload" (offload_optimizer
# device cpu/nvme, i.e. zero_use_cpu_optimizer()) and "default". Each entry also names the keyword
# arguments the engine passes itself. Every class name is checked against the engine's source
# below, so a DeepSpeed release that builds something else fails here instead of going stale.
# (torch_adam pops the user's `foreach` and hands it straight back, so it is not one of them.)
ADAM_BUILDS = {
    "torch_adam": ("torch.optim:AdamW", ()),
    "torch_adam_no_w": ("torch.optim:Adam", ()),
    "offload": ("deepspeed.ops.adam:DeepSpeedCPUAdam", ("adamw_mode", "fp32_optimizer_states")),
    "default": ("deepspeed.ops.adam:FusedAdam", ("adam_w_mode",)),
}
BUILDS: dict[str, dict[str, tuple[str, tuple[str, ...]]]] = {
    "adam": ADAM_BUILDS,
    "adamw": ADAM_BUILDS,
    "adagrad": {"offload": ("deepspeed.ops.adagrad:DeepSpeedCPUAdagrad", ()),
                "default": ("torch.optim:Adagrad", ())},
    "lamb": {"default": ("deepspeed.ops.lamb:FusedLamb", ())},
    "lion": {"offload": ("deepspeed.ops.lion:DeepSpeedCPULion", ()),
             "default": ("deepspeed.ops.lion:FusedLion", ())},
    "muadam": {"default": ("mup:MuAdam", ())},
    "muadamw": {"default": ("mup:MuAdamW", ())},
    "musgd": {"default": ("mup:MuSGD", ())},
    # Muon picks its keys out of params (_MUON_HALF_KEYS/_ADAM_HALF_KEYS) and never passes the
    # rest as keyword arguments, so unknown keys are ignored rather than a TypeError.
    "muon": {"default": ("deepspeed.runtime.zero.muon.muon_optimizer:MuonWithAuxAdam", ())},
}


def _load(ref: str) -> type | None:
    module, _, name = ref.partition(":")
    try:
        return getattr(importlib.import_module(module), name)
    except Exception:  # an optional package (mup) or a kernel that cannot load here
        return None


def _signature(cls: type, skip_first: bool = True) -> dict[str, Any]:
    """Keyword parameters of cls.__init__ (without self and the params/optimizer argument)."""
    params = list(inspect.signature(cls.__init__).parameters.values())[1:]
    if skip_first and params:
        params = params[1:]
    named = [p for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    return {
        "class": f"{cls.__module__}.{cls.__qualname__}",
        "params": [p.name for p in named],
        "required": [p.name for p in named if p.default is p.empty],
        "var_kwargs": any(p.kind is p.VAR_KEYWORD for p in params),
    }


def _resolve(node: ast.AST) -> list[str]:
    """Optimizer names compared in `self.optimizer_name() == X` / `in [X, Y]` (constants of runtime/config.py)."""
    items = node.elts if isinstance(node, (ast.List, ast.Tuple)) else [node]
    out = []
    for item in items:
        if isinstance(item, ast.Constant) and isinstance(item.value, str):
            out.append(item.value)
        elif isinstance(item, ast.Name) and isinstance(getattr(ds_config, item.id, None), str):
            out.append(getattr(ds_config, item.id))
    return out


def _pops(nodes: list[ast.stmt]) -> set[str]:
    """Keys popped from optimizer_parameters in `nodes` (a name: the config constant's value)."""
    popped = set()
    for node in (n for stmt in nodes for n in ast.walk(stmt)):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "pop"
                and isinstance(node.func.value, ast.Name) and node.func.value.id == "optimizer_parameters"
                and node.args):
            popped.update(_resolve(node.args[0]) if isinstance(node.args[0], ast.Name) else
                          [node.args[0].value] if isinstance(node.args[0], ast.Constant) else [])
    return popped


def _engine_popped() -> dict[str, list[str]]:
    """Per optimizer name, the params keys the engine pops before it builds the class."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(ds_engine.DeepSpeedEngine._configure_basic_optimizer)))
    helper = ast.parse(textwrap.dedent(inspect.getsource(ds_engine.DeepSpeedEngine.get_optimizer_configuration)))
    # `foreach` is popped only on the torch_adam path and handed back to torch: it stays a class param.
    helper_pops = _pops(helper.body) - {"foreach"}
    out: dict[str, set[str]] = {}
    for node in ast.walk(tree):
        if not (isinstance(node, ast.If) and isinstance(node.test, ast.Compare)
                and isinstance(node.test.left, ast.Call) and isinstance(node.test.left.func, ast.Attribute)
                and node.test.left.func.attr == "optimizer_name"):
            continue
        popped = _pops(node.body)
        if any(isinstance(n, ast.Attribute) and n.attr == "get_optimizer_configuration"
               for stmt in node.body for n in ast.walk(stmt)):
            popped |= helper_pops
        for name in _resolve(node.test.comparators[0]):
            out.setdefault(name, set()).update(popped)
    return {name: sorted(keys) for name, keys in out.items()}


def _deepspeed_optimizers() -> dict[str, Any]:
    source = inspect.getsource(ds_engine.DeepSpeedEngine._configure_basic_optimizer) + \
        inspect.getsource(ds_engine.DeepSpeedEngine.get_optimizer_configuration)
    supported = set(zero_utils.ZERO_SUPPORTED_OPTIMIZERS)
    muon = _load("deepspeed.runtime.zero.muon.muon_optimizer:MuonWithAuxAdam")
    if muon is not None:
        supported.add(muon)  # is_zero_supported_optimizer() appends it when it imports
    popped = _engine_popped()
    out: dict[str, Any] = {}
    missing = [name for name in ds_config.DEEPSPEED_OPTIMIZERS if name not in BUILDS]
    if missing:
        sys.exit(f"no build table for DeepSpeed optimizer(s) {missing}: read _configure_basic_optimizer")
    for name in ds_config.DEEPSPEED_OPTIMIZERS:
        builds = {}
        for when, (ref, engine_kwargs) in BUILDS[name].items():
            class_name = ref.partition(":")[2]
            if class_name not in source:
                sys.exit(f"{class_name} no longer appears in _configure_basic_optimizer: update BUILDS")
            cls = _load(ref)
            if cls is None:
                # Unknown here: mup's MuAdam is a factory that returns a torch Adam, for example.
                builds[when] = {"class": ref.replace(":", "."), "params": None, "required": [],
                                "var_kwargs": False, "zero_supported": None, "note": "not importable here"}
                continue
            entry = _signature(cls)
            entry["engine_kwargs"] = list(engine_kwargs)
            entry["zero_supported"] = cls in supported
            if name == "muon":
                entry["params"] = sorted({*ds_engine.DeepSpeedEngine._MUON_HALF_KEYS,
                                          *ds_engine.DeepSpeedEngine._ADAM_HALF_KEYS, "muon_lr", "adam_lr"})
                entry["unknown_params"] = "ignored"
            builds[when] = entry
        out[name] = {"builds": builds, "engine_params": popped.get(name, [])}
    return out


def _public_subclasses(module: Any, base: type) -> dict[str, type]:
    return {name: obj for name, obj in sorted(vars(module).items())
            if not name.startswith("_") and inspect.isclass(obj) and issubclass(obj, base) and obj is not base}


def _torch_optimizers() -> dict[str, Any]:
    supported = set(zero_utils.ZERO_SUPPORTED_OPTIMIZERS)
    out = {}
    for name, cls in _public_subclasses(torch.optim, torch.optim.Optimizer).items():
        entry = _signature(cls)
        entry["zero_supported"] = cls in supported
        out[name] = entry
    return out


def _positive_int_checks(cls: type) -> dict[str, str]:
    """`if not isinstance(<param>, int) ...: raise ValueError(f"...")` in __init__ (and inherited __init__s)."""
    found: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        init = vars(klass).get("__init__")
        if init is None or klass.__module__ != lr_schedules.__name__:
            continue
        params = set(inspect.signature(init).parameters)
        for node in ast.walk(ast.parse(textwrap.dedent(inspect.getsource(init)))):
            if not isinstance(node, ast.If):
                continue
            checked = [c.args[0].id for c in ast.walk(node.test)
                       if isinstance(c, ast.Call) and isinstance(c.func, ast.Name) and c.func.id == "isinstance"
                       and len(c.args) == 2 and isinstance(c.args[0], ast.Name) and c.args[0].id in params
                       and isinstance(c.args[1], ast.Name) and c.args[1].id == "int"]
            raised = [r.exc for r in node.body if isinstance(r, ast.Raise) and isinstance(r.exc, ast.Call)]
            for param in checked:
                message = ast.unparse(raised[0].args[0]) if raised and raised[0].args else ""
                if message.startswith(("f'", 'f"')):
                    message = message[2:-1]
                found[param] = message
    return found


def _lr_schedulers() -> dict[str, Any]:
    out = {}
    for name in lr_schedules.VALID_LR_SCHEDULES:
        cls = getattr(lr_schedules, name)
        entry = _signature(cls)
        entry["positive_int_params"] = _positive_int_checks(cls)
        out[name] = entry
    return out


def _torch_lr_schedulers() -> dict[str, Any]:
    base = torch.optim.lr_scheduler.LRScheduler
    classes = _public_subclasses(torch.optim.lr_scheduler, base)
    plateau = getattr(torch.optim.lr_scheduler, "ReduceLROnPlateau", None)
    if plateau is not None:
        classes.setdefault("ReduceLROnPlateau", plateau)
    return {name: _signature(cls) for name, cls in sorted(classes.items())}


def generate() -> dict[str, Any]:
    return {
        "x-generated-by": GENERATED_BY,
        "deepspeed_version": deepspeed.__version__,
        "torch_version": torch.__version__,
        "deepspeed_optimizers": _deepspeed_optimizers(),
        "torch_optimizers": _torch_optimizers(),
        "lr_schedulers": _lr_schedulers(),
        "torch_lr_schedulers": _torch_lr_schedulers(),
        "zero_supported_optimizers": sorted(f"{c.__module__}.{c.__qualname__}"
                                            for c in zero_utils.ZERO_SUPPORTED_OPTIMIZERS),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--output", type=Path, default=None,
                        help="default: schemas/deepspeed/<installed version>/optimizers.json")
    args = parser.parse_args()
    data = generate()
    version = deepspeed.__version__.split("+")[0]
    output = args.output or ROOT / "schemas" / "deepspeed" / version / "optimizers.json"
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    print(f"wrote {output}")


if __name__ == "__main__":
    main()
