"""Flags that entry scripts add through `extra_args_provider` (pretrain_gpt.py, examples/multimodal/train.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import libcst as cst

from guard.megatron.cst_values import dotted
from guard.megatron.flag_extractor import Binding, FlagExtractor
from guard.megatron.source_tree import SourceTree

SKIP_DIRS = {"tests", "megatron", ".git", "docs", "__pycache__"}
MARKER = "extra_args_provider"


def entry_scripts(root: Path) -> list[Path]:
    """Python files outside the library that pass an extra_args_provider."""
    out = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root)
        if rel.parts[0] in SKIP_DIRS:
            continue
        try:
            text = path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        if MARKER + "=" in text.replace(" ", ""):
            out.append(path)
    return out


def _providers(tree: cst.Module) -> list[str]:
    """Names passed as extra_args_provider=... anywhere in the file (both arms of a conditional)."""
    names: list[str] = []

    class Visit(cst.CSTVisitor):
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
        rel = path.relative_to(root)
        module = ".".join(rel.with_suffix("").parts)
        tree = SourceTree(root, packages)
        tree.script_dirs.append(path.parent)
        parsed = tree.module(module)
        if parsed is None:
            continue
        providers = _providers(parsed)
        if not providers:
            continue
        extractor = FlagExtractor(tree, module)
        for name in providers:
            found = tree.resolve(module, name, cst.FunctionDef)
            if found is None:
                extractor.out.notes.append(f"{rel}: extra_args_provider {name} not found")
                continue
            extractor._stack.append(name)
            extractor._walk_function(found.module, found.node, {}, None, [Binding("parser")])
            extractor._stack.pop()
        if extractor.out.flags:
            out[rel.as_posix()] = {"providers": providers, "flags": extractor.out.flags,
                                   "notes": extractor.out.notes}
    return out


def known_programs(root: Path) -> list[str]:
    """Entry scripts at the top of the checkout (pretrain_gpt.py, ...): their flags are the table's own."""
    return sorted(p.name for p in root.glob("*.py") if p.name.startswith(("pretrain_", "train_", "finetune")))
