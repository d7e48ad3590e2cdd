"""Routing oracles: conservation, capacity, general == structured, hash, failures."""

from pathlib import Path

import numpy as np
import pytest
from conftest import with_sharp

from topomodel.analysis.collectives.timing import TimeModel, time_traffic
from topomodel.errors import RoutingError, TopomodelError
from topomodel.fabric.build import build_fabric
from topomodel.fabric.failures import with_failures
from topomodel.inputs.design import load_design
from topomodel.routing import route
from topomodel.routing.general import route_general
from topomodel.routing.structured import route_structured, structured_supported
from topomodel.traffic.phases import Traffic, phase

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
SMALL = ["hgx-h100-server", "dgx-h100-superpod", "mi300x-roce", "dual-plane-ethernet",
         "gb200-nvl72-cluster", "cloudmatrix384"]


def fabric_of(name):
    design, catalog = load_design(EXAMPLES / f"{name}.yaml")
    return build_fabric(design, catalog)


def random_phase(fabric, flows, seed=0):
    rng = np.random.default_rng(seed)
    acc = fabric.accelerators
    return phase(acc[rng.integers(0, len(acc), flows)], acc[rng.integers(0, len(acc), flows)],
                 rng.uniform(1e3, 1e6, flows))


def check_conservation(fabric, ph, routed):
    """Each flow's bytes leave its source and reach its destination; the link loads sum
    to bytes x hops; no negative or missing loads."""
    links = fabric.links
    load = routed.link_bytes
    assert np.isfinite(load).all() and (load >= -1e-6).all()
    ok = np.ones(ph.flows, bool)
    ok[routed.unroutable] = False
    assert load.sum() == pytest.approx((ph.bytes[ok] * routed.hops[ok]).sum(), rel=1e-9)
    n = len(fabric.nodes)
    out = np.bincount(links["src"], weights=load, minlength=n)
    into = np.bincount(links["dst"], weights=load, minlength=n)
    sent = np.bincount(ph.src[ok], weights=ph.bytes[ok], minlength=n)
    received = np.bincount(ph.dst[ok], weights=ph.bytes[ok], minlength=n)
    assert np.allclose(out - into, sent - received, atol=1e-3)
    assert load[links["failed"].to_numpy()].sum() == 0
    if routed.span is not None:  # every row outside the span the router gave is +0.0
        lo, hi = routed.span
        bits = load.view(np.uint64)
        assert 0 <= lo <= hi <= len(load)
        assert not bits[:lo].any() and not bits[hi:].any()


@pytest.mark.parametrize("name", SMALL)
@pytest.mark.parametrize("routing", ["ecmp", "hash", "dmodk"])
def test_general_router_conserves_bytes(name, routing):
    fabric = fabric_of(name)
    ph = random_phase(fabric, 500)
    check_conservation(fabric, ph, route_general(fabric, ph, routing=routing, seed=7))


@pytest.mark.parametrize("name", [*SMALL, "b200-superpod"])
@pytest.mark.parametrize("routing", ["ecmp", "hash", "dmodk"])
def test_structured_router_equals_general(name, routing):
    fabric = fabric_of(name)
    assert structured_supported(fabric) is None
    ph = random_phase(fabric, 300 if name == "b200-superpod" else 1000, seed=1)
    general = route_general(fabric, ph, routing=routing, seed=5)
    structured = route_structured(fabric, ph, routing=routing, seed=5)
    assert np.allclose(general.link_bytes, structured.link_bytes, rtol=1e-9, atol=1e-3)
    assert (general.hops == structured.hops).all()
    check_conservation(fabric, ph, structured)


def test_structured_router_equals_general_on_3_tier_closed_forms(toy):
    for k in (4, 6):
        fabric = toy(f"system: toy-host\nsystems: {k**3 // 4}\nscaleout:\n"
                     f"  switch: toy-switch-{k}\n")
        ph = random_phase(fabric, 400, seed=k)
        for routing in ("ecmp", "hash", "dmodk"):
            a = route_general(fabric, ph, routing=routing, seed=2)
            b = route_structured(fabric, ph, routing=routing, seed=2)
            assert np.allclose(a.link_bytes, b.link_bytes, atol=1e-3)


