"""The GPU kit: one script for a lent H100/H200 (about 8 minutes) that measures what guard predicts.

    python bench/gpu_kit.py --out OUT_DIR [--budget 450]   # on the GPU machine; OUT_DIR/gpu_kit.json keeps it all
    python bench/gpu_kit.py --out OUT_DIR --dry            # this CPU: tiny cases, one step (the test suite's check)

(a) memory: megatron-core 0.16.1 GPT models built from configs (random weights, nothing downloaded), wrapped in its
    DistributedDataParallel with its optimizer as pretrain_gpt.py runs them (one rank), three training steps each;
    torch.cuda.max_memory_allocated, memory_reserved and NVML's used memory after the steps, beside guard's
    prediction for the Megatron-LM command that describes the same job (allocated: the peak less guard's runtime
    term; NVML: the whole peak). Cases: dense GPT, Llama with GQA, MoE (local experts), full recompute, the
    distributed optimizer. Then LoRA and QLoRA over a transformers Llama as LLaMA-Factory trains them
    (bench/gpu_kit_peft.py; bitsandbytes carried as a wheel); what max_memory_allocated sees of a CUDA-graph
    replay (bench/gpu_kit_graphs.py). Then DeepSpeed ZeRO-0 and ZeRO-1 on one rank over a transformers Llama when DeepSpeed is
    importable (carried as a wheel: its ops build at run time with the machine's nvcc).
(b) launch: bench/launch_gpu.py (guard launch's NVML probe against nvidia-smi and torch; a job that fits starts,
    one that does not is stopped or rewritten) when time is left.
(c) kernels: bench/gpu_kernels.py (GEMM, attention, memory-bound kernels) when time is left.
Every case is timed; a case that fails is recorded with its error, never hidden. megatron-core travels as a wheel
(.whl/, the device's Python 3.12): `pip install --no-deps .whl/megatron_core-*.whl` before running.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FIDELITY = ROOT / "tests" / "fidelity"
GIB = 2**30
STEPS = 3
# name: megatron_activation_probe case (its TransformerConfig: no dropout, local spec) + the optimizer's sharding
MEGATRON = {
    "dense gpt h1024": {"hidden": 1024, "heads": 16, "ffn": 4096, "seq": 2048, "batch": 2, "layers": 8,
                        "vocab": 32768},
    "llama gqa h1024": {"hidden": 1024, "heads": 16, "groups": 4, "ffn": 2816, "seq": 2048, "batch": 2, "layers": 8,
                        "vocab": 32768, "norm": "RMSNorm", "swiglu": True, "bias": False, "position": "rope"},
    # gated experts: megatron-core fuses the routing probabilities into SwiGLU only (experts.py)
    "moe 8 experts top-2": {"hidden": 1024, "heads": 16, "ffn": 4096, "moe_ffn": 1024, "experts": 8, "topk": 2,
                            "seq": 2048, "batch": 2, "layers": 4, "vocab": 32768, "dispatcher": "alltoall",
                            "norm": "RMSNorm", "swiglu": True, "bias": False, "position": "rope"},
    "dense gpt, full recompute": {"hidden": 1024, "heads": 16, "ffn": 4096, "seq": 2048, "batch": 4, "layers": 8,
                                  "vocab": 32768, "recompute": "full"},
    "dense gpt, distributed optimizer": {"hidden": 1024, "heads": 16, "ffn": 4096, "seq": 2048, "batch": 2,
                                         "layers": 8, "vocab": 32768, "distributed_optimizer": True},
}
DRY_SHAPE = {"hidden": 64, "heads": 4, "ffn": 256, "seq": 32, "batch": 2, "layers": 2, "vocab": 256}
# DeepSpeed over a transformers Llama, one rank: name -> ZeRO stage
DEEPSPEED = {"deepspeed zero-0 llama": 0, "deepspeed zero-1 llama": 1}
LLAMA = {"model_type": "llama", "hidden_size": 1024, "intermediate_size": 2816, "num_hidden_layers": 8,
         "num_attention_heads": 16, "num_key_value_heads": 4, "vocab_size": 32768, "max_position_embeddings": 2048,
         "tie_word_embeddings": False}
DRY_LLAMA = {**LLAMA, "hidden_size": 64, "intermediate_size": 172, "num_hidden_layers": 2, "num_attention_heads": 4,
             "num_key_value_heads": 2, "vocab_size": 256, "max_position_embeddings": 64}
DS_SEQ, DS_MICRO = 2048, 2


def megatron_command(case: dict) -> str:
    """The Megatron-LM arguments of the job a case builds (megatron_activation_probe's TransformerConfig)."""
    args = (f"--num-layers {case['layers']} --hidden-size {case['hidden']} --num-attention-heads {case['heads']} "
            f"--ffn-hidden-size {case['ffn']} --seq-length {case['seq']} --max-position-embeddings {case['seq']} "
            f"--micro-batch-size {case['batch']} --global-batch-size {case['batch']} --bf16 --transformer-impl local "
            f"--hidden-dropout 0 --attention-dropout 0 --vocab-size {case['vocab']} --no-masked-softmax-fusion "
            "--attention-softmax-in-fp32 --make-vocab-size-divisible-by 1 ")
    if case.get("groups"):
        args += f"--group-query-attention --num-query-groups {case['groups']} "
    if case.get("norm") == "RMSNorm":
        args += "--normalization RMSNorm "
    if case.get("swiglu"):
        args += "--swiglu "
    if case.get("bias") is False:
        args += "--disable-bias-linear "
    if case.get("experts"):
        args += (f"--num-experts {case['experts']} --moe-router-topk {case.get('topk', 2)} --moe-ffn-hidden-size "
                 f"{case['moe_ffn']} --moe-token-dispatcher-type {case.get('dispatcher', 'alltoall')} ")
    if case.get("recompute") == "full":
        args += "--recompute-granularity full --recompute-method uniform --recompute-num-layers 1 "
    if case.get("distributed_optimizer"):
        args += "--use-distributed-optimizer "
    args += "--position-embedding-type " + ("rope" if case.get("position") == "rope" else "learned_absolute")
    return args


def predicted(request, gpu: str | None) -> dict:
    """guard's prediction for one rank: the whole peak, the allocator's share of it (less the runtime term), the
    stated margin, and the term that dominates."""
    from guard.intake.read import read
    from guard.memory.estimate import estimate
    from guard.memory.gpu_choice import choose_gpu
    from guard.settings import Settings

    settings = Settings()
    settings.world_size, settings.gpus_per_node = 1, 1
    job = read(request, settings).job.required()
    result = estimate(job, choose_gpu(gpu) if gpu else None)
    st = result.peak_stage
    comps = st.components
    return {"param_count": result.param_count, "trainable_count": result.trainable_param_count,
            "peak_bytes": st.peak_bytes,
            "allocated_bytes": st.peak_bytes - comps["runtime"],
            "lower_bytes": st.margin.lower if st.margin else None, "upper_bytes": st.margin.upper if st.margin else None,
            "phase": st.phase, "dominant": max(comps, key=comps.get), "verdict": result.verdict}


def _gpu_memory(torch) -> dict:
    """torch's allocator peaks and NVML's used memory on GPU 0 (None where there is no GPU or no NVML)."""
    if not torch.cuda.is_available():
        return {"max_allocated": None, "max_reserved": None, "nvml_used": None}
    out = {"max_allocated": torch.cuda.max_memory_allocated(), "max_reserved": torch.cuda.max_memory_reserved()}
    try:
        import pynvml

        pynvml.nvmlInit()
        out["nvml_used"] = pynvml.nvmlDeviceGetMemoryInfo(pynvml.nvmlDeviceGetHandleByIndex(0)).used
    except Exception:  # noqa: BLE001 - nvidia-ml-py absent: the allocator's figures stand alone
        out["nvml_used"] = None
    return out


def megatron_case(name: str, case: dict, device: str) -> dict:
    """Three training steps of megatron-core's DDP-wrapped GPT with its optimizer (the optimizer needs CUDA: on the
    CPU the dry run stops at the gradients)."""
    import torch
    from megatron.core.distributed import DistributedDataParallel, DistributedDataParallelConfig

    from megatron_activation_probe import build

    dist_opt = bool(case.get("distributed_optimizer"))
    model = build(case).to(device)
    built = sum(p.numel() for p in model.parameters())  # the command guard prices must describe this model
    ddp = DistributedDataParallel(config=model.config, module=model, ddp_config=DistributedDataParallelConfig(
        grad_reduce_in_fp32=True, use_distributed_optimizer=dist_opt))
    optimizer = None
    if device == "cuda":
        from megatron.core.optimizer import OptimizerConfig, get_megatron_optimizer

        optimizer = get_megatron_optimizer(OptimizerConfig(optimizer="adam", lr=1e-5, bf16=True,
                                                           use_distributed_optimizer=dist_opt), [ddp])
    s, b = case["seq"], case["batch"]
    tokens = torch.randint(0, case["vocab"], (b, s), device=device)
    position = torch.arange(s, device=device).unsqueeze(0).expand(b, s)
    mask = torch.triu(torch.ones(1, 1, s, s, dtype=torch.bool, device=device), diagonal=1)
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    for _ in range(STEPS if device == "cuda" else 1):
        ddp.zero_grad_buffer()
        if optimizer is not None:
            optimizer.zero_grad()
        ddp(tokens, position, mask, labels=tokens).float().mean().backward()
        ddp.finish_grad_sync()
        if optimizer is not None:
            optimizer.step()
    if device == "cuda":
        torch.cuda.synchronize()
    measured = {**_gpu_memory(torch), "param_count": built}
    del ddp, model, optimizer
    if device == "cuda":
        torch.cuda.empty_cache()
    return measured


def deepspeed_case(stage: int, config: dict, device: str, work: Path) -> dict:
    """DeepSpeed's engine over a transformers Llama on one rank, three steps."""
    import deepspeed
    import torch
    import transformers

    ds = {"train_micro_batch_size_per_gpu": DS_MICRO, "gradient_accumulation_steps": 1,
          "zero_optimization": {"stage": stage}, "bf16": {"enabled": True}, "steps_per_print": 10**9,
          "optimizer": {"type": "AdamW", "params": {"lr": 1e-5, "torch_adam": True}}}
    model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**{k: v for k, v in config.items()
                                                                       if k != "model_type"}))
    engine, *_ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=ds)
    seq = min(DS_SEQ, config["max_position_embeddings"])
    ids = torch.randint(0, config["vocab_size"], (DS_MICRO, seq), device=engine.device)
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    for _ in range(STEPS if device == "cuda" else 1):
        loss = engine(input_ids=ids, labels=ids).loss
        engine.backward(loss)
        engine.step()
    measured = _gpu_memory(torch)
    (work / "ds.json").write_text(json.dumps({k: v for k, v in ds.items() if k != "optimizer"}))
    return measured


