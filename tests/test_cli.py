"""The command line: exit codes, formats, selection, settings, suppressions; never a traceback."""

from __future__ import annotations

import json
import textwrap

import pytest

from conftest import run_guard

BAD = '{\n  "train_batch_size": 32,\n  "zero_optimization": {"stage": 2, "stagee": 1}\n}\n'
GOOD = '{\n  "train_batch_size": 32,\n  "gradient_clipping": 1.0,\n  "zero_optimization": {"stage": 2}\n}\n'


@pytest.fixture
def files(tmp_path):
    (tmp_path / "bad.json").write_text(BAD)
    (tmp_path / "good.json").write_text(GOOD)
    return tmp_path


def test_clean_file_exits_0(files):
    code, out, _ = run_guard("check", "--isolated", str(files / "good.json"))
    assert code == 0 and "All checks passed" in out


def test_error_exits_1_with_concise_location(files):
    code, out, _ = run_guard("check", "--isolated", str(files / "bad.json"))
    assert code == 1
    # "stagee" is on line 3; its key starts at column 37 of that line
    assert f"{files / 'bad.json'}:3:37: DS101 [error]" in out
    assert "did you mean 'stage'?" in out


def test_missing_file_and_usage_errors_exit_2(files):
    code, _, err = run_guard("check", "--isolated", str(files / "nope.json"), str(files / "bad.json"))
    assert code == 2 and err == ""  # the unreadable path is a GRD001 diagnostic on stdout
    code, _, err = run_guard("check", "--isolated", "--select", "NOPE999", str(files / "good.json"))
    assert code == 2 and "unknown rule selector" in err and "Traceback" not in err
    code, _, err = run_guard("check", "--world-size", "zero", str(files / "good.json"))
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert run_guard()[0] == 2


def test_other_files_are_checked_after_a_parse_error(files):
    (files / "broken.json").write_text('{"a": }')
    code, out, _ = run_guard("check", "--isolated", "--format", "json", str(files))
    found = {(d["path"].rsplit("/", 1)[-1], d["code"]) for d in json.loads(out)}
    assert ("broken.json", "GRD002") in found and ("bad.json", "DS101") in found


def test_json_format_has_the_contract_fields(files):
    _, out, _ = run_guard("check", "--isolated", "--format", "json", str(files / "bad.json"))
    diag = next(d for d in json.loads(out) if d["code"] == "DS101")
    assert {"code", "severity", "path", "line", "col", "pointer", "message"} <= set(diag)
    assert diag["pointer"] == "/zero_optimization/stagee" and diag["severity"] == "error"


def test_full_format_shows_source_and_caret(files):
    _, out, _ = run_guard("check", "--isolated", "--select", "DS101", "--format", "full", str(files / "bad.json"))
    assert '3 |   "zero_optimization": {"stage": 2, "stagee": 1}' in out
    caret_line = next(line for line in out.splitlines() if line.strip().startswith("|") and "^" in line)
    assert caret_line.index("^") - caret_line.index("|") - 2 == 36  # under column 37
    assert "help:" in out


def test_github_format(files):
    _, out, _ = run_guard("check", "--isolated", "--format", "github", str(files / "bad.json"))
    error = next(line for line in out.splitlines() if line.startswith("::error "))
    assert ",line=3,col=37," in error and "title=DS101 unknown-key-rejected" in error


def test_select_and_ignore(files):
    assert run_guard("check", "--isolated", "--ignore", "DS101", str(files / "bad.json"))[0] == 0
    assert run_guard("check", "--isolated", "--ignore", "DS1", "--extend-select", "DS101",
                     str(files / "bad.json"))[0] == 1
    assert run_guard("check", "--isolated", "--select", "DS0", str(files / "bad.json"))[0] == 0
    assert run_guard("check", "--isolated", "--ignore", "unknown-key-rejected", str(files / "bad.json"))[0] == 0


def test_pyproject_settings_and_per_file_ignores(files, monkeypatch):
    (files / "pyproject.toml").write_text(textwrap.dedent("""
        [tool.guard]
        ignore = ["DS111"]
        [tool.guard.per-file-ignores]
        "bad.json" = ["DS101"]
    """))
    monkeypatch.chdir(files)
    assert run_guard("check", "bad.json")[0] == 0
    assert run_guard("check", "--isolated", "bad.json")[0] == 1
    (files / "pyproject.toml").write_text("[tool.guard]\nselct = ['DS']\n")
    code, _, err = run_guard("check", "bad.json")
    assert code == 2 and "selct" in err


def test_inline_suppression_in_yaml(tmp_path):
    path = tmp_path / "ds.yaml"
    path.write_text("train_batch_size: 8\nzero_optimization:\n  stage: 2\n  stagee: 1  # guard: ignore[DS101]\n")
    assert run_guard("check", "--isolated", str(path))[0] == 0
    path.write_text("train_batch_size: 8\nzero_optimization:\n  stage: 2\n  stagee: 1\n")
    assert run_guard("check", "--isolated", str(path))[0] == 1


def test_rule_docs_commands():
    code, out, _ = run_guard("rule", "DS101")
    assert code == 0
    for heading in ("## What it does", "## Why is this bad?", "## Example", "## Use instead"):
        assert heading in out
    assert run_guard("rule", "unknown-key-rejected")[1] == out
    assert run_guard("rule", "XX1")[0] == 2
    code, out, _ = run_guard("rules")
    assert code == 0 and "DS101" in out and "GRD002" in out


def test_deepspeed_version_is_validated(files):
    code, _, err = run_guard("check", "--isolated", "--deepspeed-version", "latest", str(files / "good.json"))
    assert code == 2 and "0.19.8" in err
    assert run_guard("check", "--isolated", "--deepspeed-version", "0.16.9", str(files / "good.json"))[0] == 0
