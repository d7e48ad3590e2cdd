"""The general router's path costs: a hop, a host link and a transit through an
accelerator, summed into one whole number per path, and the hops read back off it
(:func:`~topomodel.routing.general.route_general`)."""

from __future__ import annotations

from topomodel.errors import RoutingError
from topomodel.inputs.records import documented

__all__ = ["HOP_COST", "HOST_LINK_COST", "READABLE_HOPS", "TRANSIT_PENALTY_HOPS",
           "check_readable_hops"]

TRANSIT_PENALTY_HOPS = documented(
    "routing.TRANSIT_PENALTY_HOPS", 1_000_000,
    "extra cost of passing through an accelerator: transit only when nothing else works")


HOP_COST = documented(
    "routing.HOP_COST", 4,
    """Cost of one hop. A host link (accelerator to NIC) costs HOST_LINK_COST more, so
    between accelerators of one scale-up domain the scale-up path wins over the NICs
    even with more hops (a three-level supernode's 6 against a shared leaf's 4).""")


HOST_LINK_COST = 10_000
"""Extra cost of a host link (accelerator to NIC or back) above :data:`HOP_COST`: more
than half of any scale-up path's cost (a path of under 5,000 hops), so traffic between
accelerators of one scale-up domain stays on it while it has a path there (the
structured router's rule: a three-level supernode's 6 hops against 4 through a leaf
both systems' NICs share), as the module docstring of :mod:`topomodel.routing` says. A
path between accelerators through the network has two host links (one at each end,
transits included), so the order of those paths is that of their hops. Distances stay
whole numbers (exact as floats), and a flow's hops are read off its distance: a path
has fewer than ``HOST_LINK_COST // HOP_COST`` (2,500) hops (:data:`READABLE_HOPS`,
checked) and fewer than ``TRANSIT_PENALTY_HOPS // HOST_LINK_COST`` (100) host links."""


READABLE_HOPS = HOST_LINK_COST // HOP_COST
"""Hops below which a path's hops are read off its cost exactly (2,500): at this many a
path's hop costs reach one host link's and would be read as one. A path has at most as
many hops as its destination's shortest-path DAG has distance levels (each hop lowers
the distance), so :func:`~topomodel.routing.general.route_general` refuses a DAG of
this many levels (:func:`check_readable_hops`) instead of misreading its flows' hops;
no fabric of this project comes near (its longest paths are tens of hops)."""


def check_readable_hops(levels: int, target: int) -> None:
    """Refuse a destination's shortest-path DAG of ``levels`` distance levels (an upper
    bound of every path's hops to it) where hops could reach :data:`READABLE_HOPS`.

    Raises
    ------
    RoutingError
        When ``levels`` is :data:`READABLE_HOPS` or more.

    Examples
    --------
    >>> check_readable_hops(12, target=0)
    >>> check_readable_hops(READABLE_HOPS, target=7)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    topomodel.errors.RoutingError: paths to node 7 may have 2,500 hops or more ...
    """
    if levels >= READABLE_HOPS:
        raise RoutingError(
            f"paths to node {target} may have {READABLE_HOPS:,} hops or more ({levels:,}"
            f" distance levels): the general router reads hops off path costs only below"
            f" {READABLE_HOPS:,} hops")
