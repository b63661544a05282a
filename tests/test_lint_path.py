"""The lint path stays light: no torch, DeepSpeed or Megatron import, and a quick cold start."""

from __future__ import annotations

import subprocess
import sys
import time

from conftest import ROOT

PROBE = """
import sys
import guard.cli
code = guard.cli.main(["check", "--isolated", "--format", "json", sys.argv[1]])
heavy = sorted(m for m in sys.modules if m.split(".")[0] in ("torch", "deepspeed", "megatron"))
print("HEAVY", heavy, "EXIT", code)
"""


def test_check_imports_no_framework():
    config = ROOT / "examples" / "deepspeed" / "ds_config_broken.json"
    result = subprocess.run([sys.executable, "-c", PROBE, str(config)], capture_output=True, text=True, cwd=ROOT)
    assert "HEAVY [] EXIT 1" in result.stdout, result.stdout + result.stderr


def test_cold_start_is_quick():
    config = ROOT / "examples" / "deepspeed" / "ds_config_zero2.json"
    start = time.perf_counter()
    result = subprocess.run([sys.executable, "-m", "guard", "check", "--isolated", str(config)],
                            capture_output=True, text=True, cwd=ROOT)
    elapsed = time.perf_counter() - start
    print(f"\ncold `python -m guard check` on one config: {elapsed:.3f} s")
    assert result.returncode == 0, result.stdout + result.stderr
    assert elapsed < 2.0  # a sanity bound only; bench/lint_speed.py measures against the target


def test_launch_script_check_imports_no_framework():
    script = ROOT / "examples" / "megatron" / "train_llama_broken.sh"
    result = subprocess.run([sys.executable, "-c", PROBE, str(script)], capture_output=True, text=True, cwd=ROOT)
    assert "HEAVY [] EXIT 1" in result.stdout, result.stdout + result.stderr
