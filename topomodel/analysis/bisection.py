"""Bisection bandwidth: the worst balanced cut, by closed form and by exact max-flow.

The bisection is the capacity, per direction, of the cheapest cut that splits the
accelerators into two halves: the minimum over balanced partitions, not the cut of one
favourable partition. Halves are equal, or, with an odd number of scale-up domains,
whole domains on each side differing by one domain. See ``docs/bisection.md``.

- **Closed form** (any size): the minimum over the tiers that join the halves of the
  tier's capacity times the smaller half's share, as the scale-out kind gives it
  (:meth:`~topomodel.fabric.scaleout.kind.ScaleoutKind.bisection`). For a fat-tree
  this is the cut along whole subtrees of the tier (whole units under the spines,
  whole pods under the cores), the cheapest a balanced cut can be where such a split
  exists; for one
  scale-up domain, the cut across its narrowest part (half the switched links, across
  a torus's longest dimension, between the two halves of a full mesh).
- **Exact** (fabrics of at most :data:`MAX_FLOW_NODE_LIMIT` nodes): for each candidate
  partition the max-flow from one half to the other with networkx (switches fall on
  whichever side makes the cut cheapest), on integer capacities in MB/s (float
  capacities make networkx's max-flow drift); the bisection is the minimum over the
  candidates. The candidates are the balanced partitions the structure allows the
  worst cut to be: whole scale-up domains in rank order; whole scalable units and
  whole pods, chosen by a subset sum so each half holds exactly half the accelerators
  where whole blocks can; and, for systems of several accelerators, the halves of
  every system (rails below half vs above), which cuts every scale-up domain but makes
  each rail-optimized leaf single-sided. :func:`brute_force_bisection` enumerates every
  balanced partition on tiny fabrics, and the tests hold the candidates to it.

Where the structure cannot give a balanced split along whole units (two units of 50
and 14 systems), the worst cut also crosses leaves shared by both halves, and the exact
figure exceeds the closed form; the note says so.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from topomodel.arrays import distinct
from topomodel.fabric.columns import Coded, CodeLabels
from topomodel.fabric.scaleout import scaleout_kind
from topomodel.fabric.scaleup import scaleup_kind
from topomodel.fabric.tables import Fabric, ignores_failures, link_weaker_Bps
from topomodel.inputs.records import documented
from topomodel.inputs.units import format_rate
from topomodel.vocabulary import SCALEUP_TIERS

MAX_FLOW_NODE_LIMIT = documented(
    "bisection.MAX_FLOW_NODE_LIMIT", 20_000,
    """Largest fabric (nodes) on which the exact max-flow check runs by default (``build
    --max-flow-nodes`` changes it): networkx max-flow on the bench_build.py fat-tree took
    0.9 s CPU at 18,624 nodes, 5.5 s at 76,528 and 30 s and 1.6 GiB at 299,968 (131,072
    GPUs), so larger fabrics skip it unless asked; fabrics with several links per node
    pair (the supernodes: 6.5 M links) take longer. No ceiling is needed beyond the
    fabric's own (``limits.MAX_ACCELERATORS``).""")

@dataclass(frozen=True)
class Bisection:
    """Bisection bandwidth per direction and how it was found."""

    bisection_Bps: float | None  # None: neither the closed form nor max-flow ran
    method: str
    closed_form_Bps: float | None
    max_flow_Bps: float | None
    per_accelerator_Bps: float | None  # bisection / accelerators on the smaller side
    injection_Bps: float  # per accelerator, into the tier the bisection is limited by
    ratio: float | None  # per_accelerator / injection: 1 = full bisection; None: no
    # network joins the halves (no injection to compare with) or no bisection
    note: str


