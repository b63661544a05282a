"""The positioned JSON/hjson parser: values, positions counted by hand, duplicates, leniencies, errors."""

from __future__ import annotations

import json

import pytest

from guard.diagnostic import Span
from guard.sources.document import SourceError
from guard.sources.json_source import parse_json

TEXT = '{\n  "a": 1,\n  "b": {"c": [10, 2.5e3]},\n  "d": "x"\n}\n'


def test_values_match_the_json_module():
    assert parse_json(TEXT, "t").data == json.loads(TEXT)


def test_key_and_value_positions_are_one_based():
    doc = parse_json(TEXT, "t")
    # line 3 is `  "b": {"c": [10, 2.5e3]},`: "b" starts at col 3, "c" at col 9, 2.5e3 at col 19
    assert doc.locations["/b"].key == Span(3, 3, 3, 6)
    assert doc.locations["/b/c"].key.col == 9
    assert doc.locations["/b/c/1"].value == Span(3, 19, 3, 24)
    assert doc.span("/b/c/1") == Span(3, 19, 3, 24)  # list items have no key: the value
    assert doc.span("/b/missing").line == 3  # falls back to the nearest written ancestor


def test_duplicate_keys_at_any_depth():
    doc = parse_json('{"z": {"stage": 2,\n "stage": 3}, "z2": 1}', "t")
    assert [(d.pointer, d.first.line, d.again.line) for d in doc.duplicates] == [("/z/stage", 1, 2)]


@pytest.mark.parametrize(("text", "kind"), [
    ('{"a": 1, // c\n}', "comment"),
    ('{"a": 1 # c\n}', "comment"),
    ('{"a": /* c */ 1}', "comment"),
    ('{"a": 1,}', "trailing comma"),
    ('{a: 1}', "unquoted key"),
    ("{'a': 'b'}", "single-quoted string"),
    ('{"a": 1\n "b": 2}', "missing comma"),
    ('{"a": NaN}', "non-finite number"),
])
def test_hjson_extensions_parse_and_are_recorded(text, kind):
    doc = parse_json(text, "t")
    assert kind in {item.kind for item in doc.leniencies}


@pytest.mark.parametrize(("text", "line", "col"), [
    ('{\n  "a": 1\n  "b" 2\n}', 3, 7),  # missing ':' after "b"
    ('{"a": [1, 2}', 1, 12),
    ('{"a": tru}', 1, 7),
    ("", 1, 1),
    ('{"a": "x\n"}', 1, 9),
])
def test_syntax_errors_are_located(text, line, col):
    with pytest.raises(SourceError) as info:
        parse_json(text, "t")
    assert (info.value.span.line, info.value.span.col) == (line, col)


def test_template_placeholders_are_explained():
    with pytest.raises(SourceError, match="template placeholder"):
        parse_json('{"train_batch_size": $GLOBAL_BATCH_SIZE}', "t")


def test_deep_nesting_is_refused_not_crashed():
    with pytest.raises(SourceError, match="nesting"):
        parse_json("[" * 5000 + "]" * 5000, "t")