def ring(fabric, size_bytes, steps_factor=2):
    """Ring AllReduce over all accelerators in rank order, as one repeated phase."""
    acc = fabric.accelerators
    n = len(acc)
    return Traffic((phase(acc, np.roll(acc, -1), size_bytes / n,
                          steps=steps_factor * (n - 1)),))


def busbw(fabric, size_bytes, **kwargs):
    n = fabric.accelerator_count
    timing = time_traffic(fabric, ring(fabric, size_bytes), **kwargs)
    return size_bytes / timing.time_s * 2 * (n - 1) / n, timing


def test_ring_on_one_nonblocking_switch_reaches_link_rate(toy):
    fabric = toy("system: toy-host\nsystems: 8\nscaleout:\n  switch: toy-switch-8\n")
    no_latency = TimeModel(per_message_overhead_s=0.0, hop_latency_s=0.0,
                           efficiency={"leaf": 0.9})
    fabric = fabric.with_frames(nodes=fabric.nodes.assign(latency_s=0.0),
                                links=fabric.links.assign(latency_s=0.0))
    value, _ = busbw(fabric, 1e9, time_model=no_latency)
    assert value == pytest.approx(12.5e9 * 0.9, rel=1e-9)  # 100 Gb/s x efficiency


def test_oversubscribed_tier_cuts_busbw_by_k(toy):
    # 2 leaves of 4 hosts; ring crosses between leaves; stride order makes every hop cross
    flat = toy("system: toy-host\nsystems: 8\nscaleout:\n  switch: toy-switch-16\n"
               "  tiers: 2\n  unit: 4\n")
    over = toy("system: toy-host\nsystems: 8\nscaleout:\n  switch: toy-switch-16\n"
               "  tiers: 2\n  unit: 4\n  oversubscription: ['4:1']\n")
    model = TimeModel(per_message_overhead_s=0.0, hop_latency_s=0.0)

    def crossing_ring(fabric):
        order = fabric.accelerators[[0, 4, 1, 5, 2, 6, 3, 7]]  # alternate the two leaves
        return Traffic((phase(order, np.roll(order, -1), 1e9 / 8, steps=14),))

    t_flat = time_traffic(flat, crossing_ring(flat), time_model=model)
    t_over = time_traffic(over, crossing_ring(over), time_model=model)
    assert t_over.bandwidth_s + t_over.topology_s == pytest.approx(
        4 * (t_flat.bandwidth_s + t_flat.topology_s), rel=1e-6)
    assert t_over.topology_s > 0 and t_flat.topology_s == pytest.approx(0, abs=1e-12)


def test_even_ecmp_on_nonblocking_fat_tree_stays_within_injection(toy):
    fabric = toy("system: toy-host\nsystems: 32\nscaleout:\n  switch: toy-switch-8\n")
    acc = fabric.accelerators
    perm = np.random.default_rng(3).permutation(acc)
    ph = phase(acc, perm, 1e6)  # a permutation: each host sends and receives 1 MB
    routed = route(fabric, ph, routing="ecmp")
    assert routed.link_bytes.max() <= 1e6 * (1 + 1e-9)


def test_hash_ecmp_shows_collisions_reproducibly(toy):
    fabric = toy("system: toy-host\nsystems: 32\nscaleout:\n  switch: toy-switch-8\n")
    acc = fabric.accelerators
    ph = phase(acc, np.roll(acc, 16), 1e6)  # every flow crosses the spine
    even = route(fabric, ph, routing="ecmp")
    hashed = route(fabric, ph, routing="hash", seed=11)
    again = route(fabric, ph, routing="hash", seed=11)
    other = route(fabric, ph, routing="hash", seed=12)
    assert np.array_equal(hashed.link_bytes, again.link_bytes)
    assert hashed.link_bytes.max() > even.link_bytes.max() * 1.5
    assert not np.array_equal(hashed.link_bytes, other.link_bytes)


