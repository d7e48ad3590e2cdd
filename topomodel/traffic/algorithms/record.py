"""What one collective algorithm is: the :class:`Algorithm` record every family module
fills in and :mod:`topomodel.traffic.algorithms` lists.

A record holds every fact the package reads about an algorithm: the collectives it
serves, how it makes its flows, its point-to-point rounds and whether it runs NCCL's
channels, the NCCL algorithm that times it, whether ``auto`` tries it (and why not where
it does not), and whether its flows depend on which parts have failed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from topomodel.fabric.tables import Fabric
from topomodel.traffic.channels import Flows
from topomodel.traffic.communicators import GroupBlocks, GroupView
from topomodel.traffic.phases import Phase

Generator = Callable[[str, GroupView, float], list[list[Phase]]]
"""(collective, groups of one size, S bytes) -> a list of phase sequences, one per
group bucket; the sequences are merged by phase label."""

WholePlan = Callable[[GroupBlocks, tuple[str, ...], float, str],
                     tuple[tuple[Phase, ...], tuple[str, ...]]]
"""(every group block, group names, S bytes, algorithm name) -> (phases, notes), for an
algorithm that plans all groups together (the in-network reductions share switches)."""


def everywhere(fabric: Fabric) -> bool:
    """The default applicability: any fabric."""
    return True


def one_round(collective: str, ranks: int, nodes: int, torus_shape: tuple[int, ...]) -> int:
    """The default round count: one (algorithms NCCL tunes count their own steps)."""
    return 1


@dataclass(frozen=True)
class Algorithm:
    """One collective algorithm, as every part of the package sees it.

    ``nccl_intra`` and ``nccl_inter`` name the NCCL algorithm whose latency and protocol
    figures time it inside one scale-up domain and across several
    (:func:`~topomodel.analysis.collectives.protocols.latency_s`); ``ring_steps`` says whether its
    latency counts the ring's steps (2(n-1) for AllReduce) rather than ``rounds``.
    ``auto`` says whether ``algorithm="auto"`` tries it (route, the step, the review and
    decode all read this one flag); ``why_not_auto`` gives the reason where it does not.
    ``applies(fabric)`` is False on a fabric where the algorithm cannot run at all (no
    switch that reduces, no torus), a check of the parts alone, which failures do not
    change, so ``auto`` does not try it there. ``reads_switch_state``: its flows depend
    on which switches and links have failed, so a fabric's copies with other failed
    parts may not share its traffic.
    """

    name: str
    collectives: tuple[str, ...]
    note: str  # the one-line description a Traffic carries
    help: str  # a few words for the CLI's --algorithm help
    nccl_intra: str
    nccl_inter: str
    generate: Generator | None = None  # per group size, or...
    plan: WholePlan | None = None  # ...all groups together
    rounds: Callable[[str, int, int, tuple[int, ...]], int] = one_round
    channels: bool = False  # across domains, one NCCL channel per NIC (a count in Shape)
    ring_steps: bool = False
    auto: bool = True
    why_not_auto: str = ""
    reads_switch_state: bool = False
    applies: Callable[[Fabric], bool] = everywhere  # False: auto does not try it here

    def __post_init__(self) -> None:
        if (self.generate is None) == (self.plan is None):
            raise ValueError(f"algorithm {self.name!r}: give generate or plan, not both")
        if not self.auto and not self.why_not_auto:
            raise ValueError(f"algorithm {self.name!r}: say why auto does not try it")

    def nccl_name(self, nodes: int) -> str:
        """NCCL's algorithm for a group spanning ``nodes`` scale-up domains."""
        return self.nccl_intra if nodes <= 1 else self.nccl_inter


def phase_of(g: GroupView, flows: Flows, *, steps: int, label: str, messages: int = 1
             ) -> Phase:
    """A phase of channel flows whose last array is the row (group of ``g``) of each."""
    src, dst, nbytes, row = flows
    return Phase(src.astype(np.int64), dst.astype(np.int64), nbytes.astype(float),
                 g.gid[row].astype(np.int32), steps, label, messages)
