"""guard launch on a real CUDA GPU (run where one is; CI never has one): the probe against nvidia-smi and torch,
start / abort / rewrite against the GPU's real free memory (another process holding most of it), the start-up
cost beside torchrun alone in the same run, and an HF Trainer program's real torch.cuda.max_memory_allocated
beside what guard predicted for it.

    python bench/launch_gpu.py [OUT_DIR]      # prints the figures; OUT_DIR/launch_gpu.json keeps them
"""

from __future__ import annotations

import json
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures" / "launch"
GIB = 2**30
ABORT_FREE = 6 * GIB  # what the holding process leaves: too little for gpt3-125m even at micro-batch 1 (fp32)
REWRITE_FREE = 14 * GIB  # enough for it at a smaller micro-batch
MODEL = ["--model", "gpt3-125m", "--seq-length", "2048"]
REPEATS = 3
# the HF program's model: a Llama of 0.49B parameters, bf16 in its config (from_pretrained loads it so)
LLAMA = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 2048,
         "intermediate_size": 5632, "num_hidden_layers": 8, "num_attention_heads": 16, "num_key_value_heads": 4,
         "vocab_size": 32000, "max_position_embeddings": 4096, "rms_norm_eps": 1e-5, "tie_word_embeddings": False,
         "torch_dtype": "bfloat16"}
HF_CASES = {  # name: the program's own arguments (TrainingArguments and its block_size)
    "micro 4, no checkpointing": ["--per_device_train_batch_size", "4"],
    "micro 8, gradient checkpointing": ["--per_device_train_batch_size", "8", "--gradient_checkpointing", "True"],
}
SEQ = 2048


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(command: list[str], cwd: Path, timeout: int = 300) -> tuple[int, str, float]:
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
           "PYTHONWARNINGS": "ignore", "OMP_NUM_THREADS": "1"}
    started = time.perf_counter()
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    return done.returncode, done.stdout + done.stderr, time.perf_counter() - started


def torchrun(*program: str) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc-per-node", "1",
            "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{_port()}", *program]


def guard(*args: str) -> list[str]:
    return [sys.executable, "-m", "guard", *args]


def probes(work: Path) -> dict:
    """guard's probe (NVML; torch when NVML is absent) beside nvidia-smi and torch.cuda.mem_get_info."""
    code = ("import json, time, torch; torch.cuda.is_available(); from guard.launch import probe; "
            "t = time.perf_counter(); s = probe.sample(0, 0); "
            "s['seconds'] = time.perf_counter() - t; print(json.dumps(s))")
    _, out, _ = run([sys.executable, "-c", code], work)
    nvml = json.loads(out.strip().splitlines()[-1])
    torch_code = ("import json, time, torch; t = time.perf_counter(); f, a = torch.cuda.mem_get_info(0); "
                  "print(json.dumps({'free': f, 'total': a, 'seconds': time.perf_counter() - t}))")
    _, out, _ = run([sys.executable, "-c", torch_code], work)
    cuda = json.loads(out.strip().splitlines()[-1])
    smi = subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total,memory.free", "--format=csv,noheader,nounits"],
                         capture_output=True, text=True).stdout.strip()
    print(f"GPU: {smi}")
    print(f"guard probe ({nvml['source']}): total {nvml['total'] / GIB:.2f} GiB, free {nvml['free'] / GIB:.2f} GiB, "
          f"{nvml['seconds'] * 1000:.0f} ms")
    print(f"torch.cuda.mem_get_info (with its own CUDA context): total {cuda['total'] / GIB:.2f} GiB, "
          f"free {cuda['free'] / GIB:.2f} GiB, {cuda['seconds'] * 1000:.0f} ms")
    return {"nvidia_smi": smi, "guard": nvml, "torch": cuda}


def overhead(work: Path) -> dict:
    program = ("show_argv.py", "--deepspeed_config", "ds8.json")
    bare = [run(torchrun(*program), work)[2] for _ in range(REPEATS)]
    wrapped = []
    for _ in range(REPEATS):
        code, text, seconds = run(guard("launch", *MODEL, "--", *torchrun(*program)), work)
        assert code == 0 and "every rank fits" in text and "TRAINING STARTED" in text, text[-3000:]
        wrapped.append(seconds)
    b, w = statistics.median(bare), statistics.median(wrapped)
    print(f"start-up, 1 rank, median of {REPEATS}: torchrun alone {b:.2f} s, guard launch -- torchrun {w:.2f} s "
          f"(+{w - b:.2f} s)")
    return {"torchrun_s": b, "guard_launch_s": w}


