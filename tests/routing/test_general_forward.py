"""The general router's DAGs from forward searches (topomodel.routing.forward) against
the searches towards each destination: loads, hops and unroutable flows the same bit for
bit, on the detours a failed NIC sends on the 8-NPU, supernode and 8-GPU examples, under
ECMP and hash routing, for an All-to-All, an AllReduce and a training step."""

import numpy as np
import pytest
from test_routing import fabric_of

import topomodel.routing.survivors as survivors
from topomodel.analysis.collectives.collective import run_collective
from topomodel.analysis.reliability.goodput import with_part_failed
from topomodel.analysis.training.step import StepAssumptions, step_time
from topomodel.fabric.build import build_fabric
from topomodel.inputs.design import load_design
from topomodel.inputs.parts import Model
from topomodel.routing import general
from topomodel.routing.forward import on_paths, pair_cover
from topomodel.traffic.layout import Layout
from topomodel.traffic.phases import Phase, phase

SCALEOUT = """scaleout:
  kind: fat_tree
  switch: tomahawk5
  planes: 2
  port_rate: "200 Gb/s /dir"
  rail_optimized: true
"""
SMALL_DESIGNS = {  # the 98k NPU examples' designs at 256 NPUs
    "8-npu-servers": "system: cloudmatrix384-node\nsystems: 32\n" + SCALEOUT,
    "supernodes": ("system: cloudmatrix384-node\nsystems: 32\nscaleup:\n  kind: supernode\n"
                   "  switch: ub-l2\n  uplinks: 16\n  systems_per_domain: 8\n" + SCALEOUT)}


@pytest.fixture(scope="module")
def fabrics(tmp_path_factory):
    """The small examples by name, built once: the supernode and 8-GPU examples and the
    98k NPU examples' designs at 256 NPUs (four supernodes of 64; 8-NPU servers)."""
    built = {name: fabric_of(name) for name in ("cloudmatrix384", "dgx-h100-superpod")}
    for name, text in SMALL_DESIGNS.items():
        path = tmp_path_factory.mktemp(name) / "design.yaml"
        path.write_text(text)
        built[name] = build_fabric(*load_design(path))
    return built


@pytest.fixture
def recorded(monkeypatch):
    """Every detour the router around failures hands the general router (its result),
    and how many forward searches ran."""
    detours, searches = [], []
    routed = survivors.route_general
    searched = general._Graph.distances_from

    def route_general(*args, **kwargs):
        detours.append(out := routed(*args, **kwargs))
        return out

    def distances_from(graph, sources):
        searches.append(len(sources))
        return searched(graph, sources)

    monkeypatch.setattr(survivors, "route_general", route_general)
    monkeypatch.setattr(general._Graph, "distances_from", distances_from)
    return detours, searches


