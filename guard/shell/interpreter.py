"""Interpret a bash launch script statically: resolve what can be known, mark the rest unresolved."""

from __future__ import annotations

import fnmatch
import os
import re
from dataclasses import dataclass, field
from typing import Union

from guard.diagnostic import Span
from guard.shell.located import LText
from guard.shell.syntax import Node, Source, parse

Value = Union[LText, list[LText]]
MAX_SOURCE_DEPTH = 8
MAX_CALL_DEPTH = 16
SBATCH = re.compile(r"^#SBATCH\s+(.*)$")
EVAL_STOP = re.compile(r"^(\d*>>?|&>>?|\d*<|\||\|\||&&?|;|\d*>&\d+)")
IGNORED_COMMANDS = {"echo", "printf", "mkdir", "cd", "set", "unset", "shift", "exit", "return", "true",
                    "false", "sleep", "rm", "cp", "mv", "ln", "chmod", "touch", "wait", "trap", "ulimit",
                    "module", "conda", "pip", "nvidia-smi", "date", "hostname", "tee", "ls", "cat",
                    "sed", "awk", "grep", "pushd", "popd", "exec", "time", "umask"}


@dataclass
class Var:
    value: Value
    span: Span | None  # where it was assigned (None: from the environment or #SBATCH)
    exported: bool = False
    note: str = ""  # why the value is unknown, when it is


@dataclass
class Command:
    words: list[LText]
    env: dict[str, LText]
    span: Span
    path: str
    condition: str = ""  # the `if` test it sits under, when guard could not decide it


@dataclass
class Heredoc:
    target: LText  # the file it writes (cat > FILE << EOF)
    body: LText
    span: Span
    path: str


@dataclass
class Finding:
    """Something about the script itself: a syntax error, an unresolved `source`, an assumption."""

    kind: str  # "syntax", "source", "unresolved"
    message: str
    span: Span
    path: str


@dataclass
class Script:
    path: str
    commands: list[Command] = field(default_factory=list)
    heredocs: list[Heredoc] = field(default_factory=list)
    variables: dict[str, Var] = field(default_factory=dict)
    exports: dict[str, tuple[LText, Span, str]] = field(default_factory=dict)  # name -> value, where, file
    sbatch: list[tuple[str, LText]] = field(default_factory=list)  # (option, value or "")
    findings: list[Finding] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)


class Unknown(Exception):
    """A value that cannot be known without running the script."""


