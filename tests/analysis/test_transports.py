"""The scale-out transports (inputs/transports.py): each NIC's packet efficiency, net
plugin latency and protocols, as NCCL sees them, and the EFA catalog entries."""

from __future__ import annotations

from pathlib import Path

import pytest

from topomodel.analysis.collectives.collective import run_collective
from topomodel.analysis.collectives.linkrates import efficiency_sources, network_transport
from topomodel.analysis.collectives.protocols import NcclShape, latency_s
from topomodel.analysis.collectives.timing import TimeModel
from topomodel.fabric.build import build_fabric
from topomodel.inputs.catalog import load_catalog
from topomodel.inputs.design import load_design
from topomodel.inputs.parts import Nic, System
from topomodel.inputs.transports import SOCKETS_EFFICIENCY, TRANSPORTS

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def design_of(system: str, systems: int, switch: str, port_rate: str):
    text = (f"system: {system}\nsystems: {systems}\nscaleout:\n  kind: fat_tree\n"
            f"  switch: {switch}\n  port_rate: \"{port_rate}\"\n")
    return build_fabric(*load_design("inline.yaml", text=text))


def test_each_transport_has_its_own_packet_efficiency_from_its_headers():
    assert TRANSPORTS["infiniband"].efficiency == pytest.approx(4096 / 4122)
    assert TRANSPORTS["rocev2"].efficiency == pytest.approx(4096 / 4178)
    assert TRANSPORTS["sockets"].efficiency == SOCKETS_EFFICIENCY
    assert all(TRANSPORTS[t].net_latency_s == 0 for t in ("infiniband", "rocev2", "sockets"))


def test_the_efa_nics_carry_the_plugins_latency_and_protocols():
    catalog = load_catalog()
    p4d, p5, p5en = (catalog.get(n, Nic) for n in ("efa-p4d", "efa-p5", "efa-p5en"))
    assert (p4d.net_latency_s, p5.net_latency_s, p5en.net_latency_s) == pytest.approx(
        (75e-6, 75e-6, 35e-6))
    assert (p4d.low_latency_protocols, p5.low_latency_protocols) == (False, True)
    assert {n.transport for n in (p4d, p5, p5en)} == {"efa"}


@pytest.mark.parametrize(("system", "accelerator", "nics", "gbps"), [
    ("p4d.24xlarge", "a100-sxm-40gb", 4, 400), ("p4de.24xlarge", "a100-sxm-80gb", 4, 400),
    ("p5.48xlarge", "h100-sxm", 32, 3200), ("p5en.48xlarge", "h200-sxm", 16, 3200)])
def test_the_aws_systems_have_their_efa_bandwidth(system, accelerator, nics, gbps):
    catalog = load_catalog()
    entry = catalog.get(system, System)
    nic = catalog.get(str(entry.nic), Nic)
    assert (entry.accelerator, entry.accelerators, entry.nic_count) == (accelerator, 8, nics)
    assert entry.nic_count * nic.rate_Bps * 8 / 1e9 == pytest.approx(gbps)
    assert entry.scaleup is not None


def test_the_net_plugin_latency_adds_to_each_network_hop_twice_under_simple():
    """NCCL tuning.cc: interLat += latencyInter, and again for Simple (the flush)."""
    base, efa = NcclShape(16, 2), NcclShape(16, 2, net_latency_us=35.0)
    hops = 2 * 1  # a tree AllReduce over 2 nodes: up and down one network hop
    for protocol, times in (("LL", 1), ("LL128", 1), ("Simple", 2)):
        extra = latency_s("tree", "allreduce", protocol, efa) - latency_s(
            "tree", "allreduce", protocol, base)
        assert extra == pytest.approx(hops * times * 35e-6)


def test_the_efa_example_runs_at_efa_rates_not_infiniband_latencies():
    design, catalog = load_design(EXAMPLES / "aws-p5en-efa.yaml")
    fabric = build_fabric(design, catalog)
    transport = network_transport(fabric)
    assert transport is not None and transport.name == "efa"
    assert transport.net_latency_s == pytest.approx(35e-6)
    leaf = efficiency_sources(fabric, TimeModel())["leaf"]
    assert leaf[0] == pytest.approx(4096 / 4178) and "efa" in leaf[1]
    run = run_collective(fabric, "allreduce", 2.0**16)
    # at least the plugin's latency on the tree's 2 x log2(16) network hops
    assert run.timing.collective_latency_s >= 2 * 4 * 35e-6


def test_a_p4d_network_runs_simple_only_across_nodes():
    """aws-ofi-nccl sets NCCL_PROTO=simple on p4d (no 128-byte in-order delivery)."""
    fabric = design_of("p4d.24xlarge", 4, "sn2700", "100 Gb/s /dir")
    assert network_transport(fabric).low_latency_protocols is False
    across = run_collective(fabric, "allreduce", 2.0**12)
    assert across.timing.protocol == "Simple"
    inside = run_collective(fabric, "allreduce", 2.0**12, ["0-7"])  # one instance
    assert inside.timing.protocol != "Simple"


def test_a_connectx_nic_takes_its_switchs_transport():
    ib = build_fabric(*load_design(EXAMPLES / "dgx-h100-superpod.yaml"))
    roce = build_fabric(*load_design(EXAMPLES / "small-16x8-a100-100gbe-roce.yaml"))
    assert network_transport(ib).name == "infiniband"
    assert network_transport(roce).name == "rocev2"