def _row(name: str, measured: dict, guard: dict, seconds: float) -> dict:
    row = {"case": name, "seconds": round(seconds, 1), **measured, "guard": guard}
    if measured.get("max_allocated"):
        row["error_allocated"] = guard["allocated_bytes"] / measured["max_allocated"] - 1
        row["within_margin"] = (guard["lower_bytes"] is not None and guard["upper_bytes"] is not None and
                                guard["lower_bytes"] - (guard["peak_bytes"] - guard["allocated_bytes"])
                                <= measured["max_allocated"] <=
                                guard["upper_bytes"] - (guard["peak_bytes"] - guard["allocated_bytes"]))
    if measured.get("nvml_used"):
        row["error_nvml"] = guard["peak_bytes"] / measured["nvml_used"] - 1
    return row


def memory(device: str, gpu: str | None, deadline: float, work: Path) -> list[dict]:
    from guard.intake.request import Request

    rows = []
    for name, case in MEGATRON.items():
        if time.monotonic() > deadline:
            rows.append({"case": name, "skipped": "out of time"})
            continue
        if device == "cpu":
            case = {**case, **DRY_SHAPE, **({"moe_ffn": 64} if case.get("experts") else {}),
                    **({"groups": 2} if case.get("groups") else {})}
        start = time.perf_counter()
        try:
            guard = predicted(Request(megatron_args=(megatron_command(case),)), gpu)
            rows.append(_row(name, megatron_case(name, case, device), guard, time.perf_counter() - start))
        except Exception as err:  # noqa: BLE001 - a case that fails is a finding of the kit
            rows.append({"case": name, "error": f"{type(err).__name__}: {err}"[:300]})
        print(json.dumps(rows[-1]), flush=True)
    from gpu_kit_graphs import graph_rows
    from gpu_kit_peft import peft_rows

    rows += peft_rows(device, gpu, deadline, work, DRY_LLAMA if device == "cpu" else LLAMA, predicted, _gpu_memory,
                      _row)
    rows += graph_rows(device) if time.monotonic() < deadline else [{"case": "cuda graph replay",
                                                                       "skipped": "out of time"}]
    rows += _deepspeed_rows(device, gpu, deadline, work)
    return rows


