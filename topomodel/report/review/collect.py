"""The design review: every result a review needs, collected once (``topomodel review``).

:func:`collect_review` builds the report of one design (and, optionally, one model and
parallel layout): what was modeled and the headline numbers, warnings, the topology
(diagram, per-tier table, the fabric as levels), bisection, a table of collectives on
the design's natural groups with per-tier load and hotspots, the training step with its
four walls, the bill of materials, power and optical budget, every assumption with its
value, and the provenance of every catalog figure the design uses.
:mod:`topomodel.report.review.render` turns it into ``report.html``, ``report.md`` and
``report.json``.

JSON (``schema: topomodel.review``, ``version: 1``) keys:

- ``design`` (``name``, ``file``, ``system``), ``summary`` (headline numbers, units in
  the keys: ``bisection_Bps``, ``injection_per_accelerator_Bps``, ``step_time_s``,
  ``mfu``, ``tokens_per_s``, ``total_power_W``, ...);
- ``build``: the ``topomodel build`` data (tiers, bisection, bom, power, link_budget);
- ``levels``: the fabric as levels (see :func:`topomodel.analysis.levels.network_levels`);
- ``collectives``: ``sizes_bytes``, ``groups`` (spec: ranks and count), ``rows`` (one per
  collective, group and size: ``time_s``, ``algbw_Bps``, ``busbw_Bps``, ``latency_s``,
  ``bandwidth_s``, ``topology_s``, ``algorithm``, ``peak_utilization``), ``skipped`` and
  ``featured`` (the ``topomodel route`` data of the most loaded collective, which the
  topology diagram shows);
- ``step``: the ``topomodel step`` data, or null without a model;
- ``single_failures``: one row per part failed (a spine, a leaf, an optic, a NIC; see
  :func:`topomodel.analysis.reliability.single_failures.single_failure_records`), empty without a
  scale-out network;
- ``hotspots``: the featured collective's busiest links;
- ``assumptions``: ``name``, ``value``, ``unit``, ``where``, ``why``;
- ``provenance``: per catalog entry used: ``id``, ``kind``, ``source``, ``notes``,
  ``provenance``, ``figures`` (``key``, ``value``, ``provenance``);
- ``bibliography``: per source tag cited: ``tag``, ``citation``, ``date``, ``kind``,
  ``cited_by``; ``inputs``: ``generated_utc``, ``topomodel_version``, ``files``
  (``file``, ``role``, ``bytes``, ``sha256``);
- ``figures``: ``name``, ``file``, ``caption``; ``notes``; ``warnings``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from topomodel.arrays import distinct
from topomodel.errors import UsageError
from topomodel.fabric.tables import Fabric, labels
from topomodel.inputs.records import documented

if TYPE_CHECKING:
    from topomodel.analysis.collectives.collective import CollectiveRun
    from topomodel.analysis.collectives.timing import TimeModel
    from topomodel.analysis.training.step import StepResult
    from topomodel.traffic.layout import Layout
from topomodel.report.review.document import (
    ReviewFigure,
    size_text,
)

REVIEW_COLLECTIVES = ("allreduce", "allgather", "reducescatter", "alltoall")
"""The collectives of the review's table (what data-parallel, tensor-parallel and
expert-parallel traffic is made of)."""


REVIEW_SIZES_BYTES = documented(
    "review.REVIEW_SIZES_BYTES", (2**20, 64 * 2**20, 2**30),
    """Message sizes of the collective table (nccl-tests convention): 1 MiB is
    latency-bound, 64 MiB about a gradient bucket, 1 GiB bandwidth-bound.""")


LARGE_FABRIC_ACCELERATORS = documented(
    "review.LARGE_FABRIC_ACCELERATORS", 2048,
    """Above this many accelerators the review times its collectives at
    LARGE_FABRIC_SIZES_BYTES only, and says so: each size routes the table again, and
    on the 98,304-NPU 4K-supernode example the three sizes take 4.6 CPU s where 1 GiB
    alone takes 2.0, in a review of about 12 CPU s on two cores. The algorithms are the
    same at every size: the fastest of those NCCL runs (auto), so the table shows the
    best AllReduce, not the ring's.""")


LARGE_FABRIC_SIZES_BYTES = (2**30,)
"""The one size on a large fabric: bandwidth-bound, where the topology shows."""


