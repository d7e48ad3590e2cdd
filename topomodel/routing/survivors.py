"""The structured router around failed parts: ECMP over the surviving arcs of a Clos.

A failure only removes arcs, so where a flow's fault-free shortest path shape (up the
Clos, across its top, down) still has a live instance, its shortest paths are exactly
the live instances of that shape. The choices at each hop are then the live arcs with
a live continuation:

- at an accelerator, the in-system switch chips ``k`` whose arcs ``a -> k`` and
  ``k -> b`` are both live (and, across the systems of a supernode, whose plane still
  joins the two systems' chips);
- at a NIC, the planes whose arcs ``nic -> leaf`` and ``leaf -> nic(b)`` are live and
  whose two leaves are still joined;
- at a leaf, the spines with a live uplink and a live downlink to the destination leaf
  (between pods: a spine with at least one usable core, and a live downlink from its
  peer spine in the destination pod);
- at a spine bound for another pod, the cores with live arcs to it and from it to the
  destination pod's spine.

These are computed per (source leaf, destination leaf) pair and per (spine,
destination pod), as arrays. A flow with no live instance of its shape needs a longer
detour. Where an end's NIC is cut off (its host link, or every arc of its NIC to the
leaves, failed: a failed single-homed leaf), the shortest detours pass one accelerator
of the same system with a working NIC (the transit of :mod:`topomodel.routing`) and are
relayed as arrays under ECMP (:mod:`topomodel.routing.relays`). Other detours (through
another leaf or NIC) go to the general router, so the loads are those of the general
router on the whole phase, link by link.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import cast

import numpy as np

from topomodel.fabric.tables import Fabric, ignores_failures
from topomodel.routing.clos.live import Survivors, intact_view, survivors_view
from topomodel.routing.clos.paths import mesh_paths, scaleup_paths
from topomodel.routing.clos.view import ClosView, clos_view
from topomodel.routing.general import route_general
from topomodel.routing.pieces import union_span
from topomodel.routing.plane_patch import scaleout_on_copy, whole_scaleout
from topomodel.routing.relays import relayed
from topomodel.routing.routed import Routed
from topomodel.routing.sections import KeptSection, failed_rows, intact_section, kept_section
from topomodel.routing.supernode_patch import supernode_on_copy
from topomodel.traffic.phases import Phase
from topomodel.vocabulary import SCALE_OUT_TIERS

HOPS_DTYPE = np.int32
"""Hops per flow are held as int32: a path's links number fewer than the fabric's nodes
(under 2**31), and every reader takes the same values (latency multiplies them by
float seconds; int32 converts to float64 exactly). A 98k phase's 11 M flows: 44 MB
instead of 88 MB at the degraded steps' peak."""

EXACT_SUM_BYTES = float(2**53)
"""Below this every integer is a float64, so sums and differences of whole numbers of
bytes under it are exact in any order (:func:`nic_patched`)."""


PATCHED_HIT_SHARE = 0.5
"""The largest share of a section's flows :func:`nic_patched` routes again: it routes
each hit flow twice (off the intact fabric, onto the copy) besides the intact section,
so above half of them (a failed plane hits every NIC's flows) routing the section
whole on the copy is less work. Either gives the same loads bit for bit."""


def check_survivors(fabric: Fabric) -> None:
    """Build the failure view; raises :class:`Irregular` where it cannot be built."""
    survivors_view(fabric)


