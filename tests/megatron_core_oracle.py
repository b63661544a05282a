"""Judge a Megatron-LM command line with megatron-core itself: build the TransformerConfig that
Megatron-LM's `core_transformer_config_from_args` would build, and report what it refuses.

The mapping follows megatron/training/arguments.py (validate_args' derived values and
core_transformer_config_from_args), read by hand; guard's own rule code is not used. `later_failure`,
`schedule_failures` and `forward_failure` run megatron-core steps that come after the config: the
parallel-state layout, the microbatch calculator, the layer specs, the interleaved schedule and a model's forward.
"""

from __future__ import annotations

import dataclasses
import warnings
from typing import Any


def transformer_kwargs(values: dict[str, Any], world_size: int | None) -> dict[str, Any]:
    """TransformerConfig keyword arguments for the flag values (dest -> value) of one command line."""
    import torch
    import torch.nn.functional as F
    from megatron.core.transformer.transformer_config import TransformerConfig

    args = dict(values)
    fields = {f.name for f in dataclasses.fields(TransformerConfig) if f.init}
    # validate_args: plain derivations (its own checks are Megatron-LM's, not megatron-core's)
    if (args.get("tensor_model_parallel_size") or 1) == 1:
        args["sequence_parallel"] = False  # turned off with a warning, not refused
    if args.get("recompute_activations"):
        args["recompute_granularity"] = "selective"
    if args.get("ffn_hidden_size") is None and args.get("hidden_size"):
        h = args["hidden_size"]
        args["ffn_hidden_size"] = int((4 * h * 2 / 3) / 64) * 64 if args.get("swiglu") else 4 * h
    if args.get("kv_channels") is None and args.get("hidden_size") and args.get("num_attention_heads"):
        args["kv_channels"] = args["hidden_size"] // args["num_attention_heads"]
    per_stage = args.get("num_layers_per_virtual_pipeline_stage")
    pp = args.get("pipeline_model_parallel_size") or 1
    if per_stage and args.get("num_layers"):
        vpp = (args["num_layers"] // pp) // per_stage
        args["virtual_pipeline_model_parallel_size"] = vpp if vpp > 1 else None
    elif args.get("num_virtual_stages_per_pipeline_rank"):
        vpp = args["num_virtual_stages_per_pipeline_rank"]
        args["virtual_pipeline_model_parallel_size"] = vpp if vpp > 1 else None
    kwargs = {name: args[name] for name in fields if name in args and args[name] is not None}
    dtype = torch.bfloat16 if args.get("bf16") else torch.float16 if args.get("fp16") else torch.float32
    kwargs.update(params_dtype=dtype, pipeline_dtype=dtype, fp16=bool(args.get("fp16")),
                  bf16=bool(args.get("bf16")))
    kwargs["num_query_groups"] = args.get("num_query_groups") if args.get("group_query_attention") else None
    kwargs["num_moe_experts"] = args.get("num_experts")
    kwargs["num_layers_in_first_pipeline_stage"] = args.get("decoder_first_pipeline_num_layers")
    kwargs["num_layers_in_last_pipeline_stage"] = args.get("decoder_last_pipeline_num_layers")
    if args.get("swiglu"):
        kwargs.update(activation_func=F.silu, gated_linear_unit=True)
    if "add_bias_linear" in args:
        kwargs["add_bias_linear"] = args["add_bias_linear"]
    # settings whose checks import Transformer Engine kernels (absent on this CPU machine)
    for key in ("fp8", "fp4", "cuda_graph_scope", "cuda_graph_impl", "moe_permute_fusion"):
        kwargs.pop(key, None)
    if args.get("fp8_param_gather"):
        kwargs.pop("fp8_param", None)
    return kwargs


def judge(values: dict[str, Any], world_size: int | None = None) -> str | None:
    """None when megatron-core builds the config; otherwise its error message."""
    from megatron.core.transformer.transformer_config import TransformerConfig

    kwargs = transformer_kwargs(values, world_size)
    if not kwargs.get("num_layers") or not kwargs.get("hidden_size") or not kwargs.get("num_attention_heads"):
        return "skip: the model shape is not on the command line"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            TransformerConfig(**kwargs)
        except ImportError as err:
            return f"skip: the check needs a GPU-side package ({err})"
        except (ValueError, AssertionError, TypeError, ZeroDivisionError, NotImplementedError) as err:
            return f"{type(err).__name__}: {err}"
    return None


def _parallel_state(values: dict[str, Any], world_size: int) -> str | None:
    """megatron-core's `initialize_model_parallel` for this layout, with torch.distributed answering the
    job's world size and rank 0: its size checks run, and the first process group it would create
    stops it (None: the layout passed)."""
    from unittest import mock

    import torch.distributed as dist
    from megatron.core import parallel_state

    class Passed(Exception):
        pass

    def stop(*args, **kwargs):
        raise Passed

    kwargs = {key: values.get(key) or 1 for key in ("tensor_model_parallel_size", "pipeline_model_parallel_size",
                                                   "context_parallel_size", "expert_model_parallel_size")}
    kwargs["expert_tensor_parallel_size"] = values.get("expert_tensor_parallel_size")
    with mock.patch.object(dist, "is_initialized", lambda: True), \
            mock.patch.object(dist, "get_world_size", lambda *a, **k: world_size), \
            mock.patch.object(dist, "get_rank", lambda *a, **k: 0), mock.patch.object(dist, "new_group", stop), \
            mock.patch.object(parallel_state, "create_group", stop):
        try:
            parallel_state.initialize_model_parallel(**kwargs)
        except Passed:
            return None
        except (RuntimeError, AssertionError, ValueError) as err:
            return f"{type(err).__name__}: {err}"
    return None


def _microbatches(values: dict[str, Any], world_size: int) -> str | None:
    """megatron-core's microbatch calculator, built as `pretrain` builds it (DP = world / (TP x PP x CP))."""
    from megatron.core.num_microbatches_calculator import ConstantNumMicroBatchesCalculator

    model = 1
    for key in ("tensor_model_parallel_size", "pipeline_model_parallel_size", "context_parallel_size"):
        model *= values.get(key) or 1
    mbs = values["micro_batch_size"]
    dp = world_size // model
    try:
        ConstantNumMicroBatchesCalculator(values.get("global_batch_size") or mbs * dp, mbs, dp, False, 0)
    except AssertionError as err:
        return f"AssertionError: {err}"
    return None


def _layer_spec(values: dict[str, Any], world_size: int) -> str | None:
    """megatron-core's GPT layer specs (get_gpt_decoder_layer_specs, which GPTModel's block spec builds first): the
    MoE layer pattern's length is checked there."""
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_decoder_layer_specs
    from megatron.core.transformer.transformer_config import TransformerConfig

    kwargs = transformer_kwargs(values, world_size)
    freq = kwargs.get("moe_layer_freq")
    if isinstance(freq, str):  # Megatron-LM's moe_freq_type: an int, else the Python list expression it evals
        kwargs["moe_layer_freq"] = int(freq) if freq.strip().isdigit() else eval(freq)  # noqa: S307 - test data
    try:
        get_gpt_decoder_layer_specs(TransformerConfig(**kwargs), use_transformer_engine=False)
    except (AssertionError, ValueError) as err:
        return f"{type(err).__name__}: {err}"
    return None


LATER = {"parallel_state": _parallel_state, "microbatches": _microbatches, "layer_spec": _layer_spec}


def later_failure(kind: str, values: dict[str, Any], world_size: int) -> str | None:
    """Run the megatron-core step `kind` of LATER names on a command line's values; its refusal or None."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return LATER[kind](values, world_size)


def _probe(script: str, cases: dict, timeout: int):
    """Run tests/fidelity/SCRIPT on `cases` in a process session of its own; (its result, its output or None)."""
    import json
    import os
    import sys
    import tempfile
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    if str(root) not in sys.path:  # a bare `pytest` puts only tests/ on the path
        sys.path.insert(0, str(root))
    from tests.fidelity.launch import run_bounded

    with tempfile.TemporaryDirectory() as tmp:
        Path(tmp, "cases.json").write_text(json.dumps(cases))
        done = run_bounded([sys.executable, str(root / "tests" / "fidelity" / script), f"{tmp}/cases.json",
                            f"{tmp}/out.json"], timeout=timeout, env={**os.environ, "PYTHONWARNINGS": "ignore"})
        out = Path(tmp, "out.json")
        return done, json.loads(out.read_text()) if done.returncode == 0 and out.is_file() else None


def schedule_failures(jobs: dict[str, tuple[dict[str, Any], int]], timeout: int = 300) -> dict[str, str | None]:
    """Run megatron-core's interleaved pipeline schedule (tests/fidelity/megatron_stash_probe.py: one gloo
    process per stage, a tiny GPT of one layer per virtual stage) with each job's PP, virtual stages,
    microbatch group and microbatches per step; name -> the schedule's refusal (or None)."""
    cases = {}
    for name, (values, world) in jobs.items():
        kwargs = transformer_kwargs(values, world)
        pp, vpp = kwargs.get("pipeline_model_parallel_size") or 1, kwargs["virtual_pipeline_model_parallel_size"]
        model = pp * (values.get("tensor_model_parallel_size") or 1) * (values.get("context_parallel_size") or 1)
        per_step = values["micro_batch_size"] * (world // model)
        cases[name] = {"pp": pp, "vpp": vpp, "layers": pp * vpp,
                       "group": values.get("microbatch_group_size_per_vp_stage"),
                       "microbatches": (values.get("global_batch_size") or per_step) // per_step}
    done, out = _probe("megatron_stash_probe.py", cases, timeout)
    assert done.returncode == 0, done.stderr[-2000:]
    return {name: next((rec["error"] for rec in records if "error" in rec), None) for name, records in out.items()}


def forward_failure(values: dict[str, Any], world: int, timeout: int = 300) -> str | None:
    """One forward and backward of a one-layer GPT with the job's heads and query groups, shrunk to 4 channels a
    head (tests/fidelity/megatron_activation_probe.py, TP = 1, CPU); the error it ends with, or None."""
    heads = values["num_attention_heads"]
    groups = values.get("num_query_groups") if values.get("group_query_attention") else None
    case = {"layers": 1, "hidden": 4 * heads, "heads": heads, "groups": groups, "ffn": 16 * heads, "vocab": 64,
            "seq": 8, "batch": 1}
    done, _ = _probe("megatron_activation_probe.py", {"job": case}, timeout)
    if done.returncode == 0:
        return None
    errors = [line.split("]: ", 1)[-1] for line in done.stderr.splitlines() if "Error: " in line]
    return errors[-1] if errors else done.stderr[-300:]
