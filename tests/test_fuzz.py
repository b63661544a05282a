"""Differential and property fuzzing of the loaders and of the whole `guard check` path.

tests/test_bad_input.py throws random bytes and random key soups at the command line. This file
adds what that one cannot see:

- the parser judged by independent readers: Python's `json` for strict JSON and the `hjson`
  package (the reader DeepSpeed itself uses) for the lenient dialect, both ways round;
- `load_document` called directly on raw bytes (BOM, other encodings, NUL bytes, any suffix);
- real configs (the shared corpus, the rule fixtures, the examples) with random edits: values of
  the wrong type, "auto", huge and non-finite numbers, new keys from the schema at any depth,
  checked in every output format, context, world size and DeepSpeed version;
- the exit-code contract split by input kind (parseable -> 0/1, unparseable -> 1, missing -> 2)
  and the location contract (line/col >= 1 and, for JSON, pointing at the reported key or value);
- hand-made hostile inputs: thousands of brackets, 1e400, 10**5000, a YAML alias bomb.

Each property test runs GUARD_FUZZ_EXAMPLES examples (default below) so that a longer campaign is
one environment variable away.
"""

from __future__ import annotations

import copy
import json
import math
import os
import subprocess
import sys

import pytest
import yaml
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from conftest import CORPUS, FIXTURES, ROOT, run_guard
from guard.sources.document import SourceError, split
from guard.sources.json_source import parse_json
from guard.sources.loader import load_document

EXAMPLES = int(os.environ.get("GUARD_FUZZ_EXAMPLES", "150"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


# -- helpers ------------------------------------------------------------------------------------

def _same(a, b) -> bool:
    """Equal data, with NaN equal to NaN, key order respected and 1 == 1.0 (hjson makes 1e3 an int)."""
    if isinstance(a, dict):
        return isinstance(b, dict) and list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return isinstance(b, list) and len(a) == len(b) and all(map(_same, a, b))
    if isinstance(a, bool) or isinstance(b, bool) or a is None or b is None:
        return a is b
    if isinstance(a, float) and math.isnan(a):
        return isinstance(b, float) and math.isnan(b)
    return type(a) is type(b) and a == b or (isinstance(a, (int, float)) and isinstance(b, (int, float)) and a == b)


def _check(path, *args: str, fmt: str = "json") -> tuple[int, str]:
    """Run guard in-process; fail on any traceback or internal error; return (exit code, stdout)."""
    code, out, err = run_guard("check", "--isolated", "--format", fmt, *args, str(path))
    assert "Traceback" not in out + err and "internal error" not in err, err
    assert code in (0, 1, 2), code
    if fmt == "json":
        for diag in json.loads(out):
            assert diag["line"] >= 1 and diag["col"] >= 1, diag
            assert (diag["end_line"], diag["end_col"]) >= (diag["line"], diag["col"]), diag
    elif fmt == "sarif":
        json.loads(out)
    return code, out


def _resolve(data, pointer: str):
    for token in split(pointer):
        if isinstance(data, dict) and token in data:
            data = data[token]
        elif isinstance(data, list) and token.isdigit() and int(token) < len(data):
            data = data[int(token)]
        else:
            raise KeyError(pointer)
    return data


def _schema_keys() -> list[str]:
    schema = json.loads((ROOT / "schemas" / "deepspeed" / "0.19.8" / "config.schema.json").read_text())
    names: set[str] = set()
    stack = [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            if isinstance(node.get("properties"), dict):
                names.update(node["properties"])
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return sorted(names)


def _seed_configs() -> list[dict]:
    files = sorted((ROOT / "examples").rglob("*.json")) + sorted((FIXTURES / "rules").rglob("*.json"))
    if CORPUS.is_dir():
        files += sorted(CORPUS.glob("deepspeed*/*.json"))
    seeds = []
    for path in files:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (ValueError, UnicodeDecodeError):
            continue  # templates and hjson fixtures: the text fuzzers below cover those
        if isinstance(data, dict) and data:
            seeds.append(data)
    return seeds


KEYS = _schema_keys() + ["auto", "zzz", "stagee", "zero_optimisation"]
SEEDS = _seed_configs()
WEIRD = [float("nan"), float("inf"), float("-inf"), 1e308, -1e308, 1e-320, -0.0, 0.5, 1.5, 1e20,
         10**399, -10**399, 2**63, 2**31, 0, -1, 1, 2, 3, 7,
         "auto", "", "cpu", "nvme", "none", "AdamW", "WarmupLR", "true", "8", "1e3", "fp16", "bf16",
         True, False, None, [], {}, [1], ["auto"], {"enabled": True}, {"type": "auto"}, {"stage": 3},
         {"device": "cpu"}, {"enabled": "auto"}]
LEAF = st.one_of(st.sampled_from(WEIRD), st.integers(-2**70, 2**70), st.floats(), st.text(max_size=8))
VALUE = st.recursive(LEAF, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                   st.dictionaries(st.sampled_from(KEYS), inner, max_size=4)),
                     max_leaves=12)


def _paths(data, prefix=()):
    yield prefix
    if isinstance(data, dict):
        for key, value in data.items():
            yield from _paths(value, prefix + (key,))
    elif isinstance(data, list):
        for index, value in enumerate(data):
            yield from _paths(value, prefix + (index,))


@st.composite
def mutated_configs(draw) -> dict:
    """A real config with 1-4 random edits: replace a value, delete a key, or add a schema key."""
    config = copy.deepcopy(draw(st.sampled_from(SEEDS)))
    for _ in range(draw(st.integers(1, 4))):
        path = draw(st.sampled_from(list(_paths(config))))
        target = config
        for token in path:
            target = target[token]
        op = draw(st.sampled_from(["replace", "delete", "add"]))
        if op == "add" and isinstance(target, dict):
            target[draw(st.sampled_from(KEYS))] = copy.deepcopy(draw(VALUE))
        elif path and op in ("replace", "delete"):
            parent = config
            for token in path[:-1]:
                parent = parent[token]
            if op == "delete" and isinstance(parent, dict):
                del parent[path[-1]]
            else:
                parent[path[-1]] = copy.deepcopy(draw(VALUE))
    return config


# -- the parser against independent readers ----------------------------------------------------

TEXT_KEYS = st.text(alphabet="abz_-.$é \"\\/'#:,{}\n\u2028", max_size=6)
JSON_SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-10**30, 10**30),
                         st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=6))
