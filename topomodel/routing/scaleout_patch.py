"""The scale-out section of the router around failures on a copy whose failed parts all
sit inside a few pods of the fat-tree: the intact section, with the links of those pods
and of the pods they exchange traffic with routed again.

The rule. Let the hit pods ``H`` be the pods holding a failed arc, where every failed
scale-out arc is a leaf - spine arc of a pod or a spine - core arc (its pod: the
spine's); a failed host link or NIC - leaf arc changes which planes its flows take, so
such a copy is routed whole. A flow meets pod ``Q`` on a plane where its source or
destination NIC's leaf on that plane is in ``Q``. Only the leaf pairs and (spine,
destination pod) keys with an end in ``H`` can change their usable spines or cores, so
only flows meeting ``H`` can change their shares, and only the arcs of the pods ``D`` =
``H`` and every pod that a flow joins to a pod of ``H`` (their leaf - spine arcs, their
spines' arcs to and from the cores) can carry changed bytes: a leaf's uplink sums its
own pairs, a spine - core arc the keys of its spine, a core - spine arc the keys into
its pod. Route the flows ``T`` meeting a pod of ``D`` on the copy: each arc of ``D``
sums only flows of ``T``, and every pair or key feeding it has all its flows in ``T``
(pairs and keys are fixed by the pods of their ends), so it gets the same entries in
the same order as when the whole section is routed; every other arc gets entries that
did not change. Where a flow of ``T`` takes other planes than with every arc live (as
the intact section, kept with the planes each flow takes, says; its share on every
plane would move), the section is routed whole.
"""

from __future__ import annotations

import numpy as np

from topomodel.fabric.tables import Fabric, ignores_failures
from topomodel.records import documented
from topomodel.routing.sections import intact_section
from topomodel.routing.survivors import _intact_view, _scaleout, _Survivors, _SurvivorShape
from topomodel.traffic.phases import Phase
from topomodel.vocabulary import SCALE_OUT_TIERS

POD_TIERS = ("spine", "core")
"""The link tiers of a fat-tree's pods: leaf - spine and spine - core arcs."""

MOST_PATCHED_SHARE = documented(
    "scaleout_patch.MOST_PATCHED_SHARE", 0.8,
    """Patch only when at most this share of the section's flows meets the pods routed
    again: the patch routes them on the copy, then copies the intact section (about a
    tenth of routing it at the 98k 8-NPU example), so nearer the whole section it saves
    nothing.""")


class _Pods:
    """The fat-tree's pods: ``node`` per node (the pod of a leaf or spine, -1 for
    others) and ``row`` per link row (the pod of a leaf - spine or spine - core arc, -1
    for others)."""

    def __init__(self, node: np.ndarray, row: np.ndarray) -> None:
        self.node, self.row = node, row


@ignores_failures
def _pods(fabric: Fabric) -> _Pods | None:
    """The pods of ``fabric``'s fat-tree, None where it has no leaf - spine level."""
    shape = fabric.derived(_SurvivorShape).fat_tree
    if not shape.present:
        return None
    clos = fabric.derived(_intact_view).clos
    node = np.full(len(clos.domain), -1)
    leaves = np.flatnonzero(shape.slot >= 0)
    node[leaves] = np.searchsorted(shape.pods, shape.group)
    node[shape.pod_spines] = np.arange(len(shape.pods))[:, None]
    tier = fabric.links["tier"]
    names = np.asarray(tier.cat.categories).astype(str)
    in_pod = np.isin(names[tier.cat.codes.to_numpy()], POD_TIERS)
    row = np.where(in_pod, np.maximum(node[clos.src], node[clos.dst]), -1)
    return _Pods(node, row)


def hit_pods(fabric: Fabric, view: _Survivors) -> np.ndarray | None:
    """The pods holding the copy's failed scale-out arcs (sorted), None where one of
    them lies outside every pod or there is none."""
    failed = np.flatnonzero(~view.alive)
    tier = fabric.links["tier"]
    names = np.asarray(tier.cat.categories).astype(str)[tier.cat.codes.to_numpy()[failed]]
    failed = failed[np.isin(names, SCALE_OUT_TIERS)]
    pods = fabric.derived(_pods) if len(failed) else None
    if pods is None or (pods.row[failed] < 0).any():
        return None
    return np.unique(pods.row[failed])


def routed_again(hit: np.ndarray, pod_s: np.ndarray, pod_d: np.ndarray) -> np.ndarray:
    """The pods ``D`` of the module docstring: the ``hit`` pods and every pod a flow
    joins to one of them on some plane (``pod_s``, ``pod_d``: (flows, planes) the pods
    of each flow's source and destination leaves)."""
    to_hit, from_hit = np.isin(pod_d, hit), np.isin(pod_s, hit)
    return np.union1d(hit, np.union1d(pod_s[to_hit], pod_d[from_hit]))


def patched_scaleout(fabric: Fabric, view: _Survivors, phase: Phase, outside: np.ndarray,
                     routing: str, seed: int, qps: int
                     ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None:
    """The scale-out section of ``outside`` (flows that leave their system) on the copy
    ``view``, as the module docstring builds it: (bytes per link row, hops, lost
    flows, the planes each flow takes), bit for bit what routing it whole gives; None
    where it must be routed whole (a failed arc outside every pod, too many flows to
    route again, or a flow's planes changed)."""
    hit = hit_pods(fabric, view)
    if hit is None:
        return None
    pods = fabric.derived(_pods)
    assert pods is not None
    clos = view.clos
    access_up, access_down = clos.access_up, clos.access_down
    assert access_up is not None and access_down is not None
    nic_s, nic_d = clos.nic_of[phase.src[outside]], clos.nic_of[phase.dst[outside]]
    pod_s = pods.node[clos.dst[access_up.arcs(nic_s)]]
    pod_d = pods.node[clos.src[access_down.arcs(nic_d)]]
    again = routed_again(hit, pod_s, pod_d)
    meets = (np.isin(pod_s, again) | np.isin(pod_d, again)).any(axis=1)
    if meets.sum() > MOST_PATCHED_SHARE * len(outside):
        return None
    flows = outside[meets]
    load, hops, lost, usable = _scaleout(view, phase, flows, routing, seed, qps)
    intact = fabric.derived(_intact_view)
    kept = intact_section(fabric, "scaleout", phase, outside, (routing, seed, qps),
                          lambda: _scaleout(intact, phase, outside, routing, seed, qps))
    all_hops, all_lost, all_usable = (a.copy() for a in kept.rest)
    if not np.array_equal(usable, all_usable[meets]):
        return None
    out = kept.added_to(None, clos.n_links)
    rows = np.flatnonzero(np.isin(pods.row, again))
    out[rows] = load[rows]
    all_hops[meets], all_lost[meets], all_usable[meets] = hops, lost, usable
    return out, all_hops, all_lost, all_usable


def scaleout_on_copy(fabric: Fabric, view: _Survivors, phase: Phase, outside: np.ndarray,
                     routing: str, seed: int, qps: int
                     ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The scale-out section of ``outside`` on the copy ``view``:
    :func:`patched_scaleout` where the failures allow, else routed whole."""
    patched = patched_scaleout(fabric, view, phase, outside, routing, seed, qps)
    return patched if patched is not None else _scaleout(view, phase, outside, routing,
                                                         seed, qps)
