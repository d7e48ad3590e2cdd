"""Detours around a cut-off NIC, relayed through a peer of the same system, as arrays.

A failed single-homed leaf (or a NIC's host link, or every arc of a NIC to the leaves)
cuts the NICs under it off the network. The general router's shortest paths for a flow
with such an end pass exactly one accelerator in transit at that end, a peer of the
same system whose NIC still reaches a leaf; :func:`relayed` finds those detours and
loads them as the general router's even ECMP splits them, where that split is provably
even, and leaves the rest to it (:mod:`topomodel.routing.survivors`).
"""

from __future__ import annotations

import numpy as np

from topomodel.arrays import distinct
from topomodel.fabric.tables import Fabric
from topomodel.routing.clos.live import Survivors, chips_of
from topomodel.routing.clos.paths import scaleout_paths, scaleup_paths
from topomodel.traffic.phases import Phase
from topomodel.vocabulary import FAT_TREE_TIERS, SCALEUP_TIERS


class _Ends:
    """Per node of a structured fabric with failures, what relaying reads: its system's
    row (``system_row``, -1 for none) in ``members`` (each system's accelerators with a
    NIC, -1 padded); whether it is ``attached`` (host links and NIC still reach a leaf
    and back); whether it is ``alone`` (its scale-up domain is its system, every arc
    between its accelerators and chips live: its relays are then exactly its system's
    peers, and the chips split evenly among them); and ``switches_intact``: every arc
    between switches live but those of a switch with none live (a failed switch splits
    nothing)."""

    def __init__(self, fabric: Fabric, view: Survivors) -> None:
        clos, alive = view.clos, view.alive
        acc = np.flatnonzero(clos.host_up >= 0)
        systems, row, size = np.unique(clos.system[acc], return_inverse=True,
                                       return_counts=True)
        order = np.argsort(row, kind="stable")
        position = np.arange(len(acc)) - np.repeat(np.cumsum(size) - size, size)
        self.members = np.full((len(systems), int(size.max(initial=1))), -1)
        self.members[row[order], position] = acc[order]
        self.system_row = np.full(len(clos.domain), -1)
        self.system_row[acc] = row
        self.attached = np.zeros(len(clos.domain), bool)
        hosted = np.flatnonzero((clos.host_up >= 0) & (clos.host_down >= 0))
        if clos.access_up is not None and clos.access_down is not None:
            nic = clos.nic_of[hosted]
            self.attached[hosted] = (
                alive[clos.host_up[hosted]] & alive[clos.host_down[hosted]]
                & alive[clos.access_up.arcs(nic)].any(axis=1)
                & alive[clos.access_down.arcs(nic)].any(axis=1))
        self.alone = self._alone(view)
        between = fabric.link_arrays["tier"].isin(FAT_TREE_TIERS[1:] + SCALEUP_TIERS[1:])
        dead = np.bincount(clos.src, alive, len(clos.domain)) == 0
        between = between & ~dead[clos.src] & ~dead[clos.dst]
        self.switches_intact = bool(alive[between].all())

    @staticmethod
    def _alone(view: Survivors) -> np.ndarray:
        clos = view.clos
        member = np.flatnonzero(clos.domain >= 0)
        width = int(clos.system.max(initial=0)) + 1
        pairs = distinct(clos.domain[member].astype(np.int64) * width + clos.system[member])
        systems = np.bincount(pairs // width, minlength=int(clos.domain.max(initial=-1)) + 1)
        out = np.where(clos.domain >= 0, systems[np.maximum(clos.domain, 0)] == 1, False)
        broken = np.zeros(width, bool)
        for fan in (clos.scaleup_up, clos.scaleup_down):
            if fan is None:
                return out & False
            owner = np.flatnonzero(fan.slot >= 0)
            dead = ~view.alive[fan.table[fan.slot[owner]]].all(axis=1)
            broken[clos.system[owner[dead]]] = True
        return out & ~broken[np.maximum(clos.system, 0)]


def relayed(fabric: Fabric, view: Survivors, phase: Phase, flows: np.ndarray, seed: int,
            qps: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """ECMP detours of scale-out ``flows`` whose source or destination NIC is cut off:
    over the fewest accelerators in transit (the general router's transit penalty),
    then the fewest hops. Every shortest detour passes, at a cut end, a peer in the same
    system with a working NIC (a relay, reached over the system's chips); at a working
    end the accelerator itself. A flow's bytes split evenly over its relays at the
    source (as the chips split them), then over the destination relays its source relay
    reaches at least cost (as the spines split them): the general router's even ECMP on
    the symmetric systems and Clos the structured router covers, held to it in tests.

    Returns the load, each flow's hops, and which flows have no such detour (an end not
    cut off, a peer system that is not its whole domain, no relay with a live path)."""
    src, dst, volume = phase.src[flows], phase.dst[flows], phase.bytes[flows]
    roles = fabric.derived(_Ends, view)
    system_row, members = roles.system_row, roles.members
    attached, alone = roles.attached, roles.alone
    cut_s, cut_d = ~attached[src], ~attached[dst]
    left = (~(cut_s | cut_d) | ~alone[src] | ~alone[dst] | (system_row[src] < 0)
            | (system_row[dst] < 0))
    # relays per end: itself where attached, else its system's attached peers
    def relays(end: np.ndarray, cut: np.ndarray) -> np.ndarray:
        table = members[system_row[end]]
        usable = (table >= 0) & attached[np.maximum(table, 0)] & (table != end[:, None])
        own = np.where(table == end[:, None], table, -1)
        return np.where(cut[:, None], np.where(usable, table, -1), own)
    relay_s, relay_d = relays(src, cut_s), relays(dst, cut_d)
    f, i, j = np.nonzero((relay_s[:, :, None] >= 0) & (relay_d[:, None, :] >= 0)
                         & ~left[:, None, None])
    a, b = relay_s[f, i], relay_d[f, j]
    legs = Phase(a, b, np.zeros(len(f)), phase.group[flows][f], phase.steps, phase.label,
                 phase.messages_per_step)
    _, leg_hops, lost = scaleout_paths(view, legs, np.arange(len(f)), "ecmp", seed, qps)
    ok = ~lost
    for end, relay, on in ((src, a, a != src[f]), (dst, b, b != dst[f])):  # chips join
        pair = np.flatnonzero(ok & on)
        if len(pair):
            ends = (end[f[pair]], relay[pair]) if end is src else (relay[pair], end[f[pair]])
            ok[pair] = chips_of(view, *ends)[2].any(axis=1)
    transits = (a != src[f]).astype(np.int64) + (b != dst[f])
    cost = np.where(ok, transits * (1 << 32) + leg_hops + 2 * transits, np.iinfo(np.int64).max)
    best = np.full(len(flows), np.iinfo(np.int64).max)
    np.minimum.at(best, f, cost)
    take = ok & (cost == best[f])
    left |= best == np.iinfo(np.int64).max
    f, a, b, i = f[take], a[take], b[take], i[take]
    # shares: even over the source's relays, then over the destination relays of each
    width = relay_s.shape[1]
    per_source = np.zeros(len(flows) * width)
    np.add.at(per_source, f * width + i, 1)
    if not roles.switches_intact:  # the spines split evenly only among intact switches
        split = np.zeros(len(flows), bool)
        split[f[per_source[f * width + i] > 1]] = True
        left |= split
        keep = ~split[f]
        f, a, b, i = f[keep], a[keep], b[keep], i[keep]
        take[np.flatnonzero(take)[~keep]] = False
    sources = np.bincount(f, weights=1 / per_source[f * width + i], minlength=len(flows))
    share = volume[f] / sources[f] / per_source[f * width + i]
    hops = np.zeros(len(flows), np.int64)
    hops[f] = best[f] % (1 << 32)
    load = scaleout_paths(view, Phase(a, b, share, legs.group[take], phase.steps, phase.label,
                                 phase.messages_per_step), np.arange(len(f)), "ecmp", seed,
                     qps)[0]
    for on, x, y in ((a != src[f], src[f], a), (b != dst[f], b, dst[f])):
        if on.any():
            hop = Phase(x[on], y[on], share[on], legs.group[take][on], phase.steps,
                        phase.label, phase.messages_per_step)
            load += scaleup_paths(view, hop, np.arange(int(on.sum())), "ecmp", seed, qps)[0]
    return load, hops, left
