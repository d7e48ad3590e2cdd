from pathlib import Path

import pytest

from topomodel.errors import DesignError
from topomodel.inputs.design import load_design


def problems(tmp_path, text):
    path = tmp_path / "d.yaml"
    path.write_text(text)
    with pytest.raises(DesignError) as info:
        load_design(path)
    return [(p.line, p.key_path, p.message) for p in info.value.problems]


@pytest.mark.parametrize(
    ("text", "line", "key", "message"),
    [
        ("system: dgx-h1000\nsystems: 4\n", 1, "system", "did you mean 'dgx-h100'"),
        ("system: dgx-h100\n", 1, "", "give exactly one of 'systems' and 'accelerators'"),
        ("system: dgx-h100\naccelerators: 12\n", 2, "accelerators", "not a whole number"),
        ("system: dgx-h100\nsystems: 4\nscaleout:\n  switch: qm9700\n  oversubscription: [2]\n",
         5, "scaleout.oversubscription[0]", "expected an oversubscription 'down:up'"),
        ("system: dgx-h100\nsystems: 4\nscaleout:\n  switch: qm9700\n"
         "  oversubscription: ['1:2']\n", 5, "scaleout.oversubscription[0]",
         "more uplink than downlink"),
        ("system: dgx-h100\nsystems: 4\nscaleout:\n  swich: qm9700\n", 4, "scaleout.swich",
         "did you mean 'switch'"),
        ("system: dgx-h100\nsystems: 4\nscaleout:\n  switch: qm9700\n  port_rate: '100 Gb/s'\n",
         5, "scaleout.port_rate", "must say its direction"),
        ("system: dgx-h100\nsystems: 4\nscaleout:\n  switch: qm9700\n"
         "  port_rate: '100 Gb/s /dir'\n", 5, "scaleout.port_rate", "no ports at 100 Gb/s"),
        ("system: dgx-h100\nsystems: 4\nlayout:\n  row_cable: 30\n", 4, "layout.row_cable",
         "bare number"),
        ("system: dgx-h100\nsystems: 4\nlayout:\n  cables: {leaf: dac-801g}\n", 4,
         "layout.cables.leaf", "unknown optic id 'dac-801g'"),
        ("system: tpu-v4-cube\nsystems: 2\nscaleup:\n  kind: torus\n  shape: [4, 4, 6]\n", 5,
         "scaleup.shape", "must be a multiple of the system's"),
        ("system: dgx-h100\nsystems: 4\nsystems: 5\n", 3, "systems", "duplicate key"),
    ],
)
def test_design_errors_name_line_and_key(tmp_path, text, line, key, message):
    found = problems(tmp_path, text)
    assert any(p[0] == line and p[1] == key and message in p[2] for p in found), found


def test_all_problems_reported_together(tmp_path):
    found = problems(tmp_path, "system: dgx-h100\nsystems: 0\nscaleout:\n  planes: two\n"
                     "  switch: qm9700\n")
    assert {p[1] for p in found} == {"systems", "scaleout.planes"}


def test_dozen_line_superpod_defaults(tmp_path):
    path = tmp_path / "d.yaml"
    path.write_text("system: dgx-h100\nsystems: 32\nscaleout:\n  switch: qm9700\n")
    design, _ = load_design(path)
    assert design.scaleout.kind == "fat_tree" and design.scaleout.rail_optimized
    assert design.layout.rack_cable_m == 2.0


def test_an_input_error_without_a_problem_cannot_be_made():
    from topomodel.errors import CatalogError, InputError, Problem

    for error in (InputError, DesignError, CatalogError):
        with pytest.raises(TypeError, match=f"{error.__name__} needs at least one Problem"):
            error([])
        with pytest.raises(TypeError):
            error(iter(()))
    one = DesignError([Problem("d.yaml", 3, "systems", "must be at least 1")])
    assert str(one) == "d.yaml:3: systems: must be at least 1"


