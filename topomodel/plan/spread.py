"""A plan spread over processes: on a local process pool or a Dask cluster, as sweeps
run (:mod:`topomodel.sweep.pool`).

The cells of the space (TP x CP x PP x DP splits) are sent in contiguous runs, so the
cells one worker gets share communicators and its collective times, kept with its
fabric, are hit; each worker builds the design once (the sweep's per-worker fabric
cache) and hands back its counts and its best layouts, which are merged here. The
result does not depend on how the cells were split: ties keep the layout listed first.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from topomodel.errors import UsageError
from topomodel.fabric.tables import Fabric
from topomodel.plan.power import fabric_power_W, fabric_USD_per_h
from topomodel.plan.search import (
    PlanJob,
    PlanPart,
    PlanResult,
    merge,
    plan_cells,
    search_cells,
    total_layouts,
)
from topomodel.sweep.evaluate import Outcome, SweepContext, sweep_fabric
from topomodel.sweep.pool import Task, connect_dask, run_dask, run_pool

TASKS_PER_WORKER = 4
"""Runs of cells per worker: a few, so a slow run does not hold up the end and the
progress bar moves, while each run still shares its communicators."""


@dataclass(frozen=True)
class Whatifs:
    """The what-ifs applied to the fabric before planning (failed parts by name, every
    scale-out link this many times faster)."""

    fail: tuple[str, ...] = ()
    scaleout_factor: float = 1.0
    fail_domain: tuple[str, ...] = ()  # KIND:N failure domains failed whole


def plan_context(design_file: str, extra_catalogs: Sequence[str] = (),
                 catalog_dirs: Sequence[str] = ()) -> SweepContext:
    """What a worker needs to build the design, as a sweep's workers get it
    (``catalog_dirs``: folders the design's catalogs may be in besides its own tree)."""
    from topomodel.inputs.design import load_design
    from topomodel.inputs.yamlsource import load_yaml
    from topomodel.sweep.file import file_digest

    design, catalog = load_design(design_file, extra_catalogs=extra_catalogs,
                                  catalog_dirs=catalog_dirs)
    own = [str(Path(design_file).parent / c) for c in design.catalogs]
    digest = file_digest([design_file, *extra_catalogs, *own])
    return SweepContext(digest, design_file, load_yaml(design_file).data, catalog, ())


def evaluate_cells(context: SweepContext, params: Mapping[str, Any]) -> dict[str, Any]:
    """A worker's share: the cells ``params["cells"]`` of ``params["job"]`` searched on
    the design (built once per worker), as ``{"part": PlanPart, "power_W": W}``."""
    whatifs: Whatifs = params["whatifs"]
    fabric, metrics = sweep_fabric(context, {}, whatifs.fail, whatifs.scaleout_factor,
                                   whatifs.fail_domain)
    power = float(metrics["power_W"])
    part = search_cells(fabric, params["job"], params["cells"], power_W=power)
    return {"part": part, "power_W": power}


def _a_part(metrics: Any) -> bool:
    """Whether a worker handed back what :func:`evaluate_cells` returns."""
    return (isinstance(metrics, dict) and isinstance(metrics.get("part"), PlanPart)
            and isinstance(metrics.get("power_W"), float))


def _runs(counts: Sequence[int], workers: int) -> list[list[int]]:
    """Contiguous runs of cell indices of about equal layout counts."""
    total = sum(counts)
    target = max(1, math.ceil(total / (TASKS_PER_WORKER * workers)))
    runs: list[list[int]] = [[]]
    load = 0
    for index, count in enumerate(counts):
        if load >= target:
            runs.append([])
            load = 0
        runs[-1].append(index)
        load += count
    return [r for r in runs if r]


def plan_spread(context: SweepContext, job: PlanJob, *, whatifs: Whatifs = Whatifs(),
                workers: int = 1, scheduler: Any = None, design: str = "",
                progress: Callable[[int], None] | None = None,
                total: Callable[[int], None] | None = None) -> PlanResult:
    """Search the job's space on ``workers`` local processes, or on the Dask cluster at
    ``scheduler`` (an address or a ``distributed.Client``); ``total(n)`` is told how many
    layouts there are, ``progress(n)`` of every n searched.

    Raises
    ------
    UsageError
        When a worker fails (its error), or the scheduler cannot be reached.
    """
    start = time.perf_counter()
    fabric, metrics = sweep_fabric(context, {}, whatifs.fail, whatifs.scaleout_factor,
                                   whatifs.fail_domain)
    counts = total_layouts(fabric, job)
    if total is not None:
        total(sum(counts))
    parts: list[PlanPart] = []
    errors: list[str] = []
    if scheduler is None and workers <= 1:
        power = fabric_power_W(fabric)
        parts.append(search_cells(fabric, job, range(len(plan_cells(fabric, job))),
                                  power_W=power, progress=progress))
    else:
        runs = _runs(counts, workers)
        tasks = [Task([(i, {"job": job, "cells": run, "whatifs": whatifs})])
                 for i, run in enumerate(runs)]
        power = float(metrics["power_W"])

        def done(outcomes: list[Outcome]) -> None:
            for o in outcomes:
                if o.error is not None:
                    errors.append(o.error)
                    continue
                parts.append(o.metrics["part"])
                if progress is not None:
                    progress(sum(counts[c] for c in runs[o.index]))

        if scheduler is not None:
            client, own_client = connect_dask(scheduler)
            try:
                run_dask(context, tasks, client, evaluate_cells, done, metrics_ok=_a_part)
            finally:
                if own_client:
                    client.close()
        else:
            run_pool(context, tasks, workers, evaluate_cells, done, metrics_ok=_a_part)
    if errors:
        raise UsageError(f"a worker failed: {errors[0]}")
    merged = merge(parts, job.top)
    return PlanResult(design, job, merged.tally, tuple(r.result for r in merged.best),
                      time.perf_counter() - start, power,
                      workers if scheduler is None else 0, fabric.accelerator_count,
                      USD_per_h=fabric_USD_per_h(fabric, job.cost))


def job_sizes(fabric: Fabric) -> list[int]:
    """The job sizes a plan falls back to when no layout uses every accelerator, largest
    first: whole systems (a scheduler hands a job whole servers or racks), one fewer
    each time, down to one system."""
    per_system = max(1, fabric.structure.accelerators_per_system)
    return list(range(fabric.accelerator_count - per_system, 0, -per_system))


def plan_largest(context: SweepContext, job: PlanJob, *, whatifs: Whatifs = Whatifs(),
                 workers: int = 1, scheduler: Any = None, design: str = "",
                 progress: Callable[[int], None] | None = None,
                 total: Callable[[int], None] | None = None) -> PlanResult:
    """:func:`plan_spread` of ``job``; when it asks for no size
    (``job.accelerators`` 0) and no layout of every accelerator is valid and fits, the
    largest job (:func:`job_sizes`) that has one, planned the same way (the result's
    ``idle`` says how many accelerators it leaves). With none at any size, the plan of
    every accelerator (empty)."""
    found = plan_spread(context, job, whatifs=whatifs, workers=workers,
                        scheduler=scheduler, design=design, progress=progress, total=total)
    if found.best or job.accelerators:
        return found
    fabric, _ = sweep_fabric(context, {}, whatifs.fail, whatifs.scaleout_factor,
                                   whatifs.fail_domain)
    for size in job_sizes(fabric):
        smaller = replace(job, accelerators=size)
        if not any(total_layouts(fabric, smaller)):
            continue  # no layout divides this size: nothing to search
        tried = plan_spread(context, smaller, whatifs=whatifs, workers=workers,
                            scheduler=scheduler, design=design, progress=progress,
                            total=total)
        if tried.best:
            tally = found.tally
            tally.add(tried.tally)
            return replace(tried, tally=tally,
                           elapsed_s=found.elapsed_s + tried.elapsed_s,
                           idle_reason=f"no layout of all {fabric.accelerator_count:,} is"
                           " valid and fits: the largest job of whole systems that has"
                           " one")
    return found
