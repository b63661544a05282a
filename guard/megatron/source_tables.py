"""Flag tables read from the Megatron checkout a job runs (a fork judged by its own flags, choices and
`args_defaults`), extracted with guard's libcst extractor and cached by the content of that checkout."""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path

from guard import __version__
from guard.megatron.flag_table import FlagTable

ARGUMENT_FILES = ("megatron/training/arguments.py", "megatron/arguments.py")
MAX_UP = 6  # folders walked up from a program to find the checkout that holds it


class SourceError(ValueError):
    """A --megatron-source that is not a Megatron checkout (one line, exit 2)."""


def checkout_root(start: Path) -> Path | None:
    """The Megatron checkout holding `start` (a program or a folder): the nearest folder, walking up, with
    megatron/training/arguments.py or megatron/arguments.py."""
    start = start.resolve()
    here = start if start.is_dir() else start.parent
    for folder in [here, *list(here.parents)[:MAX_UP]]:
        if any((folder / rel).is_file() for rel in ARGUMENT_FILES):
            return folder
    return None


def table_from_source(source: str | None, program: str, script: str, pythonpath: str | None) -> FlagTable | None:
    """The table of the checkout a command runs: `source` (--megatron-source) when given, else the checkout
    holding the program (its path as written, beside the script, a folder above it, or the working folder), else
    a checkout on PYTHONPATH; None when none is on this machine."""
    found = _program_file(program, script, Path(source) if source else None)
    entries = [Path(p) for p in (pythonpath or "").split(":") if p and "$" not in p and Path(p).is_dir()]
    if source:
        root = Path(source)
    else:
        root = (checkout_root(found) if found is not None else None) or _on_path(entries)
    if root is None:
        return None
    try:
        return table_for_checkout(root, str(found) if found else "", entries)
    except SourceError:
        return None


def _on_path(entries: list[Path]) -> Path | None:
    """A PYTHONPATH entry that is itself a Megatron checkout."""
    for entry in entries:
        if entry.is_dir() and any((entry / rel).is_file() for rel in ARGUMENT_FILES):
            return entry.resolve()
    return None


def _program_file(program: str, script: str, source: Path | None) -> Path | None:
    """The program's file on this machine: as written (absolute), in the source checkout, or relative to the
    script's folder, a folder above it, or the working folder (scripts run from their repository's root)."""
    if not program or "$" in program:
        return None
    written = Path(program)
    if written.is_absolute():
        return written if written.is_file() else None
    bases = [source] if source is not None else []
    if script and not script.startswith("<"):
        here = Path(script).resolve().parent
        bases += [here, *list(here.parents)[:MAX_UP]]
    bases.append(Path.cwd())
    for base in bases:
        candidate = base / written
        if candidate.is_file():
            return candidate.resolve()
    return None


def cache_dir() -> Path:
    base = os.environ.get("GUARD_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "guard")
    return Path(base) / "megatron-tables"


def content_key(root: Path, program: Path | None) -> str:
    """Hash of every Python file under the checkout's megatron/ and of the program, with guard's version (a
    new extractor reads the same files anew)."""
    digest = hashlib.sha256(f"guard {__version__}\n".encode())
    files = sorted((root / "megatron").rglob("*.py"))
    if program is not None and program.is_file():
        files.append(program)
    for path in files:
        try:
            data = path.read_bytes()
        except OSError:
            continue
        digest.update(f"{path.relative_to(root) if path.is_relative_to(root) else path.name}\n".encode())
        digest.update(hashlib.sha256(data).digest())
    return digest.hexdigest()[:20]


def table_for_checkout(root: Path, program: str = "", search: list[Path] | None = None) -> FlagTable:
    """The flag table of the checkout at `root`, with the flags `program` adds (extra_args_provider) and the
    `args_defaults` it passes; from the cache when the checkout's content was read before."""
    root = Path(root).resolve()
    if not any((root / rel).is_file() for rel in ARGUMENT_FILES):
        raise SourceError(f"{root}: not a Megatron checkout (no {' or '.join(ARGUMENT_FILES)})")
    path = Path(program).resolve() if program and Path(program).is_file() else None
    key = content_key(root, path)
    cached = cache_dir() / f"{key}.json"
    try:
        data = json.loads(cached.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        data = _build(root, path, key, search or [])
        _store(cached, data)
    entry = next(iter(data.get("entrypoints", {})), None)
    return FlagTable(data["source"]["ref"], data, entry)


def _build(root: Path, program: Path | None, key: str, search: list[Path]) -> dict:
    from guard.megatron.entrypoints import entrypoint_flags, program_defaults_of
    from guard.megatron.schema_gen import build_table

    try:
        table = build_table(root, ref=f"source:{root.name}@{key[:8]}", repo=str(root), programs=[])
    except ValueError as err:
        raise SourceError(f"{root}: {err}") from None
    if program is not None:
        name = program.as_posix()
        found = entrypoint_flags(root, program, search=search)
        if found is not None:
            table["entrypoints"] = {name: {"providers": found["providers"], "flags": found["flags"]}}
        defaults = program_defaults_of(program)
        if defaults:
            table["program_defaults"] = {name: defaults}
        table["programs"] = sorted({*table["programs"], program.name})
    return table


def _store(path: Path, data: dict) -> None:
    """Written whole or not at all (two hooks may read the same checkout at once)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile("w", dir=path.parent, delete=False, suffix=".tmp") as handle:
            json.dump(data, handle)
        os.replace(handle.name, path)
    except OSError:
        pass  # a read-only home: the table is rebuilt next time
