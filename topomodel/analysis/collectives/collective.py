"""One collective on a fabric, every group of every group set at once: traffic,
routed and timed, with the fastest algorithm when asked for ``auto``."""

from __future__ import annotations

import heapq
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from topomodel.analysis.collectives.timing import (
    TimeModel,
    TrafficTime,
    floor_s,
    lower_bound_s,
    time_traffic,
)
from topomodel.analysis.training.stepshape import shared_traffic
from topomodel.errors import RouterLimit, UsageError
from topomodel.fabric.tables import Fabric
from topomodel.routing.sections import failed_tiers
from topomodel.traffic.algorithms import auto_candidates
from topomodel.traffic.collectives import (
    ALGORITHMS,
    busbw_factor,
    collective_shapes,
    collective_traffic,
)
from topomodel.traffic.communicators import NotApplicable, group_blocks
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
    ranks: int  # of the largest group of any set: the same whatever the order of the sets
    group_sets: tuple[str, ...]
    groups: tuple[int, ...]
    traffic: Traffic
    timing: TrafficTime
    set_timings: tuple[TrafficTime, ...]  # per group set (one: ``timing``), attribution
    candidates: dict[str, float]  # algorithm -> time_s, when auto
    _set_ranks: tuple[int, ...] = ()  # the largest group's ranks per set

    @property
    def set_link_bytes(self) -> tuple[np.ndarray, ...]:
        """Bytes on every link row per group set (made when read: a table row of the
        review needs none)."""
        return tuple(t.link_bytes for t in self.set_timings)

    @property
    def time_s(self) -> float:
        """Collective time, seconds."""
        return self.timing.time_s

    @property
    def delivered_share(self) -> float:
        """Share of the traffic's bytes that reached their destination, 0-1: 1 unless
        flows have no path (:attr:`TrafficTime.delivered_share`: of the flows as timed,
        which PXN may have rewritten)."""
        return self.timing.delivered_share

    @property
    def algbw_Bps(self) -> float:
        """size / time, bytes/s, of the delivered bytes: size x :attr:`delivered_share`
        / time. The time covers only the flows that have a path, so dividing the whole
        size by it would give a rate nothing achieved (with no flow lost, size / time,
        nccl-tests' definition)."""
        if not self.time_s:
            return float("nan")
        return self.size_bytes * self.delivered_share / self.time_s

    @property
    def busbw_Bps(self) -> float:
        """algbw x the nccl-tests factor of the largest groups (:attr:`ranks`), bytes/s
        (of the delivered bytes, as :attr:`algbw_Bps`)."""
        return self.algbw_Bps * busbw_factor(self.collective, self.ranks)

    @property
    def ranks_per_set(self) -> tuple[int, ...]:
        """Ranks of each group set's largest group, in the order of :attr:`group_sets`."""
        return tuple(int(r) for r in self._set_ranks)

    @property
    def busbw_per_set_Bps(self) -> tuple[float, ...]:
        """busbw of each group set (algbw x its own nccl-tests factor), bytes/s: with
        sets of different sizes, one busbw cannot describe them all."""
        return tuple(self.algbw_Bps * busbw_factor(self.collective, r)
                     for r in self.ranks_per_set)


def fastest(fabric: Fabric, build: Callable[[str], Traffic], candidates: Sequence[str], *,
            routing: str = "ecmp", seed: int = 0, router: str = "auto",
            time_model: TimeModel | None = None, floor: Callable[[str], float] | None = None
            ) -> tuple[str, Traffic, TrafficTime, dict[str, float]]:
    """The fastest of ``candidates`` as NCCL's tuner times them (by
    :attr:`~topomodel.analysis.collectives.timing.TrafficTime.tuner_time_s`, without the
    pipeline fill the tuner leaves out): each algorithm's traffic (``build(algorithm)``,
    which raises :class:`~topomodel.traffic.communicators.NotApplicable` where an
    algorithm does not apply) routed and timed. A candidate is skipped only where it
    does not apply or its traffic is beyond the router's limit
    (:class:`~topomodel.errors.RouterLimit`); any other error surfaces.

    The one algorithm search of the package: ``run_collective``'s ``auto``, the step's
    collectives and the review's all use it. Candidates are routed in the order of a
    bound they cannot beat (:func:`~topomodel.analysis.collectives.timing.lower_bound_s`), and one
    whose bound is no better than the best tuner time so far is not routed at all.
    ``floor(algorithm)``, where given, is a time in seconds no higher than that bound,
    known before the traffic is built (:func:`~topomodel.analysis.collectives.timing.floor_s` of
    its shapes; ``NotApplicable`` counts as 0): a candidate whose floor already loses is
    not built either. Floors change only what is built: the candidates are still
    routed in the order of their bounds (each is built when its floor comes first), so
    the result and the candidates routed are those of building every one. Returns
    (algorithm, its traffic, its timing, the time in seconds of each candidate routed).

    Raises
    ------
    UsageError
        When no candidate applies.
    """
    best: tuple[str, Traffic, TrafficTime] | None = None
    times: dict[str, float] = {}
    not_built: dict[int, str] = {}  # candidate -> why, reported in candidate order
    not_routed: list[str] = []
    built: dict[int, Traffic] = {}
    # (seconds, 0 a floor / 1 a bound, candidate): a floor sorts before a bound of the
    # same time, so bounds come out in the order a stable sort of every bound gives
    queue: list[tuple[float, int, int]] = []
    for index, algorithm in enumerate(candidates):
        try:
            first = floor(algorithm) if floor is not None else 0.0
        except NotApplicable:  # building it says why
            first = 0.0
        queue.append((first, 0, index))
    heapq.heapify(queue)
    while queue:
        seconds, is_bound, index = heapq.heappop(queue)
        if best is not None and seconds >= best[2].tuner_time_s:
            break  # neither this nor any later one can win: not built or routed
        algorithm = candidates[index]
        if not is_bound:
            try:
                built[index] = build(algorithm)
            except NotApplicable as exc:  # not for these groups or this fabric
                not_built[index] = f"{algorithm}: {exc}"
                continue
            heapq.heappush(queue, (lower_bound_s(fabric, built[index], time_model), 1, index))
            continue
        try:
            timing = time_traffic(fabric, built[index], routing=routing, seed=seed,
                                  router=router, time_model=time_model)
        except RouterLimit as exc:  # more work than the router takes: another may fit
            not_routed.append(f"{algorithm}: {exc}")
            continue
        times[algorithm] = timing.time_s
        if best is None or timing.tuner_time_s < best[2].tuner_time_s:
            best = (algorithm, built[index], timing)
    if best is None:
        refusals = [not_built[i] for i in sorted(not_built)] + not_routed
        raise UsageError("no algorithm applies to these groups ("
                         + "; ".join(refusals or ["none given"]) + ")")
    return (*best, times)


