"""A job's profiler traces beside the model: per collective kind and size (time, busbw),
per collective kind per step, and per step part (compute, exposed communication, wait).

The measured side is :func:`topomodel.calibrate.tracesteps.measure_traces`. The model
side is the step model on the same layout (:func:`topomodel.analysis.training.step.step_time`,
given here as its :class:`StepResult`) and, for each measured kind and size, the
collective model (:func:`topomodel.analysis.collectives.collective.run_collective`) on
groups of the measured size laid on the design's accelerators in order
(``block:N``: every group of the fabric runs at once, as a job's data-parallel or
tensor-parallel groups do).

The step's parts are compared as the step model names them: compute (and the hot-expert
imbalance) with the traced compute, the pipeline bubble with the traced idle time,
exposed communication and synchronisation wait with theirs. The verdict on the
communication share uses the rule of thumb :data:`COMM_BOUND_SHARE`.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from topomodel.analysis.assumptions import DEFAULT_COMM_THRESHOLD
from topomodel.analysis.collectives.collective import run_collective
from topomodel.analysis.collectives.timing import TimeModel
from topomodel.analysis.training.step import StepResult
from topomodel.calibrate.tracesteps import CollectiveMeasure, TraceMeasure
from topomodel.errors import TopomodelError
from topomodel.fabric.tables import Fabric
from topomodel.traffic.collectives import ALGORITHMS

COMM_BOUND_SHARE = DEFAULT_COMM_THRESHOLD
"""The share of a step (exposed communication and wait) at or above which the network is
called the bottleneck: 0.30, the rule of thumb that ``advise`` uses
(:data:`topomodel.analysis.assumptions.DEFAULT_COMM_THRESHOLD`, whose reason it
carries). Its source is practice, not a measurement: it is the habit of reading the
communication share off the PyTorch profiler's step view that issue #37 names ("30 % or
more means the network is the bottleneck"); no paper or datasheet backs the number, so
the verb prints it as a rule of thumb and takes ``--threshold``."""


@dataclass(frozen=True)
class CollectiveCheck:
    """One measured kind and size beside the collective model: seconds, bytes/s."""

    measured: CollectiveMeasure
    model_time_s: float | None
    model_busbw_Bps: float | None
    model_algorithm: str
    note: str  # why there is no model figure, if there is none

    @property
    def busbw_ratio(self) -> float | None:
        """Measured busbw / the model's (1: as modelled; below 1: slower than the model)."""
        busbw = self.measured.busbw_Bps
        if busbw is None or not self.model_busbw_Bps:
            return None
        return busbw / self.model_busbw_Bps


@dataclass(frozen=True)
class KindCheck:
    """One collective kind per step: the step model's calls and time beside the traces'
    (median over rank-steps), seconds."""

    kind: str
    model_calls: int
    model_time_s: float
    model_exposed_s: float
    measured_time_s: float
    model_uses: str = ""  # what the step model runs it for (its communicators' kinds)


@dataclass(frozen=True)
class PartCheck:
    """One part of the step, seconds: the model's and the traces' (median over rank-steps)."""

    part: str
    model_s: float
    measured_s: float


@dataclass(frozen=True)
class TraceCheck:
    """A job's traces beside the model."""

    measure: TraceMeasure
    step: StepResult
    collectives: tuple[CollectiveCheck, ...]
    kinds: tuple[KindCheck, ...]
    parts: tuple[PartCheck, ...]
    threshold: float
    warnings: tuple[str, ...]

    @property
    def measured_share(self) -> float:
        """Exposed communication and wait over the step, measured (median), 0-1."""
        return self.measure.median("comm_share")

    def verdict(self, share: float) -> str:
        """The rule of thumb's reading of a communication share."""
        return ("communication-bound" if share >= self.threshold else
                "compute-bound")


def _model_collective(fabric: Fabric, m: CollectiveMeasure, *, routing: str, seed: int,
                      time_model: TimeModel | None) -> CollectiveCheck:
    if m.kind not in ALGORITHMS:
        return CollectiveCheck(m, None, None, "", f"no model of {m.kind}")
    if m.size_bytes is None or not m.group_size:
        return CollectiveCheck(m, None, None, "", "the trace gives no size or group size")
    if m.group_size < 2:
        return CollectiveCheck(m, None, None, "", "a group of one rank moves nothing")
    if m.group_size > fabric.accelerator_count:
        return CollectiveCheck(m, None, None, "", f"groups of {m.group_size} ranks; the"
                               f" design has {fabric.accelerator_count} accelerators")
    try:
        run = run_collective(fabric, m.kind, m.size_bytes, (f"block:{m.group_size}",),
                             routing=routing, seed=seed, time_model=time_model)
    except TopomodelError as exc:
        return CollectiveCheck(m, None, None, "", str(exc))
    return CollectiveCheck(m, run.time_s, run.busbw_Bps, run.algorithm, "")


def _kinds(measure: TraceMeasure, step: StepResult) -> tuple[KindCheck, ...]:
    calls: dict[str, int] = defaultdict(int)
    time_s: dict[str, float] = defaultdict(float)
    exposed_s: dict[str, float] = defaultdict(float)
    uses: dict[str, list[str]] = defaultdict(list)
    for comm in step.comm:
        calls[comm.collective] += comm.calls
        time_s[comm.collective] += comm.time_s
        exposed_s[comm.collective] += comm.exposed_s
        uses[comm.collective].append(comm.kind)
    kinds = sorted({c.kind for c in measure.collectives} | set(calls))
    return tuple(KindCheck(k, calls.get(k, 0), time_s.get(k, 0.0), exposed_s.get(k, 0.0),
                           measure.comm_per_step_s(k), ", ".join(uses.get(k, ())))
                 for k in kinds)


def _parts(measure: TraceMeasure, step: StepResult) -> tuple[PartCheck, ...]:
    return (
        PartCheck("compute", step.compute_s + step.imbalance_s, measure.median("compute_s")),
        PartCheck("idle (model: pipeline bubble)", step.bubble_s, measure.median("idle_s")),
        PartCheck("exposed communication", step.exposed_comm_s,
                  measure.median("exposed_comm_s")),
        PartCheck("wait", step.wait_s, measure.median("wait_s")),
        PartCheck("step", step.step_time_s, measure.median("step_s")),
    )


def check_trace(fabric: Fabric, measure: TraceMeasure, step: StepResult, *,
                routing: str = "ecmp", seed: int = 0, time_model: TimeModel | None = None,
                threshold: float = COMM_BOUND_SHARE) -> TraceCheck:
    """Compare what a job's traces measured with the model of the same job on ``fabric``.

    ``step`` is the step model's result for the job's model and layout on ``fabric``;
    each measured collective kind and size is run through the collective model on
    groups of its size (``block:N``).
    """
    warnings: list[str] = []
    world = max((c.group_size or 0 for c in measure.collectives), default=0)
    if step.layout.world and world > step.layout.world:
        warnings.append(f"the traces show groups of {world} ranks; the layout has"
                        f" {step.layout.world} accelerators")
    if not measure.steps:
        warnings.append("the traces hold no step: no compute and no collective")
    checks = tuple(_model_collective(fabric, m, routing=routing, seed=seed,
                                     time_model=time_model) for m in measure.collectives)
    return TraceCheck(measure, step, checks, _kinds(measure, step), _parts(measure, step),
                      threshold, tuple(warnings))