MAX_ALLTOALL_FLOWS = documented(
    "review.MAX_ALLTOALL_FLOWS", 2**20,
    """All-to-All on groups with more flows than this (groups x ranks^2) is left out:
    every rank sends to every other, and routing a million flows takes about a second
    per algorithm on one laptop-class core.""")


HOTSPOT_COUNT = 10
"""Busiest links listed."""


def spread_groups(fabric: Fabric, max_flows: int) -> str | None:
    """The group spec of All-to-All groups spread over the whole fabric, for a fabric too
    large for one All-to-All of every accelerator: ``stride:K``, the K groups of
    ``N / K`` ranks ``{j, j + K, j + 2K, ...}`` (one per block of K consecutive ranks, so
    their traffic crosses the top tier as the whole-fabric All-to-All's would), with the
    most ranks whose flows (N x ranks) stay within ``max_flows``; None if no group of 2
    or more ranks fits.

    Examples
    --------
    >>> class F:
    ...     accelerators = np.arange(98_304)
    >>> spread_groups(F(), 2**20)
    'stride:12288'
    """
    n = len(fabric.accelerators)
    ranks = [r for r in range(2, n + 1) if n % r == 0 and n * r <= max_flows]
    return f"stride:{n // max(ranks)}" if ranks else None


@dataclass(frozen=True)
class CollectiveTable:
    rows: list[dict[str, Any]]
    groups: dict[str, dict[str, int]]
    sizes: tuple[float, ...]
    skipped: list[str]
    notes: list[str]
    featured: CollectiveRun | None  # set where the figures are drawn (held_featured)
    featured_group: str
    warnings: list[str] = field(default_factory=list)
    featured_item: _PlannedRun | None = None  # what runs the featured collective
    featured_row: dict[str, Any] | None = None


def natural_groups(fabric: Fabric) -> list[tuple[str, str]]:
    """The design's natural communicator groups, as (spec, network): ``domain`` for the
    scale-up domains, then ``rail`` (one rank per system, by local index) and ``all``
    over the scale-out network, each where its groups have 2 or more ranks and differ
    from the ones before. A fabric that is one scale-up domain has only ``domain``."""
    acc = fabric.accelerators
    domain = fabric.node_arrays["domain"][acc]
    domains = len(distinct(domain)) if len(acc) and (domain >= 0).all() else 0
    out: list[tuple[str, str]] = []
    if domains and len(acc) // domains >= 2:
        out.append(("domain", "scale-up"))
    if fabric.structure.scaleout.kind == "none" or domains == 1 or len(acc) < 2:
        return out
    systems = fabric.structure.systems
    if systems >= 2 and fabric.structure.accelerators_per_system >= 2:
        out.append(("rail", "scale-out"))
    out.append(("all", "scale-out"))
    return out


_PlannedRun = tuple[str, str, int, int, str, tuple[str, ...], float]
"""One run of the review's table: (group spec, network, ranks, groups, collective,
candidate algorithms, size in bytes)."""


@dataclass(frozen=True)
class _CollectivePlan:
    """The review's collective runs, before any has run: the runs, the groups they run
    on, the sizes, and what was left out."""

    runs: list[_PlannedRun]
    groups: dict[str, dict[str, int]]
    sizes: tuple[float, ...]
    skipped: list[str]
    notes: list[str]
    scale_out: bool  # whether any group is on the scale-out network


def shared_views(fabric: Fabric, *, failures: bool) -> None:
    """Build the fabric's views that both workers of the review's pool read, before it
    forks (:func:`~topomodel.parallel.beside` the structured router's view and the
    planning), so each is built once and shared instead of built in each worker: with
    ``failures``, the arc indexes that failing a part reads; the in-network reduction's
    view (each all-reduce's candidates); each row's weaker direction."""
    from topomodel.analysis.reliability.goodput import failure_indexes
    from topomodel.fabric.tables import link_weaker_Bps
    from topomodel.traffic.algorithms.innetwork import in_network_view

    if failures:
        failure_indexes(fabric)
    for make in (in_network_view, link_weaker_Bps):
        fabric.derived(make)


