"""Files a launch script writes: heredocs (`cat > F << EOF`) and templates rendered by sed/envsubst/cat `> F`."""

from __future__ import annotations

import os
import re

from guard.shell.located import LText
from guard.shell.model import Finding, Heredoc, Render
from guard.shell.syntax import Node, Source

# `<name>` / `<path to data>` glued to its `>`: a placeholder left in a template, not two redirections meant
PLACEHOLDER = re.compile(r"(?<![<\d&])<([A-Za-z_][\w .:/-]*?[\w.:/-])>")
RENDERERS = {"sed", "envsubst", "cat"}  # commands that write a file from a template (see _render)
SUBMITTERS = {"sbatch", "bash", "sh"}  # commands that run the script a heredoc hands them on stdin


class Redirections:
    """Redirected statements for the Interpreter (uses its script, condition, _statement, _command_words, expand)."""

    def _redirected(self, src: Source, node: Node, depth: int) -> None:
        if self._placeholder(src, node):
            return
        body = node.field("body") or node.children[0]
        target = None
        heredoc = None
        for child in node.children[1:]:
            if child.type == "file_redirect" and any(c.type in (">", ">>") for c in child.children):
                target = child.children[-1]
            elif child.type == "heredoc_redirect":
                heredoc = child
                for sub in child.children:
                    if sub.type == "file_redirect":
                        target = sub.children[-1]
        if heredoc is not None and target is not None and body.type == "command" and \
                body.children and body.children[0].text in ("cat", "tee"):
            start = next((c for c in heredoc.children if c.type == "heredoc_start"), None)
            content = next((c for c in heredoc.children if c.type == "heredoc_body"), None)
            quoted = start is not None and start.text[:1] in ("'", '"')
            text = self._heredoc_text(src, content, quoted) if content is not None else LText("", ())
            self.script.heredocs.append(Heredoc(self.expand(src, target), text, src.span(node), src.path))
            return
        if heredoc is not None and body.type == "command" and body.children and \
                os.path.basename(body.children[0].text) in SUBMITTERS:
            # `sbatch <<EOF ... EOF` (or `bash <<EOF`): the heredoc is the script that runs, expanded by this shell
            # first unless its delimiter is quoted
            start = next((c for c in heredoc.children if c.type == "heredoc_start"), None)
            content = next((c for c in heredoc.children if c.type == "heredoc_body"), None)
            if content is not None:
                quoted = start is not None and start.text[:1] in ("'", '"')
                self._run_string(src, self._heredoc_text(src, content, quoted), [], {},
                                 batch=os.path.basename(body.children[0].text) == "sbatch")
                return
        self._render(src, node, body)
        self._statement(src, body, depth)

    def _placeholder(self, src: Source, node: Node) -> bool:
        """`--save <ckpt> --x`: a template's placeholder, which bash reads as `< ckpt` and `> --x`; the command
        fails before it starts (no file `ckpt`), so it is said and not judged."""
        end = next((sub.start_byte for child in node.children if child.type == "heredoc_redirect"
                    for sub in child.children if sub.type == "heredoc_body"), node.end_byte)
        text = src.data[node.start_byte:end].decode("utf-8", "replace")
        quoted = _quoted_ranges(node)  # `X="<path>"` is a value bash keeps as written, not a redirection
        found = next((m for m in PLACEHOLDER.finditer(text)
                      if not any(a <= node.start_byte + len(text[:m.start()].encode()) < b for a, b in quoted)), None)
        if found is None:
            return False
        start = node.start_byte + len(text[:found.start()].encode())
        where = src.literal_range(start, start + len(found.group(0).encode())).span()
        self.script.findings.append(Finding(
            "placeholder", f"{found.group(0)} is a template placeholder: bash reads it as redirections (input from "
            f"a file {found.group(1).split()[0]!r}), so the command fails before it starts; guard judges it as if "
            "the placeholder were filled in",
            where, src.path))
        return True

    def _render(self, src: Source, node: Node, body: Node) -> None:
        """Record `sed/cat/envsubst ... > OUT` (a pipeline of them too): OUT may be a rendered template."""
        def redirect(stmt: Node, ops: tuple[str, ...]) -> Node | None:
            return next((r.children[-1] for r in stmt.children[1:] if r.type == "file_redirect" and
                         tuple(c.type for c in r.children[:-1]) in ops), None)
        out, stages, env = redirect(node, ((">",), (">|",))), [], {}
        for stage in [c for c in (body.children if body.type == "pipeline" else [body]) if c.is_named]:
            command = stage.children[0] if stage.type == "redirected_statement" else stage
            stdin = redirect(stage, (("<",),)) if stage is not command else None
            name = next((c.text for c in command.children if c.type == "command_name"), "")
            if out is None or command.type != "command" or os.path.basename(name) not in RENDERERS:
                return  # checked before expanding: most redirected commands are not renders
            prefix, words = self._command_words(src, command)
            env.update(prefix)
            stages.append((words, self.expand(src, stdin) if stdin is not None else None))
        last_stdin = redirect(node, (("<",),))  # `cmd | sed ... < F > OUT`: the last command reads F
        if stages and last_stdin is not None:
            stages[-1] = (stages[-1][0], self.expand(src, last_stdin))
        if out is not None and stages:
            self._keep_render(src, node, stages, self.expand(src, out), env)

    def _keep_render(self, src: Source, node: Node, stages: list, target: LText | None,
                     env: dict[str, LText]) -> None:
        environment = {name: value for name, (value, _, _) in self.script.exports.items()}
        environment.update(env)
        self.script.renders.append(Render(stages, target, src.span(node), src.path, len(self.script.heredocs),
                                          environment, self.condition))

    def _heredoc_text(self, src: Source, content: Node, quoted: bool) -> LText:
        if quoted:
            return src.literal(content)
        out = LText("", ())
        cursor = content.start_byte
        for child in content.children:
            if child.type == "heredoc_content" or not child.is_named:
                continue
            if child.start_byte > cursor:
                out = out + src.literal_range(cursor, child.start_byte)
            out = out + self.expand(src, child)
            cursor = child.end_byte
        end = content.end_byte
        if end > cursor:
            out = out + src.literal_range(cursor, end)
        return out


def _quoted_ranges(node: Node) -> list[tuple[int, int]]:
    """Byte ranges of the quoted strings under node."""
    if node.type in ("string", "raw_string", "ansi_c_string"):
        return [(node.start_byte, node.end_byte)]
    return [r for child in node.children for r in _quoted_ranges(child)]
