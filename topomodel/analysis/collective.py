"""One collective on a fabric, every group of every group set at once: traffic,
routed and timed, with the fastest algorithm when asked for ``auto``."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from topomodel.analysis.timing import TimeModel, TrafficTime, time_traffic
from topomodel.fabric.tables import Fabric
from topomodel.traffic.collectives import ALGORITHMS, busbw_factor, collective_traffic
from topomodel.traffic.groups import parse_groups
from topomodel.traffic.phases import Traffic, concurrent

SIZE_CONVENTIONS = {
    "allreduce": "nccl-tests: the buffer each rank holds",
    "allgather": "nccl-tests: the total receive buffer (ranks x per-rank chunk)",
    "reducescatter": "nccl-tests: the total send buffer (ranks x per-rank chunk)",
    "alltoall": "nccl-tests: each rank's send buffer (size / ranks to each peer)",
    "broadcast": "nccl-tests: the buffer",
    "reduce": "nccl-tests: the buffer",
    "sendrecv": "nccl-tests: bytes each rank sends to the next",
}


@dataclass(frozen=True, eq=False)
class CollectiveRun:
    """A timed collective: what ran and how long it took."""

    collective: str
    algorithm: str
    size_bytes: float
    ranks: int
    group_sets: tuple[str, ...]
    groups: tuple[int, ...]
    traffic: Traffic
    timing: TrafficTime
    set_link_bytes: tuple[np.ndarray, ...]  # per group set, for attribution
    candidates: dict[str, float]  # algorithm -> time_s, when auto

    @property
    def time_s(self) -> float:
        """Collective time, seconds."""
        return self.timing.time_s

    @property
    def algbw_Bps(self) -> float:
        """size / time, bytes/s."""
        return self.size_bytes / self.time_s if self.time_s else float("nan")

    @property
    def busbw_Bps(self) -> float:
        """algbw x the nccl-tests factor, bytes/s."""
        return self.algbw_Bps * busbw_factor(self.collective, self.ranks)


def run_collective(fabric: Fabric, collective: str, size_bytes: float,
                   group_specs: Sequence[str] = ("all",), *, algorithm: str = "auto",
                   routing: str = "ecmp", seed: int = 0, router: str = "auto",
                   model: TimeModel | None = None) -> CollectiveRun:
    """Run ``collective`` of ``size_bytes`` on every group of every spec at once.

    Raises
    ------
    UsageError
        For a bad group spec. ``ValueError`` for an algorithm that does not apply.
    """
    from topomodel.errors import UsageError

    if collective not in ALGORITHMS:
        raise UsageError(f"unknown collective {collective!r}; choose from"
                         f" {', '.join(ALGORITHMS)}")
    sets = [parse_groups(fabric, spec) for spec in group_specs]
    ranks = len(sets[0][0])
    if ranks < 2:
        raise UsageError("a collective needs groups of at least 2 ranks")

    def build(alg: str) -> tuple[Traffic, list[Traffic]]:
        parts = [collective_traffic(fabric, collective, groups, size_bytes, algorithm=alg,
                                    group_names=[f"{spec}#{i}" for i in range(len(groups))])
                 for spec, groups in zip(group_specs, sets, strict=True)]
        return concurrent(parts), parts

    candidates: dict[str, float] = {}
    if algorithm == "auto":
        best = None
        for alg in ALGORITHMS[collective]:
            try:
                traffic, parts = build(alg)
            except ValueError:
                continue  # not applicable to these groups or switches
            timing = time_traffic(fabric, traffic, routing=routing, seed=seed, router=router,
                                  model=model)
            candidates[alg] = timing.time_s
            if best is None or timing.time_s < best[3].time_s:
                best = (alg, traffic, parts, timing)
        if best is None:
            raise UsageError(f"no algorithm applies to {collective} on these groups")
        algorithm, traffic, parts, timing = best
    else:
        if algorithm not in ALGORITHMS[collective]:
            raise UsageError(f"{collective} has no algorithm {algorithm!r}; choose from"
                             f" auto, {', '.join(ALGORITHMS[collective])}")
        try:
            traffic, parts = build(algorithm)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
        timing = time_traffic(fabric, traffic, routing=routing, seed=seed, router=router,
                              model=model)
    per_set = tuple(time_traffic(fabric, part, routing=routing, seed=seed, router=router,
                                 model=model).link_bytes for part in parts) if len(
        parts) > 1 else (timing.link_bytes,)
    return CollectiveRun(collective, algorithm, size_bytes, ranks, tuple(group_specs),
                         tuple(len(g) for g in sets), traffic, timing, per_set, candidates)
