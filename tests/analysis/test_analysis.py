"""Bill of materials, power and the optical link budget."""

import pytest

from topomodel.analysis.bom import bill_of_materials, power_summary
from topomodel.analysis.linkbudget import OCS_INSERTION_LOSS_DB, link_budgets
from topomodel.analysis.tiers import tier_summaries

FAT_TREE = "system: toy-host\nsystems: 32\nscaleout:\n  switch: toy-switch-8\n"


def test_bom_counts_every_part(toy):
    fabric = toy(FAT_TREE)
    lines = bill_of_materials(fabric)
    switches = [b for b in lines if b.category == "switch"]
    assert sorted(b.tier for b in switches) == ["leaf", "spine"]
    assert sum(b.count for b in switches) == 8 + 4
    assert sum(b.power_W or 0 for b in switches) == pytest.approx(12 * 100)
    assert sum(b.count for b in lines if b.category == "nic") == 32
    assert sum(b.count for b in lines if b.category == "accelerator") == 32
    assert sum(b.count for b in lines if b.category == "system") == 32
    cables = sum(b.count for b in lines if b.category == "cable")
    modules = sum(b.count for b in lines if b.category == "module")
    assert cables + modules // 2 == 32 + 32  # access links + leaf-spine links


def test_power_lists_what_is_unknown(toy):
    fabric = toy(FAT_TREE)
    power = power_summary(bill_of_materials(fabric), fabric.accelerator_count)
    assert "nic toy-nic" in power.unknown
    assert power.network_W >= 12 * 100


def test_layout_decides_copper_or_optics(toy):
    rack = toy(FAT_TREE + "layout:\n  leaf_in_rack: true\n  rack_cable: '2 m'\n")
    far = toy(FAT_TREE + "layout:\n  row_cable: '300 m'\n")

    def access_forms(fabric):
        access = fabric.links[fabric.links["tier"] == "leaf"]
        return {fabric.catalog.entries[o].form for o in access["optic"].astype(str)}

    assert access_forms(rack) == {"dac"}
    assert access_forms(far) <= {"transceiver", "lpo", "cpo"}
    # the subset above also holds for no links at all: check each access link's length is
    # the design's and its cable or module reaches that far
    for fabric, length_m in ((rack, 2.0), (far, 300.0)):
        access = fabric.links[fabric.links["tier"] == "leaf"]
        assert len(access) == 2 * 32  # one arc each way per host
        assert (access["length_m"] == length_m).all()
        reach = [fabric.catalog.entries[o].reach_m for o in access["optic"].astype(str)]
        assert min(reach) >= length_m
    assert access_forms(far)


def test_cable_that_reaches_nowhere_is_an_error(toy):
    from topomodel.errors import DesignError

    with pytest.raises(DesignError, match="no cable or module in the catalog reaches"):
        toy(FAT_TREE + "layout:\n  core_cable: '50 km'\n  spine_cable: '50 km'\n")


def test_link_budget_closed_form(toy):
    fabric = toy(FAT_TREE + "layout:\n  spine_cable: '400 m'\n  connectors: 2\n"
                 "  cables: {spine: toy-dr-100g}\n")
    budget = next(b for b in link_budgets(fabric) if b.tier == "spine")
    fibre = fabric.catalog.entries["os2"]
    expected = 0.4 * fibre.loss_dB_per_km + 2 * fibre.connector_loss_dB
    assert budget.channel_loss_dB == pytest.approx(expected)
    assert budget.margin_dB == pytest.approx(3.0 - expected)
    assert budget.closes


def test_link_that_does_not_close(toy):
    fabric = toy(FAT_TREE + "layout:\n  spine_cable: '450 m'\n  connectors: 4\n"
                 "  cables: {spine: toy-dr-100g}\n")
    budget = next(b for b in link_budgets(fabric) if b.tier == "spine")
    assert budget.closes is False and budget.margin_dB < 0


def test_links_through_an_ocs_get_an_optic_whose_budget_covers_it():
    from topomodel.fabric.build import build_fabric
    from topomodel.inputs.design import load_design

    design, catalog = load_design("examples/tpu-v4-pod.yaml")
    (budget,) = link_budgets(build_fabric(design, catalog))
    # fibre + 2 connector pairs + the OCS: 3.52 dB, beyond a DR4's 3.0 dB maximum
    assert budget.ocs and budget.channel_loss_dB == pytest.approx(
        0.05 * 0.4 + 2 * 0.75 + OCS_INSERTION_LOSS_DB)
    assert budget.closes and budget.margin_dB > 0 and budget.optic != "osfp-400g-dr4"


