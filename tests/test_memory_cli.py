"""`guard estimate` as a command: the JSON contract, exit codes, bad input, plots, Megatron-DeepSpeed jobs."""

from __future__ import annotations

import json

import pytest

from conftest import run_guard

SEED = "examples/memory/llama2_13b_pp4_dp2.sh"
GPT3 = "examples/memory/gpt3_175b_tp8_pp8_vpp.sh"
CONTRACT_COMPONENTS = {"params", "grads", "optimizer", "activations", "embedding_activations", "logits", "buffers",
                       "runtime"}


def test_json_contract_has_one_entry_per_rank():
    code, out, err = run_guard("estimate", GPT3, "--gpu-memory", "80GiB", "--format", "json")
    assert code == 0, err
    data = json.loads(out)
    assert data["layout"] | {} and {"world_size", "tp", "pp", "dp", "cp", "ep", "vpp", "micro_batch_size",
                                    "num_microbatches"} <= set(data["layout"])
    assert (data["layout"]["tp"], data["layout"]["pp"], data["layout"]["dp"], data["layout"]["vpp"]) == (8, 8, 16, 3)
    ranks = data["ranks"]
    assert [r["rank"] for r in ranks] == list(range(1024))
    for entry in ranks:
        assert CONTRACT_COMPONENTS <= set(entry["components"])
        # the components are assembled term by term, the phases from their own sums: the peak less the runtime the
        # allocator adds is the allocated bytes of the phase named as the peak, and that phase is the largest
        assert entry["peak_bytes"] - entry["components"]["runtime"] == entry["phases"][entry["phase"]]
        assert entry["phases"][entry["phase"]] == max(entry["phases"].values())
        assert {"tp_rank", "pp_rank", "dp_rank", "layers", "inflight_microbatches"} <= set(entry)
    # Megatron's rank order: TP fastest, then DP, then PP
    assert (ranks[9]["tp_rank"], ranks[9]["dp_rank"], ranks[9]["pp_rank"]) == (1, 1, 0)
    assert ranks[128]["pp_rank"] == 1
    assert data["gpu"]["capacity_bytes"] == 80 * 2**30
    assert data["peak"]["peak_bytes"] == max(r["peak_bytes"] for r in ranks)
    assert data["model"]["param_count"] == pytest.approx(175e9, rel=0.01)
    # interleaved 1F1B, p = 8, v = 3, G = 8: 2 * 7 + 2 * 8 + 1 = 31 chunks on stage 0, 17 on stage 7
    assert ranks[0]["inflight_microbatches"] == 31 and ranks[1023]["inflight_microbatches"] == 17


@pytest.mark.parametrize("argv,needle", [
    (["estimate"], "nothing to estimate"),
    (["estimate", "no/such/script.sh"], "no/such/script.sh"),
    (["estimate", SEED, "--gpu", "Z9000"], "unknown GPU"),
    (["estimate", SEED, "--gpu-memory", "lots"], "expected a size"),
    (["estimate", SEED, "--set", "cuda_context"], "NAME=VALUE"),
    (["estimate", SEED, "--set", "warp_drive=1GiB"], "NAME=VALUE"),
    (["estimate", SEED, "--world-size", "6", "--force-world-size"], "does not divide"),
    (["estimate", "--deepspeed", "examples/memory/ds_zero3_llama2_7b.json", "--world-size", "8"], "--hf-config"),
    (["estimate", "--deepspeed", "examples/memory/ds_zero3_llama2_7b.json", "--model", "llama-2-7b"],
     "--world-size"),
    (["estimate", "--deepspeed", "examples/deepspeed/ds_config_zero3_hf.json", "--model", "llama-2-7b",
      "--world-size", "8", "--seq-length", "512", "--micro-batch-size", "1"], "--precision"),
    (["estimate", "--megatron-args", "pretrain_gpt.py --num-layers 2", "--world-size", "1"], "--hidden-size"),
    (["estimate", "--megatron-args", "pretrain_gpt.py --num-layers 2 --hidden-size 64 --num-attention-heads 4 "
      "--seq-length 128 --micro-batch-size 1 --pipeline-model-parallel-layout 'E|t*3|tL'", "--world-size", "2",
      "--vocab-size", "100"], "layout"),
    (["check", "--gpu", "Z9000", "examples/megatron"], "unknown GPU"),
])
def test_bad_input_is_one_line_and_exit_2(argv, needle):
    code, out, err = run_guard(*argv)
    assert code == 2, (out, err)
    assert needle in err and "Traceback" not in err and len(err.strip().splitlines()) == 1, err