def test_failed_spine_raises_survivor_load_by_its_share(toy):
    fabric = toy("system: toy-host\nsystems: 32\nscaleout:\n  switch: toy-switch-8\n")
    acc = fabric.accelerators
    ph = phase(acc, np.roll(acc, 16), 1e6)
    spines = fabric.nodes.index[fabric.nodes["tier"] == "spine"]
    healthy = route(fabric, ph)
    broken = with_failures(fabric, ["spine0"])
    degraded = route(broken, ph)
    up = (fabric.links["tier"] == "spine").to_numpy()
    survivors = up & ~fabric.links["dst"].eq(spines[0]).to_numpy() & ~fabric.links[
        "src"].eq(spines[0]).to_numpy()
    ratio = degraded.link_bytes[survivors].sum() / healthy.link_bytes[survivors].sum()
    assert ratio == pytest.approx(4 / 3)  # 4 spines, one lost
    check_conservation(broken, ph, degraded)
    assert degraded.router == "structured"


def test_unroutable_flows_are_reported_not_dropped(toy):
    fabric = toy("system: toy-box\nsystems: 2\n")  # two boxes, no scale-out
    acc = fabric.accelerators
    ph = phase([acc[0], acc[0]], [acc[1], acc[5]], 1e6)
    routed = route(fabric, ph)
    assert routed.unroutable.tolist() == [1]
    timing = time_traffic(fabric, Traffic((ph,)))
    assert timing.unroutable_flows == 1 and timing.unroutable_bytes == 1e6


def test_rail_only_crosses_rails_through_the_scaleup_domain(toy):
    fabric = toy("system: toy-box\nsystems: 4\nscaleout:\n  kind: rail_only\n"
                 "  switch: toy-switch-8\n")
    acc = fabric.accelerators
    ph = phase([acc[0]], [acc[5]], 1e6)  # box 0 rail 0 -> box 1 rail 1
    routed = route(fabric, ph)
    assert not len(routed.unroutable)
    tiers = fabric.links["tier"].astype(str).to_numpy()
    assert routed.link_bytes[tiers == "scaleup"].sum() > 0
    check_conservation(fabric, ph, routed)


def test_structured_router_equals_general_on_a_3_level_supernode(tmp_path):
    path = tmp_path / "sn.yaml"
    path.write_text("system: cloudmatrix384-node\nsystems: 96\nscaleup:\n  kind: supernode\n"
                    "  switch: ub-l2\n  uplinks: 16\n")
    design, catalog = load_design(path)
    fabric = build_fabric(design, catalog)
    assert fabric.structure.scaleup.supernode.levels == 3
    ph = random_phase(fabric, 1500, seed=4)
    for routing in ("ecmp", "hash", "dmodk"):
        a = route_general(fabric, ph, routing=routing, seed=9)
        b = route_structured(fabric, ph, routing=routing, seed=9)
        assert np.allclose(a.link_bytes, b.link_bytes, atol=1e-3), routing
        assert (a.hops == b.hops).all()


@pytest.mark.parametrize("routing", ["ecmp", "hash"])
def test_general_router_batches_and_uncached_dags_give_the_same_loads(monkeypatch, routing):
    import topomodel.routing.general as rt

    base = fabric_of("dgx-h100-superpod")
    ph = random_phase(base, 2000, seed=3)
    whole = route_general(with_failures(base, ["spine00"]), ph, routing=routing, seed=2)
    monkeypatch.setattr(rt, "_DEST_BATCH", 7)
    monkeypatch.setattr(rt, "DAG_CACHE_BYTES", 0)
    failed = with_failures(base, ["spine00"])  # a new fabric: no cached DAGs
    batched = route_general(failed, ph, routing=routing, seed=2)
    assert np.allclose(whole.link_bytes, batched.link_bytes, rtol=1e-12, atol=1e-6)
    assert (whole.hops == batched.hops).all()
    check_conservation(failed, ph, batched)