JSON_VALUES = st.recursive(JSON_SCALARS, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                                 st.dictionaries(TEXT_KEYS, inner, max_size=3)),
                           max_leaves=15)


@FUZZ
@given(value=JSON_VALUES, indent=st.sampled_from([None, 0, 2, "\t"]), ascii_only=st.booleans())
def test_strict_json_reads_like_the_json_module_and_locates_every_key(value, indent, ascii_only):
    text = json.dumps(value, indent=indent, ensure_ascii=ascii_only)
    doc = parse_json(text, "t")
    assert _same(json.loads(text), doc.data)
    assert not doc.leniencies
    lines = text.split("\n")  # json.dumps escapes every other line break inside strings
    for pointer, loc in doc.locations.items():
        if loc.key is None:
            continue
        written = lines[loc.key.line - 1][loc.key.col - 1:]
        assert written.startswith(json.dumps(split(pointer)[-1], ensure_ascii=ascii_only)), (pointer, loc)


LENIENT_ALPHABET = ' \n\t{}[]:,"\'0123456789.eE+-abtrufnlsNIy#/*\\'


@FUZZ
@given(text=st.text(alphabet=LENIENT_ALPHABET, max_size=40))
@example(text='{"a": 1,}')
@example(text="{a: 'x' # c\n}")
@example(text='[1\n2]')
def test_random_text_agrees_with_json_and_hjson(text):
    """json accepts => guard reads the same data; guard accepts strictly => json accepts;
    guard accepts leniently => DeepSpeed's reader (hjson) accepts and reads the same data."""
    hjson = pytest.importorskip("hjson")
    try:
        reference, json_ok = json.loads(text), True
    except ValueError:
        reference, json_ok = None, False
    try:
        doc = parse_json(text, "t")
    except SourceError as err:
        assert not json_ok, f"json reads {text!r} but guard refuses it: {err.message}"
        assert err.span.line >= 1 and err.span.col >= 1 and err.message
        return
    if json_ok:
        assert _same(reference, doc.data), text
    elif not doc.leniencies:
        pytest.fail(f"guard reads {text!r} with no leniency noted, but json refuses it")
    # hjson reads NaN/Infinity as quoteless strings, so those are only json's extension; and hjson
    # reads a file without root braces as an object (`0#:0` is {"0#": 0}), where guard sees a scalar
    if (doc.leniencies and isinstance(doc.data, (dict, list))
            and not any(lenient.kind == "non-finite number" for lenient in doc.leniencies)):
        assert _same(json.loads(json.dumps(hjson.loads(text))), doc.data), text


