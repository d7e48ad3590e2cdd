"""Claim checks on a scorecard: does the model agree with a statement such as
``comm_share >= 0.40`` (one design) or ``mfu_ratio >= 2.75`` (the second design's
figure over the first's), and if not, what would have to be true for it to hold?

The search changes one assumption at a time, away from the stated one, over a range
(:data:`SCALEOUT_FACTORS`, :data:`BATCH_FACTORS`, :data:`COMPUTE_EFFICIENCIES`, the EP
overlap, and the layout: the strategy families' best layouts, :func:`layout_distance`)
and reports the value nearest the stated one at which the claim holds: how far the claim
is from the stated assumptions, knob by knob. Only figures of the full-size step are
searched; a claim on any other figure is checked at the stated assumptions alone.

The steps of a search share what their assumption leaves alone, each reuse exact
(tests/analysis/test_capacity_copies.py): a batch or a compute efficiency changes no
collective (the messages are per microbatch and per bucket), so every collective time is
the stated step's (:func:`~topomodel.analysis.training.stepshape.collective_times`); a
scale-out bandwidth changes the link rates alone, so its fabric is a copy that times the
routes of the stated step again (:meth:`~topomodel.fabric.tables.Fabric.with_capacities`).
"""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from topomodel.errors import UsageError

if TYPE_CHECKING:
    from topomodel.analysis.training.step import StepResult
    from topomodel.fabric.tables import Fabric
    from topomodel.report.review.scorecard import Scorecard, ScorecardJob
    from topomodel.traffic.layout import Layout

OPERATORS: dict[str, Callable[[float, float], bool]] = {
    ">=": operator.ge, "<=": operator.le, ">": operator.gt, "<": operator.lt}

STEP_KEYS: dict[str, Callable[[StepResult], float]] = {
    "tokens_per_s": lambda r: r.tokens_per_s,
    "step_time_s": lambda r: r.step_time_s,
    "mfu": lambda r: r.mfu,
    "comm_share": lambda r: r.comm_share,
    "exposed_comm_share": lambda r: r.exposed_comm_s / r.step_time_s,
    "wait_share": lambda r: r.wait_s / r.step_time_s,
    "bubble_share": lambda r: r.bubble_s / r.step_time_s,
}
"""The scorecard figures a claim search re-computes, from the full-size step."""

SCALEOUT_FACTORS = (1 / 8, 1 / 4, 1 / 2, 2.0, 4.0, 8.0)
BATCH_FACTORS = (1 / 8, 1 / 4, 1 / 2, 2.0, 4.0, 8.0)
COMPUTE_EFFICIENCIES = (0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)
"""The ranges searched: scale-out bandwidth and global batch from an eighth to eight
times the stated (three doublings each way: beyond them a design or a job is a different
one), a flat compute efficiency over what measured GEMMs span (0.2-0.9 of peak)."""


@dataclass(frozen=True)
class Claim:
    """``key op value``; ``ratio``: the key is ``KEY_ratio``, the second design's figure
    over the first's."""

    key: str
    op: str
    value: float
    ratio: bool

    @property
    def text(self) -> str:
        return f"{self.key}{'_ratio' if self.ratio else ''} {self.op} {self.value:g}"


def parse_claim(text: str) -> Claim:
    """A claim from its text.

    Examples
    --------
    >>> parse_claim("comm_share >= 0.40")
    Claim(key='comm_share', op='>=', value=0.4, ratio=False)
    >>> parse_claim("mfu_ratio>=2.75").ratio
    True
    >>> parse_claim("mfu is big")
    Traceback (most recent call last):
    ...
    topomodel.errors.UsageError: --claim 'mfu is big': write KEY OP NUMBER, e.g. \
'comm_share >= 0.40' or 'mfu_ratio >= 2.75' (OP one of >=, <=, >, <)
    """
    found = re.fullmatch(r"\s*([A-Za-z0-9_.-]+)\s*(>=|<=|>|<)\s*([-+0-9.eE]+)\s*", text)
    try:
        number = float(found.group(3)) if found else None
    except ValueError:
        number = None
    if found is None or number is None:
        raise UsageError(f"--claim {text!r}: write KEY OP NUMBER, e.g. 'comm_share >= 0.40'"
                         " or 'mfu_ratio >= 2.75' (OP one of >=, <=, >, <)")
    key = found.group(1)
    ratio = key.endswith("_ratio")
    return Claim(key.removesuffix("_ratio") if ratio else key, found.group(2), number, ratio)


