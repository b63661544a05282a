"""The one place that sorts what a user hands guard: DeepSpeed configs, launch scripts, command-line files."""

from __future__ import annotations

import os
import re

CONFIG_SUFFIXES = (".json", ".hjson", ".yaml", ".yml")
SCRIPT_SUFFIXES = (".sh", ".bash", ".slurm", ".sbatch")  # launch scripts; other named files: command lines
SKIP_DIRS = {".git", ".hg", ".venv", "venv", "node_modules", "__pycache__", ".tox", "build", "dist"}
SNIFF_BYTES = 4096
# A JSON object opens with `{` then a quoted key, `}` or a comment; bash's `{ cmd; }` group needs a blank
# and then a command word, so the two cannot be confused.
JSON_START = re.compile(r'\A\ufeff?\s*\{\s*("|\}|//|/\*|\Z)')
# A YAML mapping's first line is `---` or `key:` (bash has no command spelt `word:` followed by a blank).
YAML_START = re.compile(r"\A(---|[A-Za-z_][\w.-]*:(\s|\Z))")


def sniff(text: str) -> str | None:
    """"json" or "yaml" when the text's opening says so, "shell" for a `#!` line, else None (undecided)."""
    if text.startswith(("#!", "\ufeff#!")):
        return "shell"
    if JSON_START.match(text):
        return "json"
    first = next((line for line in text.lstrip("\ufeff").splitlines()
                  if line.strip() and not line.lstrip().startswith("#")), "")
    return "yaml" if YAML_START.match(first) else None


def _head(path: str) -> str:
    try:
        with open(path, "rb") as handle:
            return handle.read(SNIFF_BYTES).decode("utf-8", "replace")
    except OSError:
        return ""  # unreadable: the reader says why, by name


def config_format(path: str) -> str | None:
    """"json" or "yaml" for a DeepSpeed config, None for a script or a command line: by content when the
    content decides (a JSON `ds.conf`, a `#!` script named `.json`), else by the file's name."""
    seen = sniff(_head(path)) if os.path.isfile(path) else None
    name = path.lower()
    if seen == "shell":
        return None
    if seen == "json" or (seen == "yaml" and not name.endswith(SCRIPT_SUFFIXES)):
        return "yaml" if seen == "yaml" and not name.endswith((".json", ".hjson")) else "json"
    if name.endswith(CONFIG_SUFFIXES):
        return "yaml" if name.endswith((".yaml", ".yml")) else "json"
    return None


def is_config(path: str) -> bool:
    """A DeepSpeed config (JSON, hjson, YAML); anything else is read as a script or a command line."""
    return config_format(path) is not None


def find_near(name: str, near: str) -> str | None:
    """The file a config or a command names: from the working directory (what the framework opens), else from
    the folder of `near` (the file that names it) and its parents (a repository's examples run from its root)."""
    if os.path.isabs(name):
        return name if os.path.isfile(name) else None
    if os.path.isfile(name):
        return name
    folder = os.path.dirname(os.path.abspath(near))
    while True:
        candidate = os.path.join(folder, name)
        if os.path.isfile(candidate):
            return candidate
        parent = os.path.dirname(folder)
        if parent == folder:
            return None
        folder = parent


def split_inputs(paths: list[str]) -> tuple[list[str], list[str]]:
    """(configs, scripts): files named on the command line, by what guard reads them as."""
    return [p for p in paths if is_config(p)], [p for p in paths if not is_config(p)]


def walk(path: str) -> tuple[list[str], list[tuple[str, str]]]:
    """A folder's files guard reads (configs and launch scripts, by name or content), and those it skips with why."""
    taken: list[str] = []
    skipped: list[tuple[str, str]] = []
    for folder, dirs, files in os.walk(path):
        dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS)
        for name in sorted(files):
            full = os.path.join(folder, name)
            if name.lower().endswith(CONFIG_SUFFIXES + SCRIPT_SUFFIXES) or is_config(full):
                taken.append(full)
            else:
                skipped.append((full, "not a config or a launch script, by name or content"))
    return taken, skipped


def expand(paths: list[str], skipped: list[tuple[str, str]] | None = None) -> list[tuple[str, bool]]:
    """Files to check, each with whether the user named it (directories are walked); `skipped` collects the
    files of walked folders that are not read, each with why."""
    out: list[tuple[str, bool]] = []
    for path in paths:
        if os.path.isdir(path):
            taken, passed = walk(path)
            out.extend((f, False) for f in taken)
            if skipped is not None:
                skipped.extend(passed)
        else:
            out.append((path, True))
    return out
