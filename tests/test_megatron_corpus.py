"""Every Megatron argument set of ../shared/corpus, written back as a launch script: guard reports each
known mistake (listed in the corpus README and notes) at the line of the flag that causes it, and
no other error."""

from __future__ import annotations

import json
import shlex

import pytest
import yaml

from conftest import CORPUS, run_guard

# file stem -> {code: flag on the reported line}; reasons from the corpus README / notes
EXPECTED_ERRORS = {
    # README: "1 node x 8 GPUs, but TP8 x PP16 = 128"; notes: the step schedule is a list that the
    # script expands unquoted, so Megatron gets five stray words; and main's validate_args refuses
    # --step-batch-size-schedule beside --global-batch-size 1536 (found by guard).
    "NVIDIA__Megatron-LM__train_gpt3_175b_distributed": {"MLM101": "--pipeline-model-parallel-size",
                                                         "MLM005": "--step-batch-size-schedule",
                                                         "MLM127": "--step-batch-size-schedule"},
    # README: "8 GPUs with TP8 x PP16, and 24 layers % PP16 != 0"
    "NVIDIA__Megatron-LM__train_bert_340m_distributed": {"MLM101": "--pipeline-model-parallel-size",
                                                         "MLM106": "--num-layers"},
    # README: "PP4 on 1 node leaves DP=2 < EP=8"
    "NVIDIA__Megatron-LM__train_mixtral_8x7b_distributed": {"MLM109": "--expert-model-parallel-size"},
    # README: "the DS config says train_batch_size 64, Megatron says --global-batch-size 1024"
    "microsoft__Megatron-DeepSpeed__run_deepspeed_example": {"MDS002": "--global-batch-size"},
    # megatron-bad #474: "ZeRO-2 and ZeRO-3 are incompatible with pipeline parallelism"
    "deepspeedai__Megatron-DeepSpeed__issues__474": {"MDS004": "--zero-stage"},
    # notes: 12 layers with "pipeline parallelism = the number of GPUs" (8): validate_args refuses
    # 12 % 8 (found by guard; the corpus notes do not list it)
    "NVIDIA__Megatron-LM__gptoss_02_train": {"MLM106": "--num-layers"},
    # a 2021 script judged against Megatron-LM main: --data-impl and --activations-checkpoint-method
    # are gone (MLM001 names the version where --data-impl still exists)
    "NVIDIA__Megatron-LM__pretrain_gpt_distributed_with_mp_2021": {"MLM001": "--"},
}
EXPECTED_WARNINGS = {
    # README: "--sequence-parallel with TP=1 (Megatron turns it off with a warning)"
    "NVIDIA__Megatron-LM__train_llama3_8b_h100_fp8": {"MLM110"},
    "NVIDIA__Megatron-LM__train_mixtral_8x7b_distributed": {"MLM110"},
    "NVIDIA__Megatron-LM__mamba_train": {"MLM110"},
}
# argument sets that are not a whole Megatron command line
NOT_ARGV = {
    "modelscope__ms-swift__issues__5737": "ms-swift's own CLI (underscore flags; layers come from the checkpoint)",
}


def script_text(data: dict) -> str:
    """The launch line and the arguments, one flag per line, as the corpus recorded them."""
    lines = ["#!/bin/bash"]
    for written in data.get("deepspeed_config_inline") or []:
        lines += [written["written_by"], json.dumps(written["json"], indent=1), "EOT"]
    launcher = data.get("launcher") or {}
    expanded = launcher.get("expanded") if isinstance(launcher, dict) else None
    lines.append(f"{expanded or 'python'} {data.get('entrypoint') or 'pretrain_gpt.py'} \\")
    for item in data.get("args") or []:
        (flag, value), = item.items()
        if value is True:
            lines.append(f"  {flag} \\")
        elif value is None or value is False:
            continue
        elif isinstance(value, list):  # several words, as the script passes them
            lines.append(f"  {flag} {' '.join(shlex.quote(str(v)) for v in value)} \\")
        elif "$" in str(value):  # a value the script leaves to the shell: keep it expandable
            lines.append(f"  {flag} {value} \\")
        else:
            lines.append(f"  {flag} {shlex.quote(str(value))} \\")
    return "\n".join(lines) + "\n"


def _argument_sets():
    if not CORPUS.is_dir():
        return []
    out = []
    for folder in ("megatron", "megatron-bad"):
        for path in sorted((CORPUS / folder).glob("*.yaml")):
            data = yaml.safe_load(path.read_text())
            if "args" not in data or "Only the model-shape subset" in " ".join(data.get("notes") or []):
                continue  # only partly visible: not a whole command line
            out.append(pytest.param(path.stem, data, id=path.stem))
    return out


@pytest.mark.parametrize(("stem", "data"), _argument_sets())
def test_corpus_argument_set(stem, data, tmp_path):
    if stem in NOT_ARGV:
        pytest.skip(NOT_ARGV[stem])
    script = tmp_path / f"{stem}.sh"
    text = script_text(data)
    script.write_text(text)
    # the corpus records no environment, so CUDA_DEVICE_MAX_CONNECTIONS cannot be judged
    code, out, err = run_guard("check", "--isolated", "--format", "json", "--ignore", "MLM111", str(script))
    assert code in (0, 1), err
    diags = json.loads(out)
    errors = {d["code"]: d for d in diags if d["severity"] == "error"}
    expected = EXPECTED_ERRORS.get(stem, {})
    assert set(errors) == set(expected), [(d["code"], d["line"], d["message"]) for d in diags]
    lines = text.splitlines()
    for code, flag in expected.items():
        located = [d for d in diags if d["code"] == code]
        assert any(flag in lines[d["line"] - 1] for d in located), (code, [lines[d["line"] - 1] for d in located])
    warnings = {d["code"] for d in diags if d["severity"] == "warning"}
    assert EXPECTED_WARNINGS.get(stem, set()) <= warnings


def test_corpus_is_covered(corpus):
    assert len(_argument_sets()) >= 25
