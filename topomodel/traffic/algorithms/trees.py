"""NCCL's tree AllReduce: per NIC channel a chain inside each scale-up domain part and a
double binary tree over the parts (:mod:`topomodel.traffic.channels`)."""

from __future__ import annotations

from topomodel.traffic.algorithms.record import Algorithm, phase_of
from topomodel.traffic.channels import tree_flows
from topomodel.traffic.communicators import GroupView
from topomodel.traffic.phases import Phase


def tree_phases(collective: str, g: GroupView, size: float) -> list[list[Phase]]:
    flows, hops = tree_flows(g.channels, size,
                             mesh=g.fabric.structure.scaleup.kind == "full_mesh")
    return [[phase_of(g, flows, steps=1, label="tree reduce + broadcast", messages=hops)]]


TREE = Algorithm(
    "tree", ("allreduce",),
    note="tree: NCCL's tree over nodes: per NIC channel a chain in each scale-up domain"
                " and a double binary tree over the domains, S/2 per tree; reduction and"
                " broadcast at once",
    help="NCCL's double binary tree", nccl_intra="tree", nccl_inter="tree",
    generate=tree_phases, channels=True)
