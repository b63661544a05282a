"""What entry scripts add to Megatron's arguments: `extra_args_provider` flags and `args_defaults` values."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import libcst as cst

from guard.megatron.cst_values import NotLiteral, code, dotted, literal
from guard.megatron.flag_extractor import Binding, FlagExtractor
from guard.megatron.source_tree import SourceTree

SKIP_DIRS = {"tests", "megatron", ".git", "docs", "__pycache__"}
MARKER = "extra_args_provider"


def python_sources(root: Path, skip: set[str]):
    """(path, text) of every Python file of the checkout outside the `skip` top-level folders."""
    for path in sorted(root.rglob("*.py")):
        if path.relative_to(root).parts[0] in skip:
            continue
        try:
            yield path, path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue


def entry_scripts(root: Path) -> list[Path]:
    """Python files outside the library that pass an extra_args_provider."""
    out = []
    for path, text in python_sources(root, SKIP_DIRS):
        if MARKER + "=" in text.replace(" ", "") or "initialize_megatron(" in text:  # or passed positionally
            out.append(path)
    return out


def _providers(tree: cst.Module) -> list[str]:
    """Names passed as extra_args_provider=... anywhere in the file (both arms of a conditional)."""
    names: list[str] = []

    class Visit(cst.CSTVisitor):
        def visit_Call(self, node: cst.Call) -> None:
            # initialize_megatron(extra_args_provider=None, args_defaults={}, ...) called positionally
            if (dotted(node.func) or "").endswith("initialize_megatron") and node.args and \
                    node.args[0].keyword is None:
                name = dotted(node.args[0].value)
                if name and name != "None" and name not in names:
                    names.append(name)

        def visit_Arg(self, node: cst.Arg) -> None:
            if node.keyword is not None and node.keyword.value == MARKER:
                values = [node.value]
                if isinstance(node.value, cst.IfExp):
                    values = [node.value.body, node.value.orelse]
                for value in values:
                    name = dotted(value)
                    if name and name != "None" and name not in names:
                        names.append(name)

    tree.visit(Visit())
    return names


def extract_entrypoints(root: Path, packages: dict[str, Path] | None = None) -> dict[str, dict[str, Any]]:
    """relative script path -> {"providers": [...], "flags": [...]} for every entry script found."""
    out: dict[str, dict[str, Any]] = {}
    for path in entry_scripts(root):
        found = entrypoint_flags(root, path, packages)
        if found is not None:
            out[path.relative_to(root).as_posix()] = found
    return out


def entrypoint_flags(root: Path, path: Path, packages: dict[str, Path] | None = None,
                     search: list[Path] | None = None) -> dict[str, Any] | None:
    """{"providers", "flags", "notes"} of one entry script (inside the checkout or beside it, its imports
    found in its own folder and `search`), or None when it adds no flags."""
    tree = SourceTree(root, packages)
    tree.script_dirs += [path.parent, *(search or [])]
    try:
        rel = path.relative_to(root)
        module = ".".join(rel.with_suffix("").parts)
    except ValueError:  # a program outside the checkout (Pai-Megatron-Patch's examples/): found by its folder
        rel, module = Path(path.name), path.stem
    parsed = tree.module(module)
    providers = _providers(parsed) if parsed is not None else []
    if not providers:
        return None
    extractor = FlagExtractor(tree, module)
    for name in providers:
        found = tree.resolve(module, name, cst.FunctionDef)
        if found is None:
            extractor.out.notes.append(f"{rel.as_posix()}: extra_args_provider {name} not found")
            continue
        extractor._stack.append(name)
        extractor._walk_function(found.module, found.node, {}, None, [Binding("parser")])
        extractor._stack.pop()
    if not extractor.out.flags:
        return None
    return {"providers": providers, "flags": extractor.out.flags, "notes": extractor.out.notes}


def known_programs(root: Path) -> list[str]:
    """Entry scripts at the top of the checkout (pretrain_gpt.py, ...): their flags are the table's own."""
    return sorted(p.name for p in root.glob("*.py") if p.name.startswith(("pretrain_", "train_", "finetune")))


DEFAULTS_KEYWORD = "args_defaults"
DEFAULTS_SKIP_DIRS = {"tests", ".git", "docs", "__pycache__"}


