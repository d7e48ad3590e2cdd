import textwrap

import pytest

from topomodel.errors import CatalogError, UsageError
from topomodel.inputs.catalog import builtin_catalog_files, load_catalog
from topomodel.inputs.parts import PROVENANCES, Accelerator, Optic, ScaleupLink, Switch, System


@pytest.fixture(scope="module")
def catalog():
    return load_catalog()


def write(tmp_path, text, name="user.yaml"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def test_builtin_catalog_loads_with_every_entry_sourced(catalog):
    assert len(builtin_catalog_files()) >= 6
    for entry in catalog.entries.values():
        assert entry.source.strip(), entry.id
        assert entry.provenance in PROVENANCES
        assert set(entry.figure_provenance.values()) <= set(PROVENANCES)


@pytest.mark.parametrize(
    "ident",
    ["a100-sxm-80gb", "h100-sxm", "b200", "mi300x", "mi350x", "tpu-v4", "tpu-v5p",
     "trainium2", "ascend-910c", "ascend-950dt", "nvlink3", "nvlink4", "nvlink5",
     "qm9700", "q3400", "sn5600", "tomahawk5", "tomahawk6", "connectx-7", "connectx-8",
     "bluefield-3", "thor2", "pollara-400", "hgx-h100", "hgx-b200", "gb200-nvl72",
     "mi300x-8gpu", "cloudmatrix384-node", "os2", "nvswitch2", "dgx-a100", "qm8700",
     "megatron-gpt-1t", "accelerator-llama3", "switch-azure", "optic-cpo"],
)
def test_required_entries_exist(catalog, ident):
    assert ident in catalog


def test_direction_semantics_are_normalised_to_per_direction(catalog):
    # NVLink 4: 900 GB/s bidir per GPU = 18 links x 25 GB/s per direction.
    h100 = catalog.get("h100-sxm", Accelerator)
    link = catalog.get(h100.scaleup_link, ScaleupLink)
    assert h100.scaleup_link_count * link.link_rate_Bps == pytest.approx(450e9)
    # QM9700's 51.2 Tb/s is bidirectional; Tomahawk 5's is one way: same per-direction sum.
    qm9700 = catalog.get("qm9700", Switch)
    th5 = catalog.get("tomahawk5", Switch)
    assert qm9700.capacity_per_direction_Bps == pytest.approx(25.6e12 / 8)
    assert th5.capacity_per_direction_Bps == pytest.approx(51.2e12 / 8)
    assert qm9700.radix_at(25e9) == 128  # 200G split mode


def test_systems_wire_their_links(catalog):
    hgx = catalog.get("hgx-h100", System)
    assert hgx.scaleup.links_per_switch == (5, 5, 4, 4)
    nvl72 = catalog.get("gb200-nvl72", System)
    assert nvl72.accelerators == 72
    assert nvl72.scaleup.switches == 18


def test_weak_figures_stay_marked(catalog):
    assert catalog.entries["mi325x"].provenance in ("secondary", "unverified")
    assert catalog.get("ascend-910b", Accelerator).provenance == "secondary"


def test_optic_energy_per_bit_is_derived(catalog):
    dr4 = catalog.get("osfp-400g-dr4", Optic)
    assert dr4.energy_pJ_per_bit == pytest.approx(9 / 400 * 1000)


def test_user_catalog_overrides_are_reported(tmp_path):
    path = write(tmp_path, """
        switches:
          qm9700:
            protocol: infiniband
            ports: 64
            port_rate: "400 Gb/s /dir"
            source: my lab
            provenance: assumed
    """)
    catalog = load_catalog([path])
    assert [o.id for o in catalog.overrides] == ["qm9700"]
    assert catalog.entries["qm9700"].source == "my lab"


def test_unknown_ids_suggest_close_ones(catalog):
    with pytest.raises(UsageError, match="did you mean 'qm9700'"):
        catalog.get("qm9770", Switch)
    with pytest.raises(UsageError, match="is a switch, not a accelerator"):
        catalog.get("qm9700", Accelerator)


BASE = """
    accelerators:
      chip:
        peak_flops: {bf16: "100 TFLOP/s"}
        hbm_capacity: "10 GB"
        hbm_bandwidth: "1 TB/s"
        source: test
        provenance: assumed
"""


@pytest.mark.parametrize(
    ("text", "line", "key", "message"),
    [
        (BASE.replace("hbm_capacity", "hbm_capacty"), 5, "accelerators.chip.hbm_capacty",
         "unknown key; did you mean 'hbm_capacity'"),
        (BASE.replace('"10 GB"', "10"), 5, "accelerators.chip.hbm_capacity",
         "bare number"),
        (BASE.replace('"10 GB"', '"10 GB/s"'), 5, "accelerators.chip.hbm_capacity",
         "is a rate, not a size"),
        (BASE.replace('"10 GB"', '"0 GB"'), 5, "accelerators.chip.hbm_capacity",
         "greater than zero"),
        (BASE.replace("bf16", "bf61"), 4, "accelerators.chip.peak_flops.bf61",
         "did you mean 'bf16'"),
        (BASE.replace("assumed", "rumour"), 8, "accelerators.chip.provenance",
         "expected one of"),
        (BASE.replace("        source: test\n", ""), 3, "accelerators.chip",
         "missing required key 'source'"),
        (BASE + "        scaleup_link: nvlink9\n        scaleup_link_count: 2\n", 9,
         "accelerators.chip.scaleup_link", "unknown scaleup_link id 'nvlink9'"),
        (BASE.replace("accelerators:", "accelerator:"), 2, "accelerator",
         "unknown entry kind; did you mean 'accelerators'"),
        (BASE.replace("chip:", "Chip X:"), 3, "accelerators['Chip X']", "an id is lower case"),
        (BASE + "        figure_provenance: {powr: assumed}\n", 9,
         "accelerators.chip.figure_provenance", "not a key of this entry"),
        ("switches:\n  s:\n    protocol: infiniband\n    ports: 64\n"
         "    port_rate: \"400 Gb/s /dir\"\n    capacity: \"51.2 Tb/s /dir\"\n"
         "    source: t\n    provenance: assumed\n", 6, "switches.s.capacity",
         "looks like a bidirectional total"),
        ("switches:\n  s:\n    protocol: infiniband\n    ports: 64\n"
         "    port_rate: \"400 Gb/s\"\n    source: t\n    provenance: assumed\n", 5,
         "switches.s.port_rate", "must say its direction"),
        ("- just a list\n", 1, "", "a catalog file is a mapping"),
    ],
)
def test_each_error_names_file_line_and_key(tmp_path, text, line, key, message):
    path = write(tmp_path, text)
    with pytest.raises(CatalogError, match=message) as info:
        load_catalog([path], builtin=False)
    problem = info.value.problems[0]
    assert (problem.file, problem.line, problem.key_path) == (str(path), line, key)


def test_all_problems_of_a_file_are_reported_together(tmp_path):
    text = BASE.replace('"10 GB"', "10").replace('"1 TB/s"', '"1 TB"').replace(
        "assumed", "rumour")
    with pytest.raises(CatalogError) as info:
        load_catalog([write(tmp_path, text)], builtin=False)
    assert len(info.value.problems) == 3


def test_system_links_must_add_up(tmp_path):
    text = """
        systems:
          box:
            accelerator: h100-sxm
            accelerators: 8
            scaleup: {kind: switched, switch: nvswitch3, switches: 4,
                      links_per_switch: [5, 5, 4, 3]}
            source: test
            provenance: assumed
    """
    with pytest.raises(CatalogError, match="adds up to 17 links per accelerator"):
        load_catalog([write(tmp_path, text)])


def test_torus_shape_must_hold_the_accelerators(tmp_path):
    text = """
        systems:
          cube:
            accelerator: tpu-v4
            accelerators: 64
            scaleup: {kind: torus, shape: [4, 4, 3]}
            source: test
            provenance: assumed
    """
    with pytest.raises(CatalogError, match=r"holds 48 accelerators, not 64"):
        load_catalog([write(tmp_path, text)])


def test_a_misspelt_required_key_is_said_once(tmp_path):
    path = write(tmp_path, """
        nics:
          mynic:
            protocol: [infiniband]
            port_rate: "400 Gb/s /dir"
            ports: 1
            source: my lab
            provenance: assumed
    """)
    with pytest.raises(CatalogError) as failed:
        load_catalog([path])
    messages = [p.message for p in failed.value.problems]
    assert messages == ["unknown key; did you mean 'protocols'?"]


@pytest.mark.parametrize(("nic", "switch", "gbps"), [("intel-i350", "sn2201", 1),
                                                    ("intel-x710", "tx4810", 10)])
def test_lab_nics_run_at_their_own_rate(tmp_path, nic, switch, gbps):
    # the 1 and 10 GbE NICs a lab cluster carries: a design needs no port_rate to run a
    # faster card slowly, and the shipped 1 GbE example names the 1 GbE NIC
    from topomodel.fabric.build import build_fabric
    from topomodel.inputs.design import load_design
    from topomodel.inputs.parts import Nic

    design = tmp_path / "lab.yaml"
    design.write_text(f"name: lab\nsystem: a100-pcie-2gpu\nsystems: 4\nscaleout:\n"
                      f"  kind: fat_tree\n  switch: {switch}\n  nic: {nic}\n"
                      "  nics_per_system: 1\n  rail_optimized: false\n")
    d, catalog = load_design(design)
    part = catalog.get(nic, Nic)
    assert part.port_rate_Bps == gbps * 1e9 / 8 and "ethernet" in part.protocols
    fabric = build_fabric(d, catalog)
    leaf = fabric.links[fabric.links["tier"] == "leaf"]
    assert (leaf["capacity_Bps"] == gbps * 1e9 / 8).all() and len(leaf) == 2 * 4
    example, _ = load_design("examples/small-2x2-a100-1gbe.yaml")
    assert example.scaleout.nic == "intel-i350" and example.scaleout.port_rate_Bps is None