def timing_views(fabric: Fabric, timing: TimeModel) -> None:
    """The link rates under ``timing`` (every timing reads them) and the rows by tier
    (the build report's and the featured collective's tier tables), shared as
    :func:`shared_views` are (beside the views of a part failed, which read neither)."""
    from topomodel.analysis.collectives.loads import rows_by_tier
    from topomodel.analysis.collectives.timing import link_rates_of

    link_rates_of(fabric, timing)
    fabric.derived(rows_by_tier)


def plan_collectives(fabric: Fabric, sizes_bytes: Sequence[float] | None
                      ) -> _CollectivePlan:
    """Every review collective on every natural group at every size, with the fastest
    algorithm NCCL would run (auto); All-to-All too large for every accelerator at once
    runs on groups spread over the fabric (:func:`spread_groups`). Each run is
    independent of the others (:func:`measured_runs`, :func:`collect_rows`)."""
    from topomodel.traffic.algorithms import auto_candidates
    from topomodel.traffic.groups import parse_groups

    large = fabric.accelerator_count > LARGE_FABRIC_ACCELERATORS
    notes: list[str] = []
    if sizes_bytes:
        sizes = tuple(sorted(float(s) for s in sizes_bytes))
    elif large:
        sizes = tuple(float(s) for s in LARGE_FABRIC_SIZES_BYTES)
    else:
        sizes = tuple(float(s) for s in REVIEW_SIZES_BYTES)
    if large and not sizes_bytes:
        notes.append(f"{fabric.accelerator_count:,} accelerators (more than"
                     f" {LARGE_FABRIC_ACCELERATORS:,}): collectives timed at "
                     + ", ".join(size_text(s) for s in sizes) + " only, to keep the review"
                     " fast; each with the fastest algorithm NCCL runs")
    groups = natural_groups(fabric)
    skipped: list[str] = []
    group_info: dict[str, dict[str, int]] = {}
    scale_out = any(net == "scale-out" for _, net in groups)
    plan: list[tuple[str, str, tuple[str, ...]]] = [
        (spec, network, REVIEW_COLLECTIVES) for spec, network in groups]
    for spec, network in groups:
        members = parse_groups(fabric, spec)
        ranks, count = len(members[0]), len(members)
        if count * ranks * ranks > MAX_ALLTOALL_FLOWS and spec == "all" and network == (
                "scale-out"):
            spread = spread_groups(fabric, MAX_ALLTOALL_FLOWS)
            if spread is not None and spread not in dict(groups):
                plan.append((spread, network, ("alltoall",)))
                notes.append(f"All-to-All of all {ranks:,} accelerators would route"
                             f" {ranks * (ranks - 1):,} flows: it runs on {spread} instead,"
                             " groups spread over the whole fabric whose traffic crosses"
                             " its top (and any oversubscribed) tier as the whole-fabric"
                             " All-to-All's would")
    runs: list[_PlannedRun] = []
    for spec, network, collectives in plan:
        members = parse_groups(fabric, spec)
        ranks, count = len(members[0]), len(members)
        group_info[spec] = {"ranks": ranks, "groups": count}
        for collective in collectives:
            if collective == "alltoall" and count * ranks * ranks > MAX_ALLTOALL_FLOWS:
                skipped.append(f"alltoall on {spec} ({count} x {ranks} ranks:"
                               f" {count * ranks * (ranks - 1):,} flows)")
                continue
            candidates = auto_candidates(fabric, collective, ranks)
            runs += [(spec, network, ranks, count, collective, candidates, size)
                     for size in sizes]
    return _CollectivePlan(runs, group_info, sizes, skipped, notes, scale_out)


def featured_run(fabric: Fabric, timing: TimeModel, routing: str, seed: int,
                  item: _PlannedRun) -> CollectiveRun:
    """One planned run, routed and timed (``UsageError`` if no algorithm applies)."""
    from topomodel.analysis.collectives.collective import run_collective

    spec, _, _, _, collective, candidates, size = item
    return run_collective(fabric, collective, size, [spec], candidates=candidates,
                          routing=routing, seed=seed, time_model=timing)


def _most_loaded(fabric: Fabric) -> dict[str, Any]:
    """This process's most loaded run that may be featured (:func:`measured_runs`):
    ``key`` (timing, routing, seed, planned run), ``load`` and ``run``, empty before
    one; kept with the fabric, so each worker process has its own."""
    return {}


