"""`if` / `case` in a launch script: decide what can be decided, merge branches that cannot."""

from __future__ import annotations

import fnmatch

from guard.shell.located import LText
from guard.shell.model import Unknown, Value, Var
from guard.shell.syntax import Node, Source


class Conditions:
    """Branch handling for the Interpreter (uses its vars, _block and expand)."""

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


def _same(a: Value, b: Value) -> bool:
    if a is b:
        return True
    if isinstance(a, list) or isinstance(b, list):
        return isinstance(a, list) and isinstance(b, list) and len(a) == len(b) and all(
            _same(x, y) for x, y in zip(a, b))
    return a.text == b.text and a.resolved and b.resolved