@dataclass(frozen=True)
class KnobResult:
    """One assumption searched: the value nearest the stated one where the claim holds
    (None: not within the range) and the figure there; ``note``: why it was not searched."""

    knob: str
    stated: str
    holds_at: str | None
    figure: float | None
    note: str = ""


LAYOUT_DEGREES = ("tp", "pp", "dp", "cp", "ep")


def layout_distance(stated: Layout, other: Layout) -> float:
    """How far ``other`` is from ``stated``: the doublings and halvings of TP, PP, DP, CP
    and EP that turn one into the other, summed (the planner's layouts differ by powers
    of two, mostly; a factor of three counts log2 3).

    Examples
    --------
    >>> from topomodel.traffic.layout import Layout
    >>> layout_distance(Layout(tp=8, pp=4, dp=32), Layout(tp=8, pp=1, dp=128))
    4.0
    """
    return float(sum(abs(math.log2(getattr(other, f) / getattr(stated, f)))
                     for f in LAYOUT_DEGREES))


def layout_words(layout: Layout) -> str:
    """A layout's degrees in words (``TP 8 x PP 1 x DP 128``, CP and EP where above 1)."""
    return (f"TP {layout.tp} x PP {layout.pp} x DP {layout.dp}"
            + (f" x CP {layout.cp}" if layout.cp > 1 else "")
            + (f", EP {layout.ep}" if layout.ep > 1 else ""))


@dataclass(frozen=True)
class ClaimCheck:
    claim: Claim
    figure: float  # at the stated assumptions
    holds: bool
    knobs: tuple[KnobResult, ...]  # empty where the claim holds or is not searchable
    note: str = ""


def _figure(cards: Sequence[Scorecard], claim: Claim) -> float:
    if claim.ratio and len(cards) != 2:
        raise UsageError(f"--claim {claim.text}: a ratio compares two designs; give"
                         " --compare DESIGN_B")
    try:
        values = [c.value(claim.key) for c in cards]
    except KeyError:
        keys = ", ".join(f.key for f in cards[0].figures if f.part in ("step", "strategies"))
        raise UsageError(f"--claim {claim.text}: no figure {claim.key!r} in the scorecard"
                         f" (figures include {keys})") from None
    if any(v is None for v in values):
        raise UsageError(f"--claim {claim.text}: the figure has no value on every design")
    a = float(values[0])  # type: ignore[arg-type]
    return float(values[1]) / a if claim.ratio else a  # type: ignore[arg-type]


Variant = Callable[["Fabric", "ScorecardJob", Any], tuple["Fabric", "ScorecardJob"]]
Knob = tuple[str, str, Sequence[Any], Variant, Callable[[Any], str]]


def _layout(job: ScorecardJob) -> Layout:
    """The job's layout: :func:`check_claim` gives every job its card's."""
    assert job.layout is not None
    return job.layout


def _knobs(job: ScorecardJob) -> list[Knob]:
    """(name, stated value in words, values nearest first, how a value changes a
    fabric and job, the value in words) of every assumption a claim search moves."""
    from topomodel.analysis.training.studies import scale_scaleout

    def batch(fabric: Fabric, j: ScorecardJob, f: float) -> tuple[Fabric, ScorecardJob]:
        layout = _layout(j)
        size = max(layout.dp, round(layout.global_batch * f / layout.dp) * layout.dp)
        return fabric, replace(j, layout=replace(layout, global_batch=size))

    def nearest(values: Sequence[float]) -> list[float]:
        return sorted(values, key=lambda v: abs(v - 1) if v >= 1 else abs(1 / v - 1))

    stated_eff = job.assumptions.compute_efficiency
    return [
        ("scale-out bandwidth", "as designed", nearest(SCALEOUT_FACTORS),
         lambda fab, j, f: (scale_scaleout(fab, f, recable=False), j), lambda f: f"{f:g}x"),
        ("global batch", "as stated", nearest(BATCH_FACTORS), batch, lambda f: f"{f:g}x"),
        ("compute efficiency",
         "the measured GEMM curve" if stated_eff is None else f"{stated_eff:g}",
         sorted(COMPUTE_EFFICIENCIES, key=lambda e: abs(e - (stated_eff or 0.55))),
         lambda fab, j, e: (fab, replace(j, assumptions=replace(
             j.assumptions, compute_efficiency=e))), lambda e: f"{e:g}"),
        ("EP all-to-all overlap", "as stated", ["none", "dualpipe"],
         lambda fab, j, v: (fab, replace(j, layout=replace(_layout(j), ep_overlap=v))),
         str),
    ]


