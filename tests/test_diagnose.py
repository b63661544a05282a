"""guard diagnose: every era of PyTorch's OOM message and the look-alikes, rank prefixes, causes, snapshots read
without running code, the corpus of real OOM reports, fuzzed logs, and a long log in a stream."""

from __future__ import annotations

import json
import os
import pickle
import time

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from guard.diagnose import snapshot
from guard.diagnose.causes import cause
from guard.diagnose.events import events
from guard.diagnose.scan import file_events
from guard.diagnose.log_lines import LogLine, read_lines, strip_prefix
from guard.diagnose.oom_text import messages

from conftest import CORPUS, run_guard

GIB, MIB = 2**30, 2**20
CACHED = ("RuntimeError: CUDA out of memory. Tried to allocate 1024.00 KiB (GPU 0; 11.17 GiB total capacity; "
          "10.90 GiB already allocated; 576.00 KiB free; 30.96 MiB cached)")
RESERVED = ("torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 50.00 MiB (GPU 2; 31.75 GiB total "
            "capacity; 5.22 GiB already allocated; 44.69 MiB free; 6.00 GiB allowed; 5.50 GiB reserved in total by "
            "PyTorch) If reserved memory is >> allocated memory try setting max_split_size_mb to avoid fragmentation.")
TYPO_21 = ("torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.70 GiB. GPU 0 has a total capacty of "
           "6.00 GiB of which 0 bytes is free. Process 12345 has 5.98 GiB memory in use. Of the allocated memory "
           "2.93 GiB is allocated by PyTorch, and 2.30 GiB is reserved by PyTorch but unallocated.")
CURRENT = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 226.00 MiB. GPU 3 has a total capacity of "
           "15.70 GiB of which 210.38 MiB is free. Including non-PyTorch memory, this process has 15.48 GiB memory "
           "in use. Of the allocated memory 14.81 GiB is allocated by PyTorch, with 100.00 MiB allocated in private "
           "pools (e.g., CUDA Graphs), and 336.73 MiB is reserved by PyTorch but unallocated.")


def test_the_cached_era_reads_its_cache_as_reserved_but_unallocated():
    (o,) = messages(CACHED)
    assert (o.requested, o.device, o.free) == (1024 * 1024, 0, 576 * 1024)
    assert o.total == int(11.17 * GIB) and o.allocated == int(10.90 * GIB)
    assert o.reserved_unallocated == int(30.96 * MIB) and o.era.startswith("cached")


def test_the_reserved_era_with_a_memory_fraction():
    (o,) = messages(RESERVED)
    assert o.device == 2 and o.allowed == 6 * GIB and o.reserved == int(5.5 * GIB)
    assert o.reserved_unallocated == int(5.5 * GIB) - int(5.22 * GIB)


def test_the_21_typo_and_the_process_list():
    (o,) = messages(TYPO_21)
    assert (o.total, o.free, o.processes) == (6 * GIB, 0, {12345: int(5.98 * GIB)})
    assert o.allocated == int(2.93 * GIB) and o.reserved_unallocated == int(2.30 * GIB)


def test_the_current_message_with_private_pools_and_this_process():
    (o,) = messages(CURRENT)
    assert o.device == 3 and o.this_process == int(15.48 * GIB) and o.private_pools == 100 * MIB
    assert o.reserved == int(14.81 * GIB) + int(336.73 * MIB) + 100 * MIB


def test_a_message_inside_an_exception_repr_and_glued_messages():
    glued = f"OutOfMemoryError('{TYPO_21}'){CURRENT}"
    found = messages(glued)
    assert [o.total for o in found] == [6 * GIB, int(15.70 * GIB)]


@pytest.mark.parametrize(("line", "rank"), [
    ("[rank3]: x", 3), ("[node-1:7]: x", 7), ("[default2]:x", 2), ("5: x", 5), ("gpu1:123:456 [4] x", 4),
    ("> > x", None), ("ERROR 11-23 10:00:00 worker.py:42] x", None),
])
def test_rank_prefixes(line, rank):
    assert strip_prefix(line) == (rank, "x")


@pytest.mark.parametrize(("text", "kind"), [
    ("RuntimeError: CUDA error: out of memory", "raw-cuda"),
    ("CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`", "cublas"),
    ("node:1:2 [0] NCCL WARN Failed to CUDA calloc 6291456 bytes", "nccl"),
    ("DefaultCPUAllocator: not enough memory: you tried to allocate 1073741824 bytes. Error code 12", "host"),
    ("  exitcode  : -9 (pid: 1234)", "host-killed"),
])
def test_look_alikes(text, kind):
    (o,) = messages(text)
    assert o.kind == kind


def _event(text: str, before: tuple[str, ...] = ()) -> object:
    lines = [LogLine("log", n, None, t) for n, t in enumerate([*before, text], 1)]
    (event,) = events(lines)
    return event


