"""The router around failures over several planes gives, bit for bit, what the code it
replaced gave: loads, hops, lost flows and usable planes of the supernode and scale-out
sections on every example's fabric, intact and with a part of each kind failed, under
every routing. The replaced code is kept below as the oracle."""

import functools

import numpy as np
import pytest
from test_routing import EXAMPLES, random_phase

from topomodel.analysis.reliability.goodput import with_part_failed
from topomodel.arrays import DENSE_KEY_SPACE, sorted_distinct
from topomodel.fabric.build import build_fabric
from topomodel.inputs.design import load_design
from topomodel.routing.clos.live import (
    ALL_CORE_CHOICES,
    chips_of,
    rank_of,
    ranked,
    survivors_view,
)
from topomodel.routing.clos.paths import scaleout_paths, supernode_plane_paths
from topomodel.routing.hashing import choose, queue_pairs
from topomodel.routing.structured import structured_supported
from topomodel.traffic.phases import Phase

# --- the oracle: survivors.py's plane routing before it was made faster (main, b50a7a4)


def old_paths(climb, leaf_s, leaf_d):
    empty, none = np.zeros(0, np.int64), np.zeros((0, 0), np.int64)
    if not climb.present:
        return (np.zeros((len(leaf_s), 1), bool), np.zeros(len(leaf_s), bool), empty, empty,
                none, none, none)
    i, k = climb.slot[leaf_s], climb.slot[leaf_d]
    ok = climb.up_alive[i] & climb.down_alive[k]
    cross = climb.group[i] != climb.group[k]
    no_cores = (ok, cross, empty, empty, none, none, none)
    if not cross.any():
        return no_cores
    if not climb.cores:
        ok[cross] = False
        return no_cores
    spine = climb.spines[i[cross]]
    pod = np.searchsorted(climb.pods, climb.group[k[cross]])
    wanted = climb._key(spine, pod[:, None])
    if len(climb.core_up) * len(climb.pods) <= ALL_CORE_CHOICES:
        keys, inverse = np.arange(len(climb.core_up) * len(climb.pods)), wanted
    else:
        keys, inverse = np.unique(wanted, return_inverse=True)
    count, rank, core_up, core_down = climb._choices(keys)
    ok[cross] &= count[inverse.reshape(wanted.shape)] > 0
    return ok, cross, keys, count, rank, core_up, core_down


def old_even(climb, leaf_s, leaf_d, amount, paths):
    ok, cross, keys, count, rank, core_up, core_down = paths
    i, k = climb.slot[leaf_s], climb.slot[leaf_d]
    share = np.where(ok, (amount / np.maximum(ok.sum(axis=1), 1))[:, None], 0.0)
    pieces = [(climb.up_arcs[i], share), (climb.down_arcs[k], share)]
    if not cross.any() or not len(keys):
        return pieces
    pod = np.searchsorted(climb.pods, climb.group[k[cross]])
    at = np.searchsorted(keys, climb._key(climb.spines[i[cross]], pod[:, None]))
    into = np.bincount(at.ravel(), share[cross].ravel(), len(keys))
    used = np.arange(rank.shape[1])[None, :] < count[:, None]
    cores = np.where(used, rank, 0)
    weight = np.where(used, (into / np.maximum(count, 1))[:, None], 0.0)
    rows = np.arange(len(keys))[:, None]
    return [*pieces, (core_up[rows, cores], weight),
            (np.maximum(core_down[rows, cores], 0), weight)]


