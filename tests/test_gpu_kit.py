"""bench/gpu_kit.py's CPU half (--dry): every case builds, trains a step and gets guard's prediction, and the
Megatron-LM command guard prices for each case describes the very model the kit builds (parameter counts equal),
so the kit cannot rot before a GPU is lent."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
pytest.importorskip("megatron.core")


@pytest.fixture(scope="module")
def kit(tmp_path_factory):
    out = tmp_path_factory.mktemp("kit")
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "gpu_kit.py"), "--out", str(out), "--dry"],
                          capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads((out / "gpu_kit.json").read_text())


def test_every_megatron_case_runs_and_is_priced(kit):
    rows = [r for r in kit["memory"] if not r["case"].startswith(("deepspeed", "lora", "qlora", "cuda graph"))]
    assert len(rows) == 5 and not [r for r in rows if "error" in r or "skipped" in r]
    assert all(r["guard"]["peak_bytes"] > r["guard"]["allocated_bytes"] > 0 for r in rows)


def test_guard_prices_the_model_the_kit_builds(kit):
    rows = [r for r in kit["memory"] if "param_count" in r]
    assert rows and all(r["param_count"] == r["guard"]["param_count"] for r in rows), \
        [(r["case"], r["param_count"], r["guard"]["param_count"]) for r in rows]


def test_the_lora_case_trains_the_adapter_guard_prices(kit):
    """LoRA over the kit's Llama as LLaMA-Factory builds it: peft's trainable count equals guard's for the
    LLaMA-Factory config the kit writes; QLoRA and the CUDA-graph check wait for a GPU, and say so."""
    rows = {r["case"]: r for r in kit["memory"]}
    lora = rows["lora r16 llama"]
    assert "error" not in lora and lora["trainable_count"] == lora["guard"]["trainable_count"] > 0
    assert "CUDA" in rows["qlora r16 llama (nf4)"]["skipped"] and "GPU" in rows["cuda graph replay"]["skipped"]
