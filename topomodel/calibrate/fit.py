"""The least-squares fit shared by every kind of measurement: measured curves (a
collective on one communicator, a median time per size) against the model's own time of
the same collective on the design, one catalog figure per link class and the system's
launch latency fitted on every curve at once (:func:`fit_series`).

A curve is a :class:`Series`: nccl-tests runs give one (:mod:`.nccl`), a profiler trace
one per collective kind and group size (:mod:`.tracefit`). Which sizes fit which figure
is decided per curve (:func:`plan_sizes`: a rate where the model's latency is a small
share, the launch latency at the floor of that curve); the figures are then fitted on
the union of those sizes over every curve, so a figure two inputs both bound is fitted
on both together, and each fitted figure names every file it was fitted on.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import numpy as np

from topomodel.analysis.assumptions import TimeModel
from topomodel.analysis.collectives.linkrates import launch_latency_s, tier_efficiency
from topomodel.analysis.collectives.measured import NcclCheck
from topomodel.fabric.tables import Fabric
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
    """A figure is fitted on at most this many of the sizes it could be fitted on in
    each curve, evenly spread over them in size order (nccl-tests' sizes are in order,
    so in log size with -f and in size with -i): the model's time is smooth between
    them, each fit evaluation times the collective once per size, and the residual is
    still reported at every measured size (a 1,000-size log fits in seconds,
    benchmarks/README.md).""")


SLOPE_SIZES = documented(
    "calibrate.SLOPE_SIZES", 3,
    """The fewest rate-bound sizes of one curve on which the measured time is also read
    as a line (fixed cost + size / rate) beside the model's, to say how much of a fitted
    efficiency's change is a fixed cost the model leaves out: two sizes fix a line
    exactly, a third checks it.""")


@dataclass(frozen=True)
class SizePoint:
    """One measured size over every run: median time (s), its spread (max - min over
    median, 0-1), and how many timings it is the median of."""

    size_bytes: int
    time_s: float
    spread: float
    timings: int


Model = Callable[[dict[str, float], Sequence[int] | None], NcclCheck]
"""The model of a curve: (tier efficiencies, the sizes to run or None for all) -> the
model's check at those sizes."""


@dataclass(frozen=True)
class Series:
    """One measured curve: a collective on one communicator, median time per size
    (sizes increasing), the files it was measured in, and the model of it."""

    label: str  # what the curve is, in words: 'allreduce, 8 ranks'
    kind: str  # the input kind: 'nccl-tests', 'profiler trace'
    collective: str
    files: tuple[str, ...]
    points: tuple[SizePoint, ...]
    model: Model

    @property
    def sizes(self) -> list[int]:
        """The measured sizes, bytes, increasing."""
        return [p.size_bytes for p in self.points]


@dataclass(frozen=True)
class Fitted:
    """One catalog figure fitted: where it lives, its value before and after, the files
    and sizes it was fitted on, and the relative time residual (model / measured - 1)
    per size before and after (sizes in increasing order; a size two curves share
    appears once per curve)."""

    section: str  # the catalog section: scaleup_links, host_links, nics, systems
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
    curves: tuple[str, ...] = ()  # the labels of the curves it was fitted on
    spreads: tuple[float, ...] = ()  # the run-to-run spread at each of ``sizes`` (0-1)

    @property
    def moves(self) -> tuple[float, ...]:
        """The overlay's move of the model at each fitted size: model after / model
        before - 1 (every figure fitted together), from the two residuals."""
        return tuple((1 + new) / (1 + old) - 1 for old, new in
                     zip(self.residual_before, self.residual_after, strict=True))

    @property
    def within_spread(self) -> int:
        """How many fitted sizes the overlay moves the model by no more than the log's
        own run-to-run spread there (issue #37: all of them, on a healthy log)."""
        return sum(abs(m) <= s for m, s in zip(self.moves, self.spreads, strict=True))

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
class SeriesFit:
    """One curve before and after the fit (the model at every measured size)."""

    series: Series
    before: NcclCheck
    after: NcclCheck

    @property
    def spread(self) -> float:
        """The median run-to-run spread over the sizes (0-1)."""
        return float(np.median([p.spread for p in self.series.points]))