def test_general_router_refuses_work_beyond_its_limit(monkeypatch, capsys):
    import topomodel.routing.general as rt
    from topomodel.cli import main

    fabric = with_failures(fabric_of("hgx-h100-server"), ["sys0/sw0"])
    ph = random_phase(fabric, 100)
    monkeypatch.setattr(rt, "GENERAL_ROUTER_MAX_WORK", 10)
    with pytest.raises(RoutingError, match="more than its limit"):
        route_general(fabric, ph)
    status = main(["route", str(EXAMPLES / "hgx-h100-server.yaml"), "--collective",
                   "allreduce", "--size", "1 MiB", "--fail", "sys0/sw0", "--router",
                   "general"])
    err = capsys.readouterr().err.strip().splitlines()
    assert status == 2 and len(err) == 1 and "general router" in err[0]


def test_routing_errors_are_topomodel_errors():
    fabric = fabric_of("hgx-h100-server")
    ph = random_phase(fabric, 10)
    with pytest.raises(RoutingError, match="unknown routing 'ecmq'; choose from auto, ecmp"):
        route(fabric, ph, routing="ecmq")
    with pytest.raises(RoutingError, match="unknown router 'fast'; choose from auto"):
        route(fabric, ph, router="fast")
    torus = fabric_of("tpu-v4-pod")
    assert structured_supported(torus) == "scale-up kind torus"
    with pytest.raises(RoutingError, match="structured router does not handle scale-up kind"
                       " torus; the general router does"):
        route(torus, random_phase(torus, 10), router="structured")
    assert issubclass(RoutingError, TopomodelError) and issubclass(RoutingError, ValueError)


@pytest.mark.parametrize("algorithm", [[], ["--algorithm", "ring"]])
def test_structured_router_on_a_torus_is_a_one_line_cli_error(capsys, algorithm):
    from topomodel.cli import main

    status = main(["route", str(EXAMPLES / "tpu-v4-pod.yaml"), "--collective", "allreduce",
                   "--size", "1 GiB", "--router", "structured", *algorithm])
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert status == 2 and out == ""
    assert len(lines) == 1 and lines[0].startswith("topomodel: error: ")
    assert "structured router does not handle scale-up kind torus" in lines[0]
    assert "Traceback" not in err


def scaleout_phase(fabric, flows, seed):
    """Random flows between accelerators of different scale-up domains."""
    rng = np.random.default_rng(seed)
    acc = fabric.accelerators
    src, dst = acc[rng.integers(0, len(acc), flows)], acc[rng.integers(0, len(acc), flows)]
    domain = fabric.nodes["domain"].to_numpy()
    keep = domain[src] != domain[dst]
    return phase(src[keep], dst[keep], rng.uniform(1e3, 1e6, keep.sum()))


@pytest.mark.parametrize(("name", "square_sum", "peak", "loaded"), [
    ("dgx-h100-superpod", 1708202029022378.0, 3353969.7865401786, 2509),
    ("dual-plane-ethernet", 3355738715037185.0, 7737124.629578416, 2065)])
def test_one_qp_per_flow_reproduces_the_per_flow_hash_at_scale_out(name, square_sum, peak,
                                                                   loaded):
    # figures from the router before queue pairs (one hashed path per flow)
    fabric = fabric_of(name)
    ph = scaleout_phase(fabric, 600, seed=8)
    for fn in (route_structured, route_general):
        load = fn(fabric, ph, routing="hash", seed=3, qps=1).link_bytes
        assert (load ** 2).sum() == pytest.approx(square_sum, rel=1e-12)
        assert load.max() == pytest.approx(peak, rel=1e-12)
        assert (load > 0).sum() == loaded


@pytest.mark.parametrize("name", [*SMALL, "b200-superpod"])
@pytest.mark.parametrize(("qps", "hash_scaleup"), [(3, False), (3, True), (1, True)])
def test_structured_router_equals_general_with_queue_pairs(name, qps, hash_scaleup):
    fabric = fabric_of(name)
    ph = random_phase(fabric, 300 if name == "b200-superpod" else 800, seed=6)
    options = {"routing": "hash", "seed": 4, "qps": qps, "hash_scaleup": hash_scaleup}
    general = route_general(fabric, ph, **options)
    structured = route_structured(fabric, ph, **options)
    assert np.allclose(general.link_bytes, structured.link_bytes, rtol=1e-9, atol=1e-3)
    assert (general.hops == structured.hops).all()
    check_conservation(fabric, ph, structured)
    check_conservation(fabric, ph, general)


