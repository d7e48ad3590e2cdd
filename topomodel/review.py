"""The design review: every result a review needs, collected once (``topomodel review``).

:func:`collect_review` builds the report of one design (and, optionally, one model and
parallel layout): what was modeled and the headline numbers, warnings, the topology
(diagram, per-tier table, the fabric as levels), bisection, a table of collectives on
the design's natural groups with per-tier load and hotspots, the training step with its
four walls, the bill of materials, power and optical budget, every assumption with its
value, and the provenance of every catalog figure the design uses.
:mod:`topomodel.review_render` turns it into ``report.html``, ``report.md`` and
``report.json``.

JSON (``schema: topomodel.review``, ``version: 1``) keys:

- ``design`` (``name``, ``file``, ``system``), ``summary`` (headline numbers, units in
  the keys: ``bisection_Bps``, ``injection_per_accelerator_Bps``, ``step_time_s``,
  ``mfu``, ``tokens_per_s``, ``total_power_W``, ...);
- ``build``: the ``topomodel build`` data (tiers, bisection, bom, power, link_budget);
- ``levels``: the fabric as levels (see :func:`topomodel.export.network_levels`);
- ``collectives``: ``sizes_bytes``, ``groups`` (spec: ranks and count), ``rows`` (one per
  collective, group and size: ``time_s``, ``algbw_Bps``, ``busbw_Bps``, ``latency_s``,
  ``bandwidth_s``, ``topology_s``, ``algorithm``), ``skipped`` and ``featured`` (the
  ``topomodel route`` data of the collective the topology diagram shows);
- ``step``: the ``topomodel step`` data, or null without a model;
- ``hotspots``: the featured collective's busiest links;
- ``assumptions``: ``name``, ``value``, ``unit``, ``where``, ``why``;
- ``provenance``: per catalog entry used: ``id``, ``kind``, ``source``, ``provenance``,
  ``figures`` (``key``, ``value``, ``provenance``);
- ``figures``: ``name``, ``file``, ``caption``; ``notes``; ``warnings``.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import io
import math
import re
import tokenize
from collections.abc import Sequence
from dataclasses import dataclass, field
from types import ModuleType
from typing import TYPE_CHECKING, Any

import numpy as np

from topomodel.errors import UsageError
from topomodel.fabric import Fabric, labels, present_labels
from topomodel.goodput import GoodputAssumptions, goodput_section
from topomodel.output import Table
from topomodel.units import format_rate, format_si, format_size

if TYPE_CHECKING:
    from topomodel.catalog import Model
    from topomodel.route_report import CollectiveRun
    from topomodel.step import Layout, StepAssumptions, StepResult
    from topomodel.timing import TimeModel

REVIEW_COLLECTIVES = ("allreduce", "allgather", "reducescatter", "alltoall")
"""The collectives of the review's table (what data-parallel, tensor-parallel and
expert-parallel traffic is made of)."""

REVIEW_SIZES_BYTES = (2**20, 64 * 2**20, 2**30)
"""Message sizes of the collective table (nccl-tests convention): 1 MiB is
latency-bound, 64 MiB about a gradient bucket, 1 GiB bandwidth-bound."""

LARGE_FABRIC_ACCELERATORS = 2048
"""Above this many accelerators the review keeps to :data:`LARGE_FABRIC_SIZES_BYTES` and
:data:`FAST_ALGORITHMS`, and says so: trying every algorithm at every size would take
minutes on a 100k-accelerator fabric (tree and in-network reduction over thousands of
ranks route far more flows than ring or hierarchical)."""

LARGE_FABRIC_SIZES_BYTES = (2**30,)
"""The one size on a large fabric: bandwidth-bound, where the topology shows."""

FAST_ALGORITHMS = {"allreduce": ("ring", "hierarchical"),
                   "allgather": ("ring", "hierarchical"),
                   "reducescatter": ("ring", "hierarchical"),
                   "alltoall": ("direct",)}
"""Algorithms tried on a large fabric (the fastest is kept; NCCL uses ring and
hierarchical at scale for these sizes)."""

MAX_ALLTOALL_FLOWS = 2**20
"""All-to-All on groups with more flows than this (groups x ranks^2) is left out: every
rank sends to every other, and routing a million flows takes about a second per
algorithm on one laptop-class core."""

PAIRWISE_MAX_RANKS = 512
"""Pairwise All-to-All is tried only on groups of at most this many ranks: it runs
ranks - 1 exchange phases, each routed on its own (seconds per size at a thousand
ranks); direct All-to-All, one phase with every pair, is always tried."""

HOTSPOT_COUNT = 10
"""Busiest links listed."""

PROVENANCE_ORDER = ("datasheet", "paper", "secondary", "derived", "unverified", "assumed")


def size_text(size_bytes: float) -> str:
    """A message size as people set it: binary prefixes for whole KiB/MiB/GiB, else
    decimal.

    Examples
    --------
    >>> size_text(64 * 2**20), size_text(2**30), size_text(40e6)
    ('64 MiB', '1 GiB', '40 MB')
    """
    for factor, unit in ((2**30, "GiB"), (2**20, "MiB"), (2**10, "KiB")):
        if size_bytes >= factor and float(size_bytes / factor).is_integer():
            return f"{size_bytes / factor:g} {unit}"
    return format_size(size_bytes)


# --------------------------------------------------------------------- document model


@dataclass(frozen=True)
class Text:
    """A paragraph (plain text; the renderers escape it)."""

    text: str


@dataclass(frozen=True)
class TableBlock:
    """A table with an optional caption under it."""

    table: Table
    caption: str = ""


@dataclass(frozen=True)
class FigureBlock:
    """A figure of :attr:`Review.figures`, by name."""

    name: str


@dataclass(frozen=True)
class Cards:
    """Headline numbers: (label, value, detail) triples."""

    items: tuple[tuple[str, str, str], ...]


@dataclass(frozen=True)
class Callout:
    """A highlighted list: ``warning`` or ``note``."""

    level: str
    items: tuple[str, ...]


Block = Text | TableBlock | FigureBlock | Cards | Callout


@dataclass(frozen=True)
class Section:
    """A titled part of the report; ``id`` is its anchor."""

    id: str
    title: str
    blocks: tuple[Block, ...]


@dataclass(frozen=True)
class ReviewFigure:
    """An image of the report: PNG bytes, and where report.md links it."""

    name: str
    caption: str
    png: bytes

    @property
    def file(self) -> str:
        """Path relative to the report directory."""
        return f"figures/{self.name}.png"


@dataclass(frozen=True)
class Review:
    """A collected design review, ready to render."""

    title: str
    subtitle: str
    sections: tuple[Section, ...]
    figures: dict[str, ReviewFigure]
    data: dict[str, Any]  # report.json, without schema, version and warnings
    warnings: tuple[str, ...]
    headline: tuple[dict[str, str], ...]  # item / value rows the CLI prints


# ------------------------------------------------------------------------ collecting


@dataclass(frozen=True)
class _Collectives:
    rows: list[dict[str, Any]]
    groups: dict[str, dict[str, int]]
    sizes: tuple[float, ...]
    skipped: list[str]
    notes: list[str]
    featured: CollectiveRun | None
    featured_group: str
    warnings: list[str] = field(default_factory=list)


def collect_review(fabric: Fabric, *, model: Model | None = None,
                   layout: Layout | None = None, assumptions: StepAssumptions | None = None,
                   time_model: TimeModel | None = None, routing: str = "ecmp",
                   sizes_bytes: Sequence[float] | None = None,
                   failed: Sequence[str] = (),
                   goodput_assumptions: GoodputAssumptions | None = None) -> Review:
    """Everything the review shows, for ``fabric`` (and ``model`` with ``layout``).

    ``time_model`` times the collectives (default: ``assumptions.time`` with a model,
    else :class:`~topomodel.timing.TimeModel`); ``sizes_bytes`` replaces the default
    collective sizes; ``failed`` names the parts the caller failed (for the warnings);
    ``goodput_assumptions`` are those of the goodput section (with a model).

    Raises
    ------
    UsageError
        If the layout does not fit the fabric or the model.
    """
    from topomodel.bisection import bisection
    from topomodel.build_report import build_report
    from topomodel.step import StepAssumptions, step_report, step_time
    from topomodel.timing import TimeModel

    if model is not None and layout is None:
        raise UsageError("a model needs a layout")
    step_assumptions = assumptions or StepAssumptions()
    timing = time_model or (step_assumptions.time if model is not None else TimeModel())
    design = fabric.design
    name = design.name or design.file
    build = build_report(fabric, bisection_result=bisection(fabric))
    step: StepResult | None = None
    step_rep = None
    goodput: tuple[list[Table], dict[str, Any]] | None = None
    if model is not None and layout is not None:
        step = step_time(fabric, model, layout, step_assumptions, routing=routing)
        step_rep = step_report(step, step_assumptions, design_name=name)
        goodput = goodput_section(fabric, model, layout, step_assumptions, step,
                                  goodput_assumptions or GoodputAssumptions(), routing=routing)
    collectives = _run_collectives(fabric, timing, routing, sizes_bytes)
    featured_rep = None
    if collectives.featured is not None:
        from topomodel.route_report import route_report

        featured_rep = route_report(fabric, collectives.featured, routing=routing,
                                    top=HOTSPOT_COUNT, model=timing)
    warnings = _warnings(fabric, build.warnings, step, layout, featured_rep, failed,
                         collectives)
    levels = _levels(fabric, timing)
    figures = _figures(fabric, collectives, featured_rep, step)
    assumptions_rows = review_assumptions(
        fabric, timing, step_assumptions if step else None, routing=routing,
        goodput=(goodput_assumptions or GoodputAssumptions()) if goodput else None)
    provenance = review_provenance(fabric, model, [] if goodput is None else [
        str(line["rate_entry"]) for line in goodput[1]["components"]])
    good = None if goodput is None else goodput[1]
    headline, summary = _headline(fabric, build.data, step, good)
    data: dict[str, Any] = {
        "design": {"name": design.name, "file": design.file, "system": design.system},
        "summary": summary,
        "build": build.data,
        "levels": levels,
        "collectives": {
            "sizes_bytes": list(collectives.sizes),
            "groups": collectives.groups,
            "rows": collectives.rows,
            "skipped": collectives.skipped,
            "featured": None if featured_rep is None else featured_rep.data,
        },
        "step": None if step_rep is None else step_rep.data,
        "goodput": None if goodput is None else goodput[1],
        "hotspots": [] if featured_rep is None else featured_rep.data["hotspots"],
        "assumptions": assumptions_rows,
        "provenance": provenance,
        "figures": [{"name": f.name, "file": f.file, "caption": f.caption}
                    for f in figures.values()],
        "notes": collectives.notes,
    }
    sections = _sections(fabric, build, collectives, featured_rep, step, step_rep,
                         levels, assumptions_rows, provenance, warnings, goodput)
    subtitle = (f"{fabric.accelerator_count:,} accelerators, design file {design.file}"
                + (f"; model {model.id}" if model is not None else ""))
    return Review(f"Design review: {name}", subtitle, tuple(sections), figures, data,
                  tuple(warnings), tuple(headline))


def natural_groups(fabric: Fabric) -> list[tuple[str, str]]:
    """The design's natural communicator groups, as (spec, network): ``domain`` for the
    scale-up domains, then ``rail`` (one rank per system, by local index) and ``all``
    over the scale-out network, each where its groups have 2 or more ranks and differ
    from the ones before. A fabric that is one scale-up domain has only ``domain``."""
    acc = fabric.accelerators
    domain = fabric.nodes["domain"].to_numpy()[acc]
    domains = len(np.unique(domain)) if len(acc) and (domain >= 0).all() else 0
    out: list[tuple[str, str]] = []
    if domains and len(acc) // domains >= 2:
        out.append(("domain", "scale-up"))
    if fabric.structure["scaleout"] == "none" or domains == 1 or len(acc) < 2:
        return out
    systems = int(fabric.structure["systems"])
    if systems >= 2 and int(fabric.structure["accelerators_per_system"]) >= 2:
        out.append(("rail", "scale-out"))
    out.append(("all", "scale-out"))
    return out


def _run_collectives(fabric: Fabric, timing: TimeModel, routing: str,
                     sizes_bytes: Sequence[float] | None) -> _Collectives:
    """Every review collective on every natural group at every size; the fastest
    algorithm of the ones tried."""
    from topomodel.collectives import ALGORITHMS
    from topomodel.groups import parse_groups
    from topomodel.route_report import run_collective

    large = fabric.accelerator_count > LARGE_FABRIC_ACCELERATORS
    notes: list[str] = []
    if sizes_bytes:
        sizes = tuple(sorted(float(s) for s in sizes_bytes))
    elif large:
        sizes = tuple(float(s) for s in LARGE_FABRIC_SIZES_BYTES)
    else:
        sizes = tuple(float(s) for s in REVIEW_SIZES_BYTES)
    if large:
        notes.append(f"{fabric.accelerator_count:,} accelerators (more than"
                     f" {LARGE_FABRIC_ACCELERATORS:,}): collectives tried with "
                     + "; ".join(f"{c}: {', '.join(a)}" for c, a in FAST_ALGORITHMS.items())
                     + (" at " + ", ".join(size_text(s) for s in sizes)
                        if not sizes_bytes else "") + " only, to keep the review fast")
    groups = natural_groups(fabric)
    rows: list[dict[str, Any]] = []
    skipped: list[str] = []
    group_info: dict[str, dict[str, int]] = {}
    featured: CollectiveRun | None = None
    featured_group = ""
    scale_out = [spec for spec, net in groups if net == "scale-out"]
    feature_spec = ("all" if "all" in scale_out else scale_out[0] if scale_out
                    else groups[0][0] if groups else "")
    for spec, network in groups:
        members = parse_groups(fabric, spec)
        ranks, count = len(members[0]), len(members)
        group_info[spec] = {"ranks": ranks, "groups": count}
        for collective in REVIEW_COLLECTIVES:
            if collective == "alltoall" and count * ranks * ranks > MAX_ALLTOALL_FLOWS:
                skipped.append(f"alltoall on {spec} ({count} x {ranks} ranks:"
                               f" {count * ranks * (ranks - 1):,} flows)")
                continue
            candidates = tuple(
                a for a in (FAST_ALGORITHMS if large else ALGORITHMS)[collective]
                if (a != "pairwise" or ranks <= PAIRWISE_MAX_RANKS)
                # inside one domain, hierarchical is the ring: not routed twice
                and (a != "hierarchical" or network != "scale-up"))
            for size in sizes:
                best = _fastest(fabric, collective, size, spec, candidates, timing, routing,
                                run_collective)
                if best is None:
                    skipped.append(f"{collective} on {spec}: no algorithm applies")
                    break
                rows.append({"collective": collective, "group": spec, "network": network,
                             "ranks": ranks, "groups": count, "size_bytes": size,
                             "algorithm": best.algorithm, "time_s": best.time_s,
                             "algbw_Bps": best.algbw_Bps, "busbw_Bps": best.busbw_Bps,
                             "latency_s": best.timing.latency_s,
                             "bandwidth_s": best.timing.bandwidth_s,
                             "topology_s": best.timing.topology_s})
                if spec == feature_spec and size == sizes[-1] and (
                        featured is None or best.time_s > featured.time_s):
                    featured, featured_group = best, spec
    if skipped:
        notes.append("left out: " + "; ".join(skipped) + f" (more than"
                     f" {MAX_ALLTOALL_FLOWS:,} flows, or no applicable algorithm)")
    return _Collectives(rows, group_info, sizes, skipped, notes, featured, featured_group)


def _fastest(fabric: Fabric, collective: str, size: float, spec: str,
             candidates: Sequence[str], timing: TimeModel, routing: str,
             run: Any) -> CollectiveRun | None:
    best: CollectiveRun | None = None
    for algorithm in candidates:
        try:
            result = run(fabric, collective, size, [spec], algorithm=algorithm,
                         routing=routing, model=timing)
        except UsageError:
            continue  # not applicable to these groups or switches
        if best is None or result.time_s < best.time_s:
            best = result
    return best


def _levels(fabric: Fabric, timing: TimeModel) -> list[dict[str, Any]]:
    from topomodel.export import network_levels

    try:
        levels = network_levels(fabric, timing)
    except UsageError:
        return []
    return [dataclasses.asdict(level) for level in levels]


# ---------------------------------------------------------------------------- warnings


def _warnings(fabric: Fabric, build_warnings: Sequence[str], step: StepResult | None,
              layout: Layout | None, featured: Any, failed: Sequence[str],
              collectives: _Collectives) -> list[str]:
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
    from topomodel.step import rank_groups

    over: dict[str, float] = {}
    for clos in fabric.clos_tiers:
        if clos.name in ("leaf", "spine") and clos.oversubscription > 1 + 1e-9:
            over[clos.name] = max(over.get(clos.name, 1.0), clos.oversubscription)
    if not over or not step.comm:
        return []
    leaf, pod = _scaleout_address(fabric)
    domain = fabric.nodes["domain"].to_numpy()
    ranks = fabric.accelerators[:layout.world]
    grouping = {"dp": "grad", "edp": "expert_grad"}
    out = []
    for comm in step.comm:
        if not comm.spills:
            continue
        members = np.stack(rank_groups(ranks, layout, grouping.get(comm.kind, comm.kind)))
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
    system = nodes["system"].to_numpy()
    local = nodes["local"].to_numpy()
    nics = np.flatnonzero(kind == "nic")
    acc = fabric.accelerators
    leaf = np.full(n, -1)
    if len(nics):
        per_system = int(fabric.structure["accelerators_per_system"])
        per_nics = int(fabric.structure.get("nics_per_system", 0)) or 1
        table = np.full((int(system.max()) + 1, per_nics), -1)
        table[system[nics], local[nics]] = nic_leaf[nics]
        leaf[acc] = table[system[acc], local[acc] * per_nics // per_system]
    pod_of = nodes["pod"].to_numpy()
    pod = np.where(leaf >= 0, pod_of[np.maximum(leaf, 0)], -1)
    return leaf, pod


# ------------------------------------------------------------------------- assumptions


def review_assumptions(fabric: Fabric, timing: TimeModel,
                       step: StepAssumptions | None, *, routing: str,
                       goodput: GoodputAssumptions | None = None) -> list[dict[str, Any]]:
    """Every assumption behind the results, with its value, unit, where it is defined
    and why (from the defining module's comments and docstrings)."""
    from topomodel import bisection, build, linkbudget
    from topomodel import fabric as fabric_module
    from topomodel import routing as rt
    from topomodel import step as step_module
    from topomodel import timing as timing_module
    from topomodel.timing import TimeModel, tier_efficiency

    rows: list[dict[str, Any]] = []

    def add(name: str, value: Any, unit: str, where: str, why: str) -> None:
        rows.append({"name": name, "value": value, "unit": unit, "where": where,
                     "why": _plain_text(why)})

    time_docs = _field_comments(TimeModel)
    module_docs = _constant_docs(timing_module)
    add("per-message software overhead", timing.per_message_overhead_s, "s",
        "TimeModel.per_message_overhead_s",
        module_docs.get("PER_MESSAGE_OVERHEAD_S", time_docs.get("per_message_overhead_s", "")))
    add("latency of a switch with no catalog figure", timing.hop_latency_s, "s",
        "TimeModel.hop_latency_s", module_docs.get("DEFAULT_HOP_LATENCY_S", ""))
    efficiency = tier_efficiency(fabric, timing)
    link_id = fabric.structure.get("scaleup_link")
    present = set(present_labels(fabric.links["tier"]))
    for tier, value in efficiency.items():
        if tier not in present:
            continue
        if tier in timing.efficiency:
            why = "given on the command line (--efficiency)"
        elif tier == "scaleup" and link_id:
            why = f"the catalog's efficiency of {link_id} (1 when it has none)"
        else:
            why = "no figure: links run at their line rate"
        add(f"effective / nominal rate, {tier} links", value, "fraction",
            "timing.tier_efficiency", why)
    build_docs = _constant_docs(build)
    add("scale-out switch latency when the catalog has none", build.DEFAULT_SWITCH_LATENCY_S,
        "s", "build.DEFAULT_SWITCH_LATENCY_S", build_docs.get("DEFAULT_SWITCH_LATENCY_S", ""))
    add("propagation delay", fabric_module.PROPAGATION_S_PER_M, "s/m",
        "fabric.PROPAGATION_S_PER_M", _constant_docs(fabric_module).get(
            "PROPAGATION_S_PER_M", ""))
    add("OCS insertion loss", linkbudget.OCS_INSERTION_LOSS_DB, "dB",
        "linkbudget.OCS_INSERTION_LOSS_DB",
        _constant_docs(linkbudget).get("OCS_INSERTION_LOSS_DB", ""))
    layout = fabric.design.layout
    layout_docs = {"rack_cable": "inside a rack", "row_cable": "system to a leaf in another"
                   " rack", "spine_cable": "leaf to spine", "core_cable": "spine to core",
                   "scaleup_cable": "scale-up links between racks"}
    for key, what in layout_docs.items():
        add(f"cable length, {what}", getattr(layout, key), "m", f"design layout.{key}",
            "the design's layout (default when the file does not set it); decides cable"
            " and optic types and propagation")
    add("mated connector pairs per optical channel", layout.connectors, "count",
        "design layout.connectors", "optical link budget")
    add("splices per optical channel", layout.splices, "count", "design layout.splices",
        "optical link budget")
    add("routing policy", routing, "", "--routing", {
        "ecmp": "equal-cost paths split evenly", "hash": "one path per flow by seeded hash",
        "dmodk": "deterministic up/down (d-mod-k)"}.get(routing, ""))
    route_docs = _constant_docs(rt)
    add("routing cost of one hop", rt.HOP_COST, "hops", "routing.HOP_COST",
        route_docs.get("HOP_COST", ""))
    add("routing cost of passing through an accelerator", rt.TRANSIT_PENALTY_HOPS, "hops",
        "routing.TRANSIT_PENALTY_HOPS", route_docs.get("TRANSIT_PENALTY_HOPS", ""))
    add("largest fabric for the exact max-flow bisection", bisection.MAX_FLOW_NODE_LIMIT,
        "nodes", "bisection.MAX_FLOW_NODE_LIMIT",
        _constant_docs(bisection).get("MAX_FLOW_NODE_LIMIT", ""))
    review_docs = _constant_docs(_this_module())
    add("collective sizes", ", ".join(size_text(s) for s in REVIEW_SIZES_BYTES), "",
        "review.REVIEW_SIZES_BYTES", review_docs.get("REVIEW_SIZES_BYTES", ""))
    add("large-fabric threshold of the review", LARGE_FABRIC_ACCELERATORS, "accelerators",
        "review.LARGE_FABRIC_ACCELERATORS", review_docs.get("LARGE_FABRIC_ACCELERATORS", ""))
    add("largest All-to-All routed", MAX_ALLTOALL_FLOWS, "flows",
        "review.MAX_ALLTOALL_FLOWS", review_docs.get("MAX_ALLTOALL_FLOWS", ""))
    add("largest group for pairwise All-to-All", PAIRWISE_MAX_RANKS, "ranks",
        "review.PAIRWISE_MAX_RANKS", review_docs.get("PAIRWISE_MAX_RANKS", ""))
    if step is not None:
        from topomodel.step import StepAssumptions

        comments = _field_comments(StepAssumptions)
        units = {"dp_bucket_bytes": "bytes", "optimizer_bytes_per_param": "bytes/parameter",
                 "compute_efficiency": "fraction", "jitter_cv": "fraction",
                 "hot_expert_factor": "ratio", "straggler_share": "fraction",
                 "straggler_slowdown": "fraction"}
        for f in dataclasses.fields(StepAssumptions):
            value = getattr(step, f.name)
            if f.name == "time":
                continue
            if isinstance(value, dict):
                overlap_notes = _dict_comments(step_module.StepAssumptions, f.name)
                for key, item in value.items():
                    add(f"{f.name} {key}", item, "fraction", f"StepAssumptions.{f.name}",
                        overlap_notes.get(key, comments.get(f.name, "")))
                continue
            add(f.name.replace("_", " "), value, units.get(f.name, ""),
                f"StepAssumptions.{f.name}", comments.get(f.name, ""))
    if goodput is not None:
        from topomodel import goodput as goodput_module

        comments = _field_comments(GoodputAssumptions)
        suffixes = {"_s": "s", "_Bps": "B/s", "_bytes": "bytes", "_per_param": "bytes/parameter",
                    "_fraction": "fraction", "_systems": "systems"}
        for f in dataclasses.fields(GoodputAssumptions):
            unit = next((u for suffix, u in suffixes.items() if f.name.endswith(suffix)), "")
            add(f.name.replace("_", " "), getattr(goodput, f.name), unit,
                f"GoodputAssumptions.{f.name}", comments.get(f.name, ""))
        add("largest job where degradation is routed",
            goodput_module.DEGRADED_ROUTING_MAX_WORK, "accelerators x links",
            "goodput.DEGRADED_ROUTING_MAX_WORK",
            _constant_docs(goodput_module).get("DEGRADED_ROUTING_MAX_WORK", ""))
    return rows


def _plain_text(text: str) -> str:
    r"""A docstring or comment as one line of plain text (reST roles and quotes removed).

    Examples
    --------
    >>> _plain_text("Keeps to :data:`SIZES` and ``fast``\n   algorithms.")
    'Keeps to SIZES and fast algorithms.'
    """
    text = re.sub(r":\w+:`~?([^`]+)`", r"\1", text)
    return " ".join(text.replace("``", "").replace("`", "").split())


def _this_module() -> ModuleType:
    import sys

    return sys.modules[__name__]


def _constant_docs(module: ModuleType) -> dict[str, str]:
    """Module-level ``NAME = value`` followed by a string: that string, by name; or the
    comment at the end of the assignment's line (nothing where the source is not
    shipped)."""
    source = _source(module)
    tree = ast.parse(source)
    comments = _line_comments(source)
    out: dict[str, str] = {}
    body = tree.body
    for index, node in enumerate(body):
        if not isinstance(node, ast.Assign) or len(node.targets) != 1:
            continue
        target = node.targets[0]
        if not isinstance(target, ast.Name):
            continue
        following = body[index + 1] if index + 1 < len(body) else None
        if (isinstance(following, ast.Expr) and isinstance(following.value, ast.Constant)
                and isinstance(following.value.value, str)):
            out[target.id] = following.value.value
        elif node.end_lineno in comments:
            out[target.id] = comments[node.end_lineno]
    return out


def _source(thing: ModuleType | type) -> str:
    """Source text, or an empty module where it is not available (a build without .py
    files): the reasons are then left blank, the values are still listed."""
    try:
        return inspect.getsource(thing)
    except (OSError, TypeError):
        return "class _:\n    pass\n" if isinstance(thing, type) else ""


def _line_comments(source: str) -> dict[int, str]:
    """Comments by line number."""
    out: dict[int, str] = {}
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            out[token.start[0]] = token.string.lstrip("#").strip()
    return out


def _field_comments(cls: type) -> dict[str, str]:
    """The comment at the end of each field's line of a dataclass."""
    source = _source(cls)
    comments = _line_comments(source)
    out: dict[str, str] = {}
    for node in ast.parse(source).body[0].body:  # type: ignore[attr-defined]
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            text = comments.get(node.lineno) or comments.get(node.end_lineno or node.lineno)
            if text:
                out[node.target.id] = text
    return out


def _dict_comments(cls: type, name: str) -> dict[str, str]:
    """Comments on the keys of a dict default (``"tp": 0.0,  # why``) of one field."""
    source = _source(cls)
    comments = _line_comments(source)
    out: dict[str, str] = {}
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and (
                node.target.id == name):
            for inner in ast.walk(node):
                if isinstance(inner, ast.Dict):
                    for key in inner.keys:
                        if isinstance(key, ast.Constant) and key.lineno in comments:
                            out[str(key.value)] = comments[key.lineno]
    return out


# -------------------------------------------------------------------------- provenance


def review_provenance(fabric: Fabric, model: Model | None = None,
                      more: Sequence[str] = ()) -> list[dict[str, Any]]:
    """Every catalog entry the design uses (and the model, and the ``more`` ids such as
    the failure rates of the goodput section), with each figure's value and provenance
    (datasheet, paper, secondary, derived, unverified, assumed)."""
    from topomodel.catalog import Optic, System
    from topomodel.catalog_views import catalog_show

    catalog = fabric.catalog
    s = fabric.structure
    system = catalog.get(fabric.design.system, System)
    ids: list[str] = [system.id]
    ids += sorted(set(present_labels(fabric.nodes["model"])) - {system.id})
    ids += [str(s[k]) for k in ("scaleup_link", "host_link") if s.get(k)]
    optics = sorted(set(present_labels(fabric.links["optic"])) - {""})
    ids += optics
    ids += sorted({o.fibre for o in (catalog.get(i, Optic) for i in optics) if o.fibre})
    if model is not None:
        ids.append(model.id)
    ids += more
    out = []
    for ident in dict.fromkeys(ids):
        entry = catalog.entries[ident]
        sheet = catalog_show(catalog, ident)
        figures = [{"key": r["key"], "value": r["value"], "provenance": r["provenance"]}
                   for r in sheet.tables[1].rows]
        out.append({"id": ident, "kind": entry.kind, "name": entry.title,
                    "source": entry.source, "provenance": entry.provenance,
                    "file": entry.file, "line": entry.line, "figures": figures})
    return out


# --------------------------------------------------------------------------- figures


def _figures(fabric: Fabric, collectives: _Collectives, featured: Any,
             step: StepResult | None) -> dict[str, ReviewFigure]:
    from topomodel.draw import (
        figure_bytes,
        step_figure,
        tier_utilisation_figure,
        topology_figure,
    )

    out: dict[str, ReviewFigure] = {}
    run = collectives.featured
    if run is not None:
        short = f"{run.collective} {size_text(run.size_bytes)} on {collectives.featured_group}"
        what = (f"{run.collective} ({run.algorithm}) of {size_text(run.size_bytes)} on"
                f" {collectives.featured_group} groups ({run.groups[0]:,} x {run.ranks:,} ranks)")
        utilisation = run.timing.link_busy_s / run.time_s if run.time_s else None
        name = fabric.design.name or fabric.design.file
        fig = topology_figure(fabric, link_utilisation=utilisation,
                              title=f"{name}: link load during {short}")
        out["topology"] = ReviewFigure(
            "topology", f"Network topology, links coloured by their utilisation during"
            f" {what}.", figure_bytes(fig, "png"))
        fig = tier_utilisation_figure(featured.data["tiers"],
                                      title=f"Link utilisation per tier: {short}")
        out["tier-utilisation"] = ReviewFigure(
            "tier-utilisation", f"Busiest and mean link utilisation per tier during {what}.",
            figure_bytes(fig, "png"))
    else:
        fig = topology_figure(fabric)
        out["topology"] = ReviewFigure("topology", "Network topology.",
                                       figure_bytes(fig, "png"))
    if step is not None:
        out["step"] = ReviewFigure(
            "step", "One training step: compute, pipeline bubble, exposed communication"
            " and wait, and the exposed part split into the four walls.",
            figure_bytes(step_figure(step), "png"))
    return out


# ----------------------------------------------------------------------- the sections


def _headline(fabric: Fabric, build: dict[str, Any], step: StepResult | None,
              goodput: dict[str, Any] | None) -> tuple[list[dict[str, str]], dict[str, Any]]:
    cut = build["bisection"]
    power = build["power"]
    summary: dict[str, Any] = {
        "accelerators": fabric.accelerator_count,
        "bisection_Bps": cut["bisection_Bps"],
        "bisection_ratio": cut["ratio"],
        "injection_per_accelerator_Bps": cut["injection_Bps"],
        "total_power_W": power["total_W"],
        "network_power_W": power["network_W"],
        "network_power_per_accelerator_W": power["network_W_per_accelerator"],
        "optical_links": sum(b["links"] for b in build["link_budget"]),
        "optical_links_not_closing": sum(b["links"] for b in build["link_budget"]
                                         if b["closes"] is False),
    }
    rows = [
        {"item": "accelerators", "value": f"{fabric.accelerator_count:,}"},
        {"item": "bisection (per direction)", "value": format_rate(cut["bisection_Bps"])
         + (f"; {cut['ratio']:.0%} of full bisection" if math.isfinite(cut["ratio"])
            else "")},
        {"item": "injection per accelerator", "value": format_rate(cut["injection_Bps"])},
        {"item": "power (known parts)", "value": f"{format_si(power['total_W'], 'W')}"
         f" total, {format_si(power['network_W'], 'W')} network"},
    ]
    if step is not None:
        summary.update(step_time_s=step.step_time_s, mfu=step.mfu,
                       tokens_per_s=step.tokens_per_s, comm_share=step.comm_share)
        rows += [
            {"item": "step time", "value": format_si(step.step_time_s, "s")},
            {"item": "MFU", "value": f"{step.mfu:.1%}"},
            {"item": "tokens/s", "value": f"{step.tokens_per_s:,.0f}"},
            {"item": "exposed communication + wait", "value": f"{step.comm_share:.1%}"
             " of the step"},
        ]
    if goodput is not None:
        summary.update({k: goodput[k] for k in (
            "interruptions_per_day", "effective_time_fraction", "goodput_tokens_per_s")})
        rows.append({"item": "goodput", "value": f"{goodput['goodput_tokens_per_s']:,.0f}"
                     f" tokens/s ({goodput['interruptions_per_day']:.3g} interruptions/day,"
                     f" {goodput['effective_time_fraction']:.1%} effective time)"})
    return rows, summary


def _sections(fabric: Fabric, build: Any, collectives: _Collectives, featured: Any,
              step: StepResult | None, step_rep: Any, levels: list[dict[str, Any]],
              assumptions: list[dict[str, Any]], provenance: list[dict[str, Any]],
              warnings: list[str],
              goodput: tuple[list[Table], dict[str, Any]] | None) -> list[Section]:
    tables = {t.title: t for t in build.tables}
    return [
        _summary_section(fabric, build, step, warnings, tables["Summary"],
                         None if goodput is None else goodput[1]),
        Section("warnings", "Warnings", (
            Callout("warning", tuple(warnings)) if warnings
            else Text("No warnings: every optical link closes, no part has failed, and no"
                      " step traffic is flagged."),)),
        _topology_section(fabric, build, levels, tables["Tiers"]),
        _bisection_section(build),
        _collectives_section(collectives, featured),
        _step_section(step, step_rep),
        *([] if goodput is None else [Section("goodput", "Goodput under failures", tuple(
            TableBlock(t) for t in goodput[0]))]),
        _materials_section(build, tables),
        _assumptions_section(assumptions),
        _provenance_section(provenance),
    ]


def _summary_section(fabric: Fabric, build: Any, step: StepResult | None,
                     warnings: list[str], summary: Table,
                     goodput: dict[str, Any] | None) -> Section:
    data = build.data
    cut = data["bisection"]
    power = data["power"]
    design = fabric.design
    from topomodel.catalog import Accelerator, System

    system = fabric.catalog.get(design.system, System)
    accelerator = fabric.catalog.get(system.accelerator, Accelerator)
    cards: list[tuple[str, str, str]] = [
        ("accelerators", f"{fabric.accelerator_count:,}",
         f"{accelerator.title} in {fabric.structure['systems']:,} x {system.title}"),
        ("bisection", format_si(cut["bisection_Bps"], "B/s"),
         f"per direction; {cut['ratio']:.0%} of full bisection"
         if math.isfinite(cut["ratio"]) else "per direction"),
        ("injection", format_si(cut["injection_Bps"], "B/s"),
         f"per accelerator ({format_si(cut['injection_Bps'] * 8, 'b/s')})"),
        ("power", format_si(power["total_W"], "W"),
         f"{format_si(power['network_W_per_accelerator'], 'W')} network per accelerator"),
    ]
    if step is not None:
        cards += [("step time", format_si(step.step_time_s, "s"),
                   f"{step.comm_share:.1%} exposed communication + wait"),
                  ("MFU", f"{step.mfu:.1%}", f"{step.tokens_per_s:,.0f} tokens/s")]
    if goodput is not None:
        cards.append(("effective time", f"{goodput['effective_time_fraction']:.1%}",
                      f"{goodput['interruptions_per_day']:.3g} interruptions/day"))
    cards.append(("warnings", str(len(warnings)), "see below" if warnings else "none"))
    rows = list(summary.rows)
    rows.insert(1, {"item": "design file", "value": design.file})
    rows.insert(2, {"item": "system", "value": f"{system.title} ({system.id}):"
                    f" {system.accelerators} x {accelerator.title}"})
    if step is not None:
        lay = step.layout
        rows.append({"item": "model", "value": step.model})
        rows.append({"item": "layout", "value": f"TP {lay.tp} x PP {lay.pp} x DP {lay.dp}"
                     f" x CP {lay.cp}" + (f", EP {lay.ep}" if lay.ep > 1 else "")
                     + f" ({lay.world:,} accelerators, order {lay.order})"})
    else:
        rows.append({"item": "model", "value": "none given (run with --model for the"
                     " training step)"})
    blocks: list[Block] = [Cards(tuple(cards)), TableBlock(Table("What was modeled", rows))]
    return Section("summary", "Summary", tuple(blocks))


def _topology_section(fabric: Fabric, build: Any, levels: list[dict[str, Any]],
                      tiers: Table) -> Section:
    blocks: list[Block] = [FigureBlock("topology"),
                           TableBlock(Table("Tiers", tiers.rows),
                                      "Capacities are per direction; down:up is the"
                                      " oversubscription of the tier's switches.")]
    if levels:
        rows = [{"level": lv["name"], "network": lv["network"], "building block":
                 lv["topology"], "members": lv["npus"], "reach": f"{lv['reach']:,}",
                 "per accelerator (per dir)": format_rate(lv["injection_Bps"]),
                 "latency": format_si(lv["latency_s"], "s"),
                 "oversubscription": f"{lv['oversubscription']:.3g}:1"} for lv in levels]
        blocks.append(TableBlock(Table("The fabric as levels", rows),
                                 "How dimension-based simulators (ASTRA-sim, Calculon) see"
                                 " it: topomodel export --to astra-sim|calculon."))
    return Section("topology", "Topology and tiers", tuple(blocks))


def _bisection_section(build: Any) -> Section:
    cut = build.data["bisection"]
    rows = [
        {"item": "bisection (per direction)", "value": format_rate(cut["bisection_Bps"])},
        {"item": "per accelerator of the smaller half",
         "value": format_rate(cut["per_accelerator_Bps"])},
        {"item": "injection per accelerator", "value": format_rate(cut["injection_Bps"])},
        {"item": "ratio (1 = full bisection)", "value": f"{cut['ratio']:.3g}"},
        {"item": "method", "value": cut["method"]},
    ]
    if cut["closed_form_Bps"] is not None:
        rows.append({"item": "closed form", "value": format_rate(cut["closed_form_Bps"])})
    if cut["max_flow_Bps"] is not None:
        rows.append({"item": "max-flow", "value": format_rate(cut["max_flow_Bps"])})
    if cut["note"]:
        rows.append({"item": "note", "value": cut["note"]})
    return Section("bisection", "Bisection", (TableBlock(Table("Bisection", rows)),))


def _collectives_section(collectives: _Collectives, featured: Any) -> Section:
    groups = ", ".join(f"{spec} ({info['groups']:,} x {info['ranks']:,} ranks)"
                       for spec, info in collectives.groups.items())
    blocks: list[Block] = [Text(
        f"Each collective runs on every group of a set at once ({groups}), at "
        + ", ".join(size_text(s) for s in collectives.sizes)
        + " (nccl-tests size convention), with the fastest algorithm that applies. algbw"
        " = size / time; busbw = algbw x the nccl-tests factor. The time splits into"
        " latency, the bandwidth an ideal non-blocking fabric would need, and topology"
        " (congestion, oversubscription, slower tiers).")]
    if collectives.notes:
        blocks.append(Callout("note", tuple(collectives.notes)))
    rows = [{"collective": r["collective"], "group": r["group"],
             "groups x ranks": f"{r['groups']:,} x {r['ranks']:,}",
             "size": size_text(r["size_bytes"]),
             "algorithm": r["algorithm"], "time": format_si(r["time_s"], "s"),
             "algbw": format_si(r["algbw_Bps"], "B/s"),
             "busbw": format_si(r["busbw_Bps"], "B/s"),
             "latency": format_si(r["latency_s"], "s"),
             "bandwidth": format_si(r["bandwidth_s"], "s"),
             "topology": format_si(r["topology_s"], "s")} for r in collectives.rows]
    blocks.append(TableBlock(Table("Collectives", rows)))
    if featured is not None:
        data = featured.data
        tiers = [{"tier": t["name"], "bytes": format_size(t["bytes"]),
                  "capacity (per dir)": format_rate(t["capacity_Bps"]),
                  "peak util": f"{t['peak_utilization']:.0%}",
                  "mean util": f"{t['mean_utilization']:.0%}",
                  "share of time": f"{t['time_share']:.0%}"} for t in data["tiers"]]
        hot = [{"link": h["link"], "tier": h["tier"], "bytes": format_size(h["bytes"]),
                "utilization": f"{h['utilization']:.0%}"} for h in data["hotspots"]]
        title = (f"{data['collective']} ({data['algorithm']}) of"
                 f" {size_text(data['size_bytes'])} on {collectives.featured_group}")
        blocks += [FigureBlock("tier-utilisation"),
                   TableBlock(Table(f"Per-tier load: {title}", tiers)),
                   TableBlock(Table(f"Hotspots: {title}", hot),
                              "Utilization = busy time / collective time.")]
    return Section("collectives", "Collectives and hotspots", tuple(blocks))


def _step_section(step: StepResult | None, step_rep: Any) -> Section:
    if step is None or step_rep is None:
        return Section("step", "Training step", (Text(
            "No model was given. Run the review with --model (and a layout: --tp, --pp,"
            " --ep, --cp; DP fills the fabric) to add the step breakdown and the four"
            " walls."),))
    blocks: list[Block] = [FigureBlock("step")]
    blocks += [TableBlock(t) for t in step_rep.tables]
    return Section("step", "Training step and the four walls", tuple(blocks))


def _materials_section(build: Any, tables: dict[str, Table]) -> Section:
    power = build.data["power"]
    rows = [{"item": "accelerators", "power": format_si(power["accelerators_W"], "W")},
            {"item": "network (switches, NICs, cables, optics)",
             "power": format_si(power["network_W"], "W")},
            {"item": "  of which cables and optics", "power": format_si(power["optics_W"], "W")},
            {"item": "total", "power": format_si(power["total_W"], "W")},
            {"item": "network per accelerator",
             "power": format_si(power["network_W_per_accelerator"], "W")}]
    blocks: list[Block] = [TableBlock(tables["Bill of materials"]),
                           TableBlock(Table("Power", rows),
                                      "Parts without a power figure count as unknown, not"
                                      " zero" + (": " + ", ".join(power["unknown"])
                                                 if power["unknown"] else ".")),
                           TableBlock(tables["Optical link budget"]) if tables[
                               "Optical link budget"].rows else Text(
                               "No optical links: nothing to budget.")]
    return Section("materials", "Bill of materials, power and optics", tuple(blocks))


def _assumptions_section(assumptions: list[dict[str, Any]]) -> Section:
    rows = [{"assumption": a["name"], "value": _value_text(a["value"], a["unit"]),
             "defined in": a["where"], "why": a["why"]} for a in assumptions]
    return Section("assumptions", "Assumptions", (
        Text("Every modelling assumption behind these results, with the value used and the"
             " reason its definition gives."),
        TableBlock(Table("Assumptions", rows))))


def _value_text(value: Any, unit: str) -> str:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return str(value)
    if unit in ("s", "W", "m", "bytes"):
        return format_si(float(value), {"bytes": "B"}.get(unit, unit))
    if unit in ("fraction", "count"):
        return f"{value:g}"
    return f"{value:,}" + (f" {unit}" if unit else "") if isinstance(value, int) else (
        f"{value:g}" + (f" {unit}" if unit else ""))


def _provenance_section(provenance: list[dict[str, Any]]) -> Section:
    counts: dict[str, int] = {}
    for entry in provenance:
        for fig in entry["figures"]:
            counts[fig["provenance"]] = counts.get(fig["provenance"], 0) + 1
    total = sum(counts.values())
    said = ", ".join(f"{counts[p]} {p}" for p in PROVENANCE_ORDER if p in counts)
    figures = [{"entry": e["id"], "figure": f["key"], "value": f["value"],
                "provenance": f["provenance"]} for e in provenance for f in e["figures"]]
    sources = [{"entry": e["id"], "kind": e["kind"], "name": e["name"],
                "provenance": e["provenance"], "source": e["source"]} for e in provenance]
    return Section("provenance", "Provenance of the inputs", (
        Text(f"{total} catalog figures from {len(provenance)} entries feed this review:"
             f" {said}."),
        TableBlock(Table("Figures", figures)),
        TableBlock(Table("Sources", sources))))
