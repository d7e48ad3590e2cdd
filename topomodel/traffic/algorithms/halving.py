"""Recursive halving-doubling (Rabenseifner's, in MPICH's order) for AllReduce,
AllGather and ReduceScatter on power-of-two groups."""

from __future__ import annotations

import numpy as np

from topomodel.traffic.algorithms.record import Algorithm
from topomodel.traffic.communicators import GroupView, NotApplicable
from topomodel.traffic.phases import Phase


def rhd_phases(collective: str, g: GroupView, size: float) -> list[list[Phase]]:
    n = g.n
    if n & (n - 1):
        raise NotApplicable("recursive halving-doubling needs a power-of-two group size"
                              f" (group {g.names[int(g.gid[0])]!r} has {n} ranks)")
    a = np.arange(n)
    halving = [1 << k for k in range(n.bit_length() - 1)]
    phases = []
    if collective in ("allreduce", "reducescatter"):
        phases += [g.phase(a, a ^ d, size / (2 * d), steps=1,
                           label=f"recursive halving, distance {d}") for d in halving]
    if collective in ("allreduce", "allgather"):
        phases += [g.phase(a, a ^ d, size / (2 * d), steps=1,
                           label=f"recursive doubling, distance {d}") for d in halving[::-1]]
    return [phases]


def rhd_rounds(collective: str, ranks: int, nodes: int, torus_shape: tuple[int, ...]) -> int:
    """log2 n point-to-point rounds each way: both halves for AllReduce, one for
    AllGather (doubling) and ReduceScatter (halving), as :func:`rhd_phases` runs them."""
    half = max(1, (ranks - 1).bit_length())
    return 2 * half if collective == "allreduce" else half


RHD = Algorithm(
    "rhd", ("allreduce", "allgather", "reducescatter"),
    note="rhd: recursive halving (distance 1, 2, ...) then doubling (..., 2, 1), S/(2d)"
               " per flow at distance d",
    help="recursive halving-doubling", nccl_intra="ring", nccl_inter="ring",
    generate=rhd_phases, rounds=rhd_rounds, auto=False,
    why_not_auto="NCCL does not run it (an MPI algorithm): run by name, to compare")
