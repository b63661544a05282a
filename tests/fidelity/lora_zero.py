"""guard's LoRA model states against peft + DeepSpeed on 1 and 2 CPU ranks, ZeRO 0-3 (lora_zero_probe.py).

guard is asked the way a user asks it: a LLaMA-Factory training config naming a local model folder and a
DeepSpeed file with the HF "auto" values, read by guard.job.finetune_config and guard.job.from_finetune. Each measured
component (frozen and trainable parameters, gradients, fp32 masters, Adam moments) is paired with guard's terms.
"""

from __future__ import annotations

import json
from pathlib import Path

from guard.job.finetune_config import read
from guard.intake.finetune import finetune_subject
from guard.settings import Settings
from guard.job.hf_config import from_dict
from guard.job.origin import Origin
from guard.memory.params import rank_inventory
from guard.memory.states import model_states
from guard.sources.loader import load_document
from tests.fidelity.deepspeed_zero import non_scalar_bytes
from tests.fidelity.launch import run_torchrun_probe
from tests.fidelity.rows import Row

PROBE = Path(__file__).with_name("lora_zero_probe.py")
MODEL = {"model_type": "llama", "hidden_size": 128, "intermediate_size": 344, "num_hidden_layers": 2,
         "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 1000, "max_position_embeddings": 128,
         "tie_word_embeddings": False}
RANK, SEQ, MICRO_BATCH = 8, 64, 2
BUCKETS = dict(reduce_bucket=50_000, prefetch_bucket=20_000, max_live=100_000)
WORLD_SIZES = (1, 2)
STAGES = (0, 1, 2, 3)
LAUNCH_TIMEOUT = 900


def cases() -> dict[str, dict]:
    return {f"zero{stage}": dict(stage=stage, rank=RANK, micro_batch=MICRO_BATCH, seq=SEQ, **BUCKETS)
            for stage in STAGES}


def measure(world: int, workdir: Path) -> list[dict]:
    model = {k: v for k, v in MODEL.items() if k != "model_type"}  # LlamaConfig's keyword arguments
    return run_torchrun_probe(PROBE, world, {"model": model, "cases": cases()}, workdir / f"world{world}",
                              LAUNCH_TIMEOUT)


def training_config(workdir: Path, case: dict) -> Path:
    """A LLaMA-Factory config in the shape of its examples, with the probe's model and ZeRO settings."""
    folder = workdir / f"zero{case['stage']}"
    (folder / "model").mkdir(parents=True, exist_ok=True)
    (folder / "model" / "config.json").write_text(json.dumps(MODEL))
    zero = {"stage": case["stage"], "reduce_bucket_size": case["reduce_bucket"],
            "allgather_bucket_size": case["reduce_bucket"], "stage3_prefetch_bucket_size": case["prefetch_bucket"],
            "stage3_param_persistence_threshold": 0, "stage3_max_live_parameters": case["max_live"]}
    (folder / "ds.json").write_text(json.dumps({"train_micro_batch_size_per_gpu": "auto",
                                                "gradient_accumulation_steps": "auto", "bf16": {"enabled": "auto"},
                                                "zero_optimization": zero}))
    (folder / "train.yaml").write_text(
        f"model_name_or_path: {folder / 'model'}\nstage: sft\nfinetuning_type: lora\nlora_rank: {case['rank']}\n"
        f"lora_target: all\ncutoff_len: {case['seq']}\nper_device_train_batch_size: {case['micro_batch']}\n"
        f"bf16: true\ndeepspeed: {folder / 'ds.json'}\ndisable_gradient_checkpointing: true\n")
    return folder / "train.yaml"


def rows_for(name: str, case: dict, world: int, rank: int, seen: dict, workdir: Path) -> list[Row]:
    ft = read(load_document(str(training_config(workdir, case))))
    job = finetune_subject(ft, Settings(world_size=world, gpus_per_node=world), load=load_document, arch=from_dict(MODEL, "llama-tiny")).job
    states = model_states(job, rank_inventory(job, job.chunks[0]), dp_rank=rank)
    terms = states.terms
    frozen = sum(v for k, v in terms.items() if k.startswith("frozen base"))
    label = f"{world} rank{'s' if world > 1 else ''} / rank {rank} / {name}"
    ab, after = seen["after_backward"], seen["after_step"]
    return [
        Row(label, "frozen base parameters", frozen, seen["param_bytes"]["frozen"]),
        Row(label, "trainable adapter parameters", terms["trainable adapter parameters"],
            seen["param_bytes"]["trainable"], note=f"dtype measured {seen['trainable_dtype']}"),
        Row(label, "parameters (end of backward)", states.params, ab["params"]),
        Row(label, "gradients (end of backward)", terms.get("gradients", 0), ab["grads"]),
        Row(label, "fp32 master weights", terms.get("fp32 master weights", 0), ab["master"]),
        Row(label, "optimizer moments (after step)", terms.get("optimizer moments", 0),
            non_scalar_bytes(after, "moments"), note="Adam step counters left out"),
    ]


def collect(workdir: Path, world_sizes=WORLD_SIZES) -> list[Row]:
    rows = []
    for world in world_sizes:
        for rank, results in enumerate(measure(world, workdir)):
            for name, seen in results.items():
                rows += rows_for(name, seen["case"], world, rank, seen, workdir)
    return rows
