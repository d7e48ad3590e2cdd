"""The review's sections as one type, and the one pool that runs their work.

A :class:`ReviewSection` says what work it needs (:class:`Work`, each piece named) and
how it builds itself (a :class:`Part` of the review) from the results of that work,
handed to it by name. :func:`run_work` runs the union of every section's work: a piece
that several sections name (the build report, the step, the featured collective, a
step with a part failed) runs once, on one pool of worker processes
(:func:`~topomodel.parallel.parallel_map_then`):

- work with no ``needs`` runs first, those that planned work reads (through work done
  ``here``) ahead of the others;
- work with ``needs`` is planned as soon as what it needs is in, and starts ahead of
  everything not started yet, in the same workers;
- work done ``here`` (cheap, or a pool of its own) runs in this process once what it
  needs is in;
- the first ``warm`` work runs in this process before all of them (a step with a part
  failed: the router sections it keeps are then every worker's, not routed in each).

Within each of these, higher ``rank`` starts first (the longest pieces), then the order
in which the sections name the work.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from topomodel.fabric.tables import Fabric
from topomodel.report.output import Table
from topomodel.report.review.document import ReviewFigure, Section

if TYPE_CHECKING:
    from topomodel.analysis.assumptions import CostAssumptions
    from topomodel.analysis.collectives.timing import TimeModel
    from topomodel.analysis.reliability.goodput import GoodputAssumptions
    from topomodel.analysis.training.step import StepAssumptions
    from topomodel.inputs.parts import Model
    from topomodel.traffic.layout import Layout

Results = Mapping[str, Any]
"""Results of work, by the name of the work."""


@dataclass(frozen=True)
class ReviewContext:
    """What the review knows before any work runs: its inputs and the parts it fails.

    ``what_if_parts`` are the single-failure what-ifs' parts (the NIC's first, the
    longest), ``goodput_parts`` the parts the goodput section steps with one failed
    (one per redundant tier, where its degraded steps are routed), ``step_parts`` every
    part whose step with it failed runs (both, with a model; each once).
    """

    fabric: Fabric
    model: Model | None
    layout: Layout | None
    assumptions: StepAssumptions
    timing: TimeModel
    routing: str
    seed: int
    sizes_bytes: Sequence[float] | None
    failed: Sequence[str]
    goodput_assumptions: GoodputAssumptions | None
    workers: int | None
    lines: Any  # the job's component lines (analysis.goodput.component_lines), or None
    what_if_parts: tuple[str, ...] = ()
    goodput_parts: tuple[str, ...] = ()
    step_parts: tuple[str, ...] = ()
    cost_assumptions: CostAssumptions | None = None  # the cost section's; None: defaults
    goodput: bool = True  # False: no goodput section, nor its failed-part steps
    serving: Any = None  # a ServingJob (review --serve) for the serving section, or None

    @property
    def has_model(self) -> bool:
        """Whether the review has a model and its layout (a step to run)."""
        return self.model is not None and self.layout is not None

    @property
    def name(self) -> str:
        """The design's name, else its file."""
        return self.fabric.design.name or self.fabric.design.file


@dataclass(frozen=True)
class Work:
    """A named piece of the review's work.

    ``run`` gets the results of ``needs`` by name (nothing else). Work with ``needs`` is
    planned once they are in; they must be work with none, or work done ``here`` on
    such. ``here``: run in the review's process after what it needs (the table from its
    runs, the warnings, the goodput with its own pool); ``rank``: higher starts first
    among the work of its stage; ``warm``: run in the review's process before the
    workers fork, so that they start from what it built (the first of them, with no
    needs). Sections that name the same work name one piece: the first definition runs.
    """

    name: str
    run: Callable[[Results], Any]
    needs: tuple[str, ...] = ()
    here: bool = False
    rank: int = 0
    warm: bool = False


@dataclass(frozen=True)
class Part:
    """What one section adds to the review: its section of the document (None where
    it has nothing to show in this review), its keys of report.json, its figures, its
    tables with plain records (``--format csv``), headline rows and warnings."""

    section: Section | None = None
    data: dict[str, Any] = field(default_factory=dict)
    figures: dict[str, ReviewFigure] = field(default_factory=dict)
    tables: tuple[Table, ...] = ()
    headline: tuple[dict[str, str], ...] = ()
    warnings: tuple[str, ...] = ()


