"""Shared test helpers: run guard in-process and read the shared corpus when it is present."""

from __future__ import annotations

import io
import os
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"
CORPUS = Path(os.environ.get("GUARD_CORPUS", ROOT.parent / "shared" / "corpus"))


def run_guard(*argv: str) -> tuple[int, str, str]:
    """Run `guard ARGV` in-process; return (exit code, stdout, stderr)."""
    from guard.cli import main

    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = main(list(argv))
    return code, out.getvalue(), err.getvalue()


@pytest.fixture
def guard():
    return run_guard


@pytest.fixture
def corpus() -> Path:
    if not CORPUS.is_dir():
        pytest.skip("../shared/corpus is not present")
    return CORPUS
