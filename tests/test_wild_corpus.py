"""guard check on real public configs and launch scripts it was not written against (tests/wild/): every error
and warning it gives is one a reader of the framework's code judged true (tests/wild/expected.yaml).

The files themselves are not in this repository (fetched data is never committed): tests/wild/MANIFEST.tsv
names each one (repository, commit, path, sha256). They are read from $GUARD_WILD, by default
../shared/corpus/wild beside the checkout (CI has it); `scripts/fetch_wild.py` brings a newer manifest's files into
a folder of one's own. Without them the test skips.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest
import yaml

from conftest import ROOT, run_guard

WILD = ROOT / "tests" / "wild"
FILES = Path(os.environ.get("GUARD_WILD", ROOT.parent / "shared" / "corpus" / "wild")) / "files"


def _manifest() -> list[dict]:
    lines = (WILD / "MANIFEST.tsv").read_text().splitlines()
    head = lines[0].split("\t")
    return [dict(zip(head, line.split("\t"))) for line in lines[1:] if line.strip()]


def _expected() -> dict:
    return yaml.safe_load((WILD / "expected.yaml").read_text()) or {}


def _findings(name: str, args: list[str]) -> list[str]:
    code, out, err = run_guard("check", "--isolated", "--format", "json", *args, str(FILES / name))
    assert code in (0, 1), f"{name}: exit {code}: {err}"
    return sorted(f"{d['code']}@{d['line']}:{d['col']}" for d in json.loads(out) if d["severity"] != "info")


@pytest.mark.parametrize("entry", _manifest() if (WILD / "MANIFEST.tsv").is_file() else [],
                         ids=lambda e: e["file"])
def test_every_error_and_warning_in_the_wild_was_judged_true(entry):
    path = FILES / entry["file"]
    if not path.is_file():
        pytest.skip(f"{path} is absent (scripts/fetch_wild.py)")
    assert hashlib.sha256(path.read_bytes()).hexdigest() == entry["sha256"], f"{path}: not the manifest's bytes"
    judged = _expected().get(entry["file"], {})
    found = _findings(entry["file"], judged.get("args", []))
    expected = sorted(judged.get("true", []))
    assert found == expected, (f"{entry['file']}: guard reports {found}; judged true: {expected}; "
                               f"judged false before: {judged.get('false_before', [])}")


def test_the_wild_corpus_is_wide_enough():
    entries = _manifest()
    assert len(entries) >= 40 and len({e["repo"] for e in entries}) >= 10
    assert all(len(e["commit"]) == 40 for e in entries)
