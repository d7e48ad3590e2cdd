"""Paths over the survivors' view, one section at a time: a full mesh's direct links,
a switched scale-up domain, a supernode's planes and the scale-out planes."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from topomodel.arrays import sorted_distinct
from topomodel.routing.clos.live import Survivors, chips_of
from topomodel.routing.clos.view import ClosView
from topomodel.routing.hashing import choose, queue_pairs
from topomodel.routing.pieces import Rows, link_bytes
from topomodel.routing.planes import Chosen, even_by_group, route_planes
from topomodel.traffic.phases import Phase

SUPERNODE_HOPS_DTYPE = np.int8
"""Hops per flow of the supernode section (:func:`supernode_plane_paths`), as int8: 2
in-system arcs plus 0, 2 or 4 inside a plane's Clos. Every reader takes the same values
(the router around failures writes them into its int32 hops); a kept section holds
them for every flow between systems of a supernode, a byte each instead of 8 (some
5.5 M flows of DeepSeek-V3's EP All-to-All on the 98,304-NPU 4K-supernode example: 44
MB kept and a per-flow int64 temporary fewer)."""


def mesh_paths(view: Survivors, phase: Phase, flows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Direct links of a full mesh; the flows whose link failed (they take the network)."""
    rows = view.lookup.row(phase.src[flows], phase.dst[flows])
    ok = (rows >= 0) & view.alive[np.maximum(rows, 0)]
    return link_bytes(view.clos.n_links, [(rows[ok], phase.bytes[flows][ok])]), flows[~ok]


def scaleup_paths(view: Survivors, phase: Phase, flows: np.ndarray, routing: str, seed: int,
             qps: int) -> tuple[np.ndarray, np.ndarray]:
    """Accelerator -> in-system chip -> accelerator over the chips still joining the two;
    the flows no chip joins (they take the network)."""
    up = view.clos.scaleup_up
    assert up is not None
    n = view.clos.n_links
    if routing == "ecmp" and _apart(view):
        return _even_scaleup(view, phase, flows)
    into, out, ok = chips_of(view, phase.src[flows], phase.dst[flows])
    weights = np.where(ok, up.weights[up.slot[phase.src[flows]]], 0)
    cut = ~ok.any(axis=1)
    volume = phase.bytes[flows]
    if routing == "ecmp":
        share = weights / np.maximum(weights.sum(axis=1, keepdims=True), 1) * volume[:, None]
        return link_bytes(n, [(into, share), (out, share)]), flows[cut]
    keep = np.flatnonzero(~cut)
    take, ids, split = queue_pairs(routing, flows[keep], qps)
    row = keep[take]
    pick = choose(routing, seed, ids, phase.src[flows][row], phase.dst[flows][row],
                   np.ones(len(row), np.int64), weights[row])
    part = volume[row] / split
    return link_bytes(n, [(into[row, pick], part), (out[row, pick], part)]), flows[cut]


def _even_scaleup(view: Survivors, phase: Phase, flows: np.ndarray
                  ) -> tuple[np.ndarray, np.ndarray]:
    """:func:`scaleup_paths` under ECMP: each flow's bytes split over the live chips
    joining its ends by their cables, one chip (column of the fan-out tables) at a time.

    A chip's arc from an accelerator (to one) is one entry of the fan-out table, and a
    distinct link row, so its bytes are a bincount over the flows' table rows, added in
    flow order: bit for bit the bincount over every (flow, chip) entry, without the
    (flows, chips) arrays (at 98k NPUs, 5 M relayed All-to-All flows over 7 chips: each
    such array 280 MB, several of them at once)."""
    up, down = view.clos.scaleup_up, view.clos.scaleup_down
    assert up is not None and down is not None
    row_s, row_d = up.slot[phase.src[flows]], down.slot[phase.dst[flows]]
    volume = phase.bytes[flows]
    live_up, live_down = view.alive[up.table], view.alive[down.table]
    load = np.zeros(view.clos.n_links)
    if live_up.all() and live_down.all():  # every chip joins every pair: split per owner
        split = up.weights / np.maximum(up.weights.sum(axis=1, keepdims=True), 1)
        # chips with the same split of every row (every chip's, where cables are even)
        # get the same sums: counted once per distinct column, the same values
        sums: dict[bytes, tuple[np.ndarray, np.ndarray]] = {}
        for k in range(up.width):
            column = split[:, k]
            if column.tobytes() not in sums:
                share = column[row_s] * volume
                sums[column.tobytes()] = (np.bincount(row_s, share, len(up.table)),
                                          np.bincount(row_d, share, len(down.table)))
            load[up.table[:, k]], load[down.table[:, k]] = sums[column.tobytes()]
        return load, flows[:0]

    def cables(k: int) -> tuple[np.ndarray, np.ndarray]:
        """Whether chip ``k`` joins each flow's ends, and its cables there (else 0)."""
        ok = live_up[:, k][row_s] & live_down[:, k][row_d]
        return ok, np.where(ok, up.weights[:, k][row_s], 0)

    total = np.zeros(len(flows), up.weights.dtype)
    joined = np.zeros(len(flows), bool)
    for k in range(up.width):
        ok, weight = cables(k)
        total += weight
        joined |= ok
    for k in range(up.width):
        share = cables(k)[1] / np.maximum(total, 1) * volume
        load[up.table[:, k]] = np.bincount(row_s, share, len(up.table))
        load[down.table[:, k]] = np.bincount(row_d, share, len(down.table))
    return load, flows[~joined]


