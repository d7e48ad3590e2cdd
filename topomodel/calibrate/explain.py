"""``calibrate --explain``: the model against what was measured, before and after the
overlay, per measured curve (a collective kind on one communicator, from nccl-tests runs
or a trace) and, for a job's traces with its model and layout, per collective kind per
step and per part of the step (:func:`topomodel.calibrate.trace.check_trace`'s
comparison, run once on the design's catalog and once with the overlay).

Both sides are timed as the fit times them: the model's own collective algorithms with
the catalog's measured nccl-tests curves off (``TimeModel.measured_curves``), so that
the change is the overlay's alone.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from topomodel.calibrate.fit import FitResult
from topomodel.calibrate.trace import TraceCheck
from topomodel.calibrate.tracesteps import TraceMeasure


@dataclass(frozen=True)
class CurveExplain:
    """One measured curve: the model's time over the measured time, less 1 (the
    relative time residual), median and largest in size over its sizes, before and
    after the overlay, and the median run-to-run spread."""

    curve: str
    sizes: int
    smallest_bytes: int
    largest_bytes: int
    median_before: float
    median_after: float
    worst_before: float
    worst_after: float
    spread: float


@dataclass(frozen=True)
class StepExplain:
    """Per step part and per collective kind per step (seconds): the traces' median,
    the model before and after the overlay."""

    parts: tuple[tuple[str, float, float, float], ...]  # part, measured, before, after
    kinds: tuple[tuple[str, float, float, float], ...]  # kind, measured, before, after
    share: tuple[float, float, float]  # communication share: measured, before, after


def _worst(values: np.ndarray) -> float:
    return float(values[np.argmax(np.abs(values))])


def explain_curves(fit: FitResult) -> tuple[CurveExplain, ...]:
    """Each curve of ``fit`` before and after the figures fitted."""
    out = []
    for curve in fit.curves:
        points = curve.series.points
        measured = np.array([p.time_s for p in points])
        before = {s.size_bytes: s.model_time_s for s in curve.before.sizes}
        after = {s.size_bytes: s.model_time_s for s in curve.after.sizes}
        old = np.array([before[p.size_bytes] for p in points]) / measured - 1
        new = np.array([after[p.size_bytes] for p in points]) / measured - 1
        out.append(CurveExplain(curve.series.label, len(points), points[0].size_bytes,
                                points[-1].size_bytes, float(np.median(old)),
                                float(np.median(new)), _worst(old), _worst(new),
                                curve.spread))
    return tuple(out)


def explain_step(measure: TraceMeasure, before: TraceCheck, after: TraceCheck
                 ) -> StepExplain:
    """The step's parts and its collective kinds per step, measured and modelled on
    the design's catalog (``before``) and with the overlay (``after``): two
    :func:`~topomodel.calibrate.trace.check_trace` results of the same traces."""
    parts = tuple((b.part, b.measured_s, b.model_s, a.model_s)
                  for b, a in zip(before.parts, after.parts, strict=True))
    kinds = tuple((b.kind, b.measured_time_s, b.model_time_s, a.model_time_s)
                  for b, a in zip(before.kinds, after.kinds, strict=True))
    return StepExplain(parts, kinds, (measure.median("comm_share"),
                                      before.step.comm_share, after.step.comm_share))

