"""The scale-out section patched from the intact one is, bit for bit, the section routed
whole on the copy, under hash routing on a two-plane three-tier fat-tree, intact and with
a part of each kind failed; the rules that refuse a patch are needed."""

import functools

import numpy as np
import pytest
from conftest import patched_and_whole_routes
from test_routing import random_phase

import topomodel.routing.plane_patch as patch
import topomodel.routing.sections as sections
from topomodel.analysis.reliability.goodput import with_part_failed
from topomodel.fabric.build import build_fabric
from topomodel.fabric.failures import with_failures
from topomodel.inputs.design import load_design
from topomodel.routing import route

# 32 eight-GPU servers under two planes of three tiers (four pods each: 16 leaves, 64
# spines and 16 cores per plane, spine j of each pod to core j), so flows cross leaves,
# pods and cores
TWO_PLANES = ("system: hgx-h200\nsystems: 32\nscaleout:\n  kind: fat_tree\n"
              "  switch: tomahawk5\n  planes: 2\n  port_rate: \"200 Gb/s /dir\"\n"
              "  tiers: 3\n  pod_units: 4\n")

IN_PLANE = ["p0/pod0/spine00", "p1/core15", "p0/leaf00 -- p0/pod0/spine00",
            "p1/pod1/spine03 -- p1/core03"]
"""A part of each kind inside one plane: a spine, a core, a leaf - spine and a spine -
core link (each patched)."""
OTHERS = ["p0/leaf03", "sys00/nic0 -- p0/leaf00", "sys01/acc2 -- sys01/nic2",
          "plane:1"]
"""Parts that change flows' planes: a leaf, a NIC - leaf link, a host link, a plane
(each routed whole)."""


@functools.cache
def two_planes(tmp_dir):
    path = tmp_dir / "two-planes.yaml"
    path.write_text(TWO_PLANES)
    return build_fabric(*load_design(path))


@pytest.fixture
def fabric(tmp_path_factory):
    fabric = two_planes(tmp_path_factory.getbasetemp())
    fabric.derived(sections.kept_sections).clear()
    return fabric


def patched_and_whole(fabric, parts, phase, monkeypatch, routing="hash"):
    """Each copy's routed phase with the patch, then with every section routed whole
    (the kept sections cleared before each); and which copies were patched."""
    return patched_and_whole_routes(
        monkeypatch, patch, "patched_scaleout", fabric, parts,
        lambda p: route(failed(fabric, p), phase, routing=routing, seed=3))


def failed(fabric, part):
    """``fabric`` with ``part`` failed: a part's name, or a list of links."""
    if isinstance(part, list):
        return with_failures(fabric, (), part)
    return with_part_failed(fabric, part)


def same(a, b):
    return (np.array_equal(a.link_bytes, b.link_bytes) and np.array_equal(a.hops, b.hops)
            and np.array_equal(a.unroutable, b.unroutable))


def test_the_parts_are_the_fabrics(fabric):
    """The parts named above exist (a renamed part would fail nothing)."""
    for part in IN_PLANE + OTHERS:
        assert with_part_failed(fabric, part).link_arrays["failed"].any(), part


def test_patched_plane_section_is_the_whole_one_bit_for_bit(fabric, monkeypatch):
    phase = random_phase(fabric, 4000, seed=6)
    parts = IN_PLANE + OTHERS
    patched, whole, applied = patched_and_whole(fabric, parts, phase, monkeypatch)
    for part, a, b in zip(parts, patched, whole, strict=True):
        assert same(a, b), part
    # a failed leaf's flows detour, so its copy routes the section more than once
    assert applied[:len(IN_PLANE)] == [True] * len(IN_PLANE)
    assert not any(applied[len(IN_PLANE):])
    # the intact fabric routes no section around failures; routed as a copy would be,
    # the section is the kept one
    intact = route(fabric, phase, routing="hash", seed=3)
    assert np.array_equal(intact.hops, whole[0].hops)


