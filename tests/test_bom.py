"""Bill of materials, power and capex: closed-form sums, partial sums, real designs."""

import json
import textwrap
from pathlib import Path

import pytest

from topomodel.analysis.bom import bill_of_materials, part_power_W, power_summary
from topomodel.catalog import Nic, Optic, ScaleupSwitch, Switch, System, load_catalog
from topomodel.cli import main
from topomodel.design import load_design
from topomodel.fabric.build import build_fabric
from topomodel.report.build import build_report

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
FAT_TREE = "system: toy-host\nsystems: 32\nscaleout:\n  switch: toy-switch-8\n"

# A powered and priced toy: 1-accelerator hosts, 100 W radix-8 switches.
POWERED = """
accelerators:
  pw-acc:
    peak_flops: {bf16: "100 TFLOP/s"}
    hbm_capacity: "10 GB"
    hbm_bandwidth: "1 TB/s"
    power: "500 W"
    source: test fixture
    provenance: assumed
nics:
  pw-nic:
    ports: 1
    port_rate: "100 Gb/s /dir"
    protocols: [ethernet]
    power_typical: "20 W"
    price: "1000 USD"
    source: test fixture
    provenance: assumed
systems:
  pw-host:
    accelerator: pw-acc
    accelerators: 1
    scaleup: {kind: none}
    nic: pw-nic
    nic_count: 1
    power: "1 kW"
    price: "20000 USD"
    source: test fixture
    provenance: assumed
  pw-bare:
    accelerator: pw-acc
    accelerators: 1
    scaleup: {kind: none}
    nic: pw-nic
    nic_count: 1
    source: test fixture
    provenance: assumed
switches:
  pw-switch:
    protocol: ethernet
    ports: 8
    port_rate: "100 Gb/s /dir"
    power: "100 W"
    power_typical: "80 W"
    price: "5000 USD"
    source: test fixture
    provenance: assumed
"""
CABLED = """
systems: 32
scaleout: {switch: pw-switch}
layout:
  leaf_in_rack: true
  spine_cable: "20 m"
  cables: {leaf: dac-800g, spine: aoc-800g}
"""


@pytest.fixture
def powered(tmp_path):
    catalog = tmp_path / "powered.yaml"
    catalog.write_text(POWERED)

    def build(text):
        path = tmp_path / "design.yaml"
        path.write_text(textwrap.dedent(text))
        design, cat = load_design(path, extra_catalogs=[catalog])
        return build_fabric(design, cat)

    return build


def test_closed_form_power_of_a_small_fat_tree(powered):
    fabric = powered("system: pw-host" + CABLED)
    power = power_summary(bill_of_materials(fabric), fabric.accelerator_count)
    catalog = fabric.catalog
    dac, aoc = catalog.get("dac-800g", Optic), catalog.get("aoc-800g", Optic)
    # 32 hosts, 8 leaves + 4 spines; 32 leaf cables (DAC) and 32 spine cables (AOC),
    # each cable drawing its per-end figure at both ends
    optics = 32 * 2 * dac.power_W + 32 * 2 * aoc.power_W
    assert power.optics_W == pytest.approx(optics)
    assert power.switches_W == pytest.approx(12 * 100)  # the maximum, not the typical
    assert power.nics_W == pytest.approx(32 * 20)
    assert power.total_W == pytest.approx(32 * 1000 + 12 * 100 + optics)
    assert power.network_W == pytest.approx(12 * 100 + 32 * 20 + optics)
    assert power.network_in_systems_W == pytest.approx(32 * 20)  # the host covers its NIC
    assert power.accelerators_W == pytest.approx(32 * 500)
    assert power.total_W_per_accelerator == pytest.approx(power.total_W / 32)
    assert power.complete and not power.unknown
    assert power.typical_only == ("nic pw-nic",)
    by_tier = {t.tier: t for t in power.tiers}
    assert by_tier["leaf switches"].power_W + by_tier["spine switches"].power_W == (
        pytest.approx(1200))
    assert by_tier["NICs"].in_system and not by_tier["systems"].in_system
    # capex: systems and switches; the NIC is inside the system's price
    assert power.capex_USD == pytest.approx(32 * 20000 + 12 * 5000)
    assert power.unpriced == ("cable aoc-800g", "cable dac-800g")
    assert not power.capex_complete


def test_a_system_without_power_adds_its_parts_and_its_unknown_host(powered):
    fabric = powered("system: pw-bare" + CABLED)
    lines = bill_of_materials(fabric)
    power = power_summary(lines, fabric.accelerator_count)
    assert not any(line.in_system for line in lines)
    assert not power.complete
    assert power.unknown == ("system pw-bare",)
    assert power.total_W == pytest.approx(32 * 500 + 32 * 20 + 1200 + power.optics_W)


