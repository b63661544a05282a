"""A launch script that runs an HF Trainer program is not judged as Megatron: its `--deepspeed` takes a path, and the
command is read as a fine-tuning job (tests/test_finetune_cli.py)."""

from __future__ import annotations

import json

from conftest import run_guard

# The shape of ChatGLM2-6B's ptuning/ds_train_finetune.sh: `deepspeed ... main.py --deepspeed deepspeed.json`
# with transformers' TrainingArguments (training_args.py: output_dir, per_device_train_batch_size, ...).
TRAINER = """deepspeed --num_gpus=4 main.py \\
    --deepspeed deepspeed.json \\
    --do_train \\
    --model_name_or_path THUDM/chatglm2-6b \\
    --output_dir ./output \\
    --per_device_train_batch_size 4 \\
    --gradient_accumulation_steps 1 \\
    --fp16
"""


def test_an_hf_trainer_command_gets_no_megatron_findings(tmp_path):
    script = tmp_path / "finetune.sh"
    script.write_text(TRAINER)
    code, out, _ = run_guard("check", "--isolated", "--format", "json", str(script))
    found = json.loads(out)
    # read as a training job, no Megatron finding; its `--deepspeed deepspeed.json` is relative to wherever the
    # script runs (ChatGLM2's ptuning/ folder holds it), so a file absent here is no FT002 error for a script...
    assert code == 0 and found == []
    # ...but the estimate cannot price a file it cannot read, and says which
    code, _, err = run_guard("estimate", "--isolated", "--model", "llama-2-7b", str(script))
    assert code == 2 and "deepspeed.json" in err and "not found" in err


def test_the_dashed_spelling_hfargumentparser_accepts_is_recognised_too(tmp_path):
    script = tmp_path / "finetune.sh"
    script.write_text(TRAINER.replace("--output_dir", "--output-dir"))
    (tmp_path / "deepspeed.json").write_text('{"train_micro_batch_size_per_gpu": "auto", "fp16": {"enabled": "auto"}}')
    code, out, _ = run_guard("check", "--isolated", "--format", "json", "--select", "FT,SH,MDS", str(script))
    assert code == 0 and json.loads(out) == []


def test_a_megatron_deepspeed_command_is_still_judged(tmp_path):
    script = tmp_path / "mds.sh"  # --deepspeed is a switch there: the config is --deepspeed_config
    script.write_text("deepspeed pretrain_gpt.py --num-layers 2 --hidden-size 64 --num-attention-heads 4 "
                      "--seq-length 128 --max-position-embeddings 128 --micro-batch-size 1 "
                      "--global-batch-size 8 --deepspeed_config ds.json\n")
    code, out, _ = run_guard("check", "--isolated", "--format", "json", str(script))
    assert "MDS005" in [d["code"] for d in json.loads(out)]
