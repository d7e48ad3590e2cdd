"""A layout's group in a plan's search: its rank orders, decided together, with the
first pass's cheap bound shared by its ZeRO stages (:func:`group_of`), and what the
families of one cell share while they are bounded (:class:`CellMemo`).

A group is a layout without its rank order: the order changes neither its validity, its
memory nor its comm-free pipeline, so :mod:`~topomodel.plan.search` decides those once
for all its orders.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from topomodel.analysis.training.step import shape_memory
from topomodel.analysis.training.stepbound import (
    CommFreePipeline,
    busy_bound,
    busy_pipeline,
    comm_free_pipeline,
)
from topomodel.analysis.training.stepshape import Shape, shape_of
from topomodel.errors import UsageError
from topomodel.fabric.tables import Fabric
from topomodel.plan.orderbounds import PlanJob, rank_score
from topomodel.traffic.layout import Layout, evolve


@dataclass(frozen=True)
class Group:
    """The rank orders of one valid layout: the best score its cheap bound allows
    (:func:`~topomodel.analysis.training.stepbound.busy_bound`), the place (cell,
    layout) of its first order, its fields but the order, its orders, its shape, the
    layout it was bounded as (``stand_in``: itself or it at another ZeRO stage, see
    :func:`group_of`), where its comm-free pipeline is kept (made when the group is
    reached: :meth:`pipeline`) and its key there (``unordered``: its fields but ZeRO;
    the order is not one of them). Its own layout and whether it fits are made when it is
    reached (:attr:`layout`, :meth:`fits`)."""

    bound: float
    place: tuple[int, int]
    family: dict[str, Any]
    orders: list[str]
    shape: Shape
    stand_in: Layout
    pipelines: dict[tuple[Any, ...], CommFreePipeline]
    unordered: tuple[Any, ...]
    fitting: dict[tuple[Any, ...], tuple[int, int]]

    @functools.cached_property
    def layout(self) -> Layout:
        """The layout at its own ZeRO stage (its base order)."""
        zero = self.family.get("zero", self.stand_in.zero)
        return self.stand_in if zero == self.stand_in.zero else evolve(self.stand_in,
                                                                       zero=zero)

    @property
    def members(self) -> Iterator[tuple[int, dict[str, Any]]]:
        """Each order's place in its cell and fields, in the space's order."""
        first = self.place[1]
        for j, order in enumerate(self.orders):
            yield first + j, {**self.family, "order": order}

    def fits(self, job: PlanJob) -> bool:
        """Whether the layout's memory (the same for all its orders) fits the HBM less
        the job's headroom, as :func:`check` finds it. At ZeRO 0-2, read from those
        stages of it found before where they decide it (``fitting``: the lowest that
        fits, the highest that does not): from 0 to 2 only the gradients, optimizer
        states and gradient copy change, each non-negative parameters times a share 1
        or ``1/replicas`` <= 1, and a float sum or product only grows with its
        non-negative terms, so no stage's total is greater at a higher ZeRO of 0-2."""
        zero = self.layout.zero
        lowest, highest = self.fitting.get(self.unordered, (3, -1))
        if zero <= 2 and (zero >= lowest or zero <= highest):
            return zero >= lowest
        found = shape_memory(job.model, self.layout, job.assumptions, self.shape
                             ).fits(job.headroom)
        if zero <= 2:
            self.fitting[self.unordered] = ((min(lowest, zero), highest) if found
                                            else (lowest, max(highest, zero)))
        return found

    def pipeline(self, job: PlanJob) -> CommFreePipeline:
        """The layout's comm-free pipeline (its timeline), made once per
        :func:`~topomodel.analysis.training.stepbound.unordered` layout of the cell (its
        fields but ZeRO and the order decide it, within a cell, as that layout does;
        and, once found, kept with the group: the search asks it of every order)."""
        found: CommFreePipeline | None = self.__dict__.get("_pipeline")
        if found is None:
            key = self.unordered
            found = self.pipelines.get(key)
            if found is None:
                found = self.pipelines[key] = comm_free_pipeline(
                    job.model, self.layout, job.assumptions, self.shape)
            object.__setattr__(self, "_pipeline", found)  # a cache, not a field
        return found


@dataclass
class CellMemo:
    """What the families of one cell share while they are bounded: the cell's rank
    orders; by the family's fields but ZeRO, why it is invalid, or the cheap bound's
    score with the layout and shape it was found on (:func:`group_of`); by its fields but
    the :data:`UNSHAPED`, the layout they make on the job's base and its shape, or why
    either is refused (:func:`shaped_stem`); and by the family's fields but ZeRO
    (:attr:`Group.unordered`) the comm-free pipelines and which ZeRO stages fit
    (:meth:`Group.fits`); by its fields but ZeRO, its layout and shape or why it is
    invalid (:func:`valid_family`)."""

    orders: list[str]
    known: dict[tuple[Any, ...], tuple[str, float, Layout | None, Shape | None]] = field(
        default_factory=dict)
    shaped: dict[tuple[Any, ...], tuple[Layout | None, Shape | None, str]] = field(
        default_factory=dict)
    pipelines: dict[tuple[Any, ...], CommFreePipeline] = field(default_factory=dict)
    fitting: dict[tuple[Any, ...], tuple[int, int]] = field(default_factory=dict)
    valid: dict[tuple[Any, ...], tuple[str, Layout | None, Shape | None]] = field(
        default_factory=dict)


