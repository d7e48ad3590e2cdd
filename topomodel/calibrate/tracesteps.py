"""What a job's profiler traces measured: each collective's time and busbw, and each
step's compute, communication, exposed communication and wait, per rank.

Read from :mod:`topomodel.inputs.measured.kineto`'s :class:`RankTrace`\\ s; nothing here
runs the model (:mod:`topomodel.calibrate.trace` compares the two).

- **Compute** of a step: the time inside the step covered by at least one compute span
  (GPU kernels other than NCCL's; CPU operators on a trace without GPU kernels).
- **Communication**: the time covered by at least one collective; **exposed
  communication**: the part of it not covered by compute on the same rank, the share of
  the step the profiler's "communication not overlapped" view shows.
- **Wait**: a collective starts on a rank that arrived early and ends when the last rank
  arrives and the data has moved, so its duration on that rank includes waiting for
  the others. With traces of two or more ranks, a call is matched across ranks (the
  same group, kind and size, the n-th such call on each rank) and the fastest rank's
  duration is taken as the transfer; the rest is wait
  (:data:`WAIT_FROM_FASTEST_RANK`). A step's wait is that of its collectives, at most
  its exposed communication; the exposed communication reported beside it is the rest.
- **Idle**: the step's time that is neither compute nor exposed communication (launch
  gaps, the data loader, the host).

A collective's busbw is nccl-tests': size / time x the factor of its kind and group size
(:func:`topomodel.traffic.collectives.busbw_factor`).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from topomodel.inputs.measured.kineto import RankTrace, TraceCollective
from topomodel.inputs.records import documented
from topomodel.traffic.collectives import ALGORITHMS, busbw_factor

WAIT_FROM_FASTEST_RANK = documented(
    "tracesteps.WAIT_FROM_FASTEST_RANK", True,
    """A matched call's transfer time is its shortest duration over the ranks traced:
    the rank that arrives last waits least, so its duration is the closest a trace comes
    to the data movement alone (NCCL's kernels spin until every peer has arrived). It
    over-states the transfer when no traced rank was the last to arrive (a trace of some
    ranks only), which makes the wait a lower bound.""")


@dataclass(frozen=True)
class CollectiveMeasure:
    """One kind and size of collective in the traces: seconds (medians over every call
    on every rank), bytes/s."""

    kind: str
    size_bytes: float | None
    group_size: int | None
    calls: int  # on all ranks
    time_s: float  # median duration
    transfer_s: float  # median over calls of the fastest rank's duration
    algorithms: str  # NCCL's algorithm/protocol from the kernel names ('' for gloo)
    transfer_spread: float = 0.0  # the fastest-rank durations' (max - min) / median, 0-
    sources: str = ""  # what ran it: 'nccl kernel', 'gloo' (comma-separated if both)

    @property
    def algbw_Bps(self) -> float | None:
        """size / median time, bytes/s (None without a size)."""
        if self.size_bytes is None or not self.time_s:
            return None
        return self.size_bytes / self.time_s

    @property
    def busbw_Bps(self) -> float | None:
        """algbw x the nccl-tests factor of the kind and group size, bytes/s (None for a
        kind nccl-tests does not time or without a group size)."""
        algbw = self.algbw_Bps
        if algbw is None or self.kind not in ALGORITHMS or not self.group_size:
            return None
        return algbw * busbw_factor(self.kind, self.group_size)


@dataclass(frozen=True)
class StepMeasure:
    """One step on one rank, seconds."""

    rank: int
    step: int
    step_s: float
    compute_s: float
    comm_s: float  # covered by a collective
    exposed_comm_s: float  # communication not hidden by compute, less the wait
    wait_s: float  # exposed time spent waiting for other ranks
    idle_s: float  # neither compute nor exposed communication
    comm_by_kind_s: tuple[tuple[str, float], ...]  # summed durations per kind

    @property
    def comm_share(self) -> float:
        """Exposed communication and wait as a share of the step, 0-1."""
        return (self.exposed_comm_s + self.wait_s) / self.step_s if self.step_s else 0.0


@dataclass(frozen=True)
class TraceMeasure:
    """What the traces of a job measured."""

    files: tuple[str, ...]
    ranks: tuple[int, ...]
    device: str
    backend: str
    collectives: tuple[CollectiveMeasure, ...]
    steps: tuple[StepMeasure, ...]
    warnings: tuple[str, ...]

    def median(self, part: str) -> float:
        """The median over every rank's steps of a :class:`StepMeasure` field or of
        ``comm_share``."""
        values = [getattr(s, part) for s in self.steps]
        return float(np.median(values)) if values else float("nan")

    def comm_per_step_s(self, kind: str) -> float:
        """The median over rank-steps of the summed durations of ``kind``'s calls."""
        values = [dict(s.comm_by_kind_s).get(kind, 0.0) for s in self.steps]
        return float(np.median(values)) if values else 0.0


def merged(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Spans made disjoint: the union of ``[start, end)`` spans as sorted, separate spans.

    Examples
    --------
    >>> s, e = merged(np.array([0., 5., 1.]), np.array([2., 6., 3.]))
    >>> s.tolist(), e.tolist()
    ([0.0, 5.0], [3.0, 6.0])
    """
    keep = ends > starts
    starts, ends = starts[keep], ends[keep]
    if not len(starts):
        return starts, ends
    order = np.argsort(starts, kind="stable")
    s, e = starts[order], ends[order]
    reach = np.maximum.accumulate(e)
    first = np.r_[True, s[1:] > reach[:-1]]
    heads = np.flatnonzero(first)
    return s[first], np.maximum.reduceat(e, heads)


def covered_s(spans: tuple[np.ndarray, np.ndarray]) -> float:
    """Total length of disjoint spans (as :func:`merged` gives them), seconds."""
    return float((spans[1] - spans[0]).sum())


def overlap_s(a: tuple[np.ndarray, np.ndarray], b: tuple[np.ndarray, np.ndarray]) -> float:
    """Length covered by both of two sets of disjoint spans, seconds.

    Examples
    --------
    >>> a = merged(np.array([0., 10.]), np.array([4., 12.]))
    >>> b = merged(np.array([3.]), np.array([11.]))
    >>> overlap_s(a, b)
    2.0
    """
    points = np.unique(np.concatenate([a[0], a[1], b[0], b[1]]))
    if len(points) < 2:
        return 0.0
    mid = (points[:-1] + points[1:]) / 2

    def inside(spans: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
        opened = np.searchsorted(spans[0], mid, side="right")
        closed = np.searchsorted(spans[1], mid, side="right")
        return np.asarray(opened > closed)

    return float(np.diff(points)[inside(a) & inside(b)].sum())


def clipped(spans: tuple[np.ndarray, np.ndarray], start_s: float, end_s: float
            ) -> tuple[np.ndarray, np.ndarray]:
    """Disjoint spans cut to the window ``[start_s, end_s)``."""
    s, e = np.maximum(spans[0], start_s), np.minimum(spans[1], end_s)
    keep = e > s
    return s[keep], e[keep]


def _call_key(c: TraceCollective) -> tuple[str, str, float | None, int | None]:
    return (c.group, c.kind, c.size_bytes, c.group_size)


def _fastest(traces: Sequence[RankTrace]) -> dict[tuple[int, int], float]:
    """Each call's fastest duration over the ranks, by (trace index, call index)."""
    calls: dict[tuple[object, ...], list[tuple[int, int, float]]] = defaultdict(list)
    for t, trace in enumerate(traces):
        seen: dict[tuple[str, str, float | None, int | None], int] = defaultdict(int)
        for i, c in enumerate(trace.collectives):
            key = _call_key(c)
            calls[(*key, seen[key])].append((t, i, c.duration_s))
            seen[key] += 1
    fastest: dict[tuple[int, int], float] = {}
    for members in calls.values():
        low = min(d for _, _, d in members)
        for t, i, own in members:
            fastest[(t, i)] = low if WAIT_FROM_FASTEST_RANK else own
    return fastest


def _collectives(traces: Sequence[RankTrace], fastest: dict[tuple[int, int], float]
                 ) -> tuple[CollectiveMeasure, ...]:
    groups: dict[tuple[str, float | None, int | None],
                 list[tuple[float, float, str, str]]] = defaultdict(list)
    for t, trace in enumerate(traces):
        for i, c in enumerate(trace.collectives):
            how = "/".join(x for x in (c.algorithm, c.protocol) if x)
            groups[(c.kind, c.size_bytes, c.group_size)].append(
                (c.duration_s, fastest[(t, i)], how, c.source))
    rows = []
    for (kind, size, group), calls in groups.items():
        durations = np.array([d for d, _, _, _ in calls])
        transfers = np.array([f for _, f, _, _ in calls])
        median = float(np.median(transfers))
        rows.append(CollectiveMeasure(
            kind, size, group, len(calls), float(np.median(durations)), median,
            ", ".join(sorted({h for _, _, h, _ in calls if h})),
            float(np.ptp(transfers) / median) if median > 0 else 0.0,
            ", ".join(sorted({s for _, _, _, s in calls}))))
    return tuple(sorted(rows, key=lambda r: (r.kind, r.size_bytes or 0.0,
                                             r.group_size or 0)))


def _steps(trace: RankTrace, rank: int, fastest: dict[tuple[int, int], float],
           index: int) -> list[StepMeasure]:
    compute = merged(trace.compute_start_s, trace.compute_end_s)
    starts = np.array([c.start_s for c in trace.collectives], dtype=np.float64)
    ends = starts + np.array([c.duration_s for c in trace.collectives], dtype=np.float64)
    comm = merged(starts, ends)
    windows = [(s.number, s.start_s, s.end_s) for s in trace.steps]
    if not windows:
        edges = [a for a in (compute[0][:1], compute[1][-1:], comm[0][:1], comm[1][-1:])
                 if len(a)]
        if not edges:
            return []
        every = np.concatenate(edges)
        windows = [(0, float(every.min()), float(every.max()))]
    out = []
    for number, w0, w1 in windows:
        step_compute, step_comm = clipped(compute, w0, w1), clipped(comm, w0, w1)
        compute_s, comm_s = covered_s(step_compute), covered_s(step_comm)
        exposed = comm_s - overlap_s(step_comm, step_compute)
        inside = [i for i, c in enumerate(trace.collectives) if w0 <= c.start_s < w1]
        wait = sum(trace.collectives[i].duration_s - fastest[(index, i)] for i in inside)
        wait = min(max(wait, 0.0), exposed)
        by_kind: dict[str, float] = defaultdict(float)
        for i in inside:
            by_kind[trace.collectives[i].kind] += trace.collectives[i].duration_s
        step_s = w1 - w0
        out.append(StepMeasure(rank, number, step_s, compute_s, comm_s, exposed - wait,
                               wait, max(step_s - compute_s - exposed, 0.0),
                               tuple(sorted(by_kind.items()))))
    return out


def measure_traces(traces: Sequence[RankTrace]) -> TraceMeasure:
    """Each collective's and each step's measured times in the traces of one job.

    Examples
    --------
    >>> from topomodel.inputs.measured.kineto import parse_trace
    >>> def rank(r, dur):
    ...     return parse_trace({"distributedInfo": {"rank": r, "world_size": 2},
    ...         "traceEvents": [
    ...         {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "ts": 0,
    ...          "dur": 100},
    ...         {"ph": "X", "cat": "kernel", "name": "gemm", "ts": 0, "dur": 60},
    ...         {"ph": "X", "cat": "kernel", "name": "ncclDevKernel_AllReduce_Sum_f32_RING_LL",
    ...          "ts": 50, "dur": dur, "args": {"Collective name": "allreduce",
    ...          "dtype": "Float", "In msg nelems": 250, "Out msg nelems": 250,
    ...          "Group size": 2, "Process Group Name": "0"}}]})
    >>> m = measure_traces([rank(0, 40), rank(1, 30)])
    >>> s = m.steps[0]
    >>> round(s.compute_s * 1e6), round(s.exposed_comm_s * 1e6), round(s.wait_s * 1e6)
    (60, 20, 10)
    >>> c = m.collectives[0]
    >>> c.kind, c.calls, round(c.transfer_s * 1e6), round(c.busbw_Bps / 1e6)
    ('allreduce', 2, 30, 29)
    """
    fastest = _fastest(traces)
    steps: list[StepMeasure] = []
    warnings: list[str] = []
    for index, trace in enumerate(traces):
        rank = trace.rank if trace.rank is not None else index
        steps += _steps(trace, rank, fastest, index)
        warnings += trace.warnings
    if len(traces) == 1:
        warnings.append("one rank's trace: its collectives' wait for other ranks cannot be"
                        " told from their transfer (give every rank's trace)")
    devices = sorted({t.device for t in traces})
    backends = sorted({t.backend for t in traces if t.backend})
    return TraceMeasure(tuple(t.file for t in traces),
                        tuple(t.rank if t.rank is not None else i
                              for i, t in enumerate(traces)),
                        "/".join(devices), "/".join(backends),
                        _collectives(traces, fastest), tuple(steps), tuple(warnings))
