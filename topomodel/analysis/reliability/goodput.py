"""Goodput under failures: interruptions, checkpoints, spares and degraded operation.

From the parts of a job's footprint (its accelerators, their hosts and NICs, the
switches and cables its traffic can cross) and a failure rate per part
(``failure_rates`` in the catalog), the model counts:

- **interruptions**: failures of a part the job cannot run without. What a failure
  does is the part's failure class in the catalog (``failure_classes``, see
  :mod:`topomodel.analysis.reliability.failure_classes`): the built-in classes stop the job for
  everything inside a system (accelerator, HBM, host, NIC, NVSwitch) and for NVLink
  links, and let it run on, re-routed, around other switches and links. Whatever its
  class, a part that is a single point of failure stops it: some part below it has all
  its upward links through it (a single-homed NIC's cable or leaf, a leaf with one
  uplink). A part classed ``absorbed`` costs nothing.
- **degraded operation**: a redundant part that fails leaves the job running slower
  until it is repaired. One representative failure per tier is routed with the step
  model (the step of the slowest group, re-routed around it) to get the throughput kept
  with one part of that tier down. The parts of a tier down at a random time are
  Poisson with mean rate x repair time; a synchronous step runs at the pace of its
  slowest group, so with parts of several tiers down the throughput kept is that of the
  worst one, not the product or sum of their losses (sparse failures hit different
  groups; two under one group would compound, rare at a few parts down among
  thousands). The expected share kept is then
  ``P(none down) + sum_t P(t is the worst tier down) x (1 - loss_t)``.
- **downtime** per interruption: detection + restart, plus, when no spare system is free
  (the Poisson count of systems in repair reaches the spares), the wait for the first of
  the ``spares + 1`` systems in repair to come back (repair time / (spares + 1)).
- **checkpoints**: write time = checkpoint size / storage bandwidth (given, or by
  default a per-accelerator rate times the job's accelerators, at most 2 TB/s:
  :func:`~topomodel.analysis.assumptions.job_storage_Bps`); the interval is
  Daly's optimum (Young's sqrt(2 delta M) to first order), and the effective share of
  time is ``tau / (tau + delta) * (1 - ((tau + delta) / 2 + R) / M)``: checkpoint
  overhead, half an interval of rework per interruption, and the downtime.

goodput (tokens/s) = step tokens/s x degraded-throughput share x effective time share.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from topomodel.analysis.assumptions import SECONDS_PER_DAY as SECONDS_PER_DAY
from topomodel.analysis.assumptions import GoodputAssumptions as GoodputAssumptions
from topomodel.analysis.assumptions import job_storage_Bps
from topomodel.analysis.reliability.domain_failures import (
    domain_lines,
    domain_systems_in_repair,
    downtime_by_line,
    lost_by_cause,
)
from topomodel.analysis.reliability.failure_classes import (
    SINGLE_POINT,
    failure_class,
    on_failure,
    scaleup_technology,
)
from topomodel.analysis.reliability.lines import ComponentLine as ComponentLine
from topomodel.analysis.reliability.lines import failure_rate as failure_rate
from topomodel.analysis.reliability.poisson import poisson_tail as poisson_tail
from topomodel.analysis.training.footprint import MODULE_FORMS as MODULE_FORMS
from topomodel.analysis.training.footprint import TIER_LEVEL as TIER_LEVEL
from topomodel.analysis.training.footprint import network_parts
from topomodel.arrays import distinct
from topomodel.fabric.columns import Coded, CodeLabels
from topomodel.inputs.parts import System
from topomodel.inputs.records import documented
from topomodel.vocabulary import SCALEUP_TIERS

if TYPE_CHECKING:
    from topomodel.fabric.tables import Fabric

SECONDS_PER_YEAR = 365.25 * SECONDS_PER_DAY


REPAIRED_COMPONENTS = ("accelerator", "hbm", "host", "nic", "scaleup_switch")
"""Parts whose failure takes their system out of the pool until it is repaired (a
software fault restarts the job but leaves the system in service)."""


DEGRADED_ROUTING_MAX_WORK = documented(
    "goodput.DEGRADED_ROUTING_MAX_WORK", 50_000_000,
    """Largest accelerators x links for which the degradation is routed, not bounded, on
    a fabric the structured router does not cover (a torus): there the general router
    routes around the failed part, at about this much work per tier (the 1,016-GPU DGX
    SuperPOD, 2.6e7, takes seconds; 2.5e8 would take minutes). Clos fabrics are routed
    at any size.""")


@dataclass(frozen=True)
class DegradedTier:
    """One redundant tier in the degraded-operation derivation."""

    tier: str
    parts_down: float  # expected parts of this tier down at a random time
    loss: float  # share of throughput lost with one of them down (routed or bounded)
    any_down: float  # chance at least one is down: 1 - exp(-parts_down)
    worst: float  # chance it is the worst tier down (every worse tier up)


@dataclass(frozen=True)
class GoodputResult:
    """Interruptions, checkpointing and goodput of one job."""

    lines: tuple[ComponentLine, ...]
    interruptions_per_day: float
    mtbi_s: float  # mean time between interruptions
    checkpoint_bytes: float
    checkpoint_write_s: float
    checkpoint_interval_s: float
    spare_systems: int
    accelerators_per_system: int  # out of service per system failure (blast radius)
    no_spare_probability: float
    downtime_per_interruption_s: float
    effective_time_fraction: float
    degraded_loss: dict[str, float]  # tier -> throughput lost while one part is down
    degraded_throughput_fraction: float
    degraded_routed: bool  # False: the losses are the upper-bound estimate
    tokens_per_s: float  # failure-free, from the step model
    goodput_tokens_per_s: float
    degraded_tiers: tuple[DegradedTier, ...] = ()  # the derivation, worst tier first
    idle_systems: int | None = None  # the design's systems the job leaves free, if known
    repair_s: float = 0.0  # a failed system's time out of the pool
    # with no spares: the fewest that reach TARGET_EFFECTIVE_TIME (or near the most
    # spares can give), and the effective time they give; None when none are needed
    spares_for_target: tuple[int, float] | None = None
    spare_system_W: float | None = None  # one spare system's power, if known
    spare_system_USD: float | None = None  # one spare system's price, if known
    storage_Bps: float = 0.0  # the checkpoint write rate used, bytes/s
    storage_given: bool = False  # True: storage_Bps was given, not the per-accelerator rule
    # share of wall time each cause of interruption costs (first order), by component or
    # domain kind, largest first
    lost_by_cause: dict[str, float] = field(default_factory=dict)

    @property
    def dominant_domain(self) -> tuple[str, float] | None:
        """The failure-domain kind that costs the most time, and its share, if any."""
        from topomodel.inputs.reliability import DOMAIN_KINDS

        kinds = [(k, v) for k, v in self.lost_by_cause.items() if k in DOMAIN_KINDS]
        return kinds[0] if kinds else None


TARGET_EFFECTIVE_TIME = 0.9
"""Effective training time the spare-count hint aims for, share: Llama 3's pre-training
"achieved higher than 90% effective training time" on 16k GPUs (Llama 3 paper, §3.3.4)."""


SPARE_CEILING_SHARE = 0.99
"""Where no spare count reaches :data:`TARGET_EFFECTIVE_TIME` (detection, restarts and
checkpoints alone hold a large job below it), the spare-count hint aims for this share of
what as many spares as the job has systems give: each further spare buys less (the
chance none is free falls as a Poisson tail), so the last percent costs the most."""


def component_lines(fabric: Fabric, world: int) -> list[ComponentLine]:
    """The parts of a job on the first ``world`` accelerators, with their failure rates,
    then its failure domains
    (:func:`~topomodel.analysis.reliability.domain_failures.domain_lines`)."""
    catalog, nodes = fabric.catalog, fabric.nodes
    system = catalog.get(fabric.design.system, System)
    technology = scaleup_technology(fabric)
    lines: list[ComponentLine] = []

    # PLR0913: keyword-only options of an entry point, as networkx's; a record would hide them
    def add(component: str, model: str, tier: str, count: int, single: bool,  # noqa: PLR0913
            *keys: str, representative: str = "", cables: int = 1, parallel: int = 1,
            scaleup: bool = False) -> None:
        if count:
            entry = failure_rate(catalog, component, model, *keys)
            kind = failure_class(catalog, component, model,
                                 technology if scaleup else "", *keys)
            effect = on_failure(kind, single)
            lines.append(ComponentLine(component, model, tier, count, entry.rate_per_s,
                                       effect == "stops_job", entry.id, entry.provenance,
                                       representative, cables, parallel, effect,
                                       SINGLE_POINT if single else kind.id))

    node_system = nodes["system"].to_numpy()
    kind = Coded(nodes["kind"])
    accelerators = np.flatnonzero(kind.equals("accelerator"))  # in rank order
    job_systems = distinct(node_system[accelerators[:world]])
    for component in ("accelerator", "hbm", "software"):
        add(component, system.accelerator, "system", world, False)
    add("host", system.id, "system", len(job_systems) * system.hosts, False)
    # a look-up table over the systems' numbers, not a sort of every node
    in_job = np.isin(node_system, job_systems, kind="table")
    model = CodeLabels(nodes["model"])
    for part in ("nic", "scaleup_switch"):
        rows = np.flatnonzero(in_job & kind.equals(part))
        of_rows = model.codes[rows]
        for code in model.by_label(distinct(of_rows)):
            of_model = rows[of_rows == code]
            first = of_model[0]  # a part to fail should its class be degrades
            sharing = int((node_system[of_model] == node_system[first]).sum())
            add(part, model.label(code), "system", len(of_model), False,
                representative=str(nodes["name"].iat[first]), parallel=sharing,
                scaleup=part == "scaleup_switch")
    for p in network_parts(fabric, in_job):
        add(p.component, p.model, p.tier, p.quantity, p.single, *p.keys,
            representative=p.representative, cables=p.cables, parallel=p.parallel,
            scaleup=p.tier.split(" ")[0] in SCALEUP_TIERS)
    return lines + domain_lines(fabric, world)


def daly_interval_s(write_s: float, mtbi_s: float) -> float:
    """Daly's optimum compute time between checkpoints, seconds.

    ``sqrt(2 delta M) (1 + sqrt(delta / 2M) / 3 + (delta / 2M) / 9) - delta`` for
    ``delta < 2M``, else ``M`` (J. T. Daly, FGCS 22, 2006); to first order it is Young's
    ``sqrt(2 delta M)``.

    Examples
    --------
    >>> round(daly_interval_s(60.0, 86_400.0))  # a minute to write, a day between faults
    3180
    """
    if mtbi_s == math.inf or write_s <= 0:
        return math.inf if write_s > 0 else 0.0
    if write_s >= 2 * mtbi_s:
        return mtbi_s
    x = write_s / (2 * mtbi_s)
    return math.sqrt(2 * write_s * mtbi_s) * (1 + math.sqrt(x) / 3 + x / 9) - write_s


def effective_time_fraction(interval_s: float, write_s: float, downtime_s: float,
                            mtbi_s: float) -> float:
    """Share of wall time that advances training, as a renewal process: the job runs
    ``mtbi_s`` on average until an interruption (parts fail while it runs), then is down
    ``downtime_s``; of each run, half a checkpoint cycle is rework and the rest computes
    ``interval / (interval + write)`` of the time:
    ``tau / (tau + delta) x (M - (tau + delta) / 2) / (M + R)``. To first order in
    ``R / M`` this is ``... x (1 - ((tau + delta) / 2 + R) / M)``, which charges the
    downtime as if the job failed during it too (too low where ``R`` nears ``M``: a
    large job with no spare system free)."""
    cycle = interval_s + write_s
    if mtbi_s == math.inf:  # no failures: the optimum is never to checkpoint
        return 1.0 if interval_s == math.inf or cycle == 0 else interval_s / cycle
    share = 1.0 if cycle == 0 else interval_s / cycle  # nothing to write: all computes
    return max(0.0, share * (mtbi_s - cycle / 2) / (mtbi_s + downtime_s))


def no_spare_probability(systems_failures_per_s: float, repair_s: float, spares: int) -> float:
    """Chance that no spare system is free when one is needed: the systems in repair at
    a random time are Poisson with mean failures x repair time; none is free when that
    count reaches the number of spares (:func:`poisson_tail`)."""
    return poisson_tail(spares, systems_failures_per_s * repair_s)


# PLR0913: keyword-only options of an entry point, as networkx's; a record would hide them
def goodput(lines: Sequence[ComponentLine], *, tokens_per_s: float, accelerators: int,  # noqa: PLR0913
            accelerators_per_system: int, parameters: float,
            degraded_loss: dict[str, float], assumptions: GoodputAssumptions,
            degraded_routed: bool = True, idle_systems: int | None = None) -> GoodputResult:
    """Interruptions, checkpoint interval, effective time and goodput from part lines.

    ``degraded_loss`` maps a redundant line's tier to the share of throughput lost while
    one of its parts is down (from a step run with that part failed). ``idle_systems``:
    the systems of the design the job leaves free, if known; the default spares
    (``spare_fraction`` of the job's systems) are at most those, the design as built
    (spares given as ``spare_systems`` are taken as given).
    """
    a = assumptions
    rate = sum(ln.failures_per_s for ln in lines if ln.interrupts)
    mtbi = 1 / rate if rate > 0 else math.inf
    size = a.checkpoint_bytes or parameters * a.checkpoint_bytes_per_param
    storage = job_storage_Bps(a, accelerators)
    write = size / storage
    systems = -(-accelerators // accelerators_per_system)
    spares = a.spare_systems
    if spares is None:
        spares = math.ceil(a.spare_fraction * systems)
        spares = spares if idle_systems is None else min(spares, idle_systems)
    per_system = sum(ln.failures_per_s for ln in lines if ln.interrupts and ln.tier == "system"
                     and ln.component in REPAIRED_COMPONENTS) / max(systems, 1)
    interval = daly_interval_s(write, mtbi)
    in_domain_repair = domain_systems_in_repair(lines)
    rates = [ln.failures_per_s for ln in lines if ln.interrupts]

    def downtimes(k: int) -> tuple[float, list[float]]:  # no spare free; each line's
        in_repair = per_system * (systems + k) * a.repair_s + in_domain_repair
        none_free = poisson_tail(k, in_repair)
        # With no spare free, the job waits for the first of the systems in repair (the
        # spares and the one that just failed) to come back: exponential repair times.
        down = a.detection_s + a.restart_s + none_free * a.repair_s / (k + 1)
        return none_free, downtime_by_line(lines, part_downtime_s=down, spares=k,
                                           in_repair_mean=in_repair,
                                           restart_s=a.detection_s + a.restart_s)

    def with_spares(k: int) -> tuple[float, float, float]:  # no spare free, downtime, share
        none_free, each = downtimes(k)  # the mean downtime weighs each line by its rate
        down = (math.fsum(r * d for r, d in zip(rates, each, strict=True)) / rate
                if rate > 0 else a.detection_s + a.restart_s)
        return none_free, down, effective_time_fraction(interval, write, down, mtbi)

    no_spare, downtime, fraction = with_spares(spares)
    throughput, tiers = degraded_throughput(lines, degraded_loss, a.network_repair_s)
    return GoodputResult(
        tuple(lines), rate * SECONDS_PER_DAY, mtbi, size, write, interval, spares,
        accelerators_per_system, no_spare, downtime, fraction, dict(degraded_loss),
        throughput, degraded_routed, tokens_per_s, tokens_per_s * throughput * fraction,
        tiers, idle_systems, a.repair_s,
        _fewest_spares(lambda k: with_spares(k)[2], systems) if spares == 0 else None,
        storage_Bps=storage, storage_given=a.storage_Bps is not None,
        lost_by_cause=lost_by_cause(lines, downtimes(spares)[1], interval + write,
                                    effective_time_fraction(interval, write, 0.0, math.inf)
                                    - fraction))


def _fewest_spares(fraction_with: Callable[[int], float], systems: int
                   ) -> tuple[int, float] | None:
    """The fewest spare systems (at most ``systems``) whose effective time reaches
    :data:`TARGET_EFFECTIVE_TIME`, or where checkpoints and restarts hold every count
    below it, :data:`SPARE_CEILING_SHARE` of what ``systems`` spares give; with the
    effective time they give. ``None`` when none are needed (the share grows with
    spares)."""
    ceiling = fraction_with(systems)
    goal = min(TARGET_EFFECTIVE_TIME, SPARE_CEILING_SHARE * ceiling)
    if fraction_with(0) >= goal:
        return None
    low, high = 0, systems  # fraction_with(low) < goal <= fraction_with(high)
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (low, middle) if fraction_with(middle) >= goal else (middle, high)
    return high, fraction_with(high)


def degraded_throughput(lines: Sequence[ComponentLine], degraded_loss: dict[str, float],
                        repair_s: float) -> tuple[float, tuple[DegradedTier, ...]]:
    """Expected share of throughput kept while redundant parts are down, and its
    derivation per tier (worst first): the parts of tier ``t`` down at a random time are
    Poisson with mean ``lambda_t`` = failures/s x ``repair_s``; the job runs at the pace of
    the worst tier down (its slowest group; sparse failures hit different groups), so the
    share kept is
    ``exp(-sum lambda) + sum_t (1 - exp(-lambda_t)) exp(-sum_{worse} lambda) (1 - loss_t)``.

    Examples
    --------
    >>> line = ComponentLine("optic", "m", "spine link", 100, 1e-7, False, "r", "assumed")
    >>> kept, tiers = degraded_throughput([line], {"spine link": 0.02}, 3600.0)
    >>> round(tiers[0].parts_down, 3), round(kept, 5)  # 0.036 down: 3.5 % of the time
    (0.036, 0.99929)
    """
    down: dict[str, float] = {}
    for ln in lines:
        if ln.on_failure == "degrades" and degraded_loss.get(ln.tier, 0.0) > 0:
            down[ln.tier] = (down.get(ln.tier, 0.0)
                             + ln.failures_per_s * (ln.repair_s or repair_s))
    kept, all_up, tiers = 0.0, 1.0, []
    for tier in sorted(down, key=lambda t: (-degraded_loss[t], t)):
        loss = min(1.0, degraded_loss[tier])
        any_down = -math.expm1(-down[tier])
        worst = all_up * any_down
        kept += worst * (1 - loss)
        all_up *= 1 - any_down
        tiers.append(DegradedTier(tier, down[tier], loss, any_down, worst))
    return kept + all_up, tuple(tiers)


def estimated_loss(line: ComponentLine, comm_share: float) -> float:
    """Upper bound of the throughput lost with one part of ``line`` down: its load moves
    onto the ``parallel - 1`` others, so communication bottlenecked there takes up to
    ``1 / (parallel - 1)`` longer; at most all exposed communication and wait is."""
    return comm_share / max(line.parallel - 1, 1)


def degraded_lines(lines: Sequence[ComponentLine]) -> list[ComponentLine]:
    """The line whose representative is failed for each redundant tier's degraded step:
    the first of the tier that degrades and names a part, in line order."""
    firsts: dict[str, ComponentLine] = {}
    for ln in lines:
        if ln.on_failure == "degrades" and ln.representative and ln.tier not in firsts:
            firsts[ln.tier] = ln
    return list(firsts.values())


def with_part_failed(fabric: Fabric, part: str) -> Fabric:
    """``fabric`` with ``part`` failed: a node by name, an ``"a -- b"`` link (its
    whole bundle), or a failure domain ``"KIND:N"`` (a plane's line), as a component
    line's representative names it; ``""``: ``fabric``."""
    from topomodel.fabric.domains import with_domains_failed
    from topomodel.fabric.failures import with_failures
    from topomodel.inputs.reliability import DOMAIN_KINDS

    if not part:
        return fabric
    if part.partition(":")[0] in DOMAIN_KINDS:
        return with_domains_failed(fabric, [part])
    if " -- " in part:
        return with_failures(fabric, (), (part,))
    return with_failures(fabric, (part,), ())


def failure_indexes(fabric: Fabric) -> None:
    """Build the arc indexes that failing a part reads (:func:`share_failure_views`; a
    sort of every link row each, about half a second at the 98k 4K-supernode example),
    as :func:`~topomodel.parallel.beside` builds them while the structured router's
    view is built (:func:`degradation_routed`)."""
    from topomodel.fabric.arcs import arc_index, arcs_by_destination

    fabric.derived(arc_index)
    fabric.derived(arcs_by_destination)


def share_failure_views(fabric: Fabric, parts: Sequence[str]) -> None:
    """Build here, before workers fork, the views that ``fabric``'s copies with one of
    ``parts`` failed share (the failure view's wiring: about a second at the 98k
    4K-supernode example; the arc indexes that failing a part reads, which the failure
    view and the general router's wiring read too), so no worker builds them."""
    from topomodel.routing.structured import structured_supported

    if parts:
        structured_supported(with_part_failed(fabric, parts[0]))


def degraded_losses(lines: Sequence[ComponentLine],
                    known_tokens_per_s: Mapping[str, float] | None, tokens_per_s: float,
                    comm_share: float) -> dict[str, float]:
    """Per redundant tier, the share of throughput lost with one of its parts down: from
    the tokens/s of its degraded step (``known_tokens_per_s``, by the name of the part
    failed, :func:`with_part_failed`: the step re-routed around it) against the intact
    step's ``tokens_per_s``, or :func:`estimated_loss` where they are None."""
    tiers = degraded_lines(lines)
    if known_tokens_per_s is None:
        return {ln.tier: estimated_loss(ln, comm_share) for ln in tiers}
    # A failed link row takes its whole bundle down; its loss shared evenly over the
    # bundle's cables is an upper bound of one cable's (the loss grows faster than
    # linearly with the cables lost).
    return {ln.tier: max(0.0, 1 - known_tokens_per_s[ln.representative] / tokens_per_s)
            / ln.representative_cables for ln in tiers}


def degradation_routed(fabric: Fabric, layout: Any, *, route_degradation: bool = True
                       ) -> bool:
    """Whether :func:`job_goodput` routes the degraded steps (else it bounds the loss):
    with ``route_degradation``, on a fabric the structured router covers (any size) or
    within :data:`DEGRADED_ROUTING_MAX_WORK`."""
    from topomodel.routing.structured import structured_supported

    return route_degradation and (
        structured_supported(fabric) is None
        or layout.world * len(fabric.link_arrays) <= DEGRADED_ROUTING_MAX_WORK)


# PLR0913: keyword-only options of an entry point, as networkx's; a record would hide them
def job_goodput(fabric: Fabric, model: Any, layout: Any, step_assumptions: Any,  # noqa: PLR0913
                step_result: Any, assumptions: GoodputAssumptions | None = None, *,
                routing: str = "ecmp", seed: int = 0,
                route_degradation: bool = True, workers: int | None = None,
                lines: Sequence[ComponentLine] | None = None,
                known_tokens_per_s: Mapping[str, float] | None = None
                ) -> GoodputResult:
    """Goodput of a training job: ``step_result`` (from
    :func:`topomodel.analysis.training.step.step_time`) on ``fabric``. Where
    :func:`degradation_routed`, a step is re-run with a part of each redundant tier
    failed (on ``workers`` processes, default every core; those in
    ``known_tokens_per_s``, tokens/s by part, already run), else the loss is bounded
    (:func:`estimated_loss`); ``lines``: the job's :func:`component_lines`, if known."""
    return step_and_goodput(fabric, model, layout, step_assumptions, assumptions,
                            step_result=step_result, routing=routing, seed=seed,
                            route_degradation=route_degradation, workers=workers,
                            lines=lines, known_tokens_per_s=known_tokens_per_s)[1]


# PLR0913: keyword-only options of an entry point, as networkx's; a record would hide them
def step_and_goodput(fabric: Fabric, model: Any, layout: Any, step_assumptions: Any,  # noqa: PLR0913
                     assumptions: GoodputAssumptions | None = None, *,
                     step_result: Any = None, routing: str = "ecmp", seed: int = 0,
                     route_degradation: bool = True, workers: int | None = None,
                     lines: Sequence[ComponentLine] | None = None,
                     known_tokens_per_s: Mapping[str, float] | None = None,
                     keep_routes: bool = True) -> tuple[Any, GoodputResult]:
    """The job's step and its :func:`job_goodput`: without ``step_result``, the step
    runs as one more piece of the degraded steps' pool (neither needs the other), beside
    them instead of before the workers fork. With ``keep_routes`` False, the routes the
    step kept on ``fabric`` (:func:`~topomodel.analysis.collectives.routes.kept_routes`)
    are dropped before the degraded steps, for a caller that times nothing more of the
    step's traffic on ``fabric``: each degraded step routes on its own copy and reads
    none of them (DeepSeek-V3 at EP 64 on the 98,304-NPU 4K-supernode example: some
    200 MB held through every degraded step, ``benchmarks/README.md``, "verbs"). The
    results of the step, then the goodput."""
    from topomodel.analysis.collectives.routes import kept_routes
    from topomodel.analysis.collectives.timing import link_rates_of
    from topomodel.analysis.training.model import parameter_counts
    from topomodel.analysis.training.step import step_time
    from topomodel.parallel import beside, parallel_map
    from topomodel.traffic.pxn import release_listings

    a = assumptions or GoodputAssumptions()
    # what every worker reads, built once before they fork, on both cores: the arc
    # indexes beside the structured router's view, then the views of a part failed
    # (which read both) beside the link rates
    with beside(lambda: failure_indexes(fabric)) if route_degradation else nullcontext():
        lines = list(lines) if lines is not None else component_lines(fabric, layout.world)
        routed = degradation_routed(fabric, layout, route_degradation=route_degradation)
    known = dict(known_tokens_per_s or {})
    parts = [ln.representative for ln in degraded_lines(lines)
             if ln.representative not in known] if routed else []
    with beside(lambda: share_failure_views(fabric, parts)):
        link_rates_of(fabric, step_assumptions.time)
    # "": the intact step, after the first degraded one: run before the workers fork
    # (``warm_first``), that one routes the router's intact sections, which every copy
    # then finds kept (:mod:`topomodel.routing.sections`) and the intact step reads
    # where its sums are exact (:mod:`topomodel.routing.structured`)
    wanted = [*parts[:1], *([""] if step_result is None else []), *parts[1:]]

    def release_routes() -> None:
        if not keep_routes:
            fabric.derived(kept_routes).clear()

    def step_of(part: str) -> Any:
        stepped = step_time(with_part_failed(fabric, part), model, layout,
                            step_assumptions, routing=routing, seed=seed)
        release_routes()  # the intact step's, read by no copy
        return stepped

    release_routes()  # those of ``step_result``, where it was run before

    # the listed pairs of the relays in use kept from one step to the next (a step on
    # other relays drops them: traffic.pxn), and dropped after the last
    stepped = dict(zip(wanted, parallel_map(step_of, wanted, workers=workers,
                                            warm_first=True), strict=True))
    release_listings(fabric)
    step_result = stepped.pop("", step_result)
    known.update((part, r.tokens_per_s) for part, r in stepped.items())
    losses = degraded_losses(lines, known if routed else None, step_result.tokens_per_s,
                             step_result.comm_share)
    system = fabric.catalog.get(fabric.design.system, System)
    used = -(-layout.world // system.accelerators)
    result = goodput(
        lines, tokens_per_s=step_result.tokens_per_s, accelerators=layout.world,
        accelerators_per_system=system.accelerators,
        parameters=parameter_counts(model)["total"], degraded_loss=losses, assumptions=a,
        degraded_routed=routed, idle_systems=max(fabric.structure.systems - used, 0))
    if result.spares_for_target is None:
        return step_result, result
    from topomodel.analysis.bom import per_system_cost

    power_W, price_USD = per_system_cost(fabric)
    return step_result, replace(result, spare_system_W=power_W, spare_system_USD=price_USD)
