"""The `$ guard ...` examples in README.md and docs/*.md are what guard prints today (scripts/doc_examples.py
writes them; this test fails when one drifts)."""

from __future__ import annotations

import subprocess
import sys

from conftest import ROOT


def test_doc_examples_are_what_guard_prints():
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "doc_examples.py"), "--check"],
                          capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0, done.stderr


def test_every_doc_example_is_found():
    """The examples the docs show are all checked: README (check, estimate, plan), estimate.md, megatron.md."""
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import doc_examples
    finally:
        sys.path.pop(0)
    found = {path.name: len(doc_examples.examples(path.read_text())) for path in doc_examples.documents()}
    assert found["README.md"] >= 3 and found["estimate.md"] >= 2 and found["megatron.md"] >= 1