class Interpreter:
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

    # -- conditions --------------------------------------------------------------------------------
    def _if(self, src: Source, node: Node, depth: int) -> None:
        clauses: list[tuple[Node | None, list[Node]]] = []
        current_test: Node | None = None
        body: list[Node] = []
        state = "test"
        for child in node.children:
            if child.type in ("if", "fi", ";"):
                continue
            if child.type == "then":
                state = "body"
                continue
            if child.type in ("elif_clause", "else_clause"):
                continue
            if state == "test" and child.is_named:
                current_test = child
            elif state == "body" and child.is_named:
                body.append(child)
        clauses.append((current_test, body))
        for child in node.children:
            if child.type == "elif_clause":
                test, stmts, st = None, [], "test"
                for c in child.children:
                    if c.type == "then":
                        st = "body"
                    elif c.is_named:
                        if st == "test":
                            test = c
                        else:
                            stmts.append(c)
                clauses.append((test, stmts))
            elif child.type == "else_clause":
                clauses.append((None, [c for c in child.children if c.is_named]))
        has_else = clauses[-1][0] is None and len(clauses) > 1
        for test, stmts in clauses:
            verdict = True if test is None else self._test(src, test)
            if verdict is True:
                self._block(src, stmts, depth)
                return
            if verdict is None:  # undecidable: every remaining branch may run
                rest = clauses[clauses.index((test, stmts)):]
                label = f"if {test.text.strip()[:60]}" if test is not None else "else"
                self._branches_of(src, [s for _, s in rest], depth, label, include_fallthrough=not has_else)
                return
        # every test false and no else: nothing runs

    def _branches(self, src: Source, bodies: list[Node], depth: int, label: str,
                  include_fallthrough: bool) -> None:
        self._branches_of(src, [[c for c in b.children if c.is_named] for b in bodies], depth, label,
                          include_fallthrough)

    def _branches_of(self, src: Source, bodies: list[list[Node]], depth: int, label: str,
                     include_fallthrough: bool) -> None:
        before = dict(self.vars)
        outcomes = []
        outer = self.condition
        self.condition = label if not outer else f"{outer}; {label}"
        for stmts in bodies:
            self.vars = dict(before)
            self._block(src, stmts, depth)
            if self.exited:  # a branch that exits does not reach the code after it
                self.exited = False
                continue
            outcomes.append(self.vars)
        self.condition = outer
        if include_fallthrough:
            outcomes.append(before)
        merged = dict(before)
        for name in {n for o in outcomes for n in o}:
            values = [o.get(name) for o in outcomes]
            first = values[0]
            if all(v is not None and first is not None and _same(v.value, first.value) for v in values):
                merged[name] = first
            else:
                anchor = next((v.span for v in values if v is not None and v.span), None)
                merged[name] = Var(LText.unknown(f"${name}", (anchor.line, anchor.col) if anchor else None,
                                                 src.path), anchor,
                                   note=f"{name} depends on `{label}`, which guard does not evaluate")
        self.vars = merged

    def _case(self, src: Source, node: Node, depth: int) -> None:
        value_node = node.field("value")
        try:
            word = self.expand(src, value_node) if value_node is not None else None
        except Unknown:
            word = None
        items = [c for c in node.children if c.type == "case_item"]
        bodies = []
        for item in items:
            patterns = item.children_by_field("value")
            stmts = [c for c in item.children if c.is_named and c not in patterns]
            if word is not None and word.resolved:
                if any(fnmatch.fnmatchcase(word.text, p.text.strip("'\"")) for p in patterns):
                    self._block(src, stmts, depth)
                    return
            bodies.append(stmts)
        if word is None or not word.resolved:
            self._branches_of(src, bodies, depth, f"case {value_node.text if value_node else ''}",
                              include_fallthrough=True)

    def _test(self, src: Source, node: Node) -> bool | None:
        """The value of an `if` test when it only compares resolved words; None otherwise."""
        if node.type == "list" and len(node.children) == 3 and node.children[1].type in ("&&", "||"):
            left, op, right = node.children
            a, b = self._test(src, left), self._test(src, right)
            if op.type == "||":
                return True if (a is True or b is True) else (False if a is False and b is False else None)
            return False if (a is False or b is False) else (True if a is True and b is True else None)
        if node.type != "test_command":
            return None
        inner = [c for c in node.children if c.is_named]
        if len(inner) != 1:
            return None
        expr = inner[0]
        try:
            if expr.type == "binary_expression" and len(expr.children) == 3:
                left, op, right = expr.children
                a, b = self.expand(src, left), self.expand(src, right)
                if not (a.resolved and b.resolved):
                    return None
                return _compare(a.text, op.text, b.text)
            if expr.type == "unary_expression" and len(expr.children) == 2:
                op, arg = expr.children
                a = self.expand(src, arg)
                if not a.resolved or op.text not in ("-z", "-n"):
                    return None
                return (a.text == "") == (op.text == "-z")
        except (Unknown, ValueError):
            return None
        return None

    # -- expansion ---------------------------------------------------------------------------------
    def words(self, src: Source, node: Node) -> list[LText]:
        """The words a command-line element becomes (unquoted expansions are split)."""
        if node.type in ("simple_expansion", "expansion"):
            array = self._array_expansion(src, node)
            if array is not None:
                return array
            return self.expand(src, node).split()
        if node.type in ("command_substitution", "arithmetic_expansion"):
            return self.expand(src, node).split()
        if node.type == "string":
            named = [c for c in node.children if c.is_named]
            if len(named) == 1 and named[0].type == "expansion":
                sub = next((c for c in named[0].children if c.type == "subscript"), None)
                if sub is not None and len(sub.children) >= 3 and sub.children[2].text == "@":
                    var = self.vars.get(sub.children[0].text)
                    if var is not None and isinstance(var.value, list):
                        return list(var.value)  # "${A[@]}": one word per element, not split
        if node.type == "concatenation":
            parts = [self._part(src, c) for c in node.children]
            out = parts[0]
            for p in parts[1:]:
                out = out + p
            return [out] if any(c.type in ("string", "raw_string") for c in node.children) else out.split() or [out]
        return [self.expand(src, node)]

    def _after_dollar(self, src: Source, node: Node) -> LText:
        """The word after a stray `$`: a variable name, then literal text."""
        text = node.text
        match = re.match(r"[A-Za-z_][A-Za-z0-9_]*", text)
        if not match or node.type != "word":
            return self.expand(src, node)
        name = match.group(0)
        value = self._lookup(src, node, name) if name in self.vars else \
            LText.unknown("$" + name, src.pos(node), src.path)
        rest = src.literal_range(node.start_byte + len(name.encode()), node.end_byte)
        return value + rest

    def _part(self, src: Source, node: Node) -> LText:
        return self.expand(src, node)

    def _array_expansion(self, src: Source, node: Node) -> list[LText] | None:
        """${A[@]} / ${A[*]} / $A of an array variable: its elements, each split when unquoted."""
        sub = next((c for c in node.children if c.type == "subscript"), None)
        if sub is not None:
            if len(sub.children) < 3 or sub.children[2].text not in ("@", "*"):
                return None
            name = sub.children[0].text
        elif node.type == "simple_expansion" or len([c for c in node.children if c.is_named]) == 1:
            name = next((c.text for c in node.children if c.type == "variable_name"), "")
        else:
            return None
        var = self.vars.get(name)
        if var is None or not isinstance(var.value, list):
            return None
        return [piece for element in var.value for piece in element.split()]

    def expand(self, src: Source, node: Node) -> LText:
        """The text of a word after expansion, without splitting (assignment values, quoted strings)."""
        kind = node.type
        if kind in ("word", "number"):
            return src.unescaped(node)
        if kind == "raw_string":
            return src.literal_range(node.start_byte + 1, node.end_byte - 1)
        if kind == "ansi_c_string":
            return src.literal_range(node.start_byte + 2, node.end_byte - 1)
        if kind in ("string", "translated_string"):
            out = LText("", (src.pos(node),), src.path)
            for child in node.children:
                if child.type == "string_content":
                    out = out + src.unescaped(child, quoted=True)
                elif child.is_named:
                    piece = self.expand(src, child)
                    if child.type == "expansion" or child.type == "simple_expansion":
                        array = self._array_expansion(src, child)
                        if array is not None:
                            piece = _join(array)
                    out = out + piece
            return out
        if kind == "concatenation":
            out = LText("", (src.pos(node),), src.path)
            for child in node.children:
                out = out + self.expand(src, child)
            return out
        if kind == "simple_expansion":
            name_node = next((c for c in node.children if c.is_named), None)
            return self._lookup(src, node, name_node.text if name_node else "")
        if kind == "expansion":
            return self._expansion(src, node)
        if kind == "arithmetic_expansion":
            try:
                value = self._arith(src, next(c for c in node.children if c.is_named))
                return _spread(str(value), src, node)
            except (Unknown, StopIteration, ZeroDivisionError):
                return LText.unknown(node.text, src.pos(node), src.path)
        if kind == "array":
            return _join([w for c in node.children if c.is_named for w in self.words(src, c)])
        return LText.unknown(node.text, src.pos(node), src.path)

    def _lookup(self, src: Source, node: Node, name: str) -> LText:
        var = self.vars.get(name)
        if var is None:
            return LText.unknown(node.text, src.pos(node), src.path)
        value = var.value
        if isinstance(value, list):
            value = value[0] if value else LText("", (src.pos(node),), src.path)
        return value  # partly unknown values keep their mask

    def _expansion(self, src: Source, node: Node) -> LText:
        kids = [c for c in node.children if c.type not in ("${", "}")]
        if not kids:
            return LText.unknown(node.text, src.pos(node), src.path)
        if kids[0].type == "#" and len(kids) == 2:  # ${#X}: length
            value = self._lookup(src, node, kids[1].text)
            var = self.vars.get(kids[1].text)
            if var is not None and isinstance(var.value, list):
                return _spread(str(len(var.value)), src, node)
            return _spread(str(len(value.text)), src, node) if value.resolved else \
                LText.unknown(node.text, src.pos(node), src.path)
        head = kids[0]
        if head.type == "subscript":
            name = head.children[0].text
            index = head.children[2].text if len(head.children) > 2 else ""
            var = self.vars.get(name)
            if var is not None and isinstance(var.value, list):
                if index in ("@", "*"):
                    return _join(var.value)
                if index.isdigit() and int(index) < len(var.value):
                    return var.value[int(index)]
            return LText.unknown(node.text, src.pos(node), src.path)
        name = head.text
        if len(kids) == 1:
            return self._lookup(src, node, name)
        op = kids[1].text
        operand = LText("", (src.pos(kids[1]),), src.path)
        for child in kids[2:]:
            operand = operand + self.expand(src, child)
        var = self.vars.get(name)
        current = self._lookup(src, node, name) if var is not None else None
        empty = current is not None and current.resolved and current.text == ""
        if op in (":-", "-", ":=", "="):
            use_default = var is None or (op.startswith(":") and empty)
            if current is not None and not current.resolved:
                return LText.unknown(node.text, src.pos(node), src.path)
            if use_default:
                if op in (":=", "="):
                    self.vars[name] = Var(operand, src.span(node))
                return operand
            return current
        if op in (":+", "+"):
            if var is None or (current is not None and not current.resolved):
                return LText.unknown(node.text, src.pos(node), src.path) if var is not None else \
                    LText("", (src.pos(node),), src.path)
            return LText("", (src.pos(node),), src.path) if (op == ":+" and empty) else operand
        return LText.unknown(node.text, src.pos(node), src.path)

    def _arith(self, src: Source, node: Node) -> int:
        kind = node.type
        if kind == "number":
            return int(node.text, 0) if not node.text.startswith("0") or node.text == "0" else int(node.text, 8)
        if kind in ("variable_name", "word"):
            value = self._lookup(src, node, node.text)
            if not value.resolved:
                raise Unknown(node.text)
            return int(value.text.strip() or "0")
        if kind in ("simple_expansion", "expansion"):
            value = self.expand(src, node)
            if not value.resolved:
                raise Unknown(node.text)
            return int(value.text.strip() or "0")
        if kind == "parenthesized_expression":
            return self._arith(src, next(c for c in node.children if c.is_named))
        if kind == "unary_expression":
            op, arg = node.children[0].text, node.children[-1]
            v = self._arith(src, arg)
            return {"-": -v, "+": v, "!": int(not v), "~": ~v}.get(op, v)
        if kind == "binary_expression" and len(node.children) == 3:
            a, op, b = node.children
            x, y = self._arith(src, a), self._arith(src, b)
            return _ARITH[op.text](x, y)
        if kind == "ternary_expression":
            named = [c for c in node.children if c.is_named]
            return self._arith(src, named[1]) if self._arith(src, named[0]) else self._arith(src, named[2])
        raise Unknown(node.text)

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