UNSHAPED = frozenset({"recompute", "sequence_parallel", "zero"})
"""The searched fields :func:`~topomodel.analysis.training.stepshape.shape_of` does not
read: a cell's families that differ only in them share one shape, or refusal."""


def group_of(fabric: Fabric, job: PlanJob, place: tuple[int, int], family: dict[str, Any],
           power_W: float, cell: CellMemo) -> tuple[str, Group | None]:
    """The group of the layout ``family`` (set on the job's base layout, its base order)
    with the best score its cheap bound lets any of its rank orders reach, or why it is
    invalid (as :func:`check` finds it for every one of its orders, which change
    neither) and None.

    Its ZeRO stages are decided together (the first listed stands in for the rest,
    kept in ``cell``): ZeRO is read by neither the layout's own checks, but for its
    range (0-3, the stages the space lists), nor :func:`~topomodel.analysis.training.
    stepshape.shape_of`, so the stages of a layout are valid or invalid together, for
    the same reason, with the same shape; and the cheap bound does not read it
    (:func:`~topomodel.analysis.training.stepbound.busy_bound`). A group's own layout
    is built, and checked, when the search reaches it."""
    key = tuple(v for f, v in family.items() if f != "zero")
    found = cell.known.get(key)
    if found is None:
        found = cell.known[key] = bounded(fabric, job, family, power_W, cell)
    reason, score, stand_in, held = found
    if stand_in is None or held is None:
        return reason, None
    return "", Group(score, place, family, cell.orders, held, stand_in, cell.pipelines,
                      key, cell.fitting)


def bounded(fabric: Fabric, job: PlanJob, family: dict[str, Any], power_W: float,
             cell: CellMemo) -> tuple[str, float, Layout | None, Shape | None]:
    """Why the layout ``family`` is invalid, or its cheap bound's score with the layout
    and shape it was found on (:func:`valid_family`), as :func:`group_of` gives it."""
    reason, layout, shape = valid_family(fabric, job, family, cell)
    if layout is None or shape is None:
        return (reason, 0.0, None, None)
    busy = busy_pipeline(job.model, layout, job.assumptions, shape)
    score = rank_score(busy_bound(job.model, layout, job.assumptions, shape, busy), job,
                       power_W)
    # NaN (no power): never pruned
    return ("", score if score == score else float("inf"), layout, shape)


def valid_family(fabric: Fabric, job: PlanJob, family: dict[str, Any], cell: CellMemo
           ) -> tuple[str, Layout | None, Shape | None]:
    """Why the layout ``family`` is invalid (and None, None), or the layout and its
    shape (kept in ``cell`` by its fields but ZeRO, which decides neither). The layout
    is ``evolve(job.base, **family)`` in two steps (the fields but the
    :data:`UNSHAPED`, once for the cell's families that share them, then those): each
    field is checked once and the rules across fields on the whole, so it is valid
    exactly when one step makes it, and where a step refuses it, the one step gives the
    reason. Its shape is the first of those families' (the same checks, refusal and
    figures)."""
    key = tuple(v for f, v in family.items() if f != "zero")
    found = cell.valid.get(key)
    if found is not None:
        return found
    shaped_key = tuple(v for f, v in family.items() if f not in UNSHAPED)
    shaped = cell.shaped.get(shaped_key)
    if shaped is None:
        shaped = cell.shaped[shaped_key] = shaped_stem(fabric, job, family)
    stem, shape, refusal = shaped
    try:
        if stem is None:
            raise UsageError(refusal)
        layout = evolve(stem, **{f: v for f, v in family.items() if f in UNSHAPED})
    except UsageError:
        try:  # the reason the one step gives (its field order decides which refusal)
            layout = evolve(job.base, **family)
            shape = shape_of(fabric, job.model, layout)  # not reached: a step refused
        except UsageError as exc:
            found = cell.valid[key] = (str(exc), None, None)
            return found
    found = cell.valid[key] = (refusal, None, None) if shape is None else ("", layout,
                                                                           shape)
    return found


def shaped_stem(fabric: Fabric, job: PlanJob, family: dict[str, Any]
            ) -> tuple[Layout | None, Shape | None, str]:
    """The fields of ``family`` but the :data:`UNSHAPED` set on the job's base layout
    (None where refused), their shape (None where refused) and the refusal."""
    try:
        stem = evolve(job.base, **{f: v for f, v in family.items() if f not in UNSHAPED})
    except UsageError as exc:
        return None, None, str(exc)
    try:
        return stem, shape_of(fabric, job.model, stem), ""
    except UsageError as exc:
        return stem, None, str(exc)