def old_picked(climb, pair, leaf_s, leaf_d, paths, ids, dst, volume, stride, routing, seed):
    ok, cross, keys, count_, rank_, core_up, core_down = paths
    count = ok.sum(axis=1)[pair]
    at = leaf_s[pair]
    rank = rank_of(routing, seed, ids, at, dst, stride, count, climb.cables)
    col = ranked(ok)[pair, rank]
    i, k = climb.slot[at], climb.slot[leaf_d[pair]]
    pieces = [(climb.up_arcs[i, col], volume), (climb.down_arcs[k, col], volume)]
    far = np.flatnonzero(cross[pair])
    if len(far):
        spine = climb.spines[i[far], col[far]]
        pod = np.searchsorted(climb.pods, climb.group[k[far]])
        row = np.searchsorted(keys, climb._key(spine, pod))
        cores = count_[row]
        rank = rank_of(routing, seed, ids[far], spine, dst[far], stride[far] * count[far],
                     cores, climb.core_cables)
        core = rank_[row, rank]
        pieces += [(core_up[row, core], volume[far]), (core_down[row, core], volume[far])]
    return pieces


def old_planes(view, climb, ids, dst, node, volume, lower_s, lower_d, ok, weights, arcs,
               routing, seed, qps):
    cross = ok & (lower_s != lower_d)
    r, c = np.nonzero(cross)
    nodes = len(view.clos.domain)
    keys = lower_s[r, c].astype(np.int64) * nodes + lower_d[r, c]
    pairs, inverse = np.unique(keys, return_inverse=True)
    pair_s, pair_d = pairs // nodes, pairs % nodes
    paths = old_paths(climb, pair_s, pair_d)
    far = paths[1]
    joined = np.asarray(paths[0].any(axis=1))
    usable = ok.copy()
    usable[r, c] = joined[inverse]
    pair_of = np.full(ok.shape, -1)
    pair_of[r, c] = inverse
    extra = np.zeros(ok.shape, np.int64)
    extra[r, c] = np.where(far[inverse], 4, 2)
    extra = np.where(usable, extra, 0).max(axis=1, initial=0)
    lost = np.asarray(~usable.any(axis=1))
    weights = np.where(usable, weights, 0)
    enter, leave = arcs
    if routing == "ecmp":
        part = weights / np.maximum(weights.sum(axis=1, keepdims=True), 1) * volume[:, None]
        pieces = [(enter, part), (leave, part)]
        amount = np.bincount(inverse, part[r, c], len(pairs))
        if len(pairs):
            pieces += old_even(climb, pair_s, pair_d, amount, paths)
        return pieces, extra, lost, usable
    keep = np.flatnonzero(~lost)
    take, qp_ids, split = queue_pairs(routing, ids[keep], qps)
    row = keep[take]
    pick = choose(routing, seed, qp_ids, node[row], dst[row], np.ones(len(row), np.int64),
                  weights[row])
    part = volume[row] / split
    pieces = [(enter[row, pick], part), (leave[row, pick], part)]
    pair = pair_of[row, pick]
    go = pair >= 0
    if go.any():
        stride = (weights[row[go]] > 0).sum(axis=1) if routing == "dmodk" else np.ones(
            int(go.sum()), np.int64)
        pieces += old_picked(climb, pair[go], pair_s, pair_d, paths, qp_ids[go],
                             dst[row[go]], part[go], stride, routing, seed)
    return pieces, extra, lost, usable


def old_bincounts(n_links, pieces):
    arcs = np.concatenate([a.ravel() for a, _ in pieces])
    weights = np.concatenate([w.ravel() for _, w in pieces])
    if not len(arcs):
        return np.zeros(n_links)
    return np.bincount(arcs, weights, n_links)


def old_supernode_planes(view, phase, flows, routing, seed, qps):
    up = view.clos.scaleup_up
    src, dst = phase.src[flows], phase.dst[flows]
    into, out, ok = chips_of(view, src, dst)
    pieces, extra, lost, usable = old_planes(
        view, view.supernode, flows, dst, src, phase.bytes[flows], view.clos.dst[into],
        view.clos.src[out], ok, up.weights[up.slot[src]], (into, out), routing, seed, qps)
    return old_bincounts(view.clos.n_links, pieces), 2 + extra, lost, usable


