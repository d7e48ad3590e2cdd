"""The ``topomodel build`` report: tiers, bisection, bill of materials, power, optics.

JSON (``schema: topomodel.build``, ``version: 1``) keys:

- ``design``, ``accelerators``, ``nodes`` (count by node tier), ``links`` (cables);
- ``tiers``: one object per link tier, from the accelerators outwards: ``name``,
  ``switch_model``, ``switches``, ``links``, ``ports_used``, ``ports_free``,
  ``capacity_Bps`` (bytes/s) and ``capacity_bits_per_s`` (the same in bits/s), one direction,
  all links,
  ``per_accelerator_Bps``, ``oversubscription`` (down/up bandwidth; 0 for a top tier);
- ``bisection``: ``bisection_Bps``, ``method``, ``closed_form_Bps``, ``max_flow_Bps``,
  ``per_accelerator_Bps``, ``injection_Bps``, ``ratio``, ``note``;
- ``bom``: lines with ``category``, ``tier``, ``model``, ``count``, ``unit_power_W``,
  ``power_W``, ``power_basis`` (max, typical, passive, unknown), ``in_system`` (covered
  by the system's own figure), ``energy_pJ_per_bit``, ``provenance``,
  ``unit_price_USD``, ``price_USD``, ``price_low_USD``, ``price_high_USD``,
  ``price_provenance``;
- ``power``: ``total_W`` (a total only when ``complete``; else a partial sum and
  ``unknown`` names the parts without a figure), ``typical_only``, ``systems_W``,
  ``accelerators_W``, ``network_W`` (every network part at its own figure),
  ``network_in_systems_W``, ``switches_W``, ``nics_W``, ``scaleup_switches_W``,
  ``optics_W``, ``total_W_per_accelerator``, ``network_W_per_accelerator``, ``tiers``
  (``tier``, ``power_W``, ``parts``, ``in_system``, ``complete``, ``capex_USD``,
  ``capex_low_USD``, ``capex_high_USD``, ``capex_complete``), ``capex_USD`` (null
  when no part has a price), ``capex_complete``, ``unpriced``, ``capex_low_USD``,
  ``capex_high_USD``, ``network_capex_USD``, ``assumed_prices``;
- ``link_budget``: per optical link class, ``channel_loss_dB``, ``max_channel_loss_dB``,
  ``margin_dB``, ``closes``;
- ``growth``: for a fabric smaller than its declared scalable unit, how it grows;
- ``failure_domains`` (with ``--failure-domains``): one object per domain kind, as
  :func:`~topomodel.analysis.reliability.blast_radius.blast_radius_records` gives it
  (``kind``, ``domains``, ``systems``, ``accelerators_stopped``, ``job_stopped``,
  ``scaleout_removed_Bps``, ``bisection_Bps``, ``TIER_capacity_left``,
  ``failures_per_day``, ``repair_s``, ...);
- ``warnings``: links that do not close, failed parts, an oversubscription realised
  off the asked ratio (both named; realised is over all switches of the tier), a
  partial power or capex sum.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from topomodel.analysis.bisection import Bisection, bisection
from topomodel.analysis.bom import bill_of_materials, power_summary
from topomodel.analysis.linkbudget import link_budgets
from topomodel.analysis.reliability.blast_radius import (
    BlastRadius,
    blast_radius_records,
    worst,
)
from topomodel.analysis.tiers import tier_summaries
from topomodel.fabric.build import structure_dict
from topomodel.fabric.scaleout import scaleout_kind
from topomodel.fabric.scaleup import scaleup_kind
from topomodel.fabric.tables import Fabric
from topomodel.inputs.units import format_rate, format_si
from topomodel.report.bisection import (
    bisection_text,
    growth_text,
    oversubscription_warnings,
    ratio_text,
)
from topomodel.report.output import Report, Table
from topomodel.report.power import bom_rows, power_warnings, summary_rows, tier_rows


def build_report(fabric: Fabric, *, bisection_result: Bisection | None = None,
                 failure_domains: Sequence[BlastRadius] | None = None) -> Report:
    """Everything ``topomodel build`` prints, as a :class:`~topomodel.report.output.Report`
    (with ``failure_domains``, the blast-radius rows of ``--failure-domains``)."""
    design = fabric.design
    tiers = tier_summaries(fabric)
    cut = bisection_result or bisection(fabric)
    bom = bill_of_materials(fabric)
    power = power_summary(bom, fabric.accelerator_count)
    budgets = link_budgets(fabric)
    power_data = dataclasses.asdict(power)
    warnings = _warnings(fabric, budgets) + power_warnings(power_data)
    node_counts = {str(k): int(v) for k, v in
                   fabric.nodes.groupby("tier", observed=True).size().items()}
    data: dict[str, Any] = {
        "design": {"name": design.name, "file": design.file, "system": design.system},
        "accelerators": fabric.accelerator_count,
        "nodes": node_counts,
        "links": int(fabric.links["cables"].sum() // 2),
        "structure": structure_dict(fabric.structure),
        "tiers": [{**dataclasses.asdict(t), "capacity_bits_per_s": t.capacity_Bps * 8}
                  for t in tiers],
        "bisection": dataclasses.asdict(cut),
        "bom": [dataclasses.asdict(line) for line in bom],
        "power": power_data,
        "link_budget": [dataclasses.asdict(b) for b in budgets],
    }
    summary = [
        {"item": "design", "value": design.name or design.file},
        {"item": "accelerators", "value": f"{fabric.accelerator_count:,}"},
        {"item": "scale-up", "value": _scaleup_text(fabric)},
        {"item": "scale-out", "value": _scaleout_text(fabric)},
        {"item": "bisection", "value": bisection_text(data["bisection"])},
        {"item": "bisection method", "value": cut.method + (f"; {cut.note}" if cut.note
                                                             else "")},
        *summary_rows(power_data),
    ]
    so = fabric.structure.scaleout
    if so.kind != "none" and so.unit_systems:
        growth = growth_text(fabric)
        data["growth"] = growth
        summary.insert(4, {"item": "scalable unit", "value": f"{so.unit_systems:,} systems"
                           + ("" if design.scaleout.unit else " (default: the unit that"
                              " comes closest to the asked oversubscription)")
                           + (f"; the fabric has {growth}" if growth else "")})
    link_tier_rows = [{
        "tier": t.name, "switch": t.switch_model or "-", "switches": t.switches,
        "links": t.links, "ports used": t.ports_used, "ports free": t.ports_free,
        "per accelerator (per dir)": format_rate(t.per_accelerator_Bps),
        "total (per dir)": format_rate(t.capacity_Bps),
        "down:up": ratio_text(t.oversubscription)} for t in tiers]
    budget_rows = [{
        "tier": b.tier, "module": b.optic, "length": format_si(b.length_m, "m"),
        "links": b.links, "loss dB": "" if b.channel_loss_dB is None
        else f"{b.channel_loss_dB:.2f}",
        "max dB": "" if b.max_channel_loss_dB is None else f"{b.max_channel_loss_dB:g}",
        "margin dB": "" if b.margin_dB is None else f"{b.margin_dB:.2f}",
        "closes": {True: "yes", False: "NO", None: "reach only"}[b.closes],
        "note": b.note} for b in budgets]
    tables = [Table("Summary", summary, [summary_record(data)]),
              Table("Tiers", link_tier_rows, data["tiers"]),
              Table("Bill of materials", bom_rows(data["bom"]), data["bom"], name="bom"),
              Table("Power by tier", tier_rows(power_data), power_data["tiers"],
                    name="power_by_tier"),
              Table("Optical link budget", budget_rows, data["link_budget"],
                    name="link_budget")]
    if failure_domains is not None:
        records = blast_radius_records(failure_domains)
        data["failure_domains"] = records
        tables.append(Table("Failure domains", blast_radius_rows(failure_domains), records,
                            name="failure_domains"))
        hit = worst(failure_domains)
        if hit is not None:
            summary.append({"item": "worst failure domain", "value": worst_text(hit)})
            tables[0] = Table("Summary", summary, [summary_record(data)])
    return Report("build", data, tables, warnings)


def worst_text(row: BlastRadius) -> str:
    """One line for the summary: the domain kind that hurts most and what it does."""
    stops = "stops the job" if row.job_stopped else "the job runs on"
    return (f"one {row.kind.replace('_', ' ')}: {row.accelerators_stopped:,} accelerators"
            f" stopped, {row.scaleout_removed_share:.0%} of scale-out capacity removed,"
            f" {stops}; {row.failures_per_day:.3g} failures/day over {row.domains:,}")


def blast_radius_rows(rows: Sequence[BlastRadius]) -> list[dict[str, str]]:
    """The blast-radius table as shown: one row per domain kind."""

    def rate(value: float | None) -> str:
        return "" if value is None else format_rate(value)

    out = []
    for r in rows:
        step = "" if r.step_s is None else format_si(r.step_s, "s") + (
            f" (x{r.step_ratio:.3g})" if r.step_ratio is not None else "")
        out.append({
            "domain": r.kind.replace("_", " ") + (f" ({r.pick}: #{r.domain})" if r.pick
                                                  else ""),
            "domains": f"{r.domains:,}",
            "systems": f"{r.systems:,}", "accelerators stopped": f"{r.accelerators_stopped:,}",
            "job": ("stopped" if r.job_stopped else "runs on")
            + (f" ({r.job_accelerators_stopped:,} of its)" if r.job_accelerators_stopped
               else ""),
            "scale-out removed": f"{rate(r.scaleout_removed_Bps)}"
                                 f" ({r.scaleout_removed_share:.0%})",
            "bisection left": rate(r.bisection_Bps),
            "capacity left": ", ".join(f"{t} {share:.0%}" for t, share in r.tier_left.items()),
            "step re-routed": step, "failures/day": f"{r.failures_per_day:.3g}",
            "repair": f"{r.repair_s / 3600:g} h"})
    return out


def summary_record(data: dict[str, Any]) -> dict[str, Any]:
    """The build summary as one row of plain numbers (units in the names): what
    ``--format csv`` writes for the Summary table, and what compare puts side by side."""
    cut, power = data["bisection"], data["power"]
    return {
        "design": data["design"]["name"] or data["design"]["file"],
        "accelerators": data["accelerators"],
        "bisection_Bps": cut["bisection_Bps"], "bisection_ratio": cut["ratio"],
        "injection_per_accelerator_Bps": cut["injection_Bps"],
        "bisection_method": cut["method"],
        "power_W": power["total_W"], "power_complete": power["complete"],
        "power_W_per_accelerator": power["total_W_per_accelerator"],
        "network_power_W": power["network_W"],
        "network_power_W_per_accelerator": power["network_W_per_accelerator"],
        "capex_USD": power["capex_USD"], "capex_complete": power["capex_complete"],
    }


def _scaleup_text(fabric: Fabric) -> str:
    return scaleup_kind(fabric.structure).summary(fabric.structure.scaleup)


def _scaleout_text(fabric: Fabric) -> str:
    return scaleout_kind(fabric.structure).summary(fabric.structure.scaleout)


def _warnings(fabric: Fabric, budgets: list[Any]) -> list[str]:
    out = []
    for b in budgets:
        if b.closes is False:
            out.append(f"optical link does not close: {b.links} {b.tier} links on {b.optic}"
                       f" over {b.length_m:g} m ({b.note})")
    failed = fabric.links[fabric.links["failed"]]
    if len(failed):
        out.append(f"{int(failed['cables'].sum() // 2)} cables marked failed"
                   f" ({', '.join(fabric.design.failures.nodes + fabric.design.failures.links)})")
    out += oversubscription_warnings(fabric)
    return sorted(set(out))