def _deepspeed_rows(device: str, gpu: str | None, deadline: float, work: Path) -> list[dict]:
    """The DeepSpeed cases, where DeepSpeed is installed and a GPU runs them (its CPU engine is the census's)."""
    from guard.intake.request import Request

    rows = []
    try:
        import deepspeed  # noqa: F401
    except ImportError:
        return [{"case": name, "skipped": "deepspeed is not installed"} for name in DEEPSPEED]
    config = DRY_LLAMA if device == "cpu" else LLAMA
    (work / "llama").mkdir(exist_ok=True)
    (work / "llama" / "config.json").write_text(json.dumps(config))
    for name, stage in DEEPSPEED.items():
        if device == "cpu" or time.monotonic() > deadline:
            rows.append({"case": name, "skipped": "CPU dry run" if device == "cpu" else "out of time"})
            continue
        start = time.perf_counter()
        try:
            measured = deepspeed_case(stage, config, device, work)
            guard = predicted(Request(deepspeed=str(work / "ds.json"), hf_config=str(work / "llama" / "config.json"),
                                      seq_length=min(DS_SEQ, config["max_position_embeddings"]),
                                      micro_batch=DS_MICRO), gpu)
            rows.append(_row(name, measured, guard, time.perf_counter() - start))
        except Exception as err:  # noqa: BLE001
            rows.append({"case": name, "error": f"{type(err).__name__}: {err}"[:300]})
        print(json.dumps(rows[-1]), flush=True)
    return rows


