"""PXN: cross-rail scale-out traffic sent the way NCCL sends it on rail-optimized fabrics.

NCCL (2.12 and later, ``NCCL_PXN_DISABLE=0``, the default) sends a message to a GPU of
another node through the NIC on the *destination's* rail: if that NIC is not the
sender's own, the data first moves over NVLink to the sender node's GPU on the
destination's rail, whose NIC then sends it (NCCL's ``ncclTopoGetIntermediateRank``;
the blog "Doubling all2all Performance with NVIDIA Collective Communication Library
2.12"). On a rail-optimized fat-tree the scale-out hop then joins two NICs of one rail
and stays on that rail's leaves instead of climbing to the spines; on a rail-only
fabric it is the only way between rails.

:func:`pxn` applies that to any :class:`~topomodel.traffic.phases.Traffic`. As in NCCL,
the GPU in the middle must be a rank of the same communicator (NCCL's topology holds the
communicator's GPUs only): a flow whose group has no rank on the destination's rail in
the sender's system keeps its cross-rail path.
"""

from __future__ import annotations

import numpy as np

from topomodel.arrays import distinct, search_sorted
from topomodel.fabric.tables import Fabric
from topomodel.traffic.phases import Phase, Traffic


def pxn(fabric: Fabric, traffic: Traffic) -> Traffic:
    """``traffic`` with every cross-rail scale-out flow split as NCCL's PXN splits it
    (bytes per flow per step unchanged).

    A flow is split when its source and destination are accelerators in different
    scale-up domains, the source is in one, the NICs serving them
    (:attr:`Fabric.injection` ``.nic``) sit on different rails, and the flow's group has a
    rank in the source's system served by a NIC on the destination's rail (the lowest
    numbered if several, and never one whose own links or NIC's links have failed): it
    becomes source -> that rank (scale-up) and that rank ->
    destination (same-rail scale-out), each with the flow's bytes, group and phase. Other
    flows, and every phase's steps, label, messages and efficiency, are kept; a note says
    how many flows moved.

    Parameters
    ----------
    fabric
        The fabric the traffic runs on.
    traffic
        Any traffic (collectives, a training step, concurrent ones).

    Returns
    -------
    Traffic
        The same traffic object where nothing moves: on a fabric whose scale-out network
        is neither rail-optimized nor rail-only (a leaf there serves every rail, so PXN
        would change which NIC sends, not the path) or with no cross-rail flow.

    Examples
    --------
    >>> from topomodel.design import load_design
    >>> from topomodel.fabric.build import build_fabric
    >>> from topomodel.traffic.collectives import collective_traffic
    >>> pod = build_fabric(*load_design("examples/dgx-h100-superpod.yaml"))
    >>> pair = pod.accelerators[[7, 8]]  # GPU 7 of node 0 -> GPU 0 of node 1
    >>> group = pod.accelerators[[0, 7, 8]]
    >>> moved = pxn(pod, collective_traffic(pod, "sendrecv", [group], 1e6, algorithm="p2p"))
    >>> [(int(s), int(d)) for s, d in zip(moved.phases[0].src, moved.phases[0].dst)]
    [(0, 7), (7, 0), (0, 8)]
    """
    scaleout = fabric.structure.scaleout
    if not (scaleout.rail_optimized or scaleout.rail_only) or not traffic.phases:
        return traffic
    nodes = fabric.nodes
    count = len(nodes)
    nic = np.full(count, -1, np.int64)
    nic[fabric.accelerators] = fabric.injection.nic
    rail = np.where(nic >= 0, nodes["rail"].to_numpy()[np.maximum(nic, 0)], -1)
    system = nodes["system"].to_numpy().astype(np.int64)
    domain = nodes["domain"].to_numpy()
    rails = int(rail.max()) + 1
    systems = int(system.max()) + 1
    if rails < 2:
        return traffic
    able = (rail >= 0) & (domain >= 0)  # an accelerator that can relay or be relayed
    links = fabric.links
    failed = links["failed"].to_numpy()
    broken = np.zeros(count, bool)  # a node with a failed link relays nothing
    broken[links["src"].to_numpy()[failed]] = True
    broken[links["dst"].to_numpy()[failed]] = True
    relays = able & ~broken & ~broken[np.maximum(nic, 0)]
    crossing = [np.flatnonzero((domain[p.src] >= 0) & (rail[p.src] >= 0) & (rail[p.dst] >= 0)
                               & (rail[p.src] != rail[p.dst]) & (domain[p.src] != domain[p.dst]))
                for p in traffic.phases]
    if not any(len(cross) for cross in crossing):
        return traffic
    table_key, table_node = _members(traffic, relays, system, rail, systems, rails)
    phases = []
    moved = 0
    for p, cross in zip(traffic.phases, crossing, strict=True):
        src, dst = p.src, p.dst
        want = (p.group[cross].astype(np.int64) * systems + system[src[cross]]) * rails
        want += rail[dst[cross]]
        split, via = _lookup(want, table_key, table_node, cross)
        if not len(split):
            phases.append(p)
            continue
        first_hop = dst.copy()  # a split flow's first hop ends at the relay ...
        first_hop[split] = via
        phases.append(Phase(  # ... and a second hop goes on from it
            np.concatenate([src, via]), np.concatenate([first_hop, dst[split]]),
            np.concatenate([p.bytes, p.bytes[split]]), np.concatenate([p.group, p.group[split]]),
            p.steps, p.label, p.messages_per_step, p.efficiency))
        moved += len(split)
    if not moved:
        return traffic
    note = (f"pxn: {moved} cross-rail flow(s) (counted per phase) sent over scale-up to the"
            " group's GPU on the destination's rail, then on that rail (NCCL's PXN)")
    return Traffic(tuple(phases), traffic.group_names, traffic.algorithm,
                   (*traffic.notes, note), traffic.shapes)


