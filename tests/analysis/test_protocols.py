"""NCCL's protocol and latency model, on the fabrics it is timed on."""

import math

import pytest

from topomodel.analysis.collectives.collective import run_collective
from topomodel.analysis.collectives.linkrates import tier_efficiency
from topomodel.analysis.collectives.protocols import (
    NcclShape,
    latency_s,
    ll128_enabled,
    protocol_busbw_Bps,
)
from topomodel.analysis.collectives.timing import TimeModel
from topomodel.errors import UsageError
from topomodel.fabric.build import build_fabric
from topomodel.inputs.design import load_design
from topomodel.inputs.transports import TRANSPORTS


@pytest.fixture(scope="module")
def hgx():
    return build_fabric(*load_design("examples/hgx-h100-server.yaml"))


@pytest.mark.parametrize(("algorithm", "collective", "protocol", "shape", "expected_us"), [
    # NCCL 2.30.7 defaults worked by hand (collectives-compute-power.md, 2.7)
    ("ring", "allreduce", "LL", NcclShape(8, 1), 6.6 + 14 * 0.6),
    ("ring", "allreduce", "LL128", NcclShape(8, 1), 14 + 14 * 1.9),
    ("ring", "allreduce", "Simple", NcclShape(8, 1), 8.4 + 14 * 3.4),
    ("tree", "allreduce", "LL", NcclShape(8, 1), 6.8 + 14 * 0.6),
    ("ring", "allgather", "LL", NcclShape(8, 1), 6.6 + 7 * 0.6),
    ("innetwork", "allreduce", "Simple", NcclShape(8, 1), 25.0),
    # 2 nodes: intra hops at least the network post overhead (1 us, x3 for Simple)
    ("ring", "allreduce", "LL", NcclShape(16, 2), 6.6 + 28 * 1.0 + 2 * 2.7),
    ("ring", "allreduce", "Simple", NcclShape(16, 2), 8.4 + 28 * 3.4 + 2 * 14),
    ("tree", "allreduce", "LL128", NcclShape(16, 2), 14 + 2 * (7 * 1.25 + 8.5)),
    # NVLSTree: the NVLS hop, then the tree up and down across nodes (2.5, 2.7)
    ("nvlstree", "allreduce", "Simple", NcclShape(16, 2), 25 + 2 * 20.9),
    ("nvlstree", "allreduce", "Simple", NcclShape(64, 8), 25 + 2 * 3 * 20.9),
])
def test_latency_follows_nccl_formulas(algorithm, collective, protocol, shape, expected_us):
    assert latency_s(algorithm, collective, protocol, shape) * 1e6 == pytest.approx(
        expected_us)


def test_in_network_runs_simple_only():
    assert math.isinf(latency_s("innetwork", "allreduce", "LL", NcclShape(8, 1)))
    assert protocol_busbw_Bps("LL128", "innetwork", 500e9, NcclShape(8, 1), "hopper") == 0


def test_ll_is_capped_per_architecture_and_node_count():
    one, two, many = NcclShape(8, 1), NcclShape(16, 2), NcclShape(64, 8)
    assert protocol_busbw_Bps("LL", "ring", 370e9, one, "hopper") == pytest.approx(141e9)
    assert protocol_busbw_Bps("LL", "ring", 370e9, one, "ampere") == pytest.approx(87.7e9)
    assert protocol_busbw_Bps("LL", "ring", 370e9, two, "hopper") == pytest.approx(39e9)
    assert protocol_busbw_Bps("LL", "ring", 370e9, many, "hopper") == pytest.approx(20.4e9)
    assert protocol_busbw_Bps("LL", "ring", 20e9, one, "hopper") == pytest.approx(10e9)


def test_tree_ll_is_simple_s_busbw_over_3_8_under_the_ll_cap():
    # NCCL's tree LL: min(busBw / 3.8, llMaxBw) (collectives-compute-power.md, 2.4)
    one, two = NcclShape(8, 1), NcclShape(16, 2)
    assert protocol_busbw_Bps("LL", "tree", 370e9, one, "hopper") == pytest.approx(370e9 / 3.8)
    assert protocol_busbw_Bps("LL", "tree", 20e9, one, "hopper") == pytest.approx(20e9 / 3.8)
    assert protocol_busbw_Bps("LL", "tree", 370e9, two, "hopper") == pytest.approx(39e9)