def route_around_failures(fabric: Fabric, phase: Phase, *, routing: str, seed: int,
                          qps: int, hash_scaleup: bool) -> Routed:
    """Route a phase on a structured fabric with failed parts (see the module docstring):
    every flow whose fault-free path shape survives by arrays, the rest by
    :func:`~topomodel.routing.general.route_general`."""
    view = survivors_view(fabric)
    clos = view.clos
    flows = phase.flows
    load: np.ndarray | None = None
    hops = np.zeros(flows, dtype=HOPS_DTYPE)
    detour = np.zeros(flows, bool)
    unroutable = np.zeros(0, np.int64)
    up_routing = "ecmp" if routing == "hash" and not hash_scaleup else routing
    same = clos.same_domain(phase.src, phase.dst)
    network = ~same
    inside = np.flatnonzero(same)

    spans: list[tuple[int, int] | None] = []  # where each addition to the load lies
    # sections kept and shared (held anyway) are added to the load only when a section
    # routed for this copy alone comes, or at the end: no dense load beside the next
    # section's temporaries (the peak of a goodput on the 4K supernodes); the same
    # additions in the same order
    pending: list[KeptSection] = []

    def add_pending() -> None:
        nonlocal load
        for kept in pending:
            load = kept.added_to(load, clos.n_links)
        pending.clear()

    def section(name: str, which: np.ndarray, how: str,
                route: Callable[[], tuple[np.ndarray, ...]]) -> tuple[np.ndarray, ...]:
        kept = kept_section(fabric, name, phase, which, (how, seed, qps), route)
        pending.append(kept)
        if not kept.kept:  # this copy's own bytes per link row: taken over now
            add_pending()
        spans.append(kept.span)
        return kept.rest

    far = np.zeros(0, np.int64)  # flows between systems of a supernode
    if len(inside):
        across = clos.other_system(phase.src[inside], phase.dst[inside])
        within = inside if clos.mesh else inside[~across]
        (cut,) = section("scaleup", within, up_routing, lambda: (
            mesh_paths(view, phase, within) if clos.mesh
            else scaleup_paths(view, phase, within, up_routing, seed, qps)))
        hops[inside] = 1 if clos.mesh else 2
        if clos.planes:
            network[cut] = True
        else:  # no network: only a transit through another accelerator can join them
            detour[cut] = True
        del within, cut  # freed before the scale-out section's temporaries (peak)
        if not clos.mesh:
            far = inside[across]
        del across
    del inside, same  # freed before the supernode section's temporaries (peak)
    if len(far):
        hops[far], lost, _ = section("supernode", far, up_routing, partial(
            supernode_on_copy, fabric, view, phase, far, up_routing, seed, qps))
        detour[far[lost]] = True
    del far
    outside = np.flatnonzero(network)
    del network
    if len(outside):
        if not clos.planes:
            unroutable = outside
        else:
            hops[outside], lost, *_ = section("scaleout", outside, routing, lambda: (
                nic_patched(fabric, view, phase, outside, routing, seed, qps)
                or scaleout_on_copy(fabric, view, phase, outside, routing, seed, qps)))
            detour[outside[lost]] = True
    add_pending()
    if load is None:
        load = np.zeros(clos.n_links)
    if detour.any() and routing == "ecmp" and clos.planes and not clos.mesh and (
            clos.scaleup_up is not None):
        idx = np.flatnonzero(detour)
        extra, relay_hops, left = relayed(fabric, view, phase, idx, seed, qps)
        load += extra
        spans.append(None)
        hops[idx[~left]] = relay_hops[~left]
        detour[idx[~left]] = False
    if detour.any():
        extra, hops[detour], lost = _route_detours(fabric, phase, np.flatnonzero(detour),
                                                   routing=routing, seed=seed, qps=qps,
                                                   hash_scaleup=hash_scaleup)
        load += extra
        spans.append(None)
        unroutable = np.union1d(unroutable, lost)
    hops[unroutable] = 0
    span = None if None in spans else union_span(cast("list[tuple[int, int]]", spans))
    return Routed(load, hops, unroutable.astype(np.int64), "structured", span=span)


def _route_detours(fabric: Fabric, phase: Phase, detour: np.ndarray, *, routing: str,
                   seed: int, qps: int, hash_scaleup: bool
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The general router on the flows ``detour`` alone: (link loads, their hops, those
    of them with no path, as indices into the phase). Under hash routing a flow's paths
    depend on its index, so each hashes as its index in the phase (``numbers``)."""
    part = Phase(phase.src[detour], phase.dst[detour], phase.bytes[detour],
                 phase.group[detour], phase.steps, phase.label, phase.messages_per_step)
    routed = route_general(fabric, part, routing=routing, seed=seed, qps=qps,
                           hash_scaleup=hash_scaleup,
                           numbers=detour if routing == "hash" else None)
    return routed.link_bytes, routed.hops, detour[routed.unroutable]


def nic_patched(fabric: Fabric, view: Survivors, phase: Phase, flows: np.ndarray,
                routing: str, seed: int, qps: int) -> tuple[np.ndarray, ...] | None:
    """The scale-out section of ``flows`` on the copy ``view`` whose failed scale-out
    rows are all a NIC's own (its host links, its arcs to and from the leaves: a failed
    NIC or NIC - leaf link), from the intact section (kept and shared:
    :func:`~topomodel.routing.sections.intact_section`): bit for bit what
    :func:`~topomodel.routing.plane_patch.whole_scaleout` gives on the copy, or None
    where it does not apply.

    A flow neither of whose NICs has a failed row reads only live rows, the same as with
    every arc live (its planes, leaf pairs and spines are chosen from rows that did not
    fail), so it takes the same paths with the same bytes; only the flows of the hit
    NICs (a few in millions) are routed again: their bytes on the intact fabric taken
    off, their bytes on the copy added. Under hash routing every amount a flow puts on a
    row is its bytes or its bytes per queue pair, whole on one path; where those are
    whole numbers and every row's sum stays below :data:`EXACT_SUM_BYTES`, every sum
    and difference is exact, so the loads are the ones routing every flow on the copy
    adds up.

    A failed leaf (its NIC arcs and its arcs to the spines), or a NIC's row with a
    failed leaf - spine arc, is patched the same way with more NICs hit
    (:func:`_touched_leaves`): a leaf - spine arc is read only by flows that enter or
    leave the fat-tree at its leaf (a path climbs from its entry leaf and comes down to
    its exit leaf, through no other leaf), so only by flows of a NIC with an arc to that
    leaf, which are routed again. Elsewhere (ECMP's fractions, bytes not whole, no
    failed NIC row, a failed spine - core arc, more than :data:`PATCHED_HIT_SHARE` of
    the flows hit) None: a failure inside the planes alone
    is the plane patch's (:mod:`topomodel.routing.plane_patch`)."""
    clos = view.clos
    up, down = clos.access_up, clos.access_down
    if routing != "hash" or up is None or down is None or not len(flows):
        return None
    dead = ~view.alive
    failed = failed_rows(fabric, view.alive, SCALE_OUT_TIERS)
    own = fabric.derived(_nic_rows)
    if not len(failed) or not own[failed].any():
        return None
    touched = _touched_leaves(fabric, clos, failed[~own[failed]])
    if touched is None or not whole_bytes(phase.bytes[flows], qps):
        return None
    hit = _hit_flows(view, dead, touched, phase.src[flows], phase.dst[flows])
    if np.count_nonzero(hit) > PATCHED_HIT_SHARE * len(flows):
        return None
    intact = fabric.derived(intact_view)
    kept = intact_section(fabric, "scaleout", phase, flows, (routing, seed, qps),
                          lambda: whole_scaleout(fabric, intact, phase, flows, routing,
                                                 seed, qps))
    again = flows[hit]
    gone = whole_scaleout(fabric, intact, phase, again, routing, seed, qps)[0]
    came, hops_hit, lost_hit = whole_scaleout(fabric, view, phase, again, routing, seed,
                                              qps)[:3]
    load = kept.added_to(None, clos.n_links)
    if not (load.max(initial=0.0) + came.max(initial=0.0) < EXACT_SUM_BYTES):
        return None
    load -= gone
    load += came
    hops, lost = kept.rest[0].copy(), kept.rest[1].copy()
    hops[hit], lost[hit] = hops_hit, lost_hit
    none = np.zeros(0, np.int32)
    return load, hops, lost, np.zeros(0, np.int8), none, none


