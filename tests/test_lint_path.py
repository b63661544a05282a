"""The lint path stays light: no torch, DeepSpeed, Megatron or HF library import, and a quick cold start."""

from __future__ import annotations

import subprocess
import sys
import time

from conftest import ROOT

PROBE = """
import sys
import guard.cli
code = guard.cli.main(["check", "--isolated", "--format", "json", sys.argv[1]])
heavy = sorted(m for m in sys.modules if m.split(".")[0] in ("torch", "deepspeed", "megatron", "transformers", "peft",
                                                            "bitsandbytes"))
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


def test_finetune_config_and_command_line_import_no_framework(tmp_path):
    """A LLaMA-Factory config (and the DeepSpeed file it names), and a script launching it: LoRA pricing and the
    pair rules stay on the light path (peft, transformers and bitsandbytes are read from their code, never run)."""
    script = tmp_path / "run.sh"
    script.write_text(f"FORCE_TORCHRUN=1 NPROC_PER_NODE=8 llamafactory-cli train "
                      f"{ROOT / 'examples' / 'finetune' / 'llama3_lora_sft.yaml'} cutoff_len=2048\n")
    for target in (ROOT / "examples" / "finetune" / "llama3_lora_sft.yaml", script):
        result = subprocess.run([sys.executable, "-c", PROBE, str(target)], capture_output=True, text=True, cwd=ROOT)
        assert "HEAVY [] EXIT 0" in result.stdout, result.stdout + result.stderr