def test_small_messages_take_ll_large_ones_simple(hgx):
    small = run_collective(hgx, "allreduce", 8, algorithm="ring")
    large = run_collective(hgx, "allreduce", 2**33, algorithm="ring")
    assert small.timing.protocol == "LL" and large.timing.protocol == "Simple"
    assert small.time_s == pytest.approx(15.0e-6, rel=0.01)  # latency-bound
    # bandwidth-bound: 18 NVLink 4 links at NCCL's 20.6 GB/s each, as nccl-tests counts
    assert large.busbw_Bps == pytest.approx(18 * 20.6e9, rel=0.01)


def test_forcing_a_protocol(hgx):
    forced = run_collective(hgx, "allreduce", 8, algorithm="ring",
                            time_model=TimeModel(protocol="Simple"))
    assert forced.timing.protocol == "Simple"
    assert forced.timing.latency_s == pytest.approx((8.4 + 14 * 3.4) * 1e-6)
    ll = run_collective(hgx, "allreduce", 2**30, algorithm="ring",
                        time_model=TimeModel(protocol="LL"))
    simple = run_collective(hgx, "allreduce", 2**30, algorithm="ring")
    # LL carries 8 data bytes per 16-byte line, and on one Hopper node at most 141 GB/s
    assert ll.busbw_Bps < min(141e9, simple.busbw_Bps / 2) * 1.01
    with pytest.raises(UsageError, match=r"TimeModel\.protocol"):
        TimeModel(protocol="NVLS")


def test_link_tiers_run_at_their_sourced_efficiency(hgx):
    pod = build_fabric(*load_design("examples/dgx-h100-superpod.yaml"))
    eff = tier_efficiency(pod, TimeModel())
    assert eff["scaleup"] == pytest.approx(20.6 / 25)  # NCCL SM90_NVLINK_BW
    assert eff["host"] == pytest.approx(48 / 63, rel=1e-3)  # NCCL's PCIe Gen5 x16
    assert eff["leaf"] == eff["spine"] == pytest.approx(TRANSPORTS["infiniband"].efficiency)
    assert tier_efficiency(pod, TimeModel(efficiency={"leaf": 0.5}))["leaf"] == 0.5
    assert tier_efficiency(hgx, TimeModel())["scaleup"] == pytest.approx(0.824)


@pytest.mark.parametrize("example", ["rtx4090-workstation", "small-4x8-l40s-25gbe",
                                     "small-16x8-a100-100gbe-roce"])
def test_ll128_is_not_picked_on_pcie_only_servers(example):
    """NCCL's tuner leaves LL128 on only where the path inside a node is NVLink
    (tuning.cc: typeIntra <= PATH_NVB): between PCIe GPUs it picks LL or Simple."""
    fabric = build_fabric(*load_design(f"examples/{example}.yaml"))
    for size in (2**16, 2**20, 2**24):
        for algorithm in ("ring", "tree"):
            run = run_collective(fabric, "allreduce", size, algorithm=algorithm)
            assert run.timing.protocol in ("LL", "Simple"), (size, algorithm)
    forced = run_collective(fabric, "allreduce", 2**20, algorithm="ring",
                            time_model=TimeModel(protocol="LL128"))
    assert forced.timing.protocol == "LL128"  # NCCL_PROTO=LL128 still runs it


def test_ll128_stays_on_nvlink_paths(hgx):
    assert ll128_enabled(NcclShape(8, 1), "hopper") and ll128_enabled(NcclShape(16, 2), "ampere")
    assert not ll128_enabled(NcclShape(8, 1, "pci"), "hopper")
    assert run_collective(hgx, "allreduce", 2**24, algorithm="ring").timing.protocol == "LL128"
