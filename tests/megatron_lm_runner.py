"""Run Megatron-LM's own parse_args + validate_args over argument sets (stdin: JSON list); print verdicts.

Started by test_megatron_lm_oracle.py with PYTHONPATH set to a Megatron-LM checkout, on CPU.
Patched for a CPU-only machine (the only patches): megatron.core.transformer.custom_layers.
batch_invariant_kernels, which imports triton at module load, is replaced by a stub (argument
validation never calls it); and validate_args' `get_device_arch_version()` answers 9 (Hopper, the
GPUs the corpus scripts target) instead of asking CUDA, as does `torch.cuda.get_device_capability()`
((9, 0); the grouped-GEMM check asks it).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys
import warnings
from unittest import mock


def main() -> None:
    sys.modules["megatron.core.transformer.custom_layers.batch_invariant_kernels"] = mock.MagicMock()
    warnings.simplefilter("ignore")
    import megatron.training.arguments as arguments
    from megatron.training.arguments import parse_args, validate_args

    arguments.get_device_arch_version = lambda: 9
    import torch

    torch.cuda.get_device_capability = lambda *a, **k: (9, 0)

    cases = json.load(sys.stdin)
    verdicts = {}
    for case in cases:
        os.environ["WORLD_SIZE"] = str(case["world_size"])
        os.environ["RANK"] = "0"
        os.environ.pop("CUDA_DEVICE_MAX_CONNECTIONS", None)
        if case.get("cuda_device_max_connections") is not None:
            os.environ["CUDA_DEVICE_MAX_CONNECTIONS"] = case["cuda_device_max_connections"]
        sys.argv = [case["program"], *case["argv"]]
        sink = io.StringIO()
        try:
            with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
                provider = None
                if case.get("provider"):
                    module, _, name = case["provider"].partition(":")
                    provider = getattr(__import__(module, fromlist=[name]), name)
                args = parse_args(extra_args_provider=provider, ignore_unknown_args=case["ignore_unknown"])
                validate_args(args)
            verdicts[case["name"]] = None
        except SystemExit as err:
            verdicts[case["name"]] = f"SystemExit({err.code}): {sink.getvalue().strip().splitlines()[-1:] }"
        except Exception as err:  # noqa: BLE001 - any refusal is a verdict
            verdicts[case["name"]] = f"{type(err).__name__}: {err}"
    json.dump(verdicts, sys.stdout)


if __name__ == "__main__":
    main()
