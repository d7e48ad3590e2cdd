"""Pipeline schedules and their timeline: every microbatch on every stage, as arrays.

A schedule is, for each of the ``p`` stages, the order in which that stage runs its
operations: the forward pass ``F`` of a microbatch through one of its model chunks, the
backward pass ``B`` (input and, unless split off, weight gradients) and, for a
zero-bubble schedule, the weight-gradient pass ``W``. The schedules:

- **1F1B** (PipeDream-Flush; Narayanan et al., "Memory-Efficient Pipeline-Parallel DNN
  Training", arXiv 2006.09503): stage s runs min(p - s - 1, m) warm-up forwards, then
  alternates one forward and one backward, then drains the remaining backwards.
- **Interleaved 1F1B** (Narayanan et al., SC'21, section 2.2.2), ``v`` > 1 model chunks
  per stage: Megatron-LM's order, with p x (v - 1) + 2 (p - s - 1) warm-up forwards;
  forward k runs chunk (k // p) mod v of microbatch (k // (p v)) p + k mod p, backward
  k the chunks in reverse. Needs m to be a multiple of p, as Megatron-LM does.
- **ZB-H1** (Qi et al., "Zero Bubble Pipeline Parallelism", arXiv 2401.10241): 1F1B with
  the backward split into B (input gradients, on the critical path) and W (weight
  gradients, which nothing downstream waits for). Stage s defers its W passes by s
  microbatches, so the last stages, which idle longest at the end of 1F1B, fill that
  time with deferred W passes and send their B passes upstream sooner. With equal F, B
  and W times the bubble is (p - 1)(F + B - W), a third of 1F1B's, and no stage holds
  more than p microbatches, as the paper's H1 schedule does.

:func:`timeline` runs a schedule: an operation starts when its stage is free and its
input has arrived (the previous stage's F, the next stage's B, plus the pipeline send
between them), so the bubble includes the stages' own communication and the slowest
stage sets the pace. It advances every stage at once, one operation per round, with
array operations: a round costs the same at 4 stages or 64, and the rounds number
about the operations of one stage plus twice the stages. Which operations a round runs
depends on the schedule alone, so the rounds are found once per schedule.

Examples
--------
>>> s = schedule("1f1b", 4, 8)
>>> s.kind.shape, [int(x) for x in s.micro[0, :6]]
((4, 16), [0, 1, 2, 3, 0, 4])
>>> t = timeline(s, np.ones((3, 4, 1)), np.zeros((4, 2)))
>>> float(t.makespan_s)  # (m + p - 1) x (F + B) with F = B = 1
22.0
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import Any

import numpy as np

from topomodel.errors import UsageError
from topomodel.kept import Kept

F, B, W = 0, 1, 2
SCHEDULE_NAMES = ("1f1b", "zb-h1")


@dataclass(frozen=True, eq=False)
class Schedule:
    """Per stage, the operations in the order the stage runs them: arrays of shape
    (p, n) with the kind (``F``, ``B``, ``W``), microbatch and model chunk of each, and
    ``paired``: whether the operation runs in the steady phase next to one of the other
    direction (what DualPipe-style overlap pairs)."""

    name: str
    p: int
    m: int
    v: int
    kind: np.ndarray
    micro: np.ndarray
    chunk: np.ndarray
    paired: np.ndarray

    @property
    def ops(self) -> int:
        """Operations per stage."""
        return int(self.kind.shape[1])


def schedule(name: str, p: int, m: int, v: int = 1) -> Schedule:
    """The operations of schedule ``name`` (``1f1b``, interleaved when ``v`` > 1, or
    ``zb-h1``) for ``p`` stages and ``m`` microbatches.

    Raises
    ------
    UsageError
        For an unknown schedule, ``zb-h1`` with virtual stages, or an interleaved
        schedule whose microbatches are not a multiple of the stages.
    """
    if name not in SCHEDULE_NAMES:
        raise UsageError(f"unknown pipeline schedule {name!r}; choose from"
                         f" {', '.join(SCHEDULE_NAMES)}")
    if name == "zb-h1" and v > 1:
        raise UsageError("zb-h1 has no virtual stages (interleave must be 1)")
    if v > 1 and m % p:
        raise UsageError(f"interleaved 1F1B needs the microbatches per pipeline ({m}) to be"
                         f" a multiple of pp ({p}), as Megatron-LM does")
    rows = [_interleaved(p, m, v, s) if v > 1 else _one_f_one_b(p, m, s, name == "zb-h1")
            for s in range(p)]
    kind, micro, chunk, paired = (np.stack([r[i] for r in rows]) for i in range(4))
    return Schedule(name, p, m, v, kind.astype(np.int8), micro.astype(np.int64),
                    chunk.astype(np.int64), paired.astype(bool))


def _one_f_one_b(p: int, m: int, s: int, zero_bubble: bool
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    warm = min(p - s - 1, m)
    steady = m - warm
    kinds: list[np.ndarray] = [np.full(warm, F)]
    micros: list[np.ndarray] = [np.arange(warm)]
    paired: list[np.ndarray] = [np.zeros(warm, bool)]
    j = np.arange(steady)
    if not zero_bubble:
        kinds.append(np.stack([np.full(steady, F), np.full(steady, B)], 1).ravel())
        micros.append(np.stack([j + warm, j], 1).ravel())
        paired.append(np.ones(2 * steady, bool))
        kinds.append(np.full(warm, B))
        micros.append(np.arange(steady, m))
        paired.append(np.zeros(warm, bool))
    else:
        delay = s  # W of microbatch i runs after B of microbatch i + s
        i = np.arange(m)
        block_kind = np.broadcast_to(np.array([F, B, W]), (m, 3))
        block_micro = np.stack([i + warm, i, i - delay], 1)
        block_paired = np.stack([np.ones(m, bool), i < steady, np.zeros(m, bool)], 1)
        keep = np.stack([i < steady, np.ones(m, bool), i >= delay], 1)
        kinds.append(block_kind[keep])
        micros.append(block_micro[keep])
        paired.append(block_paired[keep])
        rest = np.arange(max(0, m - delay), m)
        kinds.append(np.full(len(rest), W))
        micros.append(rest)
        paired.append(np.zeros(len(rest), bool))
    kind = np.concatenate(kinds)
    return kind, np.concatenate(micros), np.zeros(len(kind), np.int64), np.concatenate(paired)


def _interleaved(p: int, m: int, v: int, s: int
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    total = m * v
    warm = min((p - s - 1) * 2 + (v - 1) * p, total)
    k = np.arange(total)
    micro = (k // (p * v)) * p + k % p
    f_chunk = (k // p) % v
    b_chunk = v - 1 - f_chunk
    steady = total - warm
    j = np.arange(steady)
    kind = np.concatenate([np.full(warm, F), np.stack([np.full(steady, F),
                                                       np.full(steady, B)], 1).ravel(),
                           np.full(warm, B)])
    idx_f = np.concatenate([k[:warm], np.stack([j + warm, np.full(steady, -1)], 1).ravel(),
                            np.full(warm, -1)])
    idx_b = np.concatenate([np.full(warm, -1), np.stack([np.full(steady, -1), j], 1).ravel(),
                            k[steady:]])
    is_f = kind == F
    micro_out = np.where(is_f, micro[np.maximum(idx_f, 0)], micro[np.maximum(idx_b, 0)])
    chunk_out = np.where(is_f, f_chunk[np.maximum(idx_f, 0)], b_chunk[np.maximum(idx_b, 0)])
    paired = np.concatenate([np.zeros(warm, bool), np.ones(2 * steady, bool),
                             np.zeros(warm, bool)])
    return kind, micro_out, chunk_out, paired


@dataclass(frozen=True, eq=False)
class Timeline:
    """A schedule run: start and end of every operation (seconds, shape (p, n)), each
    stage's busy time and end, the makespan, and the pipeline-send time on the critical
    path (the part of the bubble that is waiting for data in flight)."""

    schedule: Schedule
    start_s: np.ndarray
    end_s: np.ndarray
    busy_s: np.ndarray  # per stage
    stage_end_s: np.ndarray  # per stage
    makespan_s: float
    critical_send_s: float
    critical_stages: np.ndarray  # stages the critical path runs through, in order


def dependencies(s: Schedule) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For each operation, the stage and position of the operation whose output it
    needs (-1: none), and which stage boundary the data crosses (-1: none; boundary b
    is between stage b and b + 1, boundary p - 1 the wrap from the last stage to the
    first that interleaving adds)."""
    p, n, v = s.p, s.ops, s.v
    pos = np.full((3, p, s.m, v), -1, dtype=np.int64)
    stages = np.broadcast_to(np.arange(p)[:, None], (p, n))
    pos[s.kind, stages, s.micro, s.chunk] = np.broadcast_to(np.arange(n), (p, n))
    dep_stage = np.full((p, n), -1, dtype=np.int64)
    dep_kind = np.full((p, n), -1, dtype=np.int64)
    dep_chunk = s.chunk.copy()
    boundary = np.full((p, n), -1, dtype=np.int64)
    is_f, is_b, is_w = s.kind == F, s.kind == B, s.kind == W
    first, last = stages == 0, stages == p - 1
    # F: from the previous stage, or (chunk > 0) from the last stage's previous chunk
    m = is_f & ~first
    dep_stage[m], dep_kind[m], boundary[m] = stages[m] - 1, F, stages[m] - 1
    m = is_f & first & (s.chunk > 0)
    dep_stage[m], dep_kind[m], dep_chunk[m], boundary[m] = p - 1, F, s.chunk[m] - 1, p - 1
    # B: from the next stage, or (last stage) from the first stage's next chunk, or the
    # stage's own F of the last chunk
    m = is_b & ~last
    dep_stage[m], dep_kind[m], boundary[m] = stages[m] + 1, B, stages[m]
    m = is_b & last & (s.chunk < v - 1)
    dep_stage[m], dep_kind[m], dep_chunk[m], boundary[m] = 0, B, s.chunk[m] + 1, p - 1
    m = is_b & last & (s.chunk == v - 1)
    dep_stage[m], dep_kind[m] = stages[m], F
    dep_stage[is_w], dep_kind[is_w] = stages[is_w], B  # W after its own B
    has = dep_stage >= 0
    dep_pos = np.full((p, n), -1, dtype=np.int64)
    dep_pos[has] = pos[dep_kind[has], dep_stage[has], s.micro[has], dep_chunk[has]]
    return dep_stage, dep_pos, boundary


