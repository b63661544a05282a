"""Round trip (issue 11): every example and corpus job, changed, written as edits and read again, is the new job."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import yaml
from conftest import CORPUS, ROOT

from guard.job.edits import Edit, apply_edits
from guard.job.from_deepspeed import read_deepspeed
from guard.job.world import World
from guard.intake.megatron import megatron_subject
from guard.job.origin import Origin
from guard.job.training_job import IncompleteJob
from guard.job.write_deepspeed import deepspeed_edits
from guard.job.write_megatron import megatron_edits, megatron_flags
from guard.megatron.from_script import analyse
from guard.settings import Settings
from guard.sources.document import SourceError
from guard.sources.json_source import parse_json
from guard.sources.loader import read_text

# -- reading -------------------------------------------------------------------------------------------------
COMPARED = {  # field -> how to read it off a job; refusals name these fields
    "layout.world": lambda j: j.layout.world, "layout.tp": lambda j: j.layout.tp, "layout.pp": lambda j: j.layout.pp,
    "layout.vpp": lambda j: j.layout.vpp, "layout.cp": lambda j: j.layout.cp, "layout.ep": lambda j: j.layout.ep,
    "layout.etp": lambda j: j.layout.etp, "layout.ulysses": lambda j: j.layout.ulysses,
    "layout.sequence_parallel": lambda j: j.layout.sequence_parallel, "micro_batch": lambda j: j.micro_batch,
    "global_batch": lambda j: j.global_batch, "num_microbatches": lambda j: j.num_microbatches,
    "params_dtype": lambda j: j.params_dtype, "distributed_optimizer": lambda j: j.distributed_optimizer,
    "zero_stage": lambda j: j.zero_stage, "offload_optimizer": lambda j: j.offload_optimizer,
    "offload_param": lambda j: j.offload_param, "checkpoint_partition": lambda j: j.checkpoint_partition,
    "checkpoint_cpu": lambda j: j.checkpoint_cpu, "recompute": lambda j: (j.recompute, j.recompute_method,
                                                                        j.recompute_num_layers)
    if j.recompute == "full" else j.recompute,
}


def read_script(path: Path):
    commands = analyse(str(path), path.read_text(), Settings()).commands
    return (commands[0], megatron_subject(commands[0], Settings()).job) if commands else (None, None)


def expected(old, new, refused: set[str], derived: tuple[str, ...] = ()) -> dict:
    """What reading the rewrite must give: the new job, except where a change was refused (`derived`: fields
    left out because they follow from compared ones)."""
    return {name: get(old if name in refused else new) for name, get in COMPARED.items() if name not in derived}


def refused_fields(rewrite) -> set[str]:
    return {part for r in rewrite.refused for part in r.field.split(", ")}


def write(edits: list[Edit], before: Path, after: Path) -> None:
    """Apply edits to the copies in `before`, writing every file into `after` (the user's files are not touched)."""
    for path in before.iterdir():
        mine = [e for e in edits if Path(e.path) == path]
        (after / path.name).write_text(apply_edits(path.read_text(), mine) if mine else path.read_text())
    assert all(Path(e.path).parent == before for e in edits), edits


# -- Megatron jobs: examples and corpus --------------------------------------------------------------------
def _scripts():
    out = [pytest.param(p.name, p.read_text(), id=p.name) for p in sorted((ROOT / "examples").rglob("*.sh"))]
    if CORPUS.is_dir():
        from test_megatron_corpus import script_text

        for p in sorted((CORPUS / "megatron").glob("*.yaml")):
            data = yaml.safe_load(p.read_text())
            if "args" in data:
                out.append(pytest.param(p.stem + ".sh", script_text(data), id=p.stem))
    return out


def _other(value: int | None, fits) -> int | None:
    """Double a degree, or halve it, whichever the job allows (None: neither)."""
    for candidate in ((value or 1) * 2, (value or 1) // 2):
        if candidate >= 1 and fits(candidate):
            return candidate
    return None


def relayout(old, **degrees):
    """The job on another layout (a job whose layers do not split over its stages keeps its chunks)."""
    from guard.job.stages import LayoutError

    layout = dataclasses.replace(old.layout, **degrees)
    try:
        return old.with_layout(layout)
    except LayoutError:
        dp, steps = layout.dp, old.num_microbatches
        if old.global_batch and dp:
            steps = max(1, old.global_batch // (old.micro_batch * dp))
        return dataclasses.replace(old, layout=layout, num_microbatches=steps)


def megatron_scenarios(old) -> dict:
    """Changes a planner makes: layout, batch, recompute, precision, sharding, world size."""
    lay, layers = old.layout, old.arch.num_layers if old.arch else None
    out = {}

    def world_fits(**degrees) -> bool:
        trial = dataclasses.replace(lay, **degrees)
        return lay.world is None or (trial.model_parallel and lay.world % trial.model_parallel == 0)
    tp = _other(lay.tp, lambda t: world_fits(tp=t) and (not old.arch or old.arch.heads % t == 0))
    if tp:
        out["tp"] = relayout(old, tp=tp, sequence_parallel=lay.sequence_parallel and tp > 1)
    pp = _other(lay.pp, lambda p: world_fits(pp=p) and (not layers or layers % (p * lay.vpp) == 0))
    if pp and not lay.layout_string:
        out["pp"] = relayout(old, pp=pp)
    out["batch"] = dataclasses.replace(old, micro_batch=old.micro_batch * 2,
                                       global_batch=old.global_batch and old.global_batch * 2)
    following = {"none": ("selective", "uniform", 1), "selective": ("full", "block", 2), "full": ("none", "uniform", 1)}
    recompute, method, count = following[old.recompute]
    out["recompute"] = dataclasses.replace(old, recompute=recompute, recompute_method=method,
                                           recompute_num_layers=count)
    out["precision"] = dataclasses.replace(old, params_dtype={"bf16": "fp16"}.get(old.params_dtype, "bf16"))
    if old.framework == "megatron-deepspeed":
        out["zero"] = dataclasses.replace(old, zero_stage={0: 1, 1: 2}.get(old.zero_stage, 1))
    else:
        out["distributed_optimizer"] = dataclasses.replace(old, distributed_optimizer=not old.distributed_optimizer)
    if lay.world:
        out["world"] = relayout(old, world=lay.world * 2)
    return out


def _stage(tmp_path: Path, name: str, text: str) -> tuple[Path, Path, Path]:
    before, after = tmp_path / "before", tmp_path / "after"
    before.mkdir()
    after.mkdir()
    (before / name).write_text(text)
    return before / name, before, after


@pytest.mark.parametrize(("name", "text"), _scripts())
def test_megatron_round_trip(name, text, tmp_path):
    script, before, after = _stage(tmp_path, name, text)
    cmd, old = read_script(script)
    if cmd is None:
        pytest.skip("guard's reader finds no Megatron command in it (a launcher inside bash -c, sh -c or uv run)")
    unchanged = megatron_edits(cmd, old, old)
    assert list(unchanged) == [] and unchanged.refused == []
    assert apply_edits(text, list(unchanged)) == text
    for scenario, new in megatron_scenarios(old).items():
        rewrite = megatron_edits(cmd, old, new)
        target = after / scenario
        target.mkdir()
        write(list(rewrite), before, target)
        _, again = read_script(target / name)
        assert expected(old, new, refused_fields(rewrite)) == expected(again, again, set()), (scenario, rewrite.refused)
        _appended_round_trip(cmd, old, new, script, after / f"{scenario}-appended")


def _appended_round_trip(cmd, old, new, script: Path, folder: Path) -> None:
    """The launcher's other way: the changed flags appended to the command, read again."""
    import shlex

    words = megatron_flags(old, new, cmd)
    command = cmd.launch.command
    folder.mkdir()
    write([Edit(command.path, command.span.stop, command.span.stop, " " + shlex.join(words))] if words else [],
          script.parent, folder)
    _, again = read_script(folder / script.name)
    derived = ("num_microbatches",)  # global / (micro x DP): DP follows the world, which appending cannot change
    assert expected(old, new, refused_fields(words), derived) == expected(again, again, set(), derived), \
        words.refused


# -- DeepSpeed configs: examples and corpus ----------------------------------------------------------------
def _configs():
    paths = sorted((ROOT / "examples").rglob("*.json"))
    if CORPUS.is_dir():
        paths += sorted((CORPUS / "deepspeed").glob("*.json"))
    return [pytest.param(p, id=p.name) for p in paths]


def read_config(path: Path, text: str, cli: dict | None = None):
    """The job of an HF/DeepSpeed run of Llama-2-7B on 8 GPUs; values "auto" leaves to the Trainer come from its
    command line (micro batch 1, bf16) as `guard estimate --micro-batch-size 1 --precision bf16` gives them."""
    from guard.job import presets

    doc = parse_json(text, str(path))
    args = {"arch": presets.load("llama-2-7b"), "world": World(8, Origin("cli", "--world-size")),
            "seq_length": 2048, "locate": lambda *p: (str(path), doc.span("/" + "/".join(p)))}
    for given in [cli] if cli is not None else [{}, {"micro_batch": 1}, {"micro_batch": 1, "precision": "bf16"}]:
        job = read_deepspeed(doc.data, str(path), **args, **given)
        try:
            return doc, job.required(), given
        except IncompleteJob as err:
            error = err
    raise error


def deepspeed_scenarios(old) -> dict:
    dp = old.layout.dp or 1

    def batch(micro: int, steps: int):
        return dataclasses.replace(old, micro_batch=micro, num_microbatches=steps, global_batch=micro * steps * dp)
    return {
        "micro": batch(old.micro_batch * 2, old.num_microbatches),
        "accumulation": batch(old.micro_batch, old.num_microbatches * 2),
        "zero": dataclasses.replace(old, zero_stage={0: 2, 1: 2, 2: 3, 3: 2}[old.zero_stage]),
        "offload_optimizer": dataclasses.replace(old, offload_optimizer="none" if old.offload_optimizer != "none"
                                                 else "cpu"),
        "offload_param": dataclasses.replace(old, offload_param="none" if old.offload_param != "none" else "cpu"),
        "precision": dataclasses.replace(old, params_dtype={"bf16": "fp16"}.get(old.params_dtype, "bf16")),
        "checkpointing": dataclasses.replace(old, checkpoint_partition=not old.checkpoint_partition,
                                             checkpoint_cpu=not old.checkpoint_cpu),
    }


def _ds_expected(old, new, refused: set[str]) -> dict:
    out = expected(old, new, refused)
    out["global_batch"] = out["micro_batch"] * out["num_microbatches"] * (new.layout.dp or 1)
    return out


@pytest.mark.parametrize("path", _configs())
def test_deepspeed_round_trip(path, tmp_path):
    text = read_text(str(path))[0]  # as guard reads it: line breaks as written
    try:
        doc, old, cli = read_config(path, text)
    except (SourceError, IncompleteJob) as err:
        pytest.skip(f"guard cannot read it as a DeepSpeed job: {err}")
    assert list(deepspeed_edits(doc, old, old)) == []
    for scenario, new in deepspeed_scenarios(old).items():
        rewrite = deepspeed_edits(doc, old, new)
        out = apply_edits(text, list(rewrite))
        (tmp_path / f"{scenario}.json").write_bytes(out.encode())
        _, again, _ = read_config(tmp_path / f"{scenario}.json", out, cli)
        assert _ds_expected(old, new, refused_fields(rewrite)) == expected(again, again, set()), \
            (scenario, rewrite.refused)


# -- what is refused, job by job (the report of issue 11) --------------------------------------------------
def _megatron_refusals() -> dict[tuple[str, str], set[str]]:
    out = {}
    for param in _scripts():
        name, text = param.values
        cmd = analyse(name, text, Settings()).commands
        if cmd:
            old = megatron_subject(cmd[0], Settings()).job
            for scenario, new in megatron_scenarios(old).items():
                fields = refused_fields(megatron_edits(cmd[0], old, new, texts={name: text}))
                if fields:
                    out[(param.id, scenario)] = fields
    return out


def test_only_shared_or_computed_shell_values_are_refused():
    """Every example and corpus Megatron job round-trips every change but one: train_gpt_1b.sh computes its
    global batch with $((MICRO_BATCH * 4 * 16)), so MICRO_BATCH has two uses and the global batch none literal."""
    assert _megatron_refusals() == {("train_gpt_1b.sh", "batch"): {"micro_batch", "global_batch"}}


def test_deepspeed_refusals_are_values_the_trainer_owns():
    reasons = set()
    for param in _configs():
        path = param.values[0]
        try:
            doc, old, _ = read_config(path, read_text(str(path))[0])
        except (SourceError, IncompleteJob):
            continue
        for new in deepspeed_scenarios(old).values():
            reasons |= {r.reason for r in deepspeed_edits(doc, old, new).refused}
    owned = ('gradient_accumulation_steps is "auto"', 'bf16/fp16 "enabled" is "auto"',
             "the micro batch comes from the command line", "not written: another part of the same change")
    assert reasons and all(r.startswith(owned) for r in reasons), reasons
