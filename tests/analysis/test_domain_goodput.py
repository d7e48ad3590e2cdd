"""Goodput with failure domains: one interruption per domain failure, spares per domain,
the cause that costs the most time (analysis/reliability/domain_failures.py)."""

import numpy as np
import pytest
from conftest import DUAL_PLANE

from topomodel.analysis.assumptions import GoodputAssumptions
from topomodel.analysis.reliability.domain_failures import (
    domain_lines,
    domain_systems_in_repair,
    downtime_by_line,
)
from topomodel.analysis.reliability.goodput import (
    SECONDS_PER_DAY,
    ComponentLine,
    component_lines,
    goodput,
    poisson_tail,
    with_part_failed,
)
from topomodel.fabric.build import build_fabric
from topomodel.fabric.domains import with_domains_failed
from topomodel.inputs.design import load_design
from topomodel.report.goodput import cause_text, goodput_json

HOUR = 3600.0


@pytest.fixture(scope="module")
def dual():
    return build_fabric(*load_design("dual.yaml", text=DUAL_PLANE))


def _by_kind(lines):
    return {ln.component: ln for ln in lines}


def test_domain_lines_count_the_job_domains_by_hand(dual):
    """32 servers, 4 a rack: the whole job touches 8 racks of 4 servers, 4 feeds of 8,
    2 loops of 16, 2 sites of 16; with two planes a plane degrades, re-routed."""
    lines = _by_kind(domain_lines(dual, 256))
    assert [(k, ln.count, ln.systems) for k, ln in lines.items()] == [
        ("rack", 8, 4), ("power_feed", 4, 8), ("cooling_loop", 2, 16), ("plane", 2, 0),
        ("site", 2, 16)]
    rack = lines["rack"]
    assert rack.interrupts and rack.spares_apart and rack.repair_s == 8 * HOUR
    assert rack.rate_per_s == dual.catalog.entries["rack-default"].rate_per_s
    plane = lines["plane"]
    assert not plane.interrupts and plane.representative == "plane:0"
    assert plane.repair_s == 2 * HOUR
    # a job on the first 8 servers: 2 racks, and one feed, loop and site of 8 servers
    small = _by_kind(domain_lines(dual, 64))
    assert [(k, ln.count, ln.systems) for k, ln in small.items() if k != "plane"] == [
        ("rack", 2, 4), ("power_feed", 1, 8), ("cooling_loop", 1, 8), ("site", 1, 8)]
    # a job inside one server crosses no plane
    assert "plane" not in _by_kind(domain_lines(dual, 8))


def test_domains_add_interruptions_without_double_counting(dual):
    """The parts' lines are the same with or without the domains; each domain adds its
    own rate once per domain of the job, not once per part."""
    lines = component_lines(dual, 256)
    parts = [ln for ln in lines if not ln.is_domain]
    domains = [ln for ln in lines if ln.is_domain]
    assert domains == domain_lines(dual, 256)
    assert len(parts) + len(domains) == len(lines)
    added = sum(ln.failures_per_s for ln in domains if ln.interrupts)
    catalog = dual.catalog.entries
    expected = (8 * catalog["rack-default"].rate_per_s
                + 4 * catalog["power-feed-default"].rate_per_s
                + 2 * catalog["cooling-loop-default"].rate_per_s
                + 2 * catalog["site-tier3"].rate_per_s)
    assert added == pytest.approx(expected)
    kwargs = {"tokens_per_s": 1e6, "accelerators": 256, "accelerators_per_system": 8,
              "parameters": 8e9, "degraded_loss": {},
              "assumptions": GoodputAssumptions(spare_systems=0)}
    both, alone = goodput(lines, **kwargs), goodput(parts, **kwargs)
    assert (both.interruptions_per_day - alone.interruptions_per_day
            == pytest.approx(added * SECONDS_PER_DAY))


def test_a_single_site_leaves_nowhere_apart_for_spares(example_fabric):
    fabric = example_fabric("gb200-nvl72-cluster")
    lines = _by_kind(domain_lines(fabric, fabric.accelerator_count))
    assert lines["rack"].spares_apart and lines["rack"].systems == 1
    assert lines["power_feed"].spares_apart and lines["power_feed"].systems == 4
    # one loop and one site hold all 8 racks: no spare survives them
    assert not lines["cooling_loop"].spares_apart and not lines["site"].spares_apart
    # the only plane stops a job across racks; no spare system helps
    assert lines["plane"].interrupts and not lines["plane"].spares_apart


