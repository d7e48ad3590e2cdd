"""Bill of materials, power and capex: closed-form sums, partial sums, real designs."""

import json
import textwrap
from pathlib import Path

import pytest

from topomodel.analysis.bom import bill_of_materials, part_power_W, power_summary
from topomodel.cli import main
from topomodel.fabric.build import build_fabric
from topomodel.inputs.catalog import load_catalog
from topomodel.inputs.design import load_design
from topomodel.inputs.parts import Nic, Optic, ScaleupSwitch, Switch, System
from topomodel.report.build import build_report

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
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
    source: test fixture
    provenance: assumed
optics:
  pw-dac-100g:
    medium: copper
    form: dac
    rate: "100 Gb/s /dir"
    reach: "3 m"
    power: "0.1 W"
    source: test fixture
    provenance: assumed
  pw-aoc-100g:
    medium: mmf
    form: aoc
    rate: "100 Gb/s /dir"
    reach: "30 m"
    power: "2 W"
    source: test fixture
    provenance: assumed
prices:
  pw-nic: {price: "1000 USD", date: "2026", source: test fixture, provenance: secondary}
  pw-host:
    price: "20000 USD"
    range: ["15000 USD", "30000 USD"]
    date: "2026-01"
    source: test fixture
    provenance: assumed
    notes: a range to test the low and high sums
  pw-switch: {price: "5000 USD", date: "2026", source: test fixture, provenance: secondary}
"""
CABLED = """
systems: 32
scaleout: {switch: pw-switch}
layout:
  leaf_in_rack: true
  spine_cable: "20 m"
  cables: {leaf: pw-dac-100g, spine: pw-aoc-100g}
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
    dac, aoc = catalog.get("pw-dac-100g", Optic), catalog.get("pw-aoc-100g", Optic)
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
    assert power.capex_low_USD == pytest.approx(32 * 15000 + 12 * 5000)
    assert power.capex_high_USD == pytest.approx(32 * 30000 + 12 * 5000)
    assert power.network_capex_USD == pytest.approx(12 * 5000)  # the NICs are in the hosts
    assert power.assumed_prices == ("system pw-host",)
    assert by_tier["leaf switches"].capex_USD + by_tier["spine switches"].capex_USD == (
        pytest.approx(12 * 5000))
    assert by_tier["systems"].capex_high_USD == pytest.approx(32 * 30000)
    assert power.unpriced == ("cable pw-aoc-100g", "cable pw-dac-100g")
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
    from topomodel.analysis.training.studies import scale_scaleout

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
    from topomodel.analysis.training.studies import scale_scaleout
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


@pytest.mark.parametrize(("example", "part", "links"), [
    ("small-4x8-l40s-25gbe", "sfp28-25g-sr", 4 * 1),  # 4 servers x 1 NIC port
    ("small-16x8-a100-100gbe-roce", "qsfp28-100g-sr4", 16 * 2),  # 16 servers x 2 NICs
    ("small-2x2-a100-1gbe", "cat6-1000base-t", 2 * 1),  # 2 servers x 1 NIC port
])
def test_small_examples_get_a_part_of_their_rate_once_per_link_end(example, part, links):
    """One leaf, so every cabled link is a NIC-leaf link: a module at each of its two
    ends (a cable assembly once), its power the part's figure per end times the ends."""
    from topomodel.fabric.cabling import MAX_PART_TO_LINK_RATE

    design, catalog = load_design(EXAMPLES / f"{example}.yaml")
    fabric = build_fabric(design, catalog)
    optic = catalog.get(part, Optic)
    cabled = [ln for ln in bill_of_materials(fabric) if ln.category in ("cable", "module")]
    ends = 1 if optic.form in ("dac", "acc", "aec", "aoc", "twisted_pair") else 2
    assert [(ln.tier, ln.model, ln.count) for ln in cabled] == [("leaf", part, links * ends)]
    assert cabled[0].power_W == pytest.approx(links * 2 * (optic.power_W or 0.0))
    leaf = fabric.links[fabric.links["tier"] == "leaf"]
    assert (leaf["rate_Bps"] <= optic.rate_Bps).all()
    assert (optic.rate_Bps <= MAX_PART_TO_LINK_RATE * leaf["rate_Bps"]).all()


@pytest.mark.parametrize("length_m", [1.0, 2.0, 5.0, 30.0, 100.0, 500.0, 2000.0])
@pytest.mark.parametrize("rate_Gbps", [1, 10, 25, 100, 200, 224, 400, 800])
def test_a_link_never_gets_a_part_above_the_breakout_limit(rate_Gbps, length_m):
    from topomodel.fabric.cabling import MAX_PART_TO_LINK_RATE, choose_optic

    rate = rate_Gbps * 1e9 / 8
    chosen = choose_optic(load_catalog(), rate, length_m)
    if chosen is not None:
        assert rate <= chosen.rate_Bps <= MAX_PART_TO_LINK_RATE * rate
        assert chosen.reach_m >= length_m
    if rate_Gbps == 25 and length_m <= 100:
        assert chosen is not None and chosen.id == "sfp28-25g-sr"
    if rate_Gbps == 10 and length_m <= 400:
        assert chosen is not None and chosen.id == "sfpp-10g-sr"


