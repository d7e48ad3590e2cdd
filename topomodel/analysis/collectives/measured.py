"""Measured nccl-tests results beside the model: the same collective, the same ranks and
the same sizes run on a design's fabric, size by size.

The communicator is the log's ranks placed on the design: by default the log's hosts in
the order they appear are the design's systems 0, 1, ... and each rank's CUDA device is
its accelerator inside the system (``sys0/acc3`` for device 3 of the first host); a
group spec (``--ranks``, :mod:`topomodel.traffic.groups`) places them otherwise. Sizes
are nccl-tests' ``size`` column, which is the size convention of
:func:`~topomodel.analysis.collectives.collective.run_collective`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from topomodel.analysis.assumptions import COLUMNS, DEFAULT_SHORTFALL
from topomodel.analysis.collectives.collective import run_collective
from topomodel.analysis.collectives.loads import tier_loads
from topomodel.analysis.collectives.timing import TimeModel
from topomodel.errors import ParameterError, UsageError
from topomodel.fabric.tables import Fabric
from topomodel.inputs.nccltests import TESTS, WORD_BYTES, NcclTestsLog, ResultRow, Timing
from topomodel.inputs.records import check_share, documented
from topomodel.traffic.collectives import busbw_factor
from topomodel.traffic.groups import parse_groups

LATENCY_BOUND_SHARE = documented(
    "measured.LATENCY_BOUND_SHARE", 0.5,
    """A size whose modelled time is at least this share latency (launch, protocol and
    per-hop latency) is called latency-bound instead of naming a link tier: no link is
    saturated there.""")


@dataclass(frozen=True)
class SizeCheck:
    """One size: measured and modelled time (s) and busbw (bytes/s), and the verdict."""

    size_bytes: int
    line: int
    measured_time_s: float
    measured_busbw_Bps: float
    out_of_place_busbw_Bps: float
    in_place_busbw_Bps: float | None
    model_time_s: float
    model_busbw_Bps: float
    algorithm: str
    protocol: str
    bottleneck: str  # a link tier, or 'latency'
    below: bool  # measured busbw (size / time) below the model's by more than the threshold

    @property
    def ratio(self) -> float:
        """Measured busbw / modelled busbw, from the times (the same size and factor),
        which nccl-tests prints to more digits than busbw at small sizes."""
        return (self.model_time_s / self.measured_time_s if self.measured_time_s > 0
                else float("nan"))


@dataclass(frozen=True)
class NcclCheck:
    """A whole log against the model."""

    collective: str
    ranks: int
    placement: str  # how the ranks were placed on the design
    rank_nodes: tuple[str, ...]  # accelerator names, in rank order
    threshold: float
    column: str
    sizes: tuple[SizeCheck, ...]

    @property
    def flagged(self) -> tuple[SizeCheck, ...]:
        """Sizes measured below the model by more than the threshold."""
        return tuple(s for s in self.sizes if s.below)

    @property
    def bottleneck(self) -> str:
        """What the model says limits the largest size: a link tier or 'latency'."""
        return self.sizes[-1].bottleneck


def log_collective(log: NcclTestsLog, given: str | None = None) -> str:
    """The collective a log ran: ``given``, else the test the log names, else what its
    rows fit (data type size, reduction and root columns).

    Raises
    ------
    UsageError
        When ``given`` contradicts the log, or the rows fit more than one collective.
    """
    row = log.rows[-1]
    word = WORD_BYTES.get(row.dtype)
    ranks = len(log.ranks) or None
    reduces = row.redop not in (None, "none")
    fits = []
    for name in ("allreduce", "allgather", "reducescatter", "alltoall", "sendrecv"):
        per_rank = name in ("allreduce", "sendrecv")
        elements = row.count * word if word else None
        if elements is not None and per_rank != (elements == row.size_bytes):
            continue
        if elements is not None and ranks and not per_rank and (
                elements * ranks != row.size_bytes):
            continue
        if row.redop is not None and reduces != (name in ("allreduce", "reducescatter")):
            continue
        fits.append(name)
    named = TESTS[log.test] if log.test else None
    if given:
        if named and named != given:
            raise ParameterError("collective", f"{given}, but the log names {log.test}")
        return given
    if named:
        return named
    if len(fits) == 1:
        return fits[0]
    raise UsageError(f"{log.file}: the log does not name its test and its rows fit "
                     f"{' and '.join(fits) or 'no collective read here'}: give --collective")


def _placement(fabric: Fabric, log: NcclTestsLog, spec: str | None,
               ranks: int) -> tuple[np.ndarray, str]:
    """Accelerator node numbers of the log's ranks, and how they were placed."""
    if spec:
        groups = parse_groups(fabric, spec)
        if len(groups) != 1 or len(groups[0]) != ranks:
            raise ParameterError("ranks", f"{spec!r}: give one group of the log's {ranks}"
                                          f" ranks (it gives {len(groups)} group(s) of"
                                          f" {len(groups[0])})")
        return groups[0], f"--ranks {spec}"
    acc = fabric.accelerators
    if not log.ranks:
        if ranks > len(acc):
            raise UsageError(f"the log has {ranks} ranks; the design has {len(acc)}"
                             " accelerators")
        return acc[:ranks], f"the design's first {ranks} accelerators (the log lists none)"
    s = fabric.structure
    per_system = s.accelerators_per_system
    hosts = {host: index for index, host in enumerate(log.hosts)}
    if len(hosts) > s.systems:
        raise UsageError(f"the log ran on {len(hosts)} hosts; the design has {s.systems}"
                         " systems: give --ranks")
    if any(place.device >= per_system for place in log.ranks):
        raise UsageError(f"the log uses CUDA device {max(p.device for p in log.ranks)}; the"
                         f" design's systems have {per_system} accelerators: give --ranks")
    order = sorted(log.ranks, key=lambda p: p.rank)
    positions = np.array([hosts[p.host] * per_system + p.device for p in order])
    if len(np.unique(positions)) != len(positions):
        raise UsageError("two ranks of the log run on one device: give --ranks")
    systems = "system 0" if len(hosts) == 1 else f"systems 0-{len(hosts) - 1}"
    return acc[positions], (f"{len(hosts)} host(s) in log order -> {systems}; CUDA device"
                            " -> accelerator of its system")


