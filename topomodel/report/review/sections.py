"""The review's sections (:class:`~topomodel.report.review.schedule.ReviewSection`): the
work each needs and how it builds itself from the results, by name."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from topomodel.analysis.options import software_text
from topomodel.fabric.tables import Fabric
from topomodel.inputs.units import format_rate, format_si, format_size
from topomodel.report.bisection import (
    NOT_JOINED,
    bisection_text,
    rate_text,
    share_of_injection,
)
from topomodel.report.goodput import effective_time_text, spares_hint
from topomodel.report.output import Table
from topomodel.report.power import summary_rows
from topomodel.report.step import batch_text, memory_text

if TYPE_CHECKING:
    from topomodel.analysis.training.step import StepAssumptions, StepResult
from topomodel.report.review.collect import CollectiveTable, levels_part
from topomodel.report.review.document import (
    Block,
    Callout,
    Cards,
    FigureBlock,
    Section,
    TableBlock,
    Text,
    size_text,
)
from topomodel.report.review.domains import worst_headline
from topomodel.report.review.provenance import (
    PROVENANCE_ORDER,
    review_bibliography,
    review_inputs,
    review_provenance,
)
from topomodel.report.review.schedule import (
    Part,
    Results,
    ReviewContext,
    ReviewSection,
    Work,
    no_work,
)
from topomodel.report.review.work import (
    build_work,
    collectives_work,
    failure_domains_work,
    featured_work,
    goodput_work,
    step_work,
    warnings_work,
)


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
        "power_complete": power["complete"],
        "power_unknown": power["unknown"],
        "network_power_W": power["network_W"],
        "network_power_per_accelerator_W": power["network_W_per_accelerator"],
        "capex_USD": power["capex_USD"],
        "optical_links": sum(b["links"] for b in build["link_budget"]),
        "optical_links_not_closing": sum(b["links"] for b in build["link_budget"]
                                         if b["closes"] is False),
    }
    rows = [
        {"item": "accelerators", "value": f"{fabric.accelerator_count:,}"},
        {"item": "bisection", "value": bisection_text(cut)},
        {"item": "injection per accelerator", "value": format_rate(cut["injection_Bps"])},
        *summary_rows(power),
    ]
    if step is not None:
        summary.update(step_time_s=step.step_time_s, mfu=step.mfu,
                       tokens_per_s=step.tokens_per_s, comm_share=step.comm_share,
                       fits=step.fits)
        if not step.fits:  # said before the step's numbers: they are of a layout that cannot run
            rows.append({"item": "memory", "value": "DOES NOT FIT: " + next(
                (w for w in step.warnings if w.startswith("needs ")), "over the HBM")})
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
                     f" effective time {effective_time_text(goodput)})"})
    return rows, summary


def _summary_section(fabric: Fabric, build: Any, step: StepResult | None,
                     warnings: list[str], summary: Table,
                     goodput: dict[str, Any] | None, assumptions: StepAssumptions, *,
                     worst: Sequence[dict[str, str]] = ()) -> Section:
    data = build.data
    cut = data["bisection"]
    power = data["power"]
    design = fabric.design
    from topomodel.inputs.parts import Accelerator, System

    system = fabric.catalog.get(design.system, System)
    accelerator = fabric.catalog.get(system.accelerator, Accelerator)
    cards: list[tuple[str, str, str]] = [
        ("accelerators", f"{fabric.accelerator_count:,}",
         f"{accelerator.title} in {fabric.structure.systems:,} x {system.title}"),
        ("bisection", "not computed" if cut["bisection_Bps"] is None else
         format_si(cut["bisection_Bps"], "B/s"),
         f"per direction; {share_of_injection(cut['ratio'])}"
         if cut["ratio"] is not None else "per direction" if cut["bisection_Bps"] else
         f"per direction: {NOT_JOINED}" if cut["bisection_Bps"] is not None else
         cut["method"]),
        ("injection", format_si(cut["injection_Bps"], "B/s"),
         f"per accelerator ({format_si(cut['injection_Bps'] * 8, 'b/s')})"),
        ("power" if power["complete"] else "power (partial sum)",
         format_si(power["total_W"], "W"),
         f"{format_si(power['total_W_per_accelerator'], 'W')} per accelerator, of which"
         f" {format_si(power['network_W_per_accelerator'], 'W')} network"),
    ]
    if step is not None and not step.fits:  # said first: the step cannot run as modelled
        cards.insert(0, ("memory", "does not fit",
                         f"needs {step.memory['total_bytes'] / 1e9:.1f} GB per accelerator"
                         f" on {step.hbm_bytes / 1e9:.0f} GB: the step below cannot run as"
                         " given"))
    if step is not None:
        cards += [("step time", format_si(step.step_time_s, "s"),
                   f"{step.comm_share:.1%} exposed communication + wait"),
                  ("MFU", f"{step.mfu:.1%}", f"{step.tokens_per_s:,.0f} tokens/s")]
    if goodput is not None:
        cards.append(("effective time", f"{goodput['effective_time_fraction']:.1%}",
                      f"{goodput['interruptions_per_day']:.3g} interruptions/day;"
                      f" {goodput['spare_systems']:,} spare systems, a failed system out"
                      f" {goodput['repair_s'] / 3600:.3g} h" + spares_hint(goodput)))
    for row in worst:  # the worst failure domain: "one rack: what it stops"
        kind, _, detail = row["value"].partition(": ")
        cards.append(("worst failure domain", kind, detail))
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
        rows.append({"item": "software", "value": software_text(lay, assumptions)})
        rows.append({"item": "global batch", "value": batch_text(step)})
        rows.append({"item": "memory", "value": memory_text(step)})
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
        {"item": "bisection", "value": bisection_text(cut)},
        {"item": "per accelerator of the smaller half",
         "value": rate_text(cut["per_accelerator_Bps"])},
        {"item": "injection per accelerator", "value": format_rate(cut["injection_Bps"])},
        {"item": "share of injection (100 % = full bisection)",
         "value": share_of_injection(cut["ratio"])},
        {"item": "method", "value": cut["method"]},
    ]
    if cut["closed_form_Bps"] is not None:
        rows.append({"item": "closed form", "value": format_rate(cut["closed_form_Bps"])})
    if cut["max_flow_Bps"] is not None:
        rows.append({"item": "max-flow", "value": format_rate(cut["max_flow_Bps"])})
    if cut["note"]:
        rows.append({"item": "note", "value": cut["note"]})
    return Section("bisection", "Bisection", (TableBlock(Table("Bisection", rows)),))


def _collectives_section(collectives: CollectiveTable, featured: Any) -> Section:
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
        blocks += [FigureBlock("tier-utilization"),
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
    note = ("Each part at its maximum power where published, else its typical figure;"
            " a system's own figure covers its accelerators, scale-up switches and NICs,"
            " which are listed but not added again. Parts without a figure are unknown,"
            " not zero" + (": " + ", ".join(power["unknown"]) + ", so the sum is partial."
                           if power["unknown"] else "."))
    blocks: list[Block] = [TableBlock(tables["Bill of materials"]),
                           TableBlock(Table("Power", summary_rows(power)), note),
                           TableBlock(tables["Power by tier"]),
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


def _provenance_section(provenance: list[dict[str, Any]], bibliography: list[dict[str, Any]],
                        inputs: dict[str, Any] | None) -> Section:
    counts: dict[str, int] = {}
    for entry in provenance:
        for fig in entry["figures"]:
            counts[fig["provenance"]] = counts.get(fig["provenance"], 0) + 1
    total = sum(counts.values())
    said = ", ".join(f"{counts[p]} {p}" for p in PROVENANCE_ORDER if p in counts)
    figures = [{"entry": e["id"], "figure": f["key"], "value": f["value"],
                "provenance": f"as measured ({f['measured_in']})" if f.get("measured_in")
                else f["provenance"]} for e in provenance for f in e["figures"]]
    sources = [{"entry": e["id"], "kind": e["kind"], "name": e["name"],
                "provenance": e["provenance"], "source": e["source"]} for e in provenance]
    blocks: list[Block] = [
        Text(f"{total} catalog figures from {len(provenance)} entries feed this review:"
             f" {said}."),
        TableBlock(Table("Figures", figures)),
        TableBlock(Table("Sources", sources)),
        TableBlock(Table("Bibliography", [
            {"tag": f"[{b['tag']}]", "citation": b["citation"], "date": b["date"],
             "kind": b["kind"], "cited by": ", ".join(b["cited_by"])} for b in bibliography]),
            "Every source tag the entries above cite, with the citation shipped in"
            " topomodel (topomodel/inputs/sources.yaml).")]
    if inputs is not None:
        blocks.append(TableBlock(Table("Input files", [
            {"file": f["file"], "role": f["role"],
             "bytes": "-" if f["bytes"] is None else f"{f['bytes']:,}",
             "sha256": f["sha256"] or "(not found)"} for f in inputs["files"]]),
            f"Written {inputs['generated_utc']} by topomodel {inputs['topomodel_version']};"
            " the SHA-256 of each file identifies the exact inputs."))
    return Section("provenance", "Provenance of the inputs", tuple(blocks))


def _prefixed(prefix: str, tables: Sequence[Table]) -> tuple[Table, ...]:
    """A verb report's tables with plain records, named with ``prefix``."""
    return tuple(dataclasses.replace(t, name=prefix + t.key) for t in tables)