def _rack(rate_per_s, systems=4, apart=True):
    return ComponentLine("rack", "r", "rack", 4, rate_per_s, True, "r", "assumed",
                         systems=systems, repair_s=8 * HOUR, spares_apart=apart)


def test_domain_downtime_waits_when_too_few_spares_stand_in():
    part = ComponentLine("accelerator", "a", "system", 64, 1e-7, True, "a", "assumed")
    rack, lonely = _rack(1e-7), _rack(1e-7, apart=False)
    lines = [part, rack, lonely]
    restart = 600.0
    mean = 0.3
    # three spares cannot stand in for a rack of four systems: the repair, every time
    few = downtime_by_line(lines, part_downtime_s=700.0, spares=3, in_repair_mean=mean,
                           restart_s=restart)
    assert few == [700.0, restart + 8 * HOUR, restart + 8 * HOUR]
    # six can, unless three or more are already in repair; never for a rack with no
    # domain apart
    six = downtime_by_line(lines, part_downtime_s=700.0, spares=6, in_repair_mean=mean,
                           restart_s=restart)
    assert six[1] == pytest.approx(restart + poisson_tail(3, mean) * 8 * HOUR)
    assert six[2] == restart + 8 * HOUR
    # the systems a rack's repair keeps out join the pool in repair
    assert domain_systems_in_repair(lines) == pytest.approx(2 * 4 * 1e-7 * 4 * 8 * HOUR)


def test_spares_are_sized_to_the_largest_domain():
    """Frequent rack failures (four systems each, apart): the fewest spares that reach
    the target are a whole rack's, not one system's."""
    part = ComponentLine("accelerator", "a", "system", 256, 1e-9, True, "a", "assumed")
    lines = [part, _rack(1.2e-6)]  # 4 racks: 14 % of the time waiting, with no spares
    result = goodput(lines, tokens_per_s=1e6, accelerators=256, accelerators_per_system=8,
                     parameters=8e9, degraded_loss={},
                     assumptions=GoodputAssumptions(spare_systems=0))
    assert result.spares_for_target is not None and result.spares_for_target[0] == 4
    assert next(iter(result.lost_by_cause)) == "rack"
    assert result.dominant_domain is not None and result.dominant_domain[0] == "rack"
    with_rack = goodput(lines, tokens_per_s=1e6, accelerators=256,
                        accelerators_per_system=8, parameters=8e9, degraded_loss={},
                        assumptions=GoodputAssumptions(spare_systems=4))
    three = goodput(lines, tokens_per_s=1e6, accelerators=256, accelerators_per_system=8,
                    parameters=8e9, degraded_loss={},
                    assumptions=GoodputAssumptions(spare_systems=3))
    assert with_rack.effective_time_fraction > three.effective_time_fraction + 0.05


def test_the_effective_time_names_the_domain_that_costs_most(dual):
    lines = component_lines(dual, 256)
    result = goodput(lines, tokens_per_s=1e6, accelerators=256, accelerators_per_system=8,
                     parameters=8e9, degraded_loss={}, assumptions=GoodputAssumptions())
    lost = result.lost_by_cause
    assert list(lost.values()) == sorted(lost.values(), reverse=True)
    kind, share = result.dominant_domain
    assert kind in {"rack", "power_feed", "cooling_loop", "site"} and share > 0
    # the shares lost add up to what the interruptions cost: the checkpointing share
    # less the effective time
    cycle = result.checkpoint_interval_s + result.checkpoint_write_s
    checkpointing = result.checkpoint_interval_s / cycle
    assert sum(lost.values()) == pytest.approx(checkpointing - result.effective_time_fraction)
    text = cause_text(goodput_json(result, GoodputAssumptions()))
    assert text.startswith("; most lost to accelerator failures")
    assert f"of the failure domains to {kind.replace('_', ' ')}" in text


def test_a_plane_line_fails_the_whole_plane(dual):
    failed = with_part_failed(dual, "plane:0").links["failed"].to_numpy()
    assert np.array_equal(failed, with_domains_failed(dual, ["plane:0"]).links["failed"])