def _ranks_of(log: NcclTestsLog, collective: str) -> int:
    """Rank count: the device lines, else what busbw / algbw gives (AllReduce and the
    (n-1)/n collectives)."""
    if log.ranks:
        return len(log.ranks)
    row = max(log.rows, key=lambda r: r.out_of_place.algbw_Bps)
    t = row.out_of_place
    if collective not in ("sendrecv", "broadcast", "reduce") and t.algbw_Bps > 0:
        ratio = t.busbw_Bps / t.algbw_Bps
        span = 2.0 if collective == "allreduce" else 1.0
        if ratio < span * 0.999:
            n = round(span / (span - ratio))
            if n >= 2 and abs(busbw_factor(collective, n) - ratio) < 0.01:
                return n
    raise UsageError(f"{log.file}: the log has no '#  Rank' device lines and its"
                     " busbw / algbw does not tell the rank count: give --ranks")


def _measured(row: ResultRow, column: str) -> Timing:
    if column == "out-of-place" or row.in_place is None:
        return row.out_of_place
    if column == "in-place":
        return row.in_place
    return max((row.out_of_place, row.in_place), key=lambda t: t.busbw_Bps)


# PLR0913: keyword-only options of an entry point, as networkx's; a record would hide them
def check_nccl(fabric: Fabric, log: NcclTestsLog, *, collective: str | None = None,  # noqa: PLR0913
               ranks: str | None = None, threshold: float = DEFAULT_SHORTFALL,
               column: str = "best", routing: str = "ecmp", seed: int = 0,
               time_model: TimeModel | None = None,
               sizes: Sequence[int] | None = None) -> NcclCheck:
    """Each size of ``log`` (or only ``sizes``) measured and modelled on ``fabric``.

    Raises
    ------
    UsageError
        For a threshold outside (0, 1), an unknown column, a collective the log does not
        fit, or ranks that cannot be placed on the design.
    """
    check_share(threshold, "threshold", low_open=True, high_open=True)
    if column not in COLUMNS:
        raise ParameterError("column", f"one of {', '.join(COLUMNS)}, got {column!r}")
    name = log_collective(log, collective)
    count = _ranks_of(log, name)
    nodes, how = _placement(fabric, log, ranks, count)
    positions = np.searchsorted(fabric.accelerators, nodes)
    spec = ",".join(str(int(p)) for p in positions)
    checks = []
    for row in log.rows:
        if sizes is not None and row.size_bytes not in sizes:
            continue
        if row.size_bytes <= 0:
            continue
        run = run_collective(fabric, name, float(row.size_bytes), [spec], routing=routing,
                             seed=seed, time_model=time_model)
        timing = run.timing
        loads = [t for t in tier_loads(fabric, timing) if t.time_share > 0]
        latency_bound = timing.latency_s >= LATENCY_BOUND_SHARE * timing.time_s
        bottleneck = ("latency" if latency_bound or not loads else
                      max(loads, key=lambda t: t.time_share).name)
        measured = _measured(row, column)
        below = measured.time_s * (1 - threshold) > run.time_s
        checks.append(SizeCheck(
            row.size_bytes, row.line, measured.time_s, measured.busbw_Bps,
            row.out_of_place.busbw_Bps,
            row.in_place.busbw_Bps if row.in_place else None, run.time_s, run.busbw_Bps,
            run.algorithm, timing.protocol, bottleneck, below))
    if not checks:
        raise UsageError(f"{log.file}: no size of the log to compare")
    names = fabric.nodes["name"].to_numpy()[nodes]
    return NcclCheck(name, count, how, tuple(str(n) for n in names), threshold, column,
                     tuple(checks))
