"""The supernode section of the router around failures on a copy whose failed parts sit
in a few of the supernode's Clos components: the intact section, with those components'
links routed again.

A supernode's upper switch levels form separate Clos components (one per plane of each
supernode: its chips, their level-2 switches and the level-3 switches above them); the
section's bytes on a component's links come only from the flows with an end on one of
its chips. Route those flows on the copy and with every arc live: where each of them
takes the same planes in the same shares (the ``usable`` planes agree), every other
flow's choices are unchanged too and every link outside the failed components gets the
same bytes in the same order, so the kept intact section's sums hold there bit for bit
and the copy's own sums replace them on the failed components' links. Where the planes
differ (a failure cut a flow's plane off, moving its share onto other components), the
section is routed whole.
"""

from __future__ import annotations

import numpy as np

from topomodel.fabric.tables import Fabric, ignores_failures
from topomodel.routing.clos.live import Survivors, SurvivorShape, intact_view
from topomodel.routing.clos.paths import supernode_plane_paths
from topomodel.routing.sections import failed_rows, intact_section
from topomodel.traffic.phases import Phase
from topomodel.vocabulary import SCALEUP_TIERS

MOST_COMPONENTS_FAILED = 4
"""Patch only when at most one component in this many holds a failed arc: above it,
routing the flows of the failed components twice costs about what routing the section
once does."""


class _Components:
    """The supernode's Clos components: ``node`` per node (-1: none), ``row`` per link
    row of the section's arcs (accelerator - chip, chip - level 2, level 2 - level 3;
    -1 for others), ``count`` of them."""

    def __init__(self, node: np.ndarray, row: np.ndarray, count: int) -> None:
        self.node, self.row, self.count = node, row, count


@ignores_failures
def _components(fabric: Fabric) -> _Components | None:
    """The components of ``fabric``'s supernode, None where it has none to split (or
    its core arcs are found by search alone)."""
    shape = fabric.derived(SurvivorShape).supernode
    view = fabric.derived(intact_view)
    clos = view.clos
    up, down = clos.scaleup_up, clos.scaleup_down
    if not shape.present or up is None or down is None:
        return None
    pods = len(shape.pods)
    cores: np.ndarray | None = None
    label = np.arange(pods)
    spine_nodes = np.zeros(0, np.int64)
    if shape.cores:
        if shape.down_by_core is None:
            return None
        spine_pod = np.full(len(clos.domain), -1)
        spine_pod[shape.pod_spines] = np.arange(pods)[:, None]
        spine_nodes = np.flatnonzero(shape.core_slot >= 0)
        cores, core_index = np.unique(shape.core_nodes, return_inverse=True)
        label, core_label = _joined(np.repeat(spine_pod[spine_nodes],
                                              shape.core_nodes.shape[1]),
                                    core_index.ravel(), pods, len(cores))
        label = np.concatenate([label, core_label])
    _, label = np.unique(label, return_inverse=True)
    count = int(label.max(initial=-1)) + 1
    node = np.full(len(clos.domain), -1)
    leaves = np.flatnonzero(shape.slot >= 0)
    leaf_comp = label[np.searchsorted(shape.pods, shape.group)]  # per leaf row
    node[leaves] = leaf_comp
    node[shape.pod_spines] = label[:pods][:, None]
    row = np.full(clos.n_links, -1, np.int32)
    row[shape.up_arcs] = leaf_comp[:, None]
    row[shape.down_arcs] = leaf_comp[:, None]
    if cores is not None:
        node[cores] = label[pods:]
        row[shape.core_up] = node[spine_nodes][:, None]
        below = np.flatnonzero(shape.down_slot >= 0)
        row[shape.down_by_core] = node[below][:, None]
    owners = np.flatnonzero(up.slot >= 0)
    row[up.table[up.slot[owners]]] = node[clos.dst[up.table[up.slot[owners]]]]
    owners = np.flatnonzero(down.slot >= 0)
    row[down.table[down.slot[owners]]] = node[clos.src[down.table[down.slot[owners]]]]
    return _Components(node, row, int(count))


def _joined(pod: np.ndarray, core: np.ndarray, pods: int, cores: int
            ) -> tuple[np.ndarray, np.ndarray]:
    """Per pod and per core, the lowest pod joined to it through the arcs ``pod[i] --
    core[i]``: each side takes its neighbours' lowest until none changes (as many
    rounds as the widest component's hops, two in a folded Clos)."""
    pod_label = np.arange(pods)
    while True:
        core_label = np.full(cores, pods)
        np.minimum.at(core_label, core, pod_label[pod])
        lowest = pod_label.copy()
        np.minimum.at(lowest, pod, core_label[core])
        if (lowest == pod_label).all():
            return pod_label, core_label
        pod_label = lowest


