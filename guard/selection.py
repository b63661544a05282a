"""Which rules apply: --select/--ignore prefixes, per-file ignores and inline suppressions."""

from __future__ import annotations

import re

from guard.rules.registry import RULES, lookup

_INLINE = re.compile(r"guard:\s*(ignore-file|ignore)(?:\[([A-Za-z0-9_,\s-]*)\])?")


def normalise(selectors: list[str]) -> list[str]:
    """Turn codes, code prefixes and rule names into upper-case prefixes; reject unknown ones."""
    out = []
    for raw in selectors:
        for token in (t.strip() for t in raw.split(",")):
            if not token:
                continue
            if token.upper() == "ALL":
                out.append("")
                continue
            rule = lookup(token)
            prefix = rule.code if rule else token.upper()
            if not any(code.startswith(prefix) for code in RULES):
                raise ValueError(f"unknown rule selector {token!r} (see `guard rules`)")
            out.append(prefix)
    return out


def _best(code: str, prefixes: list[str]) -> int:
    return max((len(p) for p in prefixes if code.startswith(p)), default=-1)


def is_selected(code: str, select: list[str], ignore: list[str]) -> bool:
    """The most specific selector wins, as in ruff: `--select DS --ignore DS1 --select DS101`."""
    return _best(code, select) > _best(code, ignore)


def inline_suppressions(comments: dict[int, str]) -> tuple[dict[int, set[str] | None], set[str] | None]:
    """Per line: suppressed codes (None = all); and the file-wide set from `guard: ignore-file`."""
    per_line: dict[int, set[str] | None] = {}
    file_wide: set[str] | None = set()
    for line, text in comments.items():
        for kind, codes in _INLINE.findall(text):
            parsed = {c.strip().upper() for c in codes.split(",") if c.strip()} or None
            if kind == "ignore-file":
                file_wide = None if parsed is None or file_wide is None else file_wide | parsed
            else:
                per_line[line] = parsed
    return per_line, file_wide


def suppressed(code: str, line: int, per_line: dict[int, set[str] | None], file_wide: set[str] | None) -> bool:
    if file_wide is None or any(code.startswith(c) for c in file_wide):
        return True
    if line in per_line:
        codes = per_line[line]
        return codes is None or any(code.startswith(c) for c in codes)
    return False