@dataclass(frozen=True)
class FitResult:
    """Every curve before and after, the figures fitted and those left as they were."""

    curves: tuple[SeriesFit, ...]
    fitted: tuple[Fitted, ...]
    kept: tuple[Kept, ...]


def figure_of(fabric: Fabric, tier: str) -> tuple[str, str, float] | None:
    """(catalog section, entry id, efficiency) of the figure that sets ``tier``'s
    effective rate, or None when no catalog figure does."""
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


def tiers_of(fabric: Fabric, section: str, entry: str) -> tuple[str, ...]:
    """The link tiers whose rate the catalog figure ``section.entry`` sets."""
    return tuple(t for t in fabric.links["tier"].cat.categories
                 if (f := figure_of(fabric, str(t))) is not None and f[:2] == (section, entry))


@dataclass(frozen=True)
class _Plan:
    """What the sizes can fit: each efficiency figure with the sizes (flat positions
    over every curve) it bounds, the latency-bound sizes, and what is left as it was."""

    rates: dict[tuple[str, str], list[int]]
    latency: list[int]
    kept: list[Kept]


def plan_sizes(fabric: Fabric, check: NcclCheck, measured: np.ndarray, *, offset: int = 0
               ) -> _Plan:
    """Which sizes of one curve fit which figure: a rate where the model's latency is
    under :data:`LATENCY_SHARE_LIMIT` of its time; the launch latency where its
    bandwidth part is, and the measured time is still at its floor (within that share of
    the curve's smallest measured time: a size whose time has risen moves data at a
    rate not yet fitted). Positions are ``offset`` + the size's index in the curve.

    The catalog's launch latency is left out of the model's latency and time here: it
    is a figure the fit sets, so the sizes it plans must not depend on it (else a second
    calibration, from the overlay of the first, would plan other sizes: the healthy
    Azure curve's 128 MiB is rate-bound at 25 of 504 us, not at 36 of 515)."""
    launch_s = launch_latency_s(fabric)
    rates: dict[tuple[str, str], list[int]] = {}
    latency: list[int] = []
    kept: list[Kept] = []
    floor = float(measured.min()) * (1 + LATENCY_SHARE_LIMIT)
    for i, size in enumerate(check.sizes):
        time_s = size.model_time_s - launch_s
        bandwidth_s = size.model_time_s - size.model_latency_s
        if size.bottleneck == "latency" and bandwidth_s < (
                LATENCY_SHARE_LIMIT * time_s) and measured[i] <= floor:
            latency.append(offset + i)
            continue
        if size.model_latency_s - launch_s >= LATENCY_SHARE_LIMIT * time_s:
            continue  # the knee: neither a rate nor a latency alone
        figure = figure_of(fabric, size.bottleneck)
        if figure is None:
            kept.append(Kept(f"{size.bottleneck} efficiency", "as it was",
                             "no catalog entry sets this tier's rate (no scale-up link,"
                             " host link or NIC behind it): not fitted"))
            continue
        rates.setdefault(figure[:2], []).append(offset + i)
    return _Plan({k: _spread_out(v) for k, v in rates.items()}, _spread_out(latency), kept)


def _spread_out(positions: list[int]) -> list[int]:
    """At most :data:`FIT_SIZES_PER_FIGURE` of ``positions``, evenly spread, first and
    last kept."""
    if len(positions) <= FIT_SIZES_PER_FIGURE:
        return positions
    picks = np.unique(np.round(np.linspace(0, len(positions) - 1, FIT_SIZES_PER_FIGURE)))
    return [positions[int(p)] for p in picks]


