"""What a layout's collectives cannot beat on their placement, without routing them: the
floors the planner's order bounds (:mod:`~topomodel.plan.orderbounds`) and set floors
(:mod:`~topomodel.plan.coarse`) put in place of collective times they have not routed
yet.

:func:`order_calls` gives one rank order's collectives, the times already known and, for
the others, their placed lower bounds (:mod:`~topomodel.analysis.collectives.commbound`)
with a protocol floor (:func:`protocol_floor_s`); :func:`unplaced_calls` the same before
any placement; :func:`order_bound` the step bound with them
(:func:`~topomodel.analysis.training.stepbound.bound_with_calls`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from topomodel.analysis.assumptions import StepAssumptions, TimeModel
from topomodel.analysis.collectives.commbound import (
    DomainRuns,
    collective_lower_bound_s,
    domain_runs,
    ingress_rates_of,
    unplaced_lower_bound_s,
)
from topomodel.analysis.collectives.timing import floor_s, measured_curve
from topomodel.analysis.training.stagework import Call
from topomodel.analysis.training.stepbound import StepBound, bound_with_calls
from topomodel.analysis.training.stepcalls import Issued, checked_groups, step_calls
from topomodel.analysis.training.stepshape import Shape, time_key
from topomodel.errors import CollectiveError, NotApplicable
from topomodel.fabric.tables import Fabric
from topomodel.inputs.parts import Model
from topomodel.traffic.collectives import collective_shapes, spanned_shape
from topomodel.traffic.communicators import GroupBlocks, group_blocks
from topomodel.traffic.layout import Layout
from topomodel.traffic.phases import Shape as TrafficShape


# PLR0913: keyword-only options of an entry point, as networkx's; a record would hide them
def order_calls(fabric: Fabric, model: Model, layout: Layout,
                assumptions: StepAssumptions, shape: Shape, *, routing: str = "ecmp",
                seed: int = 0, issued: tuple[Issued, ...] | None = None
                ) -> tuple[dict[str, Call], int]:
    """The collectives of ``layout``'s step in its own rank order: those the fabric's
    table holds with their times, the others with what they cannot beat on their
    placement, kept in :func:`collective_bounds`: the fastest protocol's time at the
    bytes' bound (:func:`~topomodel.analysis.collectives.commbound.collective_lower_bound_s`,
    :func:`protocol_floor_s`), or the larger of the two where a measured curve times a
    candidate; and how many were not in the table
    (``issued``: the layout's :func:`~topomodel.analysis.training.stepcalls.issued_calls`,
    the same in every rank order, when known)."""
    known = fabric.derived(collective_bounds)
    per_byte = fabric.derived(collective_bounds_per_byte)
    efficiency = tuple(sorted(assumptions.time.efficiency.items()))
    # the communicators checked (and their domains spanned, their channels found) once
    # per fabric for every collective over them (stepcalls.checked_groups)

    def unrouted(collective: str, groups: Callable[[], np.ndarray], size: float,
                 key: tuple[Any, ...]) -> float:
        found = known.get(key)
        if found is None:
            placed = key[:SIZE_AT] + key[SIZE_AT + 1:]
            grid = functools.cache(groups)  # the groups, made once for both bounds
            # the grid's key, or for the pipeline's sends, which exchange of its pairs
            of = (("pairs", key[0], key[SIZE_AT + 1], key[-1]) if collective == "sendrecv"
                  else ("grid", key[SIZE_AT + 1]))
            rate = per_byte.get(placed)
            if rate is None:
                kept = _grid_bounds(fabric, of)
                rate = per_byte[placed] = collective_lower_bound_s(
                    fabric, collective, grid(), 1.0, assumptions.time,
                    runs=lambda: kept.runs(fabric, grid),
                    delivered=kept.delivered.setdefault(efficiency, {}))

            def blocks() -> GroupBlocks:
                return checked_groups(fabric, of, grid)

            bytes_s = size * rate
            floor, added = protocol_floor_s(fabric, collective, key[1], blocks, size,
                                           assumptions.time, placed, bytes_s)
            found = known[key] = floor if added else max(bytes_s, floor)
        return found

    return step_calls(fabric, model, layout, assumptions, routing=routing, seed=seed,
                      unrouted=unrouted, shape=shape, issued=issued)


GRID_RUNS = 16
"""Communicators whose :class:`GridBound` :func:`order_calls` keeps on a fabric (all
dropped when full; up to 1.6 MB each at 98k ranks): the all-gather and reduce-scatter
over one grid (sequence parallelism's, the gradients' at ZeRO 1-2), bounded one after
the other, read the same."""


@dataclass(eq=False)
class GridBound:
    """What the bytes' bounds of :func:`order_calls` read of one grid, for every
    collective over it: its :func:`~topomodel.analysis.collectives.commbound.domain_runs`
    (found on first use) and, by the time model's tier efficiencies, the seconds per
    byte of each way
    (:func:`~topomodel.analysis.collectives.commbound.collective_lower_bound_s`'s
    ``delivered``: the all-gather's way out is the reduce-scatter's way in on a fabric
    whose rates each way are equal, found once for both)."""

    found: DomainRuns | None = None
    delivered: dict[tuple[tuple[str, float], ...], dict[tuple[str, bool, float], float]] = (
        field(default_factory=dict))

    def runs(self, fabric: Fabric, groups: Callable[[], np.ndarray]) -> DomainRuns:
        """The grid's domain runs (``groups()``: its rows), found once."""
        if self.found is None:
            self.found = domain_runs(fabric, groups())
        return self.found