def _lookup(want: np.ndarray, keys: np.ndarray, values: np.ndarray, rows: np.ndarray
            ) -> tuple[np.ndarray, np.ndarray]:
    """The ``rows`` whose ``want`` is among the sorted ``keys``, and their values."""
    if not len(keys) or not len(want):
        return rows[:0], values[:0]
    pos = np.minimum(search_sorted(keys, want), len(keys) - 1)
    found = keys[pos] == want
    return rows[found], values[pos[found]]


def _members(traffic: Traffic, able: np.ndarray, system: np.ndarray, rail: np.ndarray,
             systems: int, rails: int) -> tuple[np.ndarray, np.ndarray]:
    """Sorted keys (group, system, rail) of the ranks that can relay, and for each key
    the lowest-numbered such rank. A group's ranks are the accelerators its flows touch.

    Where every such accelerator belongs to one group only (one collective's groups), its
    group is read off an array over nodes, so an 8 M-flow All-to-All sorts nothing."""
    count = len(able)
    ends = []
    for p in traffic.phases:
        for end in (p.src, p.dst):
            ok = able[end]
            ends.append((end, p.group) if ok.all() else (end[ok], p.group[ok]))
    owner = np.full(count, -1, np.int64)
    for end, group in ends:
        owner[end] = group
    if all((owner[end] == group).all() for end, group in ends):
        node = np.flatnonzero(owner >= 0)
        group_of = owner[node]
    else:  # an accelerator in several groups: (group, node) pairs, sorted
        member = distinct(np.concatenate([group.astype(np.int64) * count + end
                                           for end, group in ends]))
        group_of, node = np.divmod(member, count)
    key = (group_of * systems + system[node]) * rails + rail[node]
    order = np.lexsort((node, key))
    key, node = key[order], node[order]
    first = np.r_[True, key[1:] != key[:-1]] if len(key) else np.zeros(0, bool)
    return key[first], node[first]
