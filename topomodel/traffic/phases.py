"""Traffic: flows (src, dst, bytes) grouped into phases that run concurrently.

A :class:`Phase` is one step of a collective, repeated ``steps`` times with the same
pattern (a ring AllReduce over n ranks is one phase of n flows repeated 2(n-1) times).
Its flows run at the same time; the phase lasts as long as its slowest link, plus its
latency. A :class:`Traffic` is the phases of one collective (or of several groups
running at once), in order. Every array is indexed by flow; ``src`` and ``dst`` are node
numbers of the fabric (accelerators), ``bytes`` is per flow per step.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True, eq=False)
class Phase:
    """Flows that run at once, repeated ``steps`` times.

    ``group`` tags each flow with the communicator it belongs to (an index into
    :attr:`Traffic.group_names`), so reports can say which groups load a link.
    """

    src: np.ndarray  # int64 node numbers
    dst: np.ndarray  # int64 node numbers
    bytes: np.ndarray  # float64, per flow per step
    group: np.ndarray  # int32 group index
    steps: int = 1
    label: str = ""
    messages_per_step: int = 1  # messages each rank posts per step (latency term)
    efficiency: float = 1.0  # share of the links' effective rate these flows reach

    def __post_init__(self) -> None:
        n = len(self.src)
        if not (len(self.dst) == len(self.bytes) == len(self.group) == n):
            raise ValueError("src, dst, bytes and group must have one entry per flow")
        if self.steps < 1:
            raise ValueError("a phase runs at least once")
        if not 0 < self.efficiency <= 1:
            raise ValueError("a phase's efficiency is in (0, 1]")

    @property
    def flows(self) -> int:
        """Number of flows in one step."""
        return len(self.src)

    @property
    def total_bytes(self) -> float:
        """Bytes of all flows over all steps."""
        return float(self.bytes.sum()) * self.steps


def phase(src: Sequence[int] | np.ndarray, dst: Sequence[int] | np.ndarray,
          bytes_per_flow: float | np.ndarray, *, group: int | np.ndarray = 0,
          steps: int = 1, label: str = "", messages_per_step: int = 1) -> Phase:
    """Build a :class:`Phase`, broadcasting scalars; flows from a node to itself dropped.

    Examples
    --------
    >>> p = phase([0, 1, 2], [1, 2, 0], 100.0, steps=4)
    >>> p.flows, p.total_bytes
    (3, 1200.0)
    """
    s = np.asarray(src, dtype=np.int64)
    d = np.asarray(dst, dtype=np.int64)
    b = np.broadcast_to(np.asarray(bytes_per_flow, dtype=float), s.shape).copy()
    g = np.broadcast_to(np.asarray(group, dtype=np.int32), s.shape).copy()
    keep = s != d
    return Phase(s[keep], d[keep], b[keep], g[keep], steps, label, messages_per_step)


@dataclass(frozen=True)
class Shape:
    """What a collective library's latency model needs of one collective: which
    collective and algorithm, the ranks of a group, the scale-up domains (nodes) it
    spans, and for algorithms NCCL does not tune the point-to-point rounds they take."""

    collective: str
    algorithm: str
    ranks: int
    nodes: int
    size_bytes: float  # nccl-tests convention
    rounds: int = 1
    channels: int = 0  # channels across domains (one per NIC of a part); 0 inside one


@dataclass(frozen=True, eq=False)
class Traffic:
    """The phases of a collective (or of several concurrent ones), in order.

    ``shapes`` describe the collectives it holds (one per collective; several when
    traffics run concurrently); the time model uses them for the protocol latency. A
    traffic with no shapes is timed with per-phase path latencies.
    """

    phases: tuple[Phase, ...]
    group_names: tuple[str, ...] = ()
    algorithm: str = ""
    notes: tuple[str, ...] = field(default=())
    shapes: tuple[Shape, ...] = ()

    @property
    def total_bytes(self) -> float:
        """Bytes moved over all phases and steps."""
        return sum(p.total_bytes for p in self.phases)


def concurrent(traffics: Sequence[Traffic]) -> Traffic:
    """Run several traffics at once: their k-th phases merge into one phase.

    Phases of different lengths are aligned from the start; a merged phase repeats as
    often as its longest member (shorter members' bytes are spread over those steps, so
    the total is kept). Group indices are renumbered to stay distinct.
    """
    names: list[str] = []
    offsets = []
    for t in traffics:
        offsets.append(len(names))
        names.extend(t.group_names or ("group",))
    depth = max((len(t.phases) for t in traffics), default=0)
    merged = []
    for k in range(depth):
        members = [(p, off) for t, off in zip(traffics, offsets, strict=True)
                   if k < len(t.phases) for p in (t.phases[k],)]
        steps = max(p.steps for p, _ in members)
        merged.append(Phase(
            np.concatenate([p.src for p, _ in members]),
            np.concatenate([p.dst for p, _ in members]),
            np.concatenate([p.bytes * p.steps / steps for p, _ in members]),
            np.concatenate([p.group + off for p, off in members]).astype(np.int32),
            steps, " + ".join(dict.fromkeys(p.label for p, _ in members)),
            max(p.messages_per_step for p, _ in members),
            min(p.efficiency for p, _ in members)))
    return Traffic(tuple(merged), tuple(names),
                   " + ".join(dict.fromkeys(t.algorithm for t in traffics)),
                   tuple(n for t in traffics for n in t.notes),
                   tuple(dict.fromkeys(s for t in traffics for s in t.shapes)))