def grid_bounds(fabric: Fabric) -> dict[tuple[Any, ...], GridBound]:
    """The :class:`GridBound` of the grids :func:`order_calls` bounded on ``fabric``, by
    the grid's name there."""
    return {}


def _grid_bounds(fabric: Fabric, named: tuple[Any, ...]) -> GridBound:
    """The :class:`GridBound` of the grid ``named`` names, kept in :func:`grid_bounds`
    (:data:`GRID_RUNS`)."""
    kept = fabric.derived(grid_bounds)
    if named not in kept:
        if len(kept) >= GRID_RUNS:
            kept.clear()
        kept[named] = GridBound()
    return kept[named]


def order_bound(fabric: Fabric, model: Model, layout: Layout,
                assumptions: StepAssumptions, shape: Shape, *, routing: str = "ecmp",
                seed: int = 0) -> StepBound | None:
    """The bound of ``layout`` in its own rank order, with the collective times the
    fabric's table already holds and, for the others, what they cannot beat on their
    placement (:func:`order_calls`); None when the table holds them all (the step then
    costs arithmetic, not routing)."""
    calls, missed = order_calls(fabric, model, layout, assumptions, shape, routing=routing,
                                seed=seed)
    if not missed:
        return None
    return bound_with_calls(model, layout, assumptions, shape, calls)


def protocol_floor_s(fabric: Fabric, collective: str, candidates: tuple[str, ...],
                    groups: Callable[[], np.ndarray | GroupBlocks], size_bytes: float,
                    time_model: TimeModel, placed: tuple[Any, ...], bytes_s: float = 0.0
                    ) -> tuple[float, bool]:
    """Seconds the step's ``collective`` of ``size_bytes`` over the communicators
    ``groups()`` (an array, or blocks already checked) cannot beat whichever of
    ``candidates`` it runs: the least, over the candidates, of
    :func:`~topomodel.analysis.collectives.timing.floor_s` of the shapes the
    candidate's traffic would have (its fastest protocol's time at the bandwidth time
    ``bytes_s``, or the measured curve's time), found without building any flow (nor
    the channels: without a channel count the protocols' per-channel caps are left
    out, which only lowers a protocol's time). The step
    keeps the candidate with the least tuner time
    (:func:`~topomodel.analysis.collectives.collective.fastest`), which is no less
    than that candidate's floor, and its time no less than its tuner time; a
    candidate that does not apply (``NotApplicable``) is never kept, so it is left
    out. 0 on a fabric with a failed link (as the bytes' bound:
    a lost flow changes what is timed) or when a candidate's shapes cannot be found.
    The shapes are kept per placement (``placed``: the collective's key in the
    fabric's table without its size, :data:`SIZE_AT`), found at one byte: only their
    size depends on it.

    Over thousands of ranks a ring's ``t - 1`` steps make most of a collective's time
    latency (60-70 % of ZeRO 3's per-layer gathers over DP at 16k GPUs), which no
    bound on bytes sees.

    With ``bytes_s``, the placement's bytes' bound, each candidate's floor is its
    fastest protocol's time at that Simple bandwidth time
    (:func:`~topomodel.analysis.collectives.timing.floor_s`), and the second value
    says whether that holds: true where no measured curve times a candidate. A
    collective's time is then its protocol's latency plus its Simple bandwidth time
    times a scale of at least 1 and a fill of at least 0
    (:attr:`~topomodel.analysis.collectives.timing.TrafficTime.time_s`), the auto
    protocol the one of the least time without the fill, and each protocol's time
    only grows with the bandwidth time; that bandwidth time, each phase's busiest
    link over its effective rate, is no less than the bytes' bound (the bytes into a
    rank or domain over the rate of the links into it). So the fastest protocol's
    time at the bytes' bound is a floor of the time. A curve's time is the whole
    time, and then only the larger of the curve's time and the bytes' bound holds.
    On the 98k servers' plan, the gradients' calls over DP were placed at 1.84x the
    larger of the bytes' bound and the least latency; the least latency added took the
    plan from 1,330 steps to 1,040, the fastest protocol's time at the bound to 425."""
    if not ingress_rates_of(fabric, time_model).intact:
        return 0.0, False
    kept = fabric.derived(collective_latency_shapes)
    per = kept.get(placed)
    if per is None:
        per = kept[placed] = _candidate_shapes(fabric, collective, candidates, groups())
    return _least_floor(fabric, [tuple(replace(s, size_bytes=size_bytes) for s in shapes)
                                 for shapes in per], time_model, bytes_s)


