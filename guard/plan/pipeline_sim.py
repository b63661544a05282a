"""Replay the pipeline schedule op by op: the real warm-up, steady state and cool-down of every rank.

Each rank runs the forwards and backwards in the order megatron-core's schedule gives them
(guard.memory.schedule.order: 1F1B, or interleaved with microbatch groups); an op starts when its rank is
free and its input has arrived: a forward after the previous stage's forward of the same microbatch and
chunk (the last stage's chunk c - 1 for the first stage), a backward after the next stage's backward (the
first stage's chunk c + 1 for the last stage, or the loss). Sends between ranks take `send` seconds.
"""

from __future__ import annotations

from guard.memory.schedule import order


def microbatch_of(k: int, m: int, v: int, group: int) -> int:
    """The microbatch of the k-th (virtual) forward, in the groups of G that forward_chunk walks."""
    if v == 1:
        return k
    last = group * max(0, -(-(m - group) // group))
    if k < last * v:
        return (k // (group * v)) * group + (k % (group * v)) % group
    return last + (k - last * v) % (m - last)


def simulate(forward: list[list[float]], backward: list[list[float]], m: int, send: float = 0.0,
             group: int | None = None) -> float:
    """Seconds from the first forward to the last backward; forward[r][c]: rank r, chunk c, one microbatch."""
    p, v = len(forward), len(forward[0])
    g = group or p
    ops = []
    for r in range(p):
        seq, nf, nb = [], 0, 0
        for kind, chunk in order(p, r, m, v, g):
            k = nf if kind == "F" else nb
            seq.append((kind, chunk, microbatch_of(k, m, v, g)))
            nf, nb = (nf + 1, nb) if kind == "F" else (nf, nb + 1)
        ops.append(seq)
    done: dict[tuple[str, int, int, int], float] = {}
    free, cursor, remaining = [0.0] * p, [0] * p, sum(len(s) for s in ops)
    while remaining:
        progressed = False
        for r in range(p):
            while cursor[r] < len(ops[r]):
                kind, c, mb = ops[r][cursor[r]]
                ready = _ready(done, kind, r, c, mb, p, v, send)
                if ready is None:
                    break
                cost = forward[r][c] if kind == "F" else backward[r][c]
                free[r] = max(free[r], ready) + cost
                done[(kind, r, c, mb)] = free[r]
                cursor[r] += 1
                remaining -= 1
                progressed = True
        if not progressed:
            raise RuntimeError("pipeline schedule deadlocked")  # a schedule order bug, not a user error
    return max(free)


def _ready(done, kind: str, r: int, c: int, mb: int, p: int, v: int, send: float) -> float | None:
    """When the op's input is there (None: not yet produced)."""
    if kind == "F":
        dep = ("F", r - 1, c, mb) if r > 0 else ("F", p - 1, c - 1, mb) if c > 0 else None
    elif r < p - 1:
        dep = ("B", r + 1, c, mb)
    else:
        dep = ("B", 0, c + 1, mb) if c < v - 1 else ("F", r, c, mb)
    if dep is None:
        return 0.0
    if dep not in done:
        return None
    return done[dep] + (send if dep[1] != r else 0.0)