def _merged(plans: Sequence[_Plan]) -> _Plan:
    rates: dict[tuple[str, str], list[int]] = {}
    for plan in plans:
        for key, at in plan.rates.items():
            rates.setdefault(key, []).extend(at)
    return _Plan(rates, [i for p in plans for i in p.latency],
                 [k for p in plans for k in p.kept])


def _ordered(check: NcclCheck, sizes: Sequence[int]) -> list[float]:
    at = {s.size_bytes: s.model_time_s for s in check.sizes}
    return [at[s] for s in sizes]


class _Fit:
    """The least-squares fit of a plan over every curve: parameters are the log of each
    efficiency and the system's launch latency in µs. The launch latency is added to
    every collective's latency whatever the protocol and algorithm (timing.py), so the
    model's time with it is the time without it plus it: it is added to the times of
    one model run instead of running the model again."""

    def __init__(self, fabric: Fabric, series: Sequence[Series], plan: _Plan,
                 before: Sequence[NcclCheck]) -> None:
        self.fabric, self.series, self.plan, self.before = fabric, list(series), plan, before
        self.owner = np.array([n for n, s in enumerate(series) for _ in s.points])
        self.sizes = [size for s in series for size in s.sizes]
        self.measured = np.array([p.time_s for s in series for p in s.points])
        self.spreads = np.array([p.spread for s in series for p in s.points])
        self.keys = list(plan.rates)
        self.tiers = {k: tiers_of(fabric, *k) for k in self.keys}
        self.launch_s = launch_latency_s(fabric)
        self.chosen = sorted({i for k in self.keys for i in plan.rates[k]} | set(plan.latency))

    def efficiencies(self, x: np.ndarray) -> dict[str, float]:
        return {t: float(math.exp(v)) for k, v in zip(self.keys, x, strict=False)
                for t in self.tiers[k]}

    def shift_s(self, x: np.ndarray) -> float:
        """The launch latency of ``x`` less the catalog's, seconds."""
        return float(x[-1]) * 1e-6 - self.launch_s if self.plan.latency else 0.0

    def plain_times(self, checks: Sequence[NcclCheck]) -> np.ndarray:
        """The times of ``checks`` (one per curve) at every size of every curve."""
        return np.array([t for s, c in zip(self.series, checks, strict=True)
                         for t in _ordered(c, s.sizes)])

    def times(self, checks: Sequence[NcclCheck], x: np.ndarray) -> np.ndarray:
        """The model's times at every size of every curve from its runs at ``x``."""
        return self.plain_times(checks) + self.shift_s(x)

    def residual(self, x: np.ndarray) -> np.ndarray:
        """Log of model / measured time at the sizes fitted (the model run there alone)."""
        efficiency = self.efficiencies(x)
        times = np.empty(len(self.chosen))
        chosen = np.array(self.chosen)
        for n, series in enumerate(self.series):
            mine = np.flatnonzero(self.owner[chosen] == n)
            if not len(mine):
                continue
            sizes = [self.sizes[i] for i in chosen[mine]]
            times[mine] = _ordered(series.model(efficiency, sizes), sizes)
        times += self.shift_s(x)
        return np.log(np.maximum(times, 1e-12) / self.measured[chosen])

    def _start(self) -> tuple[list[float], list[float], list[float]]:
        start = [math.log(_figure_value(self.fabric, k)) for k in self.keys]
        low = [math.log(EFFICIENCY_BOUNDS[0])] * len(start)
        high = [math.log(EFFICIENCY_BOUNDS[1])] * len(start)
        if self.plan.latency:
            start.append(self.launch_s * 1e6)
            low.append(0.0)
            high.append(LAUNCH_LATENCY_BOUND_S * 1e6)
        return start, low, high

    def run(self) -> tuple[list[Fitted], list[NcclCheck]]:
        """The fitted figures and each curve's check with them."""
        from scipy.optimize import least_squares

        x0, low, high = self._start()
        if not x0:
            return [], list(self.before)
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
        efficiency = self.efficiencies(result.x)
        after = [s.model(efficiency, None) for s in self.series]
        old = first / self.measured - 1
        new = self.times(after, result.x) / self.measured - 1
        fitted = [self._fitted(k[0], k[1], "efficiency", self.tiers[k], math.exp(x0[n]),
                               math.exp(result.x[n]), self.plan.rates[k], old, new)
                  for n, k in enumerate(self.keys)]
        if self.plan.latency:
            fitted.append(self._fitted("systems", self.fabric.design.system,
                                       "launch_latency", (), self.launch_s,
                                       float(result.x[-1]) * 1e-6, self.plan.latency, old,
                                       new))
        shift = self.shift_s(result.x)
        return fitted, [_shifted(c, shift) for c in after]

    def _fitted(self, section: str, entry: str, key: str,  # noqa: PLR0913
                tiers: tuple[str, ...], before: float, after: float, at: Sequence[int],
                old: np.ndarray, new: np.ndarray) -> Fitted:
        # PLR0913: one record's fields, gathered here once for both kinds of figure
        at = sorted(at, key=lambda i: (self.sizes[i], i))
        owners = dict.fromkeys(int(self.owner[i]) for i in at)
        files = tuple(dict.fromkeys(f for n in owners for f in self.series[n].files))
        return Fitted(section, entry, key, tiers, before, after, files,
                      tuple(self.sizes[i] for i in at), tuple(float(old[i]) for i in at),
                      tuple(float(new[i]) for i in at),
                      curves=tuple(self.series[n].label for n in owners),
                      spreads=tuple(float(self.spreads[i]) for i in at))


