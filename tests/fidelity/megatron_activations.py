"""Per-layer saved-for-backward bytes: guard against real megatron-core 0.16.1 layers forward on CPU (2 %).

The probe (megatron_activation_probe.py) runs a GPTModel forward (and, for full recompute, its backward) on
CPU and counts what autograd keeps, layer by layer. guard is asked about the same model through the
Megatron-LM flags of the same job (`--transformer-impl local`: unfused attention), with the kernel path the
CPU takes set on the TrainingJob (CPU_PATH): what differs from a GPU run is a named kernel choice, not a constant.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from guard.intake.read import read
from guard.intake.request import Request
from guard.memory.activations import chunk_stored, mtp_bytes
from guard.memory.workspaces import global_memory_buffer
from guard.job.training_job import DTYPE_BYTES, TrainingJob
from guard.settings import Settings
from tests.fidelity.rows import Row

PROBE = Path(__file__).with_name("megatron_activation_probe.py")
TOLERANCE = 0.02

GPT = dict(layers=2, hidden=256, heads=8, ffn=1024, vocab=1024, seq=128, batch=2)
LLAMA = dict(GPT, ffn=688, swiglu=True, bias=False, position="rope", norm="RMSNorm")
MOE = dict(LLAMA, groups=2, experts=4, topk=2, moe_ffn=256, aux_loss=0.01)

# name -> probe case (keys: megatron_activation_probe._config); the flags come from megatron_flags(case)
CASES: dict[str, dict] = {
    "gpt_bf16_dropout": dict(GPT, dropout=0.1),
    "gpt_bf16_no_dropout": dict(GPT),
    "gpt_fp32_dropout": dict(GPT, dropout=0.1, dtype="fp32"),
    "gpt_gqa_bf16_dropout": dict(GPT, groups=2, dropout=0.1),  # Q stays a view: the QKV output is kept
    "llama_gqa_rope_swiglu_rmsnorm_bf16": dict(LLAMA, groups=2),
    "llama_mha_rope_fp32_dropout": dict(LLAMA, dropout=0.1, dtype="fp32"),  # V stays a view
    "selective_core_attn_gpt_bf16_dropout": dict(GPT, dropout=0.1, recompute="selective"),
    "selective_core_attn_llama_gqa_bf16": dict(LLAMA, groups=2, recompute="selective"),
    "selective_layernorm_gpt_bf16_dropout": dict(GPT, dropout=0.1, recompute="selective",
                                                  recompute_modules=["layernorm"]),
    "selective_layernorm_llama_bf16": dict(LLAMA, recompute="selective", recompute_modules=["layernorm"]),
    "selective_mlp_gpt_bf16_dropout": dict(GPT, dropout=0.1, recompute="selective", recompute_modules=["mlp"]),
    "full_uniform_1_gpt_bf16_dropout": dict(GPT, dropout=0.1, recompute="full"),
    "full_uniform_1_llama_gqa_bf16": dict(LLAMA, groups=2, recompute="full"),
    "full_block_1_of_2_gpt_bf16_dropout": dict(GPT, dropout=0.1, recompute="full", recompute_method="block"),
    "moe_alltoall_top2_bf16": dict(MOE, dispatcher="alltoall"),
    "moe_allgather_top2_fp32_dropout": dict(MOE, dispatcher="allgather", dropout=0.1, dtype="fp32"),
    "moe_selective_moe_bf16": dict(MOE, dispatcher="alltoall", recompute="selective", recompute_modules=["moe"]),
    # experts weighting their activation by the probabilities without the fused kernel (gelu cannot fuse it)
    "moe_gelu_unfused_bf16": dict(MOE, dispatcher="alltoall", swiglu=False, fused_act=False),
    "moe_swiglu_unfused_bf16": dict(MOE, dispatcher="alltoall", fused_act=False),
    # multi-token prediction: what the MTP block and its loss add to the same model without it ("base")
    "mtp1_gpt_bf16": dict(GPT, mtp=1, base="gpt_bf16_no_dropout"),
    "mtp2_llama_gqa_bf16": dict(LLAMA, groups=2, mtp=2, base="llama_gqa_rope_swiglu_rmsnorm_bf16"),
}


def megatron_flags(case: dict) -> str:
    """The Megatron-LM command line of the probe's model (what pretrain_gpt.py would hand megatron-core)."""
    p = case.get("dropout", 0.0)
    flags = [f"--num-layers {case['layers']} --hidden-size {case['hidden']} --num-attention-heads {case['heads']}",
             f"--ffn-hidden-size {case['ffn']} --seq-length {case['seq']} --max-position-embeddings {case['seq']}",
             f"--micro-batch-size {case['batch']} --global-batch-size {case['batch']} --vocab-size {case['vocab']}",
             f"--make-vocab-size-divisible-by 1 --hidden-dropout {p} --attention-dropout {p} --transformer-impl local"]
    if case.get("dtype", "bf16") == "bf16":
        flags.append("--bf16")
    if case.get("groups"):
        flags.append(f"--group-query-attention --num-query-groups {case['groups']}")
    if case.get("swiglu"):
        flags.append("--swiglu")
    if case.get("mtp"):
        flags.append(f"--mtp-num-layers {case['mtp']}")
    if not case.get("fused_act", True):
        flags.append("--no-bias-swiglu-fusion" if case.get("swiglu") else "--no-bias-gelu-fusion")
    if case.get("norm"):
        flags.append(f"--normalization {case['norm']}")
    if not case.get("bias", True):
        flags.append("--disable-bias-linear")
    if case.get("position"):
        flags.append(f"--position-embedding-type {case['position']}")
    if case.get("experts"):
        flags.append(f"--num-experts {case['experts']} --moe-router-topk {case['topk']} "
                     f"--moe-ffn-hidden-size {case['moe_ffn']} --moe-token-dispatcher-type {case['dispatcher']} "
                     f"--moe-aux-loss-coeff {case.get('aux_loss', 0.0)}")
    if case.get("recompute") == "selective":
        flags.append(f"--recompute-granularity selective --recompute-modules "
                     f"{' '.join(case.get('recompute_modules') or ['core_attn'])}")
    elif case.get("recompute") == "full":
        flags.append(f"--recompute-granularity full --recompute-method {case.get('recompute_method', 'uniform')} "
                     f"--recompute-num-layers {case.get('recompute_num_layers', 1)}")
    return " ".join(flags)


