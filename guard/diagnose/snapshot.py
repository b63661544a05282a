"""Memory snapshots (torch.cuda.memory._dump_snapshot pickles), loaded without running any of their code.

A pickle runs code when it is loaded (GLOBAL/REDUCE opcodes): the unpickler here refuses every global, so
only dicts, lists, tuples, strings and numbers come out (all a snapshot holds), and the file size is capped.
"""

from __future__ import annotations

import io
import os
import pickle
from dataclasses import dataclass, field

from guard.errors import InputError

MAX_BYTES = 1 << 30  # snapshots with long traces reach hundreds of MB; more than this is refused
CATEGORIES = [  # a block's category from its allocation frames (innermost name or file first)
    ("optimizer state", ("optim", "adam", "step", "_init_group", "exp_avg")),
    ("gradients", ("backward", "grad", "reduce_scatter", "allreduce")),
    ("parameters", ("parameter", "module.py", "load_state_dict", "_apply", "to(", "cuda(", "broadcast")),
    ("activations", ("forward", "attention", "mlp", "linear", "layer_norm", "softmax")),
]


class SnapshotError(InputError):
    """A file that is not a snapshot guard can read (one line)."""


class _NoGlobals(pickle.Unpickler):
    def find_class(self, module, name):
        raise SnapshotError(f"refused: the pickle asks for {module}.{name}; a memory snapshot holds only plain data")


def load(path: str) -> dict:
    size = os.path.getsize(path)
    if size > MAX_BYTES:
        raise SnapshotError(f"{path}: {size} bytes; snapshots over {MAX_BYTES} bytes are refused")
    with open(path, "rb") as handle:
        raw = handle.read()
    try:
        data = _NoGlobals(io.BytesIO(raw)).load()
    except SnapshotError as err:
        raise SnapshotError(f"{path}: {err}") from None
    except Exception as err:  # a corrupt pickle: whatever the unpickler raises, one line
        raise SnapshotError(f"{path}: not a pickle guard can read ({type(err).__name__}: {err})") from None
    if not isinstance(data, dict) or "segments" not in data:
        raise SnapshotError(f"{path}: not a memory snapshot (no 'segments')")
    return data


@dataclass
class Summary:
    reserved: int = 0
    allocated: int = 0
    by_category: dict[str, int] = field(default_factory=dict)
    largest: list[tuple[int, str]] = field(default_factory=list)  # (bytes, where)
    expandable_segments: bool = False  # allocator_settings of the snapshot

    @property
    def fragmentation(self) -> float:
        """Reserved but not allocated, as a share of reserved."""
        return 0.0 if not self.reserved else 1 - self.allocated / self.reserved


def _category(frames: list) -> tuple[str, str]:
    text = " ".join(f"{f.get('name', '')} {f.get('filename', '')}" for f in frames if isinstance(f, dict)).lower()
    where = next((f"{f.get('filename', '?')}:{f.get('line', '?')} {f.get('name', '')}" for f in frames
                  if isinstance(f, dict)), "no frames")
    for name, words in CATEGORIES:
        if any(w in text for w in words):
            return name, where
    return "other", where


def summarise(data: dict, device: int | None = None) -> Summary:
    out = Summary()
    settings = data.get("allocator_settings")
    out.expandable_segments = isinstance(settings, dict) and settings.get("expandable_segments") is True
    blocks = []
    for segment in data.get("segments", []):
        if not isinstance(segment, dict) or (device is not None and segment.get("device") != device):
            continue
        out.reserved += int(segment.get("total_size", 0))
        for block in segment.get("blocks", []):
            if not isinstance(block, dict) or block.get("state") != "active_allocated":
                continue
            size = int(block.get("size", 0))
            frames = block.get("frames") or [h for entry in block.get("history", []) for h in entry.get("frames", [])]
            category, where = _category(frames)
            out.allocated += size
            out.by_category[category] = out.by_category.get(category, 0) + size
            blocks.append((size, where))
    out.largest = sorted(blocks, reverse=True)[:5]
    return out
