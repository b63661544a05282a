"""The DeepSpeed config a Megatron-DeepSpeed job loads: a file beside the script, a heredoc the script
writes, or a template the script renders with sed, envsubst or cat."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from guard.megatron.ds_template import (
    Rendered,
    candidates,
    last_writer,
    render_config,
    rendered_to_script,
    timeline,
)
from guard.shell.model import Heredoc, Render, Script
from guard.sources.document import pointer_of


@dataclass
class DsConfigSource:
    """The DeepSpeed JSON a Megatron-DeepSpeed job loads (a file, a heredoc, or a rendered template)."""

    data: dict[str, Any]
    label: str  # file path, "heredoc at line N", or "TEMPLATE as rendered by the script at line N"
    locate: Any  # callable(*json_path) -> (path, Span)
    notes: list[str] = field(default_factory=list)  # what guard left as written (unknown log paths)
    rendered: Any = None  # the rendered Document when a template was rendered (linted like a heredoc)
    heredoc: Any = None  # the script's Heredoc that writes the config, when one does


def attach_deepspeed_config(cmd, script: Script) -> str:
    """Attach the config `--deepspeed_config` names; return why none could be ("" when attached or unnamed)."""
    occ = cmd.args.last("deepspeed_config") or cmd.args.last("deepscale_config")
    if occ is None or not occ.values:
        return ""
    value = occ.values[0]
    target = value.text
    steps = timeline(script)
    index = last_writer(steps, value, len(steps))
    writer = steps[index] if index is not None else None
    if isinstance(writer, Heredoc):
        doc = heredoc_document(writer)
        if doc is None or not isinstance(doc.data, dict):
            return f"{writer.path}:{writer.span.line}: the heredoc that writes {target} is not a JSON object " \
                   "guard can read (unknown values or a syntax error)"
        cmd.deepspeed_config = DsConfigSource(doc.data, f"heredoc at line {writer.span.line}",
                                              _heredoc_locator(writer, doc), heredoc=writer)
        return ""
    if isinstance(writer, Render) and index is not None:
        rendered = render_config(cmd.path, steps, index, value)
        if rendered.doc is not None:
            cmd.deepspeed_config = DsConfigSource(rendered.doc.data, rendered.label, _rendered_locator(rendered),
                                                  rendered.notes, rendered.doc)
        return rendered.problem
    if not value.resolved:
        return f"the DeepSpeed config path {value.raw or target} is unknown and no command of the script writes it"
    for candidate in candidates(target, cmd.path):
        if os.path.isfile(candidate):
            from guard.sources.document import SourceError
            from guard.sources.loader import load_document

            try:
                doc = load_document(candidate)
            except SourceError as err:
                return f"{candidate}:{err.span.line}:{err.span.col}: {err.message}"
            if not isinstance(doc.data, dict):
                return f"{candidate}: the DeepSpeed config is not a JSON object"
            cmd.deepspeed_config = DsConfigSource(
                doc.data, candidate, lambda *p, d=doc, c=candidate: (c, d.span(pointer_of(p))))
            return ""
    return f"the DeepSpeed config {target} is not written by the script and not found beside it"


# -- heredocs -------------------------------------------------------------------------------------------
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


def _rendered_locator(rendered: Rendered):
    def locate(*path: str):
        span = rendered.doc.span(pointer_of(path))
        return rendered.text.path, rendered_to_script(rendered.text, span.line, span.col)
    return locate


def _heredoc_locator(heredoc: Heredoc, doc):
    def locate(*path: str):
        span = doc.span(pointer_of(path))
        return heredoc.path, rendered_to_script(heredoc.body, span.line, span.col)
    return locate