def _apart(view: Survivors) -> bool:
    """Whether the scale-up fan-out tables up and down share no link row (an
    accelerator - accelerator arc would be in both; :func:`_even_scaleup` writes each
    table's sums on its own rows)."""
    up, down = view.clos.scaleup_up, view.clos.scaleup_down
    assert up is not None and down is not None
    seen = np.zeros(view.clos.n_links, bool)
    seen[up.table] = True
    return not seen[down.table].any()


def supernode_plane_paths(view: Survivors, phase: Phase, flows: np.ndarray, routing: str,
                      seed: int, qps: int
                      ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Between systems of one supernode: accelerator -> chip k -> plane k's Clos -> chip
    k of the destination system -> accelerator, over the planes still joining them:
    (bytes per link row, hops per flow, lost flows, whether a plane carries some of each
    flow, a bit per plane: the (flows, planes) booleans packed along the planes,
    :func:`numpy.packbits`, a byte per flow up to 8 planes). The hops are int8 (2 to 6:
    :data:`SUPERNODE_HOPS_DTYPE`). The planes are only compared, copy with intact
    (:mod:`~topomodel.routing.supernode_patch`); packed, a kept section holds a byte per
    flow for them, not one per flow and plane, and none is held beside the sum of the
    pieces (the peak of a goodput on the 4K supernodes)."""
    up = view.clos.scaleup_up
    assert up is not None
    down = view.clos.scaleup_down
    assert down is not None
    clos = view.clos
    # the flows' table rows in int32 where they fit (:func:`_narrow`: the same values,
    # gathered and counted alike, in half the bytes), and not held beside the flows'
    # ends (two arrays per flow fewer while the planes are routed: the peak of a
    # goodput on the 4K supernodes); the general route below gathers the ends again
    row_s = _narrow(up.slot)[phase.src[flows]]
    row_d = _narrow(down.slot)[phase.dst[flows]]
    lower_s, lower_d = clos.dst[up.table], clos.src[down.table]  # chips per table row
    systems = _systems(lower_s, lower_d)
    live_s, live_d = view.alive[up.table].all(axis=1), view.alive[down.table].all(axis=1)
    groups = None
    if systems is not None and live_s[row_s].all() and live_d[row_d].all():
        # every flow's arcs to its chips are live (a read-only broadcast: no (flows,
        # planes) array), and its chips are its two systems': its leaf pairs are found
        # per pair of systems (:func:`route_planes`'s ``groups``)
        ok = np.broadcast_to(np.bool_(True), (len(flows), up.table.shape[1]))
        sys_s = systems[0]
        key_s, key_d, space = _pair_keys(clos, up.slot, down.slot, systems)
        keys = key_s[row_s]
        keys += key_d[row_d]
        pairs, group = sorted_distinct(keys, space)
        del keys
        group = _narrow(group)  # each flow's group, held through the planes: int32
        one = np.empty(len(pairs), np.int64)
        one[group] = np.arange(len(group))
        groups = (group, one)
        lower_s, lower_d = lower_s[row_s[one]], lower_d[row_d[one]]
        if routing == "ecmp" and _by_system(up.weights, sys_s):
            routed = even_by_group(view, view.supernode, phase.bytes[flows], lower_s,
                                   lower_d, up.weights[row_s[one]],
                                   ((up.table, row_s), (down.table, row_d)), groups)
            if routed is not None:
                pieces, extra, lost, usable = routed
                del routed
                usable = np.packbits(usable, axis=1)
                return link_bytes(clos.n_links, pieces), 2 + extra, lost, usable  # int8
    else:
        ok = view.alive[up.table[row_s]] & view.alive[down.table[row_d]]
        lower_s, lower_d = lower_s[row_s], lower_d[row_d]
    # one cable count for every chip of every system: a broadcast row, not a (flows,
    # planes) gather (the same values, read only)
    even = bool((up.weights == up.weights.flat[0]).all()) if up.weights.size else False
    pieces, extra, lost, usable, _ = route_planes(
        view, view.supernode, flows, phase.dst[flows], phase.src[flows], phase.bytes[flows],
        lower_s, lower_d, ok,
        np.broadcast_to(up.weights[0], (len(flows), up.width)) if even
        else up.weights[row_s], ((up.table, row_s), (down.table, row_d)), routing, seed, qps,
        groups=groups)
    hops = extra.astype(SUPERNODE_HOPS_DTYPE)
    hops += 2
    usable = np.packbits(usable, axis=1)
    return link_bytes(view.clos.n_links, pieces), hops, lost, usable


def _systems(chips_up: np.ndarray, chips_down: np.ndarray
             ) -> tuple[np.ndarray, np.ndarray, int] | None:
    """Per row of the fan-out tables up and down (``chips_up``/``chips_down``: its chips),
    the system it belongs to (numbered by its first chip) and how many systems, where a
    row's chips are its system's (the same as every other row with its first chip, up
    and down); None where they are not."""
    first, system = np.unique(np.concatenate([chips_up[:, 0], chips_down[:, 0]]),
                              return_inverse=True)
    one = np.empty(len(first), np.int64)
    one[system] = np.arange(len(system))
    both = np.concatenate([chips_up, chips_down])
    if not np.array_equal(both, both[one[system]]):
        return None
    return system[:len(chips_up)], system[len(chips_up):], len(first)


def _pair_keys(clos: ClosView, slot_up: np.ndarray, slot_down: np.ndarray,
               systems: tuple[np.ndarray, np.ndarray, int]
               ) -> tuple[np.ndarray, np.ndarray, int]:
    """Keys of (source system, destination system) pairs, per row of the fan-out tables
    up (``key_s``) and down (``key_d``; a pair's key is ``key_s + key_d``), and a bound
    on them, for pairs of systems of one domain (a supernode): the source system times
    the most systems in a domain, plus the destination's rank among its domain's systems.
    They sort as ``source x systems + destination`` does (within a domain the ranks
    follow the systems' numbers) in a key space a table can mark
    (:func:`~topomodel.arrays.sorted_distinct`: 12,288 x 512 keys at 98k NPUs in 4K
    supernodes, against 12,288 squared); where a system's accelerators lie in several
    domains, ``source x systems + destination`` itself.

    ``systems``: :func:`_systems`' (system per row up, per row down, how many)."""
    sys_s, sys_d, count = systems
    domain = np.full(count, -1, np.int64)
    home_s = clos.domain[np.flatnonzero(slot_up >= 0)]
    home_d = clos.domain[np.flatnonzero(slot_down >= 0)]
    domain[sys_s] = home_s
    domain[sys_d] = home_d
    if (domain[sys_s] != home_s).any() or (domain[sys_d] != home_d).any() or (
            domain < 0).any():
        return sys_s.astype(np.int64) * count, sys_d.astype(np.int64), count * count
    order = np.lexsort((np.arange(count), domain))
    first = np.searchsorted(domain[order], domain[order])
    rank = np.empty(count, np.int64)
    rank[order] = np.arange(count) - first
    width = int(rank.max(initial=0)) + 1
    return sys_s.astype(np.int64) * width, rank[sys_d], count * width


def _by_system(per_row: np.ndarray, system: np.ndarray) -> bool:
    """Whether the rows of ``per_row`` (a fan-out table's) are equal within each
    ``system`` (per row)."""
    first = np.empty(int(system.max(initial=-1)) + 1, np.int64)
    first[system] = np.arange(len(system))
    return bool(np.array_equal(per_row, per_row[first[system]]))


def scaleout_paths(view: Survivors, phase: Phase, flows: np.ndarray, routing: str, seed: int,
              qps: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Accelerator -> NIC -> a plane's fat-tree -> NIC -> accelerator over the planes
    still joining the two NICs; flows whose host link failed are detours."""
    load, hops, lost, _ = scaleout_chosen(view, phase, flows, routing, seed, qps)
    return load, hops, lost


def scaleout_chosen(view: Survivors, phase: Phase, flows: np.ndarray, routing: str, seed: int,
                    qps: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, Chosen | None]:
    """:func:`scaleout_paths` and, under hash routing, what it chose over the planes
    (:class:`~topomodel.routing.planes.Chosen`, else None)."""
    clos = view.clos
    access_up, access_down = clos.access_up, clos.access_down
    assert access_up is not None and access_down is not None
    src, dst, volume = phase.src[flows], phase.dst[flows], phase.bytes[flows]
    # per node its NIC and that NIC's rows of the fan-out tables, and per row its
    # planes' entry and exit nodes (small tables, int32 where they fit), then the
    # flows' entries of those: the same values as looking each up per flow (and each
    # (flow, plane) arc), in int32 per-flow arrays and no (flows, planes) gathers of
    # the arcs themselves
    nic_s = _narrow(clos.nic_of)[src]
    slot_s = _narrow(access_up.slot[clos.nic_of])[src]
    slot_d = _narrow(access_down.slot[clos.nic_of])[dst]
    table_up, table_down = access_up.table, access_down.table
    planes = view.live_planes
    if planes is not None:  # whole planes failed: the flows routed over the others
        table_up, table_down = table_up[:, planes], table_down[:, planes]
        ok = np.broadcast_to(np.bool_(True), (len(flows), len(planes)))
    else:
        ok = _live_entries(view, src, dst, slot_s, slot_d)
    lower_s = _narrow(clos.dst[table_up])[slot_s]
    lower_d = _narrow(clos.src[table_down])[slot_d]
    pieces, extra, lost, _, chosen = route_planes(
        view, view.fat_tree, flows, dst, nic_s, volume, lower_s, lower_d, ok,
        np.broadcast_to(np.int64(access_up.cables), ok.shape),  # read, never written
        ((table_up, slot_s), (table_down, slot_d)), routing, seed, qps)
    if planes is not None and chosen is not None:  # each pick as a column of the tables
        chosen = replace(chosen, pick=planes.astype(chosen.pick.dtype)[chosen.pick])
    carried = np.where(lost, 0.0, volume)
    pieces += [Rows(clos.host_up, src, carried), Rows(clos.host_down, dst, carried)]
    return link_bytes(clos.n_links, pieces), 4 + extra, lost, chosen


def _live_entries(view: Survivors, src: np.ndarray, dst: np.ndarray, slot_s: np.ndarray,
                  slot_d: np.ndarray) -> np.ndarray:
    """(flows, planes) whether each flow's host links and its NICs' arcs into and out of
    the plane are live: where every host link and every arc of the NICs' fan-out tables
    is (a check over the small tables, not per flow: the intact section, a copy whose
    failures lie elsewhere), a read-only broadcast of True, the same values without the
    (flows, planes) gathers and per-flow host-link look-ups (at 98k NPU servers 11 M
    flows of the relayed All-to-All, each gather fresh memory)."""
    clos = view.clos
    up, down = clos.access_up, clos.access_down
    assert up is not None and down is not None
    live_up, live_down = view.alive[up.table], view.alive[down.table]
    if (live_up.all() and live_down.all() and view.alive[clos.host_up].all()
            and view.alive[clos.host_down].all()):
        return np.broadcast_to(np.bool_(True), (len(src), up.table.shape[1]))
    hosted = view.alive[clos.host_up[src]]
    hosted &= view.alive[clos.host_down[dst]]
    ok = live_up[slot_s]
    ok &= hosted[:, None]
    del hosted
    ok &= live_down[slot_d]
    return ok


def _narrow(table: np.ndarray) -> np.ndarray:
    """``table`` (of node numbers, rows, or -1) as int32 where its values and the rows of
    a table indexed by them fit (every such value does below 2**31 - 1): the same
    values in half the bytes once gathered per flow or (flow, plane) entry."""
    small = np.iinfo(np.int32)
    if len(table) and (table.min() < small.min or table.max() >= small.max):
        return table
    return table.astype(np.int32)
