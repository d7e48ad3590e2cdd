"""Blast radius: what losing one failure domain of each kind does (a rack, a power feed,
a cooling loop, a scale-out plane, a site; :mod:`topomodel.fabric.domains` says what
each holds).

For each kind the first domain (domain 0, which holds the job's first ranks) is failed
as a whole: every link of its nodes is marked failed, as ``--fail`` marks a part's. A
row gives the accelerators it stops (all, and the modelled job's), whether the job
stops, the scale-out capacity it removes, the bisection's closed form over the live
links (0 once a scale-out tier has none), the share of each link tier's capacity left,
the step time re-routed around it (when a model is given and the job runs on), and how
often a domain of the kind fails: domains x the catalog's rate per domain (the
``failure_rates`` entry of the kind's component), with its repair time. Everything is
array arithmetic over the node and link tables; only the re-routed step routes traffic.

The job stops when the domain holds one of its accelerators, or when it takes the only
scale-out plane of a job that spans more than one scale-up domain. Domains of systems
remove endpoints only (no network switch is in a rack here), so they cut no path
between the systems left; a plane's failure leaves the other planes whole.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from topomodel.analysis.bisection import closed_form, tier_sums
from topomodel.analysis.reliability.lines import failure_rate
from topomodel.fabric.domains import DomainMap, domain_map, failed_domain_links
from topomodel.fabric.tables import Fabric
from topomodel.inputs.records import documented
from topomodel.inputs.reliability import DOMAIN_KINDS
from topomodel.vocabulary import FAT_TREE_TIERS

if TYPE_CHECKING:
    from topomodel.analysis.training.step import StepAssumptions
    from topomodel.inputs.parts import Model
    from topomodel.traffic.layout import Layout

SECONDS_PER_DAY = 86_400.0
"""Seconds in a day (failures per day = failures per second x this)."""

REVIEW_SWEPT_KINDS = documented(
    "blast_radius.REVIEW_SWEPT_KINDS", ("rack", "power_feed"),
    """The domain kinds whose every domain the design review fails, to add their worst
    and median rows: the numerous ones, whose members differ where a design is uneven
    (a last rack part full) or a job fills part of the fabric. Cooling loops and sites
    are few and mostly whole-fabric at the defaults, and planes are alike; build's
    --every-domain sweeps any kind.""")


@dataclass(frozen=True)
class BlastRadius:
    """One domain of a kind failed: what it stops and removes. Capacities are bytes/s
    per direction; shares are 0-1 fractions."""

    kind: str  # rack, power_feed, cooling_loop, plane, site
    domains: int  # domains of the kind in the design
    systems: int  # systems in the domain failed (0 for a plane)
    accelerators_stopped: int
    job_accelerators_stopped: int  # of the modelled job's (all accelerators without one)
    job_stopped: bool
    scaleout_removed_Bps: float  # leaf, spine and core links newly failed, one way
    scaleout_removed_share: float  # of the scale-out capacity built
    bisection_Bps: float | None  # closed form over the live links, failed
    healthy_bisection_Bps: float | None
    tier_left: dict[str, float] = field(default_factory=dict)  # share of capacity left
    step_s: float | None = None  # re-routed around the domain (None: stopped or no model)
    healthy_step_s: float | None = None
    failures_per_day: float = 0.0  # any domain of the kind
    repair_s: float = 0.0  # time to restore one
    rate_entry: str = ""  # the catalog's failure_rates entry
    domain: int = 0  # which domain of the kind was failed (from 0)
    pick: str = ""  # of a sweep over every domain of the kind: "worst" or "median"

    @property
    def bisection_removed_Bps(self) -> float | None:
        """Healthy bisection minus the failed one, bytes/s per direction."""
        if self.bisection_Bps is None or self.healthy_bisection_Bps is None:
            return None
        return self.healthy_bisection_Bps - self.bisection_Bps

    @property
    def step_ratio(self) -> float | None:
        """Step time failed over healthy."""
        if self.step_s is None or not self.healthy_step_s:
            return None
        return self.step_s / self.healthy_step_s


def _tier_capacity_Bps(fabric: Fabric, failed: np.ndarray) -> dict[str, tuple[float, float]]:
    """Per link tier: (capacity built, capacity live), bytes/s, both directions added.
    Where :func:`~topomodel.analysis.bisection.tier_sums` finds the sums exact, the live
    capacity is the built one less the failed rows' (the same figures, bit for bit)."""
    sums = fabric.derived(tier_sums)
    capacity = fabric.link_arrays["capacity_Bps"]
    size = len(sums.labels)
    built = sums.capacity_Bps
    if sums.exact:
        dead = np.flatnonzero(failed)
        live = built - np.bincount(sums.codes[dead], weights=capacity[dead], minlength=size)
    else:
        live = np.bincount(sums.codes, weights=np.where(failed, 0.0, capacity),
                           minlength=size)
    return {sums.labels[c]: (float(built[c]), float(live[c]))
            for c in np.flatnonzero(sums.count > 0)}


