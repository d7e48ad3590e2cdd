"""The tops of a search: the best layouts of the whole space and of named families
inside it, kept in one pass.

A plan keeps its ``top`` best distinct layouts (:func:`keep_distinct`). A caller that
also wants the best of parts of the space (the scorecard's strategy families: DP only,
no EP) can name them as :class:`Family` (a predicate on a layout's searched fields) and
have one search keep a top per family beside the whole's (:class:`Tops`): every
modelled step goes into the top of each family that holds it; a layout is pruned only
when its bound is below the bar of every top whose family holds it
(:meth:`Tops.entry_bar`); and the search stops when its best bound is below the bar of
every top that still has layouts to decide (:meth:`Tops.floor`). So each family's top
is the one its own plan finds, while the first pass, the comm-free pipelines and the
order screens of the layouts the families share are made once.

Ties stay exact: a family given as a space inside the job's (:func:`space_family`)
lists a subsequence of the job's listing in the same order (:func:`~topomodel.plan.
space.cells` and :func:`~topomodel.plan.space.cell_families` only filter each dimension
by the space's limits), so the places of the whole search order its layouts as the
family's own places would, and a tie keeps the same layout.

The counts are kept per family too: those of the first pass (searched, invalid, over
the router's limit before anything is built) are the family's own plan's; a layout the
pass models for one top is counted as evaluated (or over the limit, when the router
refuses it while listing) in every family that holds it, where the family's own plan
may have pruned it.
"""

from __future__ import annotations

import functools
import heapq
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from topomodel.analysis.training.step import StepResult
from topomodel.plan.space import PlanSpace
from topomodel.plan.tally import Tally
from topomodel.traffic.layout import Layout

VARIANTS = ("interleave", "order")
"""Searched fields that tune one layout rather than make another: the top of a plan
holds distinct layouts (differing in a degree, the micro-batch, the schedule,
recomputation, ZeRO or sequence parallelism), each at its best interleave depth and rank
order, so its rows are alternatives to choose between and not one layout at interleave
5, 6, 7 and 8."""


def distinct_key(layout: Layout) -> tuple[Any, ...]:
    """What makes ``layout`` a distinct layout in a plan's top: every field but the
    :data:`VARIANTS`."""
    return tuple(getattr(layout, f) for f in Layout.__dataclass_fields__
                 if f not in VARIANTS)


@dataclass(frozen=True, order=True)
class Ranked:
    """An evaluated layout: its score (larger is better), its place in the search
    (cell, layout; earlier wins a tie) and its step."""

    score: float
    place: tuple[int, int]
    result: StepResult = field(compare=False)

    @functools.cached_property
    def key(self) -> tuple[Any, ...]:
        """Its layout's :func:`distinct_key` (found once: every layout a search
        reaches is compared with every entry of its top)."""
        return distinct_key(self.result.layout)


def keep_distinct(heap: list[Ranked], ranked: Ranked, top: int) -> None:
    """Put ``ranked`` into ``heap`` (a min-heap of at most ``top`` entries, worst on top)
    unless a better variant of the same layout (:func:`distinct_key`) is there: one
    entry per distinct layout, the ``top`` best. A layout below ``heap[0]`` cannot enter
    it, so the search's pruning against ``heap[0]`` still holds."""
    key = ranked.key
    for i, held in enumerate(heap):
        if held.key == key:
            if held < ranked:
                heap[i] = ranked
                heapq.heapify(heap)
            return
    if len(heap) < top:
        heapq.heappush(heap, ranked)
    elif heap[0] < ranked:
        heapq.heapreplace(heap, ranked)


def last_score(heap: list[Ranked], top: int) -> float:
    """The score a layout must beat to enter ``heap`` (at most ``top`` entries): its
    last, once full; -inf before."""
    return heap[0].score if len(heap) >= top else -float("inf")


def entry_bar(heap: list[Ranked], top: int, key: tuple[Any, ...]) -> float:
    """The score a layout of :func:`distinct_key` ``key`` must reach to change ``heap``
    (:func:`keep_distinct`'s, at most ``top`` entries), -inf when any would: the last
    of a full heap, or, where a variant of the same layout is held, its score if
    higher, since :func:`keep_distinct` keeps the better of two variants. A layout
    below it never enters the top, then or later: a held variant leaves the heap only
    for a better layout when it is the last, so every entry after is above it. So the
    orders of a layout, and its other interleave depths, are pruned against its best
    step found so far even while the top is not full."""
    bar = last_score(heap, top)
    for held in heap:
        if held.score > bar and held.key == key:
            bar = held.score
    return bar


@dataclass(frozen=True)
class Family:
    """A named part of a plan's space with a top of its own: ``holds`` tells, from a
    layout's searched fields but the rank order (as :func:`~topomodel.plan.space.
    cell_families` lists them), whether the layout is in it; ``reads``, the fields
    ``holds`` reads (None: any), lets a search decide it once for the families that
    differ only in others (:meth:`Tops.alike_without`)."""

    name: str
    holds: Callable[[Mapping[str, Any]], bool]
    reads: frozenset[str] | None = None


@dataclass(frozen=True)
class FamilyTop:
    """A family's outcome in a plan: its counts and its best steps (best first)."""

    name: str
    tally: Tally
    best: tuple[StepResult, ...]


_LIMITED = ("tp", "cp", "pp", "ep", "micro_batch", "interleave")
"""The searched fields a :class:`~topomodel.plan.space.PlanSpace` limits by a largest
value (``max_<field>``)."""


