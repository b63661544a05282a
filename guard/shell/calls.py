"""Shell function calls for the Interpreter: a function's body runs with its arguments as $1.., "$@", $# (and
`shift`), the caller's positional parameters put back after it."""

from __future__ import annotations

from guard.shell.located import LText
from guard.shell.model import Var
from guard.shell.syntax import Node, Source

POSITIONAL = ("@", "*", "#", *map(str, range(1, 10)))  # what a function call binds and puts back


class Calls:
    """Uses the Interpreter's vars, functions, depth and _block."""

    def _call(self, src: Source, node: Node, name: str, args: list[LText], depth: int) -> None:
        """A shell function's body with its arguments as $1.., $@ and $# (`launch() { torchrun "$@"; }`), the
        caller's positional parameters put back after it."""
        saved = {k: self.vars.get(k) for k in POSITIONAL}
        self._bind(args, src.span(node))
        self.depth += 1
        body = self.functions[name]
        self._block(src, [c for c in body.children if c.is_named], depth)
        self.depth -= 1
        for key, var in saved.items():
            if var is None:
                self.vars.pop(key, None)
            else:
                self.vars[key] = var

    def _bind(self, args: list[LText], span) -> None:
        """$@, $*, $# and $1..$9 for these arguments."""
        self.vars["@"] = self.vars["*"] = Var(list(args), span)
        self.vars["#"] = Var(LText.plain(str(len(args)), None, ""), span)
        for i in range(1, 10):
            if i <= len(args):
                self.vars[str(i)] = Var(args[i - 1], span)
            else:
                self.vars.pop(str(i), None)
