"""Shared test helpers: run guard in-process and read the shared corpus when it is present."""

from __future__ import annotations

import io
import os
import tempfile
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# A model name is never looked up on this machine's Hugging Face cache or on the Hub in tests (results would depend on
# the machine and the network); tests of those lookups set their own cache folder and stand-in download.
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["HF_HUB_CACHE"] = str(Path(tempfile.mkdtemp(prefix="guard-empty-hf-cache-")))
FIXTURES = ROOT / "tests" / "fixtures"
CORPUS = Path(os.environ.get("GUARD_CORPUS", ROOT.parent / "shared" / "corpus"))
# Megatron-LM's own parse_args/validate_args (core_v0.16.1): ../shared has it; MEGATRON_LM_PATH names another
_SHARED_MEGATRON_LM = ROOT.parent / "shared" / "megatron-lm" / "core_v0.16.1"
MEGATRON_LM = os.environ.get("MEGATRON_LM_PATH") or (str(_SHARED_MEGATRON_LM) if _SHARED_MEGATRON_LM.is_dir() else None)


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