def test_queue_pairs_on_a_3_level_supernode_agree(tmp_path):
    path = tmp_path / "sn.yaml"
    path.write_text("system: cloudmatrix384-node\nsystems: 96\nscaleup:\n  kind: supernode\n"
                    "  switch: ub-l2\n  uplinks: 16\n")
    design, catalog = load_design(path)
    fabric = build_fabric(design, catalog)
    ph = random_phase(fabric, 1000, seed=2)
    for hash_scaleup in (False, True):
        a = route_general(fabric, ph, routing="hash", seed=1, qps=4, hash_scaleup=hash_scaleup)
        b = route_structured(fabric, ph, routing="hash", seed=1, qps=4,
                             hash_scaleup=hash_scaleup)
        assert np.allclose(a.link_bytes, b.link_bytes, atol=1e-3), hash_scaleup
        check_conservation(fabric, ph, b)
    even = route(fabric, ph, routing="ecmp")
    hashed = route(fabric, ph, routing="hash", seed=1, qps=4)
    assert np.allclose(hashed.link_bytes, even.link_bytes, rtol=1e-9, atol=1e-3)


def test_more_queue_pairs_even_out_the_spine_uplinks(toy):
    fabric = toy("system: toy-host\nsystems: 32\nscaleout:\n  switch: toy-switch-8\n")
    acc = fabric.accelerators
    ph = phase(acc, np.roll(acc, 16), 1e6)  # every flow crosses the spine
    links = fabric.links
    uplinks = ((links["tier"] == "spine").to_numpy()
               & (fabric.nodes["tier"].to_numpy()[links["src"]] == "leaf"))
    even = route(fabric, ph, routing="ecmp").link_bytes[uplinks]
    assert np.ptp(even) == pytest.approx(0, abs=1e-6)
    spread = []
    for qps in (1, 4, 16, 64):
        per_seed = []
        for seed in range(5):
            routed = route(fabric, ph, routing="hash", seed=seed, qps=qps)
            check_conservation(fabric, ph, routed)
            assert routed.link_bytes.sum() == pytest.approx(
                route(fabric, ph, routing="ecmp").link_bytes.sum(), rel=1e-12)
            load = routed.link_bytes[uplinks]
            assert load.sum() == pytest.approx(even.sum(), rel=1e-12)
            per_seed.append(load.var())
        spread.append(np.mean(per_seed))
    assert spread[0] > spread[1] > spread[2] > spread[3] > 0
    # ECMP over Q independent choices: the variance falls about as 1/Q
    assert spread[3] < spread[0] / 16


@pytest.mark.parametrize("name", ["hgx-h100-server", "gb200-nvl72-cluster"])
@pytest.mark.parametrize("router", ["general", "structured"])
def test_hash_splits_evenly_inside_the_scaleup_domain(name, router):
    fabric = fabric_of(name)
    acc = fabric.accelerators
    domain = fabric.nodes["domain"].to_numpy()
    rng = np.random.default_rng(5)
    src, dst = acc[rng.integers(0, len(acc), 400)], acc[rng.integers(0, len(acc), 400)]
    keep = (domain[src] == domain[dst]) & (src != dst)
    ph = phase(src[keep], dst[keep], rng.uniform(1e3, 1e6, keep.sum()))
    scaleup = (fabric.links["tier"] == "scaleup").to_numpy()
    even = route(fabric, ph, routing="ecmp", router=router).link_bytes
    hashed = route(fabric, ph, routing="hash", seed=3, router=router).link_bytes
    assert hashed[scaleup].sum() > 0
    assert np.allclose(hashed, even, rtol=1e-9, atol=1e-3)  # by cables, as ECMP
    asked = route(fabric, ph, routing="hash", seed=3, router=router, hash_scaleup=True)
    assert not np.allclose(asked.link_bytes, even, rtol=1e-6, atol=1)
    check_conservation(fabric, ph, asked)


