"""The structured router around failed parts agrees with the general router link by link."""

import numpy as np
import pytest
from test_routing import SMALL, check_conservation, fabric_of, random_phase

import topomodel.routing.survivors as survivors
from topomodel.fabric.build import build_fabric
from topomodel.fabric.failures import with_failures
from topomodel.inputs.design import load_design
from topomodel.routing import route
from topomodel.routing.general import route_general
from topomodel.routing.structured import route_structured, structured_supported
from topomodel.routing.survivors import route_around_failures
from topomodel.traffic.phases import Phase

ROUTINGS = ("ecmp", "hash", "dmodk")


def random_failures(fabric, seed, per_tier=2):
    """A seeded failure set touching every tier: up to ``per_tier`` cables of each link
    tier and up to ``per_tier`` parts of each switch and NIC tier."""
    rng = np.random.default_rng(seed)
    nodes, links = fabric.nodes, fabric.links
    names = nodes["name"].to_numpy()
    node_tier = nodes["tier"].astype(str).to_numpy()
    src, dst = links["src"].to_numpy(), links["dst"].to_numpy()
    link_tier = links["tier"].astype(str).to_numpy()
    parts, cables = [], []
    for tier in np.unique(node_tier[node_tier != "accelerator"]):
        members = np.flatnonzero(node_tier == tier)
        parts += list(names[rng.choice(members, rng.integers(0, per_tier + 1), replace=False)])
    for tier in np.unique(link_tier):
        rows = np.flatnonzero((link_tier == tier) & (src < dst))
        for r in rng.choice(rows, min(len(rows), rng.integers(0, per_tier + 1)), replace=False):
            cables.append(f"{names[src[r]]} -- {names[dst[r]]}")
    return with_failures(fabric, parts, cables)


def assert_same_routes(fabric, ph, routing, **options):
    general = route_general(fabric, ph, routing=routing, seed=5, **options)
    structured = route_structured(fabric, ph, routing=routing, seed=5, **options)
    assert np.allclose(general.link_bytes, structured.link_bytes, rtol=1e-9, atol=1e-3)
    assert (general.hops == structured.hops).all()
    assert np.array_equal(general.unroutable, structured.unroutable)
    check_conservation(fabric, ph, structured)
    return structured


@pytest.fixture
def detours(monkeypatch):
    """How many flows each routed phase handed to the general router."""
    counts = []
    original = survivors._route_detours

    def counted(fabric, phase, detour, **options):
        counts.append(len(detour))
        return original(fabric, phase, detour, **options)

    monkeypatch.setattr(survivors, "_route_detours", counted)
    return counts