@st.composite
def _hjson_text(draw, value) -> str:
    """Render `value` with the hjson features DeepSpeed's reader accepts, chosen at random."""
    def separators(items: list[str]) -> str:
        out = ""
        for index, item in enumerate(items):
            last = index == len(items) - 1
            kind = draw(st.sampled_from(["none", "trailing", "comment"] if last else ["comma", "newline", "comment"]))
            out += item + {"comma": ", ", "newline": "\n  ", "trailing": ",\n", "none": ""}.get(kind, "")
            if kind == "comment":
                out += ("" if last else ", ") + draw(st.sampled_from(["# c\n", "// c\n", "/* c */ "]))
        return out

    if isinstance(value, dict):
        members = [f"{k if draw(st.booleans()) else json.dumps(k)}: {draw(_hjson_text(v))}" for k, v in value.items()]
        return "{" + separators(members) + "}"
    if isinstance(value, list):
        return "[" + separators([draw(_hjson_text(v)) for v in value]) + "]"
    if isinstance(value, str) and "'" not in value and "\\" not in value and draw(st.booleans()):
        return f"'{value}'"
    return json.dumps(value)


BARE_KEYS = st.from_regex(r"[a-z_][a-z0-9_]{0,6}", fullmatch=True)
HJSON_VALUES = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-10**6, 10**6), st.floats(-1e6, 1e6, allow_nan=False),
              st.text(alphabet="ab c'\"\\/#", max_size=5)),
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(BARE_KEYS, inner, max_size=3)),
    max_leaves=12)


@FUZZ
@given(data=st.data())
def test_hjson_dialect_reads_like_deepspeeds_reader(data):
    hjson = pytest.importorskip("hjson")
    value = data.draw(st.dictionaries(BARE_KEYS, HJSON_VALUES, max_size=4))
    text = data.draw(_hjson_text(value))
    parsed = parse_json(text, "t").data
    assert _same(value, parsed), text
    assert _same(hjson.loads(text), parsed), text


# -- load_document on raw bytes ------------------------------------------------------------------

@FUZZ
@given(data=st.binary(max_size=200), prefix=st.sampled_from([b"", b"\xef\xbb\xbf", b"\xff\xfe", b"\xfe\xff"]),
       suffix=st.sampled_from([".json", ".hjson", ".yaml", ".yml", ".txt", ""]))
def test_load_document_raises_only_located_source_errors(tmp_path, data, prefix, suffix):
    path = tmp_path / f"ds_config{suffix}"
    path.write_bytes(prefix + data)
    try:
        doc = load_document(str(path))
    except SourceError as err:
        assert err.code in ("GRD001", "GRD002") and err.message
        assert err.span.line >= 1 and err.span.col >= 1
        return
    assert doc.has_bom == (prefix + data).startswith(b"\xef\xbb\xbf")


@FUZZ
@given(config=st.dictionaries(st.sampled_from(KEYS), JSON_SCALARS, max_size=6), bom=st.booleans(),
       suffix=st.sampled_from([".json", ".yaml"]))
