"""Fit the model's link efficiencies to nccl-tests runs: the model's own time of the
collective, on the design, at each measured size, is what is fitted
(:func:`~topomodel.analysis.collectives.measured.check_nccl` runs it), by least squares
on the log of the time (:func:`scipy.optimize.least_squares`).

What is fitted, per catalog figure (not per size, and never a result):

- the ``efficiency`` of the scale-up link (``scaleup_links``) where the model says a
  scale-up tier bounds the measured sizes, and of the host link (``host_links``) where
  the host tier does; each fitted on the sizes that figure bounds (not latency-bound).

What is left as it was, and said so (:class:`Kept`): the network tiers' efficiency (the
transport's packet efficiency, :mod:`topomodel.inputs.transports`, not a catalog
figure), and NCCL's base and per-hop latencies (NCCL's tuner constants in
:mod:`topomodel.analysis.collectives.protocols`, not catalog figures); the residual at
the latency-bound sizes is reported so a reader sees how far they are off.

Several runs of one binary (several logs of the same collective and ranks): the median
time per size is fitted, and the spread (max - min over the median, over every run and
both the out-of-place and in-place columns) is reported per size.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from topomodel.analysis.assumptions import TimeModel
from topomodel.analysis.collectives.measured import NcclCheck, check_nccl, log_collective
from topomodel.errors import UsageError
from topomodel.fabric.tables import Fabric
from topomodel.inputs.measured.nccltests import NcclTestsLog
from topomodel.inputs.parts import HostLink, ScaleupLink
from topomodel.inputs.records import documented

EFFICIENCY_BOUNDS = documented(
    "calibrate.EFFICIENCY_BOUNDS", (1e-3, 1.0),
    """The range a fitted efficiency (effective / nominal rate) is held to: a link cannot
    carry more than its line rate, and below 0.1 % the link is broken rather than slow
    (a fit there says the model's bottleneck is not the run's).""")

LATENCY_SHARE_LIMIT = documented(
    "calibrate.LATENCY_SHARE_LIMIT", 0.05,
    """A size fits a link's efficiency only where the latency part of the model's time
    (before the fit) is under this share of it: the latencies are NCCL's constants, not
    fitted, so an error in them moves the fitted rate by at most about this share. The
    sizes between this and the latency-bound ones (the knee of the curve) are reported
    with their residuals but fit nothing.""")


@dataclass(frozen=True)
class SizePoint:
    """One measured size over every run: median time (s), its spread (max - min over
    median, 0-1), and how many timings it is the median of."""

    size_bytes: int
    time_s: float
    spread: float
    timings: int


@dataclass(frozen=True)
class Fitted:
    """One catalog figure fitted: where it lives, its value before and after, the files
    and sizes it was fitted on, and the relative time residual (model / measured - 1)
    per size before and after."""

    section: str  # the catalog section: scaleup_links, host_links
    entry: str
    key: str
    tiers: tuple[str, ...]
    before: float
    after: float
    files: tuple[str, ...]
    sizes: tuple[int, ...]
    residual_before: tuple[float, ...]
    residual_after: tuple[float, ...]
    provenance: str = "measured"

    @property
    def rms_after(self) -> float:
        """Root mean square of the relative residuals after the fit."""
        return float(np.sqrt(np.mean(np.square(self.residual_after))))

    @property
    def rms_before(self) -> float:
        """Root mean square of the relative residuals before the fit."""
        return float(np.sqrt(np.mean(np.square(self.residual_before))))


@dataclass(frozen=True)
class Kept:
    """A figure left as it was, its value in words, and why."""

    what: str
    value: str
    why: str


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
        for row in log.rows:
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


def _figure(fabric: Fabric, tier: str) -> tuple[str, str, float] | None:
    """(catalog section, entry id, efficiency) of the figure that sets ``tier``'s
    effective rate, or None when no catalog figure does (the network's transport)."""
    structure, catalog = fabric.structure, fabric.catalog
    if tier == "scaleup_l3" and structure.scaleup.socket_link:
        link = structure.scaleup.socket_link
        return "scaleup_links", link, catalog.get(link, ScaleupLink).efficiency
    if tier.startswith("scaleup") and structure.scaleup.link:
        link = structure.scaleup.link
        return "scaleup_links", link, catalog.get(link, ScaleupLink).efficiency
    if tier == "host" and structure.scaleout.host_link:
        host = structure.scaleout.host_link
        return "host_links", host, catalog.get(host, HostLink).efficiency
    return None


def _tiers_of(fabric: Fabric, section: str, entry: str) -> tuple[str, ...]:
    return tuple(t for t in fabric.links["tier"].cat.categories
                 if (f := _figure(fabric, str(t))) is not None and f[:2] == (section, entry))


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
    measured = np.array([p.time_s for p in points])
    base = replace(time_model or TimeModel(), measured_curves=False)

    def model(efficiency: dict[str, float]) -> NcclCheck:
        return check_nccl(fabric, logs[0], collective=name, ranks=ranks, routing=routing,
                          seed=seed, time_model=replace(base, efficiency={
                              **base.efficiency, **efficiency}),
                          sizes=sizes, algorithm=algorithm, protocol=protocol)

    before = model({})
    order = {s.size_bytes: i for i, s in enumerate(before.sizes)}
    index = np.array([order[s] for s in sizes])  # sizes order -> the check's order
    files = tuple(log.file for log in logs)
    params: dict[tuple[str, str], list[int]] = {}
    kept: list[Kept] = []
    for i, check in enumerate(before.sizes[j] for j in index):
        if (check.bottleneck == "latency"
                or check.model_latency_s >= LATENCY_SHARE_LIMIT * check.model_time_s):
            continue
        figure = _figure(fabric, check.bottleneck)
        if figure is None:
            kept.append(Kept(f"{check.bottleneck} efficiency", "the transport's",
                             "the network tiers run at the transport's packet efficiency"
                             " (inputs/transports.py), not a catalog figure: not fitted"))
            continue
        params.setdefault(figure[:2], []).append(i)
    keys = list(params)
    start = {k: _figure_value(fabric, k) for k in keys}
    tiers = {k: _tiers_of(fabric, *k) for k in keys}

    def efficiencies(x: np.ndarray) -> dict[str, float]:
        return {t: float(math.exp(v)) for k, v in zip(keys, x, strict=True) for t in tiers[k]}

    def residual(x: np.ndarray) -> np.ndarray:
        check = model(efficiencies(x))
        times = np.array([s.model_time_s for s in check.sizes])[index]
        chosen = [i for k in keys for i in params[k]]
        return np.log(times[chosen] / measured[chosen])

    after = before
    fitted: list[Fitted] = []
    if keys:
        from scipy.optimize import least_squares

        low, high = (math.log(b) for b in EFFICIENCY_BOUNDS)
        x0 = np.array([math.log(start[k]) for k in keys])
        # first guess: each figure scaled by its sizes' median model / measured time
        first = np.array([s.model_time_s for s in before.sizes])[index]
        x0 = np.clip(x0 + np.array([np.median(np.log(first[params[k]] / measured[params[k]]))
                                    for k in keys]), low, high)
        result = least_squares(residual, x0, bounds=(low, high), diff_step=1e-4,
                               xtol=1e-6, ftol=1e-8)
        after = model(efficiencies(result.x))
        old = np.array([s.model_time_s for s in before.sizes])[index] / measured - 1
        new = np.array([s.model_time_s for s in after.sizes])[index] / measured - 1
        for k, value in zip(keys, result.x, strict=True):
            at = params[k]
            fitted.append(Fitted(k[0], k[1], "efficiency", tiers[k], start[k],
                                 float(math.exp(value)), files,
                                 tuple(sizes[i] for i in at),
                                 tuple(float(old[i]) for i in at),
                                 tuple(float(new[i]) for i in at)))
    kept += _latency_kept(before, after, sizes, measured, index)
    return NcclCalibration(name, before.ranks, files, points, tuple(fitted),
                           tuple(dict.fromkeys(kept)), before, after)


def _figure_value(fabric: Fabric, key: tuple[str, str]) -> float:
    cls = ScaleupLink if key[0] == "scaleup_links" else HostLink
    return float(fabric.catalog.get(key[1], cls).efficiency)


def _latency_kept(before: NcclCheck, after: NcclCheck, sizes: Sequence[int],
                  measured: np.ndarray, index: np.ndarray) -> list[Kept]:
    """NCCL's latencies are left as they were; the residual at the latency-bound sizes
    (or that there are none) says how far they are off."""
    bound = [i for i, j in enumerate(index) if before.sizes[j].bottleneck == "latency"]
    if not bound:
        return [Kept("base and per-hop latency", "NCCL's (protocols.py)",
                     "no measured size is latency-bound: the sizes cannot separate a"
                     " latency from a rate")]
    times = np.array([s.model_time_s for s in after.sizes])[index]
    residual = times[bound] / measured[bound] - 1
    return [Kept("base and per-hop latency", "NCCL's (protocols.py)",
                 f"NCCL's tuner constants, not catalog figures: not fitted; at the"
                 f" {len(bound)} latency-bound sizes ({sizes[bound[0]]:,}-"
                 f"{sizes[bound[-1]]:,} B) the model's time is off by"
                 f" {float(np.median(residual)):+.0%} (median)")]