def _shifted(check: NcclCheck, shift_s: float) -> NcclCheck:
    """The check with the fitted launch latency's change added to every model time."""
    if not shift_s:
        return check
    return replace(check, sizes=tuple(
        replace(s, model_time_s=s.model_time_s + shift_s,
                model_latency_s=s.model_latency_s + shift_s,
                model_busbw_Bps=s.model_busbw_Bps * s.model_time_s
                / (s.model_time_s + shift_s)) for s in check.sizes))


def _figure_value(fabric: Fabric, key: tuple[str, str]) -> float:
    """The figure's value now: a network tier's is what it runs at (the NIC's own, else
    the transport's packet efficiency)."""
    tiers = tiers_of(fabric, *key)
    return float(tier_efficiency(fabric, TimeModel())[tiers[0]])


def _plan_all(fabric: Fabric, series: Sequence[Series], checks: Sequence[NcclCheck]
              ) -> _Plan:
    plans, offset = [], 0
    for s, check in zip(series, checks, strict=True):
        measured = np.array([p.time_s for p in s.points])
        ordered = replace(check, sizes=tuple(
            {c.size_bytes: c for c in check.sizes}[size] for size in s.sizes))
        plans.append(plan_sizes(fabric, ordered, measured, offset=offset))
        offset += len(s.points)
    return _merged(plans)


def fit_series(fabric: Fabric, series: Sequence[Series]) -> FitResult:
    """Fit the link efficiencies and the launch latency to every curve of ``series``
    at once (a figure bounded in several curves is fitted on all of them together)."""
    before = [s.model({}, None) for s in series]
    planned = _plan_all(fabric, series, before)
    fit = _Fit(fabric, series, planned, before)
    fitted, after = fit.run()
    kept = [*planned.kept, *_latency_kept(fabric, planned, before, after, fit),
            *_fixed_costs(fit, fitted)]
    curves = tuple(SeriesFit(s, b, a) for s, b, a in zip(series, before, after, strict=True))
    return FitResult(curves, tuple(fitted), tuple(dict.fromkeys(kept)))


