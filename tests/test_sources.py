"""Finding the DeepSpeed config in GPT-NeoX and accelerate YAML, with positions from pyyaml."""

from __future__ import annotations

import json

from conftest import run_guard
from guard.sources.loader import load_document

NEOX = """\
{
  "pipe-parallel-size": 1,
  "num-layers": 6,
  "hidden-size": 512,
  "zero_optimization": {
    "stage": 1,
    "stagee": 2,
  },
  "train_micro_batch_size_per_gpu": 4,
  "checkpoint-activations": true,
}
"""


def test_yaml_positions_are_one_based(tmp_path):
    path = tmp_path / "ds.yaml"
    path.write_text("train_batch_size: 8\nzero_optimization:\n  stage: 3\n")
    doc = load_document(str(path))
    assert doc.data == {"train_batch_size": 8, "zero_optimization": {"stage": 3}}
    assert (doc.locations["/zero_optimization/stage"].key.line, doc.locations["/zero_optimization/stage"].key.col) == (3, 3)
    assert (doc.locations["/zero_optimization/stage"].value.line, doc.locations["/zero_optimization/stage"].value.col) == (3, 10)


def test_yaml_duplicate_keys_are_found(tmp_path):
    path = tmp_path / "ds.yaml"
    path.write_text("train_batch_size: 8\ntrain_batch_size: 16\n")
    code, out, _ = run_guard("check", "--isolated", "--format", "json", str(path))
    assert code == 1
    assert [(d["code"], d["line"], d["col"]) for d in json.loads(out) if d["code"] == "DS001"] == [("DS001", 2, 1)]


def test_neox_yaml_checks_only_deepspeed_keys(tmp_path):
    path = tmp_path / "neox.yml"
    path.write_text(NEOX)
    code, out, _ = run_guard("check", "--isolated", "--format", "json", str(path))
    hits = {(d["code"], d["line"], d["col"]) for d in json.loads(out)}
    # NeoX's own arguments (num-layers, checkpoint-activations) are not DeepSpeed typos;
    # the typo inside zero_optimization (line 7, col 5) is.
    assert ("DS101", 7, 5) in hits
    assert not any(code == "DS102" for code, _, _ in hits)


def test_accelerate_yaml_is_recognised(tmp_path):
    path = tmp_path / "accelerate.yaml"
    path.write_text("compute_environment: LOCAL_MACHINE\ndistributed_type: DEEPSPEED\n"
                    "deepspeed_config:\n  zero_stage: 2\nnum_processes: 8\n")
    code, out, _ = run_guard("check", "--isolated", "--format", "json", str(path))
    assert code in (0, 1)
    assert not any(d["code"] in ("DS101", "DS102", "GRD003") for d in json.loads(out))


def test_a_json_file_without_deepspeed_keys(tmp_path):
    path = tmp_path / "package.json"
    path.write_text('{"name": "x", "version": "1.0"}')
    code, out, _ = run_guard("check", "--isolated", "--format", "json", str(path))
    assert code == 0 and [d["code"] for d in json.loads(out)] == ["GRD003"]
    # found by walking a directory, it is skipped silently
    code, out, _ = run_guard("check", "--isolated", "--format", "json", str(tmp_path))
    assert code == 0 and json.loads(out) == []