def timeline(s: Schedule, duration_s: np.ndarray, send_s: np.ndarray, *,
             stage_ready_s: np.ndarray | None = None,
             per_op_extra_s: np.ndarray | None = None,
             blocking_sends: bool = False) -> Timeline:
    """Run schedule ``s``.

    ``duration_s[kind, stage, chunk]`` is how long each operation takes (or, shape
    (p, n), each operation's own duration);
    ``send_s[boundary, kind]`` the pipeline send across boundary b for the forward
    (column 0) and backward (column 1) activations: the receiving operation cannot
    start before it has arrived, and with ``blocking_sends`` the sender cannot start
    its next operation before its own send has finished (Megatron-LM's batched
    send/receive waits on both, and synchronised the device after each exchange:
    megatron/p2p_communication.py in 2022); ``stage_ready_s`` when each stage can start
    (default 0); ``per_op_extra_s`` (p, n) time added to single operations.

    A run is kept by the schedule and the bit patterns of the times (:data:`TIMELINE_OPS`)
    and given again to the next run of the same, its arrays read-only.

    Raises
    ------
    RuntimeError
        If the schedule deadlocks (an operation waits for one that never runs).
    """
    duration_s = np.asarray(duration_s, dtype=float)
    key = (id(s), _array_key(duration_s), _array_key(send_s),
           None if stage_ready_s is None else _array_key(stage_ready_s),
           None if per_op_extra_s is None else _array_key(per_op_extra_s), blocking_sends)
    return _TIMELINES.get(key, (s,), lambda: _timeline(
        s, duration_s, send_s, stage_ready_s, per_op_extra_s, blocking_sends))


