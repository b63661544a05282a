"""DeepSpeed configs a launch script renders from a template (sed, envsubst, cat), located in the template."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest
from conftest import FIXTURES, run_guard

from guard.diagnostic import Span
from guard.megatron.ds_config import attach_deepspeed_config
from guard.megatron.from_script import analyse
from guard.megatron.sed import RenderError, located, sed_output
from guard.settings import Settings
from guard.shell.interpreter import interpret
from guard.shell.located import LText

TEMPLATES = FIXTURES / "templates"
GPT_TEMPLATE = str(TEMPLATES / "ds_gpt_TEMPLATE.json")
LAUNCH = ("deepspeed --num_gpus 2 pretrain_gpt.py --num-layers 2 --hidden-size 64 --num-attention-heads 4 "
          "--seq-length 128 --max-position-embeddings 128 --micro-batch-size 1 --deepspeed "
          "--deepspeed_config ds.json\n")


def job_of(path) -> object:
    path = str(path)
    return analyse(path, open(path).read(), Settings()).commands[0]


def attach(path) -> tuple[object, str]:
    """The job of a script and the reason attach_deepspeed_config gives when it attaches nothing."""
    path = str(path)
    result = analyse(path, open(path).read(), Settings())
    job = result.commands[0]
    job.deepspeed_config = None
    return job, attach_deepspeed_config(job, result.script)


def write_script(tmp_path, body: str, name: str = "train.sh"):
    script = tmp_path / name
    script.write_text(body + LAUNCH)
    return script


# -- the three render forms -------------------------------------------------------------------------------
def test_sed_pipeline_fills_fp16_and_batch_sizes():
    ds = job_of(TEMPLATES / "pretrain_fp16_sed.sh").deepspeed_config
    assert ds is not None
    data = ds.data
    assert data["fp16"]["enabled"] is True and data["bf16"]["enabled"] is False
    assert data["train_batch_size"] == 64 and data["train_micro_batch_size_per_gpu"] == 4
    assert data["steps_per_print"] == 10 and data["zero_optimization"] == {"stage": 1}
    assert data["prescale_gradients"] is False
    # NAME=gpt-L${NUM_LAYERS}-H${HIDDEN_SIZE}-gbs${GLOBAL_BATCH_SIZE} with 4, 512, 64
    assert data["tensorboard"] == {"enabled": True, "output_path": "output/tensorboard/gpt-L4-H512-gbs64",
                                   "job_name": "gpt-L4-H512-gbs64"}
    assert ds.label == f"{GPT_TEMPLATE} as rendered by the script at line 18" and ds.notes == []


def test_locations_point_into_the_template():
    ds = job_of(TEMPLATES / "pretrain_fp16_sed.sh").deepspeed_config
    assert ds.locate("fp16", "enabled") == (GPT_TEMPLATE, Span(11, 5))
    assert ds.locate("train_batch_size") == (GPT_TEMPLATE, Span(2, 3))
    assert ds.locate("zero_optimization", "stage") == (GPT_TEMPLATE, Span(6, 5))
    assert ds.locate("tensorboard", "job_name") == (GPT_TEMPLATE, Span(21, 5))
    assert ds.locate("no_such_key") == (GPT_TEMPLATE, Span(1, 1))  # the nearest written ancestor: the root


def test_envsubst_takes_exported_variables():
    ds = job_of(TEMPLATES / "pretrain_envsubst.sh").deepspeed_config
    assert ds.data == {"train_batch_size": 32, "train_micro_batch_size_per_gpu": 2,
                       "zero_optimization": {"stage": 2}, "bf16": {"enabled": True}}
    template = str(TEMPLATES / "ds_envsubst_TEMPLATE.json")
    assert ds.locate("train_micro_batch_size_per_gpu") == (template, Span(3, 3))
    assert ds.label == f"{template} as rendered by the script at line 8"


def test_cat_into_one_sed_with_several_expressions():
    ds = job_of(TEMPLATES / "pretrain_cat_pipeline.sh").deepspeed_config
    data = ds.data
    assert (data["train_batch_size"], data["train_micro_batch_size_per_gpu"], data["steps_per_print"]) == (48, 3, 5)
    assert data["zero_optimization"]["stage"] == 0 and data["prescale_gradients"] is True
    assert data["fp16"]["enabled"] is False and data["bf16"]["enabled"] is True
    assert data["tensorboard"]["output_path"] == "tb" and data["tensorboard"]["job_name"] == "JOB_NAME"
    assert ds.locate("bf16", "enabled") == (GPT_TEMPLATE, Span(16, 5))


def test_fixture_scripts_check_clean():
    for script in sorted(TEMPLATES.glob("*.sh")):
        code, out, err = run_guard("check", "--isolated", str(script))
        assert code == 0, out + err


def test_estimate_prices_fp16_weights_from_the_rendered_config():
    code, out, err = run_guard("estimate", str(TEMPLATES / "pretrain_fp16_sed.sh"), "--vocab-size", "32000",
                               "--format", "json")
    assert code == 0, err
    data = json.loads(out)
    params = data["model"]["param_count"]
    assert all(rank["components"]["params"] == 2 * params for rank in data["ranks"])  # ZeRO-1 keeps all weights
    assert data["origins"]["params_dtype"] == f"fp16.enabled at {GPT_TEMPLATE}:11:5"
    assert data["origins"]["zero_stage"] == f"zero_optimization.stage at {GPT_TEMPLATE}:6:5"


# -- what cannot be rendered: nothing attached, and why ----------------------------------------------------
def test_missing_template_attaches_nothing_and_says_why(tmp_path):
    script = write_script(tmp_path, 'sed "s/GBS/8/" ds_gone_TEMPLATE.json > ds.json\n')
    job, why = attach(script)
    assert job.deepspeed_config is None
    assert why.startswith(f"{script}:1: ") and "ds_gone_TEMPLATE.json not found" in why


def test_unresolved_variable_attaches_nothing_and_names_it(tmp_path):
    (tmp_path / "ds_TEMPLATE.json").write_text('{"train_batch_size": GBS_HERE, "fp16": {"enabled": true}}\n')
    script = write_script(tmp_path, 'sed "s/GBS_HERE/$GBS/" ds_TEMPLATE.json > ds.json\n')
    job, why = attach(script)
    assert job.deepspeed_config is None
    assert "incomplete: $GBS unknown" in why and f"{tmp_path / 'ds_TEMPLATE.json'}:1:22" in why


def test_unknown_value_inside_a_string_still_fails_unless_it_is_a_log_path(tmp_path):
    (tmp_path / "ds_TEMPLATE.json").write_text('{"train_batch_size": 8,\n "tensorboard": {"output_path": "TB"},\n'
                                               ' "zero_optimization": {"offload_optimizer": {"device": "DEV"}}}\n')
    script = write_script(tmp_path, 'sed "s|TB|runs/$(date +%s)|" ds_TEMPLATE.json | sed "s/DEV/cpu/" > ds.json\n')
    job, why = attach(script)
    assert why == "" and job.deepspeed_config.data["tensorboard"]["output_path"] == "runs/$(date +%s)"
    assert job.deepspeed_config.notes == ["tensorboard.output_path is left as written ($(date +%s) is unknown)"]
    script = write_script(tmp_path, 'sed "s|TB|runs|" ds_TEMPLATE.json | sed "s/DEV/$DEVICE/" > ds.json\n')
    job, why = attach(script)
    assert job.deepspeed_config is None
    assert "zero_optimization.offload_optimizer.device depends on $DEVICE" in why


def test_envsubst_of_a_variable_the_script_does_not_export(tmp_path):
    (tmp_path / "ds_TEMPLATE.json").write_text('{"train_batch_size": $GBS}\n')
    script = write_script(tmp_path, "GBS=8\nenvsubst < ds_TEMPLATE.json > ds.json\n")
    job, why = attach(script)
    assert job.deepspeed_config is None and "$GBS unknown" in why
    script = write_script(tmp_path, "export GBS=8\nenvsubst < ds_TEMPLATE.json > ds.json\n")
    assert attach(script)[0].deepspeed_config.data == {"train_batch_size": 8}


def test_unsupported_sed_command_is_a_reason(tmp_path):
    (tmp_path / "ds_TEMPLATE.json").write_text('{"train_batch_size": 8}\n')
    script = write_script(tmp_path, 'sed "/^#/d" ds_TEMPLATE.json > ds.json\n')
    job, why = attach(script)
    assert job.deepspeed_config is None and "is not supported" in why


# -- heredoc templates, sed -i, branches -------------------------------------------------------------------
def test_heredoc_template_rewritten_by_sed(tmp_path):
    body = ("GBS=16\ncat > ds_TEMPLATE.json << 'EOT'\n"
            '{"train_batch_size": GBS_HERE, "fp16": {"enabled": true}}\n'
            "EOT\n"
            'sed "s/GBS_HERE/$GBS/" ds_TEMPLATE.json > ds.json\n')
    job, why = attach(write_script(tmp_path, body))
    ds = job.deepspeed_config
    assert why == "" and ds.data == {"train_batch_size": 16, "fp16": {"enabled": True}}
    # "fp16" is written at column 32 of line 3 in the script, though the rendering shortened the line before it
    assert ds.locate("fp16") == (str(tmp_path / "train.sh"), Span(3, 32))
    assert ds.label == "a heredoc of the script as rendered by the script at line 5"


def test_heredoc_edited_in_place_by_sed_i(tmp_path):
    body = ("cat > ds.json << EOT\n"
            '{"train_batch_size": GBS_HERE, "bf16": {"enabled": BF}}\n'
            "EOT\n"
            'sed -i "s/GBS_HERE/32/" ds.json\n'
            "sed -i.bak -e 's/BF/true/' ds.json\n")
    job, why = attach(write_script(tmp_path, body))
    assert why == "" and job.deepspeed_config.data == {"train_batch_size": 32, "bf16": {"enabled": True}}


def test_the_branch_the_script_takes_renders_the_config(tmp_path):
    (tmp_path / "ds_TEMPLATE.json").write_text('{"zero_optimization": {"stage": ZERO_STAGE},\n'
                                               ' "prescale_gradients": PRESCALE_GRAD}\n')
    body = ('zero_stage=0\nif [[ $zero_stage -gt 0 ]]; then\n'
            'sed "s/ZERO_STAGE/${zero_stage}/" ds_TEMPLATE.json | sed "s/PRESCALE_GRAD/false/" > ds.json\n'
            'else\n'
            'sed "s/ZERO_STAGE/${zero_stage}/" ds_TEMPLATE.json | sed "s/PRESCALE_GRAD/true/" > ds.json\nfi\n')
    job, why = attach(write_script(tmp_path, body))
    assert job.deepspeed_config.data == {"zero_optimization": {"stage": 0}, "prescale_gradients": True}
    assert job.deepspeed_config.label.endswith("at line 5")
    undecided = body.replace("[[ $zero_stage -gt 0 ]]", '[[ "$1" = --zero ]]')
    job, why = attach(write_script(tmp_path, undecided))
    assert any("could not decide" in note for note in job.deepspeed_config.notes)


def test_renders_are_recorded_with_their_redirections():
    script = interpret("x.sh", 'export V=1\nsed -e s/a/b/ < in.json | cat > out.json\nW=2 envsubst < t > o\n')
    first, second = script.renders
    assert [[w.text for w in words] for words, _ in first.stages] == [["sed", "-e", "s/a/b/"], ["cat"]]
    assert first.stages[0][1].text == "in.json" and first.target.text == "out.json"
    assert {k: v.text for k, v in second.environment.items()} == {"V": "1", "W": "2"}
    assert interpret("y.sh", "torchrun train.py > log.txt\n").renders == []


# -- sed itself: GNU sed is the oracle where it is installed ----------------------------------------------
SED_CASES = [
    ("s/A/x/", "A A\nA\n"),  # first occurrence per line
    ("s/A/x/g", "A A\nA\n"),
    ("s/A/x/2", "A A A\n"),
    ("s/A/x/2g", "A A A\n"),
    ("s|a/b|c|", "a/b a/b\n"),
    ("s/a\\/b/c/", "a/b\n"),  # escaped delimiter
    ("s/\\(k\\)=\\(v\\)/\\2=\\1 [&]/", "k=v\n"),
    ("s/a.c/X/", "abc a.c\n"),
    ("s/a\\.c/X/", "abc a.c\n"),
    ("s/x*/-/", "abc\n"),
    ("s/[[:digit:]][0-9]*/N/g", "a1 b22 c\n"),
    ("s/a+b/X/", "a+b aab\n"),  # + is literal in a basic regular expression
    ("s/^ *//;s/ *$//", "  pad  \n"),
    ("s/q/\\n/", "aqb\n"),
    ("s/CONFIG/a&b/", "CONFIG\n"),
    ("s/x/y/", "no newline at the end"),
]


@pytest.mark.skipif(shutil.which("sed") is None, reason="no sed binary")
@pytest.mark.parametrize("script, text", SED_CASES)
def test_sed_substitutions_match_gnu_sed(script, text):
    expected = subprocess.run(["sed", script], input=text, capture_output=True, text=True, check=True).stdout
    assert sed_output(words("sed", script), located(text, "t")).text == expected


@pytest.mark.skipif(shutil.which("sed") is None, reason="no sed binary")
def test_extended_regular_expressions_match_gnu_sed():
    for script, text in [("s/a+b/X/", "a+b aab\n"), ("s/(a+)c/<\\1>/g", "ac aac bc\n"), ("s/x{2}/-/", "xxx\n")]:
        expected = subprocess.run(["sed", "-E", script], input=text, capture_output=True, text=True).stdout
        assert sed_output(words("sed", "-E", script), located(text, "t")).text == expected


@pytest.mark.skipif(shutil.which("envsubst") is None, reason="no envsubst binary")
def test_envsubst_matches_gnu_envsubst(tmp_path):
    (tmp_path / "t.json").write_text('{"a": ${A}, "b": $B, "c": "$$C", "d": "${D:-x}"}\n')
    script = tmp_path / "s.sh"
    script.write_text("export A=1 B=2\nenvsubst < t.json > out.json\n")
    subprocess.run(["bash", str(script)], cwd=tmp_path, check=True, env={"PATH": "/usr/bin:/bin"})
    from guard.megatron.ds_template import run_stage

    parsed = interpret(str(script), script.read_text())
    render = parsed.renders[0]
    rendered = run_stage(render.stages[0][0], located((tmp_path / "t.json").read_text(), "t"), render.environment)
    expected = (tmp_path / "out.json").read_text()
    # guard leaves $C and ${D:-x} as written (unknown); envsubst empties $C, and keeps ${D:-x}
    assert rendered.text.replace("$C", "") == expected


def test_located_characters_follow_substitutions():
    out = sed_output(words("sed", "s/LONG_PLACEHOLDER/7/"), located("x LONG_PLACEHOLDER y\n", "t"))
    assert out.text == "x 7 y\n"
    assert out.pos[2] == (1, 3) and out.pos[4] == (1, 20)  # "7" where the placeholder was; "y" where it was


def test_sed_errors_are_one_line_reasons():
    for argv in (["sed", "-n", "s/a/b/p"], ["sed", "s/a/b"], ["sed", "s/a/\\1/"], ["sed", "y/ab/cd/"],
                 ["sed", "-f", "script.sed"], ["sed", "s/a\\|b/c/"]):
        with pytest.raises(RenderError) as err:
            sed_output(words(*argv), located("a\n", "t"))
        assert "\n" not in str(err.value)


def words(*texts: str) -> list[LText]:
    return [LText.plain(text) for text in texts]


def test_check_lints_a_rendered_config_in_its_template(tmp_path):
    """A typo in the template is found by guard check and located where the user writes it: in the template."""
    import json as _json
    import shutil

    from conftest import run_guard

    from pathlib import Path

    here = Path(__file__).parent / "fixtures" / "templates"
    shutil.copy(here / "pretrain_fp16_sed.sh", tmp_path / "pretrain_fp16_sed.sh")
    template = (here / "ds_gpt_TEMPLATE.json").read_text().replace('"zero_optimization"', '"zero_optimisation"')
    (tmp_path / "ds_gpt_TEMPLATE.json").write_text(template)
    code, out, err = run_guard("check", "--isolated", "--format", "json", str(tmp_path / "pretrain_fp16_sed.sh"))
    typo = [d for d in _json.loads(out) if d["code"] == "DS112"]
    line = next(i for i, text in enumerate(template.splitlines(), 1) if "zero_optimisation" in text)
    assert typo and typo[0]["path"].endswith("ds_gpt_TEMPLATE.json") and typo[0]["line"] == line, out
