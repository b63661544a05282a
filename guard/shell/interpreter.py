"""Interpret a bash launch script statically: resolve what can be known, mark the rest unresolved."""

from __future__ import annotations

import os
import re

from guard.diagnostic import Span
from guard.shell.bash_errors import first_error
from guard.shell.calls import Calls
from guard.shell.conditions import Conditions
from guard.shell.embedded import SHELLS, EmbeddedSource, shell_string
from guard.shell.expansion import Expander
from guard.shell.located import LText
from guard.shell.model import Command, Finding, Script, Value, Var
from guard.shell.redirections import Redirections
from guard.shell.slurm import Slurm
from guard.shell.syntax import Node, Source, parse

MAX_SOURCE_DEPTH = 8
MAX_CALL_DEPTH = 16
EVAL_STOP = re.compile(r"^(\d*>>?|&>>?|\d*<|\||\|\||&&?|;|\d*>&\d+)")
IGNORED_COMMANDS = {"echo", "printf", "mkdir", "cd", "set", "unset", "shift", "exit", "return", "true",
                    "false", "sleep", "rm", "cp", "mv", "ln", "chmod", "touch", "wait", "trap", "ulimit",
                    "module", "conda", "pip", "nvidia-smi", "date", "hostname", "tee", "ls", "cat",
                    "sed", "awk", "grep", "pushd", "popd", "exec", "time", "umask"}


class Interpreter(Calls, Expander, Conditions, Redirections, Slurm):
    """Runs a script's statements in order, keeping variables, functions and the `if` it is under."""

    def __init__(self, script: Script, env: dict[str, Var] | None = None):
        self.script = script
        self.vars: dict[str, Var] = dict(env or {})
        self.functions: dict[str, Node] = {}
        self.depth = 0
        self.condition = ""
        self.exited = False
        # inside `srun bash -c "..."`: the words before `bash` and the command's VAR=x, put before every command
        self.prefix: list[LText] = []
        self.prefix_env: dict[str, LText] = {}

    # -- entry ---------------------------------------------------------------------------------
    def run_file(self, path: str, text: str, source_depth: int = 0) -> None:
        src = parse(text, path)
        if source_depth == 0:
            self._read_sbatch(text, path)
            self._slurm_environment(path)
        self.run_source(src, text, source_depth)

    def run_source(self, src: Source, text: str, source_depth: int = 0, report: bool = True) -> None:
        """Run a parsed file or `bash -c` string as bash does: bash reads each top-level command whole before it
        runs it and stops at a syntax error, so only the commands before the error's command run (no phantom
        command is built from the broken pieces). `report`: the error is a finding."""
        error = first_error(text)
        if error is None:  # tree-sitter may stumble where bash does not: bash is the judge
            self._block(src, src.root.children, source_depth)
            return
        if report:
            first, last = text.count("\n", 0, error.cut) + 1, len(text.splitlines())
            lost = f"lines {first}-{last} are" if last > first else f"line {first} is"
            self.script.findings.append(Finding(
                "syntax", f"bash: {error.message}; bash stops there, so {lost} not run (what is set before "
                f"line {first} is kept)", Span(error.line, error.col), src.path))
        before = src.prefix(error.cut)
        self._block(before, before.root.children, source_depth)

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
        elif kind in ("list", "subshell"):
            # `mkdir -p X || { echo ...; exit 1; }`, `[ -z "$X" ] && exit`: what follows an operator runs on a
            # condition guard does not decide, and a subshell's exit is its own: neither ends the script here
            named = [c for c in node.children if c.is_named]
            self._block(src, named[:1] if kind == "list" else [], depth)
            for child in named[1:] if kind == "list" else named:
                if not self.exited:
                    self._statement(src, child, depth)
                    self.exited = False
        elif kind in ("pipeline", "compound_statement", "program", "do_group"):
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

    def _command_words(self, src: Source, node: Node) -> tuple[dict[str, LText], list[LText]]:
        """A simple command's `VAR=x` prefixes and its expanded words."""
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
        return env, words

    def _command(self, src: Source, node: Node, depth: int) -> None:
        env, words = self._command_words(src, node)
        if not words:
            for name, value in env.items():  # `X=1` alone is an assignment
                self.vars[name] = Var(value, src.span(node))
            return
        if words[0].text == "eval" and len(words) > 1:
            # `eval torchrun ... $ARGS`: the words are the command (a second round of splitting
            # only matters for quoted text holding quotes, which guard does not re-parse)
            # (a partly unknown word is split at its known blanks: `CMD="torchrun ...\n --save $CKPT"`)
            words = [piece for w in words[1:] for piece in w.split()]
            # eval re-reads redirections and operators held in the string: the command ends there
            cut = next((i for i, w in enumerate(words) if w.resolved and EVAL_STOP.match(w.text)), len(words))
            words = words[:cut] or words[:1]
        name = words[0].text
        if any(os.path.basename(w.text) in SHELLS for w in words) and self._shell_string(src, words, env):
            return
        if name in ("source", ".") and len(words) > 1:
            self._source(src, words[1], depth)
            return
        if name in self.functions and self.depth < MAX_CALL_DEPTH:
            self._call(src, node, name, words[1:], depth)
            return
        if name == "shift" and isinstance(getattr(self.vars.get("@"), "value", None), list):
            count = int(words[1].text) if len(words) > 1 and words[1].text.isdigit() else 1
            self._bind(self.vars["@"].value[count:], src.span(node))  # `shift` in a function: $2.. become $1..
            return
        if name == "exit":
            self.exited = True
            return
        if name in ("export",):
            return
        if name == "sed" and any(w.text.startswith(("-i", "--in-place")) for w in words[1:]):
            self._keep_render(src, node, [(words, None)], None, env)
        if os.path.basename(name) in IGNORED_COMMANDS and name != "time":
            return
        if name == "time":
            words = words[1:]
        self.script.commands.append(Command(self.prefix + words, {**self.prefix_env, **env}, src.span(node),
                                            src.path, self.condition))

    def _shell_string(self, src: Source, words: list[LText], env: dict[str, LText]) -> bool:
        """`srun bash -c "$LAUNCHER $CMD"`: the string is read as a script run by a new shell, which sees the
        exported variables (and the environment: SLURM's, the command's own VAR=x), not the others; each
        command in it runs behind the words before `bash`. False when the words run no `-c` string."""
        found = shell_string(words)
        if found is None or self.depth >= MAX_CALL_DEPTH:
            return False
        self._run_string(src, found[1], words[:found[0]], env)
        return True

    def _run_string(self, src: Source, string: LText, prefix: list[LText], env: dict[str, LText],
                    batch: bool = False) -> None:
        """A script held in a string (a `bash -c` argument, a heredoc piped to sbatch) run by a new shell, which sees
        the exported variables (and the environment: SLURM's, the command's own VAR=x), not the others; each command
        in it runs behind `prefix`. `batch`: its #SBATCH lines are sbatch's directives."""
        seen = {name: var for name, var in self.vars.items()
                if var.exported or var.span is None or name.startswith("SLURM_")}
        seen.update({name: Var(value, None, exported=True) for name, value in env.items()})
        child = Interpreter(self.script, seen)
        child.depth, child.condition = self.depth + 1, self.condition
        child.prefix, child.prefix_env = self.prefix + prefix, {**self.prefix_env, **env}
        embedded = EmbeddedSource(string, src.path)
        if batch:
            child._read_sbatch(string, src.path)
            child._slurm_environment(src.path)
        child.run_source(embedded, string.text, report=False)

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
