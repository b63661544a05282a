"""Byte sizes: parse "80GB" / "80GiB" / plain bytes, print GiB, and the headroom a GPU keeps free."""

from __future__ import annotations

import re
from dataclasses import dataclass

GIB = 1 << 30  # binary units: what torch.cuda reports and what guard prints
MIB = 1 << 20
KIB = 1 << 10
_UNITS = {"b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
          "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40}


def parse_size(text: str) -> int:
    """'80GB' is 80*10^9 bytes and '80GiB' is 80*2^30 (DESIGN: decimal and binary units alike)."""
    match = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([a-zA-Z]*)\s*", text)
    if match and not match.group(2):  # "80" could mean GB, GiB or bytes: refuse rather than guess
        raise ValueError(f"{text!r} has no unit: write {match.group(1)}GiB (2^30 bytes) or {match.group(1)}GB "
                         "(10^9 bytes)")
    if not match or match.group(2).lower() not in _UNITS:
        raise ValueError(f"expected a size such as 80GiB, 80GB or 85899345920B, got {text!r}")
    value = float(match.group(1)) * _UNITS[match.group(2).lower()]
    if value <= 0 or value > 1 << 60:
        raise ValueError(f"size out of range: {text!r}")
    return int(value)


def gib(nbytes: float) -> str:
    return f"{nbytes / GIB:.2f}"


@dataclass(frozen=True)
class Headroom:
    """Memory to leave free on every GPU: a size, or a share of the GPU's memory (--headroom 2GiB / 10%)."""

    size: int = 0
    share: float = 0.0  # a fraction of the total, 0 <= share < 1

    def of(self, total: int) -> int:
        return self.size + int(total * self.share)

    def describe(self) -> str:
        return f"{self.share:.0%}" if self.share else f"{self.size / GIB:g} GiB"


def parse_headroom(text: str) -> Headroom:
    """'10%' of each GPU, or a size with its unit ('2GiB'); '0' is none. ValueError with the reason."""
    text = text.strip()
    if text.endswith("%"):
        try:
            share = float(text[:-1])
        except ValueError:
            raise ValueError(f"expected a size or a percentage, got {text!r}") from None
        if not 0 <= share < 100:
            raise ValueError(f"a percentage between 0 and 100, got {text!r}")
        return Headroom(share=share / 100)
    if text in ("0", "0.0", ""):
        return Headroom()
    return Headroom(size=parse_size(text))
