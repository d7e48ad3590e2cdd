"""The link table's node numbers, cable counts and reverse rows and the arc index's
order are int32 (4 bytes a row, not 8: some 125 MiB on the 6.5 M link rows of the 98k
supernodes): every route, failed or not, general or structured, and every key made of
them is bit for bit what the same fabric with int64 columns gives, and the narrowing
falls back to int64 beyond 2**31 - 1 items."""

import dataclasses

import numpy as np
import pytest

from topomodel.fabric.arcs import arc_index, arcs_by_destination
from topomodel.fabric.failures import with_failures
from topomodel.fabric.tables import index_dtype
from topomodel.routing import general, route
from topomodel.traffic.collectives import collective_traffic
from topomodel.traffic.groups import parse_groups

NARROW = ("src", "dst", "cables")


def widened(fabric):
    """``fabric`` with its narrowed columns and reverse rows in int64 (the old types)."""
    links = fabric.link_arrays
    return dataclasses.replace(
        fabric, link_arrays=links.replaced(**{c: links[c].astype(np.int64) for c in NARROW}),
        reverse_rows=fabric.reverse_rows.astype(np.int64))


def test_index_types_hold_every_index_up_to_their_bound():
    assert index_dtype(0) is np.int32 and index_dtype(2**31 - 1) is np.int32
    assert index_dtype(2**31) is np.int64
    # the largest example (98k accelerators) has 6.5 M link rows: 131k some 9 M
    assert index_dtype(300_000_000) is np.int32


@pytest.mark.parametrize("name", ["dgx-h100-superpod", "cloudmatrix384", "dual-plane-ethernet"])
def test_narrow_columns_index_and_route_as_int64_ones(name, example_fabric):
    fabric = example_fabric(name)
    links = fabric.link_arrays
    assert all(links[c].dtype == np.int32 for c in NARROW)
    assert fabric.reverse_rows.dtype == np.int32
    wide = widened(fabric)
    for make in (arc_index, arcs_by_destination):
        narrow_index, wide_index = fabric.derived(make), wide.derived(make)
        assert narrow_index.order.dtype == np.int32
        assert np.array_equal(narrow_index.order, wide_index.order)
        assert np.array_equal(narrow_index.keys, wide_index.keys)
    rows = np.arange(0, len(links), 7)
    narrow_wiring, wide_wiring = general._Wiring(fabric), general._Wiring(wide)
    assert np.array_equal(narrow_wiring.reverse_entries_of(rows),
                          wide_wiring.reverse_entries_of(rows))
    if not narrow_wiring.parallel_arcs:
        assert np.array_equal(narrow_wiring.arcs_of(rows), wide_wiring.arcs_of(rows))
    # a failed switch and link: the failure views, the named links and the routers
    switch = str(fabric.nodes["name"][fabric.kind_mask("switch")].iloc[-1])
    ranks = len(fabric.accelerators)  # groups of up to 32 far apart, every rank in one
    size = max(d for d in range(1, 33) if ranks % d == 0)
    groups = parse_groups(fabric, f"stride:{ranks // size}")
    for parts in ([], [switch]):
        narrow_failed, wide_failed = (with_failures(f, parts, []) for f in (fabric, wide))
        traffic = collective_traffic(narrow_failed, "alltoall", groups, 1e6,
                                     algorithm="direct")
        # the general router where it is quick (cloudmatrix384's supernode: 30 s)
        for router in ("structured",) if name == "cloudmatrix384" else ("general",
                                                                        "structured"):
            for routing in ("ecmp", "hash"):
                try:
                    mine = route(narrow_failed, traffic.phases[0], router=router,
                                 routing=routing)
                except Exception as error:  # a router that does not apply: both refuse
                    with pytest.raises(type(error)):
                        route(wide_failed, traffic.phases[0], router=router, routing=routing)
                    continue
                theirs = route(wide_failed, traffic.phases[0], router=router, routing=routing)
                assert mine.link_bytes.tobytes() == theirs.link_bytes.tobytes()
                assert np.array_equal(mine.hops, theirs.hops)
                assert np.array_equal(mine.unroutable, theirs.unroutable)


@pytest.mark.parametrize("leaves", [1_000, 50_000])  # keys below and past 2**31
def test_leaf_pairs_of_int32_slots_are_those_of_int64_ones(leaves):
    from types import SimpleNamespace

    from topomodel.routing.planes import leaf_pairs

    nodes = 2 * leaves + 7
    rng = np.random.default_rng(5)
    slot = np.full(nodes, -1, np.int32)
    leaf_nodes = np.sort(rng.choice(nodes, leaves, replace=False))
    slot[leaf_nodes] = np.arange(leaves)
    lower_s, lower_d = rng.choice(leaf_nodes, 500), rng.choice(leaf_nodes, 500)
    narrow = leaf_pairs(SimpleNamespace(slot=slot, present=True), lower_s, lower_d, nodes)
    wide = leaf_pairs(SimpleNamespace(slot=slot.astype(np.int64), present=True),
                      lower_s, lower_d, nodes)
    for mine, theirs in zip(narrow, wide, strict=True):
        assert np.array_equal(mine, theirs)
    assert np.array_equal(narrow[0][narrow[2]], lower_s)
    assert np.array_equal(narrow[1][narrow[2]], lower_d)
