"""Tier loads, hotspots and bisection traffic: conservation and closed forms."""

import numpy as np
import pytest

from topomodel.analysis.collective import run_collective
from topomodel.analysis.loads import (
    bisection_traffic,
    hotspots,
    link_utilization,
    tier_loads,
)
from topomodel.design import load_design
from topomodel.fabric.build import build_fabric


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
