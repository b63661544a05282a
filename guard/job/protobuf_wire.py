"""Fields of a protobuf message in its wire format: what a sentencepiece model holds, read without sentencepiece."""

from __future__ import annotations

from collections.abc import Iterator


def fields(data: bytes) -> Iterator[tuple[int, int | bytes]]:
    """(field number, value) of a protobuf message: varints as int, length-delimited as bytes."""
    pos = 0
    while pos < len(data):
        key, pos = varint(data, pos)
        wire, value = key & 7, None
        if wire == 0:
            value, pos = varint(data, pos)
        elif wire == 2:
            length, start = varint(data, pos)
            value, pos = data[start:start + length], start + length
        elif wire in (1, 5):  # fixed64 / fixed32 (a piece's float score): not needed
            pos += 8 if wire == 1 else 4
        else:
            raise ValueError(f"wire type {wire}")
        if pos > len(data):
            raise ValueError("truncated")
        if value is not None:
            yield key >> 3, value


def varint(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while pos < len(data) and shift < 64:
        value, pos, shift = value | (data[pos] & 0x7F) << shift, pos + 1, shift + 7
        if not data[pos - 1] & 0x80:
            return value, pos
    raise ValueError("bad varint")
