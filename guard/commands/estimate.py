"""`guard estimate`: the job read by the intake, judged, priced per rank; exit 1 when it does not fit or will not
start (guard check refuses it), 2 for bad input."""

from __future__ import annotations

import argparse
import sys

from guard.errors import InputError
from guard.settings import Settings


def run(args: argparse.Namespace, settings: Settings) -> int:
    from guard.intake.read import read
    from guard.judge import Judge
    from guard.memory.estimate import estimate
    from guard.memory.gpu_choice import choose_gpu
    from guard.option_table import request_for
    from guard.report import estimate_writer

    if args.list_models:
        from guard.job import presets
        from guard.memory import catalog

        from guard.job import model_catalog

        sys.stdout.write("models: " + ", ".join(presets.names()) + "\n")
        sys.stdout.write("catalog (Hub ids; their instruct/chat variants and mirrors too): "
                         + ", ".join(sorted(model_catalog.entries())) + "\n")
        sys.stdout.write("gpus: " + ", ".join(catalog.names()) + "\n")
        return 0
    gpu = choose_gpu(settings.gpu, settings.gpu_memory)
    subject = read(request_for(args, args.inputs), settings)
    job = subject.job
    job.require()
    job.overrides.update(dict(args.set or []))
    job.step.moe_imbalance = args.moe_imbalance  # the stated routing of a dropless MoE (activations.py)
    result = estimate(job, gpu)
    result.refusals = [d for d in Judge(settings, memory=False).judge(subject) if d.severity.value == "error"]
    estimate_writer(args.format)(result, sys.stdout, explain=args.explain, color=sys.stdout.isatty())
    if args.plot:
        try:
            estimate_writer("plot")(result, args.plot)
        except (RuntimeError, OSError, ValueError) as err:
            raise InputError(f"--plot: {err}") from None
    return 1 if result.fits is not True and (result.fits is False or result.refusals) else 0