CPU_PATH = ("local layers; unfused attention, torch softmax in fp32; dropout masks in the activation dtype; "
            "torch CPU norms (LayerNorm stats in the activation dtype, composite RMSNorm); unfused RoPE")


def predict(case: dict) -> TrainingJob:
    """guard's TrainingJob for the case: the flags, then the kernel path megatron-core takes on CPU."""
    request = Request(megatron_args=(f"pretrain_gpt.py {megatron_flags(case)}",))
    setup = read(request, Settings(world_size=1, megatron_version="core_v0.16.1")).job.required()
    act = DTYPE_BYTES[setup.params_dtype]
    # non-fused softmax with attention_softmax_in_fp32 (megatron's torch fallback): fp32 probabilities
    setup.softmax_bytes = 4
    # CPU dropout multiplies by a noise tensor of the input's dtype (CUDA's native dropout keeps a bool mask)
    setup.mask_bytes = act
    setup.norm_kernel = "torch_cpu"
    setup.rope_kernel = "unfused"
    return setup


def measure(workdir: Path) -> dict[str, dict]:
    """Run the probe once over every case (cached in workdir)."""
    out = workdir / "megatron_activations.json"
    if not out.exists():
        workdir.mkdir(parents=True, exist_ok=True)
        cases = workdir / "megatron_activations_cases.json"
        cases.write_text(json.dumps(CASES))
        proc = subprocess.run([sys.executable, str(PROBE), str(cases), str(out)], capture_output=True, text=True,
                              timeout=900)
        if proc.returncode:
            raise RuntimeError(f"megatron_activation_probe failed:\n{proc.stderr[-4000:]}")
    return json.loads(out.read_text())


def rows_for(name: str, seen: dict) -> list[Row]:
    case = CASES[name]
    setup = predict(case)
    layers = tuple(range(case["layers"]))
    stored, working = chunk_stored(setup, layers)
    # the chunk's layers, per layer: the causal mask and RoPE frequencies every layer sees are model inputs
    # (seen["shared"]), not layer terms, on both sides
    measured = (sum(seen["per_layer"]) + sum(seen["checkpoint"])) / len(layers)
    dtype = case.get("dtype", "bf16")
    what = "full recompute: the checkpointed inputs per layer" if case.get("recompute") == "full" else \
        "saved for backward after the forward"
    rows = [Row(f"megatron-core {name}", "layer activations", stored / len(layers), measured, TOLERANCE,
                f"{what}; {dtype}; {CPU_PATH}")]
    rows.append(Row(f"megatron-core {name}", "global memory buffer", global_memory_buffer(setup),
                    seen["global_buffer"], 0.0, "megatron's GlobalMemoryBuffer after the forward (the local "
                    "attention's score buffer)"))
    if case.get("recompute") == "full":
        rows.append(Row(f"megatron-core {name}", "recompute working set", working, max(seen["recompute"]),
                        TOLERANCE, f"saved while backward re-runs one group; {dtype}; {CPU_PATH}"))
    return rows


def mtp_row(name: str, measured: dict) -> Row:
    """The MTP block and its losses: all the case keeps for backward, less what its base case keeps."""
    case = CASES[name]
    added = measured[name]["total"] - measured[case["base"]]["total"]
    return Row(f"megatron-core {name}", "multi-token prediction", case["mtp"] * mtp_bytes(predict(case)), added,
               TOLERANCE, f"saved for backward beyond {case['base']}; {CPU_PATH}")


def collect(workdir: Path) -> list[Row]:
    measured = measure(workdir)
    rows = [row for name in CASES for row in rows_for(name, measured[name])]
    return rows + [mtp_row(name, measured) for name in CASES if CASES[name].get("mtp")]
