"""Bisection bandwidth: closed forms for structured fabrics, exact max-flow where small.

The bisection here is the capacity, per direction, of the cheapest cut that splits the
accelerators into two equal halves. Closed forms use the builder's structure; the exact
check computes the max-flow from one half of the accelerators to the other (switches may
fall on either side) with networkx, on integer capacities in MB/s (float capacities make
networkx's max-flow drift).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from topomodel.fabric.tables import Fabric
from topomodel.records import documented
from topomodel.vocabulary import SCALE_OUT_TIERS, SCALEUP_TIERS

MAX_FLOW_NODE_LIMIT = documented(
    "bisection.MAX_FLOW_NODE_LIMIT", 20_000,
    """Largest fabric (nodes) on which the exact max-flow check runs by default: networkx
    max-flow on larger link tables takes minutes.""")

@dataclass(frozen=True)
class Bisection:
    """Bisection bandwidth per direction and how it was found."""

    bisection_Bps: float
    method: str
    closed_form_Bps: float | None
    max_flow_Bps: float | None
    per_accelerator_Bps: float  # bisection / accelerators on the smaller side
    injection_Bps: float  # per accelerator, into the tier the bisection is limited by
    ratio: float  # per_accelerator / injection: 1 = full bisection
    note: str


def halves(fabric: Fabric) -> tuple[np.ndarray, np.ndarray]:
    """The two sides of the bisection: node numbers of accelerators.

    With several scale-up domains, whole domains go to each side (the first half of the
    domains in rank order, and the rest): cutting through a domain only adds its
    scale-up links. A single torus domain is cut across its longest dimension; other
    single domains in rank order.
    """
    acc = fabric.accelerators
    domain = fabric.nodes["domain"].to_numpy()[acc]
    domains = np.unique(domain[domain >= 0])
    if len(domains) >= 2:
        side_a = np.isin(domain, domains[: len(domains) // 2])
    elif fabric.structure.scaleup.kind == "torus":
        coords = fabric.structure.scaleup.torus.coords
        shape = fabric.structure.scaleup.torus.shape
        longest = int(np.argmax(shape))
        side_a = coords[:, longest] < shape[longest] // 2
    else:
        side_a = np.arange(len(acc)) < len(acc) // 2
    return acc[side_a], acc[~side_a]


def closed_form(fabric: Fabric) -> tuple[float | None, str]:
    """Bisection between :func:`halves` from the fabric's structure, bytes/s per direction."""
    s = fabric.structure
    links = fabric.links[~fabric.links["failed"]]
    sums = links.groupby("tier", observed=True)["capacity_Bps"].sum()
    total = {str(t): float(v) / 2 for t, v in sums.items()}
    side_a, side_b = halves(fabric)
    n = len(side_a) + len(side_b)
    share = min(len(side_a), len(side_b)) / n
    domain = fabric.nodes["domain"].to_numpy()[fabric.accelerators]
    domains = len(np.unique(domain[domain >= 0]))
    value, how = 0.0, ""
    if domains < 2 and s.scaleup.kind != "none":
        domain_value, how = _domain_bisection(fabric, total)
        if domain_value is None:
            return None, how
        value = domain_value
    if s.scaleout.kind != "none":
        present = [t for t in SCALE_OUT_TIERS if t in total]
        limit = min(present, key=lambda t: total[t])
        value += total[limit] * share
        how = (how + " plus " if how else "") + (
            f"the smaller half's share of the {limit} tier (tree tiers: min over tiers of"
            " capacity x share)")
    elif domains >= 2:
        how = "no link joins the two halves (separate scale-up domains, no scale-out)"
    return value, how


