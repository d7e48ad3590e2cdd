"""The review's cost section: capex and power by tier with the network's share, cost
per million tokens and energy per token (with a model), and the optics what-if that
puts LPO or CPO modules in place of pluggable transceivers (docs/cost.md)."""

from __future__ import annotations

import dataclasses
from typing import Any

from topomodel.analysis.assumptions import CostAssumptions
from topomodel.inputs.units import format_si
from topomodel.report.output import Table
from topomodel.report.power import capex_headline, cost_rows, format_usd
from topomodel.report.review.document import Block, Section, TableBlock, Text
from topomodel.report.review.schedule import Part, Results, ReviewContext, ReviewSection, Work
from topomodel.report.review.work import build_work, goodput_work


def _work(c: ReviewContext) -> list[Work]:
    """The build report, and with a model the step and its goodput."""
    return [build_work(c), *goodput_work(c)]


def _rate(c: ReviewContext, got: Results) -> tuple[float | None, bool]:
    """Tokens/s the cost is spread over: goodput tokens/s where it ran, else the
    step's; ``None`` without a model."""
    goodput = got.get("goodput")
    if goodput is not None:
        return goodput[1]["goodput_tokens_per_s"], True
    step = got.get("step")
    return (None, False) if step is None else (step.tokens_per_s, False)


def _swap_rows(c: ReviewContext, power: dict[str, Any], tokens_per_s: float | None,
               share: float, assumptions: CostAssumptions
               ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The what-if's rows for people and its records (plain numbers, units in names)."""
    from topomodel.analysis.assumptions import GoodputAssumptions
    from topomodel.analysis.bom import bill_of_materials
    from topomodel.analysis.cost import optics_swaps, token_cost
    from topomodel.analysis.reliability.serviceability import optics_service

    repair_s = (c.goodput_assumptions or GoodputAssumptions()).network_repair_s
    rows, records = [], []
    base = None if not tokens_per_s else token_cost(
        power["capex_USD"] or 0.0, power["total_W"], tokens_per_s, assumptions, share=share)
    for s in optics_swaps(bill_of_materials(c.fabric), c.fabric.catalog):
        row: dict[str, Any] = {
            "tier": s.tier, "pluggable": s.pluggable, "instead": f"{s.replacement} ({s.form})",
            "modules": s.modules, "power change": format_si(s.power_delta_W, "W"),
            "capex change": "?" if s.capex_delta_USD is None else format_usd(s.capex_delta_USD)}
        record: dict[str, Any] = dataclasses.asdict(s)
        service = optics_service(c.fabric, s, repair_s=repair_s)
        takes = (f"its part ({service.after_links_per_failure:,.0f} links)"
                 if service.after_links_per_failure != 1 else "its link")
        row.update({
            "failures/yr": f"{service.before_failures_per_year:.3g} ->"
                           f" {service.after_failures_per_year:.3g}",
            "a failure takes": f"its link -> {takes}",
            "links down (mean)": f"{service.before_links_down:.3g} ->"
                                 f" {service.after_links_down:.3g} of {service.links:,}"})
        record.update(
            tier_links=service.links, repair_s=service.repair_s,
            failures_per_year_before=service.before_failures_per_year,
            failures_per_year_after=service.after_failures_per_year,
            links_per_failure_before=service.before_links_per_failure,
            links_per_failure_after=service.after_links_per_failure,
            links_down_before=service.before_links_down,
            links_down_after=service.after_links_down)
        if base is not None and tokens_per_s:
            after = token_cost((power["capex_USD"] or 0.0) + (s.capex_delta_USD or 0.0),
                               power["total_W"] + s.power_delta_W, tokens_per_s,
                               assumptions, share=share)
            row["USD/Mtok"] = f"{base.USD_per_Mtok:.4g} -> {after.USD_per_Mtok:.4g}"
            row["J/token"] = f"{base.J_per_token:.4g} -> {after.J_per_token:.4g}"
            record.update(USD_per_Mtok_before=base.USD_per_Mtok,
                          USD_per_Mtok_after=after.USD_per_Mtok,
                          J_per_token_before=base.J_per_token,
                          J_per_token_after=after.J_per_token)
        rows.append(row)
        records.append(record)
    return rows, records


def _part(c: ReviewContext, got: Results) -> Part:
    from topomodel.analysis.cost import token_cost

    power = got["build"].data["power"]
    if power["capex_USD"] is None:
        return Part(data={"cost": None})
    assumptions = c.cost_assumptions or CostAssumptions()
    tokens_per_s, goodput = _rate(c, got)
    share = (c.layout.world / c.fabric.accelerator_count) if c.layout else 1.0
    tiers = [{"tier": t["tier"], "power": format_si(t["power_W"], "W"),
              "capex": "?" if t["capex_USD"] is None else format_usd(t["capex_USD"]),
              "share of capex": "" if t["capex_USD"] is None or t["in_system"]
              else f"{t['capex_USD'] / power['capex_USD']:.1%}",
              "counted": "in the system price" if t["in_system"] else "yes"}
             for t in power["tiers"]]
    blocks: list[Block] = [
        Text("Capex: " + (capex_headline(power) or "") + ". Prices per item with their"
             " source, date and range are in the catalog's prices (docs/cost.md)."),
        TableBlock(Table("Capex and power by tier", tiers, name="cost_tiers"))]
    data: dict[str, Any] = {"capex_USD": power["capex_USD"],
                            "capex_low_USD": power.get("capex_low_USD"),
                            "capex_high_USD": power.get("capex_high_USD"),
                            "network_capex_USD": power.get("network_capex_USD"),
                            "assumptions": dataclasses.asdict(assumptions)}
    tables = [Table("Capex and power by tier", tiers, name="cost_tiers")]
    if tokens_per_s:  # a job that runs no tokens has no cost per token
        cost = token_cost(power["capex_USD"], power["total_W"], tokens_per_s, assumptions,
                          share=share, goodput=goodput)
        cost_data = {**dataclasses.asdict(cost), "text": cost.text,
                     "capex_complete": power["capex_complete"],
                     "unpriced": list(power["unpriced"])}
        data["per_token"] = {k: v for k, v in cost_data.items() if k != "assumptions"}
        table = Table("Cost per token", cost_rows(cost_data), name="cost_per_token")
        blocks.append(TableBlock(table))
        tables.append(table)
    swaps, swap_records = _swap_rows(c, power, tokens_per_s, share, assumptions)
    swap_table = Table("Optics what-if: LPO or CPO instead of pluggables", swaps,
                       swap_records, name="optics_whatif")
    blocks.append(TableBlock(swap_table, "Each tier's pluggable transceivers replaced by"
                             " a catalog part of the same rate and at least the same reach;"
                             " a failed pluggable or LPO module takes its link out until"
                             " swapped, a failed co-packaged optic its switch (or NIC) with"
                             " every link it has until replaced, both restored in the"
                             " goodput's network repair time (links down: the mean out of"
                             " service at a random time)")
                  if swaps else Text("Optics what-if: the catalog has no LPO or CPO part of"
                                     " the rate and reach of this design's pluggable"
                                     " transceivers."))
    data["optics_whatif"] = swap_records
    if swaps:
        tables.append(swap_table)
    return Part(Section("cost", "Cost and energy per token", tuple(blocks)), {"cost": data},
                tables=tuple(tables))


COST = ReviewSection("cost", _work, _part)
"""Capex and power by tier, cost per token and energy per token, the optics what-if."""