def hold(free: int, leave: int) -> subprocess.Popen:
    """Another process holding all but `leave` bytes of the GPU, as a leftover job or a neighbour would."""
    code = ("import sys, time, torch; x = torch.empty(int(sys.argv[1]), dtype=torch.uint8, device='cuda'); "
            "print('HELD', flush=True); time.sleep(900)")
    holder = subprocess.Popen([sys.executable, "-c", code, str(free - leave)], stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "HELD"
    return holder


def short_gpu(work: Path, free: int) -> dict:
    program = ("show_argv.py", "--deepspeed_config", "ds8.json")
    holder = hold(free, ABORT_FREE)
    try:
        code, text, _ = run(guard("launch", *MODEL, "--", *torchrun(*program)), work)
    finally:
        holder.kill()
        holder.wait()
    named = f"pid {holder.pid}" in text
    print(f"abort with {ABORT_FREE / GIB:.0f} GiB left free: exit {code}, training started: "
          f"{'TRAINING STARTED' in text}, the holding process named: {named}")
    print("\n".join("    " + line for line in text.splitlines() if "guard launch" in line or "rank 0" in line
                    or "another process" in line or "layout" in line))
    holder = hold(free, REWRITE_FREE)
    try:
        code2, text2, _ = run(guard("launch", *MODEL, "--policy", "rewrite", "--allow", "micro_batch", "--",
                                    *torchrun(*program)), work)
    finally:
        holder.kill()
        holder.wait()
    argv = re.findall(r"TRAINING STARTED rank 0 argv (\[.*?\])", text2)
    print(f"rewrite with {REWRITE_FREE / GIB:.0f} GiB left free: exit {code2}, the program started with "
          f"{argv[0] if argv else 'nothing'}")
    print("\n".join("    " + line for line in text2.splitlines() if "guard launch" in line or "micro" in line))
    return {"abort_exit": code, "abort_started": "TRAINING STARTED" in text, "holder_named": named,
            "rewrite_exit": code2, "rewrite_argv": argv,
            "abort_report": text[-4000:], "rewrite_report": text2[-4000:]}


def hf_program(work: Path) -> list[dict]:
    """The real allocator peak of an HF Trainer program, started by guard launch, beside guard's prediction for
    the same command less its runtime term (CUDA context, NCCL, fragmentation: what the allocator does not count)."""
    rows = []
    for name, args in HF_CASES.items():
        program = ("hf_trainer.py", "--model_name_or_path", "./llama", "--block_size", str(SEQ), "--bf16",
                   "--output_dir", "out", "--max_steps", "3", "--report_to", "none", "--save_strategy", "no", *args)
        script = work / "hf.sh"
        script.write_text(" ".join(["torchrun", "--nproc-per-node", "1", *program]) + "\n")
        _, out, _ = run(guard("estimate", "--seq-length", str(SEQ), "--format", "json", str(script)), work)
        predicted = json.loads(out)["ranks"][0]
        allocated = predicted["peak_bytes"] - predicted["components"]["runtime"]
        code, text, seconds = run(guard("launch", "--seq-length", str(SEQ), "--", *torchrun(*program)), work, 600)
        peak = re.findall(r"PEAK (\{.*\})", text)
        if code != 0 or not peak:
            print(f"{name}: exit {code}\n{text[-3000:]}")
            rows.append({"case": name, "exit": code, "log": text[-3000:]})
            continue
        real = json.loads(peak[0])
        error = (allocated - real["max_allocated"]) / real["max_allocated"]
        print(f"{name:34} real max_allocated {real['max_allocated'] / GIB:6.2f} GiB (reserved "
              f"{real['max_reserved'] / GIB:.2f}, params {real['dtype']}), guard {allocated / GIB:6.2f} GiB "
              f"({error:+.1%}), phase {predicted['phase']}, ran {seconds:.0f} s")
        rows.append({"case": name, "real": real, "predicted_allocated": allocated, "error": error,
                     "components": predicted["components"], "phase": predicted["phase"]})
    return rows


def prepare(work: Path) -> None:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    for name in ("show_argv.py",):
        (work / name).write_bytes((FIXTURES / name).read_bytes())
    config = json.loads((FIXTURES / "ds_config.json").read_text())
    (work / "ds8.json").write_text(json.dumps({**config, "train_batch_size": 8}))  # 8 x 1 x 1 rank
    (work / "hf_trainer.py").write_bytes((ROOT / "bench" / "programs" / "hf_trainer.py").read_bytes())
    (work / "llama").mkdir()
    (work / "llama" / "config.json").write_text(json.dumps(LLAMA))
    model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(work / "llama"), dtype=torch.bfloat16)
    model.save_pretrained(work / "llama")


def main() -> None:
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else None
    work = Path(tempfile.mkdtemp(prefix="guard-gpu-"))
    prepare(work)
    found = {"probes": probes(work)}
    found["overhead"] = overhead(work)
    found["short_gpu"] = short_gpu(work, found["probes"]["torch"]["free"])
    found["hf_program"] = hf_program(work)
    if out:
        out.mkdir(parents=True, exist_ok=True)
        (out / "launch_gpu.json").write_text(json.dumps(found, indent=1))


if __name__ == "__main__":
    main()