def _script(name: str, args: list[str], deadline: float, out: Path) -> dict:
    """Another bench script, bounded by what is left of the budget."""
    left = int(deadline - time.monotonic())
    if left < 30:
        return {"script": name, "skipped": "out of time"}
    try:
        done = subprocess.run([sys.executable, str(ROOT / "bench" / name), *args], capture_output=True, text=True,
                              timeout=left, cwd=ROOT)
        return {"script": name, "returncode": done.returncode, "tail": (done.stdout + done.stderr)[-2000:]}
    except subprocess.TimeoutExpired:
        return {"script": name, "skipped": "ran past the budget"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--dry", action="store_true", help="this CPU: tiny cases, one step (the test suite's check)")
    parser.add_argument("--budget", type=float, default=450, help="seconds for everything (default 450)")
    parser.add_argument("--gpu", default=None, help="guard's catalog name for the GPU (default: from torch)")
    args = parser.parse_args()
    sys.path.insert(0, str(FIDELITY))
    sys.path.insert(0, str(ROOT))
    import torch

    import megatron_activation_probe as probe

    deadline = time.monotonic() + args.budget
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    device = "cpu" if args.dry else "cuda"
    sys.path.insert(0, str(ROOT / "bench"))
    try:  # before the CPU setup stubs torch.cuda.Stream, which transformers' annotations evaluate at import
        import peft  # noqa: F401
        import transformers  # noqa: F401
    except ImportError:
        pass
    if args.dry:
        probe.cpu_setup()
    else:
        from gpu_layer import gpu_setup

        gpu_setup()
    gpu = args.gpu or (None if args.dry else ("H200" if "H200" in torch.cuda.get_device_name(0) else "H100"))
    found = {"device": "cpu (dry run)" if args.dry else torch.cuda.get_device_name(0), "torch": torch.__version__,
             "gpu_catalog_entry": gpu}
    with tempfile.TemporaryDirectory() as work:
        found["memory"] = memory(device, gpu, deadline, Path(work))
    if not args.dry:
        found["launch"] = _script("launch_gpu.py", [str(out)], deadline, out)
        found["kernels"] = _script("gpu_kernels.py", ["--out", str(out / "kernels.json"),
                                                      "--budget", str(max(30, int(deadline - time.monotonic()) - 20))],
                                   deadline, out)
    (out / "gpu_kit.json").write_text(json.dumps(found, indent=1))
    priced = [r for r in found["memory"] if "error_allocated" in r]
    for r in priced:
        print(f"{r['case']:34} measured {r['max_allocated'] / GIB:7.3f} GiB, guard {r['guard']['allocated_bytes'] / GIB:7.3f}"
              f" GiB ({100 * r['error_allocated']:+.1f} %), within margin: {r['within_margin']}")
    print(f"{len(priced)} cases measured, {sum('error' in r for r in found['memory'])} failed; {out / 'gpu_kit.json'}")


if __name__ == "__main__":
    main()
