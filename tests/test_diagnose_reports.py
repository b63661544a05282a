"""guard diagnose reads the memory reports of a log (Megatron's report_memory, theoretical and parameter-count
lines, DeepSpeed's see_memory_usage, torch.cuda.memory_summary tables), takes the job from the arguments
Megatron printed, and sets its prediction for each failed rank beside them.

Expected numbers are counted by hand here (parameters, Megatron's theoretical model) or produced by the real
formatters (torch's memory_summary, DeepSpeed's see_memory_usage) from chosen statistics."""

from __future__ import annotations

import json
import shlex

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from guard.diagnose.scan import LogScan, scan_file
from guard.intake.read import read
from guard.intake.request import Request
from guard.settings import Settings

from conftest import FIXTURES, run_guard

MIB, GIB = 2**20, 2**30
LOG = FIXTURES / "diagnose" / "megatron_gpt_tp2_pp2.log"
# the job the fixture's printed arguments describe, as its command line would give it
H, LAYERS, HEADS, FFN, SEQ, VOCAB_PADDED, TP, PP, DP = 2048, 24, 16, 8192, 2048, 50432, 2, 2, 2
COMMAND = (f"--num-layers {LAYERS} --hidden-size {H} --num-attention-heads {HEADS} --ffn-hidden-size {FFN} "
           f"--seq-length {SEQ} --max-position-embeddings {SEQ} --micro-batch-size 4 --global-batch-size 64 "
           f"--tensor-model-parallel-size {TP} --pipeline-model-parallel-size {PP} --bf16 --use-distributed-optimizer "
           "--accumulate-allreduce-grads-in-fp32 --attention-dropout 0.0 --hidden-dropout 0.0 --transformer-impl local "
           "--tokenizer-type GPT2BPETokenizer --vocab-file v.json --merge-file m.txt --train-iters 1000 --lr 0.0003")


def _layer_params_per_tp_rank(h: int, ffn: int, tp: int) -> int:
    """A GPT layer with LayerNorm and biases, Megatron's column/row split: two LayerNorms (2h each, replicated),
    QKV (3h x h + 3h, split), projection (h x h split, its bias h replicated), fc1 (ffn x h + ffn, split), fc2
    (h x ffn split, its bias h replicated)."""
    return 4 * h + (3 * h * h + 3 * h) // tp + h * h // tp + h + (ffn * h + ffn) // tp + ffn * h // tp + h


def test_megatron_parameter_counts_match_a_hand_count():
    scan = scan_file(str(LOG)).finish()
    counts = {(r.tp_rank, r.pp_rank): r.parameters for r in scan.readings if r.kind == "megatron-params"
              and r.tp_rank is not None}
    layers = LAYERS // PP * _layer_params_per_tp_rank(H, FFN, TP)
    first = layers + VOCAB_PADDED // TP * H + SEQ * H  # word embeddings (split) and learned positions
    last = layers + 2 * H + VOCAB_PADDED // TP * H  # final LayerNorm and the tied output layer's copy
    assert counts == {(0, 0): first, (1, 0): first, (0, 1): last, (1, 1): last}


def test_megatron_report_and_theoretical_lines():
    readings = scan_file(str(LOG)).finish().readings
    report = {r.rank: r for r in readings if r.kind == "megatron"}
    assert report[0].label == "after 1 iterations"
    assert (report[0].allocated, report[0].max_allocated, report[0].reserved) == \
        (round(4310.25 * MIB), round(27114.50 * MIB), round(31020.0 * MIB))
    assert report[4].max_allocated == round(19440.10 * MIB)
    # Megatron's theoretical_memory_usage: 2 L h^2 (attention 2 + MLP ffn/h + norms 2/h + final 1/(L h)) in the
    # layers, h x padded vocab in the embedding; the most loaded shard (layers / PP + embedding) / TP at
    # 6 + 12/DP bytes with the distributed optimizer
    block = 2 * LAYERS * H * H * (2 + FFN / H + 2 / H + 1 / (LAYERS * H))
    shard = (block / PP + H * VOCAB_PADDED) / TP
    (theory,) = [r for r in readings if r.kind == "megatron-theoretical"]
    assert theory.weight_and_optimizer == pytest.approx(shard * (6 + 12 / DP), abs=0.01 * MIB)
    (most,) = [r for r in readings if r.label == "most loaded shard"]
    assert most.parameters == pytest.approx(shard, abs=0.5e5)