def may_feature(plan: _CollectivePlan, item: _PlannedRun) -> bool:
    """Whether ``item`` can be the featured run (:func:`collect_rows`): at the largest
    size, on a scale-out group where there are any."""
    return item[6] == plan.sizes[-1] and (item[1] == "scale-out" or not plan.scale_out)


def held_featured(fabric: Fabric, timing: TimeModel, routing: str, seed: int,
                  item: _PlannedRun) -> CollectiveRun | None:
    """The featured run as :func:`measured_runs` held it in this process (None where
    another process ran it, or a more loaded run here took its place), released: the
    featured collective is then not routed a second time (it is deterministic: the same
    run as :func:`featured_run` gives)."""
    held = fabric.derived(_most_loaded)
    if held.get("key") != (timing, routing, seed, item):
        return None
    run: CollectiveRun = held["run"]
    held.clear()
    return run


def measured_runs(fabric: Fabric, timing: TimeModel, routing: str, seed: int,
                  items: Sequence[_PlannedRun], *,
                  may_feature: Callable[[_PlannedRun], bool] | None = None,
                  ) -> list[dict[str, Any] | None]:
    """The table rows of planned runs (None where no algorithm applies), run in turn
    and each held until the last is in: a ring all-gather and the reduce-scatter of the
    same groups and size send the same flows, so the second is timed from the first's
    routes (:func:`~topomodel.analysis.collectives.routes.same_flows`). The most loaded
    run for which ``may_feature`` holds (as :func:`collect_rows` ranks them) stays with
    the fabric in this process for :func:`held_featured`, one at a time."""
    held: list[CollectiveRun] = []
    rows: list[dict[str, Any] | None] = []
    most = fabric.derived(_most_loaded)
    for item in items:
        try:
            best = featured_run(fabric, timing, routing, seed, item)
        except UsageError:
            rows.append(None)
            continue
        held.append(best)
        peak = best.timing.peak_busy_s / best.time_s if best.time_s else 0.0
        load = (peak, best.time_s)
        if may_feature is not None and may_feature(item) and (
                "load" not in most or load > most["load"]):
            most.update(key=(timing, routing, seed, item), load=load, run=best)
        rows.append({"algorithm": best.algorithm, "time_s": best.time_s,
                     "algbw_Bps": best.algbw_Bps, "busbw_Bps": best.busbw_Bps,
                     "latency_s": best.timing.latency_s,
                     "bandwidth_s": best.timing.bandwidth_s,
                     "topology_s": best.timing.topology_s, "peak_utilization": peak})
    return rows


def group_pieces(runs: Sequence[_PlannedRun]) -> list[list[_PlannedRun]]:
    """``runs`` cut where the group spec changes, in order: every run that can share
    another's routes is of the same groups (a size's routes scaled to another size, an
    all-gather's timing the reduce-scatter's), so :func:`measured_runs` over each piece
    in turn gives the rows of one call over all of them, holding only one group's runs
    at a time (at 98k, the held routes of every group were ~0.9 GB of the peak).

    Examples
    --------
    >>> runs = [("domain", "scale-up", 8, 2, "allreduce", ("ring",), 1.0),
    ...         ("domain", "scale-up", 8, 2, "alltoall", ("direct",), 1.0),
    ...         ("all", "scale-out", 16, 1, "allreduce", ("ring",), 1.0)]
    >>> [[r[4] for r in piece] for piece in group_pieces(runs)]
    [['allreduce', 'alltoall'], ['allreduce']]
    """
    pieces: list[list[_PlannedRun]] = []
    for run in runs:
        if pieces and pieces[-1][-1][0] == run[0]:
            pieces[-1].append(run)
        else:
            pieces.append([run])
    return pieces


def run_pieces(runs: Sequence[_PlannedRun]) -> list[tuple[int, ...]]:
    """The planned runs (indices into ``runs``) in pieces of :func:`measured_runs`:
    each all-gather with the reduce-scatter of the same groups and size, the others
    alone, in the order of each piece's first run."""
    scatter = {(r[0], r[6]): k for k, r in enumerate(runs) if r[4] == "reducescatter"}
    pieces: list[tuple[int, ...]] = []
    taken: set[int] = set()
    for k, run in enumerate(runs):
        if k in taken:
            continue
        pair = scatter.get((run[0], run[6])) if run[4] == "allgather" else None
        pieces.append((k,) if pair is None else (k, pair))
        taken.update(pieces[-1])
    return pieces


