"""guard's activations of a transformers Llama, full and LoRA, against a census of what autograd saves on CPU.

guard is asked as a user asks it: a LLaMA-Factory training config (and the DeepSpeed file it names, which
decides the adapter's dtype: bf16 under ZeRO 0-2, fp32 under ZeRO-3, fp32 under autocast without DeepSpeed),
read by guard.job.finetune_config and guard.job.from_finetune. hf_activations_probe.py counts the saved tensors
of the same model (random init, bf16, SDPA) in one process. A layer is compared to the byte; the rest of the
model (embedding, final norm, head, loss) is compared as its change from full fine-tuning of the same batch,
because guard's loss term counts the live logits a saved-tensor census does not see.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from guard.job.finetune_config import read
from guard.intake.finetune import finetune_subject
from guard.settings import Settings
from guard.job.hf_config import from_dict
from guard.job.origin import Origin
from guard.memory import activations
from guard.sources.loader import load_document
from tests.fidelity.rows import Row

PROBE = Path(__file__).with_name("hf_activations_probe.py")
MODEL = {"model_type": "llama", "hidden_size": 256, "intermediate_size": 688, "num_attention_heads": 8,
         "num_key_value_heads": 2, "vocab_size": 1024, "max_position_embeddings": 256, "tie_word_embeddings": False,
         "num_hidden_layers": 2}
SEQ = 128
ALL = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
# name -> (micro batch, packing, LoRA targets or None, dropout, ZeRO stage or None for no DeepSpeed, checkpointing)
CASES = {
    "full, one sample": (1, False, None, 0.0, 2, False),
    "full, padded batch": (2, False, None, 0.0, 2, False),
    "full, packed batch": (2, True, None, 0.0, 2, False),
    "LoRA all linear, ZeRO-2 (bf16 adapter)": (2, False, ALL, 0.0, 2, False),
    "LoRA all linear, one sample": (1, False, ALL, 0.0, 2, False),
    "LoRA q,v, ZeRO-2": (2, False, ["q_proj", "v_proj"], 0.0, 2, False),
    "LoRA all linear, dropout 0.1, ZeRO-2": (2, False, ALL, 0.1, 2, False),
    "LoRA all linear, ZeRO-3 (fp32 adapter)": (2, False, ALL, 0.0, 3, False),
    "LoRA all linear, no DeepSpeed (fp32 adapter, autocast)": (2, False, ALL, 0.0, None, False),
    "full, padded batch, checkpointed": (2, False, None, 0.0, 2, True),
    "LoRA all linear, padded batch, checkpointed": (2, False, ALL, 0.0, 2, True),
}
# the rest of the model of each case is compared to these (micro batch, checkpointing)
REFERENCE = {(1, False): "full, one sample", (2, False): "full, padded batch",
             (2, True): "full, padded batch, checkpointed"}


def probe_case(case: tuple) -> dict:
    """The census's description of a case: what each framework choice means to the model that runs."""
    micro, packing, targets, dropout, stage, checkpointing = case
    lora = None
    if targets:
        lora = {"rank": 8, "targets": targets, "dropout": dropout,
                "adapter_dtype": "bf16" if stage in (0, 1, 2) else "fp32", "autocast": stage is None}
    return {"micro_batch": micro, "seq": SEQ, "padded": micro > 1 and not packing, "lora": lora,
            "checkpointing": checkpointing}


def measure() -> dict:
    model = {k: v for k, v in MODEL.items() if k != "model_type"}
    spec = {"model": model, "cases": {name: probe_case(case) for name, case in CASES.items()}}
    done = subprocess.run([sys.executable, str(PROBE)], input=json.dumps(spec), capture_output=True, text=True,
                          timeout=900, check=False)
    if done.returncode:
        raise RuntimeError(f"probe failed: {done.stderr[-2000:]}")
    return json.loads(done.stdout)


def training_config(workdir: Path, name: str, case: tuple) -> Path:
    micro, packing, targets, dropout, stage, checkpointing = case
    folder = workdir / name.replace(" ", "_").replace(",", "").replace("(", "").replace(")", "")
    (folder / "model").mkdir(parents=True, exist_ok=True)
    (folder / "model" / "config.json").write_text(json.dumps(MODEL))
    lines = [f"model_name_or_path: {folder / 'model'}", "stage: sft", f"cutoff_len: {SEQ}",
             f"per_device_train_batch_size: {micro}", "bf16: true",
             f"disable_gradient_checkpointing: {str(not checkpointing).lower()}",
             f"packing: {str(packing).lower()}"]
    if targets:
        lines += ["finetuning_type: lora", "lora_rank: 8", f"lora_target: {','.join(targets)}",
                  f"lora_dropout: {dropout}"]
    else:
        lines.append("finetuning_type: full")
    if stage is not None:
        ds = {"train_micro_batch_size_per_gpu": "auto", "bf16": {"enabled": "auto"},
              "zero_optimization": {"stage": stage}}
        (folder / "ds.json").write_text(json.dumps(ds))
        lines.append(f"deepspeed: {folder / 'ds.json'}")
    (folder / "train.yaml").write_text("\n".join(lines) + "\n")
    return folder / "train.yaml"


def predicted(workdir: Path, name: str, case: tuple) -> tuple[float, float]:
    """(one layer, the rest of the model) as guard prices them, on CPU's kernel path (dropout keeps scaled noise
    in its input's dtype rather than CUDA's bool mask)."""
    ft = read(load_document(str(training_config(workdir, name, case))))
    job = finetune_subject(ft, Settings(world_size=1, gpus_per_node=1), load=load_document, arch=from_dict(MODEL, "llama-tiny")).job
    job.mask_bytes = 2
    # a checkpointed layer keeps its input alone (its terms are the recompute working set)
    if job.recompute == "full":
        layer = activations.checkpoint_bytes(job)
    else:
        layer = sum(activations.layer_terms(job, 1).values())
    return layer, activations.embedding_bytes(job) + activations.logits_bytes(job)[0]


def collect(workdir: Path) -> list[Row]:
    seen = measure()
    guessed = {name: predicted(workdir, name, case) for name, case in CASES.items()}
    rows = []
    for name, case in CASES.items():
        rows.append(Row(name, "one layer", guessed[name][0], seen[name]["per_layer"]))
        ref = REFERENCE[case[0], case[5]]
        if name != ref:
            rows.append(Row(name, f"rest of the model, change from {ref}", guessed[name][1] - guessed[ref][1],
                            seen[name]["edge"] - seen[ref]["edge"]))
    return rows
