"""A job's profiler traces as measured curves for the fit (:mod:`.fit`): one curve per
collective kind and group size, a point per size.

- **What is measured**: each call's transfer time is its fastest rank's duration (the
  rank that arrived last waits least; :data:`~.tracesteps.WAIT_FROM_FASTEST_RANK`), and
  a size's time is the median over its calls; the spread is (max - min) / median of
  those fastest durations, as nccl-tests' runs give theirs.
- **Which calls**: NCCL kernels only (a GPU trace). Gloo's CPU collectives run over the
  host's sockets, not the design's links, so they fit nothing (said in the notes); nor
  do calls without a size or group size, of a kind the model does not time, or of groups
  larger than the design.
- **The model of a curve**: the collective model on groups of the traced size laid on
  the design's accelerators in order (``block:N``, as ``check-trace`` lays them), at
  each size running the algorithm and protocol NCCL's kernel names say it ran (``RING``
  and ``LL128`` from ``ncclDevKernel_AllReduce_Sum_bf16_RING_LL128``, as ``NCCL_ALGO``
  and ``NCCL_PROTO`` in an nccl-tests log are followed), else the model's fastest.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, replace

from topomodel.analysis.assumptions import DEFAULT_SHORTFALL, TimeModel
from topomodel.analysis.collectives.collective import run_collective
from topomodel.analysis.collectives.measured import (
    NcclCheck,
    SizeCheck,
    bottleneck_of,
    nccl_algorithm_candidates,
)
from topomodel.analysis.collectives.protocols import PROTOCOLS
from topomodel.calibrate.fit import Series, SizePoint
from topomodel.calibrate.tracesteps import CollectiveMeasure, TraceMeasure
from topomodel.fabric.tables import Fabric
from topomodel.traffic.collectives import ALGORITHMS


@dataclass(frozen=True)
class TraceCurves:
    """The curves a job's traces give, and why the calls left out fit nothing."""

    series: tuple[Series, ...]
    notes: tuple[str, ...]


def _left_out(m: CollectiveMeasure, accelerators: int) -> str | None:
    """Why a traced kind and size fits nothing, or None when it fits."""
    if "nccl kernel" not in m.sources.split(", "):
        return (f"{m.kind} ({m.sources or 'no NCCL kernel'}): not NCCL on the design's"
                " links (gloo runs over the host's sockets)")
    if m.kind not in ALGORITHMS:
        return f"{m.kind}: no model of it"
    if m.size_bytes is None or not m.group_size:
        return f"{m.kind}: the trace gives no size or group size"
    if m.group_size < 2:
        return f"{m.kind}: a group of one rank moves nothing"
    if m.group_size > accelerators:
        return (f"{m.kind}: groups of {m.group_size} ranks; the design has {accelerators}"
                " accelerators")
    return None


def _as_run(fabric: Fabric, m: CollectiveMeasure
            ) -> tuple[tuple[str, ...] | None, str | None]:
    """The algorithms (None: the model's fastest) and the protocol (None: the fastest)
    the traced kernels' names say NCCL ran at this size."""
    names = [h for h in m.algorithms.split(", ") if h]
    if len(names) != 1:
        return None, None  # not named (older kernels) or several: the model picks
    algorithm, _, protocol = names[0].partition("/")
    candidates = (nccl_algorithm_candidates(fabric, m.kind, algorithm)[0]
                  if algorithm else None)
    forced = next((p for p in PROTOCOLS if p.lower() == protocol.lower()), None)
    return candidates, forced


def trace_curves(fabric: Fabric, measure: TraceMeasure, *, routing: str = "ecmp",
                 seed: int = 0, time_model: TimeModel | None = None) -> TraceCurves:
    """The curves of ``measure`` on ``fabric``: one per collective kind and group size
    of the NCCL kernels traced."""
    notes: list[str] = []
    kept: dict[tuple[str, int], list[CollectiveMeasure]] = defaultdict(list)
    for m in measure.collectives:
        why = _left_out(m, fabric.accelerator_count)
        if why is not None:
            notes.append(f"left out of the fit: {why}")
            continue
        kept[(m.kind, int(m.group_size or 0))].append(m)
    base = replace(time_model or TimeModel(), measured_curves=False)
    files = tuple(measure.files)
    series = []
    for (kind, group), found in sorted(kept.items()):
        by_size = {round(m.size_bytes or 0): m for m in found}
        points = tuple(SizePoint(size, m.transfer_s, m.transfer_spread, m.calls)
                       for size, m in sorted(by_size.items()) if m.transfer_s > 0)
        if not points:
            continue
        model = _TraceModel(fabric, kind, group, by_size, base, routing, seed)
        series.append(Series(f"{kind}, groups of {group} (profiler trace)",
                             "profiler trace", kind, files, points, model))
    return TraceCurves(tuple(series), tuple(dict.fromkeys(notes)))


class _TraceModel:
    """The model of one traced curve: (efficiencies, sizes) -> the check at those
    sizes, each size run as its kernels say NCCL ran it."""

    def __init__(self, fabric: Fabric, kind: str, group: int,
                 measured: dict[int, CollectiveMeasure], base: TimeModel, routing: str,
                 seed: int) -> None:
        self.fabric, self.kind, self.group, self.measured = fabric, kind, group, measured
        self.base, self.routing, self.seed = base, routing, seed
        self.spec = f"block:{group}"

    def __call__(self, efficiency: dict[str, float], only: Sequence[int] | None = None
                 ) -> NcclCheck:
        model = replace(self.base, efficiency={**self.base.efficiency, **efficiency})
        checks = []
        for size in sorted(self.measured if only is None else only):
            m = self.measured[size]
            candidates, protocol = _as_run(self.fabric, m)
            run = run_collective(self.fabric, self.kind, float(size), (self.spec,),
                                 routing=self.routing, seed=self.seed,
                                 time_model=replace(model, protocol=protocol)
                                 if protocol else model, candidates=candidates)
            busbw = m.busbw_Bps or 0.0
            measured_busbw = busbw * m.time_s / m.transfer_s if m.transfer_s else busbw
            checks.append(SizeCheck(
                size, 0, m.transfer_s, measured_busbw, measured_busbw, None, run.time_s,
                run.busbw_Bps, run.algorithm, run.timing.protocol,
                bottleneck_of(self.fabric, run),
                m.transfer_s * (1 - DEFAULT_SHORTFALL) > run.time_s, run.timing.latency_s))
        return NcclCheck(self.kind, self.group, f"{self.spec} (groups laid in order)", (),
                         DEFAULT_SHORTFALL, "fastest rank", tuple(checks))