def test_in_system_switch_chip_too_small_for_its_system_is_a_catalog_problem(tmp_path):
    from topomodel.errors import CatalogError

    catalog = tmp_path / "small-chip.yaml"
    catalog.write_text(
        "scaleup_switches:\n"
        "  tiny-chip:\n"
        "    ports: 8\n"
        "    port_rate: '25 GB/s /dir'\n"
        "    source: test\n"
        "    provenance: assumed\n"
        "systems:\n"
        "  tiny-box:\n"
        "    accelerator: h100-sxm\n"
        "    accelerators: 8\n"
        "    scaleup: {kind: switched, switch: tiny-chip, switches: 4,"
        " links_per_switch: [5, 4, 4, 5]}\n"
        "    source: test\n"
        "    provenance: assumed\n")
    design = tmp_path / "d.yaml"
    design.write_text(f"catalogs: [{catalog.name}]\nsystem: tiny-box\nsystems: 2\n")
    with pytest.raises(CatalogError) as info:
        load_design(design)
    [problem] = info.value.problems
    assert problem.file.endswith("small-chip.yaml") and problem.line == 8
    assert problem.key_path == "systems.tiny-box.scaleup.links_per_switch"
    assert problem.message == "8 accelerators x 5 links need 40 ports of tiny-chip, which has 8"


def test_every_problem_of_a_file_at_once_with_file_line_and_key(tmp_path):
    """A refused key, an unknown id and three inconsistencies: all five in one error,
    the consistency checks run on what remains once the refused keys are left out."""
    text = ("system: dgx-h100\naccelerators: 100\nscaleout:\n  switch: qm9700\n"
            "  nic: thor2\n  port_rate: '800 Gb/s /dir'\n  tierz: 2\n"
            "layout:\n  cables: {leaf: dac-801g}\n")
    path = tmp_path / "d.yaml"
    path.write_text(text)
    with pytest.raises(DesignError) as info:
        load_design(path)
    lines = str(info.value).splitlines()
    expected = [f"{path}:7: scaleout.tierz: unknown key",
                f"{path}:9: layout.cables.leaf: unknown optic id 'dac-801g'",
                f"{path}:2: accelerators: 100 accelerators is not a whole number",
                f"{path}:5: scaleout.nic: thor2 speaks ethernet only; qm9700 is an infiniband",
                f"{path}:6: scaleout.port_rate: 800 Gb/s per direction exceeds thor2's"
                " 1 x 400 Gb/s"]
    for start in expected:
        assert sum(line.startswith(start) for line in lines) == 1, (start, lines)


@pytest.mark.parametrize(("text", "line", "key", "message"), [
    # the system's own NIC (ConnectX-7 speaks both) on an Ethernet switch is fine; Thor2
    # on InfiniBand is not, and the problem names the key that chose it
    ("system: dgx-h100\nsystems: 4\nscaleout:\n  switch: qm9700\n  nic: thor2\n", 5,
     "scaleout.nic", "thor2 speaks ethernet only; qm9700 is an infiniband switch"),
    ("system: mi350x-8gpu\nsystems: 4\nscaleout:\n  switch: qm9700\n", 4, "scaleout.switch",
     "speaks ethernet only; qm9700 is an infiniband switch"),
    # 800G per direction on a 1 x 400G NIC, on a switch that has 800G ports
    ("system: dgx-h100\nsystems: 4\nscaleout:\n  switch: tomahawk5\n"
     "  port_rate: '800 Gb/s /dir'\n", 5, "scaleout.port_rate",
     "800 Gb/s per direction exceeds connectx-7's 1 x 400 Gb/s"),
    ("system: dgx-h100\nsystems: 4\nscaleout:\n  switch: tomahawk5\n  planes: 2\n"
     "  port_rate: '400 Gb/s /dir'\n", 6, "scaleout.port_rate",
     "2 planes x 400 Gb/s per direction exceeds connectx-7's 1 x 400 Gb/s"),
])
def test_semantic_checks_of_nic_and_switch(tmp_path, text, line, key, message):
    found = problems(tmp_path, text)
    assert any(p[0] == line and p[1] == key and message in p[2] for p in found), found


def test_a_nic_that_matches_its_switch_loads(tmp_path):
    path = tmp_path / "d.yaml"
    path.write_text("system: dgx-h100\nsystems: 4\nscaleout:\n  switch: tomahawk5\n"
                    "  nic: thor2\n  port_rate: '400 Gb/s /dir'\n")
    design, _ = load_design(path)
    assert design.scaleout.nic == "thor2"


def test_too_many_planes_is_said_at_planes_before_the_rates_they_split(tmp_path):
    text = Path("examples/dgx-h100-superpod.yaml").read_text().replace(
        "scaleout:\n", "scaleout:\n  planes: 100\n", 1)
    design = tmp_path / "d.yaml"
    design.write_text(text)
    with pytest.raises(DesignError) as failed:
        load_design(design)
    (problem,) = failed.value.problems
    assert problem.key_path == "scaleout.planes" and "limit of 64" in problem.message