def test_patched_queue_pairs_in_blocks_are_the_whole_section_bit_for_bit(fabric,
                                                                         monkeypatch):
    """The patch routes the failed planes' queue pairs again in blocks (each block's
    bytes added in queue-pair order, its pairs looked up among the section's): with
    blocks of 97 queue pairs, every in-plane failure's copy is still the section routed
    whole, bit for bit."""
    phase = random_phase(fabric, 4000, seed=6)
    monkeypatch.setattr(patch, "BLOCK", 97)
    patched, whole, applied = patched_and_whole(fabric, IN_PLANE, phase, monkeypatch)
    assert applied == [True] * len(IN_PLANE) and phase.flows > 10 * 97
    for part, a, b in zip(IN_PLANE, patched, whole, strict=True):
        assert same(a, b), part


def test_ecmp_and_dmodk_route_whole(fabric, monkeypatch):
    phase = random_phase(fabric, 1000, seed=7)
    for routing in ("ecmp", "dmodk"):
        patched, whole, applied = patched_and_whole(fabric, IN_PLANE[:1], phase,
                                                    monkeypatch, routing)
        assert not any(applied) and same(patched[0], whole[0])


def test_a_leaf_pair_cut_apart_is_routed_whole(fabric, monkeypatch):
    """Fail every uplink of one leaf: its leaf pairs in that plane lose their paths, so
    flows from it move to the other plane. The patch refuses it; forced to accept (the
    leaf pair check dropped), it gives other loads than routing the section whole."""
    names = fabric.nodes["name"].to_numpy()
    links = fabric.links
    leaf = fabric.node_number("p0/leaf05")
    up = np.flatnonzero((links["src"].to_numpy() == leaf)
                        & (links["tier"] == "spine").to_numpy())
    cut = [f"{names[leaf]} -- {names[links['dst'].iat[r]]}" for r in up]
    phase = random_phase(fabric, 4000, seed=6)

    def routed(forced):
        fabric.derived(sections.kept_sections).clear()
        with monkeypatch.context() as m:
            if forced:  # (a spine hash over no usable spine then divides by zero)
                m.setattr(patch, "_joined", lambda climb, s, d: np.ones(len(s), bool))
            with np.errstate(divide="ignore"):
                return patched_and_whole(fabric, [cut], phase, monkeypatch)

    patched, whole, applied = routed(False)
    assert applied == [False] and same(patched[0], whole[0])
    patched, whole, applied = routed(True)
    assert applied == [True] and not same(patched[0], whole[0])


def test_a_patch_routes_the_section_intact_once(fabric, monkeypatch):
    """Across every patched copy the section is routed with every arc live once (the
    kept intact section), and each copy routes again only the queue pairs on the
    failed plane (about half of them on two planes)."""
    phase = random_phase(fabric, 4000, seed=6)
    intact_routes, again = [], []
    whole, picked = patch.scaleout_chosen, patch._picked_again

    def counted_whole(view, *args, **kwargs):
        intact_routes.extend([True] if view.alive.all() else [])
        return whole(view, *args, **kwargs)

    def counted_again(view, phase, flows, qp, *args, **kwargs):
        again.append(len(qp))
        return picked(view, phase, flows, qp, *args, **kwargs)

    monkeypatch.setattr(patch, "scaleout_chosen", counted_whole)
    monkeypatch.setattr(patch, "_picked_again", counted_again)
    for part in IN_PLANE:
        route(with_part_failed(fabric, part), phase, routing="hash", seed=3)
    assert len(intact_routes) == 1 and len(again) == len(IN_PLANE)
    queue_pairs = 2 * phase.flows
    assert all(0.3 * queue_pairs < n < 0.7 * queue_pairs for n in again)


