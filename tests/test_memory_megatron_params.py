"""Per-rank parameter counts against real megatron-core 0.16.1 GPT models built on the meta device.

The oracle (tests/megatron_param_oracle.py) spawns one gloo process per rank and counts
`model.parameters()`; guard reads the equivalent Megatron-LM command line. Skips without megatron-core.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from guard.megatron.from_script import job_from_argv
from guard.memory.estimate import estimate
from guard.memory.from_megatron import setup_from_job
from guard.settings import Settings

pytest.importorskip("megatron.core")
pytest.importorskip("torch")

COMMON = "--seq-length 1024 --max-position-embeddings 1024 --micro-batch-size 1 --vocab-size 32000 --bf16"
# name: (oracle case, Megatron-LM flags for the same model)
CASES = {
    "gpt_tied_layernorm_bias_tp2_pp2": (
        dict(world=4, tp=2, pp=2, layers=8, hidden=512, heads=8, ffn=2048, vocab=32000, max_pos=1024),
        "--num-layers 8 --hidden-size 512 --num-attention-heads 8 --ffn-hidden-size 2048 "
        "--tensor-model-parallel-size 2 --pipeline-model-parallel-size 2"),
    "llama_gqa_swiglu_rmsnorm_untied_tp2_pp2": (
        dict(world=4, tp=2, pp=2, layers=8, hidden=512, heads=8, groups=2, ffn=1376, vocab=32000, max_pos=1024,
             swiglu=True, norm="RMSNorm", bias=False, untied=True, position="rope"),
        "--num-layers 8 --hidden-size 512 --num-attention-heads 8 --group-query-attention --num-query-groups 2 "
        "--ffn-hidden-size 1376 --swiglu --normalization RMSNorm --disable-bias-linear "
        "--untie-embeddings-and-output-weights --position-embedding-type rope "
        "--tensor-model-parallel-size 2 --pipeline-model-parallel-size 2"),
    "qwen_qkv_bias_qk_norm_tp2": (
        dict(world=2, tp=2, pp=1, layers=4, hidden=256, heads=4, groups=2, ffn=768, vocab=32000, max_pos=1024,
             swiglu=True, norm="LayerNorm", bias=False, qkv_bias=True, qk_norm=True, untied=True, position="rope"),
        "--num-layers 4 --hidden-size 256 --num-attention-heads 4 --group-query-attention --num-query-groups 2 "
        "--ffn-hidden-size 768 --swiglu --disable-bias-linear --add-qkv-bias --qk-layernorm "
        "--untie-embeddings-and-output-weights --position-embedding-type rope --tensor-model-parallel-size 2"),
    "moe_ep2_pp2": (
        dict(world=4, tp=1, pp=2, ep=2, layers=4, hidden=256, heads=4, ffn=1024, vocab=32000, max_pos=1024,
             swiglu=True, norm="RMSNorm", bias=False, untied=True, position="rope", experts=4, moe_ffn=384, topk=2),
        "--num-layers 4 --hidden-size 256 --num-attention-heads 4 --ffn-hidden-size 1024 --swiglu "
        "--normalization RMSNorm --disable-bias-linear --untie-embeddings-and-output-weights "
        "--position-embedding-type rope --num-experts 4 --moe-ffn-hidden-size 384 --moe-router-topk 2 "
        "--expert-model-parallel-size 2 --pipeline-model-parallel-size 2"),
    "uneven_pp2_first3_last5": (
        dict(world=2, tp=1, pp=2, layers=8, hidden=256, heads=4, ffn=1024, vocab=32000, max_pos=1024,
             first=3, last=5),
        "--num-layers 8 --hidden-size 256 --num-attention-heads 4 --ffn-hidden-size 1024 "
        "--pipeline-model-parallel-size 2 --decoder-first-pipeline-num-layers 3 "
        "--decoder-last-pipeline-num-layers 5"),
}


@pytest.fixture(scope="module")
def oracle(tmp_path_factory) -> dict:
    folder = tmp_path_factory.mktemp("oracle")
    cases = folder / "cases.json"
    cases.write_text(json.dumps({name: case for name, (case, _) in CASES.items()}))
    out = folder / "out.json"
    script = Path(__file__).with_name("megatron_param_oracle.py")
    proc = subprocess.run([sys.executable, str(script), str(cases), str(out)], capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(out.read_text())


@pytest.mark.parametrize("name", list(CASES))
def test_params_per_rank_match_megatron_core(oracle, name):
    case, flags = CASES[name]
    job = job_from_argv(f"pretrain_gpt.py {flags} {COMMON}", "<test>", Settings(world_size=case["world"]))
    result = estimate(setup_from_job(job))
    for measured in oracle[name]:
        stage = result.stages[measured["pp_rank"]]
        assert result.coordinates(measured["rank"])["pp_rank"] == measured["pp_rank"]
        assert stage.inventory.total == measured["params"], (name, measured)
