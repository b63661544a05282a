"""megatron-core as the oracle: every argument set of the corpus and of the Megatron rule fixtures is
turned into megatron-core 0.16.1's TransformerConfig; whatever megatron-core refuses, guard reports as an
error with the rule that says what megatron-core says (tests/megatron_core_refusals.py, read from
megatron-core's source)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from conftest import CORPUS, FIXTURES, run_guard

pytest.importorskip("megatron.core")
from megatron_accepted import MEGATRON_ACCEPTED_BUT_ERRS  # noqa: E402
from megatron_core_oracle import LATER, forward_failure, judge, later_failure, schedule_failures  # noqa: E402
from megatron_core_refusals import refused_rule  # noqa: E402

from guard.megatron.from_script import analyse  # noqa: E402
from guard.intake.megatron import megatron_subject
from guard.settings import Settings  # noqa: E402
from test_megatron_corpus import NOT_ARGV, script_text  # noqa: E402

def argument_sets() -> list[tuple[str, Path, str]]:
    """(name, where, script text) for each whole Megatron-LM command line we have."""
    out = []
    if CORPUS.is_dir():
        for folder in ("megatron", "megatron-bad"):
            for path in sorted((CORPUS / folder).glob("*.yaml")):
                data = yaml.safe_load(path.read_text())
                if "args" in data and path.stem not in NOT_ARGV:
                    out.append((f"corpus/{path.stem}", path, script_text(data)))
    for path in sorted((FIXTURES / "rules").glob("MLM*/*.sh")):
        out.append((f"fixture/{path.parent.name}/{path.name}", path, path.read_text()))
    return out


def verdicts(tmp_path: Path):
    rows = []
    for name, _, text in argument_sets():
        script = tmp_path / (name.replace("/", "__") + ".sh")
        script.write_text(text)
        found = analyse(str(script), text, Settings())
        if not found.commands or found.commands[0].flavour != "megatron-lm":
            continue
        job = found.commands[0]
        world = megatron_subject(job, Settings()).job.layout.world  # the world the intake decides
        values = {occ.flag.dest: job.args.value(occ.flag.dest) for occ in job.args.occurrences if occ.known}
        for dest in ("tensor_model_parallel_size", "pipeline_model_parallel_size", "num_query_groups"):
            values.setdefault(dest, job.table.default(dest))
        core = judge(values, world)
        if core is not None and core.startswith("skip"):
            continue
        code, out, _ = run_guard("check", "--isolated", "--format", "json", "--megatron-version", "core_v0.16.1",
                                "--ignore", "MLM111", str(script))
        errors = sorted({d["code"] for d in json.loads(out) if d["severity"] == "error"})
        rows.append((name, core, errors, values, world))
    return rows


@pytest.fixture(scope="module")
def rows(tmp_path_factory):
    return verdicts(tmp_path_factory.mktemp("scripts"))


def test_each_refusal_gets_the_rule_that_says_the_same(rows):
    assert len(rows) >= 40
    refused = [(name, core, errors) for name, core, errors, _, _ in rows if core is not None]
    assert refused, "the oracle refused nothing: the mapping is not exercising megatron-core"
    wrong = [f"{name}: megatron-core says {core!r} = {refused_rule(core)}; guard errs {errors}"
             for name, core, errors in refused if refused_rule(core) not in errors]
    print(f"\nmegatron-core refusals matched by rule: {len(refused) - len(wrong)}/{len(refused)}")
    assert not wrong, "\n".join(wrong)


def test_errors_on_accepted_command_lines_are_justified_case_by_case(rows):
    table = {(case.name, case.rule) for case in MEGATRON_ACCEPTED_BUT_ERRS}
    seen = {(name, code) for name, core, errors, _, _ in rows if core is None for code in errors}
    unexplained = sorted(seen - table)
    assert not unexplained, f"errors on command lines megatron-core accepts, without a row in megatron_accepted.py: " \
                            f"{unexplained}"
    stale = sorted(row for row in table - seen if row[0] in {name for name, *_ in rows})
    assert not stale, f"rows of megatron_accepted.py that guard or megatron-core no longer need: {stale}"


def test_megatron_core_reproduces_the_later_failures(rows):
    by_name = {name: (values, world) for name, _, _, values, world in rows}
    cases = [case for case in MEGATRON_ACCEPTED_BUT_ERRS if case.how in LATER and case.name in by_name]
    wrong = [f"{case.name} {case.rule}: expected /{case.detail}/ from {case.how}, got {got!r}"
             for case in cases if not re.search(case.detail, got := later_failure(case.how, *by_name[case.name]) or "")]
    assert not wrong, "\n".join(wrong)
    assert cases


@pytest.mark.slow
def test_the_interleaved_schedule_reproduces_its_rows(rows):
    by_name = {name: (values, world) for name, _, _, values, world in rows}
    cases = [case for case in MEGATRON_ACCEPTED_BUT_ERRS if case.how == "schedule" and case.name in by_name]
    got = schedule_failures({case.name: by_name[case.name] for case in cases})
    wrong = [f"{case.name}: expected /{case.detail}/, the schedule said {got[case.name]!r}" for case in cases
             if not re.search(case.detail, got[case.name] or "")]
    assert not wrong, "\n".join(wrong)
    assert cases


@pytest.mark.slow
def test_a_forward_reproduces_its_rows(rows):
    by_name = {name: (values, world) for name, _, _, values, world in rows}
    cases = [case for case in MEGATRON_ACCEPTED_BUT_ERRS if case.how == "forward" and case.name in by_name]
    wrong = [f"{case.name}: expected /{case.detail}/, the forward said {got!r}" for case in cases
             if not re.search(case.detail, got := forward_failure(*by_name[case.name]) or "")]
    assert not wrong, "\n".join(wrong)
    assert cases
