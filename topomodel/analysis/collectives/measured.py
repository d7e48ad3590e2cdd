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

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from topomodel.analysis.assumptions import COLUMNS, DEFAULT_SHORTFALL
from topomodel.analysis.collectives.collective import CollectiveRun, run_collective
from topomodel.analysis.collectives.loads import tier_loads
from topomodel.analysis.collectives.protocols import PROTOCOLS
from topomodel.analysis.collectives.timing import TimeModel
from topomodel.errors import ParameterError, UsageError
from topomodel.fabric.tables import Fabric
from topomodel.inputs.measured.nccltests import TESTS, WORD_BYTES, NcclTestsLog, ResultRow, Timing
from topomodel.inputs.records import check_share, documented
from topomodel.traffic.algorithms import REGISTRY
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
    model_latency_s: float = 0.0  # the latency part of the model's time

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
    algorithm: str = "auto"  # what was run: a name, 'auto' or the candidates NCCL_ALGO left
    protocol: str = "auto"
    warnings: tuple[str, ...] = ()  # placement and NCCL_* settings the model could not follow

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
               ranks: int) -> tuple[np.ndarray, str, str | None]:
    """Accelerator node numbers of the log's ranks, how they were placed, and a warning
    when the log does not say where they ran."""
    if spec:
        groups = parse_groups(fabric, spec)
        if len(groups) != 1 or len(groups[0]) != ranks:
            raise ParameterError("ranks", f"{spec!r}: give one group of the log's {ranks}"
                                          f" ranks (it gives {len(groups)} group(s) of"
                                          f" {len(groups[0])})")
        return groups[0], f"--ranks {spec}", None
    acc = fabric.accelerators
    if not log.ranks:
        positions, how, caveat = _launched(fabric, log, ranks)
        return acc[positions], how, (f"the log lists no hosts or devices ('#  Rank' lines):"
                                     f" its ranks are placed by {how}{caveat}; give --ranks"
                                     " to place them otherwise")
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
                            " -> accelerator of its system"), None