def patched_supernode(fabric: Fabric, view: Survivors, phase: Phase, far: np.ndarray,
                      routing: str, seed: int, qps: int
                      ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None:
    """The supernode section of ``far`` (flows between systems of a supernode) on the
    copy ``view``, as the module docstring builds it: (bytes per link row, hops, lost
    flows, planes used), bit for bit what :func:`whole_supernode` gives; None where it
    must be routed whole (no failed arc in the supernode's tiers, one outside every
    component, too many components failed, or a flow's planes changed). Where every
    flow touches a failed component (a plane failed in every supernode), the flows
    routed on the copy are the section's: that route is returned, routed once."""
    failed = failed_rows(fabric, view.alive, SCALEUP_TIERS)
    comps = fabric.derived(_components) if len(failed) else None
    if comps is None or (comps.row[failed] < 0).any():
        return None
    hit = np.unique(comps.row[failed])
    if len(hit) * MOST_COMPONENTS_FAILED > comps.count:
        return None
    clos = view.clos
    up, down = clos.scaleup_up, clos.scaleup_down
    assert up is not None and down is not None
    # whether a flow's entry (exit) chip on some plane is in a failed component, per
    # row of the fan-out table (a system's accelerators share its chips), then per flow:
    # the same as over each flow's (flows, planes) chips, without those arrays (and
    # without holding the flows' ends while the sections below are routed)
    entry = np.asarray(np.isin(comps.node[clos.dst[up.table]], hit).any(axis=1))
    leave = np.asarray(np.isin(comps.node[clos.src[down.table]], hit).any(axis=1))
    touched = entry[up.slot[phase.src[far]]]
    touched |= leave[down.slot[phase.dst[far]]]
    if touched.all():  # every flow routed on the copy: that is the whole section
        return whole_supernode(view, phase, far, routing, seed, qps)
    intact = fabric.derived(intact_view)
    # the intact section, kept with each flow's planes (a flow's planes depend on its own
    # ends alone, so the touched flows' rows are theirs routed apart); found before the
    # copy's route of the touched flows, so that routing it (where it is not kept yet)
    # does not hold that route too (the peak of a goodput on the 4K supernodes)
    kept = intact_section(fabric, "supernode", phase, far, (routing, seed, qps),
                          lambda: whole_supernode(intact, phase, far, routing, seed, qps))
    load, hops, lost, usable = supernode_plane_paths(view, phase, far[touched], routing,
                                                     seed, qps)
    if not _same_planes(usable, kept.rest[2][touched]):
        return None
    del usable
    rows = np.flatnonzero(np.isin(comps.row, hit))
    copied = load[rows]
    del load  # only the failed components' rows are the copy's
    out = kept.added_to(None, clos.n_links)
    out[rows] = copied
    all_hops, all_lost = kept.rest[0].copy(), kept.rest[1].copy()
    all_hops[touched], all_lost[touched] = hops, lost
    return out, all_hops, all_lost, kept.rest[2]


def _same_planes(copy: np.ndarray, intact: np.ndarray) -> bool:
    """Whether each flow takes the same planes (``usable``, a bit per plane packed per
    flow, as :func:`~topomodel.routing.clos.paths.supernode_plane_paths` gives them) on
    the copy as with every arc live, and so the same share of its bytes on each."""
    return bool(np.array_equal(copy, intact))


def whole_supernode(view: Survivors, phase: Phase, far: np.ndarray, routing: str, seed: int,
                    qps: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The supernode section of ``far`` routed whole on ``view``: (bytes per link row,
    hops, lost flows, whether a plane carries some of each flow: a bit per plane), as
    :func:`~topomodel.routing.clos.paths.supernode_plane_paths` routes it. The planes
    are kept with the intact section so that a patch compares a copy's planes with
    them without routing the touched flows a second time, intact."""
    return supernode_plane_paths(view, phase, far, routing, seed, qps)


def supernode_on_copy(fabric: Fabric, view: Survivors, phase: Phase, far: np.ndarray,
                      routing: str, seed: int, qps: int
                      ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The supernode section of ``far`` on the copy ``view``: :func:`patched_supernode`
    where the failures allow, else routed whole (:func:`whole_supernode`)."""
    patched = patched_supernode(fabric, view, phase, far, routing, seed, qps)
    return patched if patched is not None else whole_supernode(view, phase, far, routing,
                                                               seed, qps)