def _least_floor(fabric: Fabric, per: Sequence[tuple[TrafficShape, ...]],
                 time_model: TimeModel, bytes_s: float) -> tuple[float, bool]:
    """The least over the candidates (``per``: each one's shapes) of
    :func:`~topomodel.analysis.collectives.timing.floor_s` at the bandwidth time
    ``bytes_s``, and whether no measured curve times any of them (then it holds alone;
    else only the larger of it and ``bytes_s``); (0, False) for no candidate."""
    if not per:
        return 0.0, False
    return (min(floor_s(fabric, shapes, time_model, bytes_s) for shapes in per),
            all(measured_curve(fabric, shapes, time_model) is None for shapes in per))


def _candidate_shapes(fabric: Fabric, collective: str, candidates: tuple[str, ...],
                      groups: np.ndarray | GroupBlocks
                      ) -> tuple[tuple[TrafficShape, ...], ...]:
    """Per candidate that applies, the shapes of its traffic over ``groups`` at one
    byte; () when one of them cannot be found but by building its flows (the floor
    is then 0)."""
    blocks = group_blocks(fabric, groups)
    out = []
    for algorithm in candidates:
        try:
            out.append(collective_shapes(fabric, collective, blocks, 1.0,
                                         algorithm=algorithm, channels=False))
        except NotApplicable:  # never the step's choice
            continue
        except CollectiveError:
            return ()
    return tuple(out)


def collective_latency_shapes(fabric: Fabric
                              ) -> dict[tuple[Any, ...], tuple[tuple[TrafficShape, ...], ...]]:
    """The candidates' shapes :func:`protocol_floor_s` found on ``fabric``, by
    placement, kept with the fabric as the bounds are."""
    return {}