def test_the_job_from_the_printed_arguments_is_the_job_of_its_command_line():
    from guard.intake.printed import read_printed
    from guard.memory.estimate import estimate

    printed = scan_file(str(LOG)).finish().printed_args
    assert printed is not None and printed.world_size == TP * PP * DP
    from_log = read_printed(printed, Settings()).job
    settings = Settings()
    settings.world_size = TP * PP * DP
    from_command = read(Request(megatron_args=(COMMAND,), vocab_size=VOCAB_PADDED), settings).job
    assert (from_log.layout.tp, from_log.layout.pp, from_log.layout.dp) == (TP, PP, DP)
    assert from_log.padded_vocab == VOCAB_PADDED
    assert [st.peak_bytes for st in estimate(from_log).stages] == \
        [st.peak_bytes for st in estimate(from_command).stages]


def _first_step_oom(tmp_path) -> str:
    """The fixture's start-up (arguments, parameter counts) and an OOM on rank 2 in the first step."""
    lines = LOG.read_text().splitlines()
    head = lines[:lines.index("training ...") + 1]
    oom = ("[rank2]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.50 GiB. GPU 2 has a total "
           "capacity of 15.70 GiB of which 1.02 GiB is free. Of the allocated memory 14.10 GiB is allocated by "
           "PyTorch, and 120.00 MiB is reserved by PyTorch but unallocated.")
    path = tmp_path / "first_step.log"
    path.write_text("\n".join(head + [oom]) + "\n")
    return str(path)


def test_a_capacity_oom_names_the_term_that_dominates_the_prediction(tmp_path):
    code, out, err = run_guard("diagnose", _first_step_oom(tmp_path), "--format", "json")
    assert code == 0, err
    report = json.loads(out)
    (event,) = report["events"]
    (rank,) = report["ranks"]
    assert event["cause"] == "capacity" and "arguments Megatron printed" in report["job_from"]
    # rank 2 = TP 0, DP 1 of stage 0 (tp-cp-dp-pp order); its states by hand: 12 bytes a parameter (bf16
    # weight, fp32 gradient, fp32 master and two moments over DP 2), the optimizer's 6 the largest at 2.0 GiB;
    # the 1F1B stash of stage 0 holds 2 microbatches, and each of its 12 layers keeps at least 4 replicated
    # s x b x h bf16 tensors (both LayerNorms' inputs and outputs): 3.0 GiB, more than any state term
    assert (rank["tp_rank"], rank["dp_rank"], rank["pp_rank"]) == (0, 1, 0)
    params = next(r for r in rank["observed"] if r["unit"] == "parameters")
    assert params["predicted"] == params["observed"]
    states = {k: rank["predicted_components"][k] for k in ("params", "grads", "optimizer")}
    assert sum(states.values()) == 12 * params["observed"]
    assert rank["predicted_components"]["activations"] >= 12 * 2 * 4 * 2 * SEQ * 4 * H
    assert rank["dominant"] == "activations" and "largest term activations" in event["why"]
    assert report["layouts_that_fit"], "the planner finds layouts for 15.70 GiB"
    for fit in report["layouts_that_fit"]:
        assert fit["peak_bytes"] <= int(15.70 * GIB) and fit["flags"] and fit["diff"] == ""


def test_the_markdown_report_has_a_chart_per_failed_rank(tmp_path):
    code, out, err = run_guard("diagnose", _first_step_oom(tmp_path), "--format", "markdown")
    assert code == 0, err
    assert out.startswith("# guard diagnose")
    chart = out.split("```text\n", 1)[1].split("```", 1)[0].splitlines()
    assert chart[0].startswith("rank    2 needed") and "15.60 GiB of 15.70 GiB" in chart[0]  # 14.10 + 1.50
    assert chart[1].strip().startswith("guard")
    assert "```bash\n--" in out  # the fix as flags


