"""Interpret a bash launch script statically: resolve what can be known, mark the rest unresolved."""

from __future__ import annotations

import os
import re

from guard.diagnostic import Span
from guard.shell.conditions import Conditions
from guard.shell.expansion import Expander
from guard.shell.located import LText
from guard.shell.model import Command, Finding, Heredoc, Script, Value, Var
from guard.shell.syntax import Node, Source, parse
MAX_SOURCE_DEPTH = 8
MAX_CALL_DEPTH = 16
SBATCH = re.compile(r"^#SBATCH\s+(.*)$")
EVAL_STOP = re.compile(r"^(\d*>>?|&>>?|\d*<|\||\|\||&&?|;|\d*>&\d+)")
IGNORED_COMMANDS = {"echo", "printf", "mkdir", "cd", "set", "unset", "shift", "exit", "return", "true",
                    "false", "sleep", "rm", "cp", "mv", "ln", "chmod", "touch", "wait", "trap", "ulimit",
                    "module", "conda", "pip", "nvidia-smi", "date", "hostname", "tee", "ls", "cat",
                    "sed", "awk", "grep", "pushd", "popd", "exec", "time", "umask"}


class Interpreter(Expander, Conditions):
    def __init__(self, script: Script, env: dict[str, Var] | None = None):
        self.script = script
        self.vars: dict[str, Var] = dict(env or {})
        self.functions: dict[str, Node] = {}
        self.depth = 0
        self.condition = ""
        self.exited = False

    # -- entry ---------------------------------------------------------------------------------
    def run_file(self, path: str, text: str, source_depth: int = 0) -> None:
        src = parse(text, path)
        for line_no, line in enumerate(text.splitlines(), 1):
            stripped = line.strip()
            if stripped and not stripped.startswith("#"):
                break  # sbatch stops reading directives at the first command
            match = SBATCH.match(stripped) if source_depth == 0 else None
            if match:
                self._sbatch(match.group(1), line_no, line, path)
        if source_depth == 0:
            self._slurm_environment(path)
        for node, parent in src.errors():
            if node.text.strip() in ("", "\\") and not src.data[node.end_byte:].strip() and \
                    src.data[:node.end_byte].rstrip().endswith(b"\\"):
                continue  # a line continuation at the end of the file: bash accepts it
            if parent is not None:  # a construct left open: point at where it starts
                message = f"unterminated {parent.type.replace('_', ' ')} (missing {node.type!r})"
                span = src.span(parent)
                span = type(span)(span.line, span.col)
            else:
                message = f"bash syntax error near {node.text.strip()[:30]!r}"
                span = src.span(node)
            self.script.findings.append(Finding("syntax", message, span, path))
        self._block(src, src.root.children, source_depth)

    # -- statements ------------------------------------------------------------------------------
    def _block(self, src: Source, nodes: list[Node], depth: int) -> None:
        for node in nodes:
            if self.exited:
                return  # `exit` ends the script (or, inside a branch, that branch)
            self._statement(src, node, depth)

    def _statement(self, src: Source, node: Node, depth: int) -> None:
        kind = node.type
        if kind == "comment":
            return
        if kind == "variable_assignment":
            self._assign(src, node, exported=False)
        elif kind == "declaration_command":
            exported = node.children[0].type == "export"
            for child in node.children[1:]:
                if child.type == "variable_assignment":
                    self._assign(src, child, exported=exported)
                elif child.type == "variable_name" and exported and child.text in self.vars:
                    self.vars[child.text].exported = True
                    self._export(child.text, src)
        elif kind == "command":
            self._command(src, node, depth)
        elif kind == "redirected_statement":
            self._redirected(src, node, depth)
        elif kind in ("pipeline", "list", "compound_statement", "subshell", "program", "do_group"):
            self._block(src, [c for c in node.children if c.is_named], depth)
        elif kind == "if_statement":
            self._if(src, node, depth)
        elif kind == "case_statement":
            self._case(src, node, depth)
        elif kind in ("for_statement", "c_style_for_statement", "while_statement"):
            body = node.field("body") or next((c for c in node.children if c.type == "do_group"), None)
            if body is not None:
                self._branches(src, [body], depth, "a loop body", include_fallthrough=True)
        elif kind == "function_definition":
            name = node.field("name")
            body = node.field("body")
            if name is not None and body is not None:
                self.functions[name.text] = body
        elif kind == "negated_command":
            self._block(src, [c for c in node.children if c.is_named], depth)
        elif kind == "ERROR":
            self._block(src, [c for c in node.children if c.is_named], depth)

    def _assign(self, src: Source, node: Node, exported: bool) -> None:
        name_node = node.children[0]
        name = name_node.text
        if name_node.type == "subscript":  # A[0]=x: not tracked element-wise
            base = name_node.children[0].text
            self.vars[base] = Var(LText.unknown(f"${{{base}}}", src.pos(node), src.path), src.span(node),
                                  note=f"{base} is assigned element by element")
            return
        append = len(node.children) > 1 and node.children[1].text == "+="
        value_node = node.children[2] if len(node.children) > 2 else None
        if value_node is None:
            value: Value = LText("", (src.pos(node),), src.path)
        elif value_node.type == "array":
            value = [w for el in value_node.children if el.is_named and el.type != "comment"
                     for w in self.words(src, el)]
        else:
            value = self.expand(src, value_node)
        if append and name in self.vars:
            old = self.vars[name].value
            if isinstance(old, list):
                value = old + (value if isinstance(value, list) else [value])
            elif isinstance(value, list):
                value = [old, *value]
            else:
                value = old + value
        keep_export = exported or (name in self.vars and self.vars[name].exported)
        self.vars[name] = Var(value, src.span(node), keep_export)
        if keep_export:
            self._export(name, src)

    def _export(self, name: str, src: Source) -> None:
        var = self.vars[name]
        value = var.value if isinstance(var.value, LText) else (var.value[0] if var.value else LText("", ()))
        self.script.exports[name] = (value, var.span or Span(1, 1), src.path)

    def _command(self, src: Source, node: Node, depth: int) -> None:
        env: dict[str, LText] = {}
        words: list[LText] = []
        previous = None
        for child in node.children:
            if child.type == "variable_assignment":
                value_node = child.children[2] if len(child.children) > 2 else None
                env[child.children[0].text] = self.expand(src, value_node) if value_node else LText("", ())
            elif child.type == "command_name":
                words.extend(self.words(src, child.children[0]) if child.children else [])
            elif child.is_named and child.type not in ("file_redirect", "herestring_redirect", "comment"):
                if words and _glued(child, previous):
                    # tree-sitter-bash splits `$A/$B/x` into `$A/$` + `B/x`: put the word back together
                    head = words[-1]
                    head = head.slice(0, len(head.text) - 1) if head.text.endswith("$") else head
                    words[-1] = head + self._after_dollar(src, child)
                else:
                    words.extend(self.words(src, child))
            previous = child
        if not words:
            for name, value in env.items():  # `X=1` alone is an assignment
                self.vars[name] = Var(value, src.span(node))
            return
        if words[0].text == "eval" and len(words) > 1:
            # `eval torchrun ... $ARGS`: the words are the command (a second round of splitting
            # only matters for quoted text holding quotes, which guard does not re-parse)
            words = [piece for w in words[1:] for piece in (w.split() if w.resolved else [w])]
            # eval re-reads redirections and operators held in the string: the command ends there
            cut = next((i for i, w in enumerate(words) if w.resolved and EVAL_STOP.match(w.text)), len(words))
            words = words[:cut] or words[:1]
        name = words[0].text
        if name in ("source", ".") and len(words) > 1:
            self._source(src, words[1], depth)
            return
        if name in self.functions and self.depth < MAX_CALL_DEPTH:
            self.depth += 1
            body = self.functions[name]
            self._block(src, [c for c in body.children if c.is_named], depth)
            self.depth -= 1
            return
        if name == "exit":
            self.exited = True
            return
        if name in ("export",):
            return
        if os.path.basename(name) in IGNORED_COMMANDS and name != "time":
            return
        if name == "time":
            words = words[1:]
        self.script.commands.append(Command(words, env, src.span(node), src.path, self.condition))

    def _redirected(self, src: Source, node: Node, depth: int) -> None:
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
        self._statement(src, body, depth)

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

    def _source(self, src: Source, word: LText, depth: int) -> None:
        if not word.resolved:
            self.script.findings.append(Finding("source", f"`source {word.raw or word.text}`"
                                                " could not be resolved; its variables are unknown",
                                                word.span(), src.path))
            return
        path = word.text if os.path.isabs(word.text) else os.path.join(os.path.dirname(src.path) or ".",
                                                                        word.text)
        if depth >= MAX_SOURCE_DEPTH or not os.path.isfile(path):
            self.script.findings.append(Finding("source", f"sourced file {word.text!r} not found next to the "
                                                "script; its variables are unknown", word.span(), src.path))
            return
        try:
            with open(path, encoding="utf-8", errors="replace") as handle:
                text = handle.read(2_000_000)
        except OSError as err:
            self.script.findings.append(Finding("source", f"cannot read sourced file {word.text!r}: "
                                                f"{err.strerror}", word.span(), src.path))
            return
        self.script.sources.append(path)
        self.run_file(path, text, depth + 1)

    # -- #SBATCH -----------------------------------------------------------------------------------
    def _slurm_environment(self, path: str) -> None:
        """The SLURM_* variables a batch job sees, from its #SBATCH directives (unless preset)."""
        given = {key: value for key, value in self.script.sbatch}
        nodes = given.get("--nodes") or given.get("-N")
        gres = given.get("--gres")
        gpus = given.get("--gpus-per-node")
        if gpus is None and gres is not None:
            match = re.search(r"gpu(?::[\w.-]+)?:(\d+)", gres.text)
            if match:
                gpus = gres.slice(match.start(1), match.end(1))
        tasks_per_node = given.get("--ntasks-per-node")
        tasks = given.get("--ntasks") or given.get("-n")
        derived = {"SLURM_NNODES": nodes, "SLURM_JOB_NUM_NODES": nodes, "SLURM_GPUS_ON_NODE": gpus,
                   "SLURM_GPUS_PER_NODE": gpus, "SLURM_NTASKS_PER_NODE": tasks_per_node,
                   "SLURM_NTASKS": tasks}
        if tasks is None and nodes is not None and tasks_per_node is not None and \
                nodes.text.isdigit() and tasks_per_node.text.isdigit():
            derived["SLURM_NTASKS"] = LText.plain(str(int(nodes.text) * int(tasks_per_node.text)),
                                                  nodes.first, path)
        for name, value in derived.items():
            if value is not None and name not in self.vars:
                self.vars[name] = Var(value, value.span())

    def _sbatch(self, text: str, line_no: int, line: str, path: str) -> None:
        col = line.find(text) + 1
        words = text.split("#")[0].split()
        i = 0
        while i < len(words):
            word = words[i]
            start = line.find(word, col - 1) + 1
            if word.startswith("-"):
                key, eq, value = word.partition("=")
                if not eq and i + 1 < len(words) and not words[i + 1].startswith("-"):
                    value = words[i + 1]
                    i += 1
                vstart = line.find(value, start - 1 + len(key)) + 1 if value else start
                self.script.sbatch.append((key, LText.at(value, line_no, vstart, path)))
            i += 1


def _glued(node: Node, previous: Node | None) -> bool:
    """`node` continues the previous word: no blank between them and the previous one ends in `$`."""
    return previous is not None and previous.end_byte == node.start_byte and \
        previous.type == "concatenation" and previous.children and previous.children[-1].type == "$"


def interpret(path: str, text: str, environment: dict[str, str] | None = None) -> Script:
    """Read a whole launch script; `environment` pre-sets variables (tests, --env)."""
    script = Script(path)
    env = {k: Var(LText.plain(v, None, path), None) for k, v in (environment or {}).items()}
    interp = Interpreter(script, env)
    interp.run_file(path, text)
    script.variables = interp.vars
    return script
