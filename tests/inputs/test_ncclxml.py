"""The NCCL topology dump reader: the fixtures of tests/data/nccl-topo and every error."""

from __future__ import annotations

from pathlib import Path

import pytest

from topomodel.inputs.measured.ncclxml import (
    INVISIBLE_TARGET,
    TopologyError,
    parse_topology,
    read_topology,
)

DATA = Path(__file__).resolve().parents[1] / "data" / "nccl-topo"


def test_dgx_h100_dump():
    topo = read_topology(DATA / "dgx-h100.xml")
    assert topo.version == 1
    assert [cpu.numa_id for cpu in topo.cpus] == [0, 1]
    assert {cpu.vendor for cpu in topo.cpus} == {"GenuineIntel"}
    assert [gpu.dev for gpu in topo.gpus] == list(range(8))
    for gpu in topo.gpus:
        assert (gpu.sm, gpu.generation, gpu.nvlink_count) == (90, "Hopper", 18)
        assert sorted(link.count for link in gpu.nvlinks) == [4, 4, 5, 5]
        assert {link.kind for link in gpu.nvlinks} == {"nvswitch"}
        assert (gpu.pci.pcie_gen, gpu.pci.link_width) == (5, 16)
    assert len(topo.switches) == 8
    assert {s.vendor + ":" + s.device for s in topo.switches} == {"0x1000:0xc030"}
    nets = topo.nets
    assert [net.name for net in nets] == [f"mlx5_{i}" for i in range(8)]
    assert {net.speed_Mbps for net in nets} == {400000}
    assert nets[0].rate_bps == 400e9
    # one NIC and one GPU under each PCIe switch, NIC i beside GPU i
    for index, nic in enumerate(topo.nics):
        assert [gpu.dev for gpu in topo.beside(nic)] == [index]
        assert nic.numa_id == index // 4


def test_pcie_only_dump():
    topo = read_topology(DATA / "a100-pcie-8gpu.xml")
    assert {gpu.nvlinks for gpu in topo.gpus} == {()}
    assert {gpu.pci.pcie_gen for gpu in topo.gpus} == {4}
    assert len(topo.switches) == 4
    assert [gpu.pci.numa_id for gpu in topo.gpus] == [0, 0, 0, 0, 1, 1, 1, 1]
    (nic,) = topo.nics
    assert nic.pci is not None and nic.pci.switches == ()
    assert topo.beside(nic) == ()
    assert nic.nets[0].speed_Mbps == 100000


def _system(inner: str) -> str:
    return (f'<system version="1">\n  <cpu numaid="0" arch="x86_64" vendor="AuthenticAMD">\n'
            f'{inner}\n  </cpu>\n</system>\n')


GPU = ('<pci busid="0000:01:00.0" class="0x030200" vendor="0x10de" device="0x2330"'
       ' link_speed="32.0 GT/s PCIe" link_width="16">{}</pci>')


def test_nvlink_targets_and_hidden_switches():
    links = ('<gpu dev="0" sm="90" rank="0" gdr="1">'
             f'<nvlink target="{INVISIBLE_TARGET}" count="18" tclass="0x068000"/></gpu>')
    topo = parse_topology(_system(GPU.format(links)))
    assert topo.gpus[0].nvlinks[0].kind == "nvswitch"
    mesh = ('<gpu dev="0" sm="80"><nvlink target="0000:02:00.0" count="12"'
            ' tclass="0x030200"/></gpu>')
    assert parse_topology(_system(GPU.format(mesh))).gpus[0].nvlinks[0].kind == "gpu"


def test_a_virtual_nic_under_the_cpu():
    text = _system(GPU.format('<gpu dev="0" sm="90"/>')
                   + '<nic><net name="eth0" dev="0" speed="-1"/></nic>')
    (nic,) = parse_topology(text).nics
    assert nic.pci is None and nic.nets[0].speed_Mbps is None  # NCCL: some NICs say -1


def test_a_cut_off_dump_is_one_line_naming_file_and_line():
    with pytest.raises(TopologyError) as caught:
        read_topology(DATA / "truncated.xml")
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith(f"{DATA / 'truncated.xml'}:28: not well-formed XML")


@pytest.mark.parametrize(("text", "match"), [
    ('<graphs version="1"/>', r"t\.xml:1: <graphs>: the root element is <graphs>, not"),
    ('<system version="1"><cpu numaid="0"/></system>', r"<system>: no <gpu> element"),
    ('<system version="x"/>', r"<system>: version='x' is not an integer"),
    ('<system/>', r"<system>: no 'version' attribute"),
    (_system(GPU.format('<gpu sm="90"/>')), r"t\.xml:3: <gpu>: no 'dev' attribute"),
    (_system(GPU.format('<gpu dev="0" sm="9.0"/>')), r"<gpu>: sm='9.0' is not an integer"),
    (_system('<pci class="0x0302"><gpu dev="0" sm="90"/></pci>'), r"<pci>: no 'busid'"),
    (_system(GPU.format('<gpu dev="0" sm="90"><nvlink target="a" count="0"'
                        ' tclass="0x068000"/></gpu>')), r"<nvlink>: an <nvlink> needs"),
    (_system(GPU.format('<gpu dev="0" sm="90"/>') + '<nic><net dev="0"/></nic>'),
     r"<net>: no 'name' attribute"),
    ('<!DOCTYPE x [<!ENTITY a "b">]><system version="1"/>', r"t\.xml:1: a <!DOCTYPE>"),
    ('<system version="1">\n<cpu>', r"t\.xml:2: not well-formed XML: no element found"),
])
def test_bad_dumps(text, match):
    with pytest.raises(TopologyError, match=match) as caught:
        parse_topology(text, file="t.xml")
    assert "\n" not in str(caught.value)


def test_unreadable_files(tmp_path):
    with pytest.raises(TopologyError, match=r"missing\.xml: cannot read"):
        read_topology(tmp_path / "missing.xml")
    binary = tmp_path / "b.xml"
    binary.write_bytes(b"\xff\xfe<system")
    with pytest.raises(TopologyError, match=r"b\.xml: not UTF-8 text"):
        read_topology(binary)
