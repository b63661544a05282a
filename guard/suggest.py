"""Suggestions for a misspelt key, flag or name: the closest known one."""

from __future__ import annotations

from typing import Any


def closest(word: str, choices: Any, cutoff: float = 0.6) -> str | None:
    """The choice closest to `word`, ignoring case and '-' vs '_'; None if none is close enough."""
    import difflib

    folded = {str(c).lower().replace("-", "_"): str(c) for c in choices}
    match = difflib.get_close_matches(word.lower().replace("-", "_"), list(folded), n=1, cutoff=cutoff)
    return folded[match[0]] if match else None


def did_you_mean(word: str, choices: Any) -> str | None:
    """"did you mean 'x'?" for the closest choice; None if none is close."""
    match = closest(word, choices)
    return f"did you mean {match!r}?" if match else None
