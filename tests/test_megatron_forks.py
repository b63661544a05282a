"""A fork's script is judged by the fork's own flags: the checkout a script runs is found (its program beside or
above the script, PYTHONPATH, --megatron-source, [tool.guard] megatron-source), its flag table extracted and
cached by content; without it, upstream's judgements of an unknown program are info, once per command."""

from __future__ import annotations

import json
import os
import textwrap
from pathlib import Path

import pytest

from conftest import run_guard

# A Megatron of 2023 as the forks keep it: megatron/arguments.py builds the parser in a helper and returns
# it; the fork adds a flag and a tokenizer; its program adds one more flag and sets a default by position.
ARGUMENTS = '''
import argparse


def parse_args(extra_args_provider=None, ignore_unknown_args=False):
    parser = build_base_parser()
    if extra_args_provider is not None:
        parser = extra_args_provider(parser)
    return parser.parse_args()


def build_base_parser():
    parser = argparse.ArgumentParser(description="Megatron-LM Arguments", allow_abbrev=False)
    parser = _add_network_size_args(parser)
    parser = _add_training_args(parser)
    return parser


def _add_network_size_args(parser):
    group = parser.add_argument_group(title="network size")
    group.add_argument("--num-layers", type=int, default=None)
    group.add_argument("--hidden-size", type=int, default=None)
    group.add_argument("--num-attention-heads", type=int, default=None)
    group.add_argument("--seq-length", type=int, default=None)
    group.add_argument("--max-position-embeddings", type=int, default=None)
    group.add_argument("--fork-gate", action="store_true")
    return parser


def _add_training_args(parser):
    group = parser.add_argument_group(title="training")
    group.add_argument("--micro-batch-size", type=int, default=None)
    group.add_argument("--global-batch-size", type=int, default=None)
    group.add_argument("--tokenizer-type", type=str, default=None,
                       choices=["GPT2BPETokenizer", "ForkTokenizer"])
    group.add_argument("--bf16", action="store_true")
    return parser
'''
PROGRAM = '''
from megatron.initialize import initialize_megatron


def extra_args(parser):
    group = parser.add_argument_group(title="fork program")
    group.add_argument("--fork-extra", type=int, default=1)
    return parser


if __name__ == "__main__":
    args_defaults = {"tokenizer_type": "ForkTokenizer"}
    initialize_megatron(extra_args, args_defaults)
'''
COMMAND = ("torchrun --nproc_per_node 8 {program} --num-layers 4 --hidden-size 256 --num-attention-heads 8 "
           "--seq-length 512 --max-position-embeddings 512 --micro-batch-size 1 --global-batch-size 8 "
           "--fork-gate --fork-extra 3 --tokenizer-type ForkTokenizer --bf16\n")


