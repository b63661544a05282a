"""Read a config file from disk: bytes to text (encodings, BOM) to a positioned Document."""

from __future__ import annotations

import os

from guard.inputs import sniff
from guard.sources.document import Document, SourceError
from guard.sources.json_source import parse_json
from guard.units import MIB

YAML_SUFFIXES = (".yaml", ".yml")
MAX_BYTES = 16 * MIB  # a DeepSpeed config is a few kilobytes; refuse to chew on a dump


def read_text(path: str) -> tuple[str, bool]:
    """Return the file's text and whether it started with a UTF-8 byte-order mark."""
    if os.path.isdir(path):
        raise SourceError("is a directory, not a config file", code="GRD001")
    try:
        size = os.path.getsize(path)
        if size > MAX_BYTES:
            raise SourceError(f"file is {size} bytes; configs over {MAX_BYTES} bytes are refused",
                              code="GRD001")
        with open(path, "rb") as handle:
            raw = handle.read()
    except OSError as err:
        raise SourceError(f"cannot read file: {err.strerror or err}", code="GRD001") from None
    if b"\x00" in raw[:8192]:
        raise SourceError("binary content (NUL bytes): not a text config file")
    bom = raw.startswith(b"\xef\xbb\xbf")
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        line = raw[: err.start].count(b"\n") + 1
        col = err.start - (raw.rfind(b"\n", 0, err.start) + 1) + 1
        from guard.diagnostic import Span

        raise SourceError(f"not valid UTF-8 (byte 0x{raw[err.start]:02x})", Span(line, col)) from None
    return text, bom


def load_document(path: str) -> Document:
    """The file as JSON (hjson) or YAML: by its content where that decides (a JSON `ds.conf`, a YAML file
    named `.txt`), else by its name."""
    text, bom = read_text(path)
    seen = sniff(text)
    name = path.lower()
    as_yaml = (seen == "yaml" and not name.endswith((".json", ".hjson"))) or \
        (seen != "json" and name.endswith(YAML_SUFFIXES))  # a `.json` file stays JSON: DeepSpeed reads it so
    if as_yaml:  # PyYAML is imported for YAML files only: a JSON lint stays fast
        from guard.sources.yaml_source import parse_yaml

        parse = parse_yaml
    else:
        parse = parse_json
    doc = parse(text, path)
    doc.has_bom = bom
    return doc