def old_scaleout(view, phase, flows, routing, seed, qps):
    clos = view.clos
    access_up, access_down = clos.access_up, clos.access_down
    src, dst, volume = phase.src[flows], phase.dst[flows], phase.bytes[flows]
    host_up, host_down = clos.host_up[src], clos.host_down[dst]
    hosted = view.alive[host_up] & view.alive[host_down]
    nic_s, nic_d = clos.nic_of[src], clos.nic_of[dst]
    ups, downs = access_up.arcs(nic_s), access_down.arcs(nic_d)
    ok = view.alive[ups] & view.alive[downs] & hosted[:, None]
    pieces, extra, lost, _ = old_planes(
        view, view.fat_tree, flows, dst, nic_s, volume, clos.dst[ups], clos.src[downs], ok,
        np.full(ups.shape, access_up.cables), (ups, downs), routing, seed, qps)
    carried = np.where(lost, 0.0, volume)
    pieces += [(host_up, carried), (host_down, carried)]
    return old_bincounts(clos.n_links, pieces), 4 + extra, lost


# --- the fabrics, parts and phases compared

NOT_STRUCTURED = {"asymmetric-sites", "rtx4090-workstation", "small-16x8-a100-100gbe-roce",
                  "small-2x2-a100-1gbe", "small-4x8-l40s-25gbe", "tpu-v4-pod",
                  "hgx-h100-server", "aws-p5en-efa"}
"""The examples without either section: the structured router does not cover them
(PCIe scale-up, a torus, two NICs per accelerator as on p5en), or one server has no
network and no supernode."""
SLOW = {"100k-8gpu-3tier", "100k-8npu-servers"}
"""Run with ``--run-slow`` (~5 s each); the 4K supernodes, the design these sections
were made faster for, and the smaller fat-trees run always."""
RING_FLOWS = 8192
"""Flows of each ring-like phase (from the first accelerators): enough to cross every
plane of a 100k example's first pods, few enough to route four ways in a test."""
STRUCTURED = sorted(p.stem for p in EXAMPLES.glob("*.yaml") if p.stem not in NOT_STRUCTURED)
PART_TIERS = ("spine", "leaf", "core", "scaleup_l2", "scaleup_l3", "nic")
LINK_TIERS = ("scaleup_l2", "scaleup_l3", "spine", "leaf")
TWO_SUPERNODES = ("system: cloudmatrix384-node\nsystems: 192\nscaleup:\n  kind: supernode\n"
                  "  switch: ub-l2\n  uplinks: 16\n  systems_per_domain: 96\n"
                  "scaleout:\n  kind: fat_tree\n  switch: tomahawk5\n  planes: 2\n"
                  "  port_rate: \"200 Gb/s /dir\"\n")
"""Two 96-system supernodes with three switch levels, joined by a two-plane fat-tree."""


def example(name, tmp_dir, example_fabric):
    if name != "two-supernodes":
        return example_fabric(name)  # built once for the run (conftest.py)
    return two_supernodes(tmp_dir)


@functools.cache
def two_supernodes(tmp_dir):
    path = tmp_dir / "two-supernodes.yaml"
    path.write_text(TWO_SUPERNODES)
    return build_fabric(*load_design(path))


def failed_parts(fabric):
    """The first node of each switch and NIC tier and the first link of each upper tier
    (where the ring-like phase runs)."""
    nodes, links = fabric.nodes, fabric.links
    names = nodes["name"].to_numpy()
    tiers = nodes["tier"].astype(str).to_numpy()
    parts = []
    for tier in PART_TIERS:
        members = names[tiers == tier]
        if len(members):
            parts.append(str(members[0]))
    link_tier = links["tier"]  # categorical: compared by code, not as 6.5 M strings
    codes, categories = link_tier.cat.codes.to_numpy(), list(link_tier.cat.categories)
    src, dst = links["src"].to_numpy(), links["dst"].to_numpy()
    for tier in (t for t in LINK_TIERS if t in categories):
        rows = np.flatnonzero((codes == categories.index(tier)) & (src < dst))
        if len(rows):
            row = rows[0]
            parts.append(f"{names[src[row]]} -- {names[dst[row]]}")
    return parts