def test_a_partial_sum_is_never_called_a_total(toy):
    fabric = toy(FAT_TREE)
    report = build_report(fabric)
    power = report.data["power"]
    assert not power["complete"]
    assert {"system toy-host", "nic toy-nic", "accelerator toy-acc"} <= set(power["unknown"])
    summary = {row["item"]: row["value"] for row in report.tables[0].rows}
    assert summary["power"].startswith("partial sum ")
    assert "no power figure for: accelerator toy-acc" in summary["power"]
    assert any(w.startswith("power is a partial sum, not a total") and "nic toy-nic" in w
               for w in report.warnings)


def test_the_superpod_counts_its_switches(capsys):
    """DGX H100 SuperPOD: switch power is the switch count times the catalog figure."""
    design, catalog = load_design(EXAMPLES / "dgx-h100-superpod.yaml")
    fabric = build_fabric(design, catalog)
    lines = bill_of_materials(fabric)
    switch = catalog.get("qm9700", Switch)
    switches = [line for line in lines if line.category == "switch"]
    assert sum(line.count for line in switches) == 48  # 32 leaves + 16 spines
    figure, basis = part_power_W(switch)
    assert figure is not None and basis == "typical"
    power = power_summary(lines, fabric.accelerator_count)
    assert power.switches_W == pytest.approx(48 * figure)
    dgx = catalog.get("dgx-h100", System)
    assert power.systems_W == pytest.approx(127 * (dgx.power_W or 0))
    assert power.total_W == pytest.approx(power.systems_W + power.switches_W
                                          + power.optics_W)
    assert power.complete
    assert power.network_W > power.optics_W + power.switches_W  # NICs and NVSwitch too
    assert main(["build", str(EXAMPLES / "dgx-h100-superpod.yaml"), "--format",
                 "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["power"]["switches_W"] == pytest.approx(48 * figure)


@pytest.mark.parametrize("cls", [System, Switch, Nic, ScaleupSwitch, Optic])
def test_every_built_in_part_has_a_sourced_power_figure(cls):
    for entry in load_catalog().of_kind(cls):
        figure, basis = part_power_W(entry)
        assert figure is not None, entry.id
        key = "power" if basis == "max" else "power_typical"
        provenance = entry.provenance_of(key)
        if provenance == "assumed":  # an assumption says why, in the notes
            assert "assumed" in entry.notes, entry.id
        else:
            assert entry.source, entry.id


def _optics(fabric):
    return {(line.tier, line.model): line.count for line in bill_of_materials(fabric)
            if line.category in ("cable", "module")}


def test_a_bandwidth_whatif_recables_and_changes_the_power():
    """--scaleout-factor 4 on the SuperPOD: 1.6 Tb/s links get 1.6T parts, not 400G."""
    from topomodel.analysis.studies import scale_scaleout

    design, catalog = load_design(EXAMPLES / "dgx-h100-superpod.yaml")
    base = build_fabric(design, catalog)
    faster = scale_scaleout(base, 4.0)
    assert _optics(base) == {("leaf", "aoc-800g"): 1016, ("spine", "osfp-400g-dr4"): 2048}
    after = _optics(faster)
    rates = {catalog.get(model, Optic).rate_Bps for _, model in after}
    assert rates == {4 * 50e9}  # every scale-out part carries 1.6 Tb/s
    assert sum(after.values()) == 2 * 1016 + 2 * 1024  # a module at each end of each link
    before, now = (power_summary(bill_of_materials(f), f.accelerator_count)
                   for f in (base, faster))
    expected = sum(count * part_power_W(catalog.get(model, Optic))[0]
                   for (_, model), count in after.items())
    assert now.optics_W == pytest.approx(expected) and now.optics_W != before.optics_W
    assert now.total_W - before.total_W == pytest.approx(now.optics_W - before.optics_W)
    assert scale_scaleout(base, 4.0, recable=False).links["optic"].equals(base.links["optic"])


def test_a_whatif_with_no_part_for_its_rate_is_refused(capsys):
    from topomodel.analysis.studies import scale_scaleout
    from topomodel.errors import UsageError

    design, catalog = load_design(EXAMPLES / "dgx-h100-superpod.yaml")
    with pytest.raises(UsageError, match=r"^--scaleout-factor 8: no cable or module in the"
                       r" catalog carries 3200 Gb/s over 30 m \(leaf links\)"):
        scale_scaleout(build_fabric(design, catalog), 8.0)
    assert main(["step", str(EXAMPLES / "dgx-h100-superpod.yaml"), "--model", "llama3-8b",
                 "--tp", "8", "--scaleout-factor", "8"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["topomodel: error: --scaleout-factor 8: no cable or module in the catalog"
                   " carries 3200 Gb/s over 30 m (leaf links); add one to a catalog to model"
                   " this what-if"]
