"""Studies built on the step model: compare designs, scale, required bandwidth, sensitivity.

- :func:`scale_curve`: the same model and layout rules at growing accelerator counts
  (DP grows; TP, PP, CP and EP stay): throughput, scaling efficiency, MFU.
- :func:`required_scaleout_factor`: the smallest factor on every scale-out link
  (host, leaf, spine, core) that brings the communication share of the step to a target.
- :func:`sensitivity`: how much each named assumption moves the result.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace

from topomodel.analysis.training.step import StepAssumptions, StepResult, step_time
from topomodel.errors import InputError, ParameterError, UsageError
from topomodel.fabric.build import build_fabric
from topomodel.fabric.structure import measure_injection
from topomodel.fabric.tables import Fabric, scaled_rates
from topomodel.inputs.catalog import Catalog
from topomodel.inputs.design import Design
from topomodel.inputs.parts import Model
from topomodel.limits import above
from topomodel.traffic.layout import Layout
from topomodel.vocabulary import SCALE_OUT_TIERS


def layout_for(world: int, base: Layout) -> Layout:
    """``base`` with DP set to fill ``world`` accelerators (global batch grows with DP)."""
    cell = base.tp * base.pp * base.cp
    dp = world // cell
    if dp < 1 or dp % base.ep:
        raise UsageError(f"{world} accelerators do not hold TP x PP x CP = {cell} with an"
                         f" EP of {base.ep}")
    per_dp = (base.global_batch // base.dp) if base.global_batch else 0
    return replace(base, dp=dp, global_batch=per_dp * dp)


def fill_dp(world: int, layout: Layout) -> Layout:
    """``layout`` with DP set to fill ``world`` accelerators; its global batch (the whole
    step's, or 0 for the default) stays as given."""
    filled = layout_for(world, replace(layout, global_batch=0))
    return replace(filled, global_batch=layout.global_batch)


DEFAULT_SCALE_POINTS = 6
"""How many accelerator counts :func:`default_counts` spaces between the smallest job
and the design (before rounding to whole systems merges any): six points, geometric,
show the shape of a scaling curve in the time of six steps."""


def default_counts(total: int, per_system: int, base: Layout, *,
                   points: int = DEFAULT_SCALE_POINTS) -> list[int]:
    """Accelerator counts for a scaling curve: ``points`` counts spaced geometrically from
    the smallest job (one system, or one model-parallel group TP x PP x CP x EP if
    larger) to ``total``, rounded to whole systems, each once.

    Examples
    --------
    >>> default_counts(1016, 8, Layout(tp=8, pp=4))
    [32, 64, 128, 256, 512, 1016]
    >>> default_counts(32, 8, Layout())
    [8, 16, 24, 32]
    """
    smallest = max(per_system, base.tp * base.pp * base.cp * base.ep)
    if total <= smallest or points < 2:
        return [total]
    ratio = (total / smallest) ** (1 / (points - 1))
    counts = {max(per_system, round(smallest * ratio ** i / per_system) * per_system)
              for i in range(points - 1)}
    return sorted({*counts, total})


@dataclass(frozen=True)
class ScalePoint:
    """One point of a scaling curve."""

    accelerators: int
    result: StepResult
    efficiency: float  # tokens/s per accelerator relative to the smallest point


# PLR0913: keyword-only options of an entry point, as networkx's; a record would hide them
def scale_curve(design: Design, catalog: Catalog, model: Model, base: Layout,  # noqa: PLR0913
                counts: list[int], assumptions: StepAssumptions | None = None, *,
                routing: str = "ecmp", seed: int = 0, scaleout_factor: float = 1.0
                ) -> list[ScalePoint]:
    """Build the design at each accelerator count (whole systems), apply the scale-out
    what-if (:func:`scale_scaleout` by ``scaleout_factor``) and model a step; counts
    that the layout fills to the same job (1,000 and 1,016 GPUs at TP 8 x PP 4 are both
    992) give one point.

    Raises
    ------
    UsageError
        For more than :data:`~topomodel.limits.MAX_SCALE_POINTS` counts or a count above
        :data:`~topomodel.limits.MAX_ACCELERATORS` (checked before anything is built), or
        a layout that does not fit a count.
    """
    from topomodel.inputs.parts import System

    refusal = (above(len(counts), "MAX_SCALE_POINTS", "counts")
               or above(max(counts, default=0), "MAX_ACCELERATORS", "accelerators"))
    if refusal:
        raise ParameterError("counts", refusal)
    per_system = catalog.get(design.system, System).accelerators
    points: list[ScalePoint] = []
    worlds: set[int] = set()
    for count in counts:
        systems = max(1, count // per_system)
        world = layout_for(systems * per_system, base).world
        if world in worlds:  # two counts the layout fills to the same job: one point
            continue
        worlds.add(world)
        sized = replace(design, systems=systems, accelerators=None)
        try:
            fabric = build_fabric(sized, catalog)
        except InputError as exc:  # the count's fault, not the design file's
            raise ParameterError("counts", f"{count}: the design grown to {systems:,}"
                                 " systems cannot be built: " + "; ".join(
                                     f"{p.key_path}: {p.message}" for p in exc.problems)
                                 ) from None
        if scaleout_factor != 1.0:
            fabric = scale_scaleout(fabric, scaleout_factor)
        result = step_time(fabric, model, layout_for(systems * per_system, base), assumptions,
                           routing=routing, seed=seed)
        per_acc = result.tokens_per_s / result.layout.world
        first = points[0].result.tokens_per_s / points[0].result.layout.world if points else (
            per_acc)
        points.append(ScalePoint(result.layout.world, result, per_acc / first))
    return points


def scale_scaleout(fabric: Fabric, factor: float, *, recable: bool = True) -> Fabric:
    """``fabric`` with every scale-out link ``factor`` times faster, re-cabled.

    Each faster link gets the catalog's lowest-power cable or module for its new rate
    and its tier's length (a part the layout names is kept where it still carries the
    rate), so the bill of materials and the power follow the what-if; switches and
    NICs keep their catalog parts. ``recable=False`` scales capacities only, for
    studies that ask what bandwidth is needed rather than which parts give it.

    Raises
    ------
    UsageError
        When no catalog part carries a tier's faster links over its length.
    """
    from topomodel.fabric.cabling import recabled

    links = fabric.link_arrays
    out = links["tier"].isin(SCALE_OUT_TIERS)
    if not recable:  # rates alone: the copy shares the routes (Fabric.with_capacities)
        return fabric.with_capacities(out, factor)
    links = recabled(scaled_rates(links, out, factor), fabric.design, fabric.catalog,
                     tiers=SCALE_OUT_TIERS, whatif=f"--scaleout-factor {factor:g}")
    return replace(fabric, link_arrays=links,
                   injection=measure_injection(fabric.node_arrays, links, fabric.structure,
                                               fabric.reverse_rows))


SEARCH_STEPS_MAX = 60
"""At most this many steps of a factor search: a geometric bisection over [1/64, 64] to
1 % needs 10, so the cap only stops a search whose share does not settle."""

FOUND, NOT_REACHED, BELOW_RANGE, NO_EFFECT = "found", "not reached", "below range", "no effect"
"""How a factor search ended: a factor in range; the target missed even at ``limit`` x;
the target met even at 1/``limit`` x; or the share the same at both ends (no scale-out
network, or traffic that stays inside the scale-up domains), so no factor changes it."""


@dataclass(frozen=True)
class ScaleoutSearch:
    """The smallest scale-out factor bringing the communication share to a target."""

    outcome: str  # FOUND, NOT_REACHED, BELOW_RANGE or NO_EFFECT
    factor: float | None  # the factor found (FOUND only)
    result: StepResult  # the step at the factor, or at the end of the range that decided
    limit: float  # the search range was [1/limit, limit] x today's


# PLR0913: keyword-only options of an entry point, as networkx's; a record would hide them
def required_scaleout_factor(fabric: Fabric, model: Model, layout: Layout,  # noqa: PLR0913
                             assumptions: StepAssumptions | None = None, *,
                             target_share: float = 0.10, limit: float = 64.0,
                             tolerance: float = 0.01, routing: str = "ecmp", seed: int = 0
                             ) -> ScaleoutSearch:
    """Smallest factor in [1/``limit``, ``limit``] on every scale-out link with exposed
    comm + wait <= ``target_share`` of the step, to a relative ``tolerance``.

    A geometric bisection of at most :data:`SEARCH_STEPS_MAX` steps; the ends of the range
    are tried first, so a share that no factor moves (``NO_EFFECT``) or that stays on one
    side of the target over the whole range (``NOT_REACHED``, ``BELOW_RANGE``) is said
    as such rather than searched for.

    Examples
    --------
    >>> from topomodel import load_design
    >>> from topomodel.traffic.layout import Layout
    >>> design, catalog = load_design("examples/hgx-h100-server.yaml")
    >>> server = build_fabric(design, catalog)
    >>> llama = catalog.get("llama3-8b", Model)
    >>> required_scaleout_factor(server, llama, Layout(tp=8),
    ...                          target_share=0.5).outcome  # one server: no scale-out
    'no effect'
    """
    def share(factor: float) -> StepResult:  # bandwidth only: no parts
        return step_time(scale_scaleout(fabric, factor, recable=False), model, layout,
                         assumptions, routing=routing, seed=seed)

    here = share(1.0)
    if not fabric.links["tier"].isin(SCALE_OUT_TIERS).any():
        return ScaleoutSearch(NO_EFFECT, None, here, limit)
    if here.comm_share <= target_share:
        end = share(1.0 / limit)
        if end.comm_share <= target_share:
            moved = not math.isclose(end.comm_share, here.comm_share, rel_tol=1e-9)
            return ScaleoutSearch(BELOW_RANGE if moved else NO_EFFECT, None, end, limit)
        low, high, best = 1.0 / limit, 1.0, here
    else:
        end = share(limit)
        if end.comm_share > target_share:
            moved = not math.isclose(end.comm_share, here.comm_share, rel_tol=1e-9)
            return ScaleoutSearch(NOT_REACHED if moved else NO_EFFECT, None, end, limit)
        low, high, best = 1.0, limit, end
    for _ in range(SEARCH_STEPS_MAX):
        if high <= low * (1 + tolerance):
            break
        middle = math.sqrt(low * high)
        candidate = share(middle)
        if candidate.comm_share <= target_share:
            high, best = middle, candidate
        else:
            low = middle
    return ScaleoutSearch(FOUND, high, best, limit)


@dataclass(frozen=True)
class Sensitivity:
    """One assumption moved down and up: the metric at each end."""

    assumption: str
    low_value: float
    high_value: float
    low: float
    base: float
    high: float

    @property
    def swing(self) -> float:
        """Absolute spread of the metric between the two ends."""
        return abs(self.high - self.low)


Variation = tuple[str, float, float, Callable[[StepAssumptions, float], StepAssumptions]]

VARIATIONS: tuple[Variation, ...] = (
    ("compute_efficiency", 0.45, 0.75,
     lambda a, v: replace(a, compute_efficiency=v)),
    ("hbm_efficiency", 0.7, 0.95, lambda a, v: replace(a, hbm_efficiency=v)),
    ("hot_expert_factor", 1.0, 1.5, lambda a, v: replace(a, hot_expert_factor=v)),
    ("jitter_cv", 0.0, 0.03, lambda a, v: replace(a, jitter_cv=v)),
    ("efficiency scaleup", 0.7, 0.9,
     lambda a, v: replace(a, time=replace(a.time, efficiency={**a.time.efficiency,
                                                              "scaleup": v})),),
    ("efficiency leaf", 0.8, 1.0,
     lambda a, v: replace(a, time=replace(a.time, efficiency={**a.time.efficiency,
                                                              "leaf": v})),),
)
"""Each assumption with a low and a high value spanning what practitioners report or
tune to (assumed ranges, stated so a reader can argue with them)."""


def sensitivity(fabric: Fabric, model: Model, layout: Layout,
                assumptions: StepAssumptions | None = None, *,
                metric: Callable[[StepResult], float] = lambda r: r.comm_share,
                routing: str = "ecmp", seed: int = 0,
                workers: int | None = None) -> list[Sensitivity]:
    """Move each assumption to its low and high value; sorted by swing, largest first.

    The base step runs first, here, so its collective times are on the fabric
    (:func:`~topomodel.analysis.training.stepshape.collective_times`) for every moved step that
    keeps its time model, and its traffic and routes
    (:func:`~topomodel.analysis.collectives.routes.phase_routes`) for every moved step that changes
    only how loads become time (a tier's efficiency): those time the kept loads again
    without routing. The moved steps then run on ``workers`` processes (default every
    core, :func:`~topomodel.parallel.parallel_map`), with the same results as one.
    """
    from topomodel.parallel import parallel_map

    base_assumptions = assumptions or StepAssumptions()

    def run(a: StepAssumptions) -> float:
        return metric(step_time(fabric, model, layout, a, routing=routing, seed=seed))

    base = run(base_assumptions)
    moved = [apply(base_assumptions, v) for _, low, high, apply in VARIATIONS
             for v in (low, high)]
    ends = parallel_map(run, moved, workers=workers)
    rows = [Sensitivity(name, low, high, ends[2 * k], base, ends[2 * k + 1])
            for k, (name, low, high, _) in enumerate(VARIATIONS)]
    return sorted(rows, key=lambda r: -r.swing)