def halves(fabric: Fabric) -> tuple[np.ndarray, np.ndarray]:
    """The two sides of the bisection: node numbers of accelerators.

    With several scale-up domains, whole domains go to each side (the first half of the
    domains in rank order, and the rest): cutting through a domain only adds its
    scale-up links. A single domain is cut where its kind says
    (:meth:`~topomodel.fabric.scaleup.kind.ScaleupKind.single_domain_side`: a torus
    across its longest dimension), else in rank order.
    """
    acc = fabric.accelerators
    domain = fabric.node_arrays["domain"][acc]
    domains = np.unique(domain[domain >= 0])
    if len(domains) >= 2:
        side_a = np.isin(domain, domains[: len(domains) // 2])
    else:
        own = scaleup_kind(fabric.structure).single_domain_side(fabric.structure)
        side_a = np.arange(len(acc)) < len(acc) // 2 if own is None else own
    return acc[side_a], acc[~side_a]


def _tier_totals(fabric: Fabric, *, unfailed: bool) -> dict[str, float]:
    """Capacity per tier, bytes/s per direction: each link at its weaker direction (its
    own where the reverse row is failed), of the live links only if ``unfailed``. Where
    :func:`tier_sums` finds the sums exact, a copy with failed parts subtracts its
    failed rows from the sums over every row (the same figures: every sum is exact)."""
    links = fabric.link_arrays
    sums = fabric.derived(tier_sums)
    failed = links["failed"]
    weaker_sums, count = sums.weaker_Bps, sums.count
    if unfailed and failed.any():
        weaker = fabric.derived(link_weaker_Bps)
        size = len(sums.labels)
        if sums.exact:
            dead = np.flatnonzero(failed)
            alone = fabric.reverse_rows[dead]  # live rows whose reverse row failed
            alone = alone[~failed[alone]]
            cap = links["capacity_Bps"]
            codes = sums.codes
            weaker_sums = (weaker_sums - np.bincount(codes[dead], weights=weaker[dead],
                                                     minlength=size)
                           + np.bincount(codes[alone], weights=cap[alone] - weaker[alone],
                                         minlength=size))
            count = count - np.bincount(codes[dead], minlength=size)
        else:
            live = np.where(failed[fabric.reverse_rows], links["capacity_Bps"],
                            weaker)[~failed]
            codes = sums.codes[~failed]
            weaker_sums = np.bincount(codes, weights=live, minlength=size)
            count = np.bincount(codes, minlength=size)
    return {sums.labels[c]: float(weaker_sums[c]) / 2 for c in np.flatnonzero(count > 0)}


@dataclass(frozen=True)
class TierSums:
    """Per link tier of a fabric, over every link row (failed ones too): its rows'
    capacity and weaker direction (:func:`~topomodel.fabric.tables.link_weaker_Bps`)
    added, bytes/s, and its rows counted; ``codes`` each row's tier (an index into
    ``labels``). ``exact``: every sum of some of the rows' capacities is exact in
    float64, in any order (:func:`exact_sums`), so a sum over the live rows is the sum
    over every row less the failed rows', bit for bit."""

    labels: list[str]
    codes: np.ndarray
    capacity_Bps: np.ndarray
    weaker_Bps: np.ndarray
    count: np.ndarray
    exact: bool


@ignores_failures
def tier_sums(fabric: Fabric) -> TierSums:
    """:class:`TierSums` of ``fabric``, shared by its copies with failed parts."""
    links = fabric.link_arrays
    tier = CodeLabels(links["tier"])
    codes = tier.codes.astype(np.intp)
    size = len(tier.labels)
    cap = links["capacity_Bps"]
    reverse = fabric.reverse_rows
    involution = bool(np.array_equal(reverse[reverse], np.arange(len(reverse))))
    return TierSums([str(label) for label in tier.labels], codes,
                    np.bincount(codes, weights=cap, minlength=size),
                    np.bincount(codes, weights=fabric.derived(link_weaker_Bps),
                                minlength=size),
                    np.bincount(codes, minlength=size), involution and exact_sums(cap))


def exact_sums(values: np.ndarray) -> bool:
    """Whether every sum of some of ``values`` (each finite and at least 0), added in
    any order, and every difference of two such sums that is not negative, is exact in
    float64: each value a multiple of the spacing of floats at twice their sum (every
    such sum lies below it, and every multiple of that spacing below it is a float).
    Capacities in bytes/s are whole numbers with trailing zero bits (``50e9`` is a
    multiple of 2^10), so a fabric's are, up to some 10^18 bytes/s in all.

    Examples
    --------
    >>> exact_sums(np.array([50e9, 25e9, 800e9])), exact_sums(np.array([0.1, 0.2]))
    (True, False)
    """
    if not len(values):
        return True
    if not (np.isfinite(values).all() and (values >= 0).all()):
        return False
    upper = 2.0 * float(values.sum())  # above the true sum, however it was rounded
    if upper == 0.0:
        return True
    unit = float(np.spacing(upper))
    return bool(np.isfinite(unit) and (np.fmod(values, unit) == 0).all())


def closed_form(fabric: Fabric) -> tuple[float | None, str]:
    """Bisection between :func:`halves` from the fabric's structure, bytes/s per direction."""
    s = fabric.structure
    total = _tier_totals(fabric, unfailed=True)
    side_a, side_b = halves(fabric)
    n = len(side_a) + len(side_b)
    smaller = min(len(side_a), len(side_b))
    domain = fabric.node_arrays["domain"][fabric.accelerators]
    domains = len(np.unique(domain[domain >= 0]))
    value, how = 0.0, ""
    if domains < 2 and scaleup_kind(s).has_links:
        domain_value, how = _domain_bisection(fabric, total)
        if domain_value is None:
            return None, how
        value = domain_value
    across = scaleout_kind(s).bisection(total, smaller, n)
    if across is not None:
        value += across[0]
        how = (how + " plus " if how else "") + across[1]
    elif domains >= 2:
        how = "no link joins the two halves (separate scale-up domains, no scale-out)"
    return value, how


def _domain_bisection(fabric: Fabric, total: dict[str, float]) -> tuple[float | None, str]:
    """Bisection of one scale-up domain, as its kind gives it."""
    s = fabric.structure
    per_domain = s.accelerators_per_system * s.scaleup.systems_per_domain
    domains = max(1, fabric.accelerator_count // per_domain)
    return scaleup_kind(s).domain_bisection(s, total, per_domain, domains)


def max_flow_bisection(fabric: Fabric) -> float:
    """Exact minimum balanced cut over the :func:`candidate_halves`, bytes/s per
    direction (switches fall on whichever side minimises each cut)."""
    return _worst_cut(fabric)[0]


def _worst_cut(fabric: Fabric) -> tuple[float, int]:
    """The minimum cut over the candidates, bytes/s, and the smaller side's size.

    Partitions that keep every scale-up domain whole are cut on the graph with each
    domain contracted to one node (exact: its links never cross such a cut, and its
    chips link nowhere else), which is much smaller; a partition through the domains
    runs on the whole graph, and only when the domains' own bisections (a lower bound
    on its cut) leave it a chance to be the worst.
    """
    component = _scaleup_components(fabric)
    contracted = _flow_graph(fabric, component)
    full = None
    best, smaller = math.inf, 1
    candidates = candidate_halves(fabric)
    whole = [c for c in candidates if _keeps_whole(component, c[1], c[2])]
    split = [c for c in candidates if c not in whole]
    for _, a, b in whole:
        cut = _cut_Bps(contracted, _mapped(component, a), _mapped(component, b))
        if cut < best:
            best, smaller = cut, min(len(a), len(b))
    bound = _split_lower_bound(fabric) if split else 0.0
    for _, a, b in split:
        if bound >= best:
            continue
        full = full if full is not None else _flow_graph(fabric, None)
        cut = _cut_Bps(full, a, b)
        if cut < best:
            best, smaller = cut, min(len(a), len(b))
    return best, smaller


def _scaleup_components(fabric: Fabric) -> np.ndarray:
    """Each node's scale-up domain as a component of the scale-up links (accelerators
    and the chips joining them), ``-1`` for nodes outside every scale-up network."""
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components

    links = fabric.link_arrays
    n = len(fabric.node_arrays)
    inside = links["tier"].isin(SCALEUP_TIERS)
    src, dst = links["src"][inside], links["dst"][inside]
    matrix = coo_matrix((np.ones(len(src)), (src, dst)), shape=(n, n))
    _, label = connected_components(matrix, directed=False)
    member = np.zeros(n, bool)
    member[src] = member[dst] = True
    member[fabric.accelerators] = True
    return np.where(member, label, -1)


def _keeps_whole(component: np.ndarray, side_a: np.ndarray, side_b: np.ndarray) -> bool:
    return not np.intersect1d(component[side_a], component[side_b]).size


def _mapped(component: np.ndarray | None, nodes: np.ndarray) -> np.ndarray:
    """Node numbers in a graph contracted by ``component`` (domain d is node -1 - d)."""
    if component is None:
        return nodes
    return np.unique(np.where(component[nodes] >= 0, -1 - component[nodes], nodes))


def _split_lower_bound(fabric: Fabric) -> float:
    """A lower bound on any cut that halves every scale-up domain, as the kind gives it
    (the sum of the domains' own bisections where it knows them), else 0."""
    s = fabric.structure
    total = _tier_totals(fabric, unfailed=False)
    per_domain = s.accelerators_per_system * s.scaleup.systems_per_domain
    domains = max(1, fabric.accelerator_count // per_domain)
    return scaleup_kind(s).split_lower_bound(s, total, per_domain, domains)


def _flow_graph(fabric: Fabric, component: np.ndarray | None) -> Any:
    """The live links as a networkx DiGraph with integer MB/s capacities; with
    ``component``, each scale-up domain contracted to one node (see :func:`_mapped`)."""
    import networkx as nx

    links = fabric.link_arrays.take(~fabric.link_arrays["failed"])
    src, dst = links["src"], links["dst"]
    if component is not None:
        src, dst = _mapped_each(component, src), _mapped_each(component, dst)
    keep = src != dst
    # integer capacities (float max-flow drifts) in kB/s: fine enough for Mb/s links
    kbps = np.floor(links["capacity_Bps"][keep] / 1e3).astype(np.int64)
    graph = nx.DiGraph()
    for u, v, c in zip(src[keep], dst[keep], kbps, strict=True):
        if graph.has_edge(u, v):
            graph[u][v]["capacity"] += int(c)
        else:
            graph.add_edge(int(u), int(v), capacity=int(c))
    return graph


def _mapped_each(component: np.ndarray, nodes: np.ndarray) -> np.ndarray:
    return np.where(component[nodes] >= 0, -1 - component[nodes], nodes)


def _cut_Bps(graph: Any, side_a: np.ndarray, side_b: np.ndarray) -> float:
    """Max-flow from ``side_a`` to ``side_b`` (nodes of ``graph``), bytes/s."""
    import networkx as nx

    flow = graph.copy()
    for a in side_a:
        flow.add_edge("source", int(a))  # no capacity attribute: unbounded
    for b in side_b:
        flow.add_edge(int(b), "sink")
    return float(nx.maximum_flow_value(flow, "source", "sink")) * 1e3


def candidate_halves(fabric: Fabric) -> list[tuple[str, np.ndarray, np.ndarray]]:
    """Balanced partitions of the accelerators among which the worst cut lies, each
    as (how it was made, side A, side B) of accelerator node numbers.

    See the module docstring: rank-order halves of whole domains; whole units and
    whole pods by subset sum; and the halves of every system.
    """
    acc = fabric.accelerators
    n = len(acc)
    out = [("whole scale-up domains in rank order", *halves(fabric))]
    nodes = fabric.node_arrays
    so = fabric.structure.scaleout
    system = nodes["system"][acc]
    blocks: list[tuple[str, np.ndarray]] = []
    if so.unit_systems:  # a scale-out network of scalable units
        blocks.append(("whole scalable units", system // so.unit_systems))
        pods = _pod_of_unit(fabric)
        if pods is not None:
            blocks.append(("whole pods", pods[system // so.unit_systems]))
    for how, block in blocks:
        side = _balanced_blocks(block)
        if side is not None:
            out.append((how, acc[side], acc[~side]))
    per_system = fabric.structure.accelerators_per_system
    if per_system >= 2 and per_system % 2 == 0 and fabric.structure.systems >= 1:
        local = nodes["local"][acc]
        side = local < per_system // 2
        out.append(("the lower and upper halves of every system", acc[side], acc[~side]))
    domain = nodes["domain"][acc]
    slack = int(np.bincount(domain[domain >= 0]).max(initial=1))  # one domain's accelerators
    seen: set[bytes] = set()
    unique = []
    for how, a, b in out:
        key = np.sort(a if a.min(initial=n) < b.min(initial=n) else b).tobytes()
        if abs(len(a) - len(b)) <= slack and key not in seen:
            seen.add(key)
            unique.append((how, a, b))
    return unique or out[:1]


def _pod_of_unit(fabric: Fabric) -> np.ndarray | None:
    """The pod of each scalable unit in a 3-tier fat-tree (``None`` otherwise)."""
    nodes = fabric.node_arrays
    leaves = Coded(nodes["tier"]).equals("leaf") & (nodes["pod"] >= 0)
    if not leaves.any():
        return None
    pairs = np.unique(np.stack([nodes["unit"][leaves], nodes["pod"][leaves]], axis=1), axis=0)
    if len(distinct(pairs[:, 0])) < len(pairs):
        return None  # a unit across pods: no pod blocks
    out = np.full(int(pairs[:, 0].max()) + 1, -1, np.int64)
    out[pairs[:, 0]] = pairs[:, 1]
    return out


def _balanced_blocks(block: np.ndarray) -> np.ndarray | None:
    """A side of whole blocks holding exactly half of the items (subset sum over block
    sizes), as a mask over the items; ``None`` when none exists or there is one block."""
    labels, sizes = np.unique(block, return_counts=True)
    half = len(block) // 2
    if len(labels) < 2 or len(block) % 2:
        return None
    reach: dict[int, tuple[int, ...]] = {0: ()}  # reachable sum -> the blocks giving it
    for index, size in enumerate(sizes.tolist()):
        for total, chosen in list(reach.items()):
            if total + size <= half and total + size not in reach:
                reach[total + size] = (*chosen, index)
        if half in reach:
            break
    if half not in reach:
        return None
    return np.isin(block, labels[list(reach[half])])


def brute_force_bisection(fabric: Fabric, *, limit: int = 16) -> float:
    """The cheapest cut over *every* partition into halves, bytes/s per direction: an
    oracle for tiny fabrics (at most ``limit`` accelerators).

    The halves are every split of the accelerators into equal halves, and every split
    of whole scale-up domains whose sides differ by at most one domain (the halves an
    odd number of domains allows), as :func:`bisection` defines them.

    Raises
    ------
    ValueError
        For more than ``limit`` accelerators (the partitions grow as 2^n).
    """
    from itertools import combinations

    acc = fabric.accelerators
    if len(acc) > limit:
        raise ValueError(f"{len(acc)} accelerators: brute force is for at most {limit}")
    graph = _flow_graph(fabric, None)
    best = math.inf
    for chosen in combinations(range(1, len(acc)), len(acc) // 2 - 1):
        side = np.zeros(len(acc), bool)
        side[[0, *chosen]] = True
        best = min(best, _cut_Bps(graph, acc[side], acc[~side]))
    domain = fabric.node_arrays["domain"][acc]
    labels, sizes = np.unique(domain[domain >= 0], return_counts=True)
    for count in range(1, len(labels)):
        for chosen in combinations(range(len(labels)), count):
            size_a = int(sizes[list(chosen)].sum())
            if abs(2 * size_a - len(acc)) <= sizes.max():
                side = np.isin(domain, labels[list(chosen)])
                best = min(best, _cut_Bps(graph, acc[side], acc[~side]))
    return best


def bisection_injection_Bps(fabric: Fabric) -> float:
    """Per-accelerator bandwidth into the networks that join the bisection's halves,
    bytes/s: what the bisection's ratio divides by.

    Scale-out injection (NIC ports times planes, capped by the host link) when the
    halves are whole scale-up domains; plus the scale-up bandwidth when the halves
    split a single domain. Decided when the fabric is built
    (:attr:`~topomodel.fabric.structure.Injection.bisection_Bps`). Not today's scale-out
    bandwidth per accelerator, which never counts scale-up links
    (:func:`~topomodel.fabric.structure.scaleout_injection_Bps`).
    """
    return fabric.injection.bisection_Bps


def bisection(fabric: Fabric, *, max_flow_node_limit: int = MAX_FLOW_NODE_LIMIT) -> Bisection:
    """Bisection bandwidth (the worst balanced cut), per direction, by closed form and
    (where small) the exact minimum over :func:`candidate_halves`.

    The reported figure is the exact one when it ran (it also accounts for failed
    links), else the closed form.
    """
    closed, how = closed_form(fabric)
    exact, half = None, max(1, fabric.accelerator_count // 2)
    if len(fabric.node_arrays) <= max_flow_node_limit and fabric.accelerator_count >= 2:
        exact, half = _worst_cut(fabric)
    if exact is not None:
        value, method = exact, ("exact: minimum max-flow cut over the balanced partitions"
                                " the structure allows (networkx)")
    elif closed is not None:
        value, method = closed, f"closed form: {how}"
    else:
        value, method = None, ("not computed: no closed form for this structure, and the"
                               f" fabric's {len(fabric.node_arrays):,} nodes are more than the"
                               f" max-flow limit of {max_flow_node_limit:,}"
                               " (--max-flow-nodes)")
    note = ""
    if exact is not None and closed is not None:
        agree = math.isclose(exact, closed, rel_tol=1e-3, abs_tol=1e6)
        note = f"closed form and exact agree ({how})" if agree else (
            f"closed form {format_rate(closed)} ({how}) differs from exact: "
            + ("the units cannot be split evenly, so the worst balanced cut also crosses"
               " leaves shared by both halves" if exact > closed else
               "failed links or an uneven structure make the worst cut cheaper"))
    if exact is None:
        half = max(1, min(len(side) for side in halves(fabric)))
    injection = bisection_injection_Bps(fabric)
    per_acc = None if value is None else value / half
    if per_acc is not None and not injection and not note:
        note = how  # no network joins the halves: the closed form says so in words
    return Bisection(value, method, closed, exact, per_acc, injection,
                     per_acc / injection if per_acc is not None and injection else None,
                     note)
