"""guard's LoRA model states without DeepSpeed (the HF Trainer's torch DDP) against peft + DDP on 2 CPU ranks
(tests/fidelity/lora_ddp_probe.py), read through a TRL training config with no `deepspeed:` key."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from guard.job.finetune_config import read
from guard.intake.finetune import finetune_subject
from guard.settings import Settings
from guard.job.hf_config import from_dict
from guard.job.origin import Origin
from guard.memory.params import rank_inventory
from guard.memory.states import model_states
from guard.sources.loader import load_document
from tests.fidelity.launch import run_torchrun_probe
from tests.fidelity.lora_zero import MODEL
from tests.fidelity.rows import Row, failures

pytest.importorskip("peft")
pytest.importorskip("transformers")
pytestmark = [pytest.mark.fidelity, pytest.mark.oracle, pytest.mark.slow]

PROBE = Path(__file__).parent / "fidelity" / "lora_ddp_probe.py"
WORLD = 2
CASES = {"all linear r8": {"rank": 8, "targets": "all-linear", "micro_batch": 2, "seq": 64},
         "q,v r16": {"rank": 16, "targets": ["q_proj", "v_proj"], "micro_batch": 2, "seq": 64},
         # ddp_bucket_cap_mb small enough for several buckets: the copy is still exactly the gradients
         "all linear r8, 20 KB buckets": {"rank": 8, "targets": "all-linear", "micro_batch": 2, "seq": 64,
                                          "bucket_cap_mb": 0.02}}
# full fine-tuning: TRL loads the weights in ModelConfig.dtype ("float32" unless written); torch's AdamW keeps its
# moments and autograd its gradients in the weights' dtype, with no master copy
FULL = {"full, dtype bfloat16": {"full": True, "dtype": "bfloat16", "written": "dtype: bfloat16\n",
                                 "micro_batch": 2, "seq": 64},
        "full, TRL's float32 default": {"full": True, "dtype": "float32", "written": "", "micro_batch": 2, "seq": 64},
        # bitsandbytes' 8-bit AdamW: uint8 states with block scales for tensors of 4096+ elements, fp32 below
        "full, adamw_bnb_8bit": {"full": True, "dtype": "bfloat16",
                                 "written": "dtype: bfloat16\noptim: adamw_bnb_8bit\n",
                                 "optim": "adamw_bnb_8bit", "micro_batch": 2, "seq": 64}}


def _job(tmp: Path, name: str, case: dict):
    """The job guard reads from a TRL config for the case: full fine-tuning, or LoRA with the case's adapter."""
    folder = tmp / "".join(c if c.isalnum() else "_" for c in name)
    (folder / "model").mkdir(parents=True)
    (folder / "model" / "config.json").write_text(json.dumps(MODEL))
    if case.get("full"):
        method = case["written"]
    else:
        targets = case["targets"] if isinstance(case["targets"], str) else json.dumps(case["targets"])
        method = (f"use_peft: true\nlora_r: {case['rank']}\nlora_alpha: {2 * case['rank']}\nlora_dropout: 0.0\n"
                  f"lora_target_modules: {targets}\n")
    (folder / "sft.yaml").write_text(
        f"model_name_or_path: {folder / 'model'}\n{method}per_device_train_batch_size: {case['micro_batch']}\n"
        f"max_length: {case['seq']}\nbf16: true\noutput_dir: out\n")
    ft = read(load_document(str(folder / "sft.yaml")))
    return finetune_subject(ft, Settings(world_size=WORLD, gpus_per_node=WORLD), load=load_document,
                            arch=from_dict(MODEL, "llama-tiny")).job


def _priced(tmp: Path, cases: dict):
    """(label, guard's model-state terms, what the probe measured) per case and rank, on WORLD CPU ranks."""
    model = {k: v for k, v in MODEL.items() if k != "model_type"}
    measured = run_torchrun_probe(PROBE, WORLD, {"model": model, "cases": cases}, tmp / "run", 900)
    for rank, results in enumerate(measured):
        for name, seen in results.items():
            job = _job(tmp / f"rank{rank}", name, cases[name])
            terms = model_states(job, rank_inventory(job, job.chunks[0]), dp_rank=rank).terms
            yield f"{name} / rank {rank}", terms, seen


def _shared(label: str, terms: dict, seen: dict) -> list[Row]:
    """The components LoRA and full fine-tuning have alike."""
    return [Row(label, "gradients", terms["gradients"], seen["grads"]),
            Row(label, "DDP buckets", terms["DDP gradient buckets (a copy of the gradients)"],
                seen["buckets"], note=f"{seen['bucket_count']} buckets"),
            Row(label, "optimizer moments", terms["optimizer moments"], seen["moments"])]


@pytest.fixture(scope="module")
def rows(tmp_path_factory):
    out = []
    for label, terms, seen in _priced(tmp_path_factory.mktemp("lora_ddp"), CASES):
        frozen = sum(v for k, v in terms.items() if k.startswith("frozen base"))
        out += [Row(label, "frozen base parameters", frozen, seen["params"]["frozen"]),
                Row(label, "trainable adapter parameters", terms["trainable adapter parameters"],
                    seen["params"]["trainable"], note=seen["trainable_dtype"]), *_shared(label, terms, seen)]
    return out


@pytest.fixture(scope="module")
def full_rows(tmp_path_factory):
    out = []
    for label, terms, seen in _priced(tmp_path_factory.mktemp("full_ddp"), FULL):
        out += [Row(label, "parameters", terms["parameters"], seen["params"]["trainable"],
                    note=seen["trainable_dtype"]), *_shared(label, terms, seen),
                Row(label, "no master copy", sum(v for k, v in terms.items() if "master" in k), 0)]
    return out


def test_full_fine_tuning_matches_ddp_to_the_byte(full_rows):
    assert len(full_rows) == 5 * WORLD * len(FULL) and not failures(full_rows), "\n".join(failures(full_rows))


def test_every_component_matches_ddp_to_the_byte(rows):
    assert len(rows) == 5 * WORLD * len(CASES) and not failures(rows), "\n".join(failures(rows))


def test_the_adapter_trains_in_fp32_without_deepspeed(rows):
    """Nothing casts peft's fp32 adapter without DeepSpeed: its bytes are 4 per weight (hand count for r8 on every
    linear layer of the 2-layer model: 2 x 8 x (sum of in + out over the seven layers))."""
    h, ffn, kv = MODEL["hidden_size"], MODEL["intermediate_size"], 64
    per_layer = 8 * sum(i + o for i, o in ((h, h), (h, kv), (h, kv), (h, h), (h, ffn), (h, ffn), (ffn, h)))
    seen = {r.measured for r in rows if r.component == "trainable adapter parameters"
            and r.case.startswith("all linear")}
    assert seen == {4 * 2 * per_layer}


def test_small_buckets_split_the_copy_without_padding(rows):
    counts = {r.note for r in rows if r.component == "DDP buckets" and "20 KB" in r.case}
    assert counts and all(int(c.split()[0]) > 1 for c in counts)
