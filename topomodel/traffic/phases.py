"""Traffic: flows (src, dst, bytes) grouped into phases that run concurrently.

A :class:`Phase` is one step of a collective, repeated ``steps`` times with the same
pattern (a ring AllReduce over n ranks is one phase of n flows repeated 2(n-1) times).
Its flows run at the same time; the phase lasts as long as its slowest link, plus its
latency. A :class:`Traffic` is the phases of one collective (or of several groups
running at once), in order. Every array is indexed by flow; ``src`` and ``dst`` are node
numbers of the fabric (accelerators), ``bytes`` is per flow per step.

An :class:`AllPairsPhase` (a direct All-to-All) is a phase kept as its groups: every
ordered pair of each group, the same bytes each. Its flow arrays are listed only when
something reads them (20 bytes a flow, its ends int32: 335 MB for 4,096 ranks); the
structured router, PXN, the ideal time and the bisection traffic work from the groups
instead.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Protocol

import numpy as np

from topomodel.errors import FlowLimit
from topomodel.fabric.tables import index_dtype
from topomodel.limits import BYTES_PER_FLOW, above


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


FlowArrays = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]
"""(src, dst, bytes, group) of a phase's flows."""


class Rewrite(Protocol):
    """Flows rewritten after they are listed (PXN's split, :mod:`topomodel.traffic.pxn`).
    ``memo``: a dict that lives with the listed flows, where a rewrite may keep what it
    works out from them alone (the same for every rewrite of one listing), or None."""

    def __call__(self, src: np.ndarray, dst: np.ndarray, nbytes: np.ndarray,
                 group: np.ndarray, memo: dict[object, object] | None = None
                 ) -> FlowArrays: ...


@dataclass(frozen=True, eq=False)
class AllPairs:
    """Every ordered pair of distinct ranks of each row of ``ranks``, ``bytes[row]`` per
    pair per step, tagged ``group[row]``."""

    ranks: np.ndarray  # (rows, n) int64 node numbers, n >= 2, no repeats in a row
    group: np.ndarray  # (rows,) int32 group index
    bytes: np.ndarray  # (rows,) float64 per pair per step

    def __post_init__(self) -> None:
        if self.ranks.ndim != 2 or self.ranks.shape[1] < 2:
            raise ValueError("all-pairs ranks are a (rows, n) array with n >= 2")
        if not (len(self.group) == len(self.bytes) == len(self.ranks)):
            raise ValueError("ranks, group and bytes must have one entry per row")

    @property
    def pairs(self) -> int:
        """Ordered pairs (flows) of all rows."""
        rows, n = self.ranks.shape
        return rows * n * (n - 1)

    def flows(self) -> FlowArrays:
        """The pairs as flow arrays: row by row, then source rank, then destination rank
        (the order a direct All-to-All lists them in)."""
        flows = empty_flows(self.pairs, self.ranks.dtype)
        self.flows_into(flows, 0)
        return flows

    def flows_into(self, flows: FlowArrays, start: int) -> None:
        """Write :meth:`flows` into ``flows[k][start:start + pairs]``: the blocks of a
        phase listed straight into its arrays, with no array per block to join."""
        rows, n = self.ranks.shape
        a, b = np.divmod(np.flatnonzero(~np.eye(n, dtype=bool)), n)  # (i, j), i != j
        per_row = len(a)
        src, dst, nbytes, group = (f[start:start + rows * per_row].reshape(rows, per_row)
                                   for f in flows)
        if self.ranks.size and not _fits(self.ranks, src.dtype):  # never wrap a node
            raise ValueError(f"ranks up to {int(self.ranks.max())} do not fit {src.dtype}")
        ranks = self.ranks.astype(src.dtype, copy=False)  # (rows, n): small
        np.take(ranks, a, axis=1, out=src)
        np.take(ranks, b, axis=1, out=dst)
        nbytes[:] = self.bytes.astype(float)[:, None]
        group[:] = self.group.astype(np.int32)[:, None]


def _fits(values: np.ndarray, dtype: np.dtype) -> bool:
    """Whether every one of ``values`` (integers, not empty) is a ``dtype`` value."""
    bounds = np.iinfo(dtype)
    return bounds.min <= int(values.min()) and int(values.max()) <= bounds.max