def phases(fabric):
    """Random pairs, and the first accelerators each to the one a system away and to
    the one a domain away (the ring-like traffic of the step's collectives: nearly
    sorted keys, every plane crossing on an intact fabric)."""
    acc = fabric.accelerators
    n = len(acc)
    ring = np.arange(min(n, RING_FLOWS))
    src, dst = [], []
    for ends in (fabric.nodes["system"].to_numpy(), fabric.nodes["domain"].to_numpy()):
        shift = int((ends[acc] == ends[acc[0]]).sum())  # accelerators of the first one
        if shift < n:
            src.append(acc[ring])
            dst.append(acc[(ring + shift) % n])
    flows = sum(len(s) for s in src)
    return [random_phase(fabric, min(3000, 4 * n), seed=3),
            Phase(np.concatenate(src), np.concatenate(dst), np.linspace(1e5, 3e5, flows),
                  np.zeros(flows, np.int64))]


def sections_of(view, phase):
    """The flows of the supernode section and of the scale-out section, as the router
    around failures picks them."""
    clos = view.clos
    same = (clos.domain[phase.src] == clos.domain[phase.dst]) & (clos.domain[phase.src] >= 0)
    across = clos.system[phase.src] != clos.system[phase.dst]
    far = np.flatnonzero(same & across) if clos.scaleup_up is not None and not clos.mesh \
        else np.zeros(0, np.int64)
    outside = np.flatnonzero(~same) if clos.planes else np.zeros(0, np.int64)
    return far, outside


def same_bits(new, old):
    """Whether each array of ``new`` is that of ``old``: dtype, shape and every bit."""
    def bits(a):
        a = np.ascontiguousarray(a)
        return a.view(f"u{a.dtype.itemsize}")

    return all(a.dtype == b.dtype and a.shape == b.shape and np.array_equal(bits(a), bits(b))
               for a, b in zip(new, old, strict=True))


@pytest.mark.parametrize("name", [
    pytest.param(name, marks=pytest.mark.slow) if name in SLOW else name
    for name in [*STRUCTURED, "two-supernodes"]])
def test_plane_sections_are_the_replaced_code_bit_for_bit(name, tmp_path_factory,
                                                         example_fabric):
    fabric = example(name, tmp_path_factory.getbasetemp(), example_fabric)
    assert structured_supported(fabric) is None
    copies = {"": fabric} | {p: with_part_failed(fabric, p) for p in failed_parts(fabric)}
    compared = 0
    for ph in phases(fabric):
        for part, copy in copies.items():
            view = survivors_view(copy)
            far, outside = sections_of(view, ph)
            for routing, qps in (("ecmp", 1), ("hash", 1), ("hash", 3), ("dmodk", 1)):
                if len(far):
                    new = supernode_plane_paths(view, ph, far, routing, 5, qps)
                    old = old_supernode_planes(view, ph, far, routing, 5, qps)
                    # the hops kept as int8 (SUPERNODE_HOPS_DTYPE): the same values
                    assert new[1].dtype == np.int8 and np.array_equal(new[1], old[1])
                    # the planes used packed, a bit per plane (np.packbits)
                    assert np.array_equal(np.unpackbits(new[3], axis=1,
                                                        count=old[3].shape[1]), old[3])
                    old = (old[0], old[1].astype(np.int8), old[2],
                           np.packbits(old[3], axis=1))
                    assert same_bits(new, old), (part, routing)
                    compared += 1
                if len(outside):
                    new = scaleout_paths(view, ph, outside, routing, 5, qps)
                    old = old_scaleout(view, ph, outside, routing, 5, qps)
                    assert same_bits(new, old), (part, routing)
                    compared += 1
    assert compared


