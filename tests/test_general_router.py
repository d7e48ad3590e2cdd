"""Faults the general router and what reports it must not let through: unroutable flows
counted (not dropped), the warning that says so, link failures that change the result,
rail groups as defined, and work beyond the router's bound refused up front."""

import json

import numpy as np
import pytest

from topomodel.analysis.timing import TimeModel, time_traffic
from topomodel.cli import main
from topomodel.fabric.failures import with_failures
from topomodel.routing import general
from topomodel.routing.general import check_general_work, general_router_estimate
from topomodel.traffic.collectives import collective_traffic
from topomodel.traffic.groups import parse_groups

DESIGN = "system: toy-box\nsystems: 4\nscaleout:\n  switch: toy-switch-16\n"
LOST = "sys1/acc2"


@pytest.fixture
def cut_off(toy):
    """The toy fabric with one accelerator failed (every link of it), and its alltoall."""
    fabric = with_failures(toy(DESIGN), [LOST], [])
    traffic = collective_traffic(fabric, "alltoall", parse_groups(fabric, "all"), 16e6,
                                 algorithm="direct")
    return fabric, traffic


def test_unroutable_flows_are_counted_and_their_bytes_on_no_link(cut_off):
    fabric, traffic = cut_off
    (phase,) = traffic.phases
    lost = int(np.flatnonzero(fabric.nodes["name"] == LOST)[0])
    expected = np.flatnonzero((phase.src == lost) | (phase.dst == lost))
    assert len(expected) == 2 * 15
    routed = general.route_general(fabric, phase)
    assert routed.unroutable.tolist() == expected.tolist()
    delivered = np.setdiff1d(np.arange(phase.flows), expected)
    assert (routed.hops[delivered] > 0).all()
    # every delivered byte crosses each link of its path once; nothing else is on a link
    assert routed.link_bytes.sum() == pytest.approx(
        (phase.bytes[delivered] * routed.hops[delivered]).sum(), rel=1e-12)
    timing = time_traffic(fabric, traffic, model=TimeModel(pxn=False))
    assert timing.unroutable_flows == 30
    assert timing.unroutable_bytes == pytest.approx(phase.bytes[expected].sum())


def test_route_warns_that_unroutable_flows_were_not_delivered(toy, capsys):
    toy(DESIGN)
    argv = ["route", str(toy.tmp_path / "design.yaml"), "--catalog", str(toy.catalog_path),
            "--collective", "alltoall", "--size", "16 MB", "--algorithm", "direct",
            "--fail", LOST, "--no-pxn"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "warning: 30 flows (" in out and "NOT delivered" in out
    assert main([*argv, "--format", "json"]) == 0
    warnings = json.loads(capsys.readouterr().out)["warnings"]
    assert any(w.startswith("30 flows") and "NOT delivered" in w for w in warnings)


def test_a_failed_link_changes_the_result(toy, capsys):
    fabric = toy(DESIGN)
    names = fabric.nodes["name"].to_numpy()
    links = fabric.links
    row = np.flatnonzero((names[links["src"].to_numpy()] == "sys0/nic0")
                         & (links["tier"] != "host").to_numpy())[0]
    cut = f"{names[links['src'].iloc[row]]} -- {names[links['dst'].iloc[row]]}"
    argv = ["route", str(toy.tmp_path / "design.yaml"), "--catalog", str(toy.catalog_path),
            "--collective", "allreduce", "--size", "64 MB", "--algorithm", "ring",
            "--format", "json"]
    assert main(argv) == 0
    whole = json.loads(capsys.readouterr().out)
    assert main([*argv, "--fail-link", cut]) == 0
    failed = json.loads(capsys.readouterr().out)
    assert "1 failed links; traffic re-routed" in failed["warnings"]
    assert failed["time_s"] > whole["time_s"]
    assert failed["tiers"] != whole["tiers"]


def test_rail_groups_are_one_rank_per_system_with_the_same_local_index(toy):
    fabric = toy("system: toy-box\nsystems: 6\nscaleout:\n  switch: toy-switch-16\n")
    nodes = fabric.nodes
    groups = parse_groups(fabric, "rail")
    local = nodes["local"].to_numpy()
    system = nodes["system"].to_numpy()
    assert len(groups) == 4  # one per accelerator of a system
    for group in groups:
        assert len(set(local[group])) == 1
        assert sorted(system[group]) == list(range(6))
        assert list(group) == sorted(group)  # in rank order
    assert sorted(np.concatenate(groups)) == sorted(fabric.accelerators)
    assert [local[g[0]] for g in groups] == [0, 1, 2, 3]


def test_general_work_beyond_the_bound_is_refused_before_routing(monkeypatch, capsys):
    def never(*args, **kwargs):
        raise AssertionError("routed although refused")

    monkeypatch.setattr("topomodel.routing.route_general", never)
    # the structured router routes around a failed spine now; asked for the general one
    argv = ["route", "examples/dgx-h100-superpod.yaml", "--collective", "alltoall",
            "--size", "64 MiB", "--fail", "spine00", "--algorithm", "pairwise",
            "--router", "general"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "estimated for the general router (1,015 phase(s)" in err[0]
    assert f"bound of {general.GENERAL_ROUTER_MAX_S:,.0f} s" in err[0]


def test_the_estimate_counts_every_phase_and_small_work_runs(cut_off):
    fabric, traffic = cut_off
    (phase,) = traffic.phases
    one = general_router_estimate(fabric, [phase])
    three = general_router_estimate(fabric, [phase] * 3)
    assert 0 < one.time_s < three.time_s < 3 * one.time_s  # DAGs are made once
    assert three.phases == 3 and three.destinations == 16
    check_general_work(fabric, traffic.phases)  # far inside the bound: no error
    hashed = general_router_estimate(fabric, [phase], routing="hash", qps=2)
    assert hashed.peak_bytes > general_router_estimate(fabric, [phase]).peak_bytes
