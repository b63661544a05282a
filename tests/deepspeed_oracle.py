"""DeepSpeed as the judge: feed config files to DeepSpeed's own DeepSpeedConfig, compare with guard.

`python tests/deepspeed_oracle.py JOBS.json` (run in a subprocess: importing deepspeed is slow
and noisy) prints one JSON verdict per file. `compare()` runs guard on the same files with the
plain-DeepSpeed judgement and the same world size, and builds the agreement table.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_WORLD = 8


def _judge(jobs: list[list]) -> list[dict]:
    import logging

    import deepspeed.runtime.config as ds_config

    logging.getLogger("DeepSpeed").setLevel(logging.ERROR)
    # DeepSpeedConfig falls back to world size 1 when no process group exists; pretend rank 0 of
    # an initialised group so that it asks the mpu for the data-parallel size, as in a real job.
    ds_config.dist.get_rank = lambda *args, **kwargs: 0

    class Mpu:
        def __init__(self, world: int):
            self.world = world

        def get_data_parallel_world_size(self) -> int:
            return self.world

        def get_sequence_parallel_world_size(self) -> int:
            return 1

    verdicts = []
    for path, world in jobs:
        try:
            # A path, not a dict: DeepSpeed then reads the file itself (hjson, duplicate-key hook).
            ds_config.DeepSpeedConfig(path, mpu=Mpu(world))
            verdicts.append({"path": path, "accepted": True, "error": None})
        except BaseException as err:  # the judge's verdict, whatever DeepSpeed raises
            first = (str(err).strip().splitlines() or [""])[0]
            verdicts.append({"path": path, "accepted": False, "error": f"{type(err).__name__}: {first}"[:200]})
    return verdicts


def _initialize(paths: list[str]) -> list[dict]:
    """Start a real one-rank DeepSpeed engine (CPU, gloo) on a two-layer model for each config."""
    import logging
    import socket

    with socket.socket() as probe:  # a free local port for the one-rank process group
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    import deepspeed
    import torch

    logging.getLogger("DeepSpeed").setLevel(logging.ERROR)
    deepspeed.init_distributed(dist_backend="gloo")
    verdicts = []
    for path in paths:
        model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Linear(8, 8))
        try:
            deepspeed.initialize(model=model, model_parameters=model.parameters(), config=path)
            verdicts.append({"path": path, "accepted": True, "error": None})
        except BaseException as err:
            first = (str(err).strip().splitlines() or [""])[0]
            verdicts.append({"path": path, "accepted": False, "error": f"{type(err).__name__}: {first}"[:300]})
    return verdicts


def run_deepspeed(jobs: list, timeout: int = 300, engine: bool = False) -> list[dict]:
    """Judge `jobs` with DeepSpeed in a subprocess: DeepSpeedConfig on (path, world size) pairs,
    or with `engine=True` a real `deepspeed.initialize` on each path."""
    import tempfile

    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as handle:
        json.dump(jobs, handle)
    env = {**os.environ, "DS_ACCELERATOR": "cpu", "PYTHONWARNINGS": "ignore"}
    mode = ["--engine"] if engine else []
    try:
        result = subprocess.run([sys.executable, __file__, *mode, handle.name], capture_output=True, text=True,
                                timeout=timeout, env=env)
    finally:
        os.unlink(handle.name)
    if result.returncode != 0:
        raise RuntimeError(f"the DeepSpeed oracle failed:\n{result.stderr[-2000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def config_files(corpus: Path | None) -> list[tuple[str, int]]:
    """JSON configs of the corpus, the rule fixtures and the examples, each with its world size."""
    import yaml

    jobs: dict[str, int] = {}
    roots = [ROOT / "examples"] + ([corpus / "deepspeed", corpus / "deepspeed-bad"] if corpus else [])
    for root in roots:
        for path in sorted(root.rglob("*.json")):
            jobs[str(path)] = DEFAULT_WORLD
    for cases in sorted((ROOT / "tests" / "fixtures" / "rules").glob("*/cases.yaml")):
        for case in yaml.safe_load(cases.read_text()) or []:
            path = str((cases.parent / case["file"]).resolve())
            if not path.endswith((".json", ".hjson")):
                continue
            args = case.get("args", [])
            world = int(args[args.index("--world-size") + 1]) if "--world-size" in args else DEFAULT_WORLD
            jobs.setdefault(path, world)
    return sorted(jobs.items())


def run_guard(jobs: list[tuple[str, int]]) -> dict[str, list[dict]]:
    """guard's errors per file, judged as a plain DeepSpeed launch with the same world size."""
    import io
    from contextlib import redirect_stdout

    from guard.cli import main

    out: dict[str, list[dict]] = {}
    for path, world in jobs:
        buffer = io.StringIO()
        with redirect_stdout(buffer):
            main(["check", "--isolated", "--context", "deepspeed", "--world-size", str(world),
                  "--format", "json", path])
        out[path] = [d for d in json.loads(buffer.getvalue()) if d["severity"] == "error"]
    return out


def agreement(verdicts: list[dict], errors: dict[str, list[dict]]) -> dict[str, int]:
    table = {"rejected/flagged": 0, "rejected/clean": 0, "accepted/flagged": 0, "accepted/clean": 0}
    for verdict in verdicts:
        ds = "accepted" if verdict["accepted"] else "rejected"
        table[f"{ds}/{'flagged' if errors[verdict['path']] else 'clean'}"] += 1
    return table


def format_table(table: dict[str, int]) -> str:
    rows = [("DeepSpeed rejects", table["rejected/flagged"], table["rejected/clean"]),
            ("DeepSpeed accepts", table["accepted/flagged"], table["accepted/clean"])]
    lines = ["| DeepSpeedConfig (0.19.8) | guard: error | guard: no error |", "|---|---|---|"]
    lines += [f"| {name} | {a} | {b} |" for name, a, b in rows]
    return "\n".join(lines)


if __name__ == "__main__":
    with open(sys.argv[-1]) as jobs_file:
        jobs = json.load(jobs_file)
    verdicts = _initialize(jobs) if "--engine" in sys.argv else _judge(jobs)
    sys.stdout.write("\n" + json.dumps(verdicts) + "\n")
