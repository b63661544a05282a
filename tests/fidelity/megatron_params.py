"""Per-rank parameter counts by bucket: guard against real megatron-core 0.16.1 GPT models (exact)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.fidelity.rows import Row

from guard.intake.read import read
from guard.intake.request import Request
from guard.memory.estimate import estimate
from guard.settings import Settings

PROBE = Path(__file__).with_name("megatron_params_probe.py")
BUCKETS = ("embedding", "head", "expert", "tp_sharded", "tp_replicated")
COMMON = "--seq-length 1024 --max-position-embeddings 1024 --micro-batch-size 1 --bf16"
LLAMA = "--swiglu --normalization RMSNorm --disable-bias-linear --position-embedding-type rope"
POS = dict(max_pos=1024)  # --max-position-embeddings in COMMON

# name: (probe case, the Megatron-LM flags of the same model). The probe case is what Megatron-LM's
# core_transformer_config_from_args and gpt_builders would hand to megatron-core for those flags.
# MoE with TP > 1 needs --sequence-parallel in Megatron-LM; the probe builds without it (same counts).
CASES: dict[str, tuple[dict, str]] = {
    "gpt_tied_layernorm_bias_tp2_pp2": (
        dict(world=4, tp=2, pp=2, layers=8, hidden=512, heads=8, ffn=2048, vocab=32000, **POS),
        "--num-layers 8 --hidden-size 512 --num-attention-heads 8 --ffn-hidden-size 2048 --vocab-size 32000 "
        "--tensor-model-parallel-size 2 --pipeline-model-parallel-size 2"),
    "llama_gqa_swiglu_rmsnorm_untied_tp2_pp2": (
        dict(world=4, tp=2, pp=2, layers=8, hidden=512, heads=8, groups=2, ffn=1376, vocab=32000, **POS,
             swiglu=True, norm="RMSNorm", bias=False, untied=True, position="rope"),
        f"--num-layers 8 --hidden-size 512 --num-attention-heads 8 --group-query-attention --num-query-groups 2 "
        f"--ffn-hidden-size 1376 {LLAMA} --untie-embeddings-and-output-weights --vocab-size 32000 "
        f"--tensor-model-parallel-size 2 --pipeline-model-parallel-size 2"),
    "qwen_qkv_bias_qk_norm_tp2": (
        dict(world=2, tp=2, pp=1, layers=4, hidden=256, heads=4, groups=2, ffn=768, vocab=32000, **POS,
             swiglu=True, norm="LayerNorm", bias=False, qkv_bias=True, qk_norm=True, untied=True, position="rope"),
        "--num-layers 4 --hidden-size 256 --num-attention-heads 4 --group-query-attention --num-query-groups 2 "
        "--ffn-hidden-size 768 --swiglu --disable-bias-linear --add-qkv-bias --qk-layernorm --vocab-size 32000 "
        "--untie-embeddings-and-output-weights --position-embedding-type rope --tensor-model-parallel-size 2"),
    "moe_ep2_pp2": (
        dict(world=4, tp=1, pp=2, ep=2, layers=4, hidden=256, heads=4, ffn=1024, vocab=32000, **POS,
             swiglu=True, norm="RMSNorm", bias=False, untied=True, position="rope", experts=4, moe_ffn=384, topk=2),
        f"--num-layers 4 --hidden-size 256 --num-attention-heads 4 --ffn-hidden-size 1024 {LLAMA} "
        "--untie-embeddings-and-output-weights --vocab-size 32000 --num-experts 4 --moe-ffn-hidden-size 384 "
        "--moe-router-topk 2 --expert-model-parallel-size 2 --pipeline-model-parallel-size 2"),
    "uneven_pp2_first3_last5": (
        dict(world=2, tp=1, pp=2, layers=8, hidden=256, heads=4, ffn=1024, vocab=32000, **POS, first=3, last=5),
        "--num-layers 8 --hidden-size 256 --num-attention-heads 4 --ffn-hidden-size 1024 --vocab-size 32000 "
        "--pipeline-model-parallel-size 2 --decoder-first-pipeline-num-layers 3 "
        "--decoder-last-pipeline-num-layers 5"),
    # TP 1 x PP 1 (DP 2): untied head next to the embedding, GPT-2's vocabulary padded to 50,304
    "gpt_untied_padded_vocab_tp1_pp1": (
        dict(world=2, tp=1, pp=1, layers=4, hidden=256, heads=4, ffn=1024, vocab=50257, **POS, untied=True),
        "--num-layers 4 --hidden-size 256 --num-attention-heads 4 --ffn-hidden-size 1024 --vocab-size 50257 "
        "--untie-embeddings-and-output-weights"),
    # TP 4 x PP 4: GQA with a head size other than hidden / heads, tied, vocab 32,001 padded to 32,256
    "llama_gqa_kv_channels_tp4_pp4": (
        dict(world=16, tp=4, pp=4, layers=8, hidden=256, heads=8, groups=4, kv_channels=64, ffn=704, vocab=32001,
             **POS, swiglu=True, norm="RMSNorm", bias=False, position="rope"),
        f"--num-layers 8 --hidden-size 256 --num-attention-heads 8 --group-query-attention --num-query-groups 4 "
        f"--kv-channels 64 --ffn-hidden-size 704 {LLAMA} --vocab-size 32001 "
        f"--tensor-model-parallel-size 4 --pipeline-model-parallel-size 4"),
    "gpt_interleaved_tp1_pp4_vpp2": (
        dict(world=4, tp=1, pp=4, vpp=2, layers=8, hidden=256, heads=4, ffn=1024, vocab=32000, **POS),
        "--num-layers 8 --hidden-size 256 --num-attention-heads 4 --ffn-hidden-size 1024 --vocab-size 32000 "
        "--pipeline-model-parallel-size 4 --num-layers-per-virtual-pipeline-stage 1"),
    # per rank 2, 4, 4, 4 layers; per virtual stage 1, 2, 2, 2 | 1, 2, 2, 2
    "uneven_interleaved_pp4_vpp2_first2_last4": (
        dict(world=4, tp=1, pp=4, vpp=2, layers=14, hidden=256, heads=4, ffn=704, vocab=32000, **POS,
             first=2, last=4, swiglu=True, norm="RMSNorm", bias=False, untied=True, position="rope"),
        f"--num-layers 14 --hidden-size 256 --num-attention-heads 4 --ffn-hidden-size 704 {LLAMA} "
        "--untie-embeddings-and-output-weights --vocab-size 32000 --pipeline-model-parallel-size 4 "
        "--num-virtual-stages-per-pipeline-rank 2 --decoder-first-pipeline-num-layers 2 "
        "--decoder-last-pipeline-num-layers 4"),
    # expert-TP 2 under TP 4, a shared expert, first layer dense, tied with PP 1 (one table serves both ends);
    # megatron-core allows MoE biases only with ETP 1
    "moe_tp4_etp2_ep2_shared": (
        dict(world=4, tp=4, pp=1, ep=2, etp=2, layers=4, hidden=256, heads=4, ffn=1024, vocab=32000, **POS,
             swiglu=True, norm="RMSNorm", bias=False, position="rope", experts=4, moe_ffn=256, topk=2,
             shared_ffn=512, moe_freq=[0, 1, 1, 1]),
        f"--num-layers 4 --hidden-size 256 --num-attention-heads 4 --ffn-hidden-size 1024 {LLAMA} "
        "--vocab-size 32000 --num-experts 4 --moe-ffn-hidden-size 256 "
        "--moe-router-topk 2 --moe-shared-expert-intermediate-size 512 --moe-layer-freq '[0]+[1]*3' "
        "--expert-model-parallel-size 2 --expert-tensor-parallel-size 2 --tensor-model-parallel-size 4 "
        "--sequence-parallel"),
    # expert-TP 1 under TP 2, EP 4 across TP x DP, every other layer MoE, expert biases, LayerNorm, learned
    # positions, tied over two stages (megatron-core refuses biases in shared experts)
    # one multi-token prediction layer on the last stage, with the embedding copy GPTModel builds there
    "gpt_mtp1_tp2_pp2": (
        dict(world=4, tp=2, pp=2, layers=8, hidden=512, heads=8, ffn=2048, vocab=32000, **POS, mtp=1),
        "--num-layers 8 --hidden-size 512 --num-attention-heads 8 --ffn-hidden-size 2048 --vocab-size 32000 "
        "--tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 --mtp-num-layers 1"),
    "moe_tp2_etp1_ep4_pp2_bias_freq2": (
        dict(world=8, tp=2, pp=2, ep=4, etp=1, layers=4, hidden=256, heads=4, ffn=1024, vocab=32000, **POS,
             experts=8, moe_ffn=256, topk=2, moe_freq=2),
        "--num-layers 4 --hidden-size 256 --num-attention-heads 4 --ffn-hidden-size 1024 --vocab-size 32000 "
        "--num-experts 8 --moe-ffn-hidden-size 256 --moe-router-topk 2 --moe-layer-freq 2 "
        "--expert-model-parallel-size 4 --expert-tensor-parallel-size 1 "
        "--tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 --sequence-parallel"),
}


def guard_buckets(inventory) -> dict[str, int]:
    """guard's inventory in the probe's five buckets: embedding and head items moved out by their labels."""
    out = dict.fromkeys(BUCKETS, 0)
    for (bucket, item), count in inventory.items.items():
        if item.startswith(("word embeddings", "position embeddings")):  # also the MTP stage's own copy
            bucket = "embedding"
        elif item.startswith("output layer") or item == "final norm":
            bucket = "head"
        out[bucket] += count
    return out


def measure(workdir: Path) -> dict[str, list[dict]]:
    """Run the probe once over every case (cached in workdir)."""
    out = workdir / "megatron_params.json"
    if not out.exists():
        cases = workdir / "megatron_params_cases.json"
        cases.write_text(json.dumps({name: case for name, (case, _) in CASES.items()}))
        proc = subprocess.run([sys.executable, str(PROBE), str(cases), str(out)], capture_output=True, text=True,
                              timeout=900)
        if proc.returncode:
            raise RuntimeError(f"megatron_params_probe failed:\n{proc.stderr[-4000:]}")
    return json.loads(out.read_text())


def _ranks(ranks: list[int]) -> str:
    return f"rank {ranks[0]}" if len(ranks) == 1 else \
        f"ranks {ranks[0]}-{ranks[-1]}" if ranks == list(range(ranks[0], ranks[-1] + 1)) else f"ranks {ranks}"


def rows_for(name: str, records: list[dict]) -> list[Row]:
    case, flags = CASES[name]
    request = Request(megatron_args=(f"pretrain_gpt.py {flags} {COMMON}",))
    result = estimate(read(request, Settings(world_size=case["world"], megatron_version="core_v0.16.1")).job.required())
    # a rank class: the ranks of one pipeline stage that hold the same counts (guard predicts one per stage)
    classes: dict[tuple, list[dict]] = {}
    for rec in records:
        classes.setdefault((rec["pp_rank"], tuple(rec["counts"][b] for b in BUCKETS)), []).append(rec)
    rows = []
    for (pp_rank, _), members in sorted(classes.items()):
        ranks = [m["rank"] for m in members]
        label = f"{name} pp{pp_rank}" + (f" {_ranks(ranks)}" if len(classes) > case["pp"] else "")
        note = f"{_ranks(ranks)}; chunks of {[c['layers'] for c in members[0]['chunks']]} layers"
        predicted = guard_buckets(result.stages[pp_rank].inventory)
        for bucket in BUCKETS:
            rows.append(Row(label, bucket, predicted[bucket], members[0]["counts"][bucket], 0.0, note))
        rows.append(Row(label, "total", result.stages[pp_rank].inventory.total, members[0]["total"], 0.0, note))
        placed = sum(all(result.coordinates(m["rank"])[k] == m[k] for k in ("tp_rank", "dp_rank", "pp_rank"))
                     for m in members)
        rows.append(Row(label, "ranks placed (tp, dp, pp)", placed, len(members), 0.0, note))
    return rows


def collect(workdir: Path) -> list[Row]:
    measured = measure(workdir)
    return [row for name in CASES for row in rows_for(name, measured[name])]
