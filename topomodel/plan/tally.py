"""How a plan's layouts were decided (:class:`Tally`), and what a layout the model
refuses to time is (:func:`over_limit`).

A plan asks the step model to time many layouts; the router refuses to list a direct
All-to-All of more flows than :data:`topomodel.limits.MAX_FLOWS` (about 10 s and 4 GiB
to list at the limit: the pairs of an EP group times the groups, 25 M for EP 256 on
98,304 ranks). Such a layout is **skipped and counted**, as an invalid or a
non-fitting one is, not an error that ends the plan: it is one point of the space the
model cannot time, not a fault of the job, and the others still can be. So the best of
a plan is the best among the layouts the model can time, and the plan's output names
how many were skipped and the limit that skipped them
(:func:`limit_text`), so a reader knows the best is "the best below the limit" and can
raise it (the limits are named constants) to time them.

The refusal is decided before anything of the layout is built where it can be: the
count is arithmetic on the layout (:func:`alltoall_flows`), and whether the router
would list it is a property of the fabric and the routing
(:func:`~topomodel.routing.aggregate.lists_all_pairs`: hash or d-mod-k routing, failed
links, a fabric the structured router does not cover). A layout that passes this check
may still be listed where its groups cannot be counted; its refusal then comes when the
router would list it (:class:`~topomodel.errors.FlowLimit`, raised before a pair is
listed), and the planner counts it the same way.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from topomodel import limits
from topomodel.fabric.tables import Fabric
from topomodel.inputs.parts import Model
from topomodel.routing.aggregate import lists_all_pairs
from topomodel.traffic.layout import Layout

ROUTER_LIMIT = "MAX_FLOWS"
"""The name in :mod:`topomodel.limits` of the limit a layout's traffic is refused by."""


@dataclass
class Tally:
    """How the searched layouts were decided: ``searched`` is the sum of the others."""

    searched: int = 0
    invalid: int = 0  # refused by the step model's checks
    no_fit: int = 0  # valid, but over the memory
    pruned: int = 0  # fits, but its bound cannot reach the top
    evaluated: int = 0  # step modelled
    over_limit: int = 0  # valid, but its traffic above the router's limit (not timed)
    reasons: dict[str, int] = field(default_factory=dict)  # why invalid, by message

    def add(self, other: Tally) -> None:
        """Add another part's counts to these."""
        self.searched += other.searched
        self.invalid += other.invalid
        self.no_fit += other.no_fit
        self.pruned += other.pruned
        self.evaluated += other.evaluated
        self.over_limit += other.over_limit
        for reason, count in other.reasons.items():
            self.reasons[reason] = self.reasons.get(reason, 0) + count


def alltoall_flows(layout: Layout) -> int:
    """Flows of the step's EP All-to-All (a direct one over every EP group at once):
    each of the ``world / ep`` groups has ``ep (ep - 1)`` ordered pairs.

    Examples
    --------
    >>> alltoall_flows(Layout(pp=16, dp=6144, ep=256))
    25067520
    """
    return layout.world * (layout.ep - 1) if layout.ep > 1 else 0


def over_limit(fabric: Fabric, model: Model, layout: Layout, routing: str) -> str | None:
    """The router's refusal of ``layout``'s step traffic on ``fabric`` under ``routing``
    (``auto`` resolved), or None: its EP All-to-All (``model`` a mixture of experts)
    above :data:`topomodel.limits.MAX_FLOWS` where the router lists every pair. Decided
    from counts: nothing is built."""
    if layout.ep < 2 or not model.is_moe or not lists_all_pairs(fabric, routing):
        return None
    return limits.above(alltoall_flows(layout), ROUTER_LIMIT, "All-to-All flows",
                        limits.BYTES_PER_FLOW, doing="to list")


def limit_text() -> str:
    """The limit a plan's skipped layouts are above, in words, naming its constant.

    Examples
    --------
    >>> limit_text()
    "the router's limit of 16,777,216 listed All-to-All flows (limits.py MAX_FLOWS)"
    """
    return (f"the router's limit of {getattr(limits, ROUTER_LIMIT):,} listed All-to-All"
            f" flows (limits.py {ROUTER_LIMIT})")


def over_limit_text(tally: Tally) -> str:
    """The sentence a plan's output gives its skipped layouts, empty when there are none.

    Examples
    --------
    >>> print(over_limit_text(Tally(searched=9, evaluated=7, over_limit=2)))
    ... # doctest: +NORMALIZE_WHITESPACE
    2 layouts above the router's limit of 16,777,216 listed All-to-All flows
    (limits.py MAX_FLOWS), skipped: the best is the best of the layouts below it
    """
    if not tally.over_limit:
        return ""
    return (f"{tally.over_limit:,} layout{'s' if tally.over_limit != 1 else ''} above"
            f" {limit_text()}, skipped: the best is the best of the layouts below it")