@pytest.mark.parametrize(("nodes", "edges"), [(50, 30), (1000, 800), (1000, 3000), (5, 0)])
def test_components_are_scipys(nodes, edges):
    import scipy.sparse as sp
    from scipy.sparse.csgraph import connected_components

    rng = np.random.default_rng(nodes + edges)
    src, dst = rng.integers(0, nodes, edges), rng.integers(0, nodes, edges)
    label = patch._connected(src, dst, nodes)
    _, theirs = connected_components(sp.coo_array((np.ones(edges), (src, dst)),
                                                  shape=(nodes, nodes)), directed=False)
    # the same partition: each of our labels is one of theirs and the other way round
    assert len(set(zip(label.tolist(), theirs.tolist(), strict=True))) == len(set(label)) == (
        len(set(theirs)))
    assert (label <= np.arange(nodes)).all()  # each labelled by its lowest node


@pytest.mark.parametrize("routing", ["hash", "dmodk"])
def test_queue_pairs_in_blocks_are_one_pass_bit_for_bit(fabric, monkeypatch, routing):
    """route_planes picks and sums its queue pairs in blocks of flows: blocks of 97
    flows give every copy the bytes, hops and lost flows of one block over them all."""
    import topomodel.routing.planes as planes

    phase = random_phase(fabric, 3000, seed=8)
    parts = ["", *IN_PLANE, *OTHERS]

    def routed():
        fabric.derived(sections.kept_sections).clear()
        return [route(failed(fabric, p), phase, routing=routing, seed=5) for p in parts]

    one = routed()
    monkeypatch.setattr(planes, "PICK_BLOCK", 97)
    blocks = routed()
    assert phase.flows > 10 * 97
    for part, a, b in zip(parts, one, blocks, strict=True):
        assert same(a, b), part


@pytest.mark.parametrize("routing", ["hash", "dmodk"])
def test_climb_in_blocks_is_one_pick_bit_for_bit(fabric, routing):
    """route_planes sends each block's queue pairs up their spines and cores on its own
    (the per-pair tables kept on the paths, the bytes added by ``np.add.at`` in
    queue-pair order): the same bytes on every link as one ``picked`` over every queue
    pair summed by ``link_bytes``, with a spine failed (pairs with fewer spines)."""
    from topomodel.routing.clos.live import survivors_view
    from topomodel.routing.pieces import Rows, link_bytes
    from topomodel.routing.planes import leaf_pairs

    copy = failed(fabric, "p0/pod0/spine00")
    view = survivors_view(copy)
    climb = view.fat_tree
    plane = patch._plane_components(copy).node
    rng = np.random.default_rng(3)
    leaves = np.flatnonzero(climb.slot >= 0)
    s, d = rng.choice(leaves, 4000), rng.choice(leaves, 4000)
    keep = (s != d) & (plane[s] == plane[d])
    pair_s, pair_d, pair = leaf_pairs(climb, s[keep], d[keep], len(view.clos.domain))
    paths = climb.paths(pair_s, pair_d)
    assert not paths.ok.all() and paths.cross.any() and len(pair) > 1000
    ids = rng.permutation(len(pair)).astype(np.int64) * 3
    dst = rng.integers(0, len(view.clos.domain), len(pair))
    volume = rng.random(len(pair)) * 1e6
    stride = np.full(len(pair), 2, np.int64)
    whole = link_bytes(view.clos.n_links, climb.picked(pair, pair_s, pair_d, paths, ids,
                                                       dst, volume, stride, routing, 5))
    blocked = np.zeros(view.clos.n_links)
    for lo in range(0, len(pair), 97):
        part = slice(lo, lo + 97)
        for piece in climb.picked(pair[part], pair_s, pair_d, paths, ids[part], dst[part],
                                  volume[part], stride[part], routing, 5):
            rows, amount = piece.plain() if isinstance(piece, Rows) else piece
            np.add.at(blocked, rows, amount)
    assert whole.tobytes() == blocked.tobytes()