def _summary_work(c: ReviewContext) -> list[Work]:
    return [build_work(c), *step_work(c), *goodput_work(c), warnings_work(c),
            *failure_domains_work(c)]


def _summary_part(c: ReviewContext, got: Results) -> Part:
    build, step = got["build"], got.get("step")
    goodput = got["goodput"][1] if "goodput" in got else None
    headline, summary = _headline(c.fabric, build.data, step, goodput)
    worst_rows, worst_keys = worst_headline(got["failure domains"])
    headline += worst_rows
    summary.update(worst_keys)
    tables = {t.title: t for t in build.tables}
    design = c.fabric.design
    section = _summary_section(c.fabric, build, step, got["warnings"], tables["Summary"],
                               goodput, c.assumptions, worst=worst_rows)
    return Part(
        section,
        {"design": {"name": design.name, "file": design.file, "system": design.system},
         "summary": summary, "build": build.data},
        tables=_prefixed("build_", build.tables), headline=tuple(headline))


SUMMARY = ReviewSection("summary", _summary_work, _summary_part)
"""What was modeled and the headline numbers (the CLI's headline, ``summary`` and
``build`` in report.json)."""


def _warnings_part(c: ReviewContext, got: Results) -> Part:
    warnings = got["warnings"]
    return Part(Section("warnings", "Warnings", (
        Callout("warning", tuple(warnings)) if warnings
        else Text("No warnings: every optical link closes, no part has failed, and no"
                  " step traffic is flagged."),)), warnings=tuple(warnings))


