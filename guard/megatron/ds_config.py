"""The DeepSpeed config a Megatron-DeepSpeed job loads: a file beside the script, or a heredoc the script writes."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from guard.diagnostic import Span
from guard.shell.interpreter import Heredoc, Script
from guard.shell.located import LText


@dataclass
class DsConfigSource:
    """The DeepSpeed JSON a Megatron-DeepSpeed job loads (a file, or a heredoc in the script)."""

    data: dict[str, Any]
    label: str  # file path or "heredoc"
    locate: Any  # callable(*json_path) -> (path, Span)


def attach_deepspeed_config(job, script: Script) -> None:
    occ = job.args.last("deepspeed_config") or job.args.last("deepscale_config")
    if occ is None or not occ.values:
        return
    target = occ.values[0].text
    value = occ.values[0]
    for heredoc in reversed(script.heredocs):
        same = (heredoc.target.resolved and value.resolved and
                os.path.basename(heredoc.target.text) == os.path.basename(value.text)) or \
            (not heredoc.target.resolved and not value.resolved and heredoc.target.text == value.raw)
        if same:
            doc = heredoc_document(heredoc)
            if doc is not None and isinstance(doc.data, dict):
                job.deepspeed_config = DsConfigSource(doc.data, f"heredoc at line {heredoc.span.line}",
                                                      _heredoc_locator(heredoc, doc))
            return
    if not value.resolved:
        return
    candidates = [target] if os.path.isabs(target) else [
        os.path.join(os.path.dirname(job.path) or ".", target), target]
    for candidate in candidates:
        if os.path.isfile(candidate):
            from guard.sources.document import SourceError
            from guard.sources.loader import load_document

            try:
                doc = load_document(candidate)
            except SourceError:
                return
            if isinstance(doc.data, dict):
                job.deepspeed_config = DsConfigSource(
                    doc.data, candidate, lambda *p, d=doc, c=candidate: (c, d.span(_pointer(p))))
            return


def _pointer(path: tuple[str, ...]) -> str:
    from guard.sources.document import escape

    return "".join("/" + escape(p) for p in path)


def heredoc_document(heredoc: Heredoc):
    """The heredoc's JSON as a Document (positions in the rendered text), or None if it is not JSON yet."""
    from guard.sources.document import SourceError
    from guard.sources.json_source import parse_json

    if not heredoc.body.resolved:
        return None
    try:
        return parse_json(heredoc.body.text, heredoc.path)
    except SourceError:
        return None


def rendered_to_script(body: LText, line: int, col: int) -> Span:
    """Map a (line, col) in the rendered heredoc text back to where the script wrote it."""
    offset, current = 0, 1
    text = body.text
    while current < line and offset < len(text):
        nxt = text.find("\n", offset)
        if nxt < 0:
            break
        offset, current = nxt + 1, current + 1
    index = min(offset + col - 1, len(body.pos) - 1)
    pos = body.pos[index] if index >= 0 and body.pos else None
    return Span(*pos) if pos else Span(1, 1)


def _heredoc_locator(heredoc: Heredoc, doc):
    def locate(*path: str):
        span = doc.span(_pointer(path))
        return heredoc.path, rendered_to_script(heredoc.body, span.line, span.col)
    return locate
