"""Faults the general router and what reports it must not let through: unroutable flows
counted (not dropped), the warning that says so, link failures that change the result,
rail groups as defined, and work beyond the router's bound refused up front."""

import json

import numpy as np
import pytest

from topomodel.analysis.collectives.timing import TimeModel, time_traffic
from topomodel.cli import main
from topomodel.errors import RoutingError
from topomodel.fabric.failures import with_failures
from topomodel.routing import general, pathcost
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
    timing = time_traffic(fabric, traffic, time_model=TimeModel(pxn=False))
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


def _failed_copies(name, seed):
    """Two copies of one fabric with the same random failures (their own DAG caches)."""
    from test_routing import fabric_of
    from test_survivors import random_failures

    base = fabric_of(name)
    return random_failures(base, seed), random_failures(base, seed)


def _same(a, b):
    return (np.array_equal(a.link_bytes, b.link_bytes) and np.array_equal(a.hops, b.hops)
            and np.array_equal(a.unroutable, b.unroutable))


@pytest.mark.parametrize("name", ["dgx-h100-superpod", "cloudmatrix384", "gb200-nvl72-cluster"])
@pytest.mark.parametrize("seed", [0, 1])
def test_dags_walked_from_the_sources_route_bit_for_bit_as_whole_dags(monkeypatch, name,
                                                                      seed):
    from test_routing import random_phase

    walked, whole = _failed_copies(name, seed)
    for flows in (6, 400):  # a few detours, then flows from many nodes
        ph = random_phase(walked, flows, seed=seed)
        for routing, options in (("ecmp", {}), ("hash", {"qps": 3}), ("dmodk", {})):
            monkeypatch.setattr(general, "DAG_WALK_MAX_SHARE", 1.0)
            a = general.route_general(walked, ph, routing=routing, seed=2, **options)
            monkeypatch.setattr(general, "DAG_WALK_MAX_SHARE", 0.0)
            b = general.route_general(whole, ph, routing=routing, seed=2, **options)
            assert _same(a, b)
    assert all(dag.reach is not None for dag in general._graph(walked)._dags.values())
    assert all(dag.reach is None for dag in general._graph(whole)._dags.values())


def test_a_walk_cut_one_level_short_is_caught(monkeypatch):
    """The bit-for-bit test above fails when the walk misses the arcs into the target."""
    from test_routing import random_phase

    walked, whole = _failed_copies("dgx-h100-superpod", 0)
    ph = random_phase(walked, 6, seed=0)
    reached = general._reached

    def short(graph, dist, seeds):
        arcs, reach = reached(graph, dist, seeds)
        return arcs[dist[graph.dst[arcs]] > 0], reach

    monkeypatch.setattr(general, "_reached", short)
    monkeypatch.setattr(general, "DAG_WALK_MAX_SHARE", 1.0)
    a = general.route_general(walked, ph)
    monkeypatch.setattr(general, "DAG_WALK_MAX_SHARE", 0.0)
    assert not _same(a, general.route_general(whole, ph))


def test_a_walked_dag_grows_to_cover_new_sources():
    from test_routing import random_phase

    fabric, fresh = _failed_copies("dgx-h100-superpod", 1)
    first, second = random_phase(fabric, 3, seed=1), random_phase(fabric, 3, seed=2)
    second = type(second)(second.src, first.dst, second.bytes, second.group, second.steps,
                          second.label, second.messages_per_step)
    general.route_general(fabric, first)
    again = general.route_general(fabric, second)  # the same targets, other sources
    assert _same(again, general.route_general(fresh, second))
    graph = general._graph(fabric)
    for target in np.unique(first.dst).tolist():
        assert graph._dags[target].reach[first.src[first.dst == target]].all()
        assert graph._dags[target].reach[second.src[second.dst == target]].all()


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_failed_copy_shares_the_wiring_and_its_distances_are_those_without_the_arcs(seed):
    import scipy.sparse as sp
    from scipy.sparse.csgraph import dijkstra
    from test_routing import fabric_of
    from test_survivors import random_failures

    base = fabric_of("cloudmatrix384")
    copy = random_failures(base, seed)
    wiring = base.derived(general._Wiring)
    assert copy.derived(general._Wiring) is wiring and not wiring.parallel_arcs
    graph = general._graph(copy)
    live = np.isfinite(graph.weight)
    assert graph.live_arcs == live.sum() < len(live)
    assert np.array_equal(np.sort(graph.rows[live]),
                          np.flatnonzero(~copy.links["failed"].to_numpy()))
    alone = sp.csr_matrix((graph.weight[live], (graph.dst[live], graph.src[live])),
                          shape=(graph.n, graph.n))
    targets = copy.accelerators[::97]
    assert np.array_equal(graph.distances_to(targets), dijkstra(alone, indices=targets))


def test_hops_are_read_off_path_costs_only_below_the_readable_bound(toy, monkeypatch):
    """A destination's DAG levels bound its flows' hops; at READABLE_HOPS levels or more
    the router refuses instead of reading hops that a host link's cost would swallow."""
    fabric = toy(DESIGN)
    (phase,) = collective_traffic(fabric, "alltoall", parse_groups(fabric, "all"), 16e6,
                                  algorithm="direct").phases
    routed = general.route_general(fabric, phase)
    graph = general._graph(fabric)
    targets, where = np.unique(phase.dst, return_inverse=True)
    levels = np.array([len(dag.bounds) + 1 for dag in graph.dags(targets)])
    assert (routed.hops > 0).all() and (routed.hops <= levels[where]).all()
    assert pathcost.READABLE_HOPS == general.HOST_LINK_COST // general.HOP_COST == 2500
    monkeypatch.setattr(pathcost, "READABLE_HOPS", int(levels.max()))
    with pytest.raises(RoutingError, match="hops or more"):
        general.route_general(fabric, phase)
    monkeypatch.setattr(pathcost, "READABLE_HOPS", int(levels.max()) + 1)
    again = general.route_general(fabric, phase)
    assert np.array_equal(again.hops, routed.hops)