def _compare(a: str, op: str, b: str) -> bool | None:
    if op in ("=", "=="):
        return a == b
    if op == "!=":
        return a != b
    numeric = {"-eq": int.__eq__, "-ne": int.__ne__, "-lt": int.__lt__, "-gt": int.__gt__,
               "-le": int.__le__, "-ge": int.__ge__}
    if op in numeric:
        return numeric[op](int(a), int(b))
    return None


def _c_div(x: int, y: int) -> int:
    q = abs(x) // abs(y)
    return q if (x >= 0) == (y >= 0) else -q


_ARITH = {"+": lambda x, y: x + y, "-": lambda x, y: x - y, "*": lambda x, y: x * y, "/": _c_div,
          "%": lambda x, y: x - _c_div(x, y) * y, "**": lambda x, y: x ** y, "<": lambda x, y: int(x < y),
          ">": lambda x, y: int(x > y), "<=": lambda x, y: int(x <= y), ">=": lambda x, y: int(x >= y),
          "==": lambda x, y: int(x == y), "!=": lambda x, y: int(x != y), "&&": lambda x, y: int(bool(x and y)),
          "||": lambda x, y: int(bool(x or y)), "<<": lambda x, y: x << y, ">>": lambda x, y: x >> y,
          "&": lambda x, y: x & y, "|": lambda x, y: x | y, "^": lambda x, y: x ^ y}


def _same(a: Value, b: Value) -> bool:
    if a is b:
        return True
    if isinstance(a, list) or isinstance(b, list):
        return isinstance(a, list) and isinstance(b, list) and len(a) == len(b) and all(
            _same(x, y) for x, y in zip(a, b))
    return a.text == b.text and a.resolved and b.resolved


def _join(items: list[LText]) -> LText:
    if not items:
        return LText("", ())
    out = items[0]
    for item in items[1:]:
        out = out + LText(" ", (item.first,), item.path) + item
    return out


def _spread(text: str, src: Source, node: Node) -> LText:
    """A computed value located over the expression that produced it."""
    anchor = src.pos(node)
    return LText(text, (anchor,) * len(text), src.path)


def interpret(path: str, text: str, environment: dict[str, str] | None = None) -> Script:
    """Read a whole launch script; `environment` pre-sets variables (tests, --env)."""
    script = Script(path)
    env = {k: Var(LText.plain(v, None, path), None) for k, v in (environment or {}).items()}
    interp = Interpreter(script, env)
    interp.run_file(path, text)
    script.variables = interp.vars
    return script
