"""The one error type for bad input: a file, flag or value guard cannot use (one line on stderr, exit 2)."""

from __future__ import annotations


class InputError(ValueError):
    """Bad input. The message is one line that says where (`path:line:col:` or the option) and what to give.

    Everything a user can get wrong derives from it (an incomplete job, an unknown model, a bad option), so
    the command line catches this one type; any other exception is a bug in guard and is reported as one.
    """
