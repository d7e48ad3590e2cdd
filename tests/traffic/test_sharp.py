"""The SHARP plan's array helpers against the pandas group-bys they replace."""

import numpy as np
import pandas as pd
import pytest

from topomodel.traffic.algorithms.sharp import run_sums, runs


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_runs_order_and_count_as_a_group_by(seed):
    """Each row's place in its run of equal keys is pandas' ``cumcount``; the runs come
    in sorted key order, each starting at its first row."""
    rng = np.random.default_rng(seed)
    a, b = rng.integers(0, 6, 400), rng.integers(-1, 3, 400)
    order, starts, run = runs(a, b)
    place = np.empty(len(a), np.int64)
    place[order] = np.arange(len(a))
    frame = pd.DataFrame({"a": a, "b": b})
    assert (place - starts[run]).tolist() == frame.groupby(["a", "b"]).cumcount().tolist()
    firsts = frame.groupby(["a", "b"], sort=True).head(1)
    assert order[starts].tolist() == firsts.sort_values(["a", "b"]).index.tolist()


@pytest.mark.parametrize("seed", [0, 1])
def test_run_sums_are_pandas_group_sums_to_the_bit(seed):
    """The leaf streams' shares: the sum over each (group, leaf)'s portions, as the
    pandas group-by summed them before (#42 item 1), to the bit: runs of up to a dozen
    terms of mixed magnitude, where summing one by one differs in the last bits."""
    rng = np.random.default_rng(seed)
    rows = 3000
    legs = pd.DataFrame({"group": rng.integers(0, 20, rows), "leaf": rng.integers(0, 15, rows),
                         "portion": rng.integers(0, 12, rows),
                         "fraction": rng.random(rows) * 10.0 ** rng.integers(-8, 3, rows)})
    portions = legs.groupby(["group", "leaf", "portion"], sort=True)["fraction"].max()
    expected = portions.groupby(level=["group", "leaf"]).sum().to_numpy()
    _, starts, _ = runs(portions.index.get_level_values("group").to_numpy(),
                        portions.index.get_level_values("leaf").to_numpy())
    got = run_sums(portions.to_numpy(), starts)
    assert got.tobytes() == expected.tobytes()
    one_by_one = np.bincount(np.repeat(np.arange(len(starts)), np.diff(np.r_[starts,
                             len(portions)])), weights=portions.to_numpy())
    assert not np.array_equal(one_by_one, expected)


def test_upward_arc_lookup_keys_do_not_wrap_on_int32_node_ids():
    """Link ends are int32 since the tables narrowed (fabric.tables.index_dtype): the
    lookup's keys ``src * nodes + dst`` pass 2**31 past some 46k nodes and must be made
    in int64, or an arc is missed (or another one found)."""
    from topomodel.traffic.algorithms import sharp

    nodes = 300_000
    src = np.array([250_000, 7], np.int32)
    dst = np.array([250_001, 8], np.int32)
    adjacency = np.sort(src.astype(np.int64) * nodes + dst)
    linked = sharp._linked(adjacency, nodes)
    assert linked(src, dst).tolist() == [True, True]
    assert linked(src, dst[::-1]).tolist() == [False, False]
