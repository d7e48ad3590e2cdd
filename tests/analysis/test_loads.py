"""Tier loads, hotspots and bisection traffic: conservation and closed forms."""

import numpy as np
import pytest
from conftest import with_sharp

from topomodel.analysis.collectives.collective import run_collective
from topomodel.analysis.collectives.loads import (
    bisection_traffic,
    hotspots,
    link_utilization,
    node_sides,
    tier_loads,
)
from topomodel.fabric.build import build_fabric
from topomodel.inputs.design import load_design


@pytest.fixture(scope="module")
def superpod():
    return build_fabric(*load_design("examples/dgx-h100-superpod.yaml"))


def test_tier_loads_conserve_the_bytes_on_links(superpod):
    run = run_collective(superpod, "allreduce", 2**28, ["rail"], algorithm="ring")
    loads = tier_loads(superpod, run.timing)
    assert sum(t.bytes for t in loads) == pytest.approx(run.timing.link_bytes.sum())
    assert sum(t.time_share for t in loads) == pytest.approx(1.0)
    # a rail ring of 127 nodes crosses host, leaf and spine links; its busiest link
    # is busy for the whole bandwidth time
    util = link_utilization(run.timing)
    assert max(t.peak_utilization for t in loads) == pytest.approx(util.max())
    assert {t.name for t in loads if t.bytes > 0} >= {"host", "leaf"}
    capacity = superpod.links.groupby("tier", observed=True)["capacity_Bps"].sum() / 2
    for t in loads:
        assert t.capacity_Bps == pytest.approx(capacity[t.name])


def test_hotspots_are_the_busiest_links_in_order(superpod):
    run = run_collective(superpod, "alltoall", 2**26, ["block:8", "rail"],
                         algorithm="direct")
    top = hotspots(superpod, run, 5)
    util = link_utilization(run.timing)
    assert [h.utilization for h in top] == pytest.approx(sorted(util, reverse=True)[:5])
    assert all(set(h.groups) <= {"block:8", "rail"} and h.groups for h in top)
    assert hotspots(superpod, run, 0) == []


def test_bisection_traffic_of_a_ring_over_everyone(superpod):
    size = 2**30
    run = run_collective(superpod, "allreduce", size, ["all"], algorithm="ring")
    cross = bisection_traffic(superpod, run.traffic)
    assert cross is not None
    # a ring over all ranks crosses the cut twice per step, each time with S/n bytes:
    # 2 (n-1) steps x 2 crossings x S/n, split over the two directions
    n = superpod.accelerator_count
    assert cross.bytes == pytest.approx(2 * (n - 1) * 2 * size / n / 2, rel=0.02)
    assert cross.time_s == pytest.approx(cross.bytes / cross.capacity_Bps)
    assert np.isfinite(cross.capacity_Bps) and cross.capacity_Bps > 0


def test_in_network_flows_cross_the_bisection_only_between_sides(superpod):
    superpod = with_sharp(superpod)
    """NVLS and SHARP flows run between an accelerator and its own switch chip or NIC, or
    a scale-out switch: none of them crosses between the halves (before, every flow from
    side A to a switch was counted, 1.125 GiB per GPU, and the bound exceeded the
    collective's own time). NVLS-tree crosses as the tree does across nodes."""
    size = 2**30
    sides = node_sides(superpod)
    assert set(sides[superpod.accelerators]) == {0, 1}
    assert (sides[superpod.nodes["tier"] == "spine"] == -1).all()
    for group in ("domain", "all"):
        run = run_collective(superpod, "allreduce", size, [group], algorithm="innetwork")
        cross = bisection_traffic(superpod, run.traffic)
        assert cross is not None and cross.bytes == 0 and cross.time_s <= run.time_s
    nvls = run_collective(superpod, "allreduce", size, ["all"], algorithm="nvlstree")
    tree = run_collective(superpod, "allreduce", size, ["all"], algorithm="tree")
    nvls_cross, tree_cross = (bisection_traffic(superpod, r.traffic) for r in (nvls, tree))
    assert nvls_cross is not None and tree_cross is not None
    assert nvls_cross.bytes == pytest.approx(tree_cross.bytes)
    assert nvls_cross.time_s < nvls.time_s


