"""The one TrainingJob: its ParallelLayout, and the jobs issue 11 measured, read by check and estimate alike."""

from __future__ import annotations

import json

import pytest
import yaml

from conftest import CORPUS, ROOT, run_guard
from guard.checker import Checker
from guard.intake.read import read
from guard.intake.request import Request
from guard.job.layout import ParallelLayout
from guard.settings import Settings


def test_layout_names_every_factor_when_the_world_does_not_divide():
    problems = ParallelLayout(world=12, tp=2, pp=4).problems()
    assert [p.message for p in problems] == ["tp(2) * pp(4) = 8 does not divide world size 12"]
    assert ParallelLayout(world=16, tp=2, pp=2, ulysses=2).dp == 2  # 16 / (2 * 2 * 2)
    problems = ParallelLayout(world=8, tp=1, pp=1, ep=3).problems(num_experts=8)
    assert any("num_experts(8) is not a multiple of ep(3)" in p.message for p in problems)


def test_layout_coordinates_follow_megatron_order():
    layout = ParallelLayout(world=16, tp=2, pp=2, cp=2)  # dp = 16 / 8 = 2; order tp-cp-dp-pp
    assert layout.coordinates(0) == {"tp_rank": 0, "cp_rank": 0, "dp_rank": 0, "pp_rank": 0}
    assert layout.coordinates(5) == {"tp_rank": 1, "cp_rank": 0, "dp_rank": 1, "pp_rank": 0}
    assert layout.coordinates(8)["pp_rank"] == 1


def test_layout_process_groups_follow_megatron_order():
    """16 ranks, TP 2 x PP 2 x DP 4: TP groups are neighbours, DP strides by 2, PP by 8 (tp-cp-ep-dp-pp)."""
    layout = ParallelLayout(world=16, tp=2, pp=2)
    assert layout.groups("tp")[:2] == [[0, 1], [2, 3]] and len(layout.groups("tp")) == 8
    assert layout.groups("dp")[0] == [0, 2, 4, 6] and layout.groups("dp")[-1] == [9, 11, 13, 15]
    assert layout.groups("pp")[0] == [0, 8] and len(layout.groups("pp")) == 8
    for kind in ("tp", "dp", "pp", "cp"):  # every rank in exactly one group of each kind
        assert sorted(r for g in layout.groups(kind) for r in g) == list(range(16))


ULYSSES = ("deepspeed --num_gpus 8 pretrain_gpt.py --deepspeed --num-layers 4 --hidden-size 64 "
           "--num-attention-heads 4 --seq-length 1024 --max-position-embeddings 1024 --micro-batch-size 1 "
           "--global-batch-size 8 --ds-sequence-parallel-size 4 --fp16 --zero-stage 1 --use-flash-attn-v2 "
           "--vocab-size 1000")


def test_ulysses_sequence_parallel_divides_the_data_parallel_size():
    """8 ranks / SP 4 = DP 2, so 8 samples / (1 x 2) = 4 microbatches, in check and estimate alike."""
    code, out, err = run_guard("estimate", "--isolated", "--megatron-args", ULYSSES, "--format", "json")
    data = json.loads(out)
    assert (data["layout"]["dp"], data["layout"]["ulysses"], data["layout"]["num_microbatches"]) == (2, 4, 4)
    assert any("Ulysses" in u["feature"] for u in data["unmodelled"])
    job = Checker(Settings()).run([], [ULYSSES]).subjects[0].job
    assert job.layout.dp == 2 and job.num_microbatches == 4


