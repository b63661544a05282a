"""Render a template as a launch script's sed, envsubst or cat would, keeping where each character came from."""

from __future__ import annotations

import bisect
import os
import re
from dataclasses import dataclass, field
from typing import Any

from guard.diagnostic import Span
from guard.megatron.sed import (
    RenderError,
    concat,
    located,
    mask_of,
    parse_sed,
    sed_output,
    unknown_offsets,
)
from guard.shell.located import LText
from guard.shell.model import Heredoc, Render, Script

MAX_TEMPLATE_BYTES = 1_000_000  # a DeepSpeed template is a few kilobytes
MAX_RENDER_DEPTH = 8  # a file rendered from a rendered file ...: real chains are one or two long
# Keys whose value may stay unknown in a rendered config: names and paths of logs, never sizes or modes.
UNKNOWN_ALLOWED = {"output_path", "job_name", "output_file", "project", "team", "group", "nvme_path"}
ENV_REFERENCE = re.compile(r"\$(?:\{([A-Za-z_]\w*)\}|([A-Za-z_]\w*))")


def written_files(render: Render) -> list[LText]:
    """The files a render writes: its `> FILE`, or the files `sed -i` edits in place."""
    if render.target is not None:
        return [render.target]
    try:
        call = parse_sed(render.stages[0][0])
    except RenderError:
        return []
    return call.files if call.in_place else []


def stage_inputs(words: list[LText]) -> list[LText]:
    """The files one command of a render reads (none: it reads its standard input)."""
    name = os.path.basename(words[0].text)
    if name == "sed":
        return parse_sed(words).files
    if name == "cat":
        if any(w.text.startswith("-") and w.text != "-" for w in words[1:]):
            raise RenderError("cat options are not supported")
        return [w for w in words[1:] if w.text != "-"]
    return []


def run_stage(words: list[LText], text: LText, environment: dict[str, LText]) -> LText:
    """What one command of the render writes, given what it reads."""
    name = os.path.basename(words[0].text)
    if name == "sed":
        return sed_output(words, text)
    if name == "envsubst":
        return _envsubst(words, text, environment)
    return text  # cat


def _envsubst(words: list[LText], text: LText, environment: dict[str, LText]) -> LText:
    if len(words) > 2 or any(w.text.startswith("-") or not w.resolved for w in words[1:]):
        raise RenderError("envsubst with options or an unknown variable list is not supported")
    only = {a or b for a, b in ENV_REFERENCE.findall(words[1].text)} if len(words) == 2 else None
    pieces, last, known = [], 0, mask_of(text)
    for match in ENV_REFERENCE.finditer(text.text):
        name = match.group(1) or match.group(2)
        if (only is not None and name not in only) or not all(known[match.start():match.end()]):
            continue
        anchor = text.pos[match.start()]
        value = environment.get(name)
        if value is None:  # not exported by the script: envsubst reads it from an environment guard cannot see
            value = LText.unknown(match.group(), anchor, text.path)
        pieces += [text.slice(last, match.start()),
                   LText(value.text, (anchor,) * len(value.text), text.path, value.resolved, value.raw, value.mask)]
        last = match.end()
    return concat(pieces + [text.slice(last, len(text.text))], text.path)


# -- which command wrote the file -----------------------------------------------------------------------
def timeline(script: Script) -> list[Heredoc | Render]:
    """Heredocs and renders in the order the script runs them."""
    out: list[Heredoc | Render] = []
    written = 0
    for render in script.renders:
        out.extend(script.heredocs[written:render.heredocs_before])
        written = max(written, render.heredocs_before)
        out.append(render)
    return out + script.heredocs[written:]


def same_file(target: LText, value) -> bool:
    """Matched as heredocs always were: by file name when both are known, else by the text as written."""
    if target.resolved and value.resolved:
        return os.path.basename(target.text) == os.path.basename(value.text)
    return not target.resolved and not value.resolved and target.text == (value.raw or value.text)


def last_writer(steps: list, value, before: int) -> int | None:
    """Index of the last heredoc or render before steps[before] that writes `value` (an LText or ArgToken)."""
    for index in range(before - 1, -1, -1):
        writer = steps[index]
        targets = [writer.target] if isinstance(writer, Heredoc) else written_files(writer)
        if any(same_file(target, value) for target in targets):
            return index
    return None


def candidates(path: str, script_path: str, render_path: str = "") -> list[str]:
    """Where a relative path is looked for: beside the script (and the file running the command), then the cwd."""
    if os.path.isabs(path):
        return [path]
    folders = [os.path.dirname(script_path) or ".", os.path.dirname(render_path or script_path) or "."]
    return list(dict.fromkeys([os.path.join(folder, path) for folder in folders] + [path]))


# -- rendering ------------------------------------------------------------------------------------------
@dataclass
class Rendered:
    """A config the script renders from a template: its JSON, located where each character was written."""

    doc: Any = None  # guard.sources.document.Document of the rendered text
    text: LText | None = None  # the rendered text; positions in the template (or the script, for a heredoc)
    label: str = ""
    notes: list[str] = field(default_factory=list)  # values left as written, undecided conditions
    problem: str = ""  # why no config can be attached ("" when it can)