def _array_key(values: np.ndarray) -> tuple[tuple[int, ...], bytes]:
    """An array's shape and float64 bit patterns (-0.0 apart from +0.0, as a run may
    tell them apart), as a key."""
    values = np.asarray(values, dtype=float)
    return values.shape, values.tobytes()


TIMELINE_OPS = 1 << 20
"""Operations of the timelines :func:`timeline` keeps (all dropped when full): some
24 bytes each (start, end and whether it waited), so about 24 MB. A planner runs the
comm-free timeline of many layouts whose operations take the same times in the same
schedule (two in three on an 8k cut of the 98k servers, Llama 3 70B: families that
differ only in what the comm-free pipeline does not read)."""


_TIMELINES: Kept[Timeline] = Kept(TIMELINE_OPS, size=lambda t: t.schedule.p * t.schedule.ops)


def _timeline(s: Schedule, duration_s: np.ndarray, send_s: np.ndarray,
              stage_ready_s: np.ndarray | None, per_op_extra_s: np.ndarray | None,
              blocking_sends: bool) -> Timeline:
    """:func:`timeline`, run (its arrays read-only: the timeline is shared)."""
    p, n = s.p, s.ops
    (dep_stage, dep_pos, _), rounds = _structure(s)
    dur = (duration_s.copy() if duration_s.ndim == 2
           else duration_s[s.kind, np.arange(p)[:, None], s.chunk])
    if per_op_extra_s is not None:
        dur = dur + per_op_extra_s
    places = _send_places(s)
    send = np.zeros((p, n))
    send.ravel()[places.crossing] = send_s[places.boundary, places.direction]
    outgoing = np.zeros((p, n))  # what each operation sends on, when the sender waits
    if blocking_sends:
        flat = outgoing.ravel()  # a view: the array is contiguous
        flat[places.sends_f] = send_s[places.out_boundary, 0]
        flat[places.sends_b] = send_s[places.in_boundary, 1]
    free = np.zeros(p) if stage_ready_s is None else np.asarray(stage_ready_s, float).copy()
    if p <= SCALAR_STAGES and not (np.isnan(dur).any() or np.isnan(send).any()
                                   or np.isnan(outgoing).any() or np.isnan(free).any()):
        start, end, waited = _run_scalar(s, rounds, dur, send, outgoing, free)
    else:
        start, end, waited = _run_rounds(rounds, dur, send, outgoing, free)
    stage_end = end[:, -1] if n else np.zeros(p)
    critical, on_path = _critical_send(s, end, waited, send, outgoing, dep_stage, dep_pos)
    made = Timeline(s, start, end, dur.sum(axis=1), stage_end, float(stage_end.max()),
                    critical, on_path)
    for array in (made.start_s, made.end_s, made.busy_s, made.stage_end_s,
                  made.critical_stages):
        array.setflags(write=False)
    return made


