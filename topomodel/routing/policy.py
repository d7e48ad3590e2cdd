"""Which routing policy a fabric runs by default, and why: ``auto`` follows its scale-out
switches. Switches that route adaptively (InfiniBand adaptive routing, Spectrum-X packet
spraying, a cell-sprayed scheduled fabric) keep no flow on one path, so the even split
models them; switches that hash each flow onto one of the equal-cost ports (plain
RoCE/Ethernet ECMP) let flows collide, so ECMP by seeded hash over NCCL's queue pairs
(:data:`~topomodel.routing.hashing.QPS`) models them."""

from __future__ import annotations

from dataclasses import dataclass

from topomodel.fabric.tables import Fabric
from topomodel.routing.hashing import QPS
from topomodel.vocabulary import AUTO_ROUTING


@dataclass(frozen=True)
class RoutingChoice:
    """The routing policy applied (one of ``ROUTINGS``) and, in words, why."""

    routing: str
    reason: str

    @property
    def text(self) -> str:
        """One line for a report: the policy and why."""
        names = {"ecmp": "ECMP even split", "hash": f"ECMP by hash ({QPS} queue pairs"
                 " per connection, NCCL's defaults)", "dmodk": "d-mod-k"}
        return f"{names[self.routing]}: {self.reason}"


def fabric_routing(fabric: Fabric) -> RoutingChoice:
    """The routing ``auto`` applies on ``fabric``: the even split where its scale-out
    switches route adaptively (the design's ``scaleout.adaptive_routing``, else every
    scale-out switch's catalog entry), ECMP by hash where they do not; the even split
    where there is no scale-out network (the scale-up choices are split evenly either
    way)."""
    return fabric.derived(_fabric_routing)


def resolve_routing(fabric: Fabric, routing: str) -> RoutingChoice:
    """``routing`` as applied on ``fabric``: ``auto`` resolved, a named policy kept.

    Examples
    --------
    >>> resolve_routing(None, "dmodk").text  # type: ignore[arg-type]
    'd-mod-k: given (--routing dmodk)'
    """
    if routing == AUTO_ROUTING:
        return fabric_routing(fabric)
    return RoutingChoice(routing, f"given (--routing {routing})")


def seed_matters(fabric: Fabric, routing: str) -> bool:
    """Whether the hash seed can move a flow on ``fabric`` under ``routing`` (``auto``
    resolved): only ``hash`` reads it (a ticket per queue pair and node); the even split
    and d-mod-k pick by cables and destination alone, so every seed routes alike
    (tests/routing/test_seed_free.py holds every router to it, bit for bit).

    Examples
    --------
    >>> seed_matters(None, "dmodk"), seed_matters(None, "hash")  # type: ignore[arg-type]
    (False, True)
    """
    return resolve_routing(fabric, routing).routing == "hash"


def _fabric_routing(fabric: Fabric) -> RoutingChoice:
    models = sorted(set(fabric.node_arrays["model"][fabric.kind_mask("switch")].tolist()))
    if not models:
        return RoutingChoice("ecmp", "no scale-out network")
    said = fabric.design.scaleout.adaptive_routing
    if said is not None:
        where = "the design's scaleout.adaptive_routing"
        return (RoutingChoice("ecmp", f"adaptive routing ({where})") if said
                else RoutingChoice("hash", f"no adaptive routing ({where})"))
    plain = [m for m in models
             if not getattr(fabric.catalog.entries.get(m), "adaptive_routing", False)]
    if plain:
        return RoutingChoice("hash", f"{', '.join(plain)} hash flows over equal-cost"
                             " ports (no adaptive routing in the catalog)")
    return RoutingChoice("ecmp", f"{', '.join(models)} route adaptively (catalog)")
