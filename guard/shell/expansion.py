"""Word expansion as bash does it, statically: parameters, arrays, defaults, arithmetic, quoting."""

from __future__ import annotations

import re

from guard.shell.located import LText
from guard.shell.model import Unknown, Var
from guard.shell.syntax import Node, Source


LEADING = re.compile(r"(?:[ \t\n]|\\\n)*")  # blanks and line continuations at the start of a token


class Expander:
    """Expansion for the Interpreter (reads and, for ${X:=d}, writes its vars)."""

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
            if len(named) == 1 and named[0].type in ("simple_expansion", "expansion") and \
                    any(c.type == "special_variable_name" and c.text == "@" for c in named[0].children):
                var = self.vars.get("@")  # "$@" in a function: one word per argument, not split
                if var is not None and isinstance(var.value, list):
                    return list(var.value)
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
            name = next((c.text for c in node.children if c.type == "variable_name"
                         or (c.type == "special_variable_name" and c.text in ("@", "*"))), "")
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
            return self._string(src, node)
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
            except (Unknown, StopIteration, ZeroDivisionError, ValueError, KeyError, RecursionError):
                return LText.unknown(node.text, src.pos(node), src.path)
        if kind == "array":
            return _join([w for c in node.children if c.is_named for w in self.words(src, c)])
        return LText.unknown(node.text, src.pos(node), src.path)

    def _string(self, src: Source, node: Node) -> LText:
        """A double-quoted string: its text, expansions expanded, `\\<newline>` dropped, newlines kept."""
        out = LText("", (src.pos(node),), src.path)
        previous = None
        for child in node.children:
            # tree-sitter-bash leaves a string's line breaks between its children, and puts the blanks before
            # a `$` or the closing quote into that token ("$A $B " -> `$A`, ` $B`, ` "`): all are text
            gap = child.start_byte - previous if previous is not None else 0
            lead = len(LEADING.match(child.text).group(0).encode()) if previous is not None else 0
            if gap > 0 or lead:
                out = out + _continued(src.literal_range(child.start_byte - max(gap, 0), child.start_byte + lead))
            previous = child.end_byte
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
            text = node.text
            if text[:2].lower() == "0x":
                return int(text, 16)
            return int(text, 8) if text.startswith("0") and len(text) > 1 else int(text, 10)  # 010 is octal
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
            if op.text in ("**", "<<", ">>") and not 0 <= y <= 64:
                raise Unknown(node.text)  # bash wraps at 64 bits; guard does not compute giants
            result = _ARITH[op.text](x, y)
            if abs(result) >= 1 << 63:
                raise Unknown(node.text)
            return result
        if kind == "ternary_expression":
            named = [c for c in node.children if c.is_named]
            return self._arith(src, named[1]) if self._arith(src, named[0]) else self._arith(src, named[2])
        raise Unknown(node.text)


def _c_div(x: int, y: int) -> int:
    q = abs(x) // abs(y)
    return q if (x >= 0) == (y >= 0) else -q


_ARITH = {"+": lambda x, y: x + y, "-": lambda x, y: x - y, "*": lambda x, y: x * y, "/": _c_div,
          "%": lambda x, y: x - _c_div(x, y) * y, "**": lambda x, y: x ** y, "<": lambda x, y: int(x < y),
          ">": lambda x, y: int(x > y), "<=": lambda x, y: int(x <= y), ">=": lambda x, y: int(x >= y),
          "==": lambda x, y: int(x == y), "!=": lambda x, y: int(x != y), "&&": lambda x, y: int(bool(x and y)),
          "||": lambda x, y: int(bool(x or y)), "<<": lambda x, y: x << y, ">>": lambda x, y: x >> y,
          "&": lambda x, y: x & y, "|": lambda x, y: x | y, "^": lambda x, y: x ^ y}


def _continued(text: LText) -> LText:
    """Text between a string's pieces with its line continuations (backslash, newline) taken out."""
    if "\\\n" not in text.text:
        return text
    keep = [i for i in range(len(text.text)) if text.text[i:i + 2] != "\\\n" and text.text[i - 1:i + 1] != "\\\n"]
    return LText("".join(text.text[i] for i in keep), tuple(text.pos[i] for i in keep) or (text.first,), text.path)


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
