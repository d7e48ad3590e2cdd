"""The goodput tables and JSON of step, goodput and review."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from topomodel.analysis.assumptions import (
    LLAMA3_GPUS,
    STORAGE_BPS_PER_ACCELERATOR,
    STORAGE_MAX_BPS,
)
from topomodel.analysis.reliability.failure_classes import SINGLE_POINT
from topomodel.analysis.reliability.goodput import (
    SECONDS_PER_DAY,
    SECONDS_PER_YEAR,
    TARGET_EFFECTIVE_TIME,
    ComponentLine,
    GoodputAssumptions,
    GoodputResult,
    step_and_goodput,
)
from topomodel.analysis.reliability.goodput_whatifs import what_ifs
from topomodel.fabric.tables import Fabric


# PLR0913: keyword-only options of an entry point, as networkx's; a record would hide them
def goodput_section(fabric: Fabric, model: Any, layout: Any, step_assumptions: Any,  # noqa: PLR0913
                    step_result: Any, assumptions: GoodputAssumptions, *,
                    routing: str = "ecmp", seed: int = 0, workers: int | None = None,
                    lines: Sequence[ComponentLine] | None = None,
                    known_tokens_per_s: Mapping[str, float] | None = None,
                    keep_routes: bool = True) -> tuple[Any, list[Any], dict[str, Any]]:
    """The step, and the goodput tables and JSON of it with the what-ifs: the one goodput
    path of step, goodput, compare and review. The degradation is routed wherever
    :func:`~topomodel.analysis.reliability.goodput.job_goodput` can afford it, by the same rule for
    every verb (its degraded steps on ``workers`` processes, default every core; those
    in ``known_tokens_per_s``, by part, already run; ``lines``: the job's component
    lines, if known); ``step_result`` None: the step runs beside them
    (:func:`~topomodel.analysis.reliability.goodput.step_and_goodput`, which with
    ``keep_routes`` False drops the routes the step kept on ``fabric``)."""
    step, result = step_and_goodput(fabric, model, layout, step_assumptions, assumptions,
                                    step_result=step_result, routing=routing, seed=seed,
                                    workers=workers, lines=lines,
                                    known_tokens_per_s=known_tokens_per_s,
                                    keep_routes=keep_routes)
    whatifs = what_ifs(result, fabric.catalog, assumptions)
    return step, goodput_tables(result, whatifs), goodput_json(result, assumptions, whatifs)


def storage_text(result: GoodputResult) -> str:
    """The checkpoint write rate and where it comes from, e.g. ``1.95 GB/s (122 MB/s per
    accelerator x 16, Llama 3's Tectonic per GPU; --storage-bandwidth to change)``."""
    from topomodel.inputs.units import format_si

    rate = format_si(result.storage_Bps, "B/s")
    if result.storage_given:
        return f"{rate} (given)"
    accelerators = sum(ln.count for ln in result.lines if ln.component == "accelerator")
    if result.storage_Bps >= STORAGE_MAX_BPS:
        why = (f"the most the default rule gives, Llama 3's Tectonic for"
               f" {LLAMA3_GPUS:,} GPUs")
    else:
        why = (f"{format_si(STORAGE_BPS_PER_ACCELERATOR, 'B/s')} per accelerator x"
               f" {accelerators:,}, Llama 3's Tectonic per GPU")
    return f"{rate} ({why}; --storage-bandwidth to change)"


def goodput_json(result: GoodputResult, assumptions: GoodputAssumptions,
                 whatifs: Sequence[tuple[str, GoodputResult]] = ()) -> dict[str, Any]:
    """Plain-type JSON of a goodput result (the ``goodput`` key of step and goodput)."""
    from dataclasses import asdict

    return {
        "interruptions_per_day": result.interruptions_per_day,
        "mtbi_s": result.mtbi_s if math.isfinite(result.mtbi_s) else None,
        "checkpoint_bytes": result.checkpoint_bytes,
        "checkpoint_write_s": result.checkpoint_write_s,
        "storage_Bps": result.storage_Bps,
        "storage_given": result.storage_given,
        "checkpoint_interval_s": (result.checkpoint_interval_s
                                  if math.isfinite(result.checkpoint_interval_s) else None),
        "spare_systems": result.spare_systems,
        "idle_systems": result.idle_systems,
        "repair_s": result.repair_s,
        "target_effective_time_fraction": TARGET_EFFECTIVE_TIME,
        **_spares_facts(result),
        "spare_system_W": result.spare_system_W,
        "spare_system_USD": result.spare_system_USD,
        "accelerators_per_system": result.accelerators_per_system,
        "no_spare_probability": result.no_spare_probability,
        "downtime_per_interruption_s": result.downtime_per_interruption_s,
        "effective_time_fraction": result.effective_time_fraction,
        "lost_by_cause": result.lost_by_cause,
        "degraded_loss_per_part": result.degraded_loss,
        "degraded_throughput_fraction": result.degraded_throughput_fraction,
        "degraded_routed": result.degraded_routed,
        "degraded_tiers": [asdict(t) for t in result.degraded_tiers],
        "tokens_per_s": result.tokens_per_s,
        "goodput_tokens_per_s": result.goodput_tokens_per_s,
        "components": [{**asdict(ln), "failures_per_day": ln.failures_per_s * SECONDS_PER_DAY}
                       for ln in result.lines],
        "what_ifs": [{"case": name, "interruptions_per_day": r.interruptions_per_day,
                      "effective_time_fraction": r.effective_time_fraction,
                      "goodput_tokens_per_s": r.goodput_tokens_per_s} for name, r in whatifs],
        "assumptions": asdict(assumptions),
    }


def effective_time_text(goodput: Mapping[str, Any]) -> str:
    """The effective training time of a goodput JSON (:func:`goodput_json`) with why: the
    spare systems assumed and a failed system's repair time; with no spares, the spares
    that would reach :data:`~topomodel.analysis.reliability.goodput.TARGET_EFFECTIVE_TIME`
    and what they add to the bill of materials and power."""
    return (f"{goodput['effective_time_fraction']:.1%} ({goodput['spare_systems']:,} spare"
            f" systems, a failed system out {_hours(goodput['repair_s'])})"
            + spares_hint(goodput) + cause_text(goodput))


def cause_text(goodput: Mapping[str, Any]) -> str:
    """``"; most lost to accelerator failures (1.2% of the time); of the failure domains
    to rack (0.3%)"`` of a goodput JSON's ``lost_by_cause`` (first-order shares of wall
    time), or ``""`` without it."""
    from topomodel.inputs.reliability import DOMAIN_KINDS

    lost = goodput.get("lost_by_cause") or {}
    if not lost:
        return ""
    cause, share = next(iter(lost.items()))
    text = f"; most lost to {cause.replace('_', ' ')} failures ({share:.2%} of the time)"
    domains = [(k, v) for k, v in lost.items() if k in DOMAIN_KINDS]
    if domains and domains[0][0] != cause:
        kind, part = domains[0]
        text += f"; of the failure domains to {kind.replace('_', ' ')} ({part:.2%})"
    return text


def spares_hint(goodput: Mapping[str, Any]) -> str:
    """``"; N spare systems would bring it to 90.1% (+W, +$ ...)"`` of a goodput JSON, or
    ``""`` when the job has spares or needs none."""
    n, reached = goodput.get("spares_for_target"), goodput.get("spares_effective_time_fraction")
    if n is None or reached is None:
        return ""
    from topomodel.inputs.units import format_si
    from topomodel.report.power import format_usd

    watts, price = goodput.get("spare_system_W"), goodput.get("spare_system_USD")
    adds = [f"+{format_si(n * watts, 'W')}" if watts is not None else "power unknown",
            f"+{format_usd(n * price)}" if price is not None else "price unknown"]
    why = "" if reached >= TARGET_EFFECTIVE_TIME else (
        f", near the most spares give: detection, restarts and checkpoints keep it under"
        f" {TARGET_EFFECTIVE_TIME:.0%}")
    return (f"; {n:,} spare systems would bring it to {reached:.1%}{why}"
            f" ({', '.join(adds)}: what they add to the bill of materials)")


def _spares_facts(r: GoodputResult) -> dict[str, Any]:
    n, reached = r.spares_for_target or (None, None)
    return {"spares_for_target": n, "spares_effective_time_fraction": reached}


def _cause_facts(r: GoodputResult) -> dict[str, Any]:
    """The cause that costs the most time and the failure-domain kind that does, with
    their first-order shares of wall time (None: no such cause)."""
    first = next(iter(r.lost_by_cause.items()), (None, None))
    domain = r.dominant_domain or (None, None)
    return {"lost_most_to": first[0], "lost_most_share": first[1],
            "domain_lost_most_to": domain[0], "domain_lost_most_share": domain[1]}


def _hours(seconds: float) -> str:
    return f"{seconds / 3600:.3g} h" if seconds >= 3600 else f"{seconds / 60:.3g} min"


def _spares_beyond(r: GoodputResult) -> str:
    """What the spares are against the systems the design leaves free (the bill of
    materials and power count the design's systems only)."""
    if r.idle_systems is None:
        return ""
    if r.spare_systems > r.idle_systems:  # given with --spare-systems
        return (f"; the design leaves {r.idle_systems:,} systems free: the other"
                f" {r.spare_systems - r.idle_systems:,} are not in its bill of materials"
                " or power")
    return (f"; of the {r.idle_systems:,} systems the design leaves free"
            if r.idle_systems else "; the job takes every system of the design")


def goodput_tables(result: GoodputResult,
                   whatifs: Sequence[tuple[str, GoodputResult]] = ()) -> list[Any]:
    """The goodput section: summary, parts by their failures, what-ifs."""
    from topomodel.inputs.units import format_si, format_size
    from topomodel.report.output import Table

    r = result

    def duration(seconds: float) -> str:
        if not math.isfinite(seconds):
            return "never"
        if seconds >= 3600:
            return f"{seconds / 3600:.3g} h"
        return f"{seconds / 60:.3g} min" if seconds >= 60 else format_si(seconds, "s")

    summary_facts = {"spare_systems": r.spare_systems, "repair_s": r.repair_s,
                     **_spares_facts(r),
                     "spare_system_W": r.spare_system_W, "spare_system_USD": r.spare_system_USD}
    summary = [
        {"item": "interruptions per day", "value": f"{r.interruptions_per_day:.3g}"},
        {"item": "mean time between interruptions", "value": duration(r.mtbi_s)},
        {"item": "checkpoint", "value": f"{format_size(r.checkpoint_bytes)}, written in"
         f" {duration(r.checkpoint_write_s)} at {storage_text(r)}"},
        {"item": "checkpoint interval (Young/Daly)", "value": duration(r.checkpoint_interval_s)},
        {"item": "spare systems", "value": f"{r.spare_systems} ({r.accelerators_per_system}"
         f" accelerators out per system failure); none free {r.no_spare_probability:.1%}"
         " of the time" + _spares_beyond(r)},
        {"item": "downtime per interruption", "value": duration(r.downtime_per_interruption_s)
         + f" (mean: detection, restart, a {_hours(r.repair_s)} repair when no spare is free,"
         " a failure domain's repair when too few spares stand in for it)"},
        {"item": "effective training time", "value": effective_time_text(
            {"effective_time_fraction": r.effective_time_fraction, **summary_facts,
             "lost_by_cause": r.lost_by_cause})},
        {"item": "throughput kept while parts are down",
         "value": f"{r.degraded_throughput_fraction:.2%} ("
         + ("routed around one failed part per tier)" if r.degraded_routed
            else "a lower bound: losses bounded from above, not re-routed)")},
        {"item": "goodput", "value": f"{r.goodput_tokens_per_s:,.0f} tokens/s of"
         f" {r.tokens_per_s:,.0f}"},
    ]
    total = sum(ln.failures_per_s for ln in r.lines) or 1.0
    parts = [{"part": ln.component, "model": ln.model, "where": ln.tier, "count": ln.count,
              "rate (%/yr)": f"{100 * ln.rate_per_s * SECONDS_PER_YEAR:.3g}",
              "failures/day": f"{ln.failures_per_s * SECONDS_PER_DAY:.3g}",
              "share": f"{ln.failures_per_s / total:.1%}",
              "effect": _effect(ln, r.degraded_loss.get(ln.tier, 0.0)),
              "rate source": f"{ln.rate_entry} ({ln.provenance})",
              "class source": ln.class_entry}
             for ln in sorted(r.lines, key=lambda x: -x.failures_per_s)]
    summary_record = {
        "interruptions_per_day": r.interruptions_per_day, "mtbi_s": r.mtbi_s,
        "checkpoint_bytes": r.checkpoint_bytes, "checkpoint_write_s": r.checkpoint_write_s,
        "storage_Bps": r.storage_Bps, "storage_given": r.storage_given,
        "checkpoint_interval_s": r.checkpoint_interval_s, **summary_facts,
        **_cause_facts(r),
        "no_spare_probability": r.no_spare_probability,
        "downtime_per_interruption_s": r.downtime_per_interruption_s,
        "effective_time_fraction": r.effective_time_fraction,
        "degraded_throughput_fraction": r.degraded_throughput_fraction,
        "degraded_routed": r.degraded_routed, "tokens_per_s": r.tokens_per_s,
        "goodput_tokens_per_s": r.goodput_tokens_per_s}
    part_records = [{"part": ln.component, "model": ln.model, "where": ln.tier,
                     "count": ln.count, "rate_per_year": ln.rate_per_s * SECONDS_PER_YEAR,
                     "failures_per_day": ln.failures_per_s * SECONDS_PER_DAY,
                     "share": ln.failures_per_s / total, "interrupts": ln.interrupts,
                     "degraded_loss_each": None if ln.interrupts
                     else r.degraded_loss.get(ln.tier, 0.0),
                     "rate_entry": ln.rate_entry, "provenance": ln.provenance,
                     "on_failure": ln.on_failure, "class_entry": ln.class_entry}
                    for ln in sorted(r.lines, key=lambda x: -x.failures_per_s)]
    tables = [Table("Goodput", summary, [summary_record]),
              Table("Failures by part", parts, part_records)]
    if r.degraded_tiers:
        tables.append(degraded_table(r))
    if whatifs:
        tables.append(Table("Goodput what-ifs", [
            {"case": name, "interruptions/day": f"{w.interruptions_per_day:.3g}",
             "effective time": f"{w.effective_time_fraction:.1%}",
             "goodput (tokens/s)": f"{w.goodput_tokens_per_s:,.0f}"} for name, w in whatifs],
            [{"case": name, "interruptions_per_day": w.interruptions_per_day,
              "effective_time_fraction": w.effective_time_fraction,
              "goodput_tokens_per_s": w.goodput_tokens_per_s} for name, w in whatifs]))
    return tables


def _effect(line: Any, loss: float) -> str:
    """What one failure of the line's parts does, as the parts table says it."""
    if line.on_failure == "stops_job":
        return "interrupts" + (" (single point)" if line.class_entry == SINGLE_POINT else "")
    if line.on_failure == "absorbed":
        return "absorbed"
    return f"degrades ({loss:.3%} each)"  # as the degraded-operation table


def degraded_table(result: GoodputResult) -> Any:
    """How the throughput kept while parts are down is derived, worst tier first: parts
    down on average (rate x repair time), the chance one is, the loss with one down, the
    chance it is the worst tier down; the job runs at the pace of the worst."""
    from topomodel.report.output import Table

    rows = [{"tier": t.tier, "parts down (mean)": f"{t.parts_down:.3g}",
             "P(any down)": f"{t.any_down:.2%}", "loss with one down": f"{t.loss:.3%}",
             "P(worst down)": f"{t.worst:.2%}",
             "contribution": f"{t.worst * (1 - t.loss):.4f}"}
            for t in result.degraded_tiers]
    rows.append({"tier": "none down", "parts down (mean)": "",
                 "P(any down)": "", "loss with one down": "",
                 "P(worst down)": f"{1 - sum(t.worst for t in result.degraded_tiers):.2%}",
                 "contribution": f"{1 - sum(t.worst for t in result.degraded_tiers):.4f}"})
    rows.append({"tier": "throughput kept", "parts down (mean)": "", "P(any down)": "",
                 "loss with one down": "", "P(worst down)": "",
                 "contribution": f"{result.degraded_throughput_fraction:.4f}"})
    records = [{"tier": t.tier, "parts_down_mean": t.parts_down, "any_down_probability":
                t.any_down, "loss_with_one_down": t.loss, "worst_down_probability": t.worst,
                "contribution": t.worst * (1 - t.loss)} for t in result.degraded_tiers]
    none_down = 1 - sum(t.worst for t in result.degraded_tiers)
    records += [{"tier": "none down", "worst_down_probability": none_down,
                 "contribution": none_down},
                {"tier": "throughput kept",
                 "contribution": result.degraded_throughput_fraction}]
    return Table("Degraded operation (a synchronous step runs at its slowest group: the"
                 " worst tier down sets the pace)", rows, records, name="degraded_operation")