def _latency_kept(fabric: Fabric, plan: _Plan, before: Sequence[NcclCheck],
                  after: Sequence[NcclCheck], fit: _Fit) -> list[Kept]:
    """What the latency fit leaves: NCCL's base and per-hop latencies (one group size
    cannot tell a per-hop latency from the launch latency: the hops do not vary), and
    the launch latency itself when no size is latency-bound."""
    kept = [Kept("NCCL base and per-hop latency", "NCCL's (protocols.py)",
                 "NCCL's tuner constants, not catalog figures; runs of one group size"
                 " cannot tell a per-hop latency from the launch latency (the hops do not"
                 " vary): the launch latency takes up the difference")]
    nic = fabric.structure.scaleout.nic
    if nic and any(c.bottleneck not in ("latency", "host") and not c.bottleneck.startswith(
            "scaleup") for check in before for c in check.sizes):
        kept.append(Kept(f"nics.{nic}.net_latency", "as it was",
                         "a network per-hop latency needs runs of several node counts to"
                         " be told from the launch latency: not fitted"))
    if not plan.latency:
        kept.append(Kept(f"systems.{fabric.design.system}.launch_latency",
                         f"{launch_latency_s(fabric) * 1e6:.3g} us",
                         "no measured size is latency-bound: the sizes cannot separate a"
                         " latency from a rate"))
    fitted = {i for at in plan.rates.values() for i in at} | set(plan.latency)
    knee = [i for i in range(len(fit.sizes)) if i not in fitted]
    if knee:
        ratio = fit.plain_times(after) / fit.measured - 1
        worst = max(knee, key=lambda i: abs(ratio[i]))
        sizes = sorted(fit.sizes[i] for i in knee)
        kept.append(Kept("the knee of the curve", f"{len(knee)} sizes",
                         f"sizes where neither the latency nor a rate dominates, or whose"
                         f" tier has no catalog figure"
                         f" ({sizes[0]:,}-{sizes[-1]:,} B) fit nothing; the"
                         f" largest residual there is"
                         f" {ratio[worst]:+.0%} at {fit.sizes[worst]:,} B"
                         + (f" ({fit.series[int(fit.owner[worst])].label})"
                            if len(fit.series) > 1 else "")))
    return kept


def _fixed_costs(fit: _Fit, fitted: Sequence[Fitted]) -> list[Kept]:
    """Per curve and rate figure fitted on at least :data:`SLOPE_SIZES` of its sizes:
    the measured time against size as a line (intercept: a fixed cost; slope: the rate)
    beside the model's (before the fit). The efficiency is fitted to the times, so a
    fixed cost the model leaves out is taken up by it; the efficiency the slope alone
    gives is said beside (docs/calibrate.md, "On a healthy log")."""
    out = []
    for figure in fitted:
        if figure.key != "efficiency":
            continue
        at = fit.plan.rates[(figure.section, figure.entry)]
        before = fit.plain_times(fit.before)
        for n, series in enumerate(fit.series):
            mine = [i for i in at if fit.owner[i] == n]
            if len(mine) < SLOPE_SIZES:
                continue
            sizes = np.array([fit.sizes[i] for i in mine], dtype=np.float64)
            line = np.vstack([np.ones_like(sizes), sizes]).T
            (cost_s, per_byte_s), *_ = np.linalg.lstsq(line, fit.measured[mine], rcond=None)
            (model_cost_s, model_per_byte_s), *_ = np.linalg.lstsq(line, before[mine],
                                                                    rcond=None)
            if per_byte_s <= 0:
                continue
            slope = figure.before * model_per_byte_s / per_byte_s
            out.append(Kept(
                f"fixed cost at the rate-bound sizes ({series.label})",
                f"{cost_s * 1e6:.3g} us measured, {model_cost_s * 1e6:.3g} us modelled",
                f"time = fixed cost + size / rate over the {len(mine)} sizes"
                f" {int(sizes[0]):,}-{int(sizes[-1]):,} B: the rate is"
                f" {model_per_byte_s / per_byte_s:.1%} of the model's (efficiency"
                f" {slope:.4g} from the slope alone) and the rest of the difference is a"
                " fixed cost beyond the model's (NCCL's latency, and for NVLS inside a"
                " node its pipeline fill), which the fitted efficiency"
                f" {figure.after:.4g} takes up: not a catalog figure, not fitted"))
    return out