@ignores_failures
def _nic_rows(fabric: Fabric) -> np.ndarray:
    """Per link row, whether it is a NIC's own: its host links, its arcs to and from
    the leaves (the same on every copy)."""
    clos = clos_view(fabric)
    assert clos.access_up is not None and clos.access_down is not None
    own = np.zeros(clos.n_links, bool)
    for rows in (clos.access_up.table, clos.access_down.table, clos.host_up,
                 clos.host_down):
        own[rows[rows >= 0]] = True
    return own


def whole_bytes(volume: np.ndarray, qps: int) -> bool:
    """Whether every flow's bytes and bytes per queue pair are finite non-negative
    whole numbers (``volume`` gathered for this call: freed on return, before the
    routing's temporaries)."""
    return bool(np.isfinite(volume).all() and (volume >= 0).all()
                and (volume == np.floor(volume)).all()
                and (volume / qps == np.floor(volume / qps)).all())


def _touched_leaves(fabric: Fabric, clos: ClosView, rows: np.ndarray) -> np.ndarray | None:
    """Per node, whether it is the leaf end of one of the failed switch link ``rows``
    (all False where there are none); None where one of them is not a leaf - spine arc
    (link tier ``spine``) with a leaf at one end (a NIC's arcs reach it)."""
    touched = np.zeros(len(clos.domain), bool)
    if not len(rows):
        return touched
    tier = fabric.link_arrays["tier"]
    names = np.asarray(tier.categories)[tier.codes[rows]]
    up = clos.access_up
    assert up is not None
    leaf = np.zeros(len(clos.domain), bool)
    leaf[clos.dst[up.table[up.table >= 0]]] = True
    ends = np.concatenate([clos.src[rows], clos.dst[rows]])
    if not (names == "spine").all() or not (leaf[clos.src[rows]] | leaf[clos.dst[rows]]).all():
        return None
    touched[ends[leaf[ends]]] = True
    return touched


def _hit_flows(view: Survivors, dead: np.ndarray, touched: np.ndarray, src: np.ndarray,
               dst: np.ndarray) -> np.ndarray:
    """Per flow (``src`` -> ``dst``), whether a failed row is its source NIC's (host
    link, arcs to the leaves) or its destination NIC's, or one of those NICs has an arc
    to a ``touched`` leaf (gathered ends freed on return)."""
    clos = view.clos
    up, down = clos.access_up, clos.access_down
    assert up is not None and down is not None
    up_hit = dead[up.table].any(axis=1)
    down_hit = dead[down.table].any(axis=1)
    if touched.any():
        up_hit |= ((up.table >= 0) & touched[clos.dst[up.table]]).any(axis=1)
        down_hit |= ((down.table >= 0) & touched[clos.src[down.table]]).any(axis=1)
    hit = up_hit[up.slot[clos.nic_of[src]]]
    hit |= down_hit[down.slot[clos.nic_of[dst]]]
    hit |= dead[clos.host_up[src]] | dead[clos.host_down[dst]]
    return hit