def test_bom_is_transparent(tmp_path, config, bom, suffix):
    text = json.dumps(config) if suffix == ".json" else yaml.safe_dump(config, sort_keys=False)
    path = tmp_path / f"ds_config{suffix}"
    path.write_bytes((b"\xef\xbb\xbf" if bom else b"") + text.encode("utf-8"))
    doc = load_document(str(path))
    assert doc.has_bom is bom and _same(config, doc.data)


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-le", "utf-32", "latin-1", "cp1252", "mac_roman"])
def test_other_encodings_are_one_syntax_error(tmp_path, encoding):
    """None of these byte strings is UTF-8 (NUL bytes, or a lone 0x8e/0xe9 for 'é')."""
    path = tmp_path / "ds_config.json"
    path.write_bytes('{"train_batch_size": 8, "comment": "café"}'.encode(encoding))
    code, out = _check(path)
    assert code == 1 and [d["code"] for d in json.loads(out)] == ["GRD002"], out


# -- the whole check path on edited real configs ------------------------------------------------

@FUZZ
@given(config=mutated_configs(), as_yaml=st.booleans(), indent=st.sampled_from([None, 2]),
       fmt=st.sampled_from(["json", "json", "sarif", "full", "github", "concise"]),
       context=st.sampled_from(["auto", "hf", "deepspeed"]), world=st.sampled_from([None, "1", "3", "8", "64"]),
       version=st.sampled_from([None, "0.14.0", "0.16.9", "0.19.3", "0.19.8", "0.20.0"]))
@example(config={"train_batch_size": 8, "fp16": {"enabled": True, "loss_scale": 10**399}},
         as_yaml=False, indent=None, fmt="json", context="deepspeed", world=None, version=None)
def test_edited_real_configs(tmp_path, config, as_yaml, indent, fmt, context, world, version):
    path = tmp_path / ("ds_config.yaml" if as_yaml else "ds_config.json")
    text = yaml.safe_dump(config) if as_yaml else json.dumps(config, indent=indent)
    path.write_text(text, encoding="utf-8")
    args = ["--context", context] + (["--world-size", world] if world else []) + \
           (["--deepspeed-version", version] if version else [])
    code, out = _check(path, *args, fmt=fmt)
    assert code in (0, 1)  # the file is readable and parses (or is one GRD002 for a 401-char number)
    if fmt != "json" or as_yaml:
        return
    lines = text.split("\n")
    for diag in json.loads(out):  # a pointer that names a written key or value points at it
        pointer = diag["pointer"]
        if not pointer or not pointer.startswith("/"):
            continue
        try:
            value = _resolve(config, pointer)
        except KeyError:
            continue  # a missing key: reported at its nearest written ancestor
        written = lines[diag["line"] - 1][diag["col"] - 1:]
        assert written.startswith((json.dumps(split(pointer)[-1]), json.dumps(value)[:1])), (diag, written[:40])


YAML_ODDITIES = ["2024-01-01", "2024-01-01 10:00:00", "!!binary aGVsbG8=", "!!set {a, b}", ".inf", "-.inf", ".nan",
                 "0x10", "0o17", "017", "1_000", "yes", "off", "~", "1" + "0" * 1000, "1.0e400", "'auto'",
                 "[auto, 1, {stage: 3}]", "{? [1, 2] : x}", "&a {stage: 2}", "!!str 3", "!!float 8", "!!int '8'"]


@FUZZ
@given(edits=st.lists(st.tuples(st.sampled_from(["train_batch_size", "train_micro_batch_size_per_gpu",
                                                  "gradient_accumulation_steps", "gradient_clipping", "steps_per_print",
                                                  "zero_optimization", "fp16", "bf16", "optimizer", "scheduler",
                                                  "zero_optimization:\n  stage", "fp16:\n  loss_scale",
                                                  "optimizer:\n  params:\n    lr", "scheduler:\n  params:\n    warmup_num_steps"]),
                                st.sampled_from(YAML_ODDITIES)), min_size=1, max_size=4, unique_by=lambda e: e[0].split(":")[0]),
       fmt=st.sampled_from(["json", "sarif", "full"]))