@pytest.mark.parametrize("columns", [1, 2, 5])
def test_first_columns_are_the_arg_max_of_each_queue_pairs_comparison(columns):
    """The patch looks up a queue pair's column of its component in a (rows,
    components) table: the same column as the arg-max over the row's entries it
    replaced, with components repeated, missing (-1) and absent from a row."""
    rng = np.random.default_rng(columns)
    entry = rng.integers(-1, 4, (300, columns))
    table = patch.first_columns(entry, 4)
    row, comp = rng.integers(0, 300, 5000), rng.integers(0, 4, 5000)
    assert np.array_equal(table[row, comp], np.argmax(entry[row] == comp[:, None], axis=1))


@pytest.mark.parametrize("routing", ["hash", "ecmp", "dmodk"])
@pytest.mark.parametrize("plane", ["plane:0", "plane:1"])
def test_a_failed_plane_routed_over_the_others_alone_is_the_masked_route(
        fabric, monkeypatch, routing, plane):
    """A whole plane failed: the flows routed over the live planes' columns alone
    (:attr:`~topomodel.routing.clos.live.Survivors.live_planes`) give the loads, hops
    and lost flows of routing over every column with the failed one masked, bit for
    bit, under each routing; the planes picked are the tables' columns."""
    from topomodel.routing.clos import live
    from topomodel.routing.clos.paths import scaleout_chosen

    phase = random_phase(fabric, 4000, seed=6)
    copy = failed(fabric, plane)
    view = live.survivors_view(copy)
    assert view.live_planes is not None and len(view.live_planes) == 1
    flows = np.flatnonzero(view.clos.domain[phase.src] != view.clos.domain[phase.dst])
    fast = route(copy, phase, routing=routing, seed=3)
    fast_chosen = scaleout_chosen(view, phase, flows, routing, 3, 2)
    monkeypatch.setattr(live.Survivors, "live_planes", property(lambda self: None))
    masked = route(failed(fabric, plane), phase, routing=routing, seed=3)
    masked_chosen = scaleout_chosen(live.survivors_view(failed(fabric, plane)), phase,
                                    flows, routing, 3, 2)
    assert same(fast, masked) and fast.link_bytes.any()
    for a, b in zip(fast_chosen[:3], masked_chosen[:3], strict=True):
        assert np.array_equal(a, b)
    if routing == "hash":
        assert np.array_equal(fast_chosen[3].pick, masked_chosen[3].pick)
        assert set(np.unique(fast_chosen[3].pick)) == {1 - int(plane[-1])}


def test_the_intact_router_reads_a_kept_scaleout_section_where_sums_are_exact(
        fabric, monkeypatch):
    """Once a copy keeps the intact scale-out section (its first degraded step), the
    router on the intact fabric reads it instead of routing the scale-out again, under
    hash routing with whole bytes per queue pair (every sum exact): the same loads and
    hops bit for bit; with fractional bytes it routes them itself."""
    import topomodel.routing.structured as structured
    from topomodel.traffic.phases import Phase

    base = random_phase(fabric, 4000, seed=6)
    whole = Phase(base.src, base.dst, np.round(base.bytes * 1e3) * 2, base.group)
    fresh = {p: route(fabric, p, routing="hash", seed=3) for p in (whole, base)}
    for p in (whole, base):  # an in-plane part failed: the intact section kept
        route(failed(fabric, IN_PLANE[0]), p, routing="hash", seed=3)
    calls = []
    own = structured._route_scaleout
    monkeypatch.setattr(structured, "_route_scaleout",
                        lambda *a: calls.append(1) or own(*a))
    for p, routed_again in ((whole, 0), (base, 1)):
        again = route(fabric, p, routing="hash", seed=3)
        assert same(again, fresh[p]) and again.link_bytes.any()
        assert np.array_equal(again.link_bytes.view(np.uint64),
                              fresh[p].link_bytes.view(np.uint64))
        assert len(calls) == routed_again