def test_causes():
    assert cause(_event(CACHED)).name == "capacity"
    # a 10 GiB GPU: 9.5 GiB reserved, 4.28 of it cached in pieces, and 50 MiB could not be found
    frag = RESERVED.replace("31.75 GiB total", "10.00 GiB total").replace("5.50 GiB reserved", "9.50 GiB reserved")
    assert cause(_event(frag)).name == "fragmentation"
    # two processes on the GPU: this one (3.5 GiB: its 3.23 GiB reserved and its context) and another (2.4 GiB)
    shared = TYPO_21.replace("Process 12345 has 5.98 GiB memory in use.", "Process 111 has 3.50 GiB memory in use. "
                             "Process 222 has 2.40 GiB memory in use.").replace("2.30 GiB is reserved", "0.30 GiB is "
                                                                                "reserved")
    assert cause(_event(shared)).name == "other-process" and "pid 222" in cause(_event(shared)).why
    # a 6.5 GiB GPU that PyTorch filled itself, nothing cached
    grown = RESERVED.replace("31.75 GiB total", "6.50 GiB total").replace("5.50 GiB reserved", "5.22 GiB reserved")
    assert cause(_event(grown, ("iteration      120/  1000 | loss 2.1",))).name == "growth"
    assert cause(_event(grown)).name == "capacity"
    assert cause(_event("NCCL WARN Cuda failure 'out of memory'")).name == "nccl"
    assert cause(_event("exitcode  : -9")).name == "host-memory"
    assert cause(_event("RuntimeError: CUDA error: out of memory")).name == "unknown"


def test_the_process_list_names_this_process_under_its_container_pid():
    """NVML lists the failing process itself (its reserved bytes and more): not another process."""
    own = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 56.00 MiB. GPU 4 has a total capacity of "
           "79.33 GiB of which 49.81 MiB is free. Process 415556 has 79.27 GiB memory in use. Of the allocated "
           "memory 77.92 GiB is allocated by PyTorch, and 150.19 MiB is reserved by PyTorch but unallocated.")
    assert cause(_event(own)).name == "capacity"


def _corpus_logs():
    folder = CORPUS / "oom-logs"
    return sorted(folder.glob("*.log")) if folder.is_dir() else []


@pytest.mark.parametrize("log", _corpus_logs(), ids=lambda p: p.stem)
def test_every_real_report_is_read(log):
    found = events(read_lines(str(log)))
    assert found, f"{log.name}: no out-of-memory event found"
    # the block reader skips what holds no OOM text and finds the same events on the same lines
    assert [(e.line, e.rank, e.phase, e.oom.total) for e in file_events(str(log))] == \
        [(e.line, e.rank, e.phase, e.oom.total) for e in found]
    facts = yaml.safe_load(log.with_suffix(".yaml").read_text()) or {}
    total = (facts.get("gpus") or {}).get("memory_total_reported_gib")
    sized = [e.oom for e in found if e.oom.total is not None]
    if total and sized:  # the message's total, as the issue reported it
        assert sized[0].total / GIB == pytest.approx(total, abs=0.01)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(st.text(max_size=200), st.sampled_from([CACHED, RESERVED, TYPO_21, CURRENT,
                                                                  CURRENT[:120], TYPO_21[40:]])), max_size=20))
def test_fuzzed_logs_never_crash(lines):
    found = events(LogLine("fuzz", n, *strip_prefix(text)) for n, text in enumerate(lines, 1))
    for event in found:
        assert cause(event).name in {"capacity", "fragmentation", "other-process", "growth", "nccl",
                                     "host-memory", "unknown"}


@pytest.mark.parametrize("grep", [True, False])
def test_a_long_log_is_read_in_a_stream(tmp_path, monkeypatch, grep):
    """60 MB of training output and one OOM at its end: found, without holding the file, whether grep finds the
    marked blocks or Python searches each block."""
    if not grep:
        monkeypatch.setenv("GUARD_NO_GREP", "1")
    path = tmp_path / "train.log"
    noise = "iteration      42/ 100000 | consumed samples: 1234 | elapsed time per iteration (ms): 812.3\n" * 1000
    with open(path, "w") as handle:
        for _ in range(700):
            handle.write(noise)
        handle.write(f"[rank7]: {CURRENT}\n")
    assert path.stat().st_size > 60 * 10**6
    started = time.monotonic()
    found = file_events(str(path))
    assert len(found) == 1 and found[0].rank == 7 and found[0].phase == "step 42"
    assert found[0].line == 700 * 1000 + 1
    assert time.monotonic() - started < 30
    by_line = events(read_lines(str(path)))
    assert [(e.line, e.rank, e.phase) for e in found] == [(e.line, e.rank, e.phase) for e in by_line]


