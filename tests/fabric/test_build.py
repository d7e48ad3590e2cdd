import math

import numpy as np
import pytest
from conftest import MESH_CATALOG

from topomodel.analysis.bisection import bisection
from topomodel.errors import DesignError
from topomodel.fabric.build import build_fabric, structure_dict
from topomodel.inputs.design import load_design
from topomodel.inputs.parts import Switch
from topomodel.vocabulary import LINK_TIERS, MEDIA, NODE_KINDS, NODE_TIERS, TIER_KIND


def count(fabric, tier):
    return int((fabric.nodes["tier"] == tier).sum())


def cables(fabric, tier):
    return int(fabric.links.loc[fabric.links["tier"] == tier, "cables"].sum() // 2)


def check_invariants(fabric):
    """Every link has a tier and a positive capacity; no switch exceeds its radix; kinds,
    tiers and media are the vocabulary's."""
    links = fabric.links
    assert links["tier"].notna().all()
    assert tuple(links["tier"].cat.categories) == LINK_TIERS
    assert tuple(links["medium"].cat.categories) == MEDIA
    nodes = fabric.nodes
    assert set(nodes["kind"].astype(str)) <= set(NODE_KINDS)
    assert set(nodes["tier"].astype(str)) <= set(NODE_TIERS)
    assert all(TIER_KIND[t] == k for t, k in zip(nodes["tier"].astype(str),
                                                   nodes["kind"].astype(str), strict=True))
    assert (links["capacity_Bps"] > 0).all()
    # both directions of every bundle are present, with equal capacity
    forward = links.set_index(["src", "dst"])["capacity_Bps"]
    backward = links.set_index(["dst", "src"])["capacity_Bps"]
    assert forward.sort_index().equals(backward.rename_axis(["src", "dst"]).sort_index())
    # the builder's reverse rows are those other directions, pair by pair
    reverse = fabric.reverse_rows
    rows = np.arange(len(links))
    assert np.array_equal(reverse[reverse], rows) and not (reverse == rows).any()
    for column in ("src", "dst"):
        other = "dst" if column == "src" else "src"
        assert np.array_equal(links[column].to_numpy()[reverse], links[other].to_numpy())
    for column in ("tier", "cables", "rate_Bps", "medium", "optic"):
        assert np.array_equal(links[column].to_numpy()[reverse], links[column].to_numpy())
    used = np.bincount(links["src"], weights=links["cables"] * links["rate_Bps"],
                       minlength=len(fabric.nodes))
    for i, model in fabric.nodes.loc[fabric.nodes["kind"] == "switch", "model"].items():
        switch = fabric.catalog.get(model, Switch)
        assert used[i] <= switch.capacity_per_direction_Bps * (1 + 1e-9), fabric.nodes.name[i]


def fat_tree(k, hosts, tiers=None, extra=""):
    tiers_line = f"  tiers: {tiers}\n" if tiers else ""
    return (f"system: toy-host\nsystems: {hosts}\nscaleout:\n  switch: toy-switch-{k}\n"
            + tiers_line + extra)


@pytest.mark.parametrize("k", [4, 8, 16])
def test_two_tier_fat_tree_closed_form(toy, k):
    fabric = toy(fat_tree(k, k * k // 2))
    assert count(fabric, "leaf") == k and count(fabric, "spine") == k // 2
    assert cables(fabric, "spine") == k * k // 2
    check_invariants(fabric)


@pytest.mark.parametrize("k", [4, 6, 8, 12])
def test_three_tier_fat_tree_closed_form(toy, k):
    fabric = toy(fat_tree(k, k**3 // 4))
    switches = sum(count(fabric, t) for t in ("leaf", "spine", "core"))
    assert switches == 5 * k * k // 4
    assert count(fabric, "core") == k * k // 4
    assert cables(fabric, "core") == k**3 // 4
    check_invariants(fabric)


def test_fewest_tiers_by_default_and_too_many_endpoints(toy):
    assert count(toy(fat_tree(8, 8)), "spine") == 0  # one switch holds 8
    assert count(toy(fat_tree(8, 9)), "spine") > 0
    with pytest.raises(DesignError, match="too large for 3 tiers"):
        toy(fat_tree(4, 4**3 // 4 + 1))
    with pytest.raises(DesignError, match="do not fit one toy-switch-8"):
        toy(fat_tree(8, 9, tiers=1))


def test_oversubscription_cuts_uplinks(toy):
    fabric = toy(fat_tree(16, 48, extra="  oversubscription: ['3:1']\n"))
    leaf = next(t for t in fabric.clos_tiers if t.name == "leaf")
    assert (leaf.down_ports, leaf.up_ports) == (12, 4)
    cut = bisection(fabric)
    assert cut.ratio == pytest.approx(1 / 3, rel=1e-6)
    assert cut.closed_form_Bps == pytest.approx(cut.max_flow_Bps)


def test_radix_that_cannot_give_the_oversubscription(toy):
    with pytest.raises(DesignError, match="cannot give a down:up of 5:1") as info:
        toy(fat_tree(4, 40, extra="  oversubscription: ['5:1', '1:1']\n"))
    assert info.value.problems[0].key_path == "scaleout.switch"


def test_rail_optimized_leaves_hold_one_rail_of_a_unit(toy):
    fabric = toy("system: toy-box\nsystems: 8\nscaleout:\n  switch: toy-switch-8\n"
                 "  unit: 4\n")
    nodes, links = fabric.nodes, fabric.links
    access = links[(links["tier"] == "leaf") & (nodes["kind"].to_numpy()[links["src"]] == "nic")]
    rails = nodes["rail"].to_numpy()[access["src"]]
    leaf_of = access["dst"].to_numpy()
    for leaf in np.unique(leaf_of):
        assert len(set(rails[leaf_of == leaf])) == 1
    assert count(fabric, "leaf") == 8  # 2 units x 4 rails
    check_invariants(fabric)


def test_not_rail_optimized_keeps_a_system_on_one_leaf(toy):
    fabric = toy("system: toy-box\nsystems: 8\nscaleout:\n  switch: toy-switch-16\n"
                 "  rail_optimized: false\n  unit: 2\n")
    links, nodes = fabric.links, fabric.nodes
    access = links[(links["tier"] == "leaf") & (nodes["kind"].to_numpy()[links["src"]] == "nic")]
    system = nodes["system"].to_numpy()[access["src"]]
    for s in np.unique(system):
        assert len(set(access["dst"].to_numpy()[system == s])) == 1


def test_unit_that_does_not_divide(toy):
    with pytest.raises(DesignError, match="not a whole number of units of 4"):
        toy("system: toy-box\nsystems: 6\nscaleout:\n  switch: toy-switch-8\n  unit: 4\n")


def test_planes_double_the_fabric(toy):
    one = toy(fat_tree(8, 32))
    two = toy(fat_tree(8, 32, extra="  planes: 2\n  port_rate: '50 Gb/s /dir'\n"))
    # each plane: 32 ports of 50G on 16-port (at 50G) leaves, 8 down each -> 4 leaves
    planes = two.nodes["plane"][two.nodes["tier"] == "leaf"]
    assert planes.value_counts().to_dict() == {0: 4, 1: 4}
    assert count(one, "leaf") == 8
    access = two.links["tier"] == "leaf"
    assert two.links.loc[access, "capacity_Bps"].sum() == pytest.approx(
        one.links.loc[one.links["tier"] == "leaf", "capacity_Bps"].sum())
    check_invariants(two)


def test_rail_only_has_no_spine_between_rails(toy):
    fabric = toy("system: toy-box\nsystems: 8\nscaleout:\n  kind: rail_only\n"
                 "  switch: toy-switch-8\n")
    assert count(fabric, "leaf") == 4 and count(fabric, "spine") == 0
    cut = bisection(fabric)
    assert cut.closed_form_Bps == pytest.approx(cut.max_flow_Bps)


def test_torus_cut_across_one_dimension(toy):
    fabric = toy("system: toy-host\nsystems: 64\nscaleup:\n  kind: torus\n  link: toy-link\n"
                 "  shape: [4, 4, 4]\n")
    degree = np.bincount(fabric.links["src"], minlength=len(fabric.nodes))
    assert set(degree[fabric.accelerators]) == {6}
    cut = bisection(fabric)
    # 64 / 4 = 16 links in a plane, crossed twice with wraparound, 10 GB/s each
    assert cut.closed_form_Bps == pytest.approx(2 * 16 * 10e9)
    assert cut.max_flow_Bps == pytest.approx(cut.closed_form_Bps)
    check_invariants(fabric)


def test_mesh_without_wraparound_and_shape_errors(toy):
    fabric = toy("system: toy-host\nsystems: 16\nscaleup:\n  kind: torus\n  link: toy-link\n"
                 "  shape: [4, 4]\n  wraparound: false\n")
    assert cables(fabric, "scaleup") == 2 * 4 * 3
    assert bisection(fabric).max_flow_Bps == pytest.approx(4 * 10e9)
    with pytest.raises(DesignError, match=r"torus shape \[4, 3\] holds 12") as info:
        toy("system: toy-host\nsystems: 16\nscaleup:\n  kind: torus\n  link: toy-link\n"
            "  shape: [4, 3]\n")
    assert info.value.problems[0].key_path == "scaleup.shape"


def test_switched_domain_is_full_bisection(toy):
    fabric = toy("system: toy-box\nsystems: 1\n")
    cut = bisection(fabric)
    assert cut.closed_form_Bps == pytest.approx(cut.max_flow_Bps)
    assert cut.ratio == pytest.approx(1.0)
    check_invariants(fabric)


def test_failed_spine_lowers_bisection(toy):
    healthy = bisection(toy(fat_tree(8, 32)))
    spine = "spine0"
    failed = bisection(toy(fat_tree(8, 32, extra=f"failures:\n  nodes: [{spine}]\n")))
    assert failed.max_flow_Bps == pytest.approx(healthy.max_flow_Bps * 3 / 4)


def test_unknown_failed_part_is_an_error(toy):
    with pytest.raises(DesignError, match="no node named 'spine9'"):
        toy(fat_tree(8, 32, extra="failures:\n  nodes: [spine9]\n"))


def test_structure_is_typed_and_frozen(toy):
    import dataclasses

    fabric = toy("system: toy-box\nsystems: 8\nscaleout:\n  switch: toy-switch-8\n  unit: 4\n")
    s = fabric.structure
    assert (s.systems, s.accelerators_per_system) == (8, 4)
    assert (s.scaleup.kind, s.scaleup.link, s.scaleup.switches_per_system) == (
        "switched", "toy-link", 2)
    assert s.scaleup.link_rate_Bps == pytest.approx(10e9)
    out = s.scaleout
    assert (out.kind, out.nic, out.nics_per_system, out.planes, out.unit_systems) == (
        "fat_tree", "toy-nic", 4, 1, 4)
    assert out.port_rate_Bps == out.uplink_rate_Bps == pytest.approx(12.5e9)
    assert out.rail_optimized and not out.rail_only and out.fat_tree_tiers == 2
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.systems = 9
    # the JSON form keeps the published keys, in build order
    assert list(structure_dict(s)) == [
        "systems", "accelerators_per_system", "scaleup", "scaleup_link", "scaleup_link_Bps",
        "scaleup_switches_per_system", "scaleout", "nic", "nics_per_system", "planes",
        "port_rate_Bps", "uplink_rate_Bps", "switch", "rail_optimized", "rail_only",
        "host_link_Bps", "host_link", "unit_systems", "rails_per_leaf", "fat_tree_tiers"]


def test_torus_structure_keeps_shape_and_coordinates(toy):
    fabric = toy("system: toy-host\nsystems: 16\nscaleup:\n  kind: torus\n  link: toy-link\n"
                 "  shape: [4, 4]\n  wraparound: false\n")
    torus = fabric.structure.scaleup.torus
    assert (torus.shape, torus.wraparound, torus.links_per_neighbor) == ((4, 4), False, 1)
    assert torus.coords.shape == (16, 2)
    assert fabric.structure.scaleup.systems_per_domain == 16
    assert structure_dict(fabric.structure)["torus_shape"] == [4, 4]


def test_injection_is_decided_at_build_time(toy):
    from topomodel.analysis.bisection import bisection_injection_Bps
    from topomodel.analysis.training.studies import scale_scaleout

    # 4 accelerators share 2 NICs: accelerators 0 and 1 use NIC 0, which 0 owns
    fabric = toy("system: toy-box\nsystems: 2\nscaleout:\n  switch: toy-switch-8\n"
                 "  nics_per_system: 2\n")
    inj = fabric.injection
    names = fabric.nodes["name"].to_numpy()
    assert [names[n] for n in inj.nic[:4]] == ["sys0/nic0", "sys0/nic0", "sys0/nic1",
                                              "sys0/nic1"]
    nic_Bps = 12.5e9  # one 100 Gb/s port; the host link defaults to the NIC's rate
    assert inj.scaleout_Bps.tolist() == [nic_Bps, 0.0, nic_Bps, 0.0] * 2
    assert inj.host_Bps.tolist() == inj.nic_ports_Bps.tolist() == inj.scaleout_Bps.tolist()
    assert inj.scaleup_Bps.tolist() == [4 * 10e9] * 8  # 2 chips x 2 links of 10 GB/s
    # two domains: the bisection's injection is the scale-out share per accelerator
    assert bisection_injection_Bps(fabric) == inj.bisection_Bps == pytest.approx(4 * nic_Bps / 8)
    scaled = scale_scaleout(fabric, 2.0)
    assert scaled.injection.bisection_Bps == pytest.approx(2 * inj.bisection_Bps)
    assert scaled.injection.scaleup_Bps.tolist() == inj.scaleup_Bps.tolist()


def _host_links(fabric):
    """(accelerator, NIC) node pairs of the host links as built."""
    links = fabric.links[(fabric.links["tier"] == "host").to_numpy()]
    acc = fabric.kind_mask("accelerator")[links["src"].to_numpy()]
    return links["src"].to_numpy()[acc], links["dst"].to_numpy()[acc]


@pytest.mark.parametrize("nics", [1, 2, 3, 4, 5, 6, 7, 8, 12, 16])
def test_each_accelerator_is_served_by_the_nic_its_host_link_reaches(nics):
    """The serving NIC is the first whose host link the accelerator holds; one holding
    none shares the NIC of the nearest holder before it in its system. The NIC counts
    that do not divide 8 are the ones where the two rules used to disagree."""
    from topomodel.fabric.structure import nic_owner_nodes

    fabric = _build(f"system: dgx-h100\nsystems: 2\nscaleout:\n  switch: qm9700\n"
                    f"  nics_per_system: {nics}\n")
    holder, nic = _host_links(fabric)
    owner = nic_owner_nodes(fabric.nodes, fabric.structure)
    assert owner[nic].tolist() == holder.tolist()  # the view is the links as built
    assert (owner >= 0).sum() == 2 * nics
    first = {}
    for a, n in sorted(zip(holder.tolist(), nic.tolist(), strict=True)):
        first.setdefault(a, n)
    served, before = {}, None
    for a, n in zip(fabric.accelerators.tolist(), fabric.injection.nic.tolist(), strict=True):
        before = first.get(a, before if fabric.nodes["local"].iat[a] else None)
        served[a] = before
        assert n == before, fabric.nodes["name"].iat[a]
    assert len(set(served.values())) == min(8, nics) * 2  # every holder serves


def test_an_accelerator_holding_a_host_link_is_served_through_it():
    """dgx-h100 with 3 NICs: sys0/acc2 holds nic1's host link (and acc5 nic2's); the
    serving rule used to give it nic0 (and acc5 nic1), so channels, PXN and SHARP sent
    its traffic through a NIC other than the one its link reaches."""
    from topomodel.traffic.channels import channels, domain_parts

    fabric = _build("system: dgx-h100\nsystems: 2\nscaleout:\n  switch: qm9700\n"
                    "  nics_per_system: 3\n")
    names = fabric.nodes["name"].to_numpy()
    holder, nic = _host_links(fabric)
    assert sorted(f"{names[a]} {names[n]}" for a, n in zip(holder, nic, strict=True)
                  if names[a].startswith("sys0/")) == [
        "sys0/acc0 sys0/nic0", "sys0/acc2 sys0/nic1", "sys0/acc5 sys0/nic2"]
    assert [names[n].split("/")[1] for n in fabric.injection.nic[:8]] == [
        "nic0", "nic0", "nic1", "nic1", "nic1", "nic2", "nic2", "nic2"]
    # each channel's head in a system is the accelerator holding that NIC's host link
    ch = channels(fabric, domain_parts(fabric, fabric.accelerators.reshape(1, 16)))
    heads = ch.head(np.zeros(3, int), np.zeros(3, int), np.arange(3))
    assert [names[h] for h in heads] == ["sys0/acc0", "sys0/acc2", "sys0/acc5"]


def test_every_bad_failed_part_is_reported_at_once(toy):
    extra = ("failures:\n"
             "  nodes: [spine9, leaf0, leaf99]\n"
             "  links:\n"
             "    - leaf0 -- spine0\n"
             "    - leaf0 - spine0\n"
             "    - leaf0 -- leaf1\n"
             "    - sys00/nic0 -- spine7\n")
    with pytest.raises(DesignError) as info:
        toy(fat_tree(8, 32, extra=extra))
    problems = info.value.problems
    assert [(p.key_path, p.line) for p in problems] == [
        ("failures.nodes[0]", 6), ("failures.nodes[2]", 6), ("failures.links[1]", 9),
        ("failures.links[2]", 10), ("failures.links[3]", 11)]
    assert all(p.file.endswith("design.yaml") for p in problems)
    assert [p.message for p in problems] == [
        "no node named 'spine9'", "no node named 'leaf99'",
        "expected 'node -- node' with known names, got 'leaf0 - spine0'",
        "no link between leaf0 and leaf1",
        "expected 'node -- node' with known names, got 'sys00/nic0 -- spine7'"]
    assert str(info.value).count("\n") == 4  # one line per problem


def test_with_failures_names_every_unknown_part(toy):
    from topomodel.errors import UsageError
    from topomodel.fabric.failures import with_failures

    fabric = toy(fat_tree(8, 32))
    with pytest.raises(UsageError, match="no node named 'x'; no node named 'y'; no link"
                       " between leaf0 and leaf1"):
        with_failures(fabric, ["x", "spine0", "y"], ["leaf0 -- leaf1"])
    assert with_failures(fabric, ["spine0"]).links["failed"].any()


def test_failed_copies_share_only_the_views_that_ignore_failures(toy):
    from topomodel.analysis.training.studies import scale_scaleout
    from topomodel.fabric.failures import with_failures
    from topomodel.fabric.tables import (
        ignores_failures,
        link_weaker_Bps,
        weaker_direction_Bps,
    )
    from topomodel.routing.clos.live import Survivors, SurvivorShape
    from topomodel.routing.clos.view import ClosView

    fabric = toy(fat_tree(8, 32))
    one = with_failures(fabric, ["spine0"])
    two = with_failures(one, ["spine1"])  # a copy of a copy: still the same wiring
    shape = two.derived(SurvivorShape)  # built on a copy: there for the others too
    assert one.derived(SurvivorShape) is shape is fabric.derived(SurvivorShape)
    assert one.derived(ClosView) is two.derived(ClosView) is fabric.derived(ClosView)
    assert one.derived(Survivors) is not two.derived(Survivors)  # reads the failures
    assert one.derived(Survivors).alive.sum() > two.derived(Survivors).alive.sum()

    def failed_rows(f):
        return int(f.links["failed"].sum())

    assert [f.derived(failed_rows) for f in (fabric, one, two)] == [0, 16, 32]
    weaker = two.derived(link_weaker_Bps)
    assert weaker is fabric.derived(link_weaker_Bps) and not weaker.flags.writeable
    assert np.array_equal(weaker, weaker_direction_Bps(fabric.links, fabric.reverse_rows))
    shared = ignores_failures(lambda f: object())
    assert fabric.derived(shared) is one.derived(shared)
    faster = scale_scaleout(fabric, 2.0)  # other capacities: a fabric of its own
    assert faster.derived(shared) is not fabric.derived(shared)
    assert faster.derived(ClosView) is not fabric.derived(ClosView)


def _build(text):
    from topomodel.fabric.build import build_fabric
    from topomodel.inputs.design import load_design

    design, catalog = load_design("d.yaml", text=text)
    return build_fabric(design, catalog)


def _warnings(fabric):
    from topomodel.report.build import build_report

    return build_report(fabric, bisection_result=bisection(fabric, max_flow_node_limit=0)
                        ).warnings


def _realised(fabric, tier="leaf"):
    """Down over up bandwidth of every switch of the tier, from the link table."""
    links = fabric.links
    nodes = fabric.nodes
    switch = (nodes["tier"] == tier).to_numpy()
    src, dst = links["src"].to_numpy(), links["dst"].to_numpy()
    rate = (links["capacity_Bps"]).to_numpy()
    above = {"leaf": "spine", "spine": "core"}[tier]
    down = rate[switch[dst] & (links["tier"] == tier).to_numpy()].sum()
    up = rate[switch[src] & (links["tier"] == above).to_numpy()].sum()
    return down / up


H200_2TO1 = ("system: hgx-h200\naccelerators: 2048\nscaleout:\n  switch: tomahawk5\n"
             "  oversubscription: ['2:1']\n")


def test_default_unit_realises_the_asked_ratio():
    """2,048 H200 on Tomahawk 5 at 2:1 (issue 15): not units of 84 (1.52:1), but units
    that realise 2:1 over the whole leaf tier, with no warning."""
    fabric = _build(H200_2TO1)
    assert fabric.structure.scaleout.unit_systems == 64
    assert _realised(fabric) == pytest.approx(2.0)
    leaf = [t for t in fabric.clos_tiers if t.name == "leaf"]
    assert all(t.oversubscription == pytest.approx(2.0) for t in leaf)
    assert not [w for w in _warnings(fabric) if "realises" in w]


@pytest.mark.parametrize("extra", ["  unit: 84\n  partial_unit: true\n", ""])
def test_realised_ratio_is_the_asked_one_or_a_warning_names_both(extra):
    text = H200_2TO1 + extra
    fabric = _build(text)
    realised = _realised(fabric)
    leaf = next(t for t in fabric.clos_tiers if t.name == "leaf")
    assert leaf.oversubscription == pytest.approx(realised)  # the table shows what is built
    found = [w for w in _warnings(fabric) if "realises" in w]
    if realised == pytest.approx(2.0):
        assert not found
    else:
        assert realised == pytest.approx(2048 / 1344)
        assert found == [f"leaf tier realises {realised:.3g}:1 for the asked 2:1 (32 switches"
                         " of up to 84 down and 42 up ports): the last scalable unit has 4"
                         " of 84 systems"]


def test_an_explicit_unit_that_divides_is_accepted_and_realises_the_ratio():
    fabric = _build("system: hgx-h200\nsystems: 252\nscaleout:\n  switch: tomahawk5\n"
                    "  unit: 84\n  oversubscription: ['2:1']\n")
    assert fabric.structure.scaleout.unit_systems == 84
    assert _realised(fabric) == pytest.approx(2.0)
    assert count(fabric, "spine") == 14  # 24 leaves x 42 uplinks: 42 spread over 14


def test_5_to_1_that_whole_ports_cannot_give_warns_with_both_ratios():
    fabric = _build("system: dgx-h100\nsystems: 64\nscaleout:\n  switch: qm9700\n"
                    "  oversubscription: ['5:1']\n")
    realised = _realised(fabric)
    assert realised <= 5.0  # never more oversubscribed than asked
    (warning,) = [w for w in _warnings(fabric) if "realises" in w]
    assert f"realises {realised:.3g}:1 for the asked 5:1" in warning


def test_a_prime_uplink_count_does_not_become_that_many_spines():
    from topomodel.fabric.clos import SwitchPorts, plan_clos

    # 16 leaves of 32 ports at 5:1 need 7 uplinks each: 2 spines take them as 8
    plan = plan_clos(np.full(16, 32), np.repeat([0, 1], 8),
                     ports=SwitchPorts("s", 64, 50e9, 0), down_rate_Bps=50e9,
                     up_rate_Bps=50e9, tiers=None, oversubscription=(5.0,), pod_units=None)
    assert (plan.spines, plan.leaf_up) == (2, 8)
    # 23 hosts under a 64-port leaf at 1:1 take 23 uplinks: not 23 spines
    plan = plan_clos(np.full(8, 23), np.zeros(8, np.int64),
                     ports=SwitchPorts("s", 64, 50e9, 0), down_rate_Bps=50e9,
                     up_rate_Bps=50e9, tiers=None, oversubscription=(1.0,), pod_units=None)
    assert plan.spines < 23 and plan.leaf_up % plan.spines == 0


def test_a_fabric_smaller_than_its_unit_is_sized_for_the_unit_and_says_how_it_grows():
    from topomodel.report.build import build_report

    fabric = _build("system: dgx-h100\nsystems: 23\nscaleout:\n  switch: qm9700\n"
                    "  unit: 32\n")
    # one unit of 32 DGX: 8 rail leaves of 32 down + 32 up, 4 spines of 64 ports
    assert count(fabric, "leaf") == 8 and count(fabric, "spine") == 4
    leaf = next(t for t in fabric.clos_tiers if t.name == "leaf")
    assert (leaf.down_ports, leaf.up_ports) == (32, 32)
    report = build_report(fabric, bisection_result=bisection(fabric, max_flow_node_limit=0))
    assert report.data["growth"].startswith("23 of the 32 systems of one scalable unit")
    assert "grows to 32 systems on free leaf ports" in report.data["growth"]
    check_invariants(fabric)


def test_a_partial_last_pod_keeps_its_core_ports():
    # DGX B200 SuperPOD at 18 units of 32 (576 systems): 64 leaves a pod, so two full pods
    # and a partial third; the core is sized for every pod, partial ones included (with
    # pods rounded down it had 64 core switches, the 16-unit SuperPOD's, instead of 128)
    fabric = build_fabric(*load_design("b200-18su.yaml", text=(
        "name: b200 18 SU\nsystem: dgx-b200\nsystems: 576\nscaleout:\n"
        "  kind: fat_tree\n  switch: qm9700\n  unit: 32\n")))
    assert (count(fabric, "leaf"), count(fabric, "core")) == (144, 128)
    check_invariants(fabric)


@pytest.mark.parametrize("k", [4, 8])
def test_three_tier_cores_take_every_spine_uplink(toy, k):
    # k-ary fat-tree, k^3/4 hosts: k^2/4 cores with k down ports each (one to each of the
    # k pods), so the cores' down ports are exactly the spines' uplinks
    tiers = {t.name: t for t in toy(fat_tree(k, k**3 // 4)).clos_tiers}
    spine, core = tiers["spine"], tiers["core"]
    assert (core.switches, core.down_ports) == (k * k // 4, k)
    assert core.switches * core.down_ports == spine.switches * spine.up_ports


def test_spine_uplinks_round_up_to_the_asked_ratio(toy):
    # pods of 5 leaves (pod_units 5 of one leaf each) at 3:1 above the spines: 5/3 uplinks
    # round up to 2 (2.5:1 realised); rounding down would give 5:1, more than asked
    fabric = toy(fat_tree(8, 40, tiers=3, extra="  unit: 4\n  pod_units: 5\n"
                          "  oversubscription: ['1:1', '3:1']\n"))
    spine = next(t for t in fabric.clos_tiers if t.name == "spine")
    assert (spine.down_ports, spine.up_ports) == (5, math.ceil(5 / 3))
    assert spine.oversubscription == pytest.approx(2.5)
    assert spine.oversubscription <= spine.asked_oversubscription
    check_invariants(fabric)


def test_a_small_unit_puts_all_its_rails_on_one_leaf():
    from topomodel.fabric.clos import unit_groups

    # units of 2 systems x 8 NICs on 32-port leaves: 32 // 2 = 16 rails would fit, so all
    # 8 share one leaf group per unit (min(NICs, leaf ports // unit))
    sizes, units, rails = unit_groups(4, 2, 8, mode="rail", leaf_down_max=32)
    assert (sizes.tolist(), units.tolist(), rails) == ([16, 16], [0, 1], 8)


def _mesh(toy, systems):
    return toy(f"system: toy-mesh3\nsystems: {systems}\n", extra=MESH_CATALOG)


def test_a_full_mesh_spreads_each_accelerators_links_over_its_peers(toy):
    # 3 accelerators of 4 scale-up links each: 4 // (3 - 1) = 2 links to each peer, so
    # 3 pairs x 2 = 6 links a system and every accelerator uses its 4
    fabric = _mesh(toy, 2)
    assert fabric.structure.scaleup.mesh_links_per_pair == 2
    assert cables(fabric, "scaleup") == 2 * 3 * 2
    check_invariants(fabric)


def test_the_size_check_counts_a_full_mesh_s_pairs(toy, monkeypatch):
    import topomodel.limits

    # n (n - 1) / 2 = 3 mesh links per 3-accelerator system, 12 for 4 systems
    monkeypatch.setattr(topomodel.limits, "MAX_SCALEUP_LINKS", 11)
    with pytest.raises(DesignError, match=r"12 scale-up links \(full_mesh, 3 per system\)"):
        _mesh(toy, 4)
    monkeypatch.setattr(topomodel.limits, "MAX_SCALEUP_LINKS", 12)
    _mesh(toy, 4)


def test_a_wrapped_length_2_dimension_links_its_pair_once_with_both_directions_cables(toy):
    # a 2 x 4 torus with wraparound: each accelerator has two cables' worth in each of
    # the 2 dimensions (its one neighbour in the length-2 dimension both ways), so
    # 8 x 2 = 16 cables: 4 pairs of 2 in the length-2 dimension, 8 of 1 in the other
    fabric = toy("system: toy-host\nsystems: 8\nscaleup:\n  kind: torus\n  link: toy-link\n"
                 "  shape: [2, 4]\n")
    assert cables(fabric, "scaleup") == 8 * 2
    per_accelerator = np.bincount(fabric.links["src"], weights=fabric.links["cables"],
                                  minlength=len(fabric.nodes))[fabric.accelerators]
    assert set(per_accelerator) == {4}
    check_invariants(fabric)
