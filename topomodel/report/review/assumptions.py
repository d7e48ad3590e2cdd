"""Every assumption the review's numbers rest on, with its value and reason."""

from __future__ import annotations

import ast
import dataclasses
import inspect
import io
import re
import tokenize
from types import ModuleType
from typing import TYPE_CHECKING, Any

from topomodel.analysis.goodput import GoodputAssumptions
from topomodel.fabric.tables import Fabric, present_labels

if TYPE_CHECKING:
    from topomodel.analysis.step import StepAssumptions
    from topomodel.analysis.timing import TimeModel
from topomodel.records import field_doc
from topomodel.report.review.collect import (
    LARGE_FABRIC_ACCELERATORS,
    MAX_ALLTOALL_FLOWS,
    PAIRWISE_MAX_RANKS,
    REVIEW_SIZES_BYTES,
)
from topomodel.report.review.document import size_text


def review_assumptions(fabric: Fabric, timing: TimeModel,
                       step: StepAssumptions | None, *, routing: str,
                       goodput: GoodputAssumptions | None = None) -> list[dict[str, Any]]:
    """Every assumption behind the results, with its value, unit, where it is defined
    and why (from the defining module's comments and docstrings)."""
    from topomodel.analysis import bisection, linkbudget
    from topomodel.analysis.timing import TimeModel, tier_efficiency
    from topomodel.fabric import build
    from topomodel.fabric import tables as fabric_module
    from topomodel.routing import general as rt

    rows: list[dict[str, Any]] = []

    def add(name: str, value: Any, unit: str, where: str, why: str) -> None:
        rows.append({"name": name, "value": value, "unit": unit, "where": where,
                     "why": _plain_text(why)})

    add("per-message software overhead", timing.per_message_overhead_s, "s",
        "TimeModel.per_message_overhead_s", field_doc(TimeModel, "per_message_overhead_s"))
    add("latency of a switch with no catalog figure", timing.hop_latency_s, "s",
        "TimeModel.hop_latency_s", field_doc(TimeModel, "hop_latency_s"))
    efficiency = tier_efficiency(fabric, timing)
    link_id = fabric.structure.scaleup.link
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
        add(f"cable length, {what}", getattr(layout, f"{key}_m"), "m", f"design layout.{key}",
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
        from topomodel.analysis.step import OVERLAP_REASONS, StepAssumptions

        units = {"dp_bucket_bytes": "bytes", "optimizer_bytes_per_param": "bytes/parameter",
                 "compute_efficiency": "fraction", "jitter_cv": "fraction",
                 "hot_expert_factor": "ratio", "straggler_share": "fraction",
                 "straggler_slowdown": "fraction"}
        for f in dataclasses.fields(StepAssumptions):
            value = getattr(step, f.name)
            if f.name == "time":
                continue
            if isinstance(value, dict):
                for key, item in value.items():
                    add(f"{f.name} {key}", item, "fraction", f"StepAssumptions.{f.name}",
                        OVERLAP_REASONS[key][1] if key in OVERLAP_REASONS else f.metadata["doc"])
                continue
            add(f.name.replace("_", " "), value, units.get(f.name, ""),
                f"StepAssumptions.{f.name}", f.metadata["doc"])
    if goodput is not None:
        from topomodel.analysis import goodput as goodput_module

        suffixes = {"_s": "s", "_Bps": "B/s", "_bytes": "bytes", "_per_param": "bytes/parameter",
                    "_fraction": "fraction", "_systems": "systems"}
        for f in dataclasses.fields(GoodputAssumptions):
            unit = next((u for suffix, u in suffixes.items() if f.name.endswith(suffix)), "")
            add(f.name.replace("_", " "), getattr(goodput, f.name), unit,
                f"GoodputAssumptions.{f.name}", f.metadata["doc"])
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
