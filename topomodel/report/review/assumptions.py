"""Every assumption the review's numbers rest on, with its value and reason."""

from __future__ import annotations

import dataclasses
import re
from typing import TYPE_CHECKING, Any

from topomodel.analysis.reliability.goodput import GoodputAssumptions
from topomodel.fabric.tables import Fabric, present_labels

if TYPE_CHECKING:
    from topomodel.analysis.collectives.timing import TimeModel
    from topomodel.analysis.training.step import StepAssumptions
from topomodel.inputs.records import REASONS, field_doc
from topomodel.report.review.document import size_text

_CONSTANTS = (  # (what, unit, module.NAME): named model constants with their reasons
    ("scale-out switch latency when the catalog has none", "s",
     "clos.DEFAULT_SWITCH_LATENCY_S"),
    ("propagation delay", "s/m", "fabric.PROPAGATION_S_PER_M"),
    ("OCS insertion loss", "dB", "linkbudget.OCS_INSERTION_LOSS_DB"),
    ("largest ratio of a cable or module's rate to its link's", "x",
     "cabling.MAX_PART_TO_LINK_RATE"),
    ("routing cost of one hop", "hops", "routing.HOP_COST"),
    ("routing cost of passing through an accelerator", "hops", "routing.TRANSIT_PENALTY_HOPS"),
    ("largest fabric for the exact max-flow bisection", "nodes",
     "bisection.MAX_FLOW_NODE_LIMIT"),
    ("large-fabric threshold of the review", "accelerators", "review.LARGE_FABRIC_ACCELERATORS"),
    ("largest All-to-All routed", "flows", "review.MAX_ALLTOALL_FLOWS"),
    ("power figure of a part", "", "bom.POWER_BASIS"),
)
_MODULES = {"clos": "topomodel.fabric.clos", "fabric": "topomodel.fabric.tables",
            "cabling": "topomodel.fabric.cabling",
            "linkbudget": "topomodel.analysis.linkbudget", "bom": "topomodel.analysis.bom",
            "routing": "topomodel.routing.general", "bisection": "topomodel.analysis.bisection",
            "review": "topomodel.report.review.collect",
            "goodput": "topomodel.analysis.reliability.goodput"}


def _constant(name: str) -> tuple[Any, str]:
    """The value and recorded reason of ``module.NAME`` (:func:`records.documented`)."""
    import importlib

    module, _, attribute = name.partition(".")
    value = getattr(importlib.import_module(_MODULES[module]), attribute)
    return value, REASONS[name]


def review_assumptions(fabric: Fabric, timing: TimeModel,
                       step: StepAssumptions | None, *, routing: str,
                       goodput: GoodputAssumptions | None = None) -> list[dict[str, Any]]:
    """Every assumption behind the results, with its value, unit, where it is defined
    and why: the reasons are data (record fields' ``doc``, the constants'
    :func:`~topomodel.inputs.records.documented` reasons, the catalog's efficiencies)."""
    from topomodel.analysis.collectives.linkrates import (
        efficiency_sources,
        launch_latency_source,
    )
    from topomodel.analysis.collectives.timing import TimeModel

    rows: list[dict[str, Any]] = []

    def add(name: str, value: Any, unit: str, where: str, why: str) -> None:
        rows.append({"name": name, "value": value, "unit": unit, "where": where,
                     "why": _plain_text(why)})

    for key in ("per_message_overhead_s", "hop_latency_s", "protocol"):
        add(key.replace("_", " ").removesuffix(" s"), getattr(timing, key),
            "s" if key.endswith("_s") else "", f"TimeModel.{key}", field_doc(TimeModel, key))
    present = set(present_labels(fabric.links["tier"]))
    for tier, (value, why) in efficiency_sources(fabric, timing).items():
        if tier in present:
            add(f"effective / nominal rate, {tier} links", value, "fraction",
                "linkrates.efficiency_sources", why)
    launch = launch_latency_source(fabric)
    if launch is not None:
        add("launch latency of a collective", launch[0], "s",
            f"catalog systems.{fabric.design.system}.launch_latency", launch[1])
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
    from topomodel.routing.policy import resolve_routing

    applied = resolve_routing(fabric, routing)
    add("routing policy", applied.routing, "", f"--routing {routing}", applied.text)
    sizes, why = _constant("review.REVIEW_SIZES_BYTES")
    add("collective sizes", ", ".join(size_text(s) for s in sizes), "",
        "review.REVIEW_SIZES_BYTES", why)
    for what, unit, name in _CONSTANTS:
        value, why = _constant(name)
        add(what, value, unit, name, why)
    if step is not None:
        from topomodel.analysis.training.step import StepAssumptions

        units = {"dp_bucket_bytes": "bytes", "optimizer_bytes_per_param": "bytes/parameter",
                 "compute_efficiency": "fraction", "hbm_efficiency": "fraction",
                 "comm_sm_share": "fraction", "jitter_cv": "fraction",
                 "hot_expert_factor": "ratio", "straggler_share": "fraction",
                 "straggler_slowdown": "fraction"}
        for f in dataclasses.fields(StepAssumptions):
            shown: Any = getattr(step, f.name)
            if f.name == "time":
                continue
            if shown is None:  # an override left unset: the measured figures apply
                shown = "measured (not overridden)"
            add(f.name.replace("_", " "), shown, units.get(f.name, ""),
                f"StepAssumptions.{f.name}", f.metadata["doc"])
    if goodput is not None:
        suffixes = {"_s": "s", "_Bps": "B/s", "_bytes": "bytes", "_per_param": "bytes/parameter",
                    "_fraction": "fraction", "_systems": "systems"}
        for f in dataclasses.fields(GoodputAssumptions):
            unit = next((u for suffix, u in suffixes.items() if f.name.endswith(suffix)), "")
            add(f.name.replace("_", " "), getattr(goodput, f.name), unit,
                f"GoodputAssumptions.{f.name}", f.metadata["doc"])
        value, why = _constant("goodput.DEGRADED_ROUTING_MAX_WORK")
        add("largest job where degradation is routed", value, "accelerators x links",
            "goodput.DEGRADED_ROUTING_MAX_WORK", why)
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