@pytest.mark.parametrize("name", [*SMALL, "b200-superpod"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_structured_equals_general_with_random_failures(name, seed):
    fabric = random_failures(fabric_of(name), seed)
    assert fabric.links["failed"].any() and structured_supported(fabric) is None
    ph = random_phase(fabric, 300 if name == "b200-superpod" else 600, seed=seed)
    for routing in ROUTINGS:
        assert_same_routes(fabric, ph, routing)
    assert_same_routes(fabric, ph, "hash", qps=3, hash_scaleup=True)


@pytest.mark.parametrize("name", ["dgx-h100-superpod", "b200-superpod"])
def test_views_shared_with_a_sibling_give_the_same_loads_bit_for_bit(name):
    """A degraded copy routes on views its healthy fabric and a sibling copy built
    (Fabric.with_failed): the loads are those of a copy of a freshly built fabric."""
    fresh, warm = fabric_of(name), fabric_of(name)
    sibling = random_failures(warm, 7)
    ph = random_phase(warm, 400, seed=3)
    route(warm, ph)
    route(sibling, ph)  # builds the failure view's shape on the sibling
    for seed in (0, 1):
        alone, shared = random_failures(fresh, seed), random_failures(warm, seed)
        for routing in ROUTINGS:
            a = route(alone, ph, routing=routing, seed=4)
            b = route(shared, ph, routing=routing, seed=4)
            assert np.array_equal(a.link_bytes, b.link_bytes)
            assert np.array_equal(a.hops, b.hops)
            assert np.array_equal(a.unroutable, b.unroutable)


@pytest.mark.parametrize("k", [4, 6])
def test_three_tier_closed_forms_with_failures(toy, k):
    base = toy(f"system: toy-host\nsystems: {k**3 // 4}\nscaleout:\n  switch: toy-switch-{k}\n")
    for seed in range(4):
        fabric = random_failures(base, seed, per_tier=k // 2)
        ph = random_phase(fabric, 500, seed=seed)
        for routing in ROUTINGS:
            assert_same_routes(fabric, ph, routing)


def test_three_level_supernode_with_failures(tmp_path):
    path = tmp_path / "sn.yaml"
    path.write_text("system: cloudmatrix384-node\nsystems: 96\nscaleup:\n  kind: supernode\n"
                    "  switch: ub-l2\n  uplinks: 16\n")
    design, catalog = load_design(path)
    base = build_fabric(design, catalog)
    for seed in range(3):
        fabric = random_failures(base, seed, per_tier=3)
        ph = random_phase(fabric, 800, seed=seed)
        for routing in ROUTINGS:
            assert_same_routes(fabric, ph, routing)
        assert_same_routes(fabric, ph, "hash", qps=2, hash_scaleup=True)


def test_cut_off_nic_and_leaf_go_by_transit_through_the_general_router(detours):
    base = fabric_of("dgx-h100-superpod")
    links, names = base.links, base.nodes["name"].to_numpy()
    leaf = base.node_number("leaf05")
    up = links.index[(links["src"] == leaf) & (links["tier"] == "spine")]
    # a leaf cut off from the spines, another leaf, a NIC: valleys and transits
    fabric = with_failures(base, ["leaf07", "sys020/nic3"],
                           [f"leaf05 -- {names[links['dst'][r]]}" for r in up])
    ph = random_phase(fabric, 3000, seed=8)
    for routing in ROUTINGS:
        routed = assert_same_routes(fabric, ph, routing)
        assert routed.router == "structured"
    assert min(detours) > 0 and max(detours) < ph.flows / 4


def test_unroutable_flows_are_reported_alike(detours):
    base = fabric_of("hgx-h100-server")  # one box, no network
    acc = base.nodes["name"].to_numpy()[base.accelerators]
    fabric = with_failures(base, [], [f"{acc[0]} -- sys0/sw{k}" for k in range(4)])
    ph = random_phase(fabric, 200, seed=2)
    for routing in ROUTINGS:
        routed = assert_same_routes(fabric, ph, routing)
        touching = (ph.src == base.accelerators[0]) | (ph.dst == base.accelerators[0])
        assert routed.unroutable.tolist() == np.flatnonzero(touching).tolist()
        assert (routed.hops[routed.unroutable] == 0).all()


def test_auto_routes_failures_with_the_structured_router():
    fabric = with_failures(fabric_of("b200-superpod"), [],
                           ["leaf000 -- pod0/spine00", "pod0/spine00 -- core00"])
    ph = random_phase(fabric, 200, seed=1)
    assert route(fabric, ph).router == "structured"
    assert route(fabric, ph, router="general").router == "general"


@pytest.mark.parametrize("name", ["b200-superpod", "cloudmatrix384", "dual-plane-ethernet"])
def test_failure_view_of_a_healthy_fabric_is_the_healthy_router(name):
    fabric = fabric_of(name)
    ph = random_phase(fabric, 2000, seed=3)
    for routing in ROUTINGS:
        for hash_scaleup in (False, True):
            a = route_structured(fabric, ph, routing=routing, seed=1, qps=2,
                                 hash_scaleup=hash_scaleup)
            b = route_around_failures(fabric, ph, routing=routing, seed=1, qps=2,
                                      hash_scaleup=hash_scaleup)
            assert np.allclose(a.link_bytes, b.link_bytes, rtol=1e-9, atol=1e-3)
            assert (a.hops == b.hops).all()


def test_with_failures_marks_many_links_as_one_at_a_time_does():
    base = fabric_of("dgx-h100-superpod")
    links, names = base.links, base.nodes["name"].to_numpy()
    rows = np.random.default_rng(4).choice(len(links), 40, replace=False)
    cut = [f"{names[links['src'][r]]} -- {names[links['dst'][r]]}" for r in rows]
    together = with_failures(base, ["spine03"], cut).links["failed"].to_numpy()
    one_by_one = with_failures(base, ["spine03"])
    for text in cut:
        one_by_one = with_failures(one_by_one, [], [text])
    assert np.array_equal(together, one_by_one.links["failed"].to_numpy())
    src, dst = links["src"].to_numpy(), links["dst"].to_numpy()
    pairs = {frozenset((int(src[r]), int(dst[r]))) for r in rows}
    spine = base.node_number("spine03")
    expected = [frozenset((int(a), int(b))) in pairs or spine in (a, b)
                for a, b in zip(src, dst, strict=True)]
    assert together.tolist() == expected


@pytest.mark.parametrize("name", ["dgx-h100-superpod", "gb200-nvl72-cluster"])
def test_a_failed_single_homed_leaf_is_relayed_without_the_general_router(name, detours):
    """A failed leaf cuts off every NIC under it; under ECMP the detours through a peer
    of the same system are arrays (one end cut, or both: neighbours under that leaf),
    equal to the general router link by link."""
    base = fabric_of(name)
    leaf = base.nodes.loc[base.nodes["tier"] == "leaf", "name"].iloc[0]
    fabric = with_failures(base, [leaf])
    ph = random_phase(fabric, 2000, seed=3)
    under = np.isin(fabric.injection.nic, fabric.links.loc[
        fabric.links["dst"] == fabric.node_number(leaf), "src"].to_numpy())
    cut = fabric.accelerators[under]
    both = np.isin(ph.src, cut) & np.isin(ph.dst, cut)
    ph = Phase(np.r_[ph.src, cut[:-1]], np.r_[ph.dst, cut[1:]],
               np.r_[ph.bytes, np.full(len(cut) - 1, 1e6)], np.r_[ph.group, np.zeros(
                   len(cut) - 1, ph.group.dtype)], ph.steps, ph.label)
    assert len(cut) and (np.isin(ph.src, cut) | np.isin(ph.dst, cut)).any()
    routed = assert_same_routes(fabric, ph, "ecmp")
    assert routed.router == "structured" and detours == [] and not both.all()


def test_a_core_joining_spines_of_different_indices_is_irregular(toy):
    """Cores join spines of one index only; rewire one spine's uplink to a core of
    another index and the failure view's shape refuses the wiring (it would send a
    detour through the wrong spine)."""

    from test_build import fat_tree

    from topomodel.routing.clos import live
    from topomodel.routing.clos.view import Irregular, clos_view

    fabric = toy(fat_tree(4, 16, tiers=3))
    live.ClimbShape(clos_view(fabric).fat_tree, live.SurvivorShape(fabric).lookup)
    links = fabric.links.copy()
    kind = fabric.nodes["tier"].astype(str).to_numpy()
    src, dst = links["src"].to_numpy().copy(), links["dst"].to_numpy().copy()
    up = np.flatnonzero((kind[src] == "spine") & (kind[dst] == "core"))
    first = up[0]
    other = next(r for r in up if dst[r] != dst[first]
                 and not ((src == src[first]) & (dst == dst[r])).any())
    back = np.flatnonzero((src == dst[first]) & (dst == src[first]))[0]
    dst[first], src[back] = dst[other], dst[other]  # the cable moved, both directions
    links["src"], links["dst"] = src, dst
    rewired = fabric.with_frames(links=links)  # no views of the old wiring
    with pytest.raises(Irregular, match="different indices"):
        live.ClimbShape(clos_view(rewired).fat_tree, live.SurvivorShape(rewired).lookup)


def scaleup_by_entries(view, ph, flows):
    """The in-system ECMP split as one bincount over every (flow, chip) entry: the
    oracle :func:`scaleup_paths` must equal bit for bit (it sums chip by chip)."""
    from topomodel.routing.clos.live import chips_of
    from topomodel.routing.pieces import link_bytes

    up = view.clos.scaleup_up
    into, out, ok = chips_of(view, ph.src[flows], ph.dst[flows])
    weights = np.where(ok, up.weights[up.slot[ph.src[flows]]], 0)
    share = weights / np.maximum(weights.sum(axis=1, keepdims=True), 1) * ph.bytes[flows][:, None]
    return link_bytes(view.clos.n_links, [(into, share), (out, share)]), flows[~ok.any(axis=1)]


@pytest.mark.parametrize("name", ["hgx-h100-server", "dgx-h100-superpod", "cloudmatrix384"])
@pytest.mark.parametrize("seed", [None, 0, 1, 2])
def test_in_system_ecmp_sums_chip_by_chip_as_over_every_entry(name, seed):
    from topomodel.routing.clos.live import survivors_view
    from topomodel.routing.clos.paths import scaleup_paths

    fabric = fabric_of(name)
    if seed is not None:  # failed chips, accelerator - chip cables among them
        fabric = random_failures(fabric, seed, per_tier=4)
    view = survivors_view(fabric)
    ph = random_phase(fabric, 3000, seed=seed or 0)
    same = view.clos.system[ph.src] == view.clos.system[ph.dst]
    flows = np.flatnonzero(same & (view.clos.domain[ph.src] >= 0))
    assert len(flows)
    load, cut = scaleup_paths(view, ph, flows, "ecmp", 0, 1)
    want_load, want_cut = scaleup_by_entries(view, ph, flows)
    assert np.array_equal(load, want_load) and (load.any() or seed is not None)
    assert np.array_equal(cut, want_cut)
    if seed is not None and name != "cloudmatrix384":
        assert not view.alive[view.clos.scaleup_up.table].all()  # the general split ran


def test_kept_sections_are_added_in_order_after_the_copys_own_section(tmp_path, monkeypatch):
    """A section kept and shared is added to the load only once a section routed for
    the copy alone comes (or at the end): the supernode section of a copy with a
    failed upper-level link routes before the kept in-system section is added, and the
    sections are still added in the order they are routed (the sums of the code that
    added each at once), with the general router's loads."""
    from topomodel.routing.sections import KeptSection

    path = tmp_path / "sn.yaml"
    path.write_text("system: cloudmatrix384-node\nsystems: 96\nscaleup:\n  kind: supernode\n"
                    "  switch: ub-l2\n  uplinks: 16\n")
    design, catalog = load_design(path)
    base = build_fabric(design, catalog)
    links, names = base.links, base.nodes["name"].to_numpy()
    src, dst = links["src"].to_numpy(), links["dst"].to_numpy()
    upper = np.flatnonzero((links["tier"].astype(str).to_numpy() == "scaleup_l2")
                           & (src < dst))[0]
    fabric = with_failures(base, (), (f"{names[src[upper]]} -- {names[dst[upper]]}",))
    events, sections = [], {}
    kept_section, added_to = survivors.kept_section, KeptSection.added_to

    def recorded(fabric, name, *args):
        kept = kept_section(fabric, name, *args)
        sections[id(kept)] = name
        events.append(("routed", name, kept.kept))
        return kept

    def adding(self, load, n_links):
        events.append(("added", sections[id(self)], self.kept))
        return added_to(self, load, n_links)

    monkeypatch.setattr(survivors, "kept_section", recorded)
    monkeypatch.setattr(KeptSection, "added_to", adding)
    ph = random_phase(fabric, 800, seed=3)
    assert_same_routes(fabric, ph, "ecmp")
    routed = [name for kind, name, _ in events if kind == "routed"]
    assert [name for kind, name, _ in events if kind == "added"] == routed
    assert routed[:2] == ["scaleup", "supernode"]
    assert events[:3] == [("routed", "scaleup", True), ("routed", "supernode", False),
                          ("added", "scaleup", True)]
