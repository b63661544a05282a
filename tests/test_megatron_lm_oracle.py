"""Megatron-LM's own parse_args + validate_args as the oracle, when a checkout is available.

The checkout is ../shared/megatron-lm/core_v0.16.1 (CI has it), or MEGATRON_LM_PATH (its megatron/core matches
the megatron-core wheel); without either the test skips. guard judges the same command lines with that version's
table (`--megatron-version core_v0.16.1`).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import MEGATRON_LM, ROOT, run_guard
from megatron_accepted import MEGATRON_ACCEPTED_BUT_ERRS
from test_megatron_core_oracle import argument_sets

from guard.megatron.from_script import analyse
from guard.intake.megatron import megatron_subject
from guard.settings import Settings

CHECKOUT = MEGATRON_LM
SCRIPTS: dict[str, Path] = {}  # argument-set name -> the script written for it (lm_verdicts fills it)
# extra_args_provider of Megatron's own entry scripts (pretrain_gpt.py: `add_modelopt_args` when
# nvidia-modelopt is installed), so that their flags parse as they do in a full install
PROVIDERS = {"pretrain_gpt.py": "megatron.post_training.arguments:add_modelopt_args",
             "pretrain_mamba.py": "megatron.post_training.arguments:add_modelopt_args"}


def _argv(job) -> list[str] | None:
    """The argv Megatron receives; an unresolved path or name becomes a placeholder, anything else skips."""
    placeholders = {id(tok) for occ in job.args.occurrences if occ.flag.type in (None, "str")
                    and occ.flag.choices is None for tok in occ.values}
    out = []
    for tok in job.args.tokens:
        if tok.resolved:
            out.append(tok.text)
        elif id(tok) in placeholders:
            out.append("/unresolved/placeholder")
        else:
            return None
    return out


def lm_verdicts(tmp_path: Path):
    settings = Settings(megatron_version="core_v0.16.1")
    cases, scripts = [], {}
    for name, _, text in argument_sets():
        script = tmp_path / (name.replace("/", "__") + ".sh")
        script.write_text(text)
        detected = analyse(str(script), text, Settings())
        if not detected.commands or detected.commands[0].flavour != "megatron-lm":
            continue  # Megatron-DeepSpeed command lines: not this oracle's parser
        found = analyse(str(script), text, settings)
        job = found.commands[0]
        world = megatron_subject(job, settings).job.layout.world  # the world the intake decides
        argv = _argv(job)
        if not world or argv is None:
            continue  # Megatron needs the real argv and WORLD_SIZE
        if "--use-checkpoint-args" in argv:
            # initialize_megatron runs load_args_from_checkpoint before validate_args: the checkpoint supplies the
            # shape validate_args checks, and there is no checkpoint here to read it from
            continue
        var = job.env_value("CUDA_DEVICE_MAX_CONNECTIONS")
        program = (job.program or "pretrain_gpt.py").rsplit("/", 1)[-1]
        cases.append({"name": name, "program": program, "argv": argv,
                      "known_program": job.table.knows_program(job.program),
                      "world_size": world, "provider": PROVIDERS.get(program),
                      "ignore_unknown": not job.table.knows_program(job.program)
                      or (job.table.entrypoint is not None and program not in PROVIDERS),
                      "cuda_device_max_connections": var.value if var else None})
        scripts[name] = script
    env = dict(os.environ, PYTHONPATH=CHECKOUT)
    out = subprocess.run([sys.executable, str(ROOT / "tests" / "megatron_lm_runner.py")], input=json.dumps(cases),
                         capture_output=True, text=True, env=env, cwd=CHECKOUT, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    verdicts = json.loads(out.stdout)
    rows = []
    SCRIPTS.update(scripts)
    for name, megatron in verdicts.items():
        _, report, _ = run_guard("check", "--isolated", "--format", "json", "--megatron-version", "core_v0.16.1",
                                 str(scripts[name]))
        diags = json.loads(report)
        errors = sorted({d["code"] for d in diags if d["severity"] == "error"})
        warnings = sorted({d["code"] for d in diags if d["severity"] == "warning"})
        known = next(c for c in cases if c["name"] == name)["known_program"]
        rows.append((name, megatron, errors, warnings, known))
    return rows


needs_checkout = pytest.mark.skipif(not CHECKOUT, reason="no Megatron-LM core_v0.16.1 checkout "
                                                        "(../shared/megatron-lm or MEGATRON_LM_PATH)")


@pytest.fixture(scope="module")
def rows(tmp_path_factory):
    return lm_verdicts(tmp_path_factory.mktemp("scripts"))


@needs_checkout
def test_validate_args_reproduces_each_row_that_names_it(rows):
    """The `validate_args` rows of megatron_accepted.py: Megatron-LM refuses each with its message."""
    verdicts = {name: megatron for name, megatron, *_ in rows}
    cases = [case for case in MEGATRON_ACCEPTED_BUT_ERRS if case.how == "validate_args"]
    wrong = [f"{case.name} {case.rule}: expected /{case.detail}/, Megatron-LM says {verdicts.get(case.name)!r}"
             for case in cases if not re.search(case.detail, verdicts.get(case.name) or "")]
    print(f"\nvalidate_args reproduced {len(cases) - len(wrong)} of {len(cases)} rows")
    assert not wrong, "\n".join(wrong)


@needs_checkout
def test_guard_agrees_with_megatron_lm_validate_args(rows):
    """Every refusal of Megatron-LM's is an error or warning of guard's, where the script runs an entry point of
    core_v0.16.1; a script written for another version's entry point (pretrain_hybrid.py is newer) is judged by
    guard as info, saying the program may judge otherwise, which the last assertion checks."""
    assert len(rows) >= 30
    missed = [(n, m) for n, m, errors, warnings, known in rows
              if m is not None and known and not errors and not warnings]
    assert not missed, missed
    other_version = [n for n, m, errors, warnings, known in rows if m is not None and not known]
    for name in other_version:
        _, report, _ = run_guard("check", "--isolated", "--format", "json", "--megatron-version", "core_v0.16.1",
                                 str(SCRIPTS[name]))
        assert any(d["code"] == "MLM011" for d in json.loads(report)), name
