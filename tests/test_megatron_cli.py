"""The Megatron side of the command line: --megatron-args, --megatron-version, settings, bad input."""

from __future__ import annotations

import json

from conftest import run_guard


def _codes(*argv: str) -> tuple[int, list[tuple[str, int, int]]]:
    code, out, err = run_guard("check", "--isolated", "--format", "json", *argv)
    assert "Traceback" not in err
    return code, [(d["code"], d["line"], d["col"]) for d in json.loads(out)] if out.strip() else []


def test_megatron_args_string_is_located_by_column():
    argv = "--num-layers 24 --hidden-size 1024 --num-attention-heads 12 --tensor-model-parallel-size 8"
    code, found = _codes("--megatron-args", argv)
    # "12" starts at column 58 of the string (counted by hand)
    assert code == 1 and ("MLM102", 1, 58) in found


def test_megatron_args_with_program_and_world_size():
    argv = ("pretrain_gpt.py --num-layers 24 --hidden-size 1024 --num-attention-heads 16 "
            "--tensor-model-parallel-size 4 --pipeline-model-parallel-size 3")
    code, found = _codes("--world-size", "16", "--megatron-args", argv)
    assert [c for c, _, _ in found if c == "MLM101"] == ["MLM101"]


def test_megatron_version_choice_and_errors():
    argv = "--num-layers 2 --use-legacy-models"
    assert ("MLM001", 1, 16) in _codes("--megatron-args", argv)[1]
    assert "MLM001" not in [c for c, _, _ in _codes("--megatron-version", "0.16.1", "--megatron-args", argv)[1]]
    code, out, err = run_guard("check", "--isolated", "--megatron-version", "9.9", "--megatron-args", argv)
    assert code == 2 and err.count("\n") == 1 and "unknown Megatron version '9.9'" in err


def test_pyproject_megatron_settings(tmp_path):
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text('[tool.guard]\nmegatron-version = "core_v0.16.1"\nworld-size = 16\n')
    code, out, _ = run_guard("check", "--config", str(pyproject), "--format", "json",
                             "--megatron-args", "--num-layers 24 --tensor-model-parallel-size 3")
    assert "MLM101" in {d["code"] for d in json.loads(out)}
    pyproject.write_text('[tool.guard]\nmegatron-version = "nope"\n')
    code, _, err = run_guard("check", "--config", str(pyproject), "--megatron-args", "--num-layers 2 --lr 1")
    assert code == 2 and "megatron-version" in err


def test_missing_script_is_unreadable(tmp_path):
    code, found = _codes(str(tmp_path / "train.sh"))
    assert code == 2 and [c for c, _, _ in found] == ["GRD001"]


def test_megatron_args_double_dash_alone():
    """argparse hands `--megatron-args=--` over as a list (found by the script fuzzer)."""
    code, found = _codes("--megatron-args=--")
    # Python's argparse leaves a lone `--` over ("unrecognized arguments: --"), as guard reports it
    assert code == 1 and ("MLM001", 1, 1) in found and "MLM121" in [c for c, _, _ in found]