def _launched(fabric: Fabric, log: NcclTestsLog, ranks: int
              ) -> tuple[np.ndarray, str, str]:
    """Positions (in ``fabric.accelerators``) of ``ranks`` ranks of a log without device
    lines, as its command line launches them: each process's GPUs in one system, the
    processes of one host in one system, hosts on systems 0, 1, ...; a launcher given
    a host file or list but no count per host spreads its processes one per system
    (as far as the design's systems go). Without a multi-host launch: the first
    ``ranks`` accelerators. Returns the positions, the placement in words and a caveat
    (empty, or why the placement may not be the run's)."""
    s = fabric.structure
    per_system, launch = s.accelerators_per_system, log.launch
    processes, gpus = launch.processes or 1, launch.gpus_per_process or 1
    if not launch.multi_host or processes * gpus != ranks or processes < 2:
        if ranks > len(fabric.accelerators):
            raise UsageError(f"the log has {ranks} ranks; the design has"
                             f" {len(fabric.accelerators)} accelerators")
        return np.arange(ranks), f"the design's first {ranks} accelerators", ""
    hosts = (math.ceil(processes / launch.per_host) if launch.per_host
             else launch.nodes or len(launch.hosts) or min(processes, s.systems))
    per_host = math.ceil(processes / hosts)
    if hosts > s.systems or per_host * gpus > per_system:
        raise UsageError(f"the log's command line runs {processes} processes x {gpus} GPUs"
                         f" on {hosts} hosts; the design has {s.systems} systems of"
                         f" {per_system} accelerators: give --ranks")
    process = np.repeat(np.arange(processes), gpus)
    positions = ((process // per_host) * per_system
                 + (process % per_host) * gpus + np.tile(np.arange(gpus), processes))
    given = ("its per-host count" if launch.per_host else "its node count" if launch.nodes
             else "its host list" if launch.hosts else
             "a host file the log does not show, so one process per system")
    systems = "system 0" if hosts == 1 else f"systems 0-{hosts - 1}"
    caveat = ("" if hosts > 1 or launch.per_host else
              f" (the launch names a host file or host list, so the run probably spanned"
              f" hosts, but the design has {s.systems} system: the ranks share it, and"
              " the comparison is with its scale-up links)")
    return positions, (f"its command line ({launch.launcher}, line {launch.line}):"
                       f" {processes} processes x {gpus} GPU(s), {per_host} per host by"
                       f" {given} -> {systems}"), caveat


def _nccl_names(value: str, known: Sequence[str]) -> set[str]:
    """The names an ``NCCL_ALGO``/``NCCL_PROTO`` value allows (a comma list, any case;
    a leading ``^`` excludes the listed ones), lower case without ``_``."""
    listed = {v.strip().lower().replace("_", "") for v in value.lstrip("^").split(",")}
    every = {k.lower().replace("_", "") for k in known}
    return every - listed if value.startswith("^") else listed & every


def _algorithm(fabric: Fabric, collective: str, log: NcclTestsLog, given: str | None
               ) -> tuple[str, tuple[str, ...] | None, str | None]:
    """The algorithm to run (``auto`` with candidates, or one name), what chose it, and
    a warning when the log's NCCL_ALGO cannot be followed."""
    if given is not None:
        return given, None, None
    value = log.launch.nccl.get("NCCL_ALGO")
    if value is None:
        return "auto", None, None
    names, note = nccl_algorithm_candidates(fabric, collective, value)
    return "auto", names, note


def nccl_algorithm_candidates(fabric: Fabric, collective: str, value: str
                              ) -> tuple[tuple[str, ...] | None, str | None]:
    """The model's algorithms an ``NCCL_ALGO`` value (``Ring``, ``^NVLS``, ``Tree,Ring``)
    allows for ``collective`` on ``fabric`` (None: any, the model's fastest), and a
    warning when it cannot be followed."""
    if collective in ("alltoall", "sendrecv"):
        return None, (f"NCCL_ALGO={value} is set but does not apply to"
                      f" {collective} (NCCL runs it point-to-point)")
    known = {n for a in REGISTRY.values() for n in (a.nccl_intra, a.nccl_inter)}
    allowed = _nccl_names(value, [*known, "collnet_chain", "pat"])
    allowed |= {"collnetdirect"} if "collnetchain" in allowed else set()
    names = tuple(a.name for a in REGISTRY.values()
                  if a.auto and collective in a.collectives and a.applies(fabric)
                  and {a.nccl_intra.replace("_", ""), a.nccl_inter.replace("_", "")}
                  & allowed)
    if not names:
        return None, (f"NCCL_ALGO={value}: the model has no such algorithm for"
                      f" {collective} on this design; its fastest is used")
    return names, None


def _protocol(log: NcclTestsLog, given: str | None) -> tuple[str | None, str | None]:
    """The protocol to force (``None``: the time model's own), and a warning when the
    log's NCCL_PROTO leaves more than one and the model picks among all three."""
    if given is not None:
        return given, None
    value = log.launch.nccl.get("NCCL_PROTO")
    if value is None:
        return None, None
    allowed = [p for p in PROTOCOLS if p.lower() in _nccl_names(value, PROTOCOLS)]
    if len(allowed) == 1:
        return allowed[0], None
    return None, (f"NCCL_PROTO={value} leaves {', '.join(allowed) or 'no protocol'}; the"
                  " model forces one protocol or picks the fastest of all three (done here)")


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
    if log.launch.ranks is not None and log.launch.ranks >= 2:
        return log.launch.ranks  # processes x threads x GPUs of its command line
    raise UsageError(f"{log.file}: the log has no '#  Rank' device lines, its busbw /"
                     " algbw does not tell the rank count and no command line gives it:"
                     " give --ranks")


def _measured(row: ResultRow, column: str) -> Timing:
    if column == "out-of-place" or row.in_place is None:
        return row.out_of_place
    if column == "in-place":
        return row.in_place
    return max((row.out_of_place, row.in_place), key=lambda t: t.busbw_Bps)


# PLR0913: keyword-only options of an entry point, as networkx's; a record would hide them
def bottleneck_of(fabric: Fabric, run: CollectiveRun) -> str:
    """What limits a modelled collective: ``latency`` when at least
    :data:`LATENCY_BOUND_SHARE` of its time is latency, else the link tier with the
    largest share of the time."""
    timing = run.timing
    loads = [t for t in tier_loads(fabric, timing) if t.time_share > 0]
    if timing.latency_s >= LATENCY_BOUND_SHARE * timing.time_s or not loads:
        return "latency"
    return max(loads, key=lambda t: t.time_share).name


def check_nccl(fabric: Fabric, log: NcclTestsLog, *, collective: str | None = None,  # noqa: PLR0913
               ranks: str | None = None, threshold: float = DEFAULT_SHORTFALL,
               column: str = "best", routing: str = "ecmp", seed: int = 0,
               time_model: TimeModel | None = None,
               sizes: Sequence[int] | None = None, algorithm: str | None = None,
               protocol: str | None = None) -> NcclCheck:
    """Each size of ``log`` (or only ``sizes``) measured and modelled on ``fabric``.

    The collective runs as the log's run did: ``algorithm`` and ``protocol`` force
    the model's (``route``'s names; ``auto`` for its fastest); left ``None``, the
    ``NCCL_ALGO`` and ``NCCL_PROTO`` the log sets are honoured (``NCCL_ALGO=Tree``
    runs the tree), else the time model's own choice.

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
    nodes, how, placed = _placement(fabric, log, ranks, count)
    chosen, candidates, algo_note = _algorithm(fabric, name, log, algorithm)
    forced, proto_note = _protocol(log, protocol)
    model = time_model or TimeModel()
    if forced is not None:
        model = replace(model, protocol=forced)
    positions = np.searchsorted(fabric.accelerators, nodes)
    spec = ",".join(str(int(p)) for p in positions)
    checks = []
    for row in log.rows:
        if sizes is not None and row.size_bytes not in sizes:
            continue
        if row.size_bytes <= 0:
            continue
        run = run_collective(fabric, name, float(row.size_bytes), [spec], routing=routing,
                             seed=seed, time_model=model, algorithm=chosen,
                             candidates=candidates)
        timing = run.timing
        bottleneck = bottleneck_of(fabric, run)
        measured = _measured(row, column)
        below = measured.time_s * (1 - threshold) > run.time_s
        checks.append(SizeCheck(
            row.size_bytes, row.line, measured.time_s, measured.busbw_Bps,
            row.out_of_place.busbw_Bps,
            row.in_place.busbw_Bps if row.in_place else None, run.time_s, run.busbw_Bps,
            run.algorithm, timing.protocol, bottleneck, below, timing.latency_s))
    if not checks:
        raise UsageError(f"{log.file}: no size of the log to compare")
    names = fabric.node_arrays["name"][nodes]
    value = log.launch.nccl.get("NCCL_ALGO")
    algo_text = (chosen if algorithm is not None or candidates is None
                 else f"{', '.join(candidates)} (NCCL_ALGO={value} in the log)")
    proto_text = (model.protocol + (" (NCCL_PROTO in the log)"
                                    if protocol is None and forced is not None else ""))
    notes = tuple(n for n in (placed, algo_note, proto_note) if n)
    return NcclCheck(name, count, how, tuple(str(n) for n in names), threshold, column,
                     tuple(checks), algo_text, proto_text, notes)
