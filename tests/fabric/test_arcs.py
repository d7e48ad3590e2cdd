"""The arc index: one stable sort of a fabric's link rows by (src, dst), bit for bit the
sorts it replaces (the failure view's look-up, the named failed links, the general
router's wiring and its reversed graph), on every example and on fabrics with parallel
arcs."""

import dataclasses

import numpy as np
import pandas as pd
import pytest
from test_build import fat_tree
from test_examples import NAMES

from topomodel.fabric.arcs import ArcIndex, arc_index, arcs_by_destination, reversed_index
from topomodel.fabric.failures import failed_links, with_failures
from topomodel.routing import general


def keys_of(fabric, reverse=False):
    src, dst = fabric.links["src"].to_numpy(), fabric.links["dst"].to_numpy()
    if reverse:
        src, dst = dst, src
    return src.astype(np.int64) * len(fabric.nodes) + dst


def with_parallel_arcs(fabric, bundles):
    """``fabric`` with a second copy of the bundles of link rows ``bundles`` (both
    directions, appended at the end). Each original's reverse row is the other
    direction's copy and each copy's the other direction's original: valid reverse
    rows, in which the order of parallel arcs is not the link-row order."""
    links, reverse = fabric.links.copy(), fabric.reverse_rows.copy()
    back = reverse[bundles]
    n, k = len(links), len(bundles)
    copies, back_copies = n + np.arange(k), n + k + np.arange(k)
    reverse = np.concatenate([reverse, back, bundles])
    reverse[bundles], reverse[back] = back_copies, copies
    return dataclasses.replace(fabric.with_frames(
        links=pd.concat([links, links.iloc[np.concatenate([bundles, back])]],
                        ignore_index=True)), reverse_rows=reverse)


@pytest.fixture
def parallel(toy):
    fabric = toy(fat_tree(4, 8, tiers=2))
    bundles = np.flatnonzero((fabric.links["tier"] == "spine").to_numpy())[[0, 3, 5]]
    return with_parallel_arcs(fabric, bundles)


def old_lookup_row(fabric, src, dst):
    """The failure view's look-up as it was (an unstable sort of its own)."""
    keys = keys_of(fabric)
    order = np.argsort(keys)
    keys = keys[order]
    wanted = np.asarray(src, np.int64) * len(fabric.nodes) + np.asarray(dst, np.int64)
    pos = np.clip(np.searchsorted(keys, wanted), 0, len(keys) - 1)
    return np.where(keys[pos] == wanted, order[pos], -1)


@pytest.mark.parametrize("name", NAMES)
def test_the_order_is_the_stable_sort_and_the_reversed_one_comes_from_reverse_rows(
        name, example_fabric):
    fabric = example_fabric(name)
    index = fabric.derived(arc_index)
    keys = keys_of(fabric)
    assert np.array_equal(index.order, np.argsort(keys, kind="stable"))
    assert np.array_equal(index.keys, np.sort(keys)) and not index.parallel
    src, dst = fabric.links["src"].to_numpy(), fabric.links["dst"].to_numpy()
    by_dst = fabric.derived(arcs_by_destination)
    assert np.array_equal(by_dst.order, np.argsort(keys_of(fabric, reverse=True),
                                                   kind="stable"))
    assert np.array_equal(by_dst.keys, np.sort(keys_of(fabric, reverse=True)))
    rng = np.random.default_rng(len(keys))
    rows = rng.integers(0, len(keys), 2000)
    others = rng.integers(0, len(fabric.nodes), (2, 2000))  # mostly no such arc
    for a, b in ((src[rows], dst[rows]), (others[0], others[1])):
        assert np.array_equal(index.row(a, b), old_lookup_row(fabric, a, b))
    assert np.array_equal(index.row(src[rows], dst[rows]), rows)


