"""Check and estimate cannot disagree, over random jobs: whatever `guard check` concludes about the layout, the
pipeline stages, the ZeRO stage, the precision and the batch, `guard estimate` prices the same values; and a job
that check refuses with an error is never priced as fitting (estimate refuses it, or says it will not start).

GUARD_LONG=1 runs a few thousand examples (the issue's long run); the default suite runs a sample.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from guard import cli
from guard.checker import Checker
from guard.intake.request import Request
from guard.settings import Settings

EXAMPLES = 3000 if os.environ.get("GUARD_LONG") else 60
SETTINGS = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))


def _mostly(valid: list, *broken):
    """One of `valid` eight times in nine, else one of `broken`: jobs that run, and jobs one setting breaks."""
    return st.sampled_from([*valid * (8 * max(1, len(broken)) // max(1, len(valid)) or 1), *broken] if broken
                           else valid)


@st.composite
def megatron_jobs(draw) -> tuple[str, int]:
    """A job built to run (its degrees divide its world, its layers its stages), then as often broken somewhere:
    a degree, a split, the batch, the precision."""
    heads = draw(st.sampled_from([8, 16, 32]))
    tp, pp, cp, dp = (draw(_mostly(v, *bad)) for v, bad in
                      (([1, 2, 4, 8], (3,)), ([1, 2, 4], (3,)), ([1, 2], ()), ([1, 2, 4], ())))
    world = tp * pp * cp * dp + draw(_mostly([0], 1, 2))
    layers = pp * 2 * draw(st.integers(1, 6)) + draw(_mostly([0], 1, 3))
    micro = draw(st.sampled_from([1, 2, 4]))
    words = ["--num-layers", str(layers), "--hidden-size", str(heads * draw(st.sampled_from([32, 64]))),
             "--num-attention-heads", str(heads), "--seq-length", "1024", "--max-position-embeddings", "1024",
             "--vocab-size", "32000", "--micro-batch-size", str(micro), "--tensor-model-parallel-size", str(tp),
             "--pipeline-model-parallel-size", str(pp), "--context-parallel-size", str(cp)]
    words += ["--global-batch-size", str(micro * dp * draw(st.integers(1, 8)) + draw(_mostly([0], 1, 3)))]
    virtual = draw(_mostly([None], "stages", "layers"))
    if virtual == "stages":
        words += ["--num-virtual-stages-per-pipeline-rank", str(draw(st.integers(1, 4)))]
    elif virtual == "layers":
        words += ["--num-layers-per-virtual-pipeline-stage", str(draw(st.integers(1, 4)))]
    if draw(_mostly([False], True)):
        for flag in ("--decoder-first-pipeline-num-layers", "--decoder-last-pipeline-num-layers"):
            value = draw(st.sampled_from([None, 0, 1, 2, 4, 8]))
            words += [flag, str(value)] if value is not None else []
    words += draw(_mostly([["--bf16"], ["--fp16"], []], ["--bf16", "--fp16"]))
    for flag in ("--use-distributed-optimizer", "--sequence-parallel", "--account-for-embedding-in-pipeline-split"):
        words += [flag] if draw(st.booleans()) else []
    granularity = draw(st.sampled_from([None, "selective", "full"]))
    words += ["--recompute-granularity", granularity] if granularity else []
    words += ["--recompute-method", "uniform", "--recompute-num-layers", "1"] if granularity == "full" else []
    return " ".join(w for w in words if w), world


@st.composite
def deepspeed_jobs(draw) -> tuple[dict, int | None]:
    config: dict = {}
    zero = draw(st.sampled_from(["absent", "true", "false", 0, 1, 2, 3, "2"]))
    if zero in ("true", "false"):
        config["zero_optimization"] = zero == "true"  # the deprecated boolean form
    elif zero != "absent":
        config["zero_optimization"] = {"stage": zero}
    world = draw(_mostly([1, 2, 8, 16], None))
    micro, steps = draw(st.sampled_from([1, 2, 4])), draw(st.sampled_from([1, 2, 4]))
    batch = {"train_micro_batch_size_per_gpu": micro, "gradient_accumulation_steps": steps,
             "train_batch_size": micro * steps * (world or 1) * draw(_mostly([1], 2, 3))}
    for key, value in batch.items():
        if draw(_mostly([True], False)):
            config[key] = value
    for section in ("bf16", "fp16"):
        enabled = draw(st.sampled_from([None, True, False]))
        if enabled is not None:
            config[section] = {"enabled": enabled}
    return config, world


def _estimate(*argv: str) -> tuple[int, dict | None]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main(["estimate", "--isolated", "--gpu", "H100-SXM", "--format", "json", *argv])
    assert code in (0, 1, 2) and "Traceback" not in err.getvalue(), err.getvalue()
    if code == 2:  # why, in a few words (the statistics of a long run show them)
        event("refused because " + re.sub(r"[\d/<>-]+|\(.*", "", err.getvalue().split(": ", 2)[-1])[:48])
    return code, json.loads(out.getvalue()) if code != 2 else None


def _agree(checked, code: int, priced: dict | None) -> None:
    job, errors = checked
    event(f"estimate: {'refused' if priced is None else 'will not start' if priced['refused'] else 'priced'}; "
          f"check: {'errors' if errors else 'no error'}")
    if priced is None:  # refused (exit 2): never priced as fitting; a job check finds nothing wrong with was
        return          # refused for a value the estimate needs and the command lacks (job.missing says which)
    lay = priced["layout"]
    assert (lay["world_size"], lay["tp"], lay["pp"], lay["cp"], lay["dp"], lay["vpp"]) == \
        (job.layout.world, job.layout.tp, job.layout.pp, job.layout.cp, job.layout.dp, job.layout.vpp)
    by_stage = {r["pp_rank"]: r["layers"] for r in priced["ranks"]}
    assert [by_stage[p] for p in range(len(by_stage))] == [sum(len(c.layers) for c in stage) for stage in job.chunks]
    assert (lay["zero_stage"], lay["micro_batch_size"], lay["num_microbatches"]) == \
        (job.zero_stage, job.micro_batch, job.num_microbatches)
    if errors:  # guard check refuses it: the job will not start, so it does not fit
        assert priced["fits"] is not True and code == 1, [d.message for d in errors]


def _checked(settings_: Settings, request: Request, paths: list[str], argv: list[str]):
    result = Checker(settings_, request).run(paths, argv)
    subject = result.subjects[0]
    return subject.job, [d for d in result.diagnostics if d.severity.value == "error" and not d.code.startswith("MEM")]


@SETTINGS
@given(megatron_jobs())
def test_megatron_jobs(case):
    args, world = case
    checked = _checked(Settings(world_size=world), Request(), [], [args])
    code, priced = _estimate("--megatron-args", args, "--world-size", str(world))
    _agree(checked, code, priced)
    job, errors = checked
    assert priced is None or job.params_dtype == ("bf16" if "--bf16" in args else "fp16" if "--fp16" in args
                                                   else "fp32")


@SETTINGS
@given(deepspeed_jobs())
def test_deepspeed_configs(tmp_path_factory, case):
    config, world = case
    path = tmp_path_factory.mktemp("ds") / "ds.json"
    path.write_text(json.dumps(config))
    model = ["--model", "gpt2", "--seq-length", "1024"]
    checked = _checked(Settings(world_size=world), Request(model="gpt2", seq_length=1024), [str(path)], [])
    code, priced = _estimate(str(path), *model, *(["--world-size", str(world)] if world else []))
    _agree(checked, code, priced)
    job, _ = checked
    written = config.get("zero_optimization")
    if isinstance(written, bool):  # DeepSpeed's read_zero_config_deprecated: the boolean form is stage 1 or 0
        assert job.zero_stage == int(written)