def unplaced_calls(fabric: Fabric, layout: Layout, assumptions: StepAssumptions,
                   calls: dict[str, Call]) -> dict[str, Call]:
    """``calls`` (the collectives of any rank order of ``layout``: every order issues
    the same, with the same sizes) each at a time no rank order of it can beat
    (:func:`~topomodel.analysis.collectives.commbound.unplaced_lower_bound_s` over its
    communicators' size), so one bound, with them, for all of its orders."""
    sizes = {"tp": layout.tp, "cp": layout.cp, "ep": layout.ep, "pp": 2,
             "grad": layout.dp * layout.cp,
             "expert_grad": layout.dp * layout.cp // max(1, layout.ep)}
    out = {}
    for name, call in calls.items():
        t = sizes[CALL_GROUPS.get(name, call.kind)]
        floor = unplaced_lower_bound_s(fabric, call.collective, t, layout.world,
                                       call.size_bytes, assumptions.time)
        out[name] = call.timed(floor, 0.0, floor, 0.0)
    return out


def spanned_calls(fabric: Fabric, assumptions: StepAssumptions, issued: tuple[Issued, ...],
                  unplaced: dict[str, Call], spans: dict[str, set[tuple[int, int]]]
                  ) -> dict[str, Call]:
    """``unplaced`` (the collectives ``issued`` at what no rank order beats,
    :func:`unplaced_calls`) each raised to what no rank order among some beats: the
    least, over ``spans[grid]`` (for each of those orders, the ranks of a group of the
    collective's communicators and the most scale-up domains one of them spans,
    :func:`~topomodel.analysis.training.stepcalls.grid_span`), of
    :func:`spanned_floor_s` at the unplaced time.

    In each of those orders the collective's shape is the one those two numbers make
    (:func:`~topomodel.traffic.collectives.spanned_shape`, but for its channels, which
    only lower a protocol's time when left out), and its time is no less than its
    candidate's fastest protocol at the bytes' bound of its placement
    (:func:`protocol_floor_s`), which is no less than the unplaced bound; a protocol's
    time only grows with its bandwidth time, so the least over the orders' spans and
    every candidate at the unplaced bound is no more than any order's time. The
    pipeline's sends keep their unplaced time."""
    out = dict(unplaced)
    for call in issued:
        found = spans.get(call.grid)
        floor = unplaced[call.name]
        if not found or call.collective == "sendrecv":
            continue
        least = min(spanned_floor_s(fabric, call.collective, call.candidates, ranks, nodes,
                                    call.size_bytes, assumptions.time, floor.time_s)
                    for ranks, nodes in found)
        if least > floor.time_s:
            out[call.name] = floor.timed(least, least - floor.time_s, floor.time_s, 0.0)
    return out


def spanned_floor_s(fabric: Fabric, collective: str, candidates: tuple[str, ...],
                    ranks: int, nodes: int, size_bytes: float, time_model: TimeModel,
                    bytes_s: float) -> float:
    """Seconds ``collective`` of ``size_bytes`` over groups of ``ranks`` the most
    scale-up domains of which one spans is ``nodes`` cannot beat, whichever of
    ``candidates`` runs it, at a bytes' bound of ``bytes_s`` no more than its
    placement's: the least over the candidates of
    :func:`~topomodel.analysis.collectives.timing.floor_s` of the shape those make, at
    that bandwidth time (where a measured curve times a candidate, the larger of the
    curve's time and ``bytes_s``); ``bytes_s`` on a fabric with a failed link (as
    :func:`protocol_floor_s`). Every candidate counts, those that do not apply to some
    placement too (a lower least). Kept per fabric (:func:`spanned_floors`)."""
    if not ingress_rates_of(fabric, time_model).intact:
        return bytes_s
    kept = fabric.derived(spanned_floors)
    key = (collective, candidates, ranks, nodes, size_bytes, bytes_s, time_key(time_model))
    found = kept.get(key)
    if found is None:
        if len(kept) >= SPANNED_FLOORS:
            kept.clear()
        per = []
        for algorithm in candidates:
            try:
                per.append((spanned_shape(fabric, collective, algorithm, ranks, nodes,
                                          size_bytes),))
            except CollectiveError:  # never built at such a span: never the step's
                continue
        floor, added = _least_floor(fabric, per, time_model, bytes_s)
        found = kept[key] = floor if added else max(bytes_s, floor)
    return found


SPANNED_FLOORS = 65_536
"""Floors :func:`spanned_floor_s` keeps on a fabric (a float each, all dropped when
full)."""


def spanned_floors(fabric: Fabric) -> dict[tuple[Any, ...], float]:
    """The floors :func:`spanned_floor_s` found on ``fabric``, by what they read."""
    return {}


CALL_GROUPS = {"pp_sg": "tp", "zero3_ag": "grad", "zero3_rs": "grad", "dp": "grad",
               "dp_ag": "grad", "edp": "expert_grad", "edp_ag": "expert_grad"}
"""The communicators of the step's collectives (:func:`~topomodel.analysis.training.
stepcalls.step_calls`) whose kind does not name them: the pipeline's gather over TP, ZeRO's
and the gradients' over DP x CP (the experts' over their replicas)."""


def collective_bounds(fabric: Fabric) -> dict[tuple[Any, ...], float]:
    """The collective bounds :func:`order_bound` found on ``fabric``, by the key the
    collective's time would have in its table (the time model's efficiencies are part
    of it), kept with the fabric
    (:meth:`~topomodel.fabric.tables.Fabric.derived`) as the times are."""
    return {}


SIZE_AT = 2
"""Where a collective's size sits in its key in the fabric's table of times
(:func:`~topomodel.analysis.training.stepcalls.step_calls`' ``(collective, candidates, size,
communicators, routing, seed, time model)``): :func:`order_calls` keys its bounds per
byte by the rest."""


def collective_bounds_per_byte(fabric: Fabric) -> dict[tuple[Any, ...], float]:
    """The bounds :func:`order_calls` found on ``fabric`` for one byte, seconds, by the
    key of the collective's time with its size left out (:data:`SIZE_AT`): every term
    of :func:`~topomodel.analysis.collectives.commbound.collective_lower_bound_s` is
    bytes proportional to the size over a rate (its table's shares of ``S``), and a
    maximum of such terms is the size times their maximum for one byte, so the
    collectives of one placement (the gradients' buckets and the activations at every
    micro-batch, say) share one bound, scaled. Floating point rounds the product and
    the quotient apart by a few units in the last place, far below
    :data:`ROUNDING_MARGIN`."""
    return {}