def test_yaml_only_values(tmp_path, edits, fmt):
    """Dates, bytes, sets, YAML 1.1 octal/booleans, .inf/.nan and 1000-digit integers at DeepSpeed keys."""
    path = tmp_path / "ds_config.yaml"
    path.write_text("".join(f"{key}: {value}\n" for key, value in edits))
    _check(path, fmt=fmt)


# -- exit codes by kind of input ----------------------------------------------------------------

PATH_KINDS = {
    "good": ('{"train_micro_batch_size_per_gpu": 4, "gradient_clipping": 1.0}', None),
    "bad_value": ('{"train_batch_size": 8, "fp16": {"enabled": true}, "bf16": {"enabled": true}}', 1),
    "syntax": ('{"train_batch_size": ', 1),
    "hjson": ("{train_batch_size: 8, // c\n gradient_clipping: 1.0,}", None),
    "yaml": ("train_batch_size: 8\ngradient_clipping: 1.0\n", None),
    "not_ds": ('{"name": "package"}', None),
}


@FUZZ
@given(kinds=st.lists(st.sampled_from(sorted(PATH_KINDS) + ["missing", "directory", "empty_directory"]),
                      min_size=1, max_size=5))
def test_exit_code_by_kind_of_input(tmp_path_factory, kinds):
    base = tmp_path_factory.mktemp("paths")
    paths = []
    for index, kind in enumerate(kinds):
        if kind == "missing":
            paths.append(str(base / f"missing{index}.json"))
        elif kind in ("directory", "empty_directory"):
            folder = base / f"dir{index}"
            folder.mkdir()
            if kind == "directory":
                (folder / "ds_config.json").write_text(PATH_KINDS["good"][0])
                (folder / "package.json").write_text(PATH_KINDS["not_ds"][0])
            paths.append(str(folder))
        else:
            suffix = ".yaml" if kind == "yaml" else ".hjson" if kind == "hjson" else ".json"
            path = base / f"ds_config_{index}{suffix}"
            path.write_text(PATH_KINDS[kind][0])
            paths.append(str(path))
    code, out, err = run_guard("check", "--isolated", "--format", "json", *paths)
    assert "Traceback" not in err and "internal error" not in err, err
    if "missing" in kinds:
        expected = {2}
    elif any(PATH_KINDS.get(kind, (None, None))[1] == 1 for kind in kinds):
        expected = {1}
    else:
        expected = {0, 1}  # a clean-looking file may still hold a finding; never a usage error
    assert code in expected, (kinds, code, out)
    diags = json.loads(out)
    assert all(d["line"] >= 1 and d["col"] >= 1 for d in diags)
    assert sum(d["code"] == "GRD001" for d in diags) == kinds.count("missing")
    assert sum(d["code"] == "GRD002" for d in diags) == kinds.count("syntax")


# -- hostile inputs, by hand -------------------------------------------------------------------

