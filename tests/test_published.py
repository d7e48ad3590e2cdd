"""Validation against results real systems published (shared/reference/published-figures).

Each test builds the system from its inputs, computes, and compares with a stated
tolerance. Published results are never inputs; where the model misses, the test names
the assumption responsible.
"""

from pathlib import Path

import pytest

from topomodel.build import build_fabric
from topomodel.design import load_design
from topomodel.route_report import run_collective

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


@pytest.fixture(scope="module")
def hgx():
    design, catalog = load_design(EXAMPLES / "hgx-h100-server.yaml")
    return build_fabric(design, catalog)


def test_hgx_h100_ring_allreduce_busbw(hgx):
    """nccl-tests all_reduce on 8 x H100: about 370 GB/s busbw with the ring at large
    sizes, "about 20 % protocol overhead" against the 450 GB/s line rate (NVIDIA/nccl-tests
    issue #212, maintainer reply). The model runs links at line rate (no efficiency
    for NVLink 4 in the catalog), so it should land about 20 % above the measurement:
    the missing assumption is NCCL's protocol overhead, settable with --efficiency."""
    run = run_collective(hgx, "allreduce", 8 * 2**30, ["all"], algorithm="ring")
    assert run.busbw_Bps == pytest.approx(450e9, rel=0.01)
    assert 0.75 <= 370e9 / run.busbw_Bps <= 0.90


def test_hgx_h100_nvls_allreduce_is_an_upper_bound(hgx):
    """With NVLink SHARP (NVLS) the same test reaches about 480 GB/s busbw. The model's
    in-network reduction (every GPU sends and receives S once, pipelined) bounds it from
    above; the gap is switch-side reduction throughput, which the catalog does not give."""
    run = run_collective(hgx, "allreduce", 8 * 2**30, ["all"], algorithm="innetwork")
    assert run.busbw_Bps >= 480e9
    ring = run_collective(hgx, "allreduce", 8 * 2**30, ["all"], algorithm="ring")
    assert run.busbw_Bps > ring.busbw_Bps  # NVLS beats the ring, as published


def test_cloudmatrix384_is_non_blocking_at_392_GBps_per_npu():
    """Zuo et al., arXiv 2506.12708: 112 L2 UB chips, non-blocking, 392 GB/s per NPU per
    direction."""
    design, catalog = load_design(EXAMPLES / "cloudmatrix384.yaml")
    fabric = build_fabric(design, catalog)
    links = fabric.links
    acc = fabric.accelerators
    up = links["src"].isin(acc) & (links["tier"] == "scaleup")
    assert links.loc[up, "capacity_Bps"].sum() / len(acc) == pytest.approx(392e9)
    assert int((fabric.nodes["tier"] == "scaleup_l2").sum()) == 112
    l1_up = links[(links["tier"] == "scaleup_l2")
                  & links["dst"].isin(fabric.nodes.index[fabric.nodes["tier"] == "scaleup_l2"])]
    assert l1_up["capacity_Bps"].sum() == pytest.approx(links.loc[up, "capacity_Bps"].sum())