# PLR0913: keyword-only options of an entry point, as networkx's; a record would hide them
def run_collective(fabric: Fabric, collective: str, size_bytes: float,  # noqa: PLR0913
                   group_specs: Sequence[str] = ("all",), *, algorithm: str = "auto",
                   candidates: Sequence[str] | None = None,
                   routing: str = "ecmp", seed: int = 0, router: str = "auto",
                   time_model: TimeModel | None = None) -> CollectiveRun:
    """Run ``collective`` of ``size_bytes`` on every group of every spec at once.

    With ``algorithm="auto"`` the fastest of ``candidates`` (default:
    :func:`~topomodel.traffic.algorithms.auto_candidates`, as the step's) is kept,
    and the run lists each candidate's time.

    Raises
    ------
    UsageError
        For a bad group spec, an unknown collective or algorithm, or an algorithm (or,
        with ``auto``, every candidate) that does not apply to the groups.
    """
    if collective not in ALGORITHMS:
        raise UsageError(f"unknown collective {collective!r}; choose from"
                         f" {', '.join(ALGORITHMS)}")
    sets = [parse_groups(fabric, spec) for spec in group_specs]  # 2-D: a row per group
    set_ranks = tuple(int(groups.shape[1]) for groups in sets)
    ranks = max(set_ranks)  # not the first set's: the order of --group flags is no input
    if min(set_ranks) < 2:
        raise UsageError("a collective needs groups of at least 2 ranks")
    try:  # checked once: every candidate shares them (and their channels)
        blocks = [group_blocks(fabric, groups) for groups in sets]
    except ValueError as exc:
        raise UsageError(str(exc)) from None

    parts_of: dict[str, list[Traffic]] = {}  # per group set, for the attribution

    def fresh_traffic(alg: str) -> Traffic:
        parts_of[alg] = [
            collective_traffic(fabric, collective, groups, size_bytes, algorithm=alg,
                               group_names=[f"{spec}#{i}" for i in range(groups.count)])
            for spec, groups in zip(group_specs, blocks, strict=True)]
        return concurrent(parts_of[alg])

    def build(alg: str) -> Traffic:
        if len(sets) > 1 or not failed_tiers(fabric):
            return fresh_traffic(alg)
        # one group set on a copy with failed parts: the same flows as on the fabric's
        # other copies (a what-if per part), so the same phases, whose router sections
        # a failure elsewhere leaves intact are routed once (routing.sections)
        key = (collective, size_bytes, "groups", group_specs[0])
        parts_of[alg] = [shared_traffic(fabric, key, alg, lambda: fresh_traffic(alg))]
        return parts_of[alg][0]

    def floor(alg: str) -> float:
        shapes = (collective_shapes(fabric, collective, groups, size_bytes, algorithm=alg)
                  for groups in blocks)
        return floor_s(fabric, tuple(dict.fromkeys(s for part in shapes for s in part)),
                       time_model)

    times: dict[str, float] = {}
    if algorithm == "auto":
        tried = tuple(candidates or auto_candidates(fabric, collective, ranks))
        algorithm, traffic, timing, times = fastest(
            fabric, build, tried, routing=routing, seed=seed, router=router, time_model=time_model,
            floor=floor)
    else:
        if algorithm not in ALGORITHMS[collective]:
            raise UsageError(f"{collective} has no algorithm {algorithm!r}; choose from"
                             f" auto, {', '.join(ALGORITHMS[collective])}")
        try:
            traffic = build(algorithm)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
        timing = time_traffic(fabric, traffic, routing=routing, seed=seed, router=router,
                              time_model=time_model)
    parts = parts_of[algorithm]
    per_set = tuple(time_traffic(fabric, part, routing=routing, seed=seed, router=router,
                                 time_model=time_model) for part in parts) if len(parts) > 1 else (
        timing,)
    return CollectiveRun(collective, algorithm, size_bytes, ranks, tuple(group_specs),
                         tuple(len(g) for g in sets), traffic, timing, per_set, times,
                         set_ranks)