@dataclass(frozen=True, eq=False)
class _SendPlaces:
    """Where a schedule's pipeline sends fall, flat (stage x n + position), found once
    per schedule: the operations whose input crosses a boundary, that boundary and its
    direction (0 forward, 1 backward); the forwards and backwards that send on (read
    with blocking sends) and the boundary each sends across."""

    crossing: np.ndarray
    boundary: np.ndarray
    direction: np.ndarray
    sends_f: np.ndarray
    out_boundary: np.ndarray
    sends_b: np.ndarray
    in_boundary: np.ndarray


def _send_places(s: Schedule) -> _SendPlaces:
    """:class:`_SendPlaces` of ``s`` (kept while the schedule lives)."""
    known = _SEND_PLACES.get(s)
    if known is not None:
        return known
    p, n, v = s.p, s.ops, s.v
    boundary = _structure(s)[0][2].ravel()
    crossing = np.flatnonzero(boundary >= 0)
    direction = np.where(s.kind == F, 0, 1).ravel()
    stages = np.broadcast_to(np.arange(p)[:, None], (p, n))
    sends_f = np.flatnonzero((s.kind == F) & ((stages < p - 1) | (s.chunk < v - 1)))
    sends_b = np.flatnonzero((s.kind == B) & ((stages > 0) | (s.chunk > 0)))
    out_boundary = np.where(stages < p - 1, stages, p - 1).ravel()  # F: to s + 1 (or wrap)
    in_boundary = np.where(stages > 0, stages - 1, p - 1).ravel()  # B: to s - 1 (or wrap)
    known = _SEND_PLACES[s] = _SendPlaces(crossing, boundary[crossing], direction[crossing],
                                          sends_f, out_boundary[sends_f], sends_b,
                                          in_boundary[sends_b])
    return known


