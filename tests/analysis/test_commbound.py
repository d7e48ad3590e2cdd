"""The placed bound of :mod:`topomodel.analysis.collectives.commbound` on a scale-up
domain whose switches sit in levels (a supernode's UB Clos): its way in is the links
into the whole domain, its switches' levels included."""

from __future__ import annotations

import numpy as np
import pytest

from topomodel.analysis.assumptions import TimeModel
from topomodel.analysis.collectives.commbound import collective_lower_bound_s, ingress_rates_of
from topomodel.analysis.collectives.timing import time_traffic
from topomodel.analysis.training.stepshape import node_domains
from topomodel.fabric.build import build_fabric
from topomodel.inputs.design import load_design
from topomodel.traffic.collectives import ALGORITHMS, collective_traffic

SUPERNODES = """name: two supernodes of 32 NPUs
system: cloudmatrix384-node
systems: 8
scaleup:
  kind: supernode
  switch: ub-l2
  uplinks: 16
  systems_per_domain: 4
scaleout:
  kind: fat_tree
  switch: tomahawk5
  planes: 2
  port_rate: "200 Gb/s /dir"
  rail_optimized: true
"""


@pytest.fixture(scope="module")
def fabric():
    return build_fabric(*load_design("two-supernodes.yaml", text=SUPERNODES))


def test_a_supernode_is_entered_through_its_rdma_planes_only(fabric):
    """Every switch of a supernode's UB levels is inside it: the rate into it is that of
    its NPUs' RDMA ports (two 200 Gb/s planes an NPU, at the tier's efficiency), not
    its UB uplinks' (~9x more)."""
    rates = ingress_rates_of(fabric, TimeModel())
    per_npu = rates.domain_Bps / 32
    line_Bps = 2 * 200e9 / 8
    assert np.all((0.8 * line_Bps <= per_npu) & (per_npu <= line_Bps))
    assert np.all(rates.domain_out_Bps == rates.domain_Bps)


@pytest.mark.parametrize("collective", ["allgather", "reducescatter", "allreduce",
                                        "alltoall"])
def test_groups_across_supernodes_are_bounded_by_what_crosses(fabric, collective):
    """Pairs with one NPU in each supernode: each supernode takes in at least half the
    size per pair (all-gather, reduce-scatter, all-to-all; all-reduce the whole size)
    over its RDMA ports' rate, and no algorithm's routed time beats that bound."""
    ranks = fabric.accelerators
    domains = fabric.derived(node_domains)[ranks]
    pairs = np.stack([ranks[domains == 0], ranks[domains == 1]], axis=1)
    model = TimeModel()
    size = 64e6
    per_pair = {"allgather": 0.5, "reducescatter": 0.5, "allreduce": 1.0, "alltoall": 0.5}
    line_Bps = 2 * 200e9 / 8  # an NPU's two RDMA planes; the effective rate is less
    bound = collective_lower_bound_s(fabric, collective, pairs, size, model)
    assert bound >= per_pair[collective] * size / line_Bps
    times = routed_times(fabric, collective, pairs, size, model)
    assert times and all(bound <= t for t in times.values()), times


def routed_times(fabric, collective, groups, size, model):
    """Every algorithm's time for ``collective`` over ``groups``, routed, by algorithm
    (those that do not apply to these groups or switches left out)."""
    times = {}
    for algorithm in ALGORITHMS[collective]:
        try:
            traffic = collective_traffic(fabric, collective, list(groups), size,
                                         algorithm=algorithm)
            times[algorithm] = time_traffic(fabric, traffic, time_model=model).time_s
        except ValueError:
            continue
    return times
