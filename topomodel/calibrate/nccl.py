"""Fit the model's link efficiencies and launch latency to nccl-tests runs: the
model's own time of the collective, on the design, at each measured size, is what is
fitted (:func:`~topomodel.analysis.collectives.measured.check_nccl` runs it), by least
squares on the log of the time (:func:`scipy.optimize.least_squares`).

What is fitted, per catalog figure (not per size, and never a result):

- the ``efficiency`` of the scale-up link (``scaleup_links``) where the model says a
  scale-up tier bounds the measured sizes, of the host link (``host_links``) where the
  host tier does, and of the NIC (``nics``: the network tiers, leaf and above, which
  otherwise run at the transport's packet efficiency) where a network tier does; on
  the sizes whose modelled latency is under
  :data:`LATENCY_SHARE_LIMIT` of the time;
- the system's ``launch_latency`` (``systems``: what every collective takes beyond
  NCCL's latency model, nccl-tests' launch and host overhead) on the latency-bound sizes
  at the floor of the measured curve.

What is left as it was, and said so (:class:`Kept`): NCCL's base and per-hop latencies
(NCCL's tuner constants in :mod:`topomodel.analysis.collectives.protocols`): runs of
one group size cannot tell a per-hop latency from the launch latency; and the sizes of
the knee between the two, with their largest residual.

Several runs of one binary (several logs of the same collective and ranks): the median
time per size is fitted, and the spread (max - min over the median, over every run and
both the out-of-place and in-place columns) is reported per size.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from topomodel.analysis.assumptions import TimeModel
from topomodel.analysis.collectives.measured import NcclCheck, check_nccl, log_collective
from topomodel.calibrate.fit import (
    EFFICIENCY_BOUNDS,
    FIT_SIZES_PER_FIGURE,
    LATENCY_SHARE_LIMIT,
    LAUNCH_LATENCY_BOUND_S,
    Fitted,
    Kept,
    Series,
    SizePoint,
    fit_series,
)
from topomodel.errors import UsageError
from topomodel.fabric.tables import Fabric
from topomodel.inputs.measured.nccltests import NcclTestsLog

__all__ = ["EFFICIENCY_BOUNDS", "FIT_SIZES_PER_FIGURE", "LATENCY_SHARE_LIMIT",
           "LAUNCH_LATENCY_BOUND_S", "Fitted", "Kept", "NcclCalibration", "SizePoint",
           "calibrate_nccl", "measured_points", "nccl_series"]


@dataclass(frozen=True)
class NcclCalibration:
    """What a calibration from nccl-tests found."""

    collective: str
    ranks: int
    files: tuple[str, ...]
    points: tuple[SizePoint, ...]
    fitted: tuple[Fitted, ...]
    kept: tuple[Kept, ...]
    before: NcclCheck  # the model at every measured size, before
    after: NcclCheck  # and with the fitted figures

    @property
    def spread(self) -> float:
        """The median run-to-run spread over the sizes (0-1)."""
        return float(np.median([p.spread for p in self.points]))


def measured_points(logs: Sequence[NcclTestsLog]) -> tuple[SizePoint, ...]:
    """Median time per size over every log and both columns (out-of-place and
    in-place), with its spread; sizes in increasing order."""
    times: dict[int, list[float]] = {}
    for log in logs:
        for row in log.all_rows:  # every -N cycle
            if row.size_bytes <= 0:
                continue
            found = times.setdefault(row.size_bytes, [])
            found.append(row.out_of_place.time_s)
            if row.in_place is not None:
                found.append(row.in_place.time_s)
    points = []
    for size in sorted(times):
        values = np.array(times[size])
        median = float(np.median(values))
        spread = float((values.max() - values.min()) / median) if median > 0 else 0.0
        points.append(SizePoint(size, median, spread, len(values)))
    return tuple(points)


# PLR0913: keyword-only options of an entry point, as check_nccl's
def nccl_series(fabric: Fabric, logs: Sequence[NcclTestsLog], *,  # noqa: PLR0913
                collective: str | None = None, ranks: str | None = None,
                routing: str = "ecmp", seed: int = 0,
                time_model: TimeModel | None = None, algorithm: str | None = None,
                protocol: str | None = None) -> Series:
    """The curve of ``logs`` (runs of one nccl-tests binary on one communicator):
    median time per size, and the model of it (:func:`check_nccl`, measured curves off).

    Raises
    ------
    UsageError
        When the logs are of different collectives or rank counts.
    """
    if not logs:
        raise UsageError("no nccl-tests runs to calibrate from")
    name = log_collective(logs[0], collective)
    for log in logs[1:]:
        if log_collective(log, collective) != name or (
                log.ranks and logs[0].ranks and len(log.ranks) != len(logs[0].ranks)):
            raise UsageError(f"{log.file}: not a run of the same collective and ranks as"
                             f" {logs[0].file}: calibrate one binary's runs together")
    first_sizes = {row.size_bytes for row in logs[0].rows}
    points = tuple(p for p in measured_points(logs) if p.size_bytes in first_sizes)
    sizes = [p.size_bytes for p in points]
    base = replace(time_model or TimeModel(), measured_curves=False)

    def model(efficiency: dict[str, float], only: Sequence[int] | None = None
              ) -> NcclCheck:
        return check_nccl(fabric, logs[0], collective=name, ranks=ranks, routing=routing,
                          seed=seed, time_model=replace(base, efficiency={
                              **base.efficiency, **efficiency}),
                          sizes=sizes if only is None else only, algorithm=algorithm,
                          protocol=protocol)

    count = len(logs[0].ranks) or None
    label = f"{name}{f', {count} ranks' if count else ''} (nccl-tests)"
    return Series(label, "nccl-tests", name, tuple(log.file for log in logs), points,
                  model)


# PLR0913: keyword-only options of an entry point, as check_nccl's
def calibrate_nccl(fabric: Fabric, logs: Sequence[NcclTestsLog], *,  # noqa: PLR0913
                   collective: str | None = None, ranks: str | None = None,
                   routing: str = "ecmp", seed: int = 0,
                   time_model: TimeModel | None = None, algorithm: str | None = None,
                   protocol: str | None = None) -> NcclCalibration:
    """Fit the efficiencies of the link classes that bound the measured sizes of
    ``logs`` (runs of one nccl-tests binary on one communicator) on ``fabric``.

    Raises
    ------
    UsageError
        When the logs are of different collectives or rank counts, or a figure to fit
        gives no finite time.
    """
    series = nccl_series(fabric, logs, collective=collective, ranks=ranks,
                         routing=routing, seed=seed, time_model=time_model,
                         algorithm=algorithm, protocol=protocol)
    result = fit_series(fabric, [series])
    curve = result.curves[0]
    return NcclCalibration(series.collective, curve.before.ranks, series.files,
                           series.points, result.fitted, result.kept, curve.before,
                           curve.after)