def test_parallel_arcs_keep_link_row_order(parallel):
    index = parallel.derived(arc_index)
    keys = keys_of(parallel)
    assert index.parallel
    assert np.array_equal(index.order, np.argsort(keys, kind="stable"))
    src, dst = parallel.links["src"].to_numpy(), parallel.links["dst"].to_numpy()
    lowest: dict[int, int] = {}
    for row, key in enumerate(keys.tolist()):
        lowest.setdefault(key, row)
    rows = np.arange(len(keys))
    assert index.row(src, dst).tolist() == [lowest[k] for k in keys.tolist()]
    assert (index.row(src, dst) < rows).sum() == 6  # the copies find the first rows
    start, stop = index.spans(src, dst)
    for row in range(len(keys)):
        assert index.order[start[row]:stop[row]].tolist() == np.flatnonzero(
            keys == keys[row]).tolist()
    # parallel arcs: the reversed order is sorted, as before (the reverse rows would
    # put some parallel arcs out of link-row order)
    assert np.array_equal(src[parallel.reverse_rows], dst)
    assert np.array_equal(dst[parallel.reverse_rows], src)
    by_dst = np.argsort(keys_of(parallel, reverse=True), kind="stable")
    assert np.array_equal(reversed_index(index, src, dst, parallel.reverse_rows).order,
                          by_dst)
    assert not np.array_equal(parallel.reverse_rows[index.order], by_dst)


def test_reverse_rows_that_do_not_reverse_are_not_trusted(toy):
    fabric = toy(fat_tree(4, 8, tiers=2))
    index = fabric.derived(arc_index)
    src, dst = fabric.links["src"].to_numpy(), fabric.links["dst"].to_numpy()
    sorted_order = np.argsort(keys_of(fabric, reverse=True), kind="stable")
    stale = fabric.reverse_rows.copy()
    stale[[0, 1]] = stale[[1, 0]]
    for reverse in (None, stale, fabric.reverse_rows[:-2]):
        assert np.array_equal(reversed_index(index, src, dst, reverse).order, sorted_order)
    assert not np.array_equal(stale[index.order], sorted_order)  # trusted, it would be wrong


def test_random_arcs_with_parallel_ones_sort_stably():
    rng = np.random.default_rng(3)
    src, dst = rng.integers(0, 9, 300), rng.integers(0, 9, 300)
    index = ArcIndex.of(src, dst, 9)
    keys = src * 9 + dst
    assert index.parallel and np.array_equal(index.order, np.argsort(keys, kind="stable"))
    assert np.array_equal(reversed_index(index, src, dst, None).order,
                          np.argsort(dst * 9 + src, kind="stable"))
    assert not index.order.flags.writeable and not index.keys.flags.writeable


@pytest.mark.parametrize("name", ["tpu-v4-pod", "cloudmatrix384", "dgx-h100-superpod",
                                  "100k-8gpu-3tier"])
def test_the_wiring_reads_the_index_and_its_reversed_csr_is_the_sorted_one(name, example_fabric):
    fabric = example_fabric(name)
    check_reversed_csr(fabric)
    wiring = fabric.derived(general._Wiring)
    assert wiring.rows is fabric.derived(arc_index).order


def test_the_wiring_of_a_fabric_with_parallel_arcs_is_the_sorted_one(parallel):
    wiring = check_reversed_csr(parallel)
    assert wiring.parallel_arcs