@pytest.fixture
def fork(tmp_path, monkeypatch) -> Path:
    root = tmp_path / "fork"
    (root / "megatron").mkdir(parents=True)
    (root / "megatron" / "__init__.py").write_text("")
    (root / "megatron" / "arguments.py").write_text(textwrap.dedent(ARGUMENTS))
    (root / "megatron" / "initialize.py").write_text("def initialize_megatron(extra_args_provider=None, "
                                                     "args_defaults={}):\n    pass\n")
    (root / "pretrain_fork.py").write_text(textwrap.dedent(PROGRAM))
    (root / "examples").mkdir()
    (root / "examples" / "train.sh").write_text(COMMAND.format(program="pretrain_fork.py"))
    monkeypatch.setenv("GUARD_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)  # not the fork: the script is found from its own place
    return root


def _codes(out: str) -> list[tuple[str, str]]:
    return [(d["code"], d["severity"]) for d in json.loads(out)]


def test_the_checkout_a_script_runs_is_found_and_judges_it(fork):
    code, out, err = run_guard("check", "--isolated", "--format", "json", str(fork / "examples" / "train.sh"))
    assert code == 0 and _codes(out) == [], out + err


def test_a_typo_of_the_forks_own_flag_is_still_an_error(fork):
    script = fork / "examples" / "train.sh"
    script.write_text(script.read_text().replace("--fork-gate", "--fork-gat"))
    code, out, _ = run_guard("check", "--isolated", "--format", "json", str(script))
    found = json.loads(out)
    assert code == 1 and [(d["code"], d["severity"]) for d in found] == [("MLM001", "error")]
    assert "--fork-gat" in found[0]["message"] and "source:fork@" in found[0]["message"]


def test_without_the_checkout_upstreams_judgements_are_info_once_per_command(fork, tmp_path):
    alone = tmp_path / "elsewhere" / "train.sh"
    alone.parent.mkdir()
    alone.write_text(COMMAND.format(program="pretrain_fork.py"))
    code, out, _ = run_guard("check", "--isolated", "--format", "json", str(alone))
    found = json.loads(out)
    assert code == 0 and {d["severity"] for d in found} == {"info"}
    (unknown,) = [d for d in found if d["code"] == "MLM011"]
    assert "--fork-gate" in unknown["message"] and "--fork-extra" in unknown["message"]
    # upstream refuses the fork's tokenizer; the fork accepts it: shown, as info
    assert any(d["code"] == "MLM003" and "ForkTokenizer" in d["message"] for d in found)
    # the same command given the fork's checkout: nothing to say
    code, out, _ = run_guard("check", "--isolated", "--megatron-source", str(fork), "--format", "json", str(alone))
    assert code == 0 and json.loads(out) == []


def test_the_source_from_pyproject_is_relative_to_it(fork, tmp_path):
    project = tmp_path / "project"
    project.mkdir()
    (project / "pyproject.toml").write_text('[tool.guard]\nmegatron-source = "../fork"\n')
    (project / "train.sh").write_text(COMMAND.format(program="pretrain_fork.py"))
    code, out, _ = run_guard("check", "--config", str(project / "pyproject.toml"), "--format", "json",
                             str(project / "train.sh"))
    assert code == 0 and json.loads(out) == []


def test_a_source_that_is_not_a_checkout_is_refused_in_one_line(tmp_path):
    code, out, err = run_guard("check", "--isolated", "--megatron-source", str(tmp_path), str(tmp_path))
    assert code == 2 and "not a Megatron checkout" in err and len(err.strip().splitlines()) == 1


def test_a_checkout_on_pythonpath_is_found(fork, tmp_path):
    runner = tmp_path / "runner"
    runner.mkdir()
    (runner / "pretrain_fork.py").write_text((fork / "pretrain_fork.py").read_text())
    (runner / "train.sh").write_text(f"export PYTHONPATH={fork}:$PYTHONPATH\n" +
                                     COMMAND.format(program="pretrain_fork.py"))
    code, out, _ = run_guard("check", "--isolated", "--format", "json", str(runner / "train.sh"))
    assert code == 0 and json.loads(out) == [], out


def test_the_table_is_cached_by_the_checkouts_content(fork, monkeypatch):
    from guard.megatron import schema_gen
    from guard.megatron.source_tables import table_for_checkout

    program = str(fork / "pretrain_fork.py")
    first = table_for_checkout(fork, program)
    assert first.get("--fork-gate") is not None and first.get("--fork-extra") is not None
    assert first.program_defaults(program) == {"tokenizer_type": "ForkTokenizer"}

    def no_rebuild(*args, **kwargs):
        raise AssertionError("rebuilt although the checkout did not change")

    with monkeypatch.context() as patched:
        patched.setattr(schema_gen, "build_table", no_rebuild)
        assert table_for_checkout(fork, program).ref == first.ref
    arguments = fork / "megatron" / "arguments.py"
    arguments.write_text(arguments.read_text().replace('"--fork-gate"', '"--fork-gate-v2"'))
    changed = table_for_checkout(fork, program)
    assert changed.ref != first.ref and changed.get("--fork-gate-v2") is not None


# A Yuan-2.0 command written from the flags its megatron/arguments.py defines (_add_yuan_args and others);
# judged with the table guard extracted from IEIT-Yuan/Yuan-2.0 at the commit the table records.
YUAN = ("torchrun --nproc_per_node 8 pretrain_yuan.py --num-layers 24 --hidden-size 2048 --num-attention-heads 32 "
        "--seq-length 4096 --max-position-embeddings 4096 --micro-batch-size 1 --global-batch-size 384 "
        "--use-lf-gate --lf-conv2d-group 1 --lf-conv2d-num-pad 1 --tokenizer-type YuanTokenizer --bf16\n")


def test_a_vendored_fork_table_judges_its_own_program(tmp_path):
    script = tmp_path / "yuan.sh"
    script.write_text(YUAN)
    code, out, _ = run_guard("check", "--isolated", "--format", "json", str(script))
    upstream = json.loads(out)
    assert code == 0 and {d["severity"] for d in upstream} == {"info"}
    assert any(d["code"] == "MLM011" and "--use-lf-gate" in d["message"] for d in upstream)
    code, out, _ = run_guard("check", "--isolated", "--megatron-version", "yuan", "--format", "json", str(script))
    assert code == 0 and json.loads(out) == []


@pytest.mark.parametrize("ref", ["yuan-2.0-2f59b3f", "megatron-llama-25306de", "epfllm-megatron-llm-806a833",
                                 "bigcode-megatron-lm-7c325cd", "bigscience-megatron-deepspeed-8387ae1"])
def test_each_vendored_fork_table_records_its_source(ref):
    from guard.megatron import flag_table

    table = flag_table.load(ref)
    assert table.source["commit"].startswith(ref.rsplit("-", 1)[1]) and "/" in table.source["repo"]
    assert table.flavour == ("megatron-deepspeed" if "deepspeed" in ref else "megatron-lm") and len(table.flags) > 150



# bigcode-project/Megatron-LM runs `pretrain_gpt.py` (an upstream name) with flags of its own
# (arguments.py: --attention-head-type, --tokenizer-file) and `--recompute-num-layers` defaulting to 1
# (arguments.py:797), which its legacy transformer.py uses without megatron-core's selective check.
BIGCODE = ("torchrun --nproc_per_node 8 pretrain_gpt.py --num-layers 24 --hidden-size 2048 --num-attention-heads 16 "
           "--attention-head-type multiquery --seq-length 2048 --max-position-embeddings 2048 "
           "--micro-batch-size 2 --global-batch-size 192 --recompute-activations --bf16\n")


def test_a_fork_under_an_upstream_program_name_is_named_and_then_judged_by_its_table(tmp_path):
    script = tmp_path / "santacoder.sh"
    script.write_text(BIGCODE)
    # --attention-head-type is defined by bigcode's table alone: the command is judged with it, and one info says so
    code, out, _ = run_guard("check", "--isolated", "--format", "json", str(script))
    found = json.loads(out)
    assert code == 0 and [(d["code"], d["severity"]) for d in found] == [("MLM011", "info")]
    assert "bigcode-megatron-lm-7c325cd" in found[0]["message"] and "--attention-head-type" in found[0]["message"]
    code, out, _ = run_guard("check", "--isolated", "--megatron-version", "bigcode-megatron-lm-7c325cd",
                             "--format", "json", str(script))
    assert code == 0 and json.loads(out) == []
    # asked for upstream, the fork's flag is what it is there: unrecognized
    code, out, _ = run_guard("check", "--isolated", "--megatron-version", "main", "--format", "json", str(script))
    assert code == 1 and [d["code"] for d in json.loads(out) if d["severity"] == "error"] == ["MLM001"]


def test_a_flag_upstream_dropped_and_old_forks_kept_does_not_pick_a_fork(tmp_path):
    """`--data-impl` is in several vendored tables (bigcode, bigscience, Megatron-DeepSpeed, ...): an upstream
    user who still writes it gets upstream's 'unrecognized argument', not a fork's silence."""
    script = tmp_path / "old.sh"
    script.write_text(BIGCODE.replace("--attention-head-type multiquery", "--data-impl mmap"))
    code, out, _ = run_guard("check", "--isolated", "--format", "json", str(script))
    found = json.loads(out)
    assert code == 1 and [d["code"] for d in found if d["severity"] == "error"] == ["MLM001"]
    assert "MLM011" not in [d["code"] for d in found]


def test_selective_recompute_with_layers_written_is_refused_upstream(tmp_path):
    script = tmp_path / "selective.sh"  # megatron-core TransformerConfig: "recompute_num_layers must be None"
    script.write_text(BIGCODE.replace("--attention-head-type multiquery ", "").replace(
        "--recompute-activations", "--recompute-activations --recompute-num-layers 1"))
    code, out, _ = run_guard("check", "--isolated", "--format", "json", str(script))
    assert code == 1 and [d["code"] for d in json.loads(out) if d["severity"] == "error"] == ["MLM124"]


def test_a_bare_program_name_is_a_top_level_script_not_an_example_of_the_same_name(tmp_path):
    """upstream has examples/post_training/modelopt/finetune.py; epfLLM's finetune.py sits at its root and a
    script runs it as `torchrun finetune.py`: not upstream's entry point, so upstream's judgements are info."""
    script = tmp_path / "finetune.sh"
    script.write_text("torchrun --nproc-per-node 8 finetune.py --tensor_model_parallel_size 2 --model_name llama2\n")
    code, out, _ = run_guard("check", "--isolated", "--format", "json", str(script))
    assert code == 0 and "MLM011" in [d["code"] for d in json.loads(out)]
    script.write_text("torchrun --nproc-per-node 8 $MEGATRON/examples/post_training/modelopt/finetune.py "
                      "--num-layers 2 --tensor-model-paralel-size 2\n")  # upstream's example: its typo is an error
    code, out, _ = run_guard("check", "--isolated", "--format", "json", str(script))
    assert code == 1 and "MLM011" not in [d["code"] for d in json.loads(out)]

FORKS = Path(os.environ.get("GUARD_FORKS", "/tmp/forks"))


@pytest.mark.skipif(not FORKS.is_dir(), reason="no fork checkouts (GUARD_FORKS)")
@pytest.mark.parametrize(("folder", "ref"), [("IEIT-Yuan+Yuan-2.0", "yuan-2.0-2f59b3f"),
                                             ("alibaba+Megatron-LLaMA", "megatron-llama-25306de"),
                                             ("epfLLM+Megatron-LLM", "epfllm-megatron-llm-806a833"),
                                             ("bigcode-project+Megatron-LM", "bigcode-megatron-lm-7c325cd"),
                                             ("bigscience-workshop+Megatron-DeepSpeed",
                                              "bigscience-megatron-deepspeed-8387ae1")])
def test_the_vendored_fork_tables_are_what_the_extractor_reads_from_the_checkouts(folder, ref):
    from guard.megatron import flag_table
    from guard.megatron.schema_gen import build_table

    root = FORKS / folder
    if not root.is_dir():
        pytest.skip(f"{root} is absent")
    vendored = flag_table.load(ref).data
    built = build_table(root, ref=ref, commit=vendored["source"]["commit"], repo=vendored["source"]["repo"])
    assert built == json.loads(json.dumps(vendored))


def test_bigcodes_multiquery_attention_is_priced_with_one_kv_head(tmp_path):
    """--attention-head-type multiquery: bigcode's transformer.py projects K and V to one head (kv_channels wide).
    Against the same job with multihead attention, each layer has 2 x (hidden - kv_channels) x hidden fewer weights
    and 2 x (hidden - kv_channels) fewer biases (hand count: hidden 2048, 16 heads of 128)."""
    counts = {}
    for kind in ("multiquery", "multihead"):
        script = tmp_path / f"{kind}.sh"
        script.write_text(BIGCODE.replace("multiquery", kind).replace("--bf16", "--bf16 --vocab-size 49152"))
        code, out, err = run_guard("estimate", "--isolated", "--format", "json", str(script))
        assert code == 0, err
        counts[kind] = json.loads(out)["model"]["param_count"]
    hidden, kv, layers = 2048, 128, 24
    assert counts["multihead"] - counts["multiquery"] == layers * (2 * (hidden - kv) * hidden + 2 * (hidden - kv))


# BigScience's Megatron-DeepSpeed (the fork BLOOM was trained with): biases on every linear layer (it has no
# --add-bias-linear), learned absolute positions by default (PositionEmbeddingType.absolute), and the vocabulary
# padded to --pad-vocab-size-to whatever the tokenizer holds (megatron/tokenizer/tokenizer.py).
BIGSCIENCE = ("deepspeed --num_gpus 8 pretrain_gpt.py --num-layers 4 --hidden-size 1024 --num-attention-heads 16 "
              "--seq-length 2048 --max-position-embeddings 2048 --micro-batch-size 1 --global-batch-size 64 "
              "--tokenizer-type PretrainedFromHF --tokenizer-name-or-path bigscience/tokenizer "
              "--pad-vocab-size-to 250880 --fp16 --tensor-model-parallel-size 2\n")


def _bigscience_estimate(tmp_path, text: str) -> tuple[int, dict | str]:
    script = tmp_path / "tr.slurm"
    script.write_text(text)
    code, out, err = run_guard("estimate", "--megatron-version", "bigscience-megatron-deepspeed-8387ae1",
                               "--gpu", "A100-80GB", "--format", "json", str(script))
    return code, json.loads(out) if code in (0, 1) else err


def test_bigscience_model_has_biases_positions_and_the_fixed_vocabulary(tmp_path):
    code, found = _bigscience_estimate(tmp_path, BIGSCIENCE)
    h, layers, vocab, seq = 1024, 4, 250880, 2048
    # per layer: QKV 3h^2 + 3h, projection h^2 + h, fc1 4h^2 + 4h, fc2 4h^2 + h, two LayerNorms 4h;
    # word embeddings (tied) V x h, positions seq x h, final LayerNorm 2h
    by_hand = layers * (12 * h * h + 13 * h) + vocab * h + seq * h + 2 * h
    assert code == 0 and found["model"]["param_count"] == by_hand == 309_385_216
    assert found["model"]["vocab_padded"] == vocab  # not 251,136: no rounding to 128 x TP on top
    assert any("--pad-vocab-size-to 250880" in n and "bigscience/tokenizer" in n for n in found["notes"])


def test_bigscience_pad_vocab_size_to_the_fork_refuses(tmp_path):
    code, err = _bigscience_estimate(tmp_path, BIGSCIENCE.replace("250880", "250000"))
    assert code == 2 and "--pad-vocab-size-to 250000 is not a multiple of --make-vocab-size-divisible-by 128" in err