def test_megatron_deepspeed_job_reads_zero_from_the_heredoc_config():
    code, out, err = run_guard("estimate", "examples/megatron-deepspeed/zero3_with_pipeline.sh", "--vocab-size",
                               "50257", "--format", "json")
    data = json.loads(out)
    assert data["layout"]["framework"] == "megatron-deepspeed" and data["layout"]["zero_stage"] == 3
    # the example is broken on purpose (guard check: MDS001-MDS004): priced as written, never said to fit
    assert code == 1 and data["fits"] is None
    assert {r["code"] for r in data["refused"]} >= {"MDS001", "MDS004"}
    assert data["layout"]["ep"] == 1  # Megatron-DeepSpeed's --num-experts default [1] is a dense model


def test_deepspeed_pipeline_engine_stash():
    """Megatron-DeepSpeed with the pipeline engine: stage s keeps min(stages - s, m) microbatches."""
    argv = ("pretrain_gpt.py --num-layers 8 --hidden-size 256 --num-attention-heads 4 --seq-length 256 "
            "--max-position-embeddings 256 --micro-batch-size 1 --global-batch-size 8 --vocab-size 1000 "
            "--pipeline-model-parallel-size 4 --deepspeed --zero-stage 1 --fp16")
    code, out, err = run_guard("estimate", "--megatron-args", argv, "--world-size", "4", "--format", "json")
    assert code == 0, err
    data = json.loads(out)
    assert [r["inflight_microbatches"] for r in data["ranks"]] == [4, 3, 2, 1]


def test_unmodelled_features_are_warnings_in_the_report():
    argv = ("pretrain_gpt.py --num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 128 "
            "--max-position-embeddings 128 --micro-batch-size 1 --vocab-size 100 --bf16 --fp8-format hybrid "
            "--deterministic-mode --cuda-graph-impl transformer_engine")
    code, out, err = run_guard("estimate", "--megatron-args", argv, "--world-size", "1")
    assert code == 0, err
    assert "warning: FP8 training" in out and "warning: deterministic kernels" in out
    code, out, err = run_guard("estimate", "--megatron-args", argv, "--world-size", "1", "--format", "json")
    # CUDA graphs are priced (guard/memory/cuda_graphs.py), so not named
    assert {u["setting"] for u in json.loads(out)["unmodelled"]} == {"--fp8-format", "--deterministic-mode"}


def test_set_overrides_a_runtime_term():
    _, base, _ = run_guard("estimate", SEED, "--format", "json")
    _, more, _ = run_guard("estimate", SEED, "--format", "json", "--set", "cuda_context=1536MiB")
    delta = json.loads(more)["ranks"][0]["components"]["runtime"] - json.loads(base)["ranks"][0]["components"]["runtime"]
    assert delta == 1024 * 2**20


def test_plot_writes_a_file(tmp_path):
    pytest.importorskip("matplotlib")
    target = tmp_path / "stages.svg"
    code, out, err = run_guard("estimate", SEED, "--gpu-memory", "80GiB", "--plot", str(target))
    assert code == 0, err
    assert target.read_text().lstrip().startswith(("<?xml", "<svg"))


