"""Where in a log the markers are, found at memory speed: the log as blocks of whole lines in bytes, and the byte
offsets at which `grep -F` (GNU or BSD, on the PATH) finds any marker. Python's own substring search runs once per
marker over every block (about 7 s a GB for the scan's 15 markers); grep runs all of them in one pass. Without
grep, or when it fails, the caller searches each block itself."""

from __future__ import annotations

import bisect
import os
import shutil
import subprocess
import threading
from typing import Iterator

BLOCK = 8 << 20  # bytes a block holds, cut after its last newline
MAX_LINE = 1 << 20  # a longer line (a log without newlines) is cut into pieces of this size


def byte_blocks(path: str) -> Iterator[tuple[int, bytes, int]]:
    """(offset, chunk, end) of the file in blocks of whole lines: the block is chunk[:end], which ends with a
    newline except at the file's end and in a line longer than a block (read in pieces of MAX_LINE, each taken
    as a line). Each chunk is read once and never copied (the next read starts at the block's end)."""
    with open(path, "rb") as handle:
        offset = 0
        while True:
            handle.seek(offset)
            chunk = handle.read(BLOCK)
            if not chunk:
                return
            if len(chunk) < BLOCK:  # the file's end: whatever is left
                yield offset, chunk, len(chunk)
                return
            cut = chunk.rfind(b"\n")
            if cut < 0:  # a line longer than a block (a log without newlines): read in pieces, each as a line
                yield offset, chunk, MAX_LINE
                offset += MAX_LINE
                continue
            yield offset, chunk, cut + 1
            offset += cut + 1


def read_block(path: str, offset: int, size: int) -> bytes:
    with open(path, "rb") as handle:
        handle.seek(offset)
        return handle.read(size)


class Hits:
    """The byte offsets of every marker in a file, found by grep running beside the caller (start it, read the
    file meanwhile, then `wait`); `known` is False where grep is absent or failed."""

    def __init__(self, path: str, markers: tuple[str, ...]) -> None:
        self.offsets: list[int] | None = None
        self._proc, self._out = _start(path, markers), []
        if self._proc is not None:
            self._reader = threading.Thread(target=lambda: self._out.append(self._proc.stdout.read()), daemon=True)
            self._reader.start()

    @property
    def running(self) -> bool:
        return self._proc is not None

    def wait(self) -> None:
        if self._proc is None:
            return
        self._reader.join()
        code = self._proc.wait()
        if code in (0, 1):  # 1: nothing found; 2: an error (then the caller searches in Python)
            try:
                self.offsets = sorted(int(line.split(b":", 1)[0]) for line in b"".join(self._out).splitlines()
                                      if line)
            except ValueError:  # an output this code does not know
                self.offsets = None

    @property
    def known(self) -> bool:
        return self.offsets is not None

    def within(self, start: int, end: int) -> bool:
        i = bisect.bisect_left(self.offsets, start)
        return i < len(self.offsets) and self.offsets[i] < end


def _start(path: str, markers: tuple[str, ...]) -> subprocess.Popen | None:
    grep = shutil.which("grep")
    if grep is None or os.environ.get("GUARD_NO_GREP"):
        return None
    args = [grep, "-F", "-a", "-b", "-o"]
    for marker in markers:
        args += ["-e", marker]
    try:
        return subprocess.Popen(args + ["--", path], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                env={**os.environ, "LC_ALL": "C"})
    except OSError:
        return None