@pytest.mark.parametrize("space", [None, 50, DENSE_KEY_SPACE + 1])
@pytest.mark.parametrize("order", ["random", "nearly sorted", "empty"])
def test_sorted_distinct_is_unique_with_its_inverse(space, order):
    rng = np.random.default_rng(1)
    top = space or 10**12
    keys = rng.integers(0, min(top, 50), 5000) * (top // min(top, 50))
    if order == "nearly sorted":
        keys = np.sort(keys)
        keys[::97] = keys[::-97]
    if order == "empty":
        keys = keys[:0]
    values, inverse = sorted_distinct(keys, space)
    expected, expected_inverse = np.unique(keys, return_inverse=True)
    assert values.dtype == keys.dtype and inverse.dtype == np.int64
    assert np.array_equal(values, expected) and np.array_equal(inverse, expected_inverse)


@pytest.mark.parametrize("routing", ["hash", "dmodk"])
def test_choose_column_by_column_is_the_first_running_sum_past_the_ticket(routing):
    """The hash pick, made a column at a time, is the argmax over the (flows,
    candidates) running sums it replaced: zero cables (absent candidates) and rows with
    none included."""
    from topomodel.routing.hashing import mix

    rng = np.random.default_rng(3)
    weights = rng.integers(0, 4, (5000, 5)) * (rng.random((5000, 5)) < 0.7)
    weights[:50] = 0  # no candidate at all
    flow, node, dst = (rng.integers(0, 10**6, 5000) for _ in range(3))
    with np.errstate(divide="ignore"):
        got = choose(routing, 9, flow, node, dst, np.ones(5000, np.int64), weights)
        if routing == "hash":
            ticket = (mix(9, flow, node) % weights.sum(axis=1).astype(np.uint64)
                      ).astype(np.int64)
            want = np.argmax(np.cumsum(weights, axis=1) > ticket[:, None], axis=1)
            assert np.array_equal(got, want)
    assert got.dtype == np.int64 and ((weights[np.arange(5000), got] > 0)
                                     | (weights.sum(axis=1) == 0)).all()


def test_system_pair_keys_sort_as_the_pairs_themselves(tmp_path_factory, example_fabric):
    """The domain-local keys of (source, destination) system pairs of one domain order
    and group them as ``source x systems + destination`` does, in a smaller space."""
    from topomodel.routing.clos.paths import _pair_keys, _systems

    fabric = example("two-supernodes", tmp_path_factory.getbasetemp(), example_fabric)
    clos = survivors_view(fabric).clos
    up, down = clos.scaleup_up, clos.scaleup_down
    systems = _systems(clos.dst[up.table], clos.src[down.table])
    assert systems is not None
    sys_s, sys_d, count = systems
    key_s, key_d, space = _pair_keys(clos, up.slot, down.slot, systems)
    assert space < count * count
    rows_s, rows_d = np.meshgrid(np.arange(len(sys_s)), np.arange(len(sys_d)))
    rows_s, rows_d = rows_s.ravel(), rows_d.ravel()
    owner_s = np.flatnonzero(up.slot >= 0)[rows_s]
    owner_d = np.flatnonzero(down.slot >= 0)[rows_d]
    one = clos.domain[owner_s] == clos.domain[owner_d]
    rows_s, rows_d = rows_s[one], rows_d[one]
    keys = key_s[rows_s] + key_d[rows_d]
    plain = sys_s[rows_s].astype(np.int64) * count + sys_d[rows_d]
    assert keys.max() < space
    for new, old in zip(sorted_distinct(keys, space), sorted_distinct(plain), strict=True):
        assert len(new) == len(old)
    assert np.array_equal(sorted_distinct(keys, space)[1], sorted_distinct(plain)[1])


@pytest.mark.parametrize("dtype", [np.int8, np.int64, np.float64])
def test_masked_cables_in_reused_blocks_are_np_where(dtype):
    """route_planes' blocks mask their queue pairs' cables into arrays kept from the
    first (largest) block: each block's values and type are ``np.where(usable[row],
    rows, 0)``'s, the mask it replaced, also where the rows are a read-only broadcast."""
    import topomodel.routing.planes as planes

    rng = np.random.default_rng(4)
    usable = rng.random((500, 3)) < 0.6
    weights = rng.integers(1, 5, (500, 3)).astype(dtype)
    spare = []
    for n in (400, 400, 123, 7):
        row = rng.integers(0, 500, n)
        for rows in (weights[row], np.broadcast_to(weights[:1], (n, 3))):
            got = planes._masked(rows, usable, row, spare)
            want = np.where(usable[row], rows, 0)
            assert got.dtype == want.dtype and got.tobytes() == want.tobytes()
    assert len(spare[0]) == 400


def test_leaf_pairs_of_int32_entries_are_those_keyed_by_node(example_fabric):
    """leaf_pairs keys the leaves' rows in int32 (the entries int32 too, as the scale-out
    section gives them): the same pairs, in the same order, and inverse as keying the
    int64 node numbers of every entry."""
    from topomodel.routing.planes import leaf_pairs

    view = survivors_view(example_fabric("dgx-h100-superpod"))
    climb = view.fat_tree
    nodes = len(view.clos.domain)
    leaves = np.flatnonzero(climb.slot >= 0)
    rng = np.random.default_rng(6)
    s, d = rng.choice(leaves, 5000), rng.choice(leaves, 5000)
    keys = s.astype(np.int64) * nodes + d
    pairs, inverse = np.unique(keys, return_inverse=True)
    for a, b in ((s, d), (s.astype(np.int32), d.astype(np.int32))):
        pair_s, pair_d, got = leaf_pairs(climb, a, b, nodes)
        assert same_bits((pair_s, pair_d, got), (pairs // nodes, pairs % nodes, inverse))


@pytest.mark.parametrize("usable", [False, True])
def test_blocks_of_every_flow_are_those_of_the_listed_flows(usable, monkeypatch):
    """route_planes hands _by_blocks no list of kept flows where none is lost: the picks,
    the arcs' bytes and what each block climbs are those of the list of every flow,
    block by block (blocks made small here, so that there are several)."""
    import topomodel.routing.planes as planes

    monkeypatch.setattr(planes, "PICK_BLOCK", 97)
    rng = np.random.default_rng(10)
    n, width = 1000, 3
    ids, node, dst = rng.permutation(5000)[:n], rng.integers(0, 50, n), rng.integers(0, 50, n)
    volume = rng.integers(1, 10**6, n).astype(float)
    weights = rng.integers(1, 3, (n, width))
    mask = rng.random((n, width)) < 0.7 if usable else None
    if mask is not None:  # a kept flow has a usable plane (the others are lost)
        mask[:, 0] |= ~mask.any(axis=1)
    arcs = tuple((rng.integers(0, 10**4, (40, width)), rng.integers(0, 40, n))
                 for _ in range(2))
    runs = []
    for keep in (None, np.arange(n)):
        climbed = []
        pick, pieces = planes._by_blocks(
            "hash", 3, (ids, node, dst, volume, weights, mask), keep, 2, arcs,
            lambda row, chosen, part, out=climbed: out.append((row, chosen.copy(), part)))
        runs.append((pick, pieces, climbed))
    (pick, pieces, climbed), (pick2, pieces2, climbed2) = runs
    assert pick.tobytes() == pick2.tobytes()
    for (rows, amount), (rows2, amount2) in zip(pieces, pieces2, strict=True):
        assert rows.tobytes() == rows2.tobytes() and amount.tobytes() == amount2.tobytes()
    assert len(climbed) == len(climbed2) == -(-n // 97)
    for block, block2 in zip(climbed, climbed2, strict=True):
        assert all(a.tobytes() == b.tobytes() for a, b in zip(block, block2, strict=True))


def test_live_entries_of_an_all_live_view_are_the_gathered_ones(tmp_path_factory,
                                                                example_fabric):
    """The scale-out router reads a broadcast True for the flows' live (flow, plane)
    entries where every host link and NIC arc is live (the intact view), else gathers
    them per flow: the same values either way, with every arc live and with a NIC arc
    and a host link failed."""
    import topomodel.routing.clos.paths as clos_paths
    from topomodel.routing.clos.live import Survivors

    fabric = example("two-supernodes", tmp_path_factory.getbasetemp(), example_fabric)
    clos = survivors_view(fabric).clos
    ph = random_phase(fabric, 3000, seed=4)
    src, dst = ph.src, ph.dst
    slot_s = clos.access_up.slot[clos.nic_of][src]
    slot_d = clos.access_down.slot[clos.nic_of][dst]
    broadcast = []
    for row in [None, clos.access_up.table[slot_s[0], 0], clos.host_down[dst[1]]]:
        alive = np.ones(clos.n_links, bool)
        if row is not None:
            alive[row] = False
        view = Survivors(fabric, alive)
        ok = clos_paths._live_entries(view, src, dst, slot_s, slot_d)
        hosted = alive[clos.host_up[src]] & alive[clos.host_down[dst]]
        gathered = (alive[clos.access_up.table][slot_s] & hosted[:, None]
                    & alive[clos.access_down.table][slot_d])
        assert ok.shape == gathered.shape and np.array_equal(ok, gathered)
        broadcast.append(not any(ok.strides))
        assert gathered.all() == (row is None)
    assert broadcast == [True, False, False]


@pytest.mark.parametrize("planes", [0, 1, 2, 7])
def test_most_per_row_is_the_maximum_over_planes_of_the_gathered_hops(planes):
    """route_planes takes each flow's extra hops a plane's column of leaf-pair indices at
    a time: the maximum over the gathered (flows, planes) hops it replaced, as int64."""
    from topomodel.routing import planes as module

    rng = np.random.default_rng(planes)
    climbed = rng.choice(np.array([0, 2, 4], np.int8), 50)
    at = rng.integers(0, 50, (4000, planes))
    old = module._over_planes(np.maximum, climbed[at], np.zeros(4000, np.int64))
    new = module._most_per_row(climbed, at)
    assert new.dtype == old.dtype and np.array_equal(new, old)
    hops = np.where(rng.random(at.shape) < 0.3, 0, climbed[at]).astype(np.int8)
    old = module._over_planes(np.maximum, hops, np.zeros(4000, np.int64))
    new = module._most_per_row(hops, None)
    assert new.dtype == old.dtype and np.array_equal(new, old)


@pytest.mark.parametrize(("routing", "split"), [("hash", 1), ("hash", 3), ("dmodk", 1),
                                                ("ecmp", 1)])
def test_block_queue_pairs_are_queue_pairs_gathered(routing, split):
    """A block's queue pairs' flows and hash ids, the rows repeated per flow: those of
    queue_pairs and a gather through its index, values and types."""
    from topomodel.routing import planes as module

    rng = np.random.default_rng(split)
    ids = rng.integers(0, 1 << 40, 500)
    flows = np.sort(rng.choice(500, 200, replace=False))
    take, qp_ids, _ = queue_pairs(routing, ids[flows], split)
    row, got = module._block_queue_pairs(routing, ids, flows, split)
    for new, old in ((row, flows[take]), (got, qp_ids)):
        assert new.dtype == old.dtype and np.array_equal(new, old)


@pytest.mark.parametrize("seed", range(4))
def test_spine_shares_are_the_masked_division_bit_for_bit(seed):
    """Each leaf pair's bytes over its usable spines: one share per pair where a pair's
    spines are all usable or none (a plane failed whole), else per spine; either way
    the masked division's values on every spine, bit for bit."""
    from topomodel.routing.clos.live import spine_shares

    rng = np.random.default_rng(seed)
    amount = rng.random(50) * 1e9
    alive = rng.random(50) < 0.7
    for ok in (np.repeat(alive[:, None], 4, axis=1), rng.random((50, 4)) < 0.6,
               np.ones((50, 4), bool)):
        masked = np.where(ok, (amount / np.maximum(ok.sum(axis=1), 1))[:, None], 0.0)
        share = spine_shares(ok, amount)
        whole = (ok.all(axis=1) | ~ok.any(axis=1)).all()
        assert share.ndim == (1 if whole else 2)
        full = np.broadcast_to(share[:, None], ok.shape) if share.ndim == 1 else share
        assert np.array_equal(full.view(np.uint64), masked.view(np.uint64))
