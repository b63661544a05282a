"""Every rule's fixture cases: the exact places each rule must (and must not) report.

Each tests/fixtures/rules/<CODE>/cases.yaml lists files with the guard arguments to use and the
expected `CODE@line:col` hits for that rule, written by hand from the fixture file.
"""

from __future__ import annotations

import json

import pytest
import yaml

from conftest import FIXTURES, run_guard
from guard.rules import load_all
from guard.rules.registry import RULES

RULE_DIRS = sorted(p for p in (FIXTURES / "rules").iterdir() if p.is_dir())


def _cases():
    for folder in RULE_DIRS:
        for case in yaml.safe_load((folder / "cases.yaml").read_text()) or []:
            yield pytest.param(folder, case, id=f"{folder.name}-{case['file']}")


@pytest.mark.parametrize(("folder", "case"), list(_cases()))
def test_rule_fixture(folder, case):
    code = folder.name
    path = folder / case["file"]
    exit_code, out, err = run_guard("check", "--isolated", "--format", "json", *case.get("args", []), str(path))
    assert exit_code in (0, 1), err
    found = sorted(f"{d['code']}@{d['line']}:{d['col']}" for d in json.loads(out) if d["code"] == code)
    assert found == sorted(case["expect"]), out
    for needle in case.get("message_contains", []):
        assert any(needle in d["message"] for d in json.loads(out) if d["code"] == code), out


def test_every_rule_has_violating_and_clean_fixtures():
    load_all()
    missing = []
    for code in RULES:
        cases_file = FIXTURES / "rules" / code / "cases.yaml"
        if code.startswith("GRD"):
            continue  # input problems are covered by test_cli_inputs.py
        if not cases_file.is_file():
            missing.append(f"{code}: no fixtures")
            continue
        cases = yaml.safe_load(cases_file.read_text()) or []
        if not any(c["expect"] for c in cases) or not any(not c["expect"] for c in cases):
            missing.append(f"{code}: needs both a violating and a clean case")
    assert not missing, "\n".join(missing)