_SEND_PLACES: weakref.WeakKeyDictionary[Schedule, _SendPlaces] = weakref.WeakKeyDictionary()


SCALAR_STAGES = 16
"""Pipelines of at most this many stages run their timeline one operation at a time in
Python floats (:func:`_run_scalar`), larger ones a round of stages at a time in arrays
(:func:`_run_rounds`): a round holds at most one operation per stage, so below some
dozen stages an array operation's fixed cost (about a microsecond) outweighs its
work, and a round costs some ten of them against a fraction of a microsecond per
operation in floats (the 4-stage pipelines a 98k plan ranks best run about four times
faster). Both take the same IEEE sums and maxima, so their times are equal bit for
bit."""


def _run_rounds(rounds: list[tuple[np.ndarray, ...]], dur: np.ndarray, send: np.ndarray,
                outgoing: np.ndarray, free: np.ndarray
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The start and end of every operation (p, n) and whether its input, not its
    stage, set its start: each round of :func:`_structure` at once, ``free`` (each
    stage's ready time, written) moved on as they run."""
    p, n = dur.shape
    # flat (stage x position) views: each round's operations are listed once per schedule
    start_flat, end_flat = np.zeros(p * n), np.zeros(p * n)
    waited_flat = np.zeros(p * n, dtype=bool)  # the input, not the stage, set the start
    dur_flat, send_flat, out_flat = dur.ravel(), send.ravel(), outgoing.ravel()
    for go, at, dep, has in rounds:
        arrive = np.where(has, end_flat[dep] + send_flat[at], -np.inf)
        begin = np.maximum(free[go], arrive)
        start_flat[at] = begin
        done = begin + dur_flat[at]
        end_flat[at] = done
        waited_flat[at] = arrive > free[go]
        free[go] = done + out_flat[at]
    return start_flat.reshape(p, n), end_flat.reshape(p, n), waited_flat.reshape(p, n)


def _run_scalar(s: Schedule, rounds: list[tuple[np.ndarray, ...]], dur: np.ndarray,
                send: np.ndarray, outgoing: np.ndarray, free: np.ndarray
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`_run_rounds`' result, one operation at a time in the rounds' order (the
    operations of a round are on distinct stages and read only earlier rounds' ends,
    so running them one after another changes nothing); no time may be NaN (a
    maximum of floats would drop it where the arrays' keeps it)."""
    p, n = dur.shape
    ops = _flat_rounds(s, rounds)
    ready = free.tolist()
    start, end = [0.0] * (p * n), [0.0] * (p * n)
    waited = [False] * (p * n)
    took = dur.ravel().tolist()
    sent, out = send.ravel().tolist(), outgoing.ravel().tolist()
    for go, at, dep in ops:
        was = ready[go]
        if dep >= 0:
            arrive = end[dep] + sent[at]
            if arrive > was:
                waited[at] = True
                was = arrive
        start[at] = was
        was += took[at]
        end[at] = was
        ready[go] = was + out[at]
    free[:] = ready
    return (np.array(start).reshape(p, n), np.array(end).reshape(p, n),
            np.array(waited, dtype=bool).reshape(p, n))


def _flat_rounds(s: Schedule, rounds: list[tuple[np.ndarray, ...]]
                 ) -> list[tuple[int, int, int]]:
    """The operations of ``rounds`` one after another: stage, flat place and its
    input's (-1: none), found once per schedule."""
    known = _FLAT_ROUNDS.get(s)
    if known is None:
        known = _FLAT_ROUNDS[s] = [
            (g, a, d if h else -1) for go, at, dep, has in rounds
            for g, a, d, h in zip(go.tolist(), at.tolist(), dep.tolist(), has.tolist(),
                                  strict=True)]
    return known


_FLAT_ROUNDS: weakref.WeakKeyDictionary[Schedule, list[tuple[int, int, int]]] = (
    weakref.WeakKeyDictionary())


def cached_dependencies(s: Schedule) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`dependencies` of ``s``, found once per schedule (with its rounds; the
    arrays are shared: read them, do not write them)."""
    return _structure(s)[0]


_Structure = tuple[tuple[np.ndarray, np.ndarray, np.ndarray], list[tuple[np.ndarray, ...]]]
_STRUCTURES: weakref.WeakKeyDictionary[Schedule, _Structure] = weakref.WeakKeyDictionary()


def _structure(s: Schedule) -> _Structure:
    """What :func:`timeline` needs of schedule ``s`` besides the times, found once per
    schedule (the cache holds it while the schedule lives): its
    :func:`dependencies` and its rounds. In each round, the stages whose next operation
    has its input (which operations can run depends on the order alone, not on how
    long they take), those operations' flat places (stage x n + position), their
    inputs' places and whether they have one.

    Raises
    ------
    RuntimeError
        If the schedule deadlocks (an operation waits for one that never runs).
    """
    known = _STRUCTURES.get(s)
    if known is not None:
        return known
    p, n = s.p, s.ops
    deps = dependencies(s)
    dep_stage, dep_pos, _ = deps
    ptr = np.zeros(p, dtype=np.int64)
    rows = np.arange(p)
    out: list[tuple[np.ndarray, ...]] = []
    while True:
        active = rows[ptr < n]
        if not len(active):
            break
        j = ptr[active]
        ds, dp = dep_stage[active, j], dep_pos[active, j]
        has = dp >= 0
        ready = ~has | (dp < ptr[np.maximum(ds, 0)])
        if not ready.any():
            raise RuntimeError(f"pipeline schedule {s.name} deadlocks")
        go, jg, hg = active[ready], j[ready], has[ready]
        dep = np.maximum(ds[ready], 0) * n + np.maximum(dp[ready], 0)
        out.append((go, go * n + jg, dep, hg))
        ptr[go] += 1
    _STRUCTURES[s] = (deps, out)
    return deps, out


def _critical_send(s: Schedule, end: np.ndarray, waited: np.ndarray, send: np.ndarray,
                   outgoing: np.ndarray, dep_stage: np.ndarray, dep_pos: np.ndarray
                   ) -> tuple[float, np.ndarray]:
    """Walk the critical path back from the last operation to end: through the input
    where the operation waited for it, else to the stage's previous operation (and the
    send that operation waited on); sum the sends it crosses (in Python floats, read
    from flat lists: the walk visits single operations)."""
    n = s.ops
    stage = int(np.argmax(end[:, -1]))
    j = n - 1
    total = 0.0
    visited = [stage]
    waits = waited.ravel().tolist()
    deps = _flat_deps(s, dep_stage, dep_pos)
    sent = outgoing_at = None
    while j >= 0:
        at = stage * n + j
        if waits[at]:
            if sent is None:
                sent = send.ravel().tolist()
            total += sent[at]
            stage, j = deps[at]
            if stage != visited[-1]:
                visited.append(stage)
        else:
            j -= 1
            if j >= 0:
                if outgoing_at is None:
                    outgoing_at = outgoing.ravel().tolist()
                total += outgoing_at[at - 1]
    return total, np.array(visited[::-1])


def _flat_deps(s: Schedule, dep_stage: np.ndarray, dep_pos: np.ndarray
               ) -> list[tuple[int, int]]:
    """Per flat operation (stage x n + position), its input's stage and position
    (:func:`dependencies`), found once per schedule."""
    known = _FLAT_DEPS.get(s)
    if known is None:
        known = _FLAT_DEPS[s] = list(zip(dep_stage.ravel().tolist(),
                                         dep_pos.ravel().tolist(), strict=True))
    return known


_FLAT_DEPS: weakref.WeakKeyDictionary[Schedule, list[tuple[int, int]]] = (
    weakref.WeakKeyDictionary())


def last_passes(s: Schedule, kind: int) -> list[list[int]]:
    """Per stage and chunk, the place of its last operation of ``kind`` in the stage's
    order (found once per schedule and kind while the schedule lives)."""
    known = _LAST_PASSES.setdefault(s, {})
    if kind not in known:
        known[kind] = [[int(np.flatnonzero((s.kind[st] == kind) & (s.chunk[st] == c))[-1])
                        if ((s.kind[st] == kind) & (s.chunk[st] == c)).any() else -1
                        for c in range(s.v)] for st in range(s.p)]
    return known[kind]


_LAST_PASSES: weakref.WeakKeyDictionary[Schedule, dict[int, list[list[int]]]] = (
    weakref.WeakKeyDictionary())


def in_flight(s: Schedule, chunk_layers: np.ndarray) -> np.ndarray:
    """Per stage, the most layers' worth of microbatch activations held at once.

    A microbatch's activations for a chunk live from its F until its B (until its W in
    a zero-bubble schedule, whose weight gradients still need the layers' inputs);
    ``chunk_layers[stage, chunk]`` counts the layers of each chunk. For 1F1B the first
    stage holds p microbatches, L layers' worth in all (Korthikanti et al. 2022,
    section 4.2.3). Kept with the schedule (read-only): a search asks it of every
    layout on the same pipeline.
    """
    key = (chunk_layers.shape, chunk_layers.dtype.str, chunk_layers.tobytes())
    known = _IN_FLIGHT.setdefault(s, {})
    found = known.get(key)
    if found is None:
        frees = W if s.name == "zb-h1" else B
        layers = chunk_layers[np.arange(s.p)[:, None], s.chunk]
        change = np.where(s.kind == F, layers, np.where(s.kind == frees, -layers, 0))
        found = np.cumsum(change, axis=1).max(axis=1)
        found.setflags(write=False)  # shared by every caller with the same chunks
        if len(known) < _IN_FLIGHT_KEPT:
            known[key] = found
    return found


_IN_FLIGHT: weakref.WeakKeyDictionary[Schedule, dict[tuple[Any, ...], np.ndarray]] = (
    weakref.WeakKeyDictionary())
_IN_FLIGHT_KEPT = 8
"""Chunk layouts kept per schedule by :func:`in_flight`: a search asks for the same one
or two (the layers, the microbatches) for every layout on a pipeline, so a few."""


def chunk_layers(layers: int, p: int, v: int = 1) -> np.ndarray:
    """Layers of each model chunk, shape (p, v): the ``layers`` split into p x v
    consecutive chunks as evenly as they go (the first chunks take one more); chunk c
    of stage s is the (c p + s)-th. Raises UsageError if a chunk would be empty."""
    parts = p * v
    if layers < parts:
        raise UsageError(f"{layers} layers cannot fill {p} stages x {v} virtual stages")
    base, extra = divmod(layers, parts)
    sizes = base + (np.arange(parts) < extra)
    return sizes.reshape(v, p).T.copy()


def chunk_first_layer(layers: int, p: int, v: int = 1) -> np.ndarray:
    """Index of the first layer of each chunk, shape (p, v) (see :func:`chunk_layers`)."""
    sizes = chunk_layers(layers, p, v)
    flat = sizes.T.ravel()
    starts = np.concatenate([[0], np.cumsum(flat)[:-1]])
    return starts.reshape(v, p).T.copy()