def test_check_reads_the_gpu_from_pyproject(tmp_path):
    (tmp_path / "pyproject.toml").write_text('[tool.guard]\ngpu = "40GiB"\n')
    code, out, err = run_guard("check", "--config", str(tmp_path / "pyproject.toml"), "--format", "json",
                               "examples/memory/llama2_13b_pp4_dp2.sh")
    codes = {d["code"] for d in json.loads(out)}
    assert "MEM001" in codes and code == 1
    (tmp_path / "pyproject.toml").write_text('[tool.guard]\ngpu = "Z9000"\n')
    code, out, err = run_guard("check", "--config", str(tmp_path / "pyproject.toml"), "examples/memory")
    assert code == 2 and "gpu" in err


def test_estimate_never_imports_torch():
    import subprocess
    import sys

    probe = ("import sys; from guard.cli import main; main(['estimate', '--gpu-memory', '80GiB', "
             f"'{GPT3}', '--format', 'json']); "
             "sys.stderr.write(' '.join(m for m in ('torch', 'deepspeed', 'megatron') if m in sys.modules))")
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert proc.returncode == 0 and proc.stderr.strip() == "", proc.stderr[-500:]


def test_offload_moves_optimizer_states_to_host_ram(tmp_path):
    """offload_optimizer: the GPU keeps the bf16 parameters; each rank's 16 B/param/N (fp32 master, Adam, fp32
    gradients), a 16-bit copy of its partition and a pinned staging buffer as large as the largest tensor (the
    embedding, 32000 x 4096 bf16: temp_grad_buffer_for_cpu_offload) go to host RAM, summed over the node."""
    config = {"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True}, "optimizer": {"type": "AdamW"},
              "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}}}
    (tmp_path / "ds.json").write_text(json.dumps(config))
    code, out, err = run_guard("estimate", "--deepspeed", str(tmp_path / "ds.json"), "--model", "llama-2-7b",
                               "--world-size", "8", "--gpus-per-node", "8", "--seq-length", "1024", "--format", "json")
    assert code == 0, err
    data = json.loads(out)
    psi = 6_738_415_616
    rank = data["ranks"][0]
    assert rank["components"]["optimizer"] == 0 and rank["components"]["grads"] == 0
    staging = 32000 * 4096 * 2
    assert rank["host_bytes"] == pytest.approx((12 + 4 + 2) * psi / 8 + staging, rel=1e-6)
    assert data["host_bytes_per_node"] == pytest.approx((12 + 4 + 2) * psi + 8 * staging, rel=1e-6)


def test_terminal_output_is_a_rich_table():
    import io

    from guard.memory.estimate import estimate
    from guard.intake.read import read
    from guard.intake.request import Request
    from guard.report import memory_text
    from guard.settings import Settings

    path = "examples/memory/llama2_13b_pp4.sh"
    out = io.StringIO()
    memory_text.write(estimate(read(Request(paths=(path,)), Settings()).job.required()), out, color=True)
    assert "\x1b[" in out.getvalue() and "peak GiB" in out.getvalue()


def test_launcher_world_wins_over_world_size_unless_forced():
    """The seed script's launcher starts 8 ranks (PP 4 x DP 2); --world-size 16 is overruled, and said so."""
    code, out, err = run_guard("estimate", SEED, "--world-size", "16", "--format", "json")
    data = json.loads(out)
    assert data["layout"]["world_size"] == 8 and data["layout"]["dp"] == 2
    assert any("--world-size says 16 ranks" in note for note in data["notes"])
    code, out, err = run_guard("estimate", SEED, "--world-size", "16", "--force-world-size", "--format", "json")
    assert json.loads(out)["layout"]["world_size"] == 16 and json.loads(out)["layout"]["dp"] == 4


def test_size_without_unit_is_refused_with_a_hint():
    code, out, err = run_guard("estimate", SEED, "--gpu-memory", "80")
    assert code == 2 and "no unit" in err and "80GiB" in err and "80GB" in err
    code, out, err = run_guard("check", "--isolated", "--gpu-memory", "80GiB", SEED)
    assert code in (0, 1) and "Traceback" not in err