def _defaults_in(tree: cst.Module, rel: str, notes: list[str]) -> dict[str, Any]:
    """The literal entries of every `args_defaults={...}` the file passes (pretrain, parse_and_validate_args);
    a key two calls set differently is left out (which call runs is decided at run time)."""
    found: dict[str, Any] = {}
    conflicting: set[str] = set()

    named = _dict_literals(tree)

    class Visit(cst.CSTVisitor):
        def visit_Call(self, node: cst.Call) -> None:
            # initialize_megatron(provider, args_defaults): the second positional, a dict bound by name
            if (dotted(node.func) or "").endswith("initialize_megatron") and len(node.args) > 1 and \
                    node.args[1].keyword is None and isinstance(node.args[1].value, cst.Name):
                self.visit_Arg(cst.Arg(named.get(node.args[1].value.value, node.args[1].value),
                                       keyword=cst.Name(DEFAULTS_KEYWORD)))

        def visit_Arg(self, node: cst.Arg) -> None:
            if node.keyword is None or node.keyword.value != DEFAULTS_KEYWORD:
                return
            if not isinstance(node.value, cst.Dict):
                # the library passes its own parameter on (`args_defaults=args_defaults`): not a program's
                if dotted(node.value) != DEFAULTS_KEYWORD:
                    notes.append(f"{rel}: args_defaults={code(node.value)} is not a dict literal")
                return
            for element in node.value.elements:
                try:
                    key, value = literal(element.key), literal(element.value)  # type: ignore[union-attr]
                except (NotLiteral, AttributeError):
                    entry = " ".join(code(element).split()).rstrip(",")
                    notes.append(f"{rel}: args_defaults entry {entry} is not a literal")
                    continue
                if key in found and found[key] != value:
                    notes.append(f"{rel}: args_defaults sets {key} to both {found[key]!r} and {value!r}")
                    conflicting.add(key)
                found.setdefault(key, value)

    tree.visit(Visit())
    return {k: v for k, v in found.items() if k not in conflicting}


def _dict_literals(tree: cst.Module) -> dict[str, cst.Dict]:
    """Names assigned a dict literal anywhere in the file (`args_defaults = {...}` before the call)."""
    out: dict[str, cst.Dict] = {}

    class Visit(cst.CSTVisitor):
        def visit_Assign(self, node: cst.Assign) -> None:
            if len(node.targets) == 1 and isinstance(node.targets[0].target, cst.Name) and \
                    isinstance(node.value, cst.Dict):
                out[node.targets[0].target.value] = node.value

    tree.visit(Visit())
    return out


def _run_path_targets(tree: cst.Module) -> list[str]:
    """String literals ending in .py inside `runpy.run_path(...)` (pretrain_mamba.py runs pretrain_hybrid.py)."""
    targets: list[str] = []

    class Visit(cst.CSTVisitor):
        def visit_Call(self, node: cst.Call) -> None:
            if (dotted(node.func) or "").split(".")[-1] != "run_path":
                return
            for sub in _strings(node):
                if sub.endswith(".py"):
                    targets.append(sub)

    tree.visit(Visit())
    return targets


def _strings(node: cst.CSTNode) -> list[str]:
    out: list[str] = []

    class Visit(cst.CSTVisitor):
        def visit_SimpleString(self, string: cst.SimpleString) -> None:
            value = string.evaluated_value
            if isinstance(value, str):
                out.append(value)

    node.visit(Visit())
    return out


def program_defaults_of(path: Path) -> dict[str, Any]:
    """The `args_defaults` one script hands Megatron ({} when it hands none or cannot be read)."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
        wanted = DEFAULTS_KEYWORD in text or "initialize_megatron" in text
        return _defaults_in(cst.parse_module(text), path.name, []) if wanted else {}
    except (OSError, cst.ParserSyntaxError):
        return {}


def extract_program_defaults(root: Path) -> tuple[dict[str, dict[str, Any]], list[str]]:
    """relative script path -> the `args_defaults` it hands Megatron (validate_args applies each one only
    where the parsed value is None), and notes on what could not be read."""
    root = Path(root)
    notes: list[str] = []
    defaults: dict[str, dict[str, Any]] = {}
    delegates: dict[str, list[str]] = {}
    for path, text in python_sources(root, DEFAULTS_SKIP_DIRS):
        rel = path.relative_to(root)
        if DEFAULTS_KEYWORD not in text and "run_path" not in text:
            continue
        try:
            tree = cst.parse_module(text)
        except cst.ParserSyntaxError:
            notes.append(f"{rel.as_posix()}: not parsable Python")
            continue
        found = _defaults_in(tree, rel.as_posix(), notes)
        if found:
            defaults[rel.as_posix()] = found
        elif len(rel.parts) == 1:
            delegates[rel.as_posix()] = _run_path_targets(tree)
    for script, targets in delegates.items():
        # a top-level wrapper that runs a sibling script as __main__ gets that script's defaults
        inherited = [defaults[t] for t in targets if t in defaults]
        if len(inherited) == 1:
            defaults[script] = dict(inherited[0])
    return dict(sorted(defaults.items())), notes
