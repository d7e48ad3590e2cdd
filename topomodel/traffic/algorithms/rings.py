"""Ring algorithms: NCCL's ring (with its channels across scale-up domains), the
Broadcast and Reduce chains, and the hierarchical ring (rings inside the domain parts of a
group and across them, pipelined). Bytes per flow per step; the layouts are described in
:mod:`topomodel.traffic.collectives`."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from topomodel.traffic.algorithms.record import Algorithm, phase_of
from topomodel.traffic.channels import ring_flows
from topomodel.traffic.communicators import GroupView, NotApplicable
from topomodel.traffic.phases import Phase


def ring_phases(collective: str, g: GroupView, size: float) -> list[list[Phase]]:
    n = g.n
    if collective in ("allreduce", "allgather", "reducescatter"):
        flows = ring_flows(g.channels, size,
                           mesh=g.fabric.structure.scaleup.kind == "full_mesh")
        steps = 2 * (n - 1) if collective == "allreduce" else n - 1
        return [[phase_of(g, flows, steps=steps, label=f"ring {collective}")]]
    chain = np.arange(n - 1)
    if collective == "broadcast":
        return [[g.phase(chain, chain + 1, size, steps=1, label="chain broadcast",
                         messages=n - 1)]]
    return [[g.phase(chain + 1, chain, size, steps=1, label="chain reduce", messages=n - 1)]]


def hierarchical_phases(collective: str, g: GroupView, size: float) -> list[list[Phase]]:
    out = []
    for groups, m in equal_parts(g):
        parts = groups.n // m
        n = parts * m
        a = np.arange(n)
        inside = (a // m) * m + (a % m + 1) % m
        across = ((a // m + 1) % parts) * m + a % m
        rs_in = ("ring reduce-scatter inside domains", inside, size / m, m - 1)
        ag_in = ("ring allgather inside domains", inside, size / m, m - 1)
        plan = {
            "allreduce": [rs_in, ("ring allreduce across domains", across, size / n,
                                  2 * (parts - 1)), ag_in],
            "allgather": [("ring allgather across domains", across, size / n, parts - 1),
                          ag_in],
            "reducescatter": [rs_in, ("ring reduce-scatter across domains", across,
                                      size / n, parts - 1)],
        }[collective]
        stages = [groups.phase(a, b, nbytes, steps=steps, label=label)
                  for label, b, nbytes, steps in plan if steps > 0]
        out.append([pipelined(stages)])
    return out


def pipelined(stages: Sequence[Phase]) -> Phase:
    """Stages that a collective pipelines chunk by chunk, as one phase: every stage's
    bytes on the links at once (one step carrying all their steps' bytes), the time
    the slowest link's, and a message latency for each step of each stage (the first
    chunk still goes through every step). The efficiency is the lowest of the stages'.

    Examples
    --------
    >>> a = Phase(np.array([0]), np.array([1]), np.array([2.0]), np.array([0], np.int32), 3)
    >>> b = Phase(np.array([1]), np.array([2]), np.array([1.0]), np.array([0], np.int32), 2)
    >>> p = pipelined([a, b])
    >>> p.steps, p.bytes.tolist(), p.messages_per_step
    (1, [6.0, 2.0], 5)
    """
    if len(stages) == 1:
        return stages[0]
    return Phase(np.concatenate([p.src for p in stages]),
                 np.concatenate([p.dst for p in stages]),
                 np.concatenate([p.bytes * p.steps for p in stages]),
                 np.concatenate([p.group for p in stages]), 1,
                 " + ".join(p.label for p in stages),
                 sum(p.steps * p.messages_per_step for p in stages),
                 min(p.efficiency for p in stages))


def equal_parts(g: GroupView) -> list[tuple[GroupView, int]]:
    """Groups reordered part by part, by part size; refuse a group with uneven parts."""
    layout = g.layout
    smallest, largest = layout.size.min(axis=1), layout.size.max(axis=1)
    uneven = np.flatnonzero(smallest != largest)
    if len(uneven):
        i = int(uneven[0])
        sizes = layout.size[i][layout.start[i] == np.arange(g.n)]
        raise NotApplicable(
            f"hierarchical needs the same number of ranks in every scale-up domain part of a"
            f" group; group {g.names[int(g.gid[i])]!r} has parts of"
            f" {', '.join(map(str, sizes.tolist()))} ranks")
    out = []
    for m in dict.fromkeys(smallest.tolist()):
        rows = np.flatnonzero(smallest == m)
        out.append((GroupView(layout.ranks[rows], g.gid[rows], g.names, g.fabric), int(m)))
    return out


RING = Algorithm(
    "ring", ("allreduce", "allgather", "reducescatter", "broadcast", "reduce"),
    note="ring: one phase per collective, S/n per step; across scale-up domains one"
                " channel per NIC (S/C each, same-rail hops between domains, the last chunk of"
                " a domain relayed to the channel's head); Broadcast/Reduce a pipelined chain"
                " from/to rank 0 with n-1 message latencies",
    help="NCCL's ring", nccl_intra="ring", nccl_inter="ring", generate=ring_phases,
    channels=True, ring_steps=True)

HIERARCHICAL = Algorithm(
    "hierarchical", ("allreduce", "allgather", "reducescatter"),
    note="hierarchical: rings inside scale-up domain parts and across them among"
                        " ranks of the same position, pipelined (the stages run at once)",
    help="rings inside and across scale-up domains", nccl_intra="ring", nccl_inter="ring",
    generate=hierarchical_phases, channels=True, ring_steps=True, auto=False,
    why_not_auto="NCCL runs no hierarchical ring (its ring already crosses domains on"
                 " same-rail channels): run by name, to compare")