def listed_node_dtype(blocks: Sequence[AllPairs]) -> np.dtype:
    """The integer type of an all-pairs phase's listed ``src`` and ``dst``: that of
    joining the blocks' ranks (int64 without blocks), narrowed to :func:`index_dtype`
    of the highest rank plus one where every rank is a node number (not negative):
    int32 below 2**31 - 1 (a 131k-accelerator fabric has under a million nodes), so the
    6 M pairs of a 98k All-to-All's listing take 4 bytes an end, not 8. Readers that
    could pass 2**31 (a key ``src * nodes + dst``) cast to int64 first, as they do the
    link table's int32 ends.

    Examples
    --------
    >>> ranks = np.array([[4, 5, 6]])
    >>> block = AllPairs(ranks, np.array([0], np.int32), np.array([2.0]))
    >>> listed_node_dtype([block]).name, listed_node_dtype([]).name
    ('int32', 'int64')
    >>> big = AllPairs(np.array([[0, 2**31]]), np.array([0], np.int32), np.array([2.0]))
    >>> listed_node_dtype([block, big]).name
    'int64'
    """
    joined = np.dtype(np.result_type(*(b.ranks for b in blocks)) if blocks else np.int64)
    filled = [b.ranks for b in blocks if b.ranks.size]
    if joined.kind != "i" or not filled or min(int(r.min()) for r in filled) < 0:
        return joined
    narrow = np.dtype(index_dtype(max(int(r.max()) for r in filled) + 1))
    return narrow if narrow.itemsize < joined.itemsize else joined


def empty_flows(count: int, node_dtype: np.dtype | type = np.int64) -> FlowArrays:
    """Flow arrays of ``count`` flows, to be filled: nodes of ``node_dtype``, bytes as
    float64, groups as int32."""
    return (np.empty(count, node_dtype), np.empty(count, node_dtype), np.empty(count),
            np.empty(count, np.int32))


class AllPairsPhase(Phase):
    """A :class:`Phase` whose flows are every ordered pair of each group of ``blocks``
    (one block per group size), listed only when ``src``, ``dst``, ``bytes`` or
    ``group`` is read.

    ``rewrite`` (PXN, set by :func:`topomodel.traffic.pxn.pxn`) is applied to the listed
    pairs; it adds ``moved`` flows of ``moved_bytes`` bytes per step in all. ``listing``:
    the phase of the same blocks, not rewritten, whose listed pairs (and the rewrite's
    memo of them) this one reads instead of listing its own: the rewrites of one phase
    for several copies of a fabric (PXN's relays differ where a failure breaks a relay)
    list the pairs once, the same arrays bit for bit.

    Examples
    --------
    >>> block = AllPairs(np.array([[4, 5, 6]]), np.array([0], np.int32), np.array([2.0]))
    >>> p = AllPairsPhase((block,), label="direct alltoall", messages_per_step=2)
    >>> p.flows, p.total_bytes, p.src.tolist(), p.dst.tolist()
    (6, 12.0, [4, 4, 5, 5, 6, 6], [5, 6, 4, 6, 4, 5])
    """

    blocks: tuple[AllPairs, ...]
    rewrite: Rewrite | None
    moved: int
    moved_bytes: float
    listing: AllPairsPhase | None

    # PLR0913: a phase's fields, as the dataclass it extends takes them
    def __init__(self, blocks: Sequence[AllPairs], steps: int = 1, label: str = "",  # noqa: PLR0913
                 messages_per_step: int = 1, efficiency: float = 1.0, *,
                 rewrite: Rewrite | None = None, moved: int = 0,
                 moved_bytes: float = 0.0, listing: AllPairsPhase | None = None) -> None:
        if listing is not None and (listing.rewrite is not None
                                    or listing.blocks != tuple(blocks)):
            raise ValueError("a phase's listing is of the same blocks, not rewritten")
        values = {"blocks": tuple(blocks), "steps": steps, "label": label,
                  "messages_per_step": messages_per_step, "efficiency": efficiency,
                  "rewrite": rewrite, "moved": moved, "moved_bytes": moved_bytes,
                  "listing": listing}
        for name, value in values.items():
            object.__setattr__(self, name, value)
        if steps < 1:
            raise ValueError("a phase runs at least once")
        if not 0 < efficiency <= 1:
            raise ValueError("a phase's efficiency is in (0, 1]")

    def __repr__(self) -> str:
        shapes = ", ".join(f"{b.ranks.shape[0]} x {b.ranks.shape[1]}" for b in self.blocks)
        return (f"AllPairsPhase(groups {shapes or 'none'}, flows={self.flows},"
                f" steps={self.steps}, label={self.label!r},"
                f" pxn={self.rewrite is not None})")

    @cached_property
    def _listed(self) -> FlowArrays:
        refusal = above(self.flows, "MAX_FLOWS", "All-to-All flows", BYTES_PER_FLOW,
                        doing="to list")
        if refusal:
            raise FlowLimit(refusal + ": its pairs are counted, not listed, only under"
                               " even ECMP on a fabric without failures")
        if self.listing is not None and self.rewrite is not None:
            return self.rewrite(*self.listing._listed, memo=self.listing._memo)
        flows = empty_flows(sum(b.pairs for b in self.blocks),
                            listed_node_dtype(self.blocks))
        start = 0
        for b in self.blocks:  # each block's pairs written in place: nothing to join
            b.flows_into(flows, start)
            start += b.pairs
        return self.rewrite(*flows) if self.rewrite is not None else flows

    @cached_property
    def _memo(self) -> dict[object, object]:
        """What rewrites of this phase's listed pairs keep of them (:class:`Rewrite`)."""
        return {}

    def forget_listed(self, *, with_listing: bool = True) -> int:
        """Drop the listed flow arrays (and those of ``listing``, unless not
        ``with_listing``), to be listed again, bit for bit, when next read: they are
        made from the blocks, the rewrite and the listing's memo alone, all kept. For a
        holder that keeps the phase for its identity between uses
        (:func:`topomodel.traffic.pxn.release_listings`): a relayed All-to-All's listed
        pairs are 20 bytes a flow (int32 ends), 100 MB and more per copy at 98k.
        Returns the bytes dropped (held elsewhere or not)."""
        dropped = (self.listing.forget_listed()
                   if self.listing is not None and with_listing else 0)
        listed = self.__dict__.pop("_listed", None)
        return dropped + (sum(a.nbytes for a in listed) if listed is not None else 0)

    @property
    def is_listed(self) -> bool:
        """Whether the pairs are listed yet (``src``, ``dst``, ``bytes`` or ``group``
        read)."""
        return "_listed" in self.__dict__

    @property
    def src(self) -> np.ndarray:
        """Source node of every flow (listed on first use)."""
        return self._listed[0]

    @property
    def dst(self) -> np.ndarray:
        """Destination node of every flow (listed on first use)."""
        return self._listed[1]

    @property
    def bytes(self) -> np.ndarray:
        """Bytes per step of every flow (listed on first use)."""
        return self._listed[2]

    @property
    def group(self) -> np.ndarray:
        """Group index of every flow (listed on first use)."""
        return self._listed[3]

    @property
    def flows(self) -> int:
        """Number of flows in one step, without listing them."""
        return sum(b.pairs for b in self.blocks) + self.moved

    @property
    def total_bytes(self) -> float:
        """Bytes of all flows over all steps, without listing them."""
        per_step = sum(float(b.bytes.sum()) * b.ranks.shape[1] * (b.ranks.shape[1] - 1)
                       for b in self.blocks) + self.moved_bytes
        return per_step * self.steps