def _spans_domains(fabric: Fabric, job: np.ndarray) -> bool:
    """Whether the job's accelerators are in more than one scale-up domain."""
    domain = fabric.node_arrays["domain"][job]
    return len(np.unique(domain)) > 1


# PLR0913: keyword-only options of an entry point, as networkx's; a record would hide them
def blast_radius(fabric: Fabric, *, kinds: Sequence[str] = DOMAIN_KINDS,  # noqa: PLR0913
                 model: Model | None = None, layout: Layout | None = None,
                 assumptions: StepAssumptions | None = None,
                 healthy_step_s: float | None = None, routing: str = "ecmp",
                 seed: int = 0, every: Sequence[str] = (),
                 known_steps: Sequence[tuple[np.ndarray, float]] = ()) -> list[BlastRadius]:
    """One :class:`BlastRadius` per domain kind of ``kinds`` the design has (a plane
    only with a scale-out network), in that order; then for each kind of ``every``, the
    sweep over all its domains as two rows, its worst and its median
    (:func:`sweep_order`: every domain ranked with array arithmetic, the full row made
    for those two only).

    The job is the first ``layout.world`` accelerators (all without a layout); with
    ``model`` and ``layout`` the step is routed again around each domain the job
    survives (``healthy_step_s``: the healthy step, run here if not given), unless
    ``known_steps`` holds it: (failed link mask, step seconds) of steps already run on
    copies of ``fabric`` (a goodput's degraded step with a plane failed is this sweep's
    plane row), whose step is the one of the same mask.

    Raises
    ------
    UsageError
        If the catalog has no failure rate for a kind, or the layout does not fit.
    """
    from topomodel.analysis.training.step import step_time

    world = layout.world if layout is not None else fabric.accelerator_count
    job = fabric.accelerators[:world]
    in_job = np.zeros(len(fabric.node_arrays), bool)
    in_job[job] = True
    stepped = model is not None and layout is not None
    if stepped and healthy_step_s is None:
        assert model is not None and layout is not None  # for mypy: stepped says so
        healthy_step_s = step_time(fabric, model, layout, assumptions, routing=routing,
                                   seed=seed).step_time_s
    before = fabric.link_arrays["failed"]
    healthy_tiers = _tier_capacity_Bps(fabric, before)
    healthy_cut = closed_form(fabric)[0]
    accelerator = fabric.kind_mask("accelerator")
    rows = []
    for kind in kinds:
        dmap = domain_map(fabric, kind)
        if dmap.count == 0:
            continue
        rows.append(_row(fabric, dmap, in_job, accelerator, healthy_tiers, healthy_cut,
                         spans=_spans_domains(fabric, job), which=0))
    for kind in every:
        dmap = domain_map(fabric, kind)
        if dmap.count == 0:
            continue
        order = sweep_order(fabric, dmap, in_job, spans=_spans_domains(fabric, job))
        for pick, which in (("worst", order[-1]), ("median", order[(len(order) - 1) // 2])):
            row = _row(fabric, dmap, in_job, accelerator, healthy_tiers, healthy_cut,
                       spans=_spans_domains(fabric, job), which=int(which))
            rows.append(replace(row, pick=pick))
    if stepped:
        assert model is not None and layout is not None
        rows = [_stepped(fabric, r, model, layout, assumptions, healthy_step_s, routing,
                         seed, known_steps) for r in rows]
    return rows


# PLR0913: the healthy figures every row compares with, computed once by the caller
def sweep_order(fabric: Fabric, dmap: DomainMap, in_job: np.ndarray, *,
                spans: bool) -> np.ndarray:
    """Every domain of ``dmap``, least harmful first, by :func:`worst`'s order: the job
    stopped, then accelerators stopped, then the share of scale-out capacity removed
    (of tied domains the lowest-numbered ranks last, so the worst is the first of
    them). Array arithmetic over the node and link tables: a link is removed with a
    domain that holds either end."""
    count = dmap.count
    accelerator = fabric.kind_mask("accelerator")
    of_node = dmap.of_node
    held = of_node >= 0
    stopped = np.bincount(of_node[held & accelerator], minlength=count)
    job_dead = np.bincount(of_node[held & in_job], minlength=count)
    links = fabric.link_arrays  # numpy columns: no string per link row
    fat_tree = links["tier"].isin(FAT_TREE_TIERS)
    live = fat_tree & ~links["failed"]
    capacity = links["capacity_Bps"]
    src, dst = of_node[links["src"]], of_node[links["dst"]]
    take = live & (src >= 0)
    removed = np.bincount(src[take], weights=capacity[take], minlength=count)
    take = live & (dst >= 0) & (dst != src)  # a link inside one domain counts once
    removed += np.bincount(dst[take], weights=capacity[take], minlength=count)
    built = capacity[fat_tree].sum()
    share = removed / built if built else removed
    last_plane = dmap.kind == "plane" and count == 1 and spans
    job_stopped = (job_dead > 0) | last_plane
    return np.lexsort((-np.arange(count), share, stopped, job_stopped))


def _row(fabric: Fabric, dmap: DomainMap, in_job: np.ndarray,
         accelerator: np.ndarray, healthy_tiers: dict[str, tuple[float, float]],
         healthy_cut: float | None, *, spans: bool, which: int) -> BlastRadius:
    """Domain ``which`` of ``dmap`` failed: the row without the step."""
    dead = dmap.of_node == which
    failed = failed_domain_links(fabric, dead)
    tiers = _tier_capacity_Bps(fabric, failed)
    scaleout = [t for t in FAT_TREE_TIERS if t in tiers]
    built_out = sum(healthy_tiers[t][0] for t in scaleout)
    removed = sum(healthy_tiers[t][1] - tiers[t][1] for t in scaleout) / 2
    job_dead = int(np.count_nonzero(dead & in_job))
    last_plane = dmap.kind == "plane" and dmap.count == 1
    entry = failure_rate(fabric.catalog, dmap.kind)
    return BlastRadius(
        kind=dmap.kind, domains=dmap.count, systems=dmap.systems,
        accelerators_stopped=int(np.count_nonzero(dead & accelerator)),
        job_accelerators_stopped=job_dead, job_stopped=job_dead > 0 or (last_plane and spans),
        scaleout_removed_Bps=removed,
        scaleout_removed_share=2 * removed / built_out if built_out else 0.0,
        bisection_Bps=_bisection_Bps(fabric, failed, tiers, scaleout),
        healthy_bisection_Bps=healthy_cut,
        tier_left={t: live / tiers[t][0] if tiers[t][0] else 0.0
                   for t, (_, live) in tiers.items()},
        failures_per_day=dmap.count * entry.rate_per_s * SECONDS_PER_DAY,
        repair_s=float(entry.repair_s or 0.0), rate_entry=entry.id, domain=which)


def _bisection_Bps(fabric: Fabric, failed: np.ndarray,
                   tiers: dict[str, tuple[float, float]], scaleout: list[str]) -> float | None:
    """The bisection's closed form over the live links, bytes/s per direction; 0 when a
    scale-out tier has no live link left (nothing joins the halves' domains), or when
    a tier built with links has none left (the domain held every system: nothing is
    left to join)."""
    if any(tiers[t][1] == 0.0 for t in scaleout) or any(
            built > 0.0 and live == 0.0 for built, live in tiers.values()):
        return 0.0
    return closed_form(fabric.with_failed(failed))[0]


# PLR0913: the row, the step's own inputs and the steps already run
def _stepped(fabric: Fabric, row: BlastRadius, model: Model,  # noqa: PLR0913
             layout: Layout, assumptions: StepAssumptions | None,
             healthy_step_s: float | None, routing: str, seed: int,
             known_steps: Sequence[tuple[np.ndarray, float]]) -> BlastRadius:
    """``row`` with the step re-routed around its domain, where the job runs on (the
    known step of the same failed links where there is one)."""
    from topomodel.analysis.training.step import step_time

    if row.job_stopped:
        return replace(row, healthy_step_s=healthy_step_s)
    dead = domain_map(fabric, row.kind).of_node == row.domain
    failed = failed_domain_links(fabric, dead)
    known = [s for mask, s in known_steps if np.array_equal(mask, failed)]
    step_s = known[0] if known else step_time(
        fabric.with_failed(failed), model, layout, assumptions, routing=routing,
        seed=seed).step_time_s
    return replace(row, step_s=step_s, healthy_step_s=healthy_step_s)


def blast_radius_records(rows: Sequence[BlastRadius]) -> list[dict[str, Any]]:
    """Plain records (JSON and CSV), units in the keys."""
    return [{"kind": r.kind, "domains": r.domains, "systems": r.systems,
             "accelerators_stopped": r.accelerators_stopped,
             "job_accelerators_stopped": r.job_accelerators_stopped,
             "job_stopped": r.job_stopped, "scaleout_removed_Bps": r.scaleout_removed_Bps,
             "scaleout_removed_share": r.scaleout_removed_share,
             "bisection_Bps": r.bisection_Bps,
             "healthy_bisection_Bps": r.healthy_bisection_Bps,
             "bisection_removed_Bps": r.bisection_removed_Bps,
             **{f"{t}_capacity_left": share for t, share in r.tier_left.items()},
             "step_s": r.step_s, "healthy_step_s": r.healthy_step_s,
             "step_ratio": r.step_ratio, "failures_per_day": r.failures_per_day,
             "repair_s": r.repair_s, "rate_entry": r.rate_entry, "domain": r.domain,
             "pick": r.pick} for r in rows]


def worst(rows: Sequence[BlastRadius]) -> BlastRadius | None:
    """The row that hurts most: the most accelerators stopped, then the most scale-out
    capacity removed, then the slowest step."""
    if not rows:
        return None
    return max(rows, key=lambda r: (r.job_stopped, r.accelerators_stopped,
                                    r.scaleout_removed_share, r.step_ratio or 0.0))