def collect_rows(plan: _CollectivePlan, results: Sequence[dict[str, Any] | None]
                  ) -> CollectiveTable:
    """The table from the rows of :func:`measured_runs` (one per planned run, in plan
    order). The featured run, the one the topology diagram shows, is the most loaded at
    the largest size (the highest link utilization; on scale-out groups where there are
    any): named here, and drawn from the run :func:`measured_runs` held where it ran in
    the process that draws it, else routed again (sending every candidate's link loads
    back from the workers would cost more than that one run)."""
    sizes, skipped = plan.sizes, list(plan.skipped)
    rows: list[dict[str, Any]] = []
    featured_item: _PlannedRun | None = None
    featured_row: dict[str, Any] | None = None
    featured_group, featured_load = "", (-1.0, -1.0)
    refused: set[tuple[str, str]] = set()
    for item, result in zip(plan.runs, results, strict=True):
        spec, network, ranks, count, collective, _, size = item
        if (spec, collective) in refused:
            continue
        if result is None:  # no algorithm applies: at any size, as at the first
            skipped.append(f"{collective} on {spec}: no algorithm applies")
            refused.add((spec, collective))
            continue
        row = {"collective": collective, "group": spec, "network": network,
               "ranks": ranks, "groups": count, "size_bytes": size, **result}
        rows.append(row)
        load = (result["peak_utilization"], result["time_s"])
        if size == sizes[-1] and (network == "scale-out" or not plan.scale_out) and (
                load > featured_load):
            featured_item, featured_row, featured_group, featured_load = (
                item, row, spec, load)
    notes = list(plan.notes)
    if skipped:
        notes.append("left out: " + "; ".join(skipped) + f" (more than"
                     f" {MAX_ALLTOALL_FLOWS:,} flows, or no applicable algorithm)")
    return CollectiveTable(rows, plan.groups, sizes, skipped, notes, None, featured_group,
                        featured_item=featured_item, featured_row=featured_row)


def levels_part(fabric: Fabric, timing: TimeModel) -> list[dict[str, Any]]:
    from topomodel.analysis.levels import network_levels

    try:
        levels = network_levels(fabric, timing)
    except UsageError:
        return []
    return [dataclasses.asdict(level) for level in levels]


def review_warnings(fabric: Fabric, build_warnings: Sequence[str], step: StepResult | None,
              layout: Layout | None, featured: Any, failed: Sequence[str],
              collectives: CollectiveTable) -> list[str]:
    out = list(build_warnings)
    if failed:
        out.append(f"failed parts: {', '.join(failed)} (their links carry no traffic)")
    if step is not None and layout is not None:
        out += list(step.warnings)
        out += oversubscribed_crossings(fabric, step, layout)
    if featured is not None:
        out += [f"{featured.data['collective']} on {collectives.featured_group}: {w}"
                for w in featured.warnings]
    seen: dict[str, None] = {}
    for warning in out:
        seen.setdefault(warning)
    return list(seen)


def oversubscribed_crossings(fabric: Fabric, step: StepResult,
                             layout: Layout) -> list[str]:
    """Warnings for kinds of step traffic whose groups cross the uplinks of an
    oversubscribed scale-out tier (members under different leaves, or in different
    pods, of a tier with down:up above 1)."""
    from topomodel.traffic.layout import rank_groups

    over: dict[str, float] = {}
    for clos in fabric.clos_tiers:
        if clos.name in ("leaf", "spine") and clos.oversubscription > 1 + 1e-9:
            over[clos.name] = max(over.get(clos.name, 1.0), clos.oversubscription)
    if not over or not step.comm:
        return []
    leaf, pod = _scaleout_address(fabric)
    domain = fabric.node_arrays["domain"]
    ranks = fabric.accelerators[:layout.world]
    grouping = {"dp": "grad", "edp": "expert_grad"}
    out = []
    for comm in step.comm:
        if not comm.spills:
            continue
        members = rank_groups(ranks, layout, grouping.get(comm.kind, comm.kind))
        doms = domain[members]
        leaves_apart = leaf[members]
        pods_apart = pod[members]
        leaving = ((doms != doms[:, :1]) | (doms < 0)).any(axis=1)
        crossed = {"leaf": bool((leaving & (leaves_apart != leaves_apart[:, :1]).any(
            axis=1)).any()),
                   "spine": bool((leaving & (pods_apart != pods_apart[:, :1]).any(
                       axis=1)).any())}
        for tier, ratio in over.items():
            if crossed[tier]:
                out.append(f"{comm.kind.upper()} traffic ({comm.collective}) crosses the"
                           f" uplinks of the {tier} tier, oversubscribed {ratio:.3g}:1")
    return out


