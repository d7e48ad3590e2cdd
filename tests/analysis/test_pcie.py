"""PCIe-only servers (scale-up kind ``pcie``), Ethernet NICs and switches, and the TCP
sockets transport: closed-form counts, paths through the host, and the rates used."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from topomodel.analysis.collectives.collective import run_collective
from topomodel.analysis.collectives.linkrates import efficiency_sources
from topomodel.analysis.collectives.timing import TimeModel
from topomodel.errors import CatalogError
from topomodel.fabric.build import build_fabric, structure_dict
from topomodel.inputs.catalog import load_catalog
from topomodel.inputs.design import load_design
from topomodel.inputs.transports import SOCKETS_EFFICIENCY

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def built(name: str):
    design, catalog = load_design(EXAMPLES / f"{name}.yaml")
    return build_fabric(design, catalog)


def count(fabric, column: str, value: str) -> int:
    return int((fabric.nodes[column] == value).sum())


def links(fabric, tier: str) -> int:
    return int((fabric.links["tier"] == tier).sum()) // 2


@pytest.mark.parametrize(("name", "systems", "switches", "sockets", "gpus"), [
    ("small-4x8-l40s-25gbe", 4, 4, 2, 8),
    ("small-16x8-a100-100gbe-roce", 16, 4, 2, 8),
    ("small-2x2-a100-1gbe", 2, 0, 1, 2),
    ("rtx4090-workstation", 1, 0, 1, 4),
])
def test_a_pcie_tree_has_its_closed_form_counts(name, systems, switches, sockets, gpus):
    f = built(name)
    assert f.structure.scaleup.kind == "pcie"
    assert count(f, "tier", "scaleup") == systems * switches  # PCIe switch chips
    assert count(f, "tier", "scaleup_l2") == systems * sockets  # root complexes
    assert links(f, "scaleup") == systems * gpus  # one x16 per GPU
    assert links(f, "scaleup_l2") == systems * switches
    assert links(f, "scaleup_l3") == systems * (sockets - 1)
    # no GPU-to-GPU link: every scale-up link has a switch or a CPU at one end
    kind = f.nodes["kind"].to_numpy()
    up = f.links[f.links["tier"] == "scaleup"]
    ends = (kind[up["src"]] == "accelerator").astype(int) + (kind[up["dst"]] == "accelerator")
    assert (ends == 1).all()
    # every board link stays on the board: PCIe medium, no cable or module
    inside = f.links["tier"].astype(str).str.startswith("scaleup")
    assert (f.links.loc[inside, "optic"].astype(str) == "").all()
    assert structure_dict(f.structure)["pcie_switches_per_system"] == switches


def test_gpus_under_different_sockets_meet_over_the_socket_link():
    f = built("small-4x8-l40s-25gbe")
    near = run_collective(f, "sendrecv", 2.0**28, ["0,1"])  # one PCIe switch
    far = run_collective(f, "sendrecv", 2.0**28, ["0,4"])  # two sockets apart
    # both ends of a PCIe switch: NCCL's 24 GB/s; across UPI: NCCL's 10 GB/s
    assert near.busbw_Bps == pytest.approx(24e9, rel=0.03)
    assert far.busbw_Bps == pytest.approx(10e9, rel=0.03)
    names = f.nodes["name"].to_numpy()
    busy = far.timing.link_busy_s > 0
    hops = {(names[s], names[d]) for s, d in zip(f.links["src"][busy], f.links["dst"][busy],
                                                 strict=True)}
    assert ("sys0/cpu0", "sys0/cpu1") in hops


def test_the_socket_link_and_the_sockets_transport_have_their_own_efficiency():
    sources = efficiency_sources(built("small-4x8-l40s-25gbe"), TimeModel())
    assert sources["scaleup"][0] == pytest.approx(0.762)
    assert sources["scaleup_l2"][0] == pytest.approx(0.762)
    assert sources["scaleup_l3"] == (1.0, "catalog intel-upi-nccl")
    assert sources["leaf"][0] == pytest.approx(4096 / (4096 + 82))  # RoCE packets
    sockets = efficiency_sources(built("small-2x2-a100-1gbe"), TimeModel())
    assert sockets["leaf"][0] == SOCKETS_EFFICIENCY == pytest.approx(0.8)
    assert "sockets" in sockets["leaf"][1]


def test_a_design_can_run_a_nic_below_its_rate():
    f = built("small-2x2-a100-1gbe")
    leaf = f.links[f.links["tier"] == "leaf"]
    assert np.allclose(leaf["capacity_Bps"], 1e9 / 8)


@pytest.mark.parametrize(("wiring", "match"), [
    ("kind: pcie\n      link: pcie4-p2p", "a pcie scale-up needs 'link'"),
    ("kind: pcie\n      link: pcie4-p2p\n      root: cpu-root-gen4\n      switches: 2",
     "give the PCIe switch chip"),
    ("kind: pcie\n      link: pcie4-p2p\n      root: cpu-root-gen4\n      sockets: 2",
     "two or more sockets need 'socket_link'"),
    ("kind: pcie\n      link: pcie4-p2p\n      root: cpu-root-gen4\n      switch: pex88096\n"
     "      switches: 3\n      sockets: 2\n      socket_link: intel-upi-nccl",
     "3 PCIe switches do not split over 2 sockets"),
    ("kind: pcie\n      link: pcie4-p2p\n      root: cpu-root-gen4\n      switch: pex88096\n"
     "      switches: 3", "8 accelerators do not split evenly over 3 PCIe switches"),
])
def test_a_bad_pcie_system_is_refused(tmp_path, wiring, match):
    path = tmp_path / "mine.yaml"
    path.write_text(f"""systems:
  box:
    accelerator: l40s
    accelerators: 8
    scaleup:
      {wiring}
    source: test
    provenance: assumed
""")
    with pytest.raises(CatalogError, match=match):
        load_catalog([path])