def test_ocs_adds_its_insertion_loss(toy):
    direct = toy("system: toy-host\nsystems: 8\nscaleup:\n  kind: torus\n  link: toy-link\n"
                 "  shape: [8]\nlayout:\n  cables: {scaleup: toy-dr-100g}\n")
    through = toy("system: toy-host\nsystems: 8\nscaleup:\n  kind: torus\n  link: toy-link\n"
                  "  shape: [8]\n  ocs: true\nlayout:\n  cables: {scaleup: toy-dr-100g}\n")
    a, b = link_budgets(direct)[0], link_budgets(through)[0]
    assert b.channel_loss_dB - a.channel_loss_dB == pytest.approx(OCS_INSERTION_LOSS_DB)


def test_ports_free_counts_capacity_with_mixed_port_rates():
    from topomodel.fabric.build import build_fabric
    from topomodel.inputs.design import load_design

    # Tomahawk 5 leaves: 64 x 400G down (breakout), 32 x 800G up: every port slot is used
    text = ("system: dgx-h100\nsystems: 64\nscaleout:\n  switch: tomahawk5\n"
            "  port_rate: '400 Gb/s /dir'\n  uplink_rate: '800 Gb/s /dir'\n")
    design, catalog = load_design("mixed.yaml", text=text)
    tiers = {t.name: t for t in tier_summaries(build_fabric(design, catalog))}
    assert tiers["leaf"].ports_used == 8 * (64 + 32)  # cables, each at its own rate
    assert tiers["leaf"].ports_free == 0  # not 8 x 128 - 768 = 256 ports at 400G
    assert tiers["spine"].ports_free == 0


def test_tier_summary_ports_and_capacity(toy):
    fabric = toy(FAT_TREE)
    tiers = {t.name: t for t in tier_summaries(fabric)}
    assert tiers["leaf"].switches == 8 and tiers["leaf"].ports_used == 8 * 8
    assert tiers["leaf"].ports_free == 0
    assert tiers["leaf"].per_accelerator_Bps == pytest.approx(12.5e9)
    assert tiers["leaf"].oversubscription == pytest.approx(1.0)
    assert tiers["spine"].links == 32


@pytest.mark.parametrize("name", ["tpu-v4-pod", "dgx-h100-superpod", "cloudmatrix384",
                                  "dual-plane-ethernet"])
def test_link_budget_classes_are_the_group_by_over_the_optical_rows(name):
    """The classes and link counts of the budgets are what a pandas group-by of the
    fibre rows by tier, optic, length and medium gives (both directions counted once),
    and a copy with failed links reads the same classes without counting them again."""
    import numpy as np

    from topomodel.fabric.build import build_fabric
    from topomodel.fabric.cabling import cable_classes
    from topomodel.inputs.design import load_design

    fabric = build_fabric(*load_design(f"examples/{name}.yaml"))
    links = fabric.links
    optical = links[links["medium"].isin(["smf", "mmf", "ocs"])]
    grouped = optical.groupby(["tier", "optic", "length_m", "medium"],
                              observed=True)["cables"].sum() // 2
    expected = sorted((str(t), str(o), float(m), md == "ocs", int(n))
                      for (t, o, m, md), n in grouped.items())
    budgets = link_budgets(fabric)
    assert sorted((b.tier, b.optic, b.length_m, b.ocs, b.links) for b in budgets) == expected
    assert expected
    failed = fabric.with_failed(np.ones(len(links), bool))
    assert failed.derived(cable_classes) is fabric.derived(cable_classes)
    assert link_budgets(failed) == budgets


def test_a_budget_with_no_loss_to_check_is_reach_only():
    """An AOC has no fibre of its own in the catalog: within reach its budget is 'reach
    only' (None), not a closed budget (a part beyond its reach is refused by the build)."""
    from topomodel.fabric.build import build_fabric
    from topomodel.inputs.design import load_design

    budgets = {b.tier: b for b in link_budgets(build_fabric(*load_design(
        "examples/dgx-h100-superpod.yaml")))}
    assert budgets["leaf"].optic == "aoc-800g" and budgets["leaf"].closes is None
    assert budgets["spine"].closes is True