def merge_all_pairs(members: Sequence[Phase], offsets: Sequence[int], steps: int,
                    label: str) -> AllPairsPhase | None:
    """Phases that run at once as one :class:`AllPairsPhase` (bytes scaled to ``steps``,
    groups shifted by ``offsets``), or ``None`` unless every member is one and none is
    rewritten."""
    pairs = [p for p in members if isinstance(p, AllPairsPhase) and p.rewrite is None]
    if len(pairs) != len(members):
        return None
    blocks = [AllPairs(b.ranks, (b.group + off).astype(np.int32), b.bytes * (p.steps / steps))
              for p, off in zip(pairs, offsets, strict=True) for b in p.blocks]
    return AllPairsPhase(blocks, steps, label, max(p.messages_per_step for p in members),
                         min(p.efficiency for p in members))


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
    merged: list[Phase] = []
    for k in range(depth):
        members = [(p, off) for t, off in zip(traffics, offsets, strict=True)
                   if k < len(t.phases) for p in (t.phases[k],)]
        steps = max(p.steps for p, _ in members)
        label = " + ".join(dict.fromkeys(p.label for p, _ in members))
        pairs = merge_all_pairs([p for p, _ in members], [off for _, off in members],
                                steps, label)
        if pairs is not None:
            merged.append(pairs)
            continue
        one = len(members) == 1  # one traffic: its flows as they are, no copies
        merged.append(Phase(
            members[0][0].src if one else np.concatenate([p.src for p, _ in members]),
            members[0][0].dst if one else np.concatenate([p.dst for p, _ in members]),
            np.concatenate([p.bytes * p.steps / steps for p, _ in members]),
            np.concatenate([p.group + off for p, off in members]).astype(np.int32,
                                                                         copy=False),
            steps, label, max(p.messages_per_step for p, _ in members),
            min(p.efficiency for p, _ in members)))
    return Traffic(tuple(merged), tuple(names),
                   " + ".join(dict.fromkeys(t.algorithm for t in traffics)),
                   tuple(n for t in traffics for n in t.notes),
                   tuple(dict.fromkeys(s for t in traffics for s in t.shapes)))
