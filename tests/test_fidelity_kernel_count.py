"""The kernels per layer guard's host-issue term uses (schemas/gpus/kernels.json) are what megatron-core's real
layers dispatch on CPU (tests/fidelity/megatron_kernel_count_probe.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from guard.plan.kernels import table

pytestmark = [pytest.mark.fidelity]
pytest.importorskip("megatron.core")
pytest.importorskip("torch")

PROBE = Path(__file__).parent / "fidelity" / "megatron_kernel_count_probe.py"
# the table's rows: a GPT layer (LayerNorm, GeLU, biases) and a Llama layer (RMSNorm, SwiGLU, RoPE, GQA)
CASES = {"layernorm": {"hidden": 64, "heads": 4, "ffn": 256, "seq": 32, "batch": 2, "vocab": 128, "layers": 1},
         "rmsnorm": {"hidden": 64, "heads": 4, "groups": 2, "ffn": 192, "seq": 32, "batch": 2, "vocab": 128,
                     "layers": 1, "norm": "RMSNorm", "swiglu": True, "bias": False, "position": "rope"},
         "layernorm_dropout": {"hidden": 64, "heads": 4, "ffn": 256, "seq": 32, "batch": 2, "vocab": 128,
                               "layers": 1, "dropout": 0.1}}
MOE = {"hidden": 64, "heads": 4, "groups": 2, "ffn": 192, "seq": 32, "batch": 2, "vocab": 128, "layers": 1,
       "norm": "RMSNorm", "swiglu": True, "bias": False, "position": "rope", "experts": 4, "topk": 2, "moe_ffn": 64,
       "aux_loss": 0.01, "dispatcher": "alltoall"}
CASES.update({"moe_4": MOE, "moe_8": dict(MOE, experts=8)})


@pytest.fixture(scope="module")
def counted(tmp_path_factory):
    work = tmp_path_factory.mktemp("kernel_count")
    cases, out = work / "cases.json", work / "out.json"
    cases.write_text(json.dumps(CASES))
    proc = subprocess.run([sys.executable, str(PROBE), str(cases), str(out)], capture_output=True, text=True,
                          timeout=600, cwd=PROBE.parent)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(out.read_text())


def test_the_table_counts_what_the_layers_dispatch(counted):
    rows = table()["host"]["kernels_per_layer"]
    for name in ("layernorm", "rmsnorm"):
        assert rows[name] == counted[name]["layer"], name
    assert rows["outside"] == counted["layernorm"]["outside"]
    dropout = {k: counted["layernorm_dropout"]["layer"][k] - counted["layernorm"]["layer"][k]
               for k in ("forward", "backward")}
    assert rows["dropout"] == dropout


def test_a_layer_dispatches_its_gemms(counted):
    """Each linear layer is one GEMM forward and two backward (input and weight gradients): QKV, projection,
    fc1, fc2 make 4 + 8, and the unfused core's QK^T and AV 2 + 4 batched matmuls."""
    ops = counted["layernorm"]["ops"]
    assert ops.get("mm", 0) + ops.get("addmm", 0) == 12
    assert ops.get("bmm", 0) + ops.get("baddbmm", 0) == 6


def test_the_moe_row_counts_what_an_moe_layer_dispatches(counted):
    """The table's MoE row (a fixed part plus a part per local expert) gives the counts of 4 and of 8 experts."""
    row = table()["host"]["kernels_per_layer"]["moe"]
    for name, experts in (("moe_4", 4), ("moe_8", 8)):
        for way in ("forward", "backward"):
            assert row[way] + experts * row["per_expert"][way] == counted[name]["layer"][way], (name, way)
