"""The rule registry is a public API: codes, names, severities and docs follow one shape."""

from __future__ import annotations

import re
import subprocess
import sys

from conftest import ROOT
from guard.rules import load_all
from guard.rules.registry import RULES


def test_codes_names_and_docs_have_one_shape():
    load_all()
    assert len(RULES) >= 30
    for code, rule in RULES.items():
        assert re.fullmatch(r"(GRD|DS|ACC|FT|MLM|MDS|LCH|SH|MEM)\d{3}", code), code
        assert re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)+", rule.name), rule.name
        for part in (rule.summary, rule.what, rule.why, rule.example, rule.use_instead):
            assert part.strip(), f"{code} has an empty doc section"
        doc = rule.doc()
        positions = [doc.index(h) for h in ("## What it does", "## Why is this bad?", "## Example", "## Use instead")]
        assert positions == sorted(positions), code
    assert len({r.name for r in RULES.values()}) == len(RULES)


def test_docs_rules_md_is_generated_from_the_registry():
    result = subprocess.run([sys.executable, str(ROOT / "scripts" / "gen_rule_docs.py"), "--check"],
                            capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