def test_time_traffic_passes_queue_pairs_to_the_router(toy):
    fabric = toy("system: toy-host\nsystems: 32\nscaleout:\n  switch: toy-switch-8\n")
    acc = fabric.accelerators
    traffic = Traffic((phase(acc, np.roll(acc, 16), 1e6),))
    one = time_traffic(fabric, traffic, routing="hash", seed=2, qps=1)
    many = time_traffic(fabric, traffic, routing="hash", seed=2, qps=64)
    assert np.array_equal(one.phases[0].routed.link_bytes,
                          route(fabric, traffic.phases[0], routing="hash", seed=2,
                                qps=1).link_bytes)
    assert many.time_s < one.time_s


@pytest.mark.parametrize("qps", [0, -1, 1.5, True])
def test_queue_pairs_must_be_a_positive_integer(qps):
    fabric = fabric_of("hgx-h100-server")
    with pytest.raises(RoutingError, match="qps must be a positive integer, not"):
        route(fabric, random_phase(fabric, 10), routing="hash", qps=qps)


@pytest.mark.parametrize("example", ["dgx-h100-superpod", "b200-superpod"])
def test_switch_endpoint_flows_take_the_general_routers_paths(example):
    """In-network reduction's flows (rank -> leaf, leaf -> root) go by their two-hop
    paths in route(); the general router's shortest-path ECMP gives the same loads."""
    from topomodel.traffic.collectives import collective_traffic

    fabric = with_sharp(fabric_of(example))
    traffic = collective_traffic(fabric, "allreduce", [fabric.accelerators[:256]], 2**26,
                                 algorithm="innetwork")
    for ph in traffic.phases:
        fast = route(fabric, ph)
        exact = route_general(fabric, ph)
        assert np.allclose(fast.link_bytes, exact.link_bytes, rtol=1e-9, atol=1e-3)
        assert (fast.hops == exact.hops).all() and not len(fast.unroutable)


@pytest.mark.parametrize("name", ["dgx-h100-superpod", "b200-superpod", "dual-plane-ethernet"])
def test_a_downlinks_column_is_the_first_arc_from_its_spine(name):
    """``Climb.down_column`` (a search in sorted keys) is the argmax over each leaf's
    downlinks compared with the spine it replaced, for every (leaf, node) pair: spines
    of the leaf's pod, and other nodes (no arc: column 0)."""
    from topomodel.routing.clos.view import clos_view

    climb = clos_view(fabric_of(name)).fat_tree
    down = climb.down[climb.spine]
    rng = np.random.default_rng(1)
    slot = rng.integers(0, len(down.table), 20000)
    spine = np.where(rng.random(20000) < 0.8,
                     climb.src_of(down.table[slot, rng.integers(0, down.width, 20000)]),
                     rng.integers(0, climb.n, 20000))
    want = np.argmax(climb.src_of(down.table[slot]) == spine[:, None], axis=1)
    assert np.array_equal(climb.down_column(slot, spine), want)


def test_an_all_pairs_phase_between_accelerators_is_read_off_its_ranks():
    """An all-pairs phase's flows join its groups' ranks (and PXN's relays): where all
    are accelerators it goes to the structured router without checking each listed
    flow, and routes as its listed flows do; a group holding a switch does not."""
    import topomodel.routing as routing
    from topomodel.traffic.phases import AllPairs, AllPairsPhase

    fabric = fabric_of("dgx-h100-superpod")
    acc = fabric.accelerators
    is_acc = fabric.kind_mask("accelerator")
    ranks = acc[:64].reshape(4, 16)
    pairs = AllPairsPhase([AllPairs(ranks, np.arange(4, dtype=np.int32), np.full(4, 1e6))])
    assert routing._ranks_between_accelerators(pairs, is_acc)
    listed = phase(pairs.src, pairs.dst, pairs.bytes)
    assert not routing._ranks_between_accelerators(listed, is_acc)
    a, b = (route(fabric, p, routing="hash", router="structured") for p in (pairs, listed))
    assert np.array_equal(a.link_bytes, b.link_bytes) and np.array_equal(a.hops, b.hops)
    switch = np.flatnonzero(~is_acc)[0]
    mixed = ranks.copy()
    mixed[0, 0] = switch
    assert not routing._ranks_between_accelerators(
        AllPairsPhase([AllPairs(mixed, np.arange(4, dtype=np.int32), np.full(4, 1e6))]),
        is_acc)