def test_fixes_for_a_script_are_a_diff_of_the_script(tmp_path):
    from conftest import ROOT

    log = tmp_path / "job.log"
    log.write_text("[rank0]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a "
                   "total capacity of 79.15 GiB of which 100.00 MiB is free. Of the allocated memory 78.00 GiB is "
                   "allocated by PyTorch, and 200.00 MiB is reserved by PyTorch but unallocated.\n")
    script = ROOT / "examples/memory/llama2_13b_pp4.sh"
    before = script.read_text()
    code, out, err = run_guard("diagnose", str(log), "--script", str(script), "--format", "json")
    assert code == 0, err
    fits = json.loads(out)["layouts_that_fit"]
    assert fits and all(f["diff"].startswith(f"--- {script}") for f in fits)
    assert script.read_text() == before


def test_a_memory_summary_table_as_torch_prints_it(monkeypatch):
    """torch's own memory_summary formatter, fed chosen statistics, prefixed by torchrun's [rank3]."""
    import torch.cuda.memory as cuda_memory

    chosen = {"allocated_bytes": (37 * GIB + 512 * MIB, 39 * GIB), "reserved_bytes": (38 * GIB, 39 * GIB + 300 * MIB),
              "active_bytes": (37 * GIB, 39 * GIB), "requested_bytes": (37 * GIB, 38 * GIB),
              "inactive_split_bytes": (5 * MIB, 9 * MIB), "allocation": (1200, 5000), "active": (1200, 5000),
              "segment": (80, 90), "inactive_split": (3, 9)}
    stats = {"num_ooms": 1, "num_alloc_retries": 2}
    for key in ("oversize_allocations", "oversize_segments"):
        stats.update({f"{key}.{field}": 0 for field in ("current", "peak", "allocated", "freed")})
    for key, (current, peak) in chosen.items():
        for pool in ("all", "large_pool", "small_pool"):
            for field, value in (("current", current), ("peak", peak), ("allocated", peak * 3), ("freed", peak * 2)):
                stats[f"{key}.{pool}.{field}"] = value
    monkeypatch.setattr(cuda_memory, "memory_stats", lambda device=None: stats)
    table = cuda_memory.memory_summary(device=0)
    scan = LogScan()
    from guard.diagnose.log_lines import LogLine, strip_prefix

    text = ["iteration 7/100", *table.splitlines(), "[rank3]: back to training"]
    for n, line in enumerate(("[rank3]: " + t for t in text), 1):
        scan.feed(LogLine("train.log", n, *strip_prefix(line)))
    (reading,) = scan.finish().readings
    assert reading.rank == 3 and reading.kind == "summary" and "1 OOMs, 2 cudaMalloc retries" in reading.label
    # sizes print floored in the unit that keeps the current value under 768 of it: MiB here
    assert (reading.allocated, reading.max_allocated) == (37 * GIB + 512 * MIB, 39 * GIB)
    assert (reading.reserved, reading.max_reserved) == (38 * GIB, 39 * GIB + 300 * MIB)


def test_deepspeed_see_memory_usage_as_deepspeed_prints_it(monkeypatch, capsys, tmp_path):
    deepspeed_utils = pytest.importorskip("deepspeed.runtime.utils")
    from deepspeed.accelerator import get_accelerator

    accelerator = get_accelerator()
    monkeypatch.setattr(accelerator, "memory_allocated", lambda *a: 12.34 * GIB)
    monkeypatch.setattr(accelerator, "max_memory_allocated", lambda *a: 20.5 * GIB)
    monkeypatch.setattr(accelerator, "reset_peak_memory_stats", lambda *a: None)
    monkeypatch.setattr(deepspeed_utils, "torch_memory_reserved", lambda *a: 30.25 * GIB)
    monkeypatch.setattr(deepspeed_utils, "torch_max_memory_reserved", lambda *a: 31.6 * GIB)
    capsys.readouterr()
    deepspeed_utils.see_memory_usage("After initializing ZeRO optimizer", force=True)
    path = tmp_path / "ds.log"
    path.write_text(capsys.readouterr().out)
    readings = scan_file(str(path)).finish().readings
    memory = next(r for r in readings if r.kind == "deepspeed")
    assert memory.label == "After initializing ZeRO optimizer"
    assert (memory.allocated, memory.max_allocated) == (round(12.34 * GIB), round(20.5 * GIB))
    assert (memory.reserved, memory.max_reserved) == (round(30.25 * GIB), 32 * GIB)  # Max_CA: whole GB
    assert any(r.kind == "host" and r.device_used for r in readings)