def _scaleout_address(fabric: Fabric) -> tuple[np.ndarray, np.ndarray]:
    """Per node: the leaf (plane-0 or lowest-numbered) and its pod that an accelerator's
    scale-out traffic enters (through its own NIC, or its system's NIC serving it); -1
    for nodes without one."""
    nodes, links = fabric.nodes, fabric.links
    n = len(nodes)
    src, dst = links["src"].to_numpy(), links["dst"].to_numpy()
    kind = labels(nodes["kind"])
    up = (links["tier"] == "leaf").to_numpy() & (kind[src] == "nic")
    nic_leaf = np.full(n, np.iinfo(np.int64).max)
    np.minimum.at(nic_leaf, src[up], dst[up])
    nic_leaf[nic_leaf == np.iinfo(np.int64).max] = -1
    acc = fabric.accelerators
    leaf = np.full(n, -1)
    serving = fabric.injection.nic  # the NIC that serves each accelerator
    leaf[acc] = np.where(serving >= 0, nic_leaf[np.maximum(serving, 0)], -1)
    pod_of = nodes["pod"].to_numpy()
    pod = np.where(leaf >= 0, pod_of[np.maximum(leaf, 0)], -1)
    return leaf, pod


def _step_figure(step: StepResult) -> ReviewFigure:
    """The figure of the training step (its own piece: it needs the step only)."""
    from topomodel.draw.charts import step_figure
    from topomodel.draw.io import figure_bytes

    return ReviewFigure(
        "step", "One training step: compute, pipeline bubble, exposed communication"
        " and wait, and the exposed part split into the four walls.",
        figure_bytes(step_figure(step), "png"))


def review_figures(fabric: Fabric, collectives: CollectiveTable, featured: Any,
             step: StepResult | ReviewFigure | None) -> dict[str, ReviewFigure]:
    from topomodel.draw.charts import tier_utilization_figure
    from topomodel.draw.io import figure_bytes
    from topomodel.draw.topology import topology_figure
    from topomodel.report.output import refuse_nonfinite

    # before any drawing: a figure's axes cannot span an infinity
    refuse_nonfinite(featured, "featured")
    if step is not None and not isinstance(step, ReviewFigure):
        refuse_nonfinite(step, "step")
    out: dict[str, ReviewFigure] = {}
    run = collectives.featured
    if run is not None:
        short = f"{run.collective} {size_text(run.size_bytes)} on {collectives.featured_group}"
        what = (f"{run.collective} ({run.algorithm}) of {size_text(run.size_bytes)} on"
                f" {collectives.featured_group} groups ({run.groups[0]:,} x {run.ranks:,} ranks)")
        from topomodel.analysis.collectives.loads import link_utilization

        utilization = link_utilization(run.timing) if run.time_s else None
        name = fabric.design.name or fabric.design.file
        fig = topology_figure(fabric, link_utilization=utilization,
                              title=f"{name}: link load during {short}")
        out["topology"] = ReviewFigure(
            "topology", f"Network topology, links coloured by their utilization during"
            f" {what}.", figure_bytes(fig, "png"))
        fig = tier_utilization_figure(featured.data["tiers"],
                                      title=f"Link utilization per tier: {short}")
        out["tier-utilization"] = ReviewFigure(
            "tier-utilization", f"Busiest and mean link utilization per tier during {what}.",
            figure_bytes(fig, "png"))
    else:
        fig = topology_figure(fabric)
        out["topology"] = ReviewFigure("topology", "Network topology.",
                                       figure_bytes(fig, "png"))
    if step is not None:  # the step, or its figure already drawn
        out["step"] = step if isinstance(step, ReviewFigure) else _step_figure(step)
    return out

