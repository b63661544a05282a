"""YAML configs (GPT-NeoX, accelerate) with positions taken from pyyaml's node API."""

from __future__ import annotations

import re
from typing import Any

import yaml

from guard.diagnostic import Span
from guard.sources.document import Document, Duplicate, Location, SourceError, join, split_lines

MAX_DEPTH = 200
MAX_VALUES = 1_000_000  # aliases can make a 300-byte file expand to 10**9 values ("billion laughs")
_COMMENT = re.compile(r"(?:^|\s)(#.*)$")
_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _span(node: yaml.Node) -> Span:
    s, e = node.start_mark, node.end_mark
    return Span(s.line + 1, s.column + 1, e.line + 1, e.column + 1)


def _expanded_size(node: yaml.Node, memo: dict[int, int], depth: int = 0) -> int:
    """How many values `node` stands for once every alias is expanded (memoised per node)."""
    if id(node) in memo:
        return memo[id(node)]
    if depth > MAX_DEPTH:
        raise SourceError(f"nesting deeper than {MAX_DEPTH} levels", _span(node))
    memo[id(node)] = 1  # a recursive alias counts once instead of looping
    size = 1
    if isinstance(node, yaml.MappingNode):
        size += sum(_expanded_size(k, memo, depth + 1) + _expanded_size(v, memo, depth + 1) for k, v in node.value)
    elif isinstance(node, yaml.SequenceNode):
        size += sum(_expanded_size(v, memo, depth + 1) for v in node.value)
    memo[id(node)] = size
    if size > MAX_VALUES:
        raise SourceError(f"YAML aliases expand to more than {MAX_VALUES:,} values", _span(node))
    return size


class _Walker:
    def __init__(self, loader: yaml.SafeLoader):
        self.loader = loader
        self.locations: dict[str, Location] = {}
        self.duplicates: list[Duplicate] = []

    def walk(self, node: yaml.Node, pointer: str, key: Span | None, depth: int) -> Any:
        if depth > MAX_DEPTH:
            raise SourceError(f"nesting deeper than {MAX_DEPTH} levels", _span(node))
        self.locations[pointer] = Location(key, _span(node))
        if isinstance(node, yaml.MappingNode):
            self.loader.flatten_mapping(node)  # resolves YAML merge keys (<<)
            out: dict[str, Any] = {}
            seen: dict[str, Span] = {}
            for key_node, value_node in node.value:
                name = self.loader.construct_object(key_node, deep=True)
                name = name if isinstance(name, str) else str(name)
                key_span = _span(key_node)
                child = join(pointer, name)
                if name in seen:
                    self.duplicates.append(Duplicate(child, seen[name], key_span))
                seen[name] = key_span
                out[name] = self.walk(value_node, child, key_span, depth + 1)
            return out
        if isinstance(node, yaml.SequenceNode):
            return [self.walk(v, join(pointer, i), None, depth + 1) for i, v in enumerate(node.value)]
        return self.loader.construct_object(node, deep=True)


def parse_yaml(text: str, path: str) -> Document:
    loader = _Loader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            raise SourceError("the file holds no YAML document")
        _expanded_size(node, {})
        walker = _Walker(loader)
        data = walker.walk(node, "", None, 0)
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        span = Span(mark.line + 1, mark.column + 1) if mark else Span(1, 1)
        raise SourceError(f"invalid YAML: {err.problem or err.context}", span) from None
    except yaml.YAMLError as err:
        raise SourceError(f"invalid YAML: {err}") from None
    except ValueError as err:  # e.g. an integer with thousands of digits
        raise SourceError(f"invalid YAML value: {err}") from None
    except RecursionError:
        raise SourceError(f"nesting deeper than {MAX_DEPTH} levels") from None
    finally:
        loader.dispose()
    comments = {}
    for number, line in enumerate(split_lines(text), 1):
        if "#" in line and (m := _COMMENT.search(line)):
            comments[number] = m.group(1)
    return Document(path, text, data, "yaml", walker.locations, walker.duplicates, comments=comments)
