"""The `$ guard ...` examples in README.md and docs/*.md, run and written back, so a doc shows what guard prints.

    python scripts/doc_examples.py           # rewrite the outputs in place
    python scripts/doc_examples.py --check   # exit 1 and name each example whose output drifted

An example is a ```text block whose lines starting with `$ guard ` are commands; the lines up to the next
command (or the end of the block) are that command's output, run from the repository root.
"""

from __future__ import annotations

import io
import re
import shlex
import sys
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BLOCK = re.compile(r"^```text\n(.*?)^```", re.M | re.S)
PROMPT = "$ guard "


def documents() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def run(command: str) -> str:
    """What `guard ...` prints on stdout, run in-process from the repository root."""
    import os

    from guard.cli import main

    out = io.StringIO()
    here = os.getcwd()
    os.chdir(ROOT)
    try:
        with redirect_stdout(out), redirect_stderr(io.StringIO()):
            main(shlex.split(command)[1:])
    finally:
        os.chdir(here)
    return out.getvalue()


def rendered(block: str) -> str:
    """The block with every command's output replaced by what guard prints now; a blank line before each
    command after the first, as the docs write them."""
    text = ""
    for line in block.splitlines(keepends=True):
        if line.startswith(PROMPT):
            text += ("\n" if text and not text.endswith("\n\n") else "") + line + run(line[2:].strip())
    return text


def examples(text: str) -> list[tuple[re.Match, str]]:
    return [(m, rendered(m.group(1))) for m in BLOCK.finditer(text) if PROMPT in m.group(1)]


def main(argv: list[str]) -> int:
    drifted = []
    for path in documents():
        text = path.read_text(encoding="utf-8")
        new, last = [], 0
        for match, fresh in examples(text):
            new.append(text[last:match.start(1)] + fresh)
            last = match.end(1)
            if fresh != match.group(1):
                drifted.append(f"{path.relative_to(ROOT)}:{text.count(chr(10), 0, match.start()) + 1}")
        new.append(text[last:])
        if "--check" not in argv and "".join(new) != text:
            path.write_text("".join(new), encoding="utf-8")
    if drifted and "--check" in argv:
        sys.stderr.write("stale examples (run python scripts/doc_examples.py): " + ", ".join(drifted) + "\n")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
