"""guard's kernel table and layer clock against what bench/gpu_kernels.py and bench/gpu_layer.py measured on an H200.

The measured files (schemas/gpus/measured/H200/) are raw script output; every expected number here is re-derived
from them by this test, not read from guard's merged table. The layer checks set guard's per-layer time for
megatron-core's local layer against the profiled GPU time of the same shape on the same GPU.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from guard.intake.read import read
from guard.intake.request import Request
from guard.memory.gpu_choice import choose_gpu
from guard.plan import per_step
from guard.plan.hardware import hardware
from guard.plan.layer_time import layer_time
from guard.settings import Settings

ROOT = Path(__file__).resolve().parent.parent
MEASURED = ROOT / "schemas" / "gpus" / "measured" / "H200"
KERNELS = json.loads((MEASURED / "kernels.json").read_text())
LAYERS = json.loads((MEASURED / "layers.json").read_text())
H200_HBM = 4.8e12  # NVIDIA H200 datasheet: 4.8 TB/s


def h200():
    return hardware(choose_gpu("H200"), "bf16")


def _job(case: dict, layers: int = 3):
    """The Megatron-LM command that builds bench/gpu_layer.py's case (tests/fidelity/megatron_activation_probe.py's
    TransformerConfig: no dropout, torch softmax in fp32, local spec), as the GPU kit writes it."""
    sys.path.insert(0, str(ROOT / "bench"))
    from gpu_kit import megatron_command

    settings = Settings()
    settings.world_size, settings.gpus_per_node = 1, 1
    args = megatron_command({**case, "layers": layers, "vocab": 256})
    return read(Request(megatron_args=(args,)), settings).job.required()


def test_gemm_peak_and_fall_are_the_files():
    hw = h200()
    rates = {tuple(r[:3]): r[3] for r in KERNELS["gemm"]["bf16"]}
    best = max(rates.values())
    assert hw.speeds.gemm_fraction("bf16") * hw.peak_flops == pytest.approx(best * 1e12, rel=1e-9)
    # a measured shape's own size: guard's efficiency there is that shape's rate (shapes of a size averaged)
    m, n, k = 4096, 12288, 4096
    gflop = 2 * m * n * k / 1e9
    same = [r for (a, b, c), r in rates.items() if 2 * a * b * c / 1e9 == gflop]
    assert hw.speeds.gemm_efficiency("bf16", gflop, k) * hw.peak_flops == \
        pytest.approx(statistics.mean(same) * 1e12, rel=1e-9)


def test_hbm_fraction_and_floor_are_the_copies():
    hw = h200()
    copies = [r for r in KERNELS["memory"]["rows"] if r[0] == "copy"]
    largest = max(copies, key=lambda r: r[1])
    assert hw.speeds.hbm_fraction == pytest.approx(largest[2] * 1e9 / H200_HBM, rel=1e-9)
    smallest = min((r for r in copies if r[4]), key=lambda r: r[1])
    assert hw.speeds.kernel_floor_s == pytest.approx(smallest[3], rel=1e-9)
    assert 1e-6 < smallest[3] < 2e-6  # a 64 KiB copy: the public 1.1-1.3 us of a tiny kernel


def test_attention_rates_are_the_sdpa_measurements():
    hw = h200()
    for backend in ("flash2", "cudnn"):
        for d, s, fwd, bwd, *_ in KERNELS["attention"][backend]:
            assert hw.speeds.attention_flops_per_s(backend, s, d, False, hw.peak_flops) == \
                pytest.approx(fwd * 1e12, rel=1e-9)
            assert hw.speeds.attention_flops_per_s(backend, s, d, True, hw.peak_flops) == \
                pytest.approx(bwd * 1e12, rel=1e-9)


def test_host_cost_per_kernel_is_the_host_bound_layers():
    counts = {"LayerNorm": 27 + 46, "RMSNorm": 55 + 82}  # tests/fidelity/megatron_kernel_count_probe.py's counts
    ratios = [c["per_layer"]["host_s"] / counts[c["case"]["norm"]] for c in LAYERS["cases"].values()
              if c["per_layer"]["gpu_busy_s"] < c["per_layer"]["host_s"] / 2]
    assert len(ratios) == 4  # the two tiny layers and the two CI-sized ones
    assert h200().host_seconds_per_kernel == pytest.approx(statistics.mean(ratios), rel=1e-9)


# the eager softmax path's kernels in the profile: (table kind, name fragment, bytes per score element a call)
PASSES = [("memcpy", "Memcpy DtoD", 4), ("cast_up", "unrolled_elementwise_kernel<at::native::direct_copy_kernel", 6),
          ("masked_fill", "masked_fill_kern", 8), ("softmax_forward", "cunn_SoftMaxForward", 8),
          ("softmax_backward", "cunn_SoftMaxBackward", 12), ("multiply", "MulFunctor<float>", 12),
          ("cast_down", "bfloat16_copy_kernel_cuda", 6)]


def test_eager_pass_rates_are_the_profile():
    case = LAYERS["cases"]["gpt h4096 s4096 b1"]
    extra = case["depths"][1] - case["depths"][0]
    shallow, deep = case["shallow"]["by_kernel"], case["deep"]["by_kernel"]
    scores = case["case"]["batch"] * case["case"]["heads"] * case["case"]["seq"] ** 2
    copy = max((r for r in KERNELS["memory"]["rows"] if r[0] == "copy"), key=lambda r: r[1])[2] * 1e9
    hw = h200()
    for kind, fragment, nbytes in PASSES:
        names = [k for k in deep if fragment in k]
        calls = sum(deep[k][0] - shallow.get(k, [0, 0])[0] for k in names) / extra
        micros = sum(deep[k][1] - shallow.get(k, [0, 0])[1] for k in names) / extra
        assert calls >= 1, kind
        assert hw.speeds.pass_fraction(kind) == pytest.approx(nbytes * scores * calls / (micros / 1e6) / copy,
                                                              rel=0.01), kind


def _guard_layer(case: dict) -> tuple[float, float]:
    """(GPU seconds, host seconds) guard prices for one layer's forward and backward."""
    job, hw = _job(case), h200()
    lt = layer_time(job, hw, 0)
    forward, backward = per_step.layer_kernels(job, False)
    return lt.forward.seconds + lt.backward.seconds, (forward + backward) * hw.host_seconds_per_kernel


