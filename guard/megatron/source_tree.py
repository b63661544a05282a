"""Find modules, classes and functions in a Python source checkout by reading it with libcst (no import)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import libcst as cst

from guard.megatron.cst_values import dotted


@dataclass(frozen=True)
class Found:
    """A class or function definition and the module it lives in."""

    module: str
    node: cst.ClassDef | cst.FunctionDef


class SourceTree:
    """A checkout root, plus single packages found elsewhere (DeepSpeed's, for Megatron-DeepSpeed)."""

    def __init__(self, root: Path, packages: dict[str, Path] | None = None):
        self.root = Path(root)
        self.packages = {name: Path(where) for name, where in (packages or {}).items()}
        self._parsed: dict[str, cst.Module | None] = {}
        self.script_dirs: list[Path] = []  # folders of entry scripts (their sibling imports resolve there)

    def file_for(self, module: str) -> Path | None:
        rel = Path(*module.split("."))
        head = module.split(".")[0]
        roots = [self.packages[head]] if head in self.packages else [self.root, *self.script_dirs]
        for root in roots:
            for candidate in (root / rel.with_suffix(".py"), root / rel / "__init__.py"):
                if candidate.is_file():
                    return candidate
        return None

    def module(self, name: str) -> cst.Module | None:
        if name not in self._parsed:
            path = self.file_for(name)
            self._parsed[name] = _parse(path) if path else None
        return self._parsed[name]

    def is_package(self, module: str) -> bool:
        path = self.file_for(module)
        return path is not None and path.name == "__init__.py"

    def absolute(self, module: str, node: cst.ImportFrom) -> str:
        """The absolute module an ImportFrom names, relative to `module`."""
        target = dotted(node.module) if node.module else ""
        level = len(node.relative)
        if not level:
            return target or ""
        parts = module.split(".")
        base = parts if self.is_package(module) else parts[:-1]
        base = base[: len(base) - (level - 1)] if level > 1 else base
        return ".".join([*base, target] if target else base)

    def imports(self, module: str, body: list[cst.CSTNode] | None = None) -> dict[str, str]:
        """Local name -> 'module' or 'module:name' for the imports in `body` (default: module level)."""
        if body is None:
            tree = self.module(module)
            body = list(tree.body) if tree else []
        out: dict[str, str] = {}
        for stmt in _flatten(body):
            for small in getattr(stmt, "body", ()) if isinstance(stmt, cst.SimpleStatementLine) else ():
                if isinstance(small, cst.Import):
                    for alias in small.names:
                        name = dotted(alias.name) or ""
                        local = alias.asname.name.value if alias.asname else name.split(".")[0]
                        out[local] = name if alias.asname else name.split(".")[0]
                elif isinstance(small, cst.ImportFrom) and not isinstance(small.names, cst.ImportStar):
                    source = self.absolute(module, small)
                    for alias in small.names:
                        name = dotted(alias.name) or ""
                        local = alias.asname.name.value if alias.asname else name
                        out[local] = f"{source}:{name}"
        return out

    def find(self, module: str, name: str, kind: type, _seen: frozenset = frozenset()) -> Found | None:
        """The definition of `name` as seen from `module`, following imports and re-exports."""
        if (module, name) in _seen:
            return None
        seen = _seen | {(module, name)}
        tree = self.module(module)
        if tree is None:
            return None
        for stmt in _flatten(list(tree.body)):
            if isinstance(stmt, kind) and stmt.name.value == name:
                return Found(module, stmt)
        target = self.imports(module).get(name)
        if target and ":" in target:
            source, original = target.split(":", 1)
            found = self.find(source, original, kind, seen)
            if found is None and self.module(f"{source}.{original}") is not None:
                return None  # a submodule, not a definition
            return found
        return None

    def resolve(self, module: str, expr: str, kind: type, local_imports: dict[str, str] | None = None
                ) -> Found | None:
        """Resolve a dotted name such as 'TransformerConfig' or 'deepspeed.add_config_arguments'."""
        imports = {**self.imports(module), **(local_imports or {})}
        head, _, rest = expr.partition(".")
        if not rest:
            if head in imports and ":" in imports[head]:
                source, original = imports[head].split(":", 1)
                return self.find(source, original, kind)
            return self.find(module, head, kind)
        target = imports.get(head)
        if target is None:
            return None
        mod = target.replace(":", ".")
        *more, last = rest.split(".")
        return self.find(".".join([mod, *more]), last, kind)


def _flatten(body: list[cst.CSTNode]) -> list[cst.CSTNode]:
    """Statements of a body, with those inside if/try blocks (conditional imports) lifted out."""
    out: list[cst.CSTNode] = []
    for stmt in body:
        out.append(stmt)
        if isinstance(stmt, (cst.If, cst.Try)):
            out.extend(_flatten(list(stmt.body.body)))
            orelse = getattr(stmt, "orelse", None)
            while isinstance(orelse, cst.If):
                out.extend(_flatten(list(orelse.body.body)))
                orelse = orelse.orelse
            if isinstance(orelse, cst.Else):
                out.extend(_flatten(list(orelse.body.body)))
            for handler in getattr(stmt, "handlers", ()):
                out.extend(_flatten(list(handler.body.body)))
    return out


def _parse(path: Path) -> cst.Module | None:
    """A module from its bytes (libcst honours a `# -*- coding: ...` line; forks ship latin-1 files); None
    when it does not parse (a fork's broken or Python 2 file must not stop the others being read)."""
    try:
        return cst.parse_module(path.read_bytes())
    except (cst.ParserSyntaxError, UnicodeDecodeError, LookupError):
        return None