SLOW_PORTS = """
nics:
  nic-40g:
    ports: 1
    port_rate: "40 Gb/s /dir"
    protocols: [ethernet]
    source: test fixture
    provenance: assumed
switches:
  switch-40g:
    protocol: ethernet
    ports: 8
    port_rate: "40 Gb/s /dir"
    source: test fixture
    provenance: assumed
"""


def test_a_rate_no_part_serves_is_one_design_error(tmp_path, capsys):
    """40 GbE: the catalog has no part of 40 to 80 Gb/s, and a 25G or 100G part does
    not fit the port; the error names the file, the line and the length key."""
    from topomodel.errors import DesignError

    (tmp_path / "slow.yaml").write_text(SLOW_PORTS)
    path = tmp_path / "design.yaml"
    path.write_text("system: pw-host\nsystems: 4\ncatalogs: [slow.yaml, powered.yaml]\n"
                    "scaleout: {switch: switch-40g, nic: nic-40g}\n")
    (tmp_path / "powered.yaml").write_text(POWERED)
    message = ("no cable or module in the catalog reaches 30 m at 40 Gb/s (leaf links;"
               " only parts of 1 to 2x the link rate fit its port); add a part for this"
               " rate to a catalog")
    design, catalog = load_design(path)
    with pytest.raises(DesignError, match=r"layout\.row_cable: no cable or module"):
        build_fabric(design, catalog)
    assert main(["build", str(path)]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        f"topomodel: error: {path}:1: layout.row_cable: {message}"]


def test_a_named_part_far_above_the_link_rate_is_refused(tmp_path):
    from topomodel.errors import DesignError

    text = (EXAMPLES / "small-4x8-l40s-25gbe.yaml").read_text()
    path = tmp_path / "design.yaml"
    path.write_text(text + "layout:\n  cables: {leaf: aoc-800g}\n")
    design, catalog = load_design(path)
    with pytest.raises(DesignError, match=r"layout\.cables\.leaf: aoc-800g \(800 Gb/s, reach"
                       r" 30 m\) cannot carry leaf links of 25 Gb/s over 30 m \(only parts"
                       r" of 1 to 2x the link rate fit its port\)"):
        build_fabric(design, catalog)


def test_a_whatif_rate_between_parts_takes_the_next_faster_part():
    """--scaleout-factor 2.5 on 1 GbE: 2.5 Gb/s has no part within 2x; the what-if's
    rate is hypothetical, so it gets the lowest-power faster part instead of failing."""
    from topomodel.analysis.training.studies import scale_scaleout
    from topomodel.fabric.cabling import choose_optic

    design, catalog = load_design(EXAMPLES / "small-2x2-a100-1gbe.yaml")
    faster = scale_scaleout(build_fabric(design, catalog), 2.5)
    assert choose_optic(catalog, 2.5e9 / 8, 30.0) is None
    expected = choose_optic(catalog, 2.5e9 / 8, 30.0, max_ratio=None)
    assert expected is not None and _optics(faster) == {("leaf", expected.id): 2 * 2}


@pytest.mark.parametrize("name", ["dgx-h100-superpod", "gb200-nvl72-cluster", "tpu-v4-pod",
                                  "cloudmatrix384", "dual-plane-ethernet",
                                  "small-2x2-a100-1gbe"])
def test_cables_per_optic_is_the_group_by_over_the_labels(name):
    """The codes' bincount gives what a pandas group-by over the link rows with a part
    gives (every cabled tier and part, both directions counted once)."""
    from topomodel.analysis.bom import cables_per_optic
    from topomodel.fabric.tables import labels

    fabric = build_fabric(*load_design(Path("examples") / f"{name}.yaml"))
    links = fabric.links
    cabled = links[labels(links["optic"]) != ""]
    per_optic = cabled.groupby(["tier", "optic"], observed=True)["cables"].sum() // 2
    expected = {key: int(n) for key, n in per_optic.items() if n}
    assert cables_per_optic(fabric) == expected
    assert expected or name == "small-2x2-a100-1gbe"


def test_network_power_without_a_figure_is_a_partial_sum_not_zero():
    from topomodel.report.power import network_headline, tier_rows

    tiers = [{"tier": "systems", "parts": 4, "power_W": 4e4, "complete": True,
              "in_system": False},
             {"tier": "NICs", "parts": 32, "power_W": 800.0, "complete": True,
              "in_system": True},
             {"tier": "leaf switches", "parts": 2, "power_W": 0.0, "complete": False,
              "in_system": False}]
    power = {"switches_W": 0.0, "nics_W": 800.0, "scaleup_switches_W": 0.0,
             "optics_W": 0.0, "network_W": 800.0, "network_W_per_accelerator": 25.0,
             "network_in_systems_W": 800.0, "tiers": tiers}
    text = network_headline(power)
    assert text.startswith("partial sum 800 W") and text.endswith(
        "no figure for: leaf switches")
    assert [row["power"] for row in tier_rows(power)] == ["40 kW", "800 W", "?"]
    tiers[2].update(power_W=0.0, complete=True)  # a switch with a figure of 0 W is known
    assert not network_headline(power).startswith("partial")