def space_family(name: str, space: PlanSpace, within: PlanSpace) -> Family | None:
    """The family of the layouts ``space`` lists, as a part of ``within``'s listing, or
    None where ``space`` is not inside ``within`` by its limits alone (its own plan is
    then needed): the same fixed fields, and each largest degree, micro-batch and
    interleave depth no larger than ``within``'s (None: no limit).

    Then ``space`` lists exactly the layouts of ``within`` whose limited fields are
    within its limits, a fixed field aside (the fixed value is listed whatever the
    limit), but for the micro-batch and the interleave depth, which are cut at the
    limit even when fixed.

    Examples
    --------
    >>> whole = PlanSpace()
    >>> no_ep = space_family("no EP", PlanSpace(max_ep=1), whole)
    >>> no_ep.holds({"tp": 8, "cp": 1, "pp": 4, "ep": 1, "micro_batch": 1,
    ...              "interleave": 1})
    True
    >>> space_family("wide", PlanSpace(max_cp=64), whole) is None  # CP up to 16 in whole
    True
    """
    if dict(space.fixed) != dict(within.fixed):
        return None
    limits: list[tuple[str, int]] = []
    for key in _LIMITED:
        limit, outer = getattr(space, f"max_{key}"), getattr(within, f"max_{key}")
        if limit is None:
            if outer is not None:
                return None
            continue
        if outer is not None and limit > outer:
            return None
        if key not in space.fixed or key in ("micro_batch", "interleave"):
            limits.append((key, limit))

    def holds(fields: Mapping[str, Any]) -> bool:
        return all(fields[key] <= limit for key, limit in limits)

    return Family(name, holds, frozenset(key for key, _ in limits))


class Tops:
    """The tops of one search, the whole space's first (index 0) and then each
    family's, with their counts: a heap of at most ``top`` :class:`Ranked` per top
    (worst on top) and a :class:`~topomodel.plan.tally.Tally` per top. A layout is
    told by its *holders*, the indices of the tops whose family holds it
    (:meth:`holders`: the whole's always)."""

    def __init__(self, top: int, families: Sequence[Family] = ()) -> None:
        self.top = top
        self.families = tuple(families)
        self.heaps: list[list[Ranked]] = [[] for _ in range(1 + len(self.families))]
        self.tallies = [Tally() for _ in self.heaps]
        self.waiting = [0 for _ in self.heaps]  # layouts groups left to decide, per top
        self._whole_only = (0,)

    def holders(self, fields: Mapping[str, Any]) -> tuple[int, ...]:
        """The tops whose family holds the layout of ``fields`` (its searched fields but
        the order): 0 (the whole) and each family's index + 1."""
        if not self.families:
            return self._whole_only
        return (0, *(i for i, f in enumerate(self.families, 1) if f.holds(fields)))

    def alike_without(self, fields: frozenset[str]) -> bool:
        """Whether no family reads any of ``fields`` (:attr:`Family.reads`), so layouts
        that differ only in them have the same :meth:`holders`."""
        return all(f.reads is not None and not f.reads & fields for f in self.families)

    def count(self, holders: Iterable[int], what: str, layouts: int,
              reason: str | None = None) -> None:
        """Add ``layouts`` to the count ``what`` (a :class:`~topomodel.plan.tally.
        Tally` field) of each top in ``holders`` (and to ``reason``'s, when given)."""
        for h in holders:
            tally = self.tallies[h]
            setattr(tally, what, getattr(tally, what) + layouts)
            if reason is not None:
                tally.reasons[reason] = tally.reasons.get(reason, 0) + layouts

    def prune_all(self, left: Iterable[tuple[tuple[int, ...], int]]) -> int:
        """Count every layout ``left`` ((holders, layouts) of each entry) as pruned in
        each top that holds it; the layouts in all."""
        by_holders: dict[tuple[int, ...], int] = {}
        for holders, layouts in left:
            by_holders[holders] = by_holders.get(holders, 0) + layouts
        for holders, layouts in by_holders.items():
            self.count(holders, "pruned", layouts)
        return sum(by_holders.values())

    def keep(self, holders: Iterable[int], ranked: Ranked) -> None:
        """Keep a modelled layout in each top that holds it (:func:`keep_distinct`)."""
        for h in holders:
            keep_distinct(self.heaps[h], ranked, self.top)

    def last(self, h: int) -> float:
        """The score a layout must beat to enter top ``h`` (:func:`last_score`)."""
        return last_score(self.heaps[h], self.top)

    def bar(self, holders: Iterable[int]) -> float:
        """The lowest :meth:`last` of ``holders``: a layout held by them whose bound is
        below it enters none of their tops."""
        return min(self.last(h) for h in holders)

    def entry_bar(self, holders: Iterable[int], key: tuple[Any, ...]) -> float:
        """The lowest :func:`entry_bar` of ``holders``' tops for a layout of
        :func:`distinct_key` ``key``: below it, the layout changes none of them."""
        return min(entry_bar(self.heaps[h], self.top, key) for h in holders)

    def floor(self) -> float:
        """The lowest :meth:`last` of the tops with layouts still waiting to be
        decided (:attr:`waiting`): once the search's best bound is below it, every
        waiting layout is below the bar of every top that holds it. +inf when none
        waits."""
        return min((self.last(h) for h, n in enumerate(self.waiting) if n > 0),
                   default=float("inf"))

    def best(self, h: int) -> tuple[Ranked, ...]:
        """Top ``h``, best first."""
        return tuple(sorted(self.heaps[h], reverse=True))