def test_old_megatron_reports_without_rank_and_the_corpus_line():
    """Megatron of 2020 (NVIDIA/Megatron-LM#60 in the corpus) printed the report without `[Rank N]`."""
    from guard.diagnose.memory_lines import reading

    line = ("after 5 iterations memory (MB) | allocated: 10250.5693359375 | max allocated: 12606.06201171875 | "
            "reserved: 17482.0 | max reserved: 17482.0")
    r = reading(line)
    assert (r.kind, r.label, r.rank) == ("megatron", "after 5 iterations", None)
    assert r.max_allocated == round(12606.06201171875 * MIB) and r.reserved == round(17482.0 * MIB)


def test_printed_arguments_round_trip_through_the_flag_table():
    """Every kind of argparse action: a printed value equal to the default gives no word, a store_false flag
    printed False gives its switch, a list gives its items, an enum its member."""
    from guard.intake.printed import PrintedArgs, command_line

    printed = PrintedArgs("x.log", 1, {"num_layers": "4", "bias_gelu_fusion": "False", "bf16": "True",
                                       "fp16": "False", "data_path": "['/a', '/b']", "lr": "None",
                                       "attention_backend": "AttnBackend.flash", "world_size": "8"})
    words = shlex.split(command_line(printed))
    assert words[:2] == ["--num-layers", "4"]
    assert "--no-bias-gelu-fusion" in words and "--bf16" in words and "--fp16" not in words
    assert words[words.index("--data-path") + 1:words.index("--data-path") + 3] == ["/a", "/b"]
    assert words[words.index("--attention-backend") + 1] == "flash"
    assert "--lr" not in words and "--world-size" not in words


def test_fragmentation_with_expandable_segments_already_on(tmp_path):
    """The OOM message's own advice names expandable_segments; only the log's setting counts as "on"."""
    oom = ("[rank0]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total "
           "capacity of 79.15 GiB of which 1.00 GiB is free. Of the allocated memory 60.00 GiB is allocated by "
           "PyTorch, and 17.00 GiB is reserved by PyTorch but unallocated. If reserved but unallocated memory is "
           "large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.")
    plain, on = tmp_path / "plain.log", tmp_path / "on.log"
    plain.write_text(oom + "\n")
    on.write_text("export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True\n" + oom + "\n")
    fixes = {}
    for path in (plain, on):
        code, out, err = run_guard("diagnose", str(path), "--format", "json")
        assert code == 0, err
        (suggestion,) = json.loads(out)["suggestions"]
        assert suggestion["cause"] == "fragmentation"
        fixes[path] = suggestion["fix"]
    assert fixes[plain].startswith("PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True")
    assert "already on" in fixes[on]
    # or a snapshot's allocator settings say so
    import pickle

    snap = tmp_path / "snapshot.pickle"
    snap.write_bytes(pickle.dumps({"segments": [], "allocator_settings": {"expandable_segments": True}}))
    code, out, err = run_guard("diagnose", str(plain), "--snapshot", str(snap), "--format", "markdown")
    assert code == 0, err
    assert "expandable_segments is already on" in out and f"## Snapshot `{snap}`" in out


