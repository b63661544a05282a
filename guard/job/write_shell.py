"""Where a launch script wrote a value, and the edit that changes it: in place, in a variable's assignment, or none.

A value guard read from a script is literal at its use (`--tensor-model-parallel-size 2`, a flag bundle such as
`ARGS=(--micro-batch-size 4)`, a heredoc, an `#SBATCH` line) or came through a variable (`TP=2 ... $TP`). The
first is edited in place. The second is edited at the assignment only when every use of the variable is being
rewritten to the same value (so nothing else in the script changes meaning); otherwise the change is refused
with the lines of the other uses. Values the shell computes (`$((...))`, `$(...)`) or that guard could not
resolve are refused.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from guard.diagnostic import Span
from guard.job import edits as E
from guard.job.edits import Edit, Pos, Refusal, Rewrite, Texts, text_at
from guard.job.shell_text import (
    assigned_variable,
    assignment_lines,
    listed,
    reference_lines,
    removal,
    sbatch_line,
)
from guard.sources.document import split_lines

BETWEEN_OPTION_AND_VALUE = re.compile(r"[\s\"'=\\]*")


@dataclass(frozen=True)
class Written:
    """A value as the reader saw it: its text and where its characters are (a token's or a heredoc's)."""

    text: str
    path: str
    span: Span
    resolved: bool = True
    raw: str = ""


@dataclass
class _VarUse:
    field: str
    new_text: str
    start: Pos
    end: Pos


@dataclass
class ShellWriter:
    """Collects the edits of one rewrite of a script; `finish()` settles the variables and returns them."""

    texts: Texts = field(default_factory=Texts)
    out: Rewrite = field(default_factory=Rewrite)  # refusals and notes; the edits are kept in `items` until finish
    items: list[tuple[str, Edit]] = field(default_factory=list)  # (job field, edit)
    _vars: dict[tuple[str, str], list[_VarUse]] = field(default_factory=dict)

    def add(self, name: str, edit: Edit) -> None:
        self.items.append((name, edit))

    # -- refusing --------------------------------------------------------------------------------
    def refuse(self, name: str, reason: str, path: str | None = None, span: Span | None = None) -> None:
        line, col = (span.line, span.col) if span else (1, 1)
        self.out.refused.append(Refusal(name, reason, path, line, col))

    # -- changing a value --------------------------------------------------------------------------
    def set_value(self, name: str, value: Written, new_text: str, *, option: Written | None = None,
                  inline: tuple[str, Span] | None = None, what: str = "") -> None:
        """Rewrite `value` to `new_text`. `option`: the flag it follows; `inline`: the region (the command,
        the heredoc) where a value is written at its use."""
        what = what or name
        if not value.resolved:
            self.refuse(name, f"{what} is {value.raw or value.text!r}, which guard cannot resolve statically; "
                        "write the value literally", value.path, value.span)
            return
        text = self.texts.get(value.path)
        if text is None:
            self.refuse(name, f"cannot read {value.path}", value.path, value.span)
            return
        start, end = (value.span.line, value.span.col), value.span.stop
        if text_at(text, start, end) != value.text:
            self._inline_equals(name, value, new_text, option, text, what)
            return
        if value.text == new_text:
            return
        if _inside(value, inline) or _adjacent(option, value, text) or sbatch_line(text, value.span.line):
            self.add(name, Edit(value.path, start, end, new_text))
            return
        variable = assigned_variable(text, value.span.line, value.span.col, value.span.stop[1])
        if variable is None:
            self.refuse(name, f"{what} ({value.text}) is written at line {value.span.line} in a way guard cannot "
                        "rewrite safely (not at the command and not a plain variable assignment)",
                        value.path, value.span)
            return
        self._vars.setdefault((value.path, variable), []).append(_VarUse(name, new_text, start, end))

    def _inline_equals(self, name: str, value: Written, new_text: str, option: Written | None, text: str,
                       what: str) -> None:
        """`--flag=value`: the value token is located at the whole word; edit the part after '='."""
        if option is not None and option.span == value.span and "=" in option.text and \
                text_at(text, (option.span.line, option.span.col), option.span.stop) == option.text:
            head = option.text.index("=") + 1
            start = (option.span.line, option.span.col + head)
            if value.text != new_text:
                self.add(name, Edit(value.path, start, option.span.stop, new_text))
            return
        self.refuse(name, f"{what} ({value.text}) is computed by the shell at line {value.span.line} "
                    f"(arithmetic, a command substitution or a concatenation): write the value literally",
                    value.path, value.span)

    # -- removing and adding flags ---------------------------------------------------------------
    def remove(self, name: str, words: list[Written], what: str) -> None:
        """Delete words written side by side (a switch, or a flag and its value); a line they leave empty goes
        too, with the continuation of the line before it when theirs was the command's last line."""
        path = words[0].path
        text = self.texts.get(path)
        first, last = words[0].span, words[-1].span
        if text is None or any(w.path != path or not w.resolved for w in words) or \
                text_at(text, (first.line, first.col), last.stop) is None or first.line != last.stop[0]:
            self.refuse(name, f"{what} is not written literally on one line: remove it by hand", path, first)
            return
        written = text_at(text, (first.line, first.col), last.stop)
        if not written.startswith(words[0].text) or not written.endswith(words[-1].text):
            self.refuse(name, f"{what} comes from a variable guard cannot edit: remove it by hand", path, first)
            return
        self.add(name, removal(text, path, first.line, first.col, last.stop[1]))

    def insert(self, name: str, path: str, at: Pos, words: list[str], first_line: int | None = None) -> None:
        """Add words at `at` (after a command's last word): one per line when the command, which starts on
        `first_line`, continues its lines with '\\'; else on the same line."""
        text = self.texts.get(path)
        if text is None:
            self.refuse(name, f"cannot read {path}", path, Span(*at))
            return
        lines = split_lines(text)
        first = first_line or at[0]
        if any(line.rstrip().endswith("\\") for line in lines[first - 1:at[0] - 1]):
            indent = re.match(r"[ \t]*", lines[at[0] - 1]).group() if at[0] != first else "    "
            joined = "".join(f" \\\n{indent}{w}" for w in words)
        else:
            joined = "".join(f" {w}" for w in words)
        self.add(name, Edit(path, at, at, joined))

    # -- settling variables -------------------------------------------------------------------------
    def finish(self) -> Rewrite:
        for (path, variable), uses in self._vars.items():
            self._settle(path, variable, uses)
        self._vars = {}
        kept, dropped = E.whole_changes(self.items, self.out.refused)
        self.out.refused.extend(dropped)
        self.out[:] = kept
        self.out[:] = [self._reanchored(e) for e in self.out]
        return self.out

    def _reanchored(self, edit: Edit) -> Edit:
        """Flags added after a command's last word that is itself being removed go after the word before it."""
        if edit.start != edit.end or not edit.replacement:
            return edit
        text = self.texts.get(edit.path) or ""
        starts, at = E.line_starts(text), edit.start
        for cut in [e for e in self.out if e.path == edit.path and e.start < e.end and not e.replacement]:
            if cut.start < at <= cut.end:
                index = E.offset(starts, text, cut.start)
                while index > 0 and text[index - 1] in " \t\r\n\\":
                    index -= 1
                at = E.position(text, index)
        return edit if at == edit.start else Edit(edit.path, at, at, edit.replacement)

    def _settle(self, path: str, variable: str, uses: list[_VarUse]) -> None:
        text = self.texts.get(path) or ""
        first = uses[0]
        assigned = assignment_lines(text, variable)
        others = reference_lines(text, variable, first.start[0])
        values = {u.new_text for u in uses}
        span = Span(first.start[0], first.start[1])
        fields = ", ".join(sorted({u.field for u in uses}))
        if len(assigned) > 1:
            self.refuse(fields, f"{variable} is assigned more than once (lines {listed(assigned)}): guard cannot "
                        "tell which assignment to edit", path, span)
        elif len(values) > 1:
            self.refuse(fields, f"{variable} would need two values ({', '.join(sorted(values))})", path, span)
        elif len(others) != len(uses):
            self.refuse(fields, f"{variable} (assigned at line {first.start[0]}) is used at lines "
                        f"{listed(others)}; changing it would change those too: edit them by hand or write "
                        "the value literally", path, span)
        else:
            self.add(fields, Edit(path, first.start, first.end, first.new_text))


def written(token, path: str = "") -> Written:
    """A Written from a guard ArgToken (Megatron flag words)."""
    return Written(token.text, token.path or path, token.span, token.resolved, token.raw)


def written_ltext(value, fallback: Span | None = None) -> Written:
    """A Written from located shell text (a launcher option's value, a heredoc's characters)."""
    span = value.span() if value.pos else (fallback or Span(1, 1))
    return Written(value.text, value.path, span, value.resolved, value.raw)


def _inside(value: Written, region: tuple[str, Span] | None) -> bool:
    if region is None or region[0] != value.path:
        return False
    span = region[1]
    return (span.line, span.col) <= (value.span.line, value.span.col) and value.span.stop <= span.stop


def _adjacent(option: Written | None, value: Written, text: str) -> bool:
    """The value follows its flag with only blanks, quotes, '=' or line continuations between them."""
    if option is None or option.path != value.path:
        return False
    between = text_at(text, option.span.stop, (value.span.line, value.span.col))
    return between is not None and BETWEEN_OPTION_AND_VALUE.fullmatch(between) is not None