WARNINGS = ReviewSection("warnings", lambda c: [warnings_work(c)], _warnings_part)
"""The warnings of every part, highlighted."""


def _topology_work(c: ReviewContext) -> list[Work]:
    return [build_work(c), Work("levels", lambda _: levels_part(c.fabric, c.timing)),
            featured_work(c)]


def _topology_part(c: ReviewContext, got: Results) -> Part:
    build, levels = got["build"], got["levels"]
    tiers = {t.title: t for t in build.tables}["Tiers"]
    return Part(_topology_section(c.fabric, build, levels, tiers), {"levels": levels},
                {"topology": got["featured"][1]["topology"]})


TOPOLOGY = ReviewSection("topology", _topology_work, _topology_part)
"""The topology diagram, the tiers and the fabric as levels."""


BISECTION = ReviewSection("bisection", lambda c: [build_work(c)],
                          lambda c, got: Part(_bisection_section(got["build"])))
"""The worst balanced cut."""


def _collectives_part(c: ReviewContext, got: Results) -> Part:
    collectives: CollectiveTable = got["collectives"]
    featured, figures = got["featured"]
    rows = collectives.rows
    data = {"collectives": {
        "sizes_bytes": list(collectives.sizes),
        "groups": collectives.groups,
        "rows": rows,
        "skipped": collectives.skipped,
        "featured": None if featured is None else featured.data,
    }, "hotspots": [] if featured is None else featured.data["hotspots"],
        "notes": collectives.notes}
    return Part(_collectives_section(collectives, featured), data,
                {k: v for k, v in figures.items() if k == "tier-utilization"},
                (*_prefixed("featured_", featured.tables if featured else ()),
                 Table("Collectives", rows, rows)))


