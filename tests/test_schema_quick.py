"""guard/schema_quick.py may say "valid" only where jsonschema finds no error, on every vendored schema."""

from __future__ import annotations

import json
import random

import pytest
from jsonschema import Draft202012Validator

from conftest import CORPUS, FIXTURES, ROOT
from guard.resources import load_json
from guard.schema_quick import certainly_valid

VERSIONS = sorted(p.name for p in (ROOT / "schemas" / "deepspeed").iterdir() if (p / "config.schema.json").is_file())


def _configs() -> list[object]:
    found = []
    for folder in (FIXTURES, ROOT / "examples", CORPUS):
        for path in sorted(folder.rglob("*.json")) if folder.is_dir() else []:
            try:
                data = json.loads(path.read_text())
            except (ValueError, UnicodeDecodeError):
                continue
            if isinstance(data, dict):
                found.append(data)
    return found


def _mutations(config: dict, rng: random.Random, count: int) -> list[dict]:
    """Copies with one value swapped for one of another JSON type: the kinds of slip DS107 exists for."""
    swaps = [True, 0, 1, -1, 2.5, "1", "auto", "cpu", None, [], {}, 1e9]
    leaves = []

    def walk(node, trail):
        for key, value in node.items():
            leaves.append(trail + (key,))
            if isinstance(value, dict):
                walk(value, trail + (key,))
    walk(config, ())
    out = []
    for _ in range(count if leaves else 0):
        copy = json.loads(json.dumps(config))
        *parents, last = rng.choice(leaves)
        node = copy
        for key in parents:
            node = node[key]
        node[last] = rng.choice(swaps)
        out.append(copy)
    return out


@pytest.mark.parametrize("version", VERSIONS)
def test_certainly_valid_never_hides_an_error_jsonschema_finds(version):
    schema = load_json("deepspeed", version, "config.schema.json")
    validator = Draft202012Validator(schema)
    rng = random.Random(15)
    configs = _configs()
    said_valid = 0
    for config in configs + [m for c in configs for m in _mutations(c, rng, 3)]:
        if certainly_valid(schema, config):
            said_valid += 1
            assert not list(validator.iter_errors(config)), json.dumps(config)[:300]
    assert said_valid >= 20  # and it does answer for the common case, or it saves nothing


@pytest.mark.parametrize("version", [VERSIONS[0], VERSIONS[-1]])
def test_the_quick_path_changes_no_value_finding(version, tmp_path, monkeypatch):
    """With "auto" passing anywhere (the HF Trainer fills it; DS107 leaves it to the DS2xx rules), the rule's
    findings with and without the quick path are the same, mutated configs included."""
    from guard import settings as settings_module
    from guard.checker import Checker
    from guard.rules import ds_values

    checker = Checker(settings_module.Settings(deepspeed_version=version, select=["DS107", "DS108", "DS109"]))
    rng = random.Random(16)
    configs = _configs()
    path = tmp_path / "ds.json"
    for config in configs + [m for c in configs for m in _mutations(c, rng, 2)]:
        path.write_text(json.dumps(config))
        fast = [d.sort_key() for d in checker.run([str(path)]).diagnostics]
        monkeypatch.setattr(ds_values, "certainly_valid", lambda *_a, **_k: False)
        full = [d.sort_key() for d in checker.run([str(path)]).diagnostics]
        monkeypatch.undo()
        assert fast == full, json.dumps(config)[:300]


def test_a_lint_of_a_json_config_does_not_import_jsonschema_or_yaml(tmp_path):
    import subprocess
    import sys

    config = tmp_path / "ds.json"
    config.write_text('{"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 2, '
                      '"zero_optimization": {"stage": 2}, "bf16": {"enabled": true}}\n')
    probe = ("import sys, runpy; sys.argv = ['guard', 'check', '--isolated', %r]\n"
             "try:\n    runpy.run_module('guard', run_name='__main__')\nexcept SystemExit:\n    pass\n"
             "print(sorted(m for m in ('jsonschema', 'yaml', 'guard.megatron.command') if m in sys.modules))" % str(config))
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=ROOT)
    assert done.stdout.strip().splitlines()[-1] == "[]", done.stdout + done.stderr