PIECES = ["------------------------ arguments ------------------------", "  num_layers ........ 4",
          "-------------------- end of arguments ---------------------", "|  PyTorch CUDA memory summary, device ID 0 |",
          "| Allocated memory      |   1234 MiB |   2048 MiB |  99 GiB | 98 GiB |", "|=====|",
          "[Rank 0] (after 1 iterations) memory (MB) | allocated: 1.5 | max allocated: 2 | reserved: 3 | max reserved: 4",
          "MA 1.0 GB         Max_MA 2.0 GB         CA 3.0 GB         Max_CA 3 GB ",
          " > number of parameters on (tensor, pipeline) model parallel rank (0, 0): 12",
          "Theoretical memory footprints: weight and optimizer=12.00 MB"]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(st.text(max_size=120), st.sampled_from(PIECES),
                          st.sampled_from(PIECES).map(lambda p: p[:len(p) // 2])), max_size=30))
def test_fuzzed_reports_never_crash(lines):
    from guard.diagnose.log_lines import LogLine, strip_prefix

    scan = LogScan()
    for n, text in enumerate(lines, 1):
        scan.feed(LogLine("fuzz", n, *strip_prefix(text)))
    for r in scan.finish().readings:
        assert r.kind in {"megatron", "megatron-theoretical", "megatron-params", "deepspeed", "host", "summary"}
    if scan.printed_args is not None:
        from guard.intake.printed import command_line

        assert isinstance(command_line(scan.printed_args), str)


@pytest.mark.parametrize("text", [
    *(p for p in PIECES if p not in PIECES[1:3] + PIECES[5:6]),  # not a block's or a table's later lines
    "RuntimeError: CUDA error: out of memory", "CUBLAS_STATUS_ALLOC_FAILED", "CUDNN_STATUS_ALLOC_FAILED",
    "NCCL WARN Failed to CUDA calloc 6291456 bytes", "include/alloc.h:178 NCCL WARN Cuda failure 'out of memory'",
    "DefaultCPUAllocator: can't allocate memory: you tried to allocate 1 bytes", "exitcode  : -9 (pid: 1)",
    "return code = -9", "Signal 9 (SIGKILL) received by PID 7", "Memory cgroup out of memory: oom-kill",
    "Total number of parameters in billions: 1.31", "CPU Virtual Memory:  used = 121.5 GB, percent = 12.1%",
    "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"])
def test_every_line_the_readers_want_marks_its_block(text):
    """The block skipper's substrings cover every line an event, a report, a table or a block starts at."""
    from guard.diagnose.scan import MARKERS

    assert any(marker in text for marker in MARKERS)


MDS_ARGS = """------------------------ arguments ------------------------
  deepspeed ....................................... True
  deepspeed_config ................................ ds_config.json
  num_layers ...................................... 24
  hidden_size ..................................... 2048
  num_attention_heads ............................. 16
  seq_length ...................................... 2048
  max_position_embeddings ......................... 2048
  micro_batch_size ................................ 4
  global_batch_size ............................... 64
  tensor_model_parallel_size ...................... 2
  pipeline_model_parallel_size .................... 1
  zero_stage ...................................... 1
  bf16 ............................................ True
  padded_vocab_size ............................... 50432
  world_size ...................................... 8
-------------------- end of arguments ---------------------
"""


def test_a_megatron_deepspeed_job_is_only_offered_what_its_flags_can_say(tmp_path):
    """Megatron-DeepSpeed has no --context-parallel-size and no uneven-stage flags, and a dense model has no
    expert TP: every layout offered is written whole, as flags of its own table."""
    log = tmp_path / "mds.log"
    log.write_text(MDS_ARGS + "[rank2]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.50 GiB. GPU 2 "
                   "has a total capacity of 15.70 GiB of which 1.02 GiB is free. Of the allocated memory 14.10 GiB is "
                   "allocated by PyTorch, and 120.00 MiB is reserved by PyTorch but unallocated.\n")
    code, out, err = run_guard("diagnose", str(log), "--format", "json")
    assert code == 0, err
    fits = json.loads(out)["layouts_that_fit"]
    assert fits
    for fit in fits:
        assert fit["refused"] == [] and fit["layout"]["cp"] == 1 and "EP" not in fit["changes"]
        assert not any(f.startswith(("--context-parallel", "--decoder-first", "--expert-tensor")) for f in fit["flags"])
        if "--sequence-parallel" in fit["flags"]:
            assert "sequence parallel on" in fit["changes"]


def test_a_phase_seen_in_one_log_does_not_leak_into_the_next(tmp_path):
    """Logs given together (one per rank, or one run after another) each keep their own phase."""
    ran, died = tmp_path / "rank0.log", tmp_path / "rank1.log"
    ran.write_text(" iteration       50/    1000 | lm loss: 2.0\n")
    died.write_text("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 1 has a total capacity "
                    "of 15.70 GiB of which 1.00 GiB is free. Of the allocated memory 14.00 GiB is allocated by PyTorch, "
                    "and 100.00 MiB is reserved by PyTorch but unallocated.\n")
    scan = LogScan()
    for path in (ran, died):
        scan_file(str(path), scan)
    (event,) = scan.finish().events
    assert event.phase == "start-up or first step"