COLLECTIVES = ReviewSection(
    "collectives", lambda c: [*collectives_work(c), featured_work(c)], _collectives_part)
"""The collective table, the featured collective's per-tier load and hotspots."""


def _step_work(c: ReviewContext) -> list[Work]:
    return [*step_work(c), featured_work(c)] if c.has_model else []


def _step_part(c: ReviewContext, got: Results) -> Part:
    from topomodel.report.step import step_report
    from topomodel.routing.policy import resolve_routing

    step = got.get("step")
    report = None if step is None else step_report(step, c.assumptions,
                                                   design_name=c.name,
                                                   routing=resolve_routing(c.fabric,
                                                                           c.routing))
    return Part(_step_section(step, report),
                {"step": None if report is None else report.data},
                {} if step is None else {"step": got["featured"][1]["step"]},
                _prefixed("step_", report.tables if report else ()))


STEP = ReviewSection("step", _step_work, _step_part)
"""The training step and its four walls (with a model; else how to add it)."""


def _goodput_part(c: ReviewContext, got: Results) -> Part:
    goodput = got.get("goodput")
    if goodput is None:
        return Part(data={"goodput": None})
    return Part(Section("goodput", "Goodput under failures",
                        tuple(TableBlock(t) for t in goodput[0])),
                {"goodput": goodput[1]}, tables=_prefixed("", goodput[0]))


GOODPUT = ReviewSection("goodput", goodput_work, _goodput_part)
"""Goodput under failures (with a model)."""


def _materials_part(c: ReviewContext, got: Results) -> Part:
    build = got["build"]
    return Part(_materials_section(build, {t.title: t for t in build.tables}))


MATERIALS = ReviewSection("materials", lambda c: [build_work(c)], _materials_part)
"""The bill of materials, power and the optical link budget."""


def _assumptions_part(c: ReviewContext, got: Results) -> Part:
    from topomodel.analysis.reliability.goodput import GoodputAssumptions
    from topomodel.report.review.assumptions import review_assumptions

    rows = review_assumptions(
        c.fabric, c.timing, c.assumptions if c.has_model else None, routing=c.routing,
        goodput=(c.goodput_assumptions or GoodputAssumptions()) if c.has_model else None)
    return Part(_assumptions_section(rows), {"assumptions": rows},
                tables=(Table("Assumptions", rows, rows),))


ASSUMPTIONS = ReviewSection("assumptions", no_work, _assumptions_part)
"""Every modelling assumption with its value, where it is defined and why."""


def _provenance_part(c: ReviewContext, got: Results) -> Part:
    goodput = got.get("goodput")
    catalog = c.fabric.catalog
    provenance = review_provenance(c.fabric, c.model, [] if goodput is None else [
        str(line[key]) for line in goodput[1]["components"]
        for key in ("rate_entry", "class_entry") if line[key] in catalog])
    bibliography = review_bibliography(provenance)
    inputs = review_inputs(c.fabric)
    figures = [{"entry": e["id"], **f} for e in provenance for f in e["figures"]]
    return Part(
        _provenance_section(provenance, bibliography, inputs),
        {"provenance": provenance, "bibliography": bibliography, "inputs": inputs},
        tables=(Table("Figures", figures, figures, name="provenance"),
                Table("Bibliography", bibliography, bibliography),
                Table("Inputs", inputs["files"], [
                    {**f, "generated_utc": inputs["generated_utc"],
                     "topomodel_version": inputs["topomodel_version"]}
                    for f in inputs["files"]])))


PROVENANCE = ReviewSection("provenance", goodput_work, _provenance_part)
"""The provenance of every catalog figure used, the bibliography and the input files."""