def _same_bits(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        assert np.array_equal(x.link_bytes, y.link_bytes)
        assert np.array_equal(x.hops, y.hops)
        assert np.array_equal(x.unroutable, y.unroutable)


def _both_ways(monkeypatch, recorded, run):
    """``run(failed copy)`` with forward searches and without (each on its own copy, so
    with its own DAG cache): the detours' results, which must be the same bit for bit,
    and the forward searches made."""
    detours, searches = recorded
    outcomes = []
    for forward in (True, False):
        monkeypatch.setattr(general, "FORWARD_SEARCHES", forward)
        detours.clear()
        searches.clear()
        result = run()
        outcomes.append((list(detours), result, sum(searches)))
    (fast, fast_result, made), (oracle, oracle_result, none) = outcomes
    assert none == 0  # the oracle searched towards destinations only
    _same_bits(fast, oracle)
    assert fast_result == oracle_result
    return made


CASES = [  # (fabric, routing, whether ECMP's detours reach the general router)
    ("8-npu-servers", "ecmp", False), ("8-npu-servers", "hash", True),
    ("supernodes", "ecmp", True), ("supernodes", "hash", True),
    ("dgx-h100-superpod", "ecmp", False), ("dgx-h100-superpod", "hash", True)]


def _nic(fabric):
    return str(fabric.nodes["name"].to_numpy()[fabric.kind_mask("nic")][0])


@pytest.mark.parametrize(("name", "routing", "detours"), CASES)
def test_a_failed_nics_collectives_route_the_same_bits(monkeypatch, recorded, fabrics,
                                                       name, routing, detours):
    base = fabrics[name]
    nic = _nic(base)
    made = 0
    every = ("all",) if len(base.accelerators) <= 256 else ()  # the SuperPOD's: 1 M flows
    for collective, algorithm, group in (*(("alltoall", "direct", g) for g in every),
                                         ("alltoall", "direct", "stride:8"),
                                         ("allreduce", "ring", "all")):
        def run(collective=collective, algorithm=algorithm, group=group):
            again = run_collective(with_part_failed(base, nic), collective, 2**26, [group],
                                   algorithm=algorithm, routing=routing, seed=3)
            return again.time_s, again.timing.unroutable_flows

        made += _both_ways(monkeypatch, recorded, run)
    assert made > 0 or not detours  # the detours took forward searches


@pytest.mark.parametrize(("name", "routing", "detours"), CASES)
def test_a_failed_nics_training_steps_route_the_same_bits(monkeypatch, recorded, fabrics,
                                                          name, routing, detours):
    """The review's layout (TP 8 x PP 4) and data parallelism alone, whose DP ring and
    reduce-scatter send the failed NIC's accelerator's flows to more than one peer."""
    base = fabrics[name]
    model = base.catalog.get("llama3-70b", Model)
    nic = _nic(base)
    made = 0
    for tp, pp in ((8, 4), (1, 1)):
        layout = Layout(tp=tp, pp=pp, dp=len(base.accelerators) // (tp * pp), zero=0)

        def run(layout=layout):
            result = step_time(with_part_failed(base, nic), model, layout,
                               StepAssumptions(compute_efficiency=0.7), routing=routing,
                               seed=1)
            return result.step_time_s, result.exposed_comm_s

        made += _both_ways(monkeypatch, recorded, run)
    assert made > 0 or not detours


@pytest.mark.parametrize("name", ["cloudmatrix384", "dgx-h100-superpod"])
@pytest.mark.parametrize("routing", ["ecmp", "hash", "dmodk"])
def test_few_sources_to_many_destinations_route_the_same_bits(monkeypatch, fabrics, name,
                                                              routing):
    """A few sources each sending to many destinations, some unreachable (a failed
    accelerator among them), straight to the general router."""
    from test_survivors import random_failures

    base = fabrics[name]
    acc = base.accelerators
    rng = np.random.default_rng(4)
    src = np.repeat(acc[rng.choice(len(acc), 3, replace=False)], 40)
    dst = acc[rng.integers(0, len(acc), len(src))]
    ph = phase(src, dst, rng.uniform(1e3, 1e6, len(src)))
    lost = str(base.nodes["name"].to_numpy()[ph.dst[5]])
    routed = []
    for forward in (True, False):
        monkeypatch.setattr(general, "FORWARD_SEARCHES", forward)
        failed = random_failures(base, 3)
        failed = failed.with_failed(failed.links["failed"].to_numpy()
                                    | with_part_failed(base, lost).links["failed"].to_numpy())
        routed.append(general.route_general(failed, ph, routing=routing, seed=2, qps=3))
        graph = general._graph(failed)
        assert bool(graph._from) == forward
        if forward:
            _dags_as_searched_towards(graph)
    _same_bits(routed[:1], routed[1:])
    assert len(routed[0].unroutable) >= (ph.dst == ph.dst[5]).sum()


def _dags_as_searched_towards(graph):
    """Each DAG found from forward searches against a search towards its destination:
    its distances exact where it reaches (infinite elsewhere), its arcs and the nodes it
    reaches those of the walk from its seeds."""
    partial = [(t, dag) for t, dag in graph._dags.items() if not dag.complete]
    assert partial
    for target, dag in partial:
        (towards,) = graph.distances_to(np.array([target]))
        arcs, reach = general._reached(graph, towards, dag.seeds)
        assert np.array_equal(reach, dag.reach)
        assert np.array_equal(np.sort(dag.arcs), arcs)
        assert np.array_equal(dag.dist[reach], towards[reach])
        assert np.isinf(dag.dist[~reach]).all()


def test_the_cover_searches_fewer_and_never_more_than_every_target():
    src = np.array([0, 0, 0, 1, 2, 3])
    dst = np.array([1, 2, 3, 0, 0, 0])
    assert pair_cover(src, dst, np.zeros(6, bool)).tolist() == [0]  # 2 searches, not 4
    # every source known: no target searched
    assert pair_cover(src, dst, np.ones(6, bool)).tolist() == []
    # pairs that share nothing: one search per target
    assert pair_cover(np.arange(5), np.arange(5) + 10, np.zeros(5, bool)).tolist() == [
        10, 11, 12, 13, 14]
    # a source in every pair, its targets distinct: one forward search
    assert pair_cover(np.full(5, 7), np.arange(5), np.zeros(5, bool)).tolist() == []


def test_a_walk_back_that_misses_the_first_hop_is_caught(monkeypatch, fabrics):
    """The bit-for-bit comparison fails when the walk back from the destination drops
    the arcs out of the source."""
    base = fabrics["cloudmatrix384"]
    acc = base.accelerators
    ph = phase(np.full(30, acc[0]), acc[np.arange(1, 31) * 7], np.full(30, 1e6))

    def short(distance_from, target, into):
        arcs, nodes = on_paths(distance_from, target, into)
        return arcs[distance_from[into.src[arcs]] > 0], nodes

    monkeypatch.setattr("topomodel.routing.forward.on_paths", short)
    cut = general.route_general(with_part_failed(base, _nic(base)), ph)
    monkeypatch.setattr(general, "FORWARD_SEARCHES", False)
    whole = general.route_general(with_part_failed(base, _nic(base)), ph)
    assert not np.array_equal(cut.link_bytes, whole.link_bytes)


def test_with_parallel_arcs_the_wiring_finds_rows_and_searches_towards_destinations(
        monkeypatch, toy):
    """Parallel arcs: link rows found among the arcs by the inverse of the order (their
    keys are not distinct), and no forward searches (the reversed graph adds the costs of
    parallel arcs up, as scipy's constructor does)."""
    from test_arcs import with_parallel_arcs
    from test_build import fat_tree

    base = toy(fat_tree(4, 8, tiers=2))
    bundles = np.flatnonzero((base.links["tier"] == "spine").to_numpy())[[0, 3, 5]]
    fabric = with_parallel_arcs(base, bundles)
    wiring = fabric.derived(general._Wiring)
    assert wiring.parallel_arcs
    rows = np.arange(len(fabric.links))
    assert np.array_equal(wiring.rows[wiring.arcs_of(rows)], rows)
    acc = fabric.accelerators
    ph = phase(np.full(len(acc) - 1, acc[0]), acc[1:], 1e6)
    monkeypatch.setattr(general, "DAG_WALK_MAX_SHARE", 1.0)  # a toy's few nodes: walked
    general.route_general(base, ph)
    assert general._graph(base)._from  # one forward search without the parallel arcs
    general.route_general(fabric, ph)
    assert not general._graph(fabric)._from


@pytest.mark.parametrize("name", ["cloudmatrix384", "dgx-h100-superpod"])
def test_rows_are_found_among_the_arcs_by_their_keys(fabrics, name):
    wiring = fabrics[name].derived(general._Wiring)
    rows = np.arange(len(fabrics[name].links))
    assert not wiring.parallel_arcs
    assert np.array_equal(wiring.rows[wiring.arcs_of(rows)], rows)
    assert np.array_equal(wiring.reverse_rows[wiring.reverse_entries_of(rows)], rows)


def _parked_detours(fabric, ph, detour, *, routing, seed, qps):
    """The hash-routed detours as routed before ``numbers``: the phase at full length,
    every other flow made empty and parked on the first detour's destination."""
    keep = np.zeros(ph.flows, bool)
    keep[detour] = True
    parked = ph.dst[detour[0]]
    whole = Phase(np.where(keep, ph.src, parked), np.where(keep, ph.dst, parked),
                  np.where(keep, ph.bytes, 0.0), ph.group, ph.steps, ph.label,
                  ph.messages_per_step)
    routed = general.route_general(fabric, whole, routing=routing, seed=seed, qps=qps)
    return routed.link_bytes, routed.hops[detour], routed.unroutable


@pytest.mark.parametrize("name", ["8-npu-servers", "supernodes"])
@pytest.mark.parametrize("routing", ["hash", "dmodk"])
def test_detours_routed_alone_are_the_parked_phase_bit_for_bit(fabrics, name, routing):
    """``survivors._route_detours`` routes the detour flows alone, each hashed as its
    number in the phase: the same loads, hops and lost flows as the whole phase with
    the other flows parked (a failed NIC's flows, and a random subset with a failed
    accelerator's among them, whose flows have no path)."""
    base = fabrics[name]
    acc = base.accelerators
    src, dst = np.meshgrid(acc, acc, indexing="ij")
    off = src != dst
    rng = np.random.default_rng(7)
    ph = phase(src[off], dst[off], rng.uniform(1e3, 1e6, int(off.sum())))
    failed = with_part_failed(base, _nic(base))
    lost = str(base.nodes["name"].to_numpy()[acc[5]])
    failed = failed.with_failed(failed.links["failed"].to_numpy()
                                | with_part_failed(base, lost).links["failed"].to_numpy())
    served = np.flatnonzero(np.isin(ph.src, acc[:8]) | np.isin(ph.dst, acc[:8]))
    some = np.sort(rng.choice(ph.flows, 500, replace=False))
    for detour in (served, some):
        alone = survivors._route_detours(failed, ph, detour, routing=routing, seed=3,
                                         qps=3, hash_scaleup=False)
        parked = _parked_detours(failed, ph, detour, routing=routing, seed=3, qps=3)
        for a, b in zip(alone, parked, strict=True):
            assert np.array_equal(a, b)
        assert alone[0].any()
    assert len(alone[2])  # the failed accelerator's flows among them