@pytest.mark.parametrize("grep", [True, False])
def test_a_log_without_newlines_is_read_in_pieces(tmp_path, monkeypatch, grep):
    """10 MiB and 5 bytes of one line, then the OOM: the first 8 MiB read holds no newline, so it is taken 1 MiB
    at a time (lines 1-3 start at 0, 1 and 2 MiB); the read from 3 MiB reaches the newline (line 4: the line's
    rest); the message is line 5."""
    if not grep:
        monkeypatch.setenv("GUARD_NO_GREP", "1")
    path = tmp_path / "train.log"
    path.write_text("x" * (10 * 2**20 + 5) + "\n" + f"[rank2]: {CURRENT}\n")
    found = file_events(str(path))
    assert [(e.line, e.rank) for e in found] == [(5, 2)]


class _Evil:
    def __init__(self, marker: str):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_a_malicious_snapshot_runs_nothing(tmp_path):
    marker = tmp_path / "pwned"
    path = tmp_path / "snapshot.pickle"
    path.write_bytes(pickle.dumps({"segments": [], "x": _Evil(str(marker))}))
    with pytest.raises(snapshot.SnapshotError, match="refused"):
        snapshot.load(str(path))
    assert not marker.exists()
    code, out, err = run_guard("diagnose", str(tmp_path / "none.log"), "--snapshot", str(path))
    assert code == 2 and not marker.exists()


def test_a_snapshot_is_summarised_by_category(tmp_path):
    frames = {"activations": [{"filename": "model.py", "line": 10, "name": "forward"}],
              "optimizer state": [{"filename": "adam.py", "line": 3, "name": "_init_group"}]}
    data = {"segments": [{"device": 0, "total_size": 10 * GIB, "blocks": [
        {"size": 4 * GIB, "state": "active_allocated", "frames": frames["activations"]},
        {"size": 3 * GIB, "state": "active_allocated", "frames": frames["optimizer state"]},
        {"size": 3 * GIB, "state": "inactive", "frames": []}]}]}
    path = tmp_path / "snapshot.pickle"
    path.write_bytes(pickle.dumps(data))
    summary = snapshot.summarise(snapshot.load(str(path)))
    assert (summary.reserved, summary.allocated) == (10 * GIB, 7 * GIB)
    assert summary.by_category == {"activations": 4 * GIB, "optimizer state": 3 * GIB}
    assert summary.fragmentation == pytest.approx(0.3)


def test_the_json_contract(tmp_path):
    log = tmp_path / "job.log"
    log.write_text(f"iteration 3/10 | loss 1\n[rank1]: {RESERVED}\n[rank0]: NCCL WARN Cuda failure 'out of memory'\n")
    code, out, _ = run_guard("diagnose", str(log), "--format", "json")
    assert code == 0
    report = json.loads(out)
    assert set(report) >= {"events", "ranks", "suggestions"}
    first = report["events"][0]
    assert set(first) >= {"rank", "source", "line", "phase", "requested_bytes", "capacity_bytes", "free_bytes",
                          "allocated_bytes", "reserved_unallocated_bytes", "cause"}
    assert (first["rank"], first["line"], first["requested_bytes"]) == (1, 2, 50 * MIB)
    assert report["events"][1]["cause"] == "nccl" and report["events"][1]["requested_bytes"] is None
    assert {s["cause"] for s in report["suggestions"]} == {report["events"][0]["cause"], "nccl"}


def test_no_oom_in_the_logs_exits_1(tmp_path):
    log = tmp_path / "fine.log"
    log.write_text("iteration 1/10 | loss 1\n")
    code, out, _ = run_guard("diagnose", str(log))
    assert code == 1 and "0 out-of-memory events" in out


def test_with_the_job_the_failed_rank_is_located_and_layouts_that_fit_are_listed(tmp_path):
    from conftest import ROOT

    log = tmp_path / "job.log"
    log.write_text(" iteration        1/    1000 | consumed samples: 64\n"
                   "[rank2]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.25 GiB. GPU 2 has a total "
                   "capacity of 79.15 GiB of which 300.00 MiB is free. Of the allocated memory 76.10 GiB is allocated "
                   "by PyTorch, and 1.20 GiB is reserved by PyTorch but unallocated.\n")
    code, out, err = run_guard("diagnose", str(log), "--script", str(ROOT / "examples/memory/llama2_13b_pp4.sh"),
                               "--gpu", "A100-80GB", "--format", "json")
    assert code == 0, err
    report = json.loads(out)
    (rank,) = report["ranks"]
    # TP 1 x PP 4 on 4 GPUs: rank 2 is pipeline stage 2
    assert (rank["rank"], rank["pp_rank"], rank["tp_rank"], rank["dp_rank"]) == (2, 2, 0, 0)
    assert rank["predicted_peak_bytes"] > 0 and rank["dominant"]
    fits = report["layouts_that_fit"]
    assert fits and all(f["peak_bytes"] <= int(79.15 * GIB) for f in fits)