@pytest.mark.parametrize("name", [n for n, c in LAYERS["cases"].items()
                                  if c["per_layer"]["gpu_busy_s"] > c["per_layer"]["host_s"]])
def test_gpu_bound_layer_time(name):
    """The GPU's profiled time per layer. The eager passes' rates come from the 'gpt h4096' case's profile, so
    that case checks the sum of the terms, the others (other shapes, SwiGLU, RoPE, GQA) check the model."""
    measured = LAYERS["cases"][name]
    gpu, _ = _guard_layer(measured["case"])
    assert gpu == pytest.approx(measured["per_layer"]["gpu_busy_s"], rel=0.10)


@pytest.mark.parametrize("name", [n for n, c in LAYERS["cases"].items()
                                  if c["per_layer"]["gpu_busy_s"] < c["per_layer"]["host_s"] / 2])
def test_host_bound_layer_time(name):
    """The wall time of a layer whose GPU idles: one host cost per kernel for every layer kind, so within 25 %."""
    measured = LAYERS["cases"][name]
    gpu, host = _guard_layer(measured["case"])
    assert host > gpu
    assert host == pytest.approx(measured["per_layer"]["wall_s"], rel=0.25)


def test_ci_sized_layers_gpu_time():
    """The CI-sized layers are host-bound, but their GPU time (profiled) is priced too: within 15 %."""
    for name in ("ci gpt h512 s1024 b4", "ci llama h512 s1024 b4"):
        measured = LAYERS["cases"][name]
        gpu, _ = _guard_layer(measured["case"])
        assert gpu == pytest.approx(measured["per_layer"]["gpu_busy_s"], rel=0.15), name


def test_torch_softmax_follows_megatrons_kernel_choice():
    """FusedScaleMaskSoftmax.is_kernel_available: the fused kernel only when asked for and 16 < keys <= 4096."""
    base = {"hidden": 512, "heads": 8, "ffn": 2048, "batch": 1}
    off = _job({**base, "seq": 2048})
    assert off.step.torch_softmax and off.softmax_bytes == 4
    args = ("--num-layers 2 --hidden-size 512 --num-attention-heads 8 --seq-length {s} --max-position-embeddings {s} "
            "--micro-batch-size 1 --global-batch-size 8 --bf16 --transformer-impl local --vocab-size 256 "
            "--attention-softmax-in-fp32")
    settings = Settings()
    settings.world_size = 8
    fused = read(Request(megatron_args=(args.format(s=2048),)), settings).job.required()
    assert not fused.step.torch_softmax and fused.softmax_bytes is None
    long = read(Request(megatron_args=(args.format(s=8192),)), settings).job.required()
    assert long.step.torch_softmax and long.softmax_bytes == 4
    te = read(Request(megatron_args=(args.format(s=8192).replace("local", "transformer_engine")
                                     + " --attention-backend unfused",)), settings).job.required()
    assert not te.step.torch_softmax


@pytest.mark.parametrize("script", ["gpu_kernels.py", "gpu_layer.py"])
def test_gpu_scripts_run_dry(script, tmp_path):
    """The GPU scripts' code paths, on this CPU with tiny shapes, so they do not rot between GPU loans."""
    out = tmp_path / "out.json"
    done = subprocess.run([sys.executable, str(ROOT / "bench" / script), "--dry", "--out", str(out)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(out.read_text())
    if script == "gpu_kernels.py":
        assert result["gemm"]["bf16"] and result["memory"]["rows"] and result["host"]["issue_s_per_kernel"] > 0
    else:
        assert set(result["cases"]) == {"host gpt h64", "host llama h64"}
        # both depths ran and were timed (their difference, one layer's time, is noise on a busy CPU)
        assert all(c["shallow"]["host_s"] > 0 and c["deep"]["host_s"] > 0 for c in result["cases"].values())
