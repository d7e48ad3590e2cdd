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

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import numpy as np

from topomodel.analysis.assumptions import TimeModel
from topomodel.analysis.collectives.linkrates import launch_latency_s, tier_efficiency
from topomodel.analysis.collectives.measured import (
    NcclCheck,
    SizeCheck,
    check_nccl,
    log_collective,
)
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
    (before the fit) is under this share of it, and the launch latency only where the
    bandwidth part is: each figure is fitted where the other moves the time by at most
    about this share. The sizes between (the knee of the curve) are reported with their
    residuals but fit nothing.""")

LAUNCH_LATENCY_BOUND_S = documented(
    "calibrate.LAUNCH_LATENCY_BOUND_S", 1e-3,
    """The largest launch latency a fit may give, seconds: nccl-tests' smallest times
    on any cluster in the shared reference are tens of µs; a millisecond is a stalled
    run, not a latency.""")

FIT_SIZES_PER_FIGURE = documented(
    "calibrate.FIT_SIZES_PER_FIGURE", 24,
    """A figure is fitted on at most this many of the sizes it could be fitted on, evenly
    spread over them in size order (nccl-tests' sizes are in order, so in log size with
    -f and in size with -i): the model's time is smooth between them, each fit
    evaluation times the collective once per size, and the residual is still reported at
    every measured size (a 1,000-size log fits in seconds, benchmarks/README.md).""")


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
    if tier != "host" and not tier.startswith("scaleup") and structure.scaleout.nic:
        return "nics", structure.scaleout.nic, tier_efficiency(fabric, TimeModel())[tier]
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

    def model(efficiency: dict[str, float], only: Sequence[int] | None = None
              ) -> NcclCheck:
        return check_nccl(fabric, logs[0], collective=name, ranks=ranks, routing=routing,
                          seed=seed, time_model=replace(base, efficiency={
                              **base.efficiency, **efficiency}),
                          sizes=sizes if only is None else only, algorithm=algorithm,
                          protocol=protocol)

    before = model({})
    order = {s.size_bytes: i for i, s in enumerate(before.sizes)}
    checks = [before.sizes[order[s]] for s in sizes]  # in the order of ``sizes``
    plan = _plan(fabric, checks, measured)
    fit = _Fit(fabric, plan, measured, model, before, sizes)
    files = tuple(log.file for log in logs)
    fitted, after = fit.run(files)
    kept = [*plan.kept, *_latency_kept(fabric, plan, checks, after, measured, sizes)]
    return NcclCalibration(name, before.ranks, files, points, tuple(fitted),
                           tuple(dict.fromkeys(kept)), before, after)


@dataclass(frozen=True)
class _Plan:
    """What the sizes can fit: each efficiency figure with the sizes (positions) it
    bounds, the latency-bound sizes, and what is left as it was."""

    rates: dict[tuple[str, str], list[int]]
    latency: list[int]
    kept: list[Kept]


def _plan(fabric: Fabric, checks: Sequence[SizeCheck], measured: np.ndarray) -> _Plan:
    """Which sizes fit which figure: a rate where the model's latency is under
    :data:`LATENCY_SHARE_LIMIT` of its time; the launch latency where its bandwidth part
    is, and the measured time is still at its floor (within that share of the smallest
    measured time: a size whose time has risen moves data at a rate not yet fitted)."""
    rates: dict[tuple[str, str], list[int]] = {}
    latency: list[int] = []
    kept: list[Kept] = []
    floor = float(measured.min()) * (1 + LATENCY_SHARE_LIMIT)
    for i, check in enumerate(checks):
        bandwidth_s = check.model_time_s - check.model_latency_s
        if check.bottleneck == "latency" and bandwidth_s < (
                LATENCY_SHARE_LIMIT * check.model_time_s) and measured[i] <= floor:
            latency.append(i)
            continue
        if check.model_latency_s >= LATENCY_SHARE_LIMIT * check.model_time_s:
            continue  # the knee: neither a rate nor a latency alone
        figure = _figure(fabric, check.bottleneck)
        if figure is None:
            kept.append(Kept(f"{check.bottleneck} efficiency", "as it was",
                             "no catalog entry sets this tier's rate (no scale-up link,"
                             " host link or NIC behind it): not fitted"))
            continue
        rates.setdefault(figure[:2], []).append(i)
    return _Plan({k: _spread_out(v) for k, v in rates.items()}, _spread_out(latency), kept)


def _spread_out(positions: list[int]) -> list[int]:
    """At most :data:`FIT_SIZES_PER_FIGURE` of ``positions``, evenly spread, first and
    last kept."""
    if len(positions) <= FIT_SIZES_PER_FIGURE:
        return positions
    picks = np.unique(np.round(np.linspace(0, len(positions) - 1, FIT_SIZES_PER_FIGURE)))
    return [positions[int(p)] for p in picks]


class _Fit:
    """The least-squares fit of a plan: parameters are the log of each efficiency and
    the system's launch latency in µs. The launch latency is added to every
    collective's latency whatever the protocol and algorithm (timing.py), so the
    model's time with it is the time without it plus it: it is added to the times of
    one model run instead of running the model again."""

    def __init__(self, fabric: Fabric, plan: _Plan, measured: np.ndarray,
                 model: Callable[..., NcclCheck], before: NcclCheck,
                 sizes: Sequence[int]) -> None:
        # PLR0913: the fit's inputs, each read by run
        self.fabric, self.plan, self.measured, self.model = fabric, plan, measured, model
        self.before = before
        order = {s.size_bytes: i for i, s in enumerate(before.sizes)}
        self.index = np.array([order[s] for s in sizes])
        self.sizes = list(sizes)
        self.keys = list(plan.rates)
        self.tiers = {k: _tiers_of(fabric, *k) for k in self.keys}
        self.launch_s = launch_latency_s(fabric)
        self.chosen = [i for k in self.keys for i in plan.rates[k]] + plan.latency

    def efficiencies(self, x: np.ndarray) -> dict[str, float]:
        return {t: float(math.exp(v)) for k, v in zip(self.keys, x, strict=False)
                for t in self.tiers[k]}

    def shift_s(self, x: np.ndarray) -> float:
        """The launch latency of ``x`` less the catalog's, seconds."""
        return float(x[-1]) * 1e-6 - self.launch_s if self.plan.latency else 0.0

    def times(self, check: NcclCheck, x: np.ndarray) -> np.ndarray:
        """The model's times at every size from its run at ``x``'s efficiencies."""
        times = np.array([s.model_time_s for s in check.sizes])[self.index]
        return times + self.shift_s(x)

    def residual(self, x: np.ndarray) -> np.ndarray:
        """Log of model / measured time at the sizes fitted (the model run there alone)."""
        chosen = self.chosen
        check = self.model(self.efficiencies(x), [self.sizes[i] for i in chosen])
        at = {s.size_bytes: s.model_time_s for s in check.sizes}
        times = np.array([at[self.sizes[i]] for i in chosen]) + self.shift_s(x)
        return np.log(np.maximum(times, 1e-12) / self.measured[chosen])

    def run(self, files: tuple[str, ...]) -> tuple[list[Fitted], NcclCheck]:
        """The fitted figures and the model's check with them."""
        from scipy.optimize import least_squares

        start = {k: _figure_value(self.fabric, k) for k in self.keys}
        x0 = [math.log(start[k]) for k in self.keys]
        low = [math.log(EFFICIENCY_BOUNDS[0])] * len(x0)
        high = [math.log(EFFICIENCY_BOUNDS[1])] * len(x0)
        if self.plan.latency:
            x0.append(self.launch_s * 1e6)
            low.append(0.0)
            high.append(LAUNCH_LATENCY_BOUND_S * 1e6)
        if not x0:
            return [], self.model({})
        first = self.times(self.before, np.array(x0))
        guess = np.array(x0)
        for n, k in enumerate(self.keys):  # each efficiency scaled by its sizes' ratio
            at = self.plan.rates[k]
            guess[n] += np.median(np.log(first[at] / self.measured[at]))
        if self.plan.latency:  # the latency by the latency-bound sizes' median gap
            at = self.plan.latency
            guess[-1] += np.median(self.measured[at] - first[at]) * 1e6
        guess = np.clip(guess, low, high)
        result = least_squares(self.residual, guess, bounds=(low, high), diff_step=1e-4,
                               xtol=1e-6, ftol=1e-8)
        old = first / self.measured - 1
        after = self.model(self.efficiencies(result.x))
        new = self.times(after, result.x) / self.measured - 1
        fitted = []
        for n, k in enumerate(self.keys):
            at = self.plan.rates[k]
            fitted.append(self._fitted(k[0], k[1], "efficiency", self.tiers[k], start[k],
                                       float(math.exp(result.x[n])), files, at, old, new))
        if self.plan.latency:
            fitted.append(self._fitted("systems", self.fabric.design.system,
                                       "launch_latency", (), self.launch_s,
                                       float(result.x[-1]) * 1e-6, files,
                                       self.plan.latency, old, new))
        shift = self.shift_s(result.x)
        after = replace(after, sizes=tuple(
            replace(s, model_time_s=s.model_time_s + shift,
                    model_latency_s=s.model_latency_s + shift,
                    model_busbw_Bps=s.model_busbw_Bps * s.model_time_s
                    / (s.model_time_s + shift)) for s in after.sizes))
        return fitted, after

    def _fitted(self, section: str, entry: str, key: str,  # noqa: PLR0913
                tiers: tuple[str, ...], before: float, after: float,
                files: tuple[str, ...], at: Sequence[int], old: np.ndarray,
                new: np.ndarray) -> Fitted:
        # PLR0913: one record's fields, gathered here once for both kinds of figure
        return Fitted(section, entry, key, tiers, before, after, files,
                      tuple(self.sizes[i] for i in at), tuple(float(old[i]) for i in at),
                      tuple(float(new[i]) for i in at))


