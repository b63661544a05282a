"""The house: guard's packages import only downwards (sources and shell -> launchers -> readers -> job -> intake
-> memory -> planner -> rules -> judge and checks -> reports -> launch and diagnose -> command line), with no
import circles, small modules and small functions."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GUARD = ROOT / "guard"

# Lowest first. A module may import modules of its own layer or of a lower one.
LAYERS = [
    ["guard", "guard.diagnostic", "guard.resources", "guard.inputs", "guard.settings", "guard.units", "guard.errors"],
    ["guard.sources", "guard.shell", "guard.deepspeed_schema", "guard.deepspeed_target"],
    ["guard.launchers"],
    ["guard.megatron"],
    ["guard.job"],
    ["guard.intake"],
    ["guard.memory"],
    ["guard.plan"],
    ["guard.rules", "guard.selection", "guard.check_result"],
    ["guard.judge", "guard.checker"],
    ["guard.report"],
    ["guard.launch", "guard.diagnose"],
    ["guard.options", "guard.option_table", "guard.commands", "guard.cli", "guard.__main__"],
]
MAX_MODULE_LINES = 300
MAX_FUNCTION_LINES = 60


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _layer(module: str) -> int:
    best, depth = -1, -1
    for index, prefixes in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > depth:
                best, depth = index, len(prefix)
    assert best >= 0, f"{module} is in no layer: add it to LAYERS"
    return best


def _imports(path: Path) -> set[str]:
    """guard modules imported anywhere in the file (lazy imports inside functions count too)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.startswith("guard")}
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("guard") and not node.level:
            out.add(node.module)
            out |= {f"{node.module}.{a.name}" for a in node.names
                    if (GUARD.parent / f"{node.module}.{a.name}".replace(".", "/")).with_suffix(".py").exists()}
    return out


def _graph() -> dict[str, set[str]]:
    modules = {_module_name(p): p for p in GUARD.rglob("*.py")}
    return {name: {m for m in _imports(path) if m in modules and m != name} for name, path in modules.items()}


def test_no_import_runs_back_up():
    graph = _graph()
    upward = sorted(f"{a} ({_layer(a)}) imports {b} ({_layer(b)})" for a, deps in graph.items() for b in deps
                    if _layer(b) > _layer(a))
    assert not upward, "\n".join(upward)


def test_no_import_circles():
    graph = _graph()
    seen, stack, circles = set(), [], []

    def visit(node):
        if node in stack:
            circles.append(stack[stack.index(node):] + [node])
            return
        if node in seen:
            return
        seen.add(node)
        stack.append(node)
        for dep in sorted(graph.get(node, ())):
            visit(dep)
        stack.pop()

    for node in sorted(graph):
        visit(node)
    assert not circles, "\n".join(" -> ".join(c) for c in circles)


def test_modules_and_functions_are_small():
    too_big = []
    for path in sorted(GUARD.rglob("*.py")):
        text = path.read_text()
        if len(text.splitlines()) > MAX_MODULE_LINES:
            too_big.append(f"{path.relative_to(ROOT)}: {len(text.splitlines())} lines")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = node.end_lineno - node.lineno + 1
                if length > MAX_FUNCTION_LINES:
                    too_big.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name}: {length} lines")
    assert not too_big, "\n".join(too_big)