@dataclass(frozen=True)
class ReviewSection:
    """A section of the review: ``work(context)`` is the work it needs, and
    ``build(context, results)`` builds its :class:`Part` from their results, by the
    work's name (only the work it named). ``id`` is its section's anchor."""

    id: str
    work: Callable[[ReviewContext], Sequence[Work]]
    build: Callable[[ReviewContext, Results], Part]


def no_work(context: ReviewContext) -> Sequence[Work]:
    """The work of a section that builds itself from the context alone: none."""
    return ()


def union(works: Sequence[Work]) -> dict[str, Work]:
    """The work of every section, each name once, in the order first named.

    Raises
    ------
    ValueError
        If two pieces of one name differ in what they need or where they run.

    Examples
    --------
    >>> a = Work("a", lambda r: 1)
    >>> list(union([a, Work("b", lambda r: 2), a]))
    ['a', 'b']
    """
    named: dict[str, Work] = {}
    for work in works:
        known = named.setdefault(work.name, work)
        if (known.needs, known.here) != (work.needs, work.here):
            raise ValueError(f"work {work.name!r} is named twice with different needs")
    return named


# C901: the pool's scheduling loop (ready work, needs, serial order) kept in one place
def run_work(works: Sequence[Work], *, workers: int | None = None) -> dict[str, Any]:  # noqa: C901
    """Run ``works`` (each name once, :func:`union`) on one pool of up to ``workers``
    processes (default every core; one: all of it here, in the same order), and return
    every result by name.

    Raises
    ------
    ValueError
        If a piece needs work that is not among ``works``, or planned work needs
        planned work.

    Examples
    --------
    >>> works = [Work("a", lambda r: 2), Work("b", lambda r: 3),
    ...          Work("sum", lambda r: r["a"] + r["b"], ("a", "b"), here=True),
    ...          Work("twice", lambda r: 2 * r["sum"], ("sum",))]
    >>> run_work(works, workers=1)
    {'a': 2, 'b': 3, 'sum': 5, 'twice': 10}
    """
    from topomodel.parallel import parallel_map_then

    named = union(works)

    def ranked(pieces: list[Work]) -> list[Work]:
        return sorted(pieces, key=lambda work: -work.rank)  # stable: ties as named

    planned = ranked([w for w in named.values() if w.needs and not w.here])
    ready: dict[str, None] = {}  # what the plan reads, in the order it needs it

    def reach(name: str) -> None:
        work = named.get(name)
        if work is None:
            raise ValueError(f"work {name!r} is needed but not scheduled")
        if work.here:
            for need in work.needs:
                reach(need)
        elif work.needs:
            raise ValueError(f"planned work needs planned work {name!r}")
        else:
            ready.setdefault(name)

    for work in planned:
        for need in work.needs:
            reach(need)
    results: dict[str, Any] = {}
    warm = next((w for w in named.values() if w.warm and not w.needs and not w.here), None)
    if warm is not None:  # before the pool: its workers start from what it built
        results[warm.name] = warm.run({})
        ready.pop(warm.name, None)
    first = [named[name] for name in ready] + ranked(
        [w for w in named.values() if not w.needs and not w.here and w.name not in ready
         and w is not warm])

    def resolve(name: str) -> Any:
        if name not in results:
            work = named.get(name)
            if work is None or not work.here:
                raise ValueError(f"work {name!r} is needed but not scheduled")
            for need in work.needs:
                resolve(need)
            results[name] = work.run({need: results[need] for need in work.needs})
        return results[name]

    def plan(ran: list[Any]) -> list[tuple[str, dict[str, Any]]]:
        results.update(zip(ready, ran, strict=True))
        return [(work.name, {need: resolve(need) for need in work.needs})
                for work in planned]

    def then(item: tuple[str, dict[str, Any]]) -> Any:
        name, given = item
        return named[name].run(given)

    done, ended = parallel_map_then(_run_alone, first, then, plan, ready=len(ready),
                                    workers=workers)
    results.update(zip((w.name for w in first), done, strict=True))
    results.update(zip((w.name for w in planned), ended, strict=True))
    for work in named.values():
        if work.here:
            resolve(work.name)
    return {name: results[name] for name in named}


def _run_alone(work: Work) -> Any:
    return work.run({})
