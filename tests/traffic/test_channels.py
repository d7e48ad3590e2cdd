"""The channels' NIC and rail per node, kept with the fabric: the per-rank lookup they
replace, on the DGX H100 SuperPOD and on a copy with a failed link."""

from __future__ import annotations

import numpy as np

from topomodel.fabric.build import build_fabric
from topomodel.inputs.design import load_design
from topomodel.traffic.channels import channels, domain_parts, node_nics


def _per_rank(fabric, node):
    """The NIC and rail of each node in ``node``, found from the fabric's arrays for
    those nodes alone (what :func:`channels` read before the kept view)."""
    nodes = fabric.node_arrays
    serving = np.full(len(nodes), -1, np.int64)
    serving[fabric.accelerators] = fabric.injection.nic
    nic = serving[node]
    rails = nodes["rail"]
    return nic, np.where(nic >= 0, rails[np.maximum(nic, 0)], np.iinfo(np.int64).max)


def test_the_kept_nics_and_rails_are_the_per_rank_lookup():
    pod = build_fabric(*load_design("examples/dgx-h100-superpod.yaml"))
    failed = np.zeros(len(pod.links), bool)
    failed[0] = True
    for fabric in (pod, pod.with_failed(failed)):
        serving, rail = fabric.derived(node_nics)
        every = np.arange(len(fabric.node_arrays))
        nic, want = _per_rank(fabric, every)
        assert np.array_equal(serving, nic) and np.array_equal(rail, want)
        assert rail.dtype == want.dtype
        assert (serving[fabric.accelerators] >= 0).all()
        assert not serving.flags.writeable
        ranks = fabric.accelerators[:64].reshape(4, 16)
        first = channels(fabric, domain_parts(fabric, ranks))
        again = channels(fabric, domain_parts(fabric, ranks))
        assert np.array_equal(first.heads, again.heads)
        assert first.count.tolist() == [8, 8, 8, 8]  # a rail each, as the doctest's two