HOSTILE = {
    "brackets.json": (b"[" * 5000 + b"]" * 5000, "GRD002"),
    "objects.json": (b'{"a":' * 3000 + b"1" + b"}" * 3000, "GRD002"),
    "unclosed.json": (b"[" * 5000, "GRD002"),
    "mixed.hjson": (b"{a: [" * 2000 + b"1" + b"]}" * 2000, "GRD002"),
    "comments.hjson": (b"{\n" + b"// x\n" * 5000 + b"train_batch_size: 8}", None),
    "flow.yaml": (b"train_batch_size: " + b"[" * 5000 + b"]" * 5000 + b"\n", "GRD002"),
    "bom_only.json": (b"\xef\xbb\xbf", "GRD002"),
    "whitespace.json": (b" \n\t\r\n", "GRD002"),
    "empty.yaml": (b"", "GRD002"),
    "nan.json": (b'{"train_batch_size": NaN, "gradient_clipping": Infinity, "steps_per_print": -Infinity}', None),
    "nan.yaml": (b"train_batch_size: .nan\ngradient_clipping: .inf\nsteps_per_print: -.inf\n", None),
    "e400.json": (b'{"train_batch_size": 1e400, "gradient_clipping": -1e400, "train_micro_batch_size_per_gpu": 1e-400}',
                  None),
    "int5000.json": (b'{"train_batch_size": 1' + b"0" * 5000 + b"}", "GRD002"),
    "int5000.yaml": (b"train_batch_size: 1" + b"0" * 5000 + b"\n", "GRD002"),
    "int399.json": (b'{"train_batch_size": 8, "fp16": {"enabled": true, "loss_scale": 1' + b"0" * 399 + b"}}", None),
    "int4000.yaml": (b"train_batch_size: 1" + b"0" * 4000 + b"\nfp16: {enabled: true, loss_scale: 1" + b"0" * 4000 + b"}\n",
                     None),
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
@pytest.mark.parametrize("fmt", ["json", "full", "sarif"])
def test_hostile_inputs(tmp_path, name, fmt):
    data, expected = HOSTILE[name]
    path = tmp_path / name
    path.write_bytes(data)
    code, out = _check(path, fmt=fmt)
    assert code in (0, 1)
    if fmt == "json" and expected:
        assert [d["code"] for d in json.loads(out)] == [expected]


def test_huge_integer_is_not_an_internal_error(tmp_path):
    """Reproducer: a 400-digit integer is within the parser's limit, but a rule converts it to float."""
    path = tmp_path / "ds_config.json"
    path.write_text('{"train_batch_size": 8, "fp16": {"enabled": true, "loss_scale": 1' + "0" * 399 + "}}")
    code, _, err = run_guard("check", "--isolated", "--format", "json", str(path))
    assert "internal error" not in err and code in (0, 1), err


def test_yaml_alias_bomb_does_not_hang(tmp_path):
    """A 300-byte YAML file whose aliases expand to 10**9 scalars: yaml.safe_load shares the
    aliased objects and returns at once, so a linter must not walk every expansion."""
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, 9)]
    path = tmp_path / "ds_config.yaml"
    path.write_text("\n".join(lines) + "\ntrain_batch_size: 8\n")
    assert isinstance(yaml.safe_load(path.read_text()), dict)  # the reference reader copes
    try:
        result = subprocess.run([sys.executable, "-m", "guard", "check", "--isolated", str(path)],
                                capture_output=True, text=True, cwd=ROOT, timeout=8)
    except subprocess.TimeoutExpired:
        pytest.fail("guard check did not finish in 8 s on a YAML alias bomb (it walks every alias expansion)")
    assert result.returncode in (0, 1), result.stdout + result.stderr


# -- line breaks other than \n ------------------------------------------------------------------

def test_cr_only_line_endings_count_lines(tmp_path):
    """Old-Mac CR line breaks: editors, SARIF viewers and pyyaml count each CR as a new line.
    'stagee' is written on the third line, its quote at column 25."""
    path = tmp_path / "ds_config.json"
    path.write_bytes(b'{\r  "train_batch_size": 8,\r  "zero_optimization": {"stagee": 1}\r}\r')
    _, out = _check(path, "--select", "DS101")
    assert [(d["line"], d["col"]) for d in json.loads(out)] == [(3, 25)]


def test_full_format_shows_the_reported_line_when_a_string_holds_u2028(tmp_path):
    """U+2028 inside a JSON string is not a line break for the parser (nor for json or editors),
    so the excerpt under line 2 must be the text of line 2."""
    path = tmp_path / "ds_config.json"
    path.write_text('{"train_batch_size": 8, "x": "a\u2028b",\n  "zero_optimization": {"stagee": 1}}\n', encoding="utf-8")
    _, out = _check(path, "--select", "DS101")
    assert [(d["line"], d["col"]) for d in json.loads(out)] == [(2, 25)]
    _, full = _check(path, "--select", "DS101", fmt="full")
    excerpt = next(line for line in full.splitlines() if line.lstrip().startswith("2 |"))
    assert '"stagee"' in excerpt, full