def _domain_bisection(fabric: Fabric, total: dict[str, float]) -> tuple[float | None, str]:
    """Bisection of one scale-up domain."""
    s = fabric.structure
    per_domain = s.accelerators_per_system * s.scaleup.systems_per_domain
    kind = s.scaleup.kind
    domains = max(1, fabric.accelerator_count // per_domain)
    if kind == "switched":
        # every accelerator reaches every chip: half the accelerators' links cross
        return total["scaleup"] / domains / 2, "half the accelerators' scale-up links"
    if domains > 1:
        return None, "several domains without scale-out"
    if kind == "supernode":
        levels = [t for t in SCALEUP_TIERS if t in total]
        limit = min(levels, key=lambda t: total[t])
        return total[limit] / domains / 2, f"half the {limit} capacity of a supernode"
    if kind == "full_mesh":
        pairs = (per_domain // 2) ** 2
        return pairs * s.scaleup.mesh_links_per_pair * s.scaleup.link_rate_Bps, (
            "(n/2)^2 pairs of a full mesh cross")
    if kind == "torus":
        shape = s.scaleup.torus.shape
        longest = max(shape)
        crossings = 2 if s.scaleup.torus.wraparound and longest > 2 else 1
        links = per_domain // longest * crossings * s.scaleup.torus.links_per_neighbor
        if s.scaleup.torus.wraparound and longest == 2:
            links *= 2
        return links * s.scaleup.link_rate_Bps, (
            f"cut across the longest dimension ({longest}): {links} links")
    return None, f"no closed form for scale-up kind {kind}"


def max_flow_bisection(fabric: Fabric) -> float:
    """Exact max-flow from one of :func:`halves` to the other, bytes/s per direction.

    Switches fall on whichever side minimises the cut."""
    import networkx as nx

    links = fabric.links[~fabric.links["failed"]]
    graph = nx.DiGraph()
    mbps = np.floor(links["capacity_Bps"].to_numpy() / 1e6).astype(np.int64)
    for u, v, c in zip(links["src"].to_numpy(), links["dst"].to_numpy(), mbps, strict=True):
        if graph.has_edge(u, v):
            graph[u][v]["capacity"] += int(c)
        else:
            graph.add_edge(int(u), int(v), capacity=int(c))
    side_a, side_b = halves(fabric)
    for a in side_a:
        graph.add_edge("source", int(a))  # no capacity attribute: unbounded
    for b in side_b:
        graph.add_edge(int(b), "sink")
    value = nx.maximum_flow_value(graph, "source", "sink")
    return float(value) * 1e6


def injection_Bps(fabric: Fabric) -> float:
    """Per-accelerator bandwidth into the networks that join the halves, bytes/s.

    Scale-out injection (NIC ports times planes, capped by the host link) when the
    halves are whole scale-up domains; plus the scale-up bandwidth when the halves
    split a single domain. Decided when the fabric is built
    (:attr:`~topomodel.fabric.structure.Injection.bisection_Bps`).
    """
    return fabric.injection.bisection_Bps


def bisection(fabric: Fabric, *, max_flow_node_limit: int = MAX_FLOW_NODE_LIMIT) -> Bisection:
    """Bisection bandwidth, per direction, by closed form and (where small) max-flow.

    The reported figure is the max-flow one when it ran (it also accounts for failed
    links), else the closed form.
    """
    closed, how = closed_form(fabric)
    exact = None
    if len(fabric.nodes) <= max_flow_node_limit and fabric.accelerator_count >= 2:
        exact = max_flow_bisection(fabric)
    if exact is not None:
        value, method = exact, "max-flow min-cut (networkx) between the halves"
    elif closed is not None:
        value, method = closed, f"closed form: {how}"
    else:
        value, method = math.nan, "none (no closed form and too large for max-flow)"
    note = ""
    if exact is not None and closed is not None:
        agree = math.isclose(exact, closed, rel_tol=1e-3, abs_tol=1e6)
        note = "closed form and max-flow agree" if agree else (
            f"closed form ({closed / 1e9:.4g} GB/s: {how}) differs from max-flow")
    half = max(1, min(len(side) for side in halves(fabric)))
    injection = injection_Bps(fabric)
    per_acc = value / half
    return Bisection(value, method, closed, exact, per_acc, injection,
                     per_acc / injection if injection else math.nan, note)
