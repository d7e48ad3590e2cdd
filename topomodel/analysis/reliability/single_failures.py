"""Single-failure what-ifs: one spine, one leaf, one optic, one NIC failed, routed exactly.

For each kind of part, one part of the job's footprint is failed (the representative
the goodput model picks: the first of its kind, which on a symmetric fabric stands for
every other) and the featured collective and the training step are routed again with it
failed, by the same router as the healthy run (on a Clos, the structured router around
failed parts, :mod:`topomodel.routing.survivors`: exact at any size). Each row gives the
times against the healthy ones and the part's failure class
(:mod:`topomodel.analysis.reliability.failure_classes`): a part classed ``stops_job`` restarts the
job, so its times say what the job would run at without the part, not what it does.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from topomodel.analysis.reliability.goodput import ComponentLine, component_lines
from topomodel.fabric.scaleout import REGISTRY, scaleout_kind

if TYPE_CHECKING:
    from topomodel.analysis.collectives.collective import CollectiveRun
    from topomodel.analysis.collectives.timing import TimeModel
    from topomodel.analysis.training.step import StepAssumptions, StepResult
    from topomodel.fabric.tables import Fabric
    from topomodel.inputs.parts import Model
    from topomodel.traffic.layout import Layout

FAT_TREE = REGISTRY["fat_tree"]

WHAT_IF_KINDS = FAT_TREE.what_if_parts
"""The parts a fat-tree's what-ifs fail one at a time, in this order (each scale-out
kind names its own: :attr:`~topomodel.fabric.scaleout.kind.ScaleoutKind.what_if_parts`)."""


@dataclass(frozen=True)
class SingleFailure:
    """One part failed: the collective and the step routed around it, seconds."""

    kind: str  # spine, leaf, optic, nic
    part: str  # the node, or the "a -- b" link, failed ("" when the design has none)
    model: str  # its catalog id
    tier: str  # where it sits
    cables: int  # cables down: a failed link takes its whole bundle
    on_failure: str  # its failure class: stops_job, degrades, absorbed
    class_entry: str  # the class entry, or "single point of failure"
    collective_s: float | None  # the featured collective with the part failed
    healthy_collective_s: float | None
    unroutable_flows: int  # the collective's flows left without a path
    step_s: float | None  # the training step with the part failed
    healthy_step_s: float | None
    algorithm: str = ""  # the collective's algorithm with the part failed

    @property
    def collective_ratio(self) -> float | None:
        """Collective time failed over healthy."""
        return _ratio(self.collective_s, self.healthy_collective_s)

    @property
    def step_ratio(self) -> float | None:
        """Step time failed over healthy."""
        return _ratio(self.step_s, self.healthy_step_s)


def _ratio(failed: float | None, healthy: float | None) -> float | None:
    return failed / healthy if failed is not None and healthy else None


def representatives(lines: Sequence[ComponentLine],
                    parts: Sequence[str] = WHAT_IF_KINDS) -> dict[str, ComponentLine]:
    """The line whose representative stands for each kind of ``parts`` (a scale-out
    kind's :attr:`~topomodel.fabric.scaleout.kind.ScaleoutKind.what_if_parts`): a
    switch tier's switches, the most numerous optic (the one most likely to fail), the
    NIC; a kind the design lacks is left out."""
    out: dict[str, ComponentLine] = {}
    for ln in lines:
        if not ln.representative:
            continue
        if ln.component == "switch" and ln.tier in parts:
            out.setdefault(ln.tier, ln)
        elif ln.component == "nic":
            out.setdefault("nic", ln)
        elif ln.component == "optic" and ln.count > getattr(out.get("optic"), "count", 0):
            out["optic"] = ln
    return {kind: out[kind] for kind in parts if kind in out}


class HealthyCollective(Protocol):
    """What the what-ifs read of the healthy collective run (a
    :class:`~topomodel.analysis.collectives.collective.CollectiveRun` has it all)."""

    @property
    def collective(self) -> str: ...

    @property
    def size_bytes(self) -> float: ...

    @property
    def algorithm(self) -> str: ...

    @property
    def time_s(self) -> float: ...


@dataclass(frozen=True)
class CollectiveSpec:
    """A healthy collective run as its table row gives it: the collective, its size in
    bytes, the algorithm that won and its time in seconds."""

    collective: str
    size_bytes: float
    algorithm: str
    time_s: float


def what_if_lines(fabric: Fabric, world: int | None = None,
                  lines: Sequence[ComponentLine] | None = None) -> dict[str, ComponentLine]:
    """:func:`representatives` of the job's footprint (the first ``world``
    accelerators, else all; ``lines``: its :func:`component_lines`, if known)."""
    if lines is None:
        lines = component_lines(fabric, world if world is not None
                                else len(fabric.accelerators))
    return representatives(lines, scaleout_kind(fabric.structure).what_if_parts)


# PLR0913: keyword-only options of an entry point, as networkx's; a record would hide them
def single_failures(fabric: Fabric, *, collective: HealthyCollective | None = None,  # noqa: PLR0913
                    group: str = "all", time_model: TimeModel | None = None,
                    model: Model | None = None, layout: Layout | None = None,
                    assumptions: StepAssumptions | None = None,
                    step: StepResult | None = None, routing: str = "ecmp",
                    seed: int = 0, workers: int | None = None,
                    lines: Sequence[ComponentLine] | None = None,
                    known_step_s: Mapping[str, float] | None = None,
                    known_collectives: Mapping[str, FailedCollective] | None = None
                    ) -> list[SingleFailure]:
    """One what-if per part kind of the scale-out's kind (:data:`WHAT_IF_KINDS` on a
    fat-tree): ``collective`` (a healthy run on
    ``group`` groups, timed by ``time_model``) re-run with the same algorithm, and with
    ``model`` and ``layout`` the step (healthy: ``step``), each with the part failed;
    the kinds run on ``workers`` processes (default every core,
    :func:`~topomodel.parallel.parallel_map`).

    The parts come from the job's footprint (the first ``layout.world`` accelerators,
    else all; ``lines``: its component lines, if the caller has them). A kind the
    design lacks gets a row with an empty ``part``. ``known_step_s`` gives, by part
    name, the step times the caller already ran with that part failed
    (:func:`~topomodel.analysis.reliability.goodput.with_part_failed`, the same step): those steps
    are not run again; ``known_collectives`` likewise gives the collective's runs with
    a part failed (:func:`failed_collective`).
    """
    from topomodel.analysis.reliability.goodput import with_part_failed
    from topomodel.analysis.training.step import step_time
    from topomodel.parallel import parallel_map

    world = layout.world if layout is not None else None
    chosen = what_if_lines(fabric, world, lines)
    healthy_collective = collective.time_s if collective is not None else None
    healthy_step = step.step_time_s if step is not None else None
    known = known_step_s or {}
    known_runs = known_collectives or {}

    def what_if(kind: str) -> SingleFailure:
        line = chosen.get(kind)
        if line is None:
            return SingleFailure(kind, "", "", "", 0, "", "", None, healthy_collective, 0,
                                 None, healthy_step)
        part = line.representative
        failed = functools.cache(lambda: with_part_failed(fabric, part))  # one copy
        run = known_runs.get(part)
        if collective is not None and run is None:
            run = failed_collective(failed(), collective, group=group,
                                    time_model=time_model, routing=routing, seed=seed)
        step_s = None
        if model is not None and layout is not None:
            step_s = known.get(part)
            if step_s is None:
                step_s = step_time(failed(), model, layout, assumptions, routing=routing,
                                   seed=seed).step_time_s
        return SingleFailure(kind, part, line.model, line.tier,
                             line.representative_cables if " -- " in part else 0,
                             line.on_failure, line.class_entry,
                             None if run is None else run.time_s, healthy_collective,
                             0 if run is None else run.unroutable_flows, step_s,
                             healthy_step, "" if run is None else run.algorithm)

    return parallel_map(what_if, scaleout_kind(fabric.structure).what_if_parts,
                        workers=workers)


@dataclass(frozen=True)
class FailedCollective:
    """A healthy collective run again with one part failed: its time in seconds, the
    flows left without a path and the algorithm it ran."""

    time_s: float
    unroutable_flows: int
    algorithm: str


def failed_collective(failed: Fabric, collective: HealthyCollective, *,
                      group: str = "all", time_model: TimeModel | None = None,
                      routing: str = "ecmp", seed: int = 0) -> FailedCollective:
    """``collective`` (a healthy run on ``group`` groups) on ``failed``, a copy of its
    fabric with one part failed (:func:`~topomodel.analysis.reliability.goodput.with_part_failed`),
    timed by ``time_model``: seconds."""
    run = _rerun(failed, collective, group, time_model, routing, seed)
    return FailedCollective(run.time_s, run.timing.unroutable_flows, run.algorithm)


def _rerun(failed: Fabric, healthy: HealthyCollective, group: str, time_model: TimeModel | None,
           routing: str, seed: int) -> CollectiveRun:
    """The healthy run's collective on ``failed``, with its algorithm where it still
    applies, else the fastest that does (an in-network reduction needs every rank's
    NIC: NCCL falls back to another algorithm without it)."""
    from topomodel.analysis.collectives.collective import run_collective
    from topomodel.errors import UsageError

    try:
        return run_collective(failed, healthy.collective, healthy.size_bytes, [group],
                              algorithm=healthy.algorithm, routing=routing, seed=seed,
                              time_model=time_model)
    except UsageError:
        return run_collective(failed, healthy.collective, healthy.size_bytes, [group],
                              routing=routing, seed=seed, time_model=time_model)


def single_failure_records(rows: Sequence[SingleFailure]) -> list[dict[str, Any]]:
    """Plain records (the review's JSON and tables), units in the keys."""
    return [{"kind": r.kind, "part": r.part, "model": r.model, "tier": r.tier,
             "cables": r.cables, "on_failure": r.on_failure, "class_entry": r.class_entry,
             "algorithm": r.algorithm, "collective_s": r.collective_s,
             "healthy_collective_s": r.healthy_collective_s,
             "collective_ratio": r.collective_ratio, "unroutable_flows": r.unroutable_flows,
             "step_s": r.step_s, "healthy_step_s": r.healthy_step_s,
             "step_ratio": r.step_ratio} for r in rows]