def test_megatron_deepspeed_experts_every_other_layer():
    """--num-experts 8 --expert-interval 2: layers 2 and 4 of 4 are MoE; EP 2 keeps 4 experts per rank.
    One expert (ParallelMLP with biases): 64 x 256 + 256 + 256 x 64 + 64 = 33,088; 2 layers x 4 experts."""
    args = ("deepspeed pretrain_gpt.py --deepspeed --num-layers 4 --hidden-size 64 --num-attention-heads 4 "
            "--ffn-hidden-size 256 --seq-length 128 --max-position-embeddings 128 --micro-batch-size 1 "
            "--global-batch-size 8 --num-experts 8 --expert-interval 2 --mlp-type residual "
            "--moe-expert-parallel-size 2 --fp16 --zero-stage 1")
    code, out, err = run_guard("estimate", "--isolated", "--world-size", "8", "--vocab-size", "1000",
                               "--megatron-args", args, "--format", "json")
    data = json.loads(out)
    assert data["ranks"][0]["params_by_bucket"]["expert"] == 2 * 4 * 33_088
    assert data["layout"]["ep"] == 2
    # fp16 from the flag (no DeepSpeed config says otherwise): 2 bytes per weight, not fp32's 4
    rank = data["ranks"][0]
    assert rank["components"]["params"] == 2 * sum(rank["params_by_bucket"].values())


FROZEN = ("torchrun --nproc-per-node 8 examples/multimodal/train.py --num-layers 2 --hidden-size 64 "
          "--num-attention-heads 4 --seq-length 128 --max-position-embeddings 128 --micro-batch-size 1 "
          "--global-batch-size 8 --tokenizer-type NullTokenizer --vocab-size 1000 --bf16 --freeze-LM --freeze-ViT")


def test_frozen_language_model_has_no_gradients_or_optimizer_state():
    code, out, err = run_guard("estimate", "--isolated", "--megatron-args", FROZEN, "--format", "json")
    data = json.loads(out)
    comps = data["ranks"][0]["components"]
    assert comps["grads"] == 0 and comps["optimizer"] == 0 and comps["params"] > 0
    assert any("vision encoder" in u["feature"] for u in data["unmodelled"])
    code, out, err = run_guard("estimate", "--isolated", "--megatron-args", FROZEN.replace(" --freeze-LM", ""),
                               "--format", "json")
    assert json.loads(out)["ranks"][0]["components"]["grads"] > 0


def test_a_bert_program_is_named_unmodelled():
    args = FROZEN.replace("examples/multimodal/train.py", "pretrain_bert.py").replace(
        " --freeze-LM --freeze-ViT", "").replace("NullTokenizer", "BertWordPieceLowerCase")
    code, out, err = run_guard("estimate", "--isolated", "--megatron-args", args, "--vocab-size", "30524",
                               "--format", "json")
    assert any("BERT" in u["feature"] and u["setting"] == "pretrain_bert.py"
               for u in json.loads(out)["unmodelled"])


def _jobs():
    out = [pytest.param(str(p), id=p.name) for p in sorted((ROOT / "examples").rglob("*.sh"))]
    if CORPUS.is_dir():
        out += [pytest.param(str(p), id=p.stem) for folder in ("megatron", "megatron-bad")
                for p in sorted((CORPUS / folder).glob("*.yaml"))]
    return out


@pytest.mark.parametrize("path", _jobs())
def test_check_and_estimate_read_the_same_layout(path, tmp_path):
    """Done-when of issue 11: one reader, so check and estimate agree on every example and corpus job."""
    if path.endswith(".yaml"):
        from test_megatron_corpus import script_text

        data = yaml.safe_load(open(path))
        if "args" not in data:
            pytest.skip("not a command line")
        script = tmp_path / "job.sh"
        script.write_text(script_text(data))
        path = str(script)
    checked = [s.job for s in Checker(Settings()).run([path]).subjects if s.kind == "megatron"]
    if not checked:
        pytest.skip("no Megatron command")
    estimated = read(Request(paths=(path,)), Settings()).job
    first = checked[0]
    assert first.layout == estimated.layout
    assert (first.micro_batch, first.global_batch, first.num_microbatches) == \
        (estimated.micro_batch, estimated.global_batch, estimated.num_microbatches)
    assert first.missing == estimated.missing
