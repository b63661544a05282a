"""Build the flag table `schemas/megatron/<ref>/args.json` from a Megatron checkout (guard's output)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
from pathlib import Path
from typing import Any

from guard.megatron.deprecations import validate_args_messages
from guard.megatron.entrypoints import extract_entrypoints, extract_program_defaults, known_programs
from guard.megatron.flag_extractor import extract
from guard.megatron.source_tree import SourceTree

TABLE_VERSION = 1


def deepspeed_package_dir() -> Path | None:
    """The folder holding the installed `deepspeed` package, found without importing it."""
    spec = importlib.util.find_spec("deepspeed")
    if spec is None or not spec.origin:
        return None
    return Path(spec.origin).parent.parent


def _git_commit(root: Path) -> str | None:
    try:
        out = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True,
                             text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


def build_table(root: Path, *, ref: str, commit: str | None = None, repo: str | None = None,
                programs: list | None = None) -> dict[str, Any]:
    """The table of a checkout. `programs=[]`: the library's flags only (guard/megatron/source_tables.py adds
    the one program a script runs), without reading every entry script of the tree."""
    root = Path(root)
    flavour = _flavour(root)
    packages: dict[str, Path] = {}
    deepspeed_version = None
    if flavour == "megatron-deepspeed":
        where = deepspeed_package_dir()
        if where is not None:
            packages["deepspeed"] = where
            deepspeed_version = _installed_version("deepspeed")
    extraction = extract(root, packages)
    module = "megatron.training.arguments" if (root / "megatron" / "training" / "arguments.py").is_file() \
        else "megatron.arguments"
    messages = validate_args_messages(SourceTree(root), module)
    flags = extraction.flags
    for flag in flags:
        for option in flag["option_strings"]:
            if option in messages:
                flag["deprecated"] = messages[option]
    scan = programs is None
    entrypoints = extract_entrypoints(root, packages) if scan else {}
    program_defaults, defaults_notes = extract_program_defaults(root) if scan else ({}, [])
    seen = {o for f in flags for o in f["option_strings"]}
    orphans = {k: v for k, v in messages.items() if k not in seen}
    return {
        "table_version": TABLE_VERSION,
        "source": {"repo": repo or ("microsoft/Megatron-DeepSpeed" if flavour == "megatron-deepspeed"
                                    else "NVIDIA/Megatron-LM"),
                   "ref": ref, "commit": commit or _git_commit(root), "flavour": flavour,
                   "deepspeed_flags_from": deepspeed_version},
        "generated_by": "guard schema megatron (guard/megatron/flag_extractor.py, libcst)",
        "parser": {"allow_abbrev": False, "prefix_chars": "-"},
        "flags": flags,
        "validate_args_deprecations_without_flag": orphans,
        # flags an entry script adds through extra_args_provider, by its path in the checkout
        "programs": known_programs(root),
        "entrypoints": {path: {"providers": e["providers"], "flags": e["flags"]}
                        for path, e in entrypoints.items()},
        # `args_defaults` each script passes: validate_args sets them where the parsed value is None
        "program_defaults": program_defaults,
        "notes": extraction.notes + [n for e in entrypoints.values() for n in e["notes"]] + defaults_notes,
    }


def _flavour(root: Path) -> str:
    """Megatron-DeepSpeed when its arguments.py hands the parser to DeepSpeed; Megatron-LM of 2023 and its
    forks keep megatron/arguments.py too (megatron/training/ came with core_r0.6)."""
    old = root / "megatron" / "arguments.py"
    if old.is_file() and "deepspeed" in old.read_bytes().decode("utf-8", "replace"):
        return "megatron-deepspeed"
    return "megatron-lm"


def _installed_version(dist: str) -> str | None:
    from importlib import metadata

    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def write_table(table: dict[str, Any], out_dir: Path) -> Path:
    """Write args.json under out_dir/<ref>/ (a new file or a regenerated one, never a user file)."""
    folder = Path(out_dir) / table["source"]["ref"]
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "args.json"
    path.write_text(_dump(table) + "\n", encoding="utf-8")
    return path


def _dump(value: Any, depth: int = 0) -> str:
    """JSON with one flag per line: small enough to load fast, readable in a diff."""
    if isinstance(value, dict) and depth < 3 and not _is_flag(value):
        pad = " " * (depth + 1)
        items = [f"{pad}{json.dumps(k)}: {_dump(v, depth + 1)}" for k, v in value.items()]
        return "{\n" + ",\n".join(items) + "\n" + " " * depth + "}" if items else "{}"
    if isinstance(value, list) and depth < 4 and value and isinstance(value[0], dict):
        pad = " " * (depth + 1)
        return "[\n" + ",\n".join(pad + _dump(v, depth + 1) for v in value) + "\n" + " " * depth + "]"
    return json.dumps(value, separators=(", ", ": "))


def _is_flag(value: dict) -> bool:
    return "option_strings" in value