@pytest.mark.parametrize(("collective", "groups", "algorithm"), [
    ("allreduce", ["rail"], "ring"), ("allreduce", ["all"], "tree"),
    ("allreduce", ["all"], "hierarchical"), ("allgather", ["domain"], "ring"),
    ("alltoall", ["block:8", "rail"], "direct"), ("sendrecv", ["all"], "p2p")])
def test_the_peak_busy_time_is_the_dense_arrays_peak_bit_for_bit(superpod, collective,
                                                                   groups, algorithm):
    run = run_collective(superpod, collective, 2**26, groups, algorithm=algorithm)
    fresh = run_collective(superpod, collective, 2**26, groups, algorithm=algorithm).timing
    peak = fresh.peak_busy_s  # before the dense array is made
    sparse = "link_busy_s" not in vars(fresh)
    assert peak == run.timing.link_busy_s.max(initial=0.0) > 0
    assert fresh.peak_busy_s == peak  # and after it, read from it
    loaded = [p.route for p in fresh.phases if p.route.has_loaded]
    # the loaded rows alone where every phase loads the same ones, else the dense array
    assert sparse == all(r.loads_rows_of(loaded[0]) for r in loaded)


@pytest.mark.parametrize("block_rows", [3, 1 << 16])
def test_the_peak_of_phases_on_the_same_rows_is_summed_block_by_block(superpod,
                                                                      monkeypatch,
                                                                      block_rows):
    """Phases of the same flows load the same rows: their busy times are summed a
    block of rows at a time, the peak bit for bit the dense array's."""
    from topomodel.analysis.collectives import routes, timing
    from topomodel.traffic.phases import Traffic, phase

    monkeypatch.setattr(routes, "TIME_BLOCK_ROWS", block_rows)
    monkeypatch.setattr(timing, "TIME_BLOCK_ROWS", block_rows)
    acc = superpod.accelerators
    src, dst = acc[::8][:64], acc[::8][1:65]  # across systems: host, leaf, spine rows
    fresh = timing.time_traffic(superpod, Traffic((phase(src, dst, 1e6, steps=3),
                                                   phase(src, dst, 3e6, steps=2))))
    loaded = [p for p in fresh.phases if p.route.has_loaded]
    assert len(loaded) > 1 and all(p.route.loads_rows_of(loaded[0].route) for p in loaded)
    peak = fresh.peak_busy_s
    assert "link_busy_s" not in vars(fresh)
    assert peak == fresh.link_busy_s.max() > 0


def test_phases_on_different_rows_take_the_peak_from_the_dense_array(superpod):
    from topomodel.analysis.collectives.timing import time_traffic
    from topomodel.traffic.phases import Traffic, phase

    acc = superpod.accelerators
    # two phases, one inside a system and one across systems, the second one's rows
    # overlapping the first's on the source's links
    traffic = Traffic((phase(acc[:4], acc[4:8], 1e6, steps=3),
                       phase(acc[:4], acc[8:12], 3e6, steps=2)))
    timing = time_traffic(superpod, traffic)
    peak = timing.peak_busy_s
    assert "link_busy_s" in vars(timing)
    assert peak == timing.link_busy_s.max() > 0


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("idle", [0.0, 0.5, 0.999])
def test_busiest_rows_are_a_stable_sort_of_every_row(seed, idle):
    """Top rows by partition equal the first rows of a stable sort, ties (few distinct
    values) and idle rows (zeros, more of them than the rows asked for) included."""
    from topomodel.analysis.collectives.loads import busiest_rows

    rng = np.random.default_rng(seed)
    values = rng.integers(1, 6, 2_000) / 4.0
    values[rng.random(len(values)) < idle] = 0.0
    for count in (1, 3, 10, 200, len(values)):
        expected = np.argsort(-values, kind="stable")[:count]
        assert busiest_rows(values, count).tolist() == expected.tolist()