def render_config(script_path: str, steps: list, index: int, value) -> Rendered:
    """Render steps[index] (a Render writing the config `value`), parse it, check what stayed unknown."""
    from guard.sources.document import SourceError, split
    from guard.sources.json_source import parse_json

    render = steps[index]
    where = f"{render.path}:{render.span.line}"
    try:
        text = _output(steps, index, script_path, value, 0)
    except RenderError as err:
        return Rendered(problem=f"{where}: the DeepSpeed config this command renders cannot be read: {err}")
    template = text.path if text.path != render.path else "a heredoc of the script"
    try:
        doc = parse_json(text.text, text.path)
    except SourceError as err:
        at = rendered_to_script(text, err.span.line, err.span.col)
        error = f"{text.path}:{at.line}:{at.col}: {err.message}"
        unknown = _unknown_text(text, unknown_offsets(text))
        return Rendered(problem=f"{where}: the DeepSpeed config rendered from {template} is " + (
            f"incomplete: {unknown} unknown, and the text is not valid JSON ({error})" if unknown
            else f"not valid JSON ({error})"))
    if not isinstance(doc.data, dict):
        return Rendered(problem=f"{where}: the DeepSpeed config rendered from {template} is not a JSON object")
    notes = []
    for pointer, offsets in _unknown_values(doc, text).items():
        keys, unknown = split(pointer), _unknown_text(text, offsets)
        if not keys or keys[-1] not in UNKNOWN_ALLOWED or not isinstance(_at(doc.data, keys), str):
            return Rendered(problem=f"{where}: the DeepSpeed config rendered from {template} is incomplete: "
                            f"{'.'.join(keys) or 'its text'} depends on {unknown}, which guard cannot know")
        notes.append(f"{'.'.join(keys)} is left as written ({unknown} is unknown)")
    if render.condition:
        notes.append(f"rendered under `{render.condition}`, which guard could not decide")
    return Rendered(doc, text, f"{template} as rendered by the script at line {render.span.line}", notes)


def _content(path, before: int, steps: list, script_path: str, depth: int) -> LText:
    """The text of `path` when steps[before] runs: what an earlier command wrote, else the file on disk."""
    if depth > MAX_RENDER_DEPTH:
        raise RenderError("files rendered from rendered files nest too deeply")
    index = last_writer(steps, path, before)
    if index is not None:
        writer = steps[index]
        return writer.body if isinstance(writer, Heredoc) else _output(steps, index, script_path, path, depth + 1)
    if not path.resolved:
        raise RenderError(f"the template path {path.raw or path.text} is unknown")
    from guard.sources.document import SourceError
    from guard.sources.loader import read_text

    for candidate in candidates(path.text, script_path, steps[before].path):
        if os.path.isfile(candidate):
            if os.path.getsize(candidate) > MAX_TEMPLATE_BYTES:
                raise RenderError(f"template {candidate} is over {MAX_TEMPLATE_BYTES} bytes")
            try:
                return located(read_text(candidate)[0], candidate)
            except SourceError as err:
                raise RenderError(f"template {candidate}: {err.message}") from None
    raise RenderError(f"template {path.text} not found beside the script (nor in the current folder)")


def _output(steps: list, index: int, script_path: str, path, depth: int) -> LText:
    """What the render steps[index] writes (for `sed -i`, into `path`)."""
    render = steps[index]
    if render.target is None:  # sed -i: the file is edited where it is
        old = _content(path, index, steps, script_path, depth)
        return run_stage(render.stages[0][0], old, render.environment)
    text: LText | None = None
    for words, stdin in render.stages:
        files = stage_inputs(words)
        if len(files) > 1:
            raise RenderError(f"{words[0].text} reads {len(files)} files; guard renders one template")
        source = files[0] if files else stdin
        if source is not None:
            text = _content(source, index, steps, script_path, depth)
        elif text is None:
            raise RenderError(f"{words[0].text} reads its standard input, which the script does not give")
        text = run_stage(words, text, render.environment)
    assert text is not None
    return text


def _unknown_values(doc, text: LText) -> dict[str, list[int]]:
    """The innermost JSON values holding characters guard could not know, with those characters' offsets."""
    starts = [0] + [i + 1 for i, ch in enumerate(text.text) if ch == "\n"]
    hits: dict[str, list[int]] = {}
    for offset in unknown_offsets(text):
        line = bisect.bisect_right(starts, offset)
        point = (line, offset - starts[line - 1] + 1)
        inside = [p for p, loc in doc.locations.items() if (loc.value.line, loc.value.col) <= point < loc.value.stop]
        hits.setdefault(max(inside, key=len) if inside else "", []).append(offset)
    return hits


def _unknown_text(text: LText, offsets: list[int]) -> str:
    runs: list[list[int]] = []
    for offset in offsets:
        if runs and runs[-1][1] == offset:
            runs[-1][1] = offset + 1
        else:
            runs.append([offset, offset + 1])
    return ", ".join(dict.fromkeys(text.text[a:b] for a, b in runs))


def _at(data: Any, keys: list[str]) -> Any:
    for key in keys:
        data = data.get(key) if isinstance(data, dict) else (
            data[int(key)] if isinstance(data, list) and key.isdigit() and int(key) < len(data) else None)
    return data


def rendered_to_script(body: LText, line: int, col: int) -> Span:
    """Map a (line, col) in rendered text back to where it was written (the script, or a template)."""
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
