"""The communication scorecard: the fixed list of figures a cluster design should publish
(throughput, scaling, the step's split, the four collectives with their tail, each level
of the network, MFU per parallel strategy, expert imbalance, failures), each with where
it came from.

Every figure carries its ``origin``: ``modelled`` (the step and collective models, with
the assumption set named in ``basis``), ``published`` (a catalog figure, ``basis`` its
source) or ``measured`` (a catalog figure whose entry a calibration overlay supplied,
``basis`` the file). Where no layout is given, each size and each strategy family runs at
the planner's best layout for it (:func:`~topomodel.plan.search.plan`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from topomodel.plan.search import PlanJob, plan
from topomodel.plan.space import PlanSpace
from topomodel.plan.tally import Tally, over_limit_text
from topomodel.vocabulary import SCORECARD_PARTS

if TYPE_CHECKING:
    from topomodel.analysis.reliability.goodput import GoodputAssumptions
    from topomodel.analysis.training.step import StepAssumptions, StepResult
    from topomodel.fabric.tables import Fabric
    from topomodel.inputs.parts import Model
    from topomodel.traffic.layout import Layout

SCALING_SIZES = (128, 1024, 4096)
"""Job sizes (accelerators) the scaling-efficiency rows run at, besides the design's full
size: the sizes practitioners ask published scorecards for (issue #43), from one server
pod through a large cluster."""

COLLECTIVE_SIZES_BYTES = (1 << 20, 64 << 20, 1 << 30)
"""Message sizes the collective rows run at, bytes: 1 MiB (latency-bound on every
fabric), 64 MiB (the middle of nccl-tests' usual sweep, about a gradient bucket) and
1 GiB (bandwidth-bound: nccl-tests' busbw plateau)."""

TAIL_SEEDS = 4
"""Hash-routing seeds each collective runs with: the mean is over them, the tail their
slowest. Four draws of the ECMP hash show whether flows collide (a flow-level model has no
other source of tail: queueing below a round trip is not modelled). Where the routing
reads no seed (the even split, d-mod-k: :func:`~topomodel.routing.policy.seed_matters`)
one seed runs: every seed gives the same figures, so mean and tail are equal."""

IMBALANCE_SHARES = (0.0, 0.1, 0.25, 0.5)
"""Hot-expert imbalance the MoE rows run at: the busiest expert's load above the mean
(0.5: 1.5x), the step's ``hot_expert_factor`` minus one; 0-50 % as issue #43 asks."""

ORIGINS = ("modelled", "measured", "published")

PARTS = SCORECARD_PARTS
"""The scorecard's parts, in order; the step's is always there (the others read it). The
planner runs for ``strategies`` and, without a given layout, for ``scaling`` and the step:
at 100k accelerators those are most of the time."""


@dataclass(frozen=True)
class Figure:
    """One row of the scorecard: ``value`` in ``unit`` (None: does not apply or no layout
    fits), its ``origin`` (:data:`ORIGINS`) and ``basis`` (the assumption set, the
    source, or the measured file); ``key`` names it for ``--claim``."""

    part: str
    item: str
    key: str
    value: float | None
    unit: str
    origin: str
    basis: str
    note: str = ""


@dataclass(frozen=True)
class Scorecard:
    """The scorecard of one design and model."""

    design: str
    model: str
    accelerators: int
    layout: str  # the full-size layout the step rows ran at
    assumptions: str  # the assumption set every modelled figure names
    figures: tuple[Figure, ...]
    step: StepResult | None = field(default=None, repr=False, compare=False)  # full size
    # the best step of each strategy family (the strategies part), for the claim search
    strategy_steps: tuple[StepResult, ...] = field(default=(), repr=False, compare=False)

    def value(self, key: str) -> float | None:
        """The value of the figure named ``key`` (KeyError if there is none)."""
        for f in self.figures:
            if f.key == key:
                return f.value
        raise KeyError(key)


@dataclass(frozen=True)
class ScorecardJob:
    """What the scorecard runs: the model, the layout (None: the planner's best at each
    size), the step assumptions, routing and the goodput assumptions."""

    model: Model
    assumptions: StepAssumptions
    layout: Layout | None = None
    base: Layout | None = None  # the fields a plan does not search (batch, software)
    space: PlanSpace = field(default_factory=PlanSpace)
    routing: str = "ecmp"
    seed: int = 0
    goodput: GoodputAssumptions | None = None
    scaling_sizes: tuple[int, ...] = SCALING_SIZES
    collective_sizes_bytes: tuple[float, ...] = COLLECTIVE_SIZES_BYTES
    parts: tuple[str, ...] = PARTS


def _plan_job(job: ScorecardJob, accelerators: int = 0, space: PlanSpace | None = None
              ) -> PlanJob:
    """The plan the scorecard runs for ``job.model`` on ``accelerators`` (0: all) within
    ``space`` (None: the job's): the best layout alone."""
    from topomodel.traffic.layout import Layout

    return PlanJob(job.model, job.base or Layout(), space or job.space, job.assumptions,
                   top=1, routing=job.routing, seed=job.seed, accelerators=accelerators)


def _outcome(best: Sequence[StepResult], tally: Tally) -> tuple[StepResult | None, str]:
    """A plan's best step (None where no layout is valid and fits) and its sentence on
    the layouts it skipped above the router's limit (empty when none: the best is the
    best below it, :mod:`topomodel.plan.tally`)."""
    return (best[0] if best else None), over_limit_text(tally)


def _best(fabric: Fabric, job: ScorecardJob, *, accelerators: int = 0,
          space: PlanSpace | None = None) -> tuple[StepResult | None, str]:
    """The planner's best step of ``job.model`` on ``accelerators`` (0: all) within
    ``space``, or None where no layout is valid and fits; and the plan's sentence on
    the layouts it skipped (:func:`_outcome`)."""
    found = plan(fabric, _plan_job(job, accelerators, space))
    return _outcome(found.best, found.tally)


def _bests(fabric: Fabric, job: ScorecardJob, spaces: dict[str, PlanSpace]
           ) -> tuple[tuple[StepResult | None, str], dict[str, tuple[StepResult | None, str]]]:
    """The full-size best (as :func:`_best`) and, from the same search, that of each of
    ``spaces`` (by key) inside the job's space (:func:`~topomodel.plan.tops.
    space_family`: a family's own plan finds the same best, ties and all); a space not
    inside it is left out (its own plan is needed)."""
    from topomodel.plan.tops import space_family

    families = [f for key, space in spaces.items()
                if (f := space_family(key, space, job.space)) is not None]
    found = plan(fabric, _plan_job(job), families=families)
    return (_outcome(found.best, found.tally),
            {f.name: _outcome(f.best, f.tally) for f in found.families})


def _noted(text: str, skipped: str) -> str:
    """A figure's note with the plan's skipped layouts, when there were any."""
    return f"{text}; {skipped}" if skipped else text


def _step(fabric: Fabric, job: ScorecardJob, layout: Layout,
          assumptions: StepAssumptions | None = None) -> StepResult:
    from topomodel.analysis.training.step import step_time

    return step_time(fabric, job.model, layout, assumptions or job.assumptions,
                     routing=job.routing, seed=job.seed)


def _catalog_origin(fabric: Fabric, ident: str | None, key: str | None = None
                    ) -> tuple[str, str]:
    """(origin, basis) of a catalog entry's figures (of its figure ``key`` when given):
    ``measured`` with its file where a measurement supplied it (a calibration overlay's
    figure, ``KEY: measured (FILES)`` in the entry's source, with the overlay's file and
    the measurement files; or a whole entry of provenance ``measured``, as a topology
    dump's system and NIC), else ``published`` with its source."""
    if not ident or ident not in fabric.catalog.entries:
        return "modelled", "the built fabric"
    entry = fabric.catalog.entries[ident]
    measured_in = entry.measured_from(key) if key else None
    if measured_in is not None:
        return "measured", f"{entry.file} ({key} measured in {measured_in})"
    if entry.provenance == "measured":
        return "measured", str(entry.file)
    return "published", f"{ident}: {entry.source}"


def scorecard(fabric: Fabric, job: ScorecardJob, *,
              progress: Callable[[str], None] | None = None) -> Scorecard:
    """The scorecard of ``job`` on ``fabric`` (module docstring): the parts of
    :data:`PARTS` that ``job.parts`` names (the step's always)."""
    say = progress or (lambda _: None)
    unknown = sorted(set(job.parts) - set(PARTS))
    if unknown:
        from topomodel.errors import ParameterError

        raise ParameterError("parts", f"{unknown[0]} is not a part; choose from"
                                      f" {', '.join(PARTS)}")
    planned = job.layout is None or "strategies" in job.parts
    family_bests: dict[str, tuple[StepResult | None, str]] = {}
    best, skipped = None, ""
    if planned:
        say("the best layout at full size")
        (best, skipped), family_bests = _bests(
            fabric, job, _strategy_spaces(job) if "strategies" in job.parts else {})
    full = _step(fabric, job, job.layout) if job.layout is not None else best
    if full is None:
        from topomodel.errors import UsageError

        raise UsageError(f"{job.model.id}: no layout of all {fabric.accelerator_count:,}"
                         " accelerators is valid and fits" + (f" ({skipped})" if skipped
                                                             else "")
                         + ": give a layout or a smaller model")
    basis = assumption_set(full.layout, job.assumptions)
    figures = _step_figures(full, basis, job.assumptions.compute_dtype)
    strategy_steps: list[StepResult] = []
    runs: dict[str, Callable[[], list[Figure]]] = {
        "scaling": lambda: _scaling_figures(fabric, job, full, (best, skipped), basis),
        "collectives": lambda: _collective_figures(fabric, job, basis),
        "levels": lambda: _level_figures(fabric, job),
        "strategies": lambda: _strategy_figures(fabric, job, (best, skipped),
                                                family_bests, basis, strategy_steps),
        "imbalance": lambda: _imbalance_figures(fabric, job, full, basis)
        if job.model.is_moe else [],
        "failures": lambda: _reliability_figures(fabric, job, full),
    }
    for part in PARTS[1:]:
        if part in job.parts:
            say(part)
            figures += runs[part]()
    return Scorecard(fabric.design.name or fabric.design.file, job.model.id,
                     fabric.accelerator_count, layout_text(full), basis,
                     tuple(figures), full, tuple(strategy_steps))


def assumption_set(layout: Layout, assumptions: StepAssumptions) -> str:
    """The short name of what modelled figures assumed: the software preset, then every
    switch set apart from it and every step assumption away from its default.

    Examples
    --------
    >>> from topomodel.analysis.assumptions import StepAssumptions
    >>> from topomodel.traffic.layout import Layout
    >>> assumption_set(Layout(zero=0), StepAssumptions(jitter_cv=0.02))
    'mcore-2024; zero 0; jitter_cv 0.02'
    """
    from dataclasses import fields

    from topomodel.analysis.options import OPTIONS, software_departures
    from topomodel.inputs.software import resolved

    apart = dict(software_departures(layout, assumptions))
    preset = {OPTIONS[key].target for key in resolved(layout.software, {})}
    default = type(assumptions)()
    for f in fields(assumptions):
        value = getattr(assumptions, f.name)
        if f"assumptions.{f.name}" not in preset and value != getattr(default, f.name):
            apart[f.name] = value
    return "; ".join([layout.software, *(f"{k} {v:g}" if isinstance(v, float) else f"{k} {v}"
                                         for k, v in apart.items())])


def layout_text(result: StepResult) -> str:
    """A step's layout in words: its degrees and global batch."""
    layout = result.layout
    return (f"TP {layout.tp} x PP {layout.pp} x DP {layout.dp}"
            + (f" x CP {layout.cp}" if layout.cp > 1 else "")
            + (f", EP {layout.ep}" if layout.ep > 1 else "")
            + f", global batch {result.global_batch:,}")


def _step_figures(full: StepResult, basis: str, precision: str) -> list[Figure]:
    step = full.step_time_s
    row = [(f"tokens per second ({precision} matmuls)", "tokens_per_s", full.tokens_per_s,
            "tokens/s"),
           ("step time", "step_time_s", step, "s"),
           ("MFU", "mfu", full.mfu, "share"),
           ("compute share of the step", "compute_share",
            (full.compute_s + full.imbalance_s) / step, "share"),
           ("pipeline bubble share", "bubble_share", full.bubble_s / step, "share"),
           ("exposed communication share", "exposed_comm_share", full.exposed_comm_s / step,
            "share"),
           ("wait share (jitter, stragglers)", "wait_share", full.wait_s / step, "share"),
           ("communication and wait share", "comm_share", full.comm_share, "share")]
    return [Figure("step", item, key, value, unit, "modelled", basis)
            for item, key, value, unit in row]


def _scaling_figures(fabric: Fabric, job: ScorecardJob, full: StepResult,
                     best: tuple[StepResult | None, str], basis: str) -> list[Figure]:
    """Tokens/s per accelerator at each size, as a share of the smallest size's that has
    a layout: with a given layout, its TP, PP, CP and EP at every size with DP (and the
    batch per replica) scaled, as Megatron reports weak scaling; else each size at its own
    best layout (``best`` at full size)."""
    world = fabric.accelerator_count
    sizes = [n for n in job.scaling_sizes if n < world] + [world]
    per_acc: dict[int, float | None] = {}
    layouts: dict[int, str] = {}
    for n in sizes:
        skipped = ""
        if n == world:
            result, skipped = (full, "") if job.layout is not None else best
        elif job.layout is not None:
            result = _scaled_step(fabric, job, job.layout, n, full)
        else:
            result, skipped = _best(fabric, job, accelerators=n)
        per_acc[n] = None if result is None else result.tokens_per_s / result.layout.world
        layouts[n] = _noted("no layout of this size fits" if result is None
                            else layout_text(result), skipped)
    base = next((n for n in sizes if per_acc[n]), None)
    out = []
    for n in sizes:
        rate = per_acc[n]
        value = None if rate is None or base is None else rate / per_acc[base]  # type: ignore[operator]
        out.append(Figure("scaling", f"scaling efficiency at {n:,} accelerators",
                          f"scaling_{n}", value, "share", "modelled", basis, layouts[n]))
    return out


def _scaled_step(fabric: Fabric, job: ScorecardJob, layout: Layout, accelerators: int,
                 full: StepResult) -> StepResult | None:
    """The step of ``layout`` with DP scaled to ``accelerators`` and the same sequences
    per DP replica as ``full``; None where the size is not whole replicas, EP does not
    divide the DP, or the layout does not fit."""
    from topomodel.errors import UsageError

    replica = layout.tp * layout.pp * layout.cp
    dp = accelerators // replica
    if accelerators % replica or dp < 1 or dp % layout.ep:
        return None
    try:
        result = _step(fabric, job, replace(
            layout, dp=dp, global_batch=full.global_batch // full.layout.dp * dp))
    except UsageError:
        return None
    return result if result.fits else None


def _collective_figures(fabric: Fabric, job: ScorecardJob, basis: str) -> list[Figure]:
    """Busbw of the four collectives at three sizes on the design's natural groups: the
    mean over :data:`TAIL_SEEDS` hash seeds and the slowest (the tail), and the latency
    term."""
    from topomodel.report.review.collect import (
        group_pieces,
        measured_runs,
        plan_collectives,
    )
    from topomodel.report.review.document import size_text
    from topomodel.routing.policy import seed_matters

    planned = plan_collectives(fabric, job.collective_sizes_bytes)
    seeds = range(job.seed, job.seed + (TAIL_SEEDS if seed_matters(fabric, job.routing)
                                        else 1))
    runs = [[row for piece in group_pieces(planned.runs)
             for row in measured_runs(fabric, job.assumptions.time, job.routing, s, piece)]
            for s in seeds]
    out = []
    for k, (spec, _, ranks, _, collective, _, size) in enumerate(planned.runs):
        rows = [row for r in runs if (row := r[k]) is not None]
        if not rows:
            continue
        where = f"{collective} {size_text(size)} on {spec} ({ranks} ranks)"
        key = f"{collective}_{spec}_{int(size)}"
        mean = sum(r["busbw_Bps"] for r in rows) / len(rows)
        slowest = min(r["busbw_Bps"] for r in rows)
        out += [Figure("collectives", where + ": busbw, mean", f"{key}_busbw_Bps", mean,
                       "B/s", "modelled", basis, rows[0]["algorithm"]),
                Figure("collectives", where + ": busbw, tail (slowest seed)",
                       f"{key}_busbw_tail_Bps", slowest, "B/s", "modelled", basis),
                Figure("collectives", where + ": latency term", f"{key}_latency_s",
                       rows[0]["latency_s"], "s", "modelled", basis)]
    return out


def _level_figures(fabric: Fabric, job: ScorecardJob) -> list[Figure]:
    """Bandwidth per accelerator and one crossing's latency at each level of the
    network (:func:`~topomodel.analysis.levels.network_levels`)."""
    from topomodel.analysis.levels import network_levels

    s = fabric.structure
    out = []
    for level in network_levels(fabric, job.assumptions.time):
        ident = s.scaleup.link if level.network == "scale-up" else s.scaleout.nic
        origin, basis = _catalog_origin(fabric, ident)
        reach = f"{level.name} (reach {level.reach:,})"
        below = (f"per direction; {level.oversubscription:g}:1 below"
                 if level.oversubscription != 1 else "per direction")
        rate_origin, rate_basis = _catalog_origin(fabric, ident, "efficiency")
        if rate_origin == "published" and getattr(fabric.catalog.entries[ident],
                                                  "efficiency", None) is None:
            rate_origin, rate_basis = "modelled", "the network transport's packet efficiency"
        out += [Figure("levels", f"{reach}: bandwidth per accelerator",
                       f"level_{level.name}_Bps", level.injection_Bps, "B/s", origin,
                       basis, below),
                Figure("levels", f"{reach}: effective bandwidth per accelerator",
                       f"level_{level.name}_effective_Bps",
                       level.injection_Bps * level.efficiency, "B/s", rate_origin,
                       rate_basis, f"{below}; at efficiency {level.efficiency:.3g} (the"
                       " slowest tier crossed)"),
                Figure("levels", f"{reach}: latency of one crossing",
                       f"level_{level.name}_latency_s", level.latency_s, "s", "modelled",
                       "switch latencies and propagation from the catalog")]
    return out


def _families(model: Model) -> list[tuple[str, str, PlanSpace | None]]:
    """(name, key, space) of each parallel-strategy family the MFU rows compare; the
    last family's space is the whole of the job's (None: its best is the plan's)."""
    out: list[tuple[str, str, PlanSpace | None]] = [
        ("data parallel (ZeRO) only", "dp", PlanSpace(max_tp=1, max_pp=1, max_cp=1,
                                                      max_ep=1))]
    if model.is_moe:
        out += [("TP + PP, no EP", "tp_pp", PlanSpace(max_ep=1)),
                ("TP + PP + EP", "tp_pp_ep", None)]
    else:
        out.append(("TP + PP", "tp_pp", None))
    return out


def _strategy_spaces(job: ScorecardJob) -> dict[str, PlanSpace]:
    """The space of each strategy family but the whole (by key): the family's limits
    on the degrees, the job's fixed fields, micro-batch and interleave limits."""
    return {key: replace(family, fixed=job.space.fixed,
                         max_micro_batch=job.space.max_micro_batch,
                         max_interleave=job.space.max_interleave)
            for _, key, family in _families(job.model) if family is not None}


def _strategy_figures(fabric: Fabric, job: ScorecardJob,
                      best_of_all: tuple[StepResult | None, str],
                      family_bests: dict[str, tuple[StepResult | None, str]], basis: str,
                      steps: list[StepResult]) -> list[Figure]:
    """MFU of each family's best layout (``best_of_all``: the whole space's, and
    ``family_bests`` those found in the same search, from :func:`_bests`; a family not
    among them gets its own plan); the bests go to ``steps`` too."""
    out = []
    spaces = _strategy_spaces(job)
    for name, key, family in _families(job.model):
        best, skipped = best_of_all
        if family is not None:
            best, skipped = (family_bests[key] if key in family_bests
                             else _best(fabric, job, space=spaces[key]))
        if best is not None:
            steps.append(best)
        out.append(Figure("strategies", f"MFU, best {name} layout", f"mfu_{key}",
                          None if best is None else best.mfu, "share", "modelled", basis,
                          _noted("no layout fits" if best is None else layout_text(best),
                                 skipped)))
    return out


def _imbalance_figures(fabric: Fabric, job: ScorecardJob, full: StepResult, basis: str
                       ) -> list[Figure]:
    out = []
    for share in IMBALANCE_SHARES:
        assumptions = replace(job.assumptions, hot_expert_factor=1.0 + share)
        result = _step(fabric, job, full.layout, assumptions)
        out.append(Figure("expert imbalance", f"MFU with the hottest expert"
                          f" {share:.0%} above the mean", f"mfu_imbalance_{round(share * 100)}",
                          result.mfu, "share", "modelled", basis))
    return out


def _reliability_figures(fabric: Fabric, job: ScorecardJob, full: StepResult
                         ) -> list[Figure]:
    from topomodel.analysis.reliability.goodput import GoodputAssumptions, job_goodput

    g = job_goodput(fabric, job.model, full.layout, job.assumptions, full,
                    job.goodput or GoodputAssumptions(), routing=job.routing,
                    seed=job.seed, workers=1)
    basis = "catalog failure rates (reliability.yaml) and the goodput assumptions"
    rows = [("interruptions per day", "interruptions_per_day", g.interruptions_per_day,
             "per day"),
            ("recovery time per interruption", "recovery_s", g.downtime_per_interruption_s,
             "s"),
            ("effective training time", "effective_time", g.effective_time_fraction,
             "share"),
            ("goodput tokens per second", "goodput_tokens_per_s", g.goodput_tokens_per_s,
             "tokens/s")]
    return [Figure("failures", item, key, value, unit, "modelled", basis)
            for item, key, value, unit in rows]


def figure_rows(cards: Sequence[Scorecard]) -> list[dict[str, Any]]:
    """One row per figure (of any card, in order of first appearance), a value column per
    card (headed by its design, numbered where two share a name) and, for two cards,
    their ratio (second / first); the origin and basis of the first card that has it."""
    heads = [c.design if [d.design for d in cards].count(c.design) == 1
             else f"{c.design} ({k + 1})" for k, c in enumerate(cards)]
    by_key = [{f.key: f for f in c.figures} for c in cards]
    order = list(dict.fromkeys(f.key for c in cards for f in c.figures))
    out = []
    for key in order:
        f = next(found[key] for found in by_key if key in found)
        row: dict[str, Any] = {"part": f.part, "item": f.item, "key": key, "unit": f.unit}
        values = [found[key].value if key in found else None for found in by_key]
        row.update(zip(heads, values, strict=True))
        if len(cards) == 2:
            a, b = values
            row["ratio"] = b / a if a and b is not None else None
        row.update(origin=f.origin, basis=f.basis, note=f.note)
        out.append(row)
    return out
