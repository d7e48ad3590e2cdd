"""A scale-out plane failed whole (``--fail-domain plane:N``) on a small dual-plane
design: the structured router around it agrees with the general router link by link,
and why a ring over hashed queue pairs takes no longer with one plane than with two."""

import numpy as np
import pytest
from test_survivors import ROUTINGS, assert_same_routes

from topomodel.fabric.build import build_fabric
from topomodel.fabric.domains import with_domains_failed
from topomodel.inputs.design import load_design
from topomodel.routing import route
from topomodel.traffic.phases import phase

# examples/dual-plane-ethernet.yaml at 8 servers (64 GPUs): 2 planes of Tomahawk 5
SMALL_DUAL_PLANE = """name: Dual-plane Ethernet, 64 H200
system: hgx-h200
systems: 8
scaleout:
  kind: fat_tree
  switch: tomahawk5
  planes: 2
  port_rate: "200 Gb/s /dir"
  rail_optimized: true
"""
BYTES = 1e6


@pytest.fixture(scope="module")
def small():
    return build_fabric(*load_design("small.yaml", text=SMALL_DUAL_PLANE))


def _ring(fabric):
    """Each GPU sends to the same rail of the next server: one flow per NIC, all over
    the network."""
    acc = fabric.accelerators
    return phase(acc, np.roll(acc, -8), BYTES)


def _nic_legs(fabric, routed):
    """Bytes on each NIC -> leaf link (one 200G leg of a NIC into one plane)."""
    nodes, links = fabric.nodes, fabric.links
    kind = nodes["kind"].astype(str).to_numpy()
    up = (links["tier"].astype(str).to_numpy() == "leaf") & (
        kind[links["src"].to_numpy()] == "nic")
    return routed.link_bytes[up]


@pytest.mark.parametrize("plane", [0, 1])
def test_plane_failure_structured_equals_general(small, plane):
    failed = with_domains_failed(small, [f"plane:{plane}"])
    rng = np.random.default_rng(plane)
    acc = failed.accelerators
    ph = phase(acc[rng.integers(0, len(acc), 400)], acc[rng.integers(0, len(acc), 400)],
               rng.uniform(1e3, 1e6, 400))
    for routing in ROUTINGS:
        routed = assert_same_routes(failed, ph, routing)
        assert routed.unroutable.sum() == 0  # every NIC keeps its other leg
    assert_same_routes(failed, _ring(failed), "ecmp")
    assert_same_routes(failed, _ring(failed), "hash", qps=2)


def test_plane_failure_doubles_a_leg_under_an_even_split(small):
    healthy = _nic_legs(small, route(small, _ring(small), routing="ecmp"))
    failed_fabric = with_domains_failed(small, ["plane:0"])
    failed = _nic_legs(failed_fabric, route(failed_fabric, _ring(failed_fabric),
                                            routing="ecmp"))
    assert healthy.max() == pytest.approx(BYTES / 2)  # each leg half a NIC's flow
    assert failed.max() == pytest.approx(BYTES)  # the surviving leg carries it all


def test_hashed_queue_pairs_already_put_a_whole_flow_on_one_plane(small):
    """Under hash routing each of a flow's 2 queue pairs picks a plane by hash, so about
    half the NICs send both on one leg: the healthy peak is already a whole flow on one
    200G leg, and failing a plane (every NIC on one leg) leaves the peak, and so the
    ring's time, where it was. This is why ``--fail-domain plane:0`` does not change
    the ring time of examples/dual-plane-ethernet.yaml under its default hash routing."""
    healthy = _nic_legs(small, route(small, _ring(small), routing="hash", qps=2))
    failed_fabric = with_domains_failed(small, ["plane:0"])
    failed = _nic_legs(failed_fabric, route(failed_fabric, _ring(failed_fabric),
                                            routing="hash", qps=2))
    whole = np.isclose(healthy, BYTES)
    assert whole.any() and (np.isclose(healthy, 0) | np.isclose(healthy, BYTES / 2)
                            | whole).all()
    assert healthy.max() == pytest.approx(failed.max()) == pytest.approx(BYTES)
