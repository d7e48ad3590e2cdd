"""Point-to-point SendRecv: rank i sends S to rank i + 1 of its group."""

from __future__ import annotations

import numpy as np

from topomodel.traffic.algorithms.record import Algorithm
from topomodel.traffic.communicators import GroupView
from topomodel.traffic.phases import Phase


def p2p_phases(collective: str, g: GroupView, size: float) -> list[list[Phase]]:
    a = np.arange(g.n - 1)
    return [[g.phase(a, a + 1, size, steps=1, label="sendrecv")]]


P2P = Algorithm(
    "p2p", ("sendrecv",),
    note="sendrecv: rank i -> i+1 of each group, S each",
    help="point-to-point", nccl_intra="ring", nccl_inter="ring", generate=p2p_phases)
