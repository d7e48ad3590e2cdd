"""An NCCL topology dump as a catalog system: the DGX H100 dump gives the catalog's
dgx-h100 (same parts, same injection, same AllReduce time), the PCIe dump the catalog's
8 x A100 PCIe server, and bad input one line and exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from topomodel.calibrate.nccltopo import overlay_yaml, system_from_dump
from topomodel.cli import main
from topomodel.errors import InputError, UsageError
from topomodel.fabric.build import build_fabric
from topomodel.fabric.structure import scaleout_injection_Bps
from topomodel.inputs.catalog import load_catalog
from topomodel.inputs.design import load_design
from topomodel.inputs.measured.ncclxml import parse_topology, read_topology
from topomodel.inputs.parts import Nic, System

DATA = Path(__file__).resolve().parents[1] / "data" / "nccl-topo"

DESIGN = """\
name: 4 x DGX H100, rail-optimized
system: {system}
systems: 4
scaleout:
  kind: fat_tree
  switch: qm9700
  rail_optimized: true
"""


@pytest.fixture(scope="module")
def catalog():
    return load_catalog()


@pytest.fixture(scope="module")
def dgx_overlay(tmp_path_factory, catalog):
    result = system_from_dump(read_topology(DATA / "dgx-h100.xml"), catalog)
    path = tmp_path_factory.mktemp("overlay") / "dgx.yaml"
    path.write_text(overlay_yaml(result), encoding="utf-8")
    return result, path


def test_dgx_h100_dump_is_the_catalogs_dgx_h100(dgx_overlay):
    result, path = dgx_overlay
    assert result.system_id == "nccl-dgx-h100"
    assert "dgx-h100" in result.matches
    merged = load_catalog([path])
    new, old = merged.get("nccl-dgx-h100", System), merged.get("dgx-h100", System)
    assert new.provenance == "measured" and str(DATA / "dgx-h100.xml") in new.source
    assert (new.accelerator, new.accelerators) == (old.accelerator, old.accelerators)
    assert new.nic == old.nic and new.nic_count / new.accelerators == 1
    assert (new.scaleup.kind, new.scaleup.switch, new.scaleup.switches) == (
        old.scaleup.kind, old.scaleup.switch, old.scaleup.switches)
    assert sorted(new.scaleup.links_per_switch) == sorted(old.scaleup.links_per_switch)
    assert new.host_link == old.host_link
    assert result.not_identified == ("power: not in the dump (the system has no power"
                                     " figure)",)


def _fabric(tmp_path, system, overlay):
    design_file = tmp_path / f"{system}.yaml"
    design_file.write_text(DESIGN.format(system=system), encoding="utf-8")
    design, catalog = load_design(design_file, extra_catalogs=[overlay])
    return build_fabric(design, catalog), design_file


def test_a_design_on_the_new_system_builds_and_routes_alike(tmp_path, dgx_overlay, capsys):
    _, overlay = dgx_overlay
    new, new_file = _fabric(tmp_path, "nccl-dgx-h100", overlay)
    old, old_file = _fabric(tmp_path, "dgx-h100", overlay)
    assert len(new.nodes) == len(old.nodes) and len(new.links) == len(old.links)
    assert scaleout_injection_Bps(new.injection) == scaleout_injection_Bps(old.injection)
    assert scaleout_injection_Bps(new.injection) == pytest.approx(50e9)  # 400 Gb/s
    times = []
    for design_file in (new_file, old_file):
        status = main(["route", str(design_file), "--collective", "allreduce", "--size",
                       "1 GiB", "--catalog", str(overlay), "--format", "json"])
        out, _ = capsys.readouterr()
        assert status == 0
        times.append(json.loads(out)["time_s"])
    assert times[0] == times[1] > 0


def test_pcie_dump_is_the_catalogs_pcie_server(catalog):
    result = system_from_dump(read_topology(DATA / "a100-pcie-8gpu.xml"), catalog)
    entry = result.overlay["systems"][result.system_id]
    assert result.matches == ("a100-pcie-8gpu",)
    assert entry["scaleup"] == {"kind": "pcie", "link": "pcie4-p2p", "root": "cpu-root-gen4",
                                "switch": "pex88096", "switches": 4, "sockets": 2,
                                "socket_link": "intel-upi-nccl"}
    assert entry["figure_provenance"] == {"scaleup": "assumed"}  # the switch chip
    assert (entry["nic"], entry["nic_count"], entry["host_link"]) == (
        "connectx-6-dx", 1, "pcie4-x16")
    assert any("PCIe switch model" in m for m in result.not_identified)


def _dump(gpu_attrs: str, links: str = "", nets: str = "") -> str:
    gpus = "".join(
        f'<pci busid="0000:0{i}:00.0" class="0x030200" vendor="0x10de" device="0x2330"'
        f' link_speed="32.0 GT/s PCIe" link_width="16"><gpu dev="{i}" {gpu_attrs}>'
        f'{links}</gpu></pci>' for i in range(2))
    return (f'<system version="1"><cpu numaid="0" vendor="GenuineIntel"><pci'
            f' busid="0000:10:00.0" class="0x060400">{gpus}{nets}</pci></cpu></system>')


def test_a_slower_port_speed_makes_a_measured_nic(tmp_path, catalog):
    nets = ('<pci busid="0000:11:00.0" class="0x020700" vendor="0x15b3" device="0x1021"'
            ' link_speed="32.0 GT/s PCIe" link_width="16"><nic>'
            '<net name="mlx5_0" dev="0" speed="200000"/>'
            '<net name="mlx5_1" dev="1" speed="200000"/>'
            '<net name="mlx5_2" dev="2" speed="25000"/></nic></pci>')
    links = '<nvlink target="0000:05:00.0" count="18" tclass="0x068000"/>'
    dump = parse_topology(_dump('sm="90"', links, nets), file="slow.xml")
    wiring = system_from_dump(dump, catalog).overlay["systems"]["nccl-slow"]["scaleup"]
    assert (wiring["switches"], wiring["links_per_switch"]) == (1, [18])  # one chip seen
    hidden = links.replace("0000:05:00.0", "fffffff:ffff:ff")
    dump = parse_topology(_dump('sm="90"', hidden, nets), file="slow.xml")
    result = system_from_dump(dump, catalog, ident="vm-node")
    entry = result.overlay["systems"]["vm-node"]
    assert entry["scaleup"]["links_per_switch"] == [5, 5, 4, 4]
    assert entry["figure_provenance"] == {"scaleup": "assumed"}
    assert entry["nic"] == "connectx-7-at-200g" and entry["nic_count"] == 2
    assert result.overlay["nics"]["connectx-7-at-200g"]["port_rate"] == "200000 Mb/s /dir"
    assert any("mlx5_2" in m for m in result.not_identified)
    path = tmp_path / "vm.yaml"
    path.write_text(overlay_yaml(result), encoding="utf-8")
    nic = load_catalog([path]).get("connectx-7-at-200g", Nic)
    assert nic.port_rate_Bps == 25e9 and nic.provenance == "measured"


@pytest.mark.parametrize(("gpu_attrs", "links", "kwargs", "error", "match"), [
    ('sm="89"', "", {}, InputError, r"cannot identify the GPU .*give one with --accelerator"),
    ('sm="90"', '<nvlink target="0000:05:00.0" count="17" tclass="0x068000"/>', {},
     InputError, r"x\.xml:1: <gpu dev=0>: 17 NVLinks per GPU, but h100-sxm has 18"),
    ('sm="90"', "", {"ident": "Bad Id"}, UsageError, r"--id 'Bad Id'"),
    ('sm="90"', "", {"accelerator": "nope"}, UsageError, r"unknown accelerator id 'nope'"),
])
def test_what_cannot_be_made_a_system(catalog, gpu_attrs, links, kwargs, error, match):
    text = _dump(gpu_attrs, links)
    if gpu_attrs == 'sm="89"':
        text = text.replace("0x2330", "0x1234")
    with pytest.raises(error, match=match):
        system_from_dump(parse_topology(text, file="x.xml"), catalog, **kwargs)


def test_cli_writes_the_overlay_and_refuses_bad_input(tmp_path, capsys):
    out_file = tmp_path / "out" / "dgx.yaml"
    status = main(["catalog", "import-nccl-topo", str(DATA / "dgx-h100.xml"), "-o",
                   str(out_file), "--id", "our-dgx", "--format", "json"])
    out, _ = capsys.readouterr()
    assert status == 0
    data = json.loads(out)
    assert data["system_id"] == "our-dgx" and "dgx-h100" in data["matches"]
    assert yaml.safe_load(out_file.read_text())["systems"]["our-dgx"]["nic_count"] == 8
    bad = tmp_path / "bad.yaml"
    status = main(["catalog", "import-nccl-topo", str(DATA / "truncated.xml"), "-o", str(bad)])
    _, err = capsys.readouterr()
    assert status == 2 and not bad.exists()
    assert err.strip().count("\n") == 0
    assert err.startswith(f"topomodel: error: {DATA / 'truncated.xml'}:28: not well-formed")


def test_a_system_the_catalog_refuses_is_reported_of_the_dump(tmp_path, capsys):
    # three PCIe GPUs under two switches: no catalog pcie system splits them evenly
    gpus = [f'<pci busid="0000:1{i}:00.0" class="0x030200" vendor="0x10de" device="0x20b5"'
            f' link_speed="16.0 GT/s PCIe" link_width="16"><gpu dev="{i}" sm="80"/></pci>'
            for i in range(3)]
    text = (f'<system version="1"><cpu numaid="0" vendor="GenuineIntel">'
            f'<pci busid="0000:01:00.0" class="0x060400">{gpus[0]}{gpus[1]}</pci>'
            f'<pci busid="0000:02:00.0" class="0x060400">{gpus[2]}</pci></cpu></system>')
    dump = tmp_path / "odd.xml"
    dump.write_text(text)
    out_file = tmp_path / "odd.yaml"
    status = main(["catalog", "import-nccl-topo", str(dump), "-o", str(out_file)])
    _, err = capsys.readouterr()
    assert status == 2 and not out_file.exists()
    assert err.startswith(f"topomodel: error: {dump}: the system made of it is not a valid"
                          " catalog system: ")
    assert "do not split evenly" in err and err.strip().count("\n") == 0