def check_reversed_csr(fabric):
    """The general router's reversed CSR against the one of a stable sort."""
    wiring = general._Wiring(fabric)
    links, n = fabric.links, len(fabric.nodes)
    src, dst = links["src"].to_numpy(), links["dst"].to_numpy()
    by_dst = np.argsort(keys_of(fabric, reverse=True), kind="stable")
    assert np.array_equal(wiring.rows, np.argsort(keys_of(fabric), kind="stable"))
    inverse = np.empty(len(by_dst), np.int64)
    inverse[by_dst] = np.arange(len(by_dst))
    rows = np.arange(len(by_dst))
    if not wiring.parallel_arcs:  # found by their keys, distinct
        assert np.array_equal(wiring.reverse_entries_of(rows), inverse)
    where = np.empty(len(rows), np.int64)
    where[wiring.rows] = rows
    assert np.array_equal(wiring.arcs_of(rows), where)
    assert np.array_equal(wiring.reverse_indices, src[by_dst])
    assert np.array_equal(wiring.reverse_indptr, np.searchsorted(dst[by_dst], np.arange(n + 1)))
    weight = np.empty(len(src))
    weight[wiring.rows] = wiring.weight
    is_acc = fabric.kind_mask("accelerator")  # the hop costs, as they were summed
    assert np.array_equal(weight, (general.HOP_COST
                                   + general.HOST_LINK_COST
                                   * (links["tier"] == "host").to_numpy().astype(np.int64)
                                   + general.TRANSIT_PENALTY_HOPS
                                   * is_acc[dst].astype(np.int64)).astype(float))
    assert np.array_equal(wiring.reverse_data, weight[by_dst])
    return wiring


@pytest.mark.parametrize("name", ["dgx-h100-superpod", "cloudmatrix384", "tpu-v4-pod",
                                  "parallel"])
def test_named_parts_fail_every_row_of_their_ends_both_ways(name, parallel, example_fabric):
    """Looked up in the fabric's part index, or found by a pass and a sort of their own
    (as at build), the failed rows are those touching a named node or joining the two
    ends of a named link, either way, every parallel row included."""
    from topomodel.fabric.failures import part_index

    fabric = parallel if name == "parallel" else example_fabric(name)
    names = fabric.nodes["name"].to_numpy()
    src, dst = fabric.links["src"].to_numpy(), fabric.links["dst"].to_numpy()
    rng = np.random.default_rng(5)
    rows = rng.integers(0, len(src), 6)
    if name == "parallel":  # a doubled bundle, named from its other end
        rows[0] = np.flatnonzero(fabric.derived(arc_index).row(src, dst)
                                 < np.arange(len(src)))[0]
    links = [f"{names[dst[r]]} -- {names[src[r]]}" for r in rows[:3]] + [
        f"{names[src[r]]} -- {names[dst[r]]}" for r in rows[3:]]
    nodes = rng.choice(len(names), 4, replace=False)
    dead = np.zeros(len(names), bool)
    dead[nodes] = True
    pairs = {(src[r], dst[r]) for r in rows} | {(dst[r], src[r]) for r in rows}
    expected = dead[src] | dead[dst] | np.array(
        [(a, b) in pairs for a, b in zip(src, dst, strict=True)])
    for index in (None, fabric.derived(part_index)):
        mask, problems = failed_links(fabric.nodes, fabric.links, names[nodes].tolist(),
                                      links, index=index)
        assert problems == [] and np.array_equal(mask, expected)
    if name == "parallel":  # the doubled bundle: two rows each way
        keys = keys_of(fabric)
        assert (keys == keys[rows[0]]).sum() == 2 and expected[keys == keys[rows[0]]].all()
    copy = with_failures(fabric, names[nodes].tolist(), links)
    assert np.array_equal(copy.links["failed"].to_numpy(), expected)
    assert copy.derived(part_index) is fabric.derived(part_index)
    assert copy.derived(arc_index) is fabric.derived(arc_index)


@pytest.mark.parametrize("name", ["dgx-h100-superpod", "cloudmatrix384", "parallel"])
def test_the_direct_links_live_arcs_are_the_stable_sort_of_the_live_rows(name, parallel,
                                                                         example_fabric):
    from test_survivors import random_failures

    from topomodel.routing import _arcs

    base = parallel if name == "parallel" else example_fabric(name)
    for fabric in (base, random_failures(base, 1)):
        live = np.flatnonzero(~fabric.links["failed"].to_numpy())
        keys = keys_of(fabric)[live]
        by_key = np.argsort(keys, kind="stable")  # what it sorted before
        arcs = _arcs(fabric)
        assert np.array_equal(arcs.keys, keys[by_key])
        assert np.array_equal(arcs.rows_by_key, live[by_key])
    assert len(live) < len(fabric.links)