def _layout_knob(stated: Layout, cards: Sequence[Scorecard]) -> Knob:
    """The layout as an assumption: the best layout of each strategy family the first
    card's strategies part found (the planner's best among them), nearest the stated
    layout first (:func:`layout_distance`), each with the planner's batch, on every
    design."""
    candidates: list[Layout] = []
    for result in cards[0].strategy_steps:
        layout = replace(result.layout, global_batch=result.global_batch)
        if layout != stated and layout not in candidates:
            candidates.append(layout)
    candidates.sort(key=lambda layout: layout_distance(stated, layout))

    def words(layout: Layout) -> str:
        return (f"{layout_words(layout)} ({layout_distance(stated, layout):.3g} doublings"
                " from the stated)")

    return ("layout", layout_words(stated), candidates,
            lambda fab, j, layout: (fab, replace(j, layout=layout)), words)


def check_claim(fabrics: Sequence[Fabric], jobs: Sequence[ScorecardJob],
                cards: Sequence[Scorecard], claim: Claim) -> ClaimCheck:
    """Whether ``claim`` holds on the scorecards ``cards`` (of ``jobs`` on ``fabrics``)
    and, where it does not, the nearest value of each assumption at which it would, each
    at the full-size layout its card ran at; the layout itself is searched among the
    strategy families' best layouts (:func:`_layout_knob`) where the strategies part
    ran."""
    from topomodel.analysis.training.step import step_time

    figure = _figure(cards, claim)
    test = OPERATORS[claim.op]
    jobs = [replace(j, layout=replace(c.step.layout, global_batch=c.step.global_batch))
            for j, c in zip(jobs, cards, strict=True) if c.step is not None]
    if test(figure, claim.value):
        return ClaimCheck(claim, figure, True, ())
    if claim.key not in STEP_KEYS:
        return ClaimCheck(claim, figure, False, (), f"{claim.key} is not searched: only"
                          f" the step's figures are ({', '.join(STEP_KEYS)})")
    read = STEP_KEYS[claim.key]

    def value_at(pairs: Sequence[tuple[Fabric, ScorecardJob]]) -> float:
        got = [read(step_time(f, j.model, _layout(j), j.assumptions, routing=j.routing,
                              seed=j.seed)) for f, j in pairs]
        return got[1] / got[0] if claim.ratio else got[0]

    knobs = []
    searched = _knobs(jobs[0])
    if cards[0].strategy_steps:
        searched.append(_layout_knob(_layout(jobs[0]), cards))
    for name, stated, values, variant, words in searched:
        holds_at, there = None, None
        for v in values:
            try:
                at = value_at([variant(f, j, v) for f, j in zip(fabrics, jobs, strict=True)])
            except UsageError:
                continue  # the variant is not a valid job (a batch below DP): skip it
            if test(at, claim.value):
                holds_at, there = words(v), at
                break
        knobs.append(KnobResult(name, stated, holds_at, there))
    if not cards[0].strategy_steps:
        knobs.append(KnobResult("layout", layout_words(_layout(jobs[0])), None, None,
                                "not searched: the strategies part, whose best layouts"
                                " it tries, did not run"))
    return ClaimCheck(claim, figure, False, tuple(knobs))


def claim_rows(check: ClaimCheck) -> list[dict[str, Any]]:
    """The claim check as table rows: the claim at the stated assumptions, then each
    assumption searched."""
    verdict = "holds" if check.holds else "does not hold"
    rows = [{"claim": check.claim.text, "assumption": "stated",
             "value": "all as stated", "figure": f"{check.figure:.4g}", "verdict": verdict}]
    for k in check.knobs:
        if k.note:
            rows.append({"claim": check.claim.text, "assumption": k.knob, "value": k.note,
                         "figure": "-", "verdict": f"not searched (stated: {k.stated})"})
            continue
        rows.append({"claim": check.claim.text, "assumption": k.knob,
                     "value": k.holds_at or f"not within the range searched (stated:"
                                            f" {k.stated})",
                     "figure": "-" if k.figure is None else f"{k.figure:.4g}",
                     "verdict": f"holds at {k.holds_at} (stated: {k.stated})"
                                if k.holds_at else "cannot make it hold"})
    if check.note:
        rows.append({"claim": check.claim.text, "assumption": "-", "value": "-",
                     "figure": "-", "verdict": check.note})
    return rows