def _figure_value(fabric: Fabric, key: tuple[str, str]) -> float:
    """The figure's value now: a network tier's is what it runs at (the NIC's own, else
    the transport's packet efficiency)."""
    tiers = _tiers_of(fabric, *key)
    return float(tier_efficiency(fabric, TimeModel())[tiers[0]])


def _latency_kept(fabric: Fabric, plan: _Plan, checks: Sequence[SizeCheck],
                  after: NcclCheck, measured: np.ndarray, sizes: Sequence[int]
                  ) -> list[Kept]:
    """What the latency fit leaves: NCCL's base and per-hop latencies (one group size
    cannot tell a per-hop latency from the launch latency: the hops do not vary), and
    the launch latency itself when no size is latency-bound."""
    kept = [Kept("NCCL base and per-hop latency", "NCCL's (protocols.py)",
                 "NCCL's tuner constants, not catalog figures; runs of one group size"
                 " cannot tell a per-hop latency from the launch latency (the hops do not"
                 " vary): the launch latency takes up the difference")]
    nic = fabric.structure.scaleout.nic
    if nic and any(c.bottleneck not in ("latency", "host") and not c.bottleneck.startswith(
            "scaleup") for c in checks):
        kept.append(Kept(f"nics.{nic}.net_latency", "as it was",
                         "a network per-hop latency needs runs of several node counts to"
                         " be told from the launch latency: not fitted"))
    if not plan.latency:
        kept.append(Kept(f"systems.{fabric.design.system}.launch_latency",
                         f"{launch_latency_s(fabric) * 1e6:.3g} us",
                         "no measured size is latency-bound: the sizes cannot separate a"
                         " latency from a rate"))
    fitted = {i for at in plan.rates.values() for i in at} | set(plan.latency)
    knee = [i for i in range(len(checks)) if i not in fitted]
    if knee:
        times = {s.size_bytes: s.model_time_s for s in after.sizes}
        worst = max(knee, key=lambda i: abs(times[sizes[i]] / measured[i] - 1))
        kept.append(Kept("the knee of the curve", f"{len(knee)} sizes",
                         f"sizes where neither the latency nor a rate dominates, or whose"
                         f" tier has no catalog figure"
                         f" ({sizes[knee[0]]:,}-{sizes[knee[-1]]:,} B) fit nothing; the"
                         f" largest residual there is"
                         f" {times[sizes[worst]] / measured[worst] - 1:+.0%} at"
                         f" {sizes[worst]:,} B"))
    return kept
