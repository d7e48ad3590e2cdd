"""All-to-All as NCCL runs it (every pair at once, grouped point-to-point) and as the
shifted pairwise exchange of MPI libraries."""

from __future__ import annotations

import math

import numpy as np

from topomodel.traffic.algorithms.record import Algorithm
from topomodel.traffic.channels import MAX_CHANNELS
from topomodel.traffic.communicators import GroupView
from topomodel.traffic.phases import AllPairs, AllPairsPhase, Phase

P2P_PER_BATCH = 8
"""Point-to-point rounds NCCL puts in one batch of work on a channel
(``NCCL_MAX_DEV_WORK_P2P_PER_BATCH`` in ``src/include/device.h``, NVIDIA/nccl 5067397c)."""


def direct_rounds(ranks: int, nodes: int) -> int:
    """Point-to-point rounds, one after another, of a direct All-to-All of ``ranks``
    ranks over ``nodes`` scale-up domains: the fewest NCCL can take.

    Across nodes, NCCL runs a rank's ``ranks`` send/receive rounds (``ncclP2pSchedule``
    in ``src/init.cc``) in groups of g = gcd(8, ranks per node). The g rounds of a
    group form one batch on the same channels (``ncclP2pChannelBaseForRound`` in
    ``src/include/channel.h``; ``ncclAddWorkBatchToPlan`` in ``src/enqueue.cc``). The
    batches are spread over its point-to-point channels, and a channel runs its
    batches in turn. With one channel per peer, the fewest NCCL gives a peer
    (``ncclTopoComputeP2pChannels`` in ``src/graph/paths.cc``), and at most
    :data:`~topomodel.traffic.channels.MAX_CHANNELS` channels, some channel runs
    ceil(ceil(ranks / g) / 64) batches. Each batch costs a round of latency. NCCL's
    own channel count, the ring's, is often 16-32, which topomodel does not derive, so
    this is a lower bound. Inside one node: one round, as NCCL's tuner gives.

    Examples
    --------
    >>> direct_rounds(8, 1), direct_rounds(512, 64), direct_rounds(24_576, 3_072)
    (1, 1, 48)
    >>> direct_rounds(98_304, 12_288), direct_rounds(1_024, 256)  # 4 ranks per node
    (192, 4)
    """
    if nodes <= 1:
        return 1
    group = math.gcd(P2P_PER_BATCH, max(1, ranks // nodes))
    return max(1, math.ceil(math.ceil(ranks / group) / MAX_CHANNELS))


def direct_phases(collective: str, g: GroupView, size: float) -> list[list[Phase]]:
    """Every ordered pair of each group, kept as the groups (:class:`AllPairsPhase`):
    its n(n - 1) flows per group are listed only where something reads them."""
    n = g.n
    block = AllPairs(g.ranks, g.gid.astype(np.int32), np.full(len(g.gid), size / n))
    return [[AllPairsPhase((block,), 1, "direct alltoall", n - 1)]]


def pairwise_phases(collective: str, g: GroupView, size: float) -> list[list[Phase]]:
    n = g.n
    a = np.arange(n)
    return [[g.phase(a, (a + k) % n, size / n, steps=1, label=f"pairwise shift {k}")
             for k in range(1, n)]]


def direct_rounds_of(collective: str, ranks: int, nodes: int,
                     torus_shape: tuple[int, ...]) -> int:
    """:func:`direct_rounds`."""
    return direct_rounds(ranks, nodes)


def pairwise_rounds(collective: str, ranks: int, nodes: int,
                    torus_shape: tuple[int, ...]) -> int:
    """n - 1 shifts, one after another."""
    return ranks - 1


DIRECT = Algorithm(
    "direct", ("alltoall",),
    note="direct: every ordered pair at once, S/n each, n-1 messages per rank",
    help="every pair at once", nccl_intra="ring", nccl_inter="ring",
    generate=direct_phases, rounds=direct_rounds_of)

PAIRWISE = Algorithm(
    "pairwise", ("alltoall",),
    note="pairwise: n-1 phases, rank i -> i+k, S/n each",
    help="n-1 shifted exchanges", nccl_intra="ring", nccl_inter="ring",
    generate=pairwise_phases, rounds=pairwise_rounds, auto=False,
    why_not_auto="NCCL posts every pair at once (direct); the shifted phases are an MPI"
                 " schedule: run by name, to compare")
