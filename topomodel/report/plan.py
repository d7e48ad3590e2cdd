"""The ``topomodel plan`` report: the best layouts, how the search went, why the best
wins; with ``--compare``, the best layout of each design side by side.

``plan_rows`` is the table every format shares (one row per ranked layout, units in
the column names), what ``--format csv`` prints and ``--format parquet`` writes.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from topomodel.analysis.options import software_text
from topomodel.plan.explain import why_better
from topomodel.plan.search import OBJECTIVES, PlanResult
from topomodel.plan.tally import limit_text, over_limit_text
from topomodel.report.output import Report, Table
from topomodel.report.step import step_json
from topomodel.traffic.layout import BATCH_RULE

LAYOUT_COLUMNS = ("tp", "pp", "dp", "ep", "cp", "micro_batch", "interleave", "schedule",
                  "recompute", "zero", "sequence_parallel", "order")


def plan_rows(found: PlanResult) -> list[dict[str, Any]]:
    """One row per ranked layout, best first: the searched fields, then the step."""
    rows = []
    for rank, r in enumerate(found.best, 1):
        rows.append({"rank": rank, **{k: getattr(r.layout, k) for k in LAYOUT_COLUMNS},
                     "global_batch": r.global_batch, "microbatches": r.microbatches,
                     "step_time_s": r.step_time_s,
                     "mfu": r.mfu, "tokens_per_s": r.tokens_per_s,
                     "tokens_per_J": r.tokens_per_s / found.power_W if found.power_W
                     else None,
                     "USD_per_Mtok": found.USD_per_h / (r.tokens_per_s * 3600) * 1e6
                     if r.tokens_per_s > 0 and found.USD_per_h == found.USD_per_h
                     else None,
                     "memory_bytes": r.memory["total_bytes"], "compute_s": r.compute_s,
                     "bubble_s": r.bubble_s, "exposed_comm_s": r.exposed_comm_s,
                     "wait_s": r.wait_s,
                     **{f"{w.removesuffix('_s')}_wall_s": v for w, v in r.walls.items()}})
    return rows


def why(found: PlanResult) -> str:
    """Why the best layout beats the runner-up (or that there is only one)."""
    if not found.best:
        return "No layout fits: " + _nothing(found)
    if len(found.best) == 1:
        return "Only one distinct layout is valid and fits."
    best, second = found.best[:2]
    return why_better(best, second, objective=found.job.objective,
                      best_value=found.value(best), other_value=found.value(second))


def _nothing(found: PlanResult) -> str:
    t = found.tally
    common = max(t.reasons.items(), key=lambda kv: kv[1])[0] if t.reasons else ""
    return (f"{t.searched:,} layouts searched, {t.invalid:,} invalid"
            + (f" (most often: {common})" if common else "")
            + f", {t.no_fit:,} over the memory"
            + (f", {over_limit_text(t)}" if t.over_limit else "") + ".")


def job_text(found: PlanResult) -> str:
    """The accelerators the plan's job uses, and those it leaves idle, in words."""
    used, idle = found.accelerators, found.idle
    if not idle:
        return f"{used:,} accelerators (all of the design's)"
    reason = found.idle_reason or "the job's size, as asked"
    return (f"{used:,} of the design's {found.design_accelerators:,} accelerators;"
            f" {idle:,} left idle ({reason})")


def batch_rule_text(found: PlanResult) -> str:
    """The global batch the plan's layouts run, in words: given or the default rule."""
    base = found.job.base
    if base.global_batch:
        return f"{base.global_batch:,} sequences (given)"
    return f"default: {BATCH_RULE} (Layout.sequences)"


def _search_rows(found: PlanResult) -> list[dict[str, Any]]:
    t = found.tally
    return [{"item": "design / model", "value": f"{found.design} / {found.job.model.id}"},
            {"item": "job", "value": job_text(found)},
            {"item": "global batch", "value": batch_rule_text(found)},
            {"item": "software", "value": software_text(found.job.base, found.job.assumptions)
             + " (the switches the search does not vary)"},
            {"item": "objective", "value": f"{found.job.objective}"
             f" ({OBJECTIVES[found.job.objective][1]})"},
            {"item": "layouts searched", "value": f"{t.searched:,}"},
            {"item": "invalid (step model's checks)", "value": f"{t.invalid:,}"},
            {"item": "over the memory", "value": f"{t.no_fit:,}"
             + (f" (headroom {found.job.headroom:.0%})" if found.job.headroom else "")},
            *([{"item": "above the router's limit (not timed)",
                "value": f"{t.over_limit:,} ({limit_text()})"}] if t.over_limit else []),
            {"item": "pruned (bound below the top)", "value": f"{t.pruned:,}"},
            {"item": "step modelled", "value": f"{t.evaluated:,}"},
            {"item": "wall time", "value": f"{found.elapsed_s:.1f} s"
             f" ({found.layouts_per_s:,.0f} layouts/s)"}]


def _table_rows(found: PlanResult) -> list[dict[str, Any]]:
    from topomodel.inputs.units import format_si, format_size

    out = []
    for row, r in zip(plan_rows(found), found.best, strict=True):
        lay = r.layout
        out.append({
            "#": row["rank"],
            "layout": f"TP{lay.tp} PP{lay.pp} DP{lay.dp} CP{lay.cp}"
            + (f" EP{lay.ep}" if lay.ep > 1 else ""),
            "batch": f"{r.global_batch:,} / {r.microbatches:,}",
            "mb": lay.micro_batch, "v": lay.interleave, "schedule": lay.schedule,
            "recompute": lay.recompute, "ZeRO": lay.zero,
            "SP": "on" if lay.sequence_parallel else "off", "order": lay.order,
            "step": format_si(r.step_time_s, "s"), "MFU": f"{r.mfu:.1%}",
            "tokens/s": f"{r.tokens_per_s:,.0f}",
            "memory": format_size(r.memory["total_bytes"]),
            "bandwidth": format_si(r.walls["bandwidth_s"], "s"),
            "latency": format_si(r.walls["latency_s"], "s"),
            "topology": format_si(r.walls["topology_s"], "s"),
            "sync": format_si(r.walls["sync_s"], "s")})
    return out


def plan_json(found: PlanResult) -> dict[str, Any]:
    """Plain-type JSON of a plan: the search, the ranked layouts with their full steps."""
    t = found.tally
    return {"design": found.design, "model": found.job.model.id,
            "objective": found.job.objective, "accelerators": found.accelerators,
            "idle_accelerators": found.idle, "global_batch_rule": batch_rule_text(found),
            "search": {"searched": t.searched, "invalid": t.invalid, "no_fit": t.no_fit,
                       "pruned": t.pruned, "evaluated": t.evaluated,
                       "over_limit": t.over_limit,
                       "over_limit_text": over_limit_text(t) or None,
                       "elapsed_s": found.elapsed_s,
                       "layouts_per_s": found.layouts_per_s,
                       "memory_headroom": found.job.headroom,
                       "space": asdict(found.job.space),
                       "invalid_reasons": dict(sorted(t.reasons.items(),
                                                      key=lambda kv: -kv[1])[:10])},
            "power_W": found.power_W,
            "USD_per_h": found.USD_per_h if found.USD_per_h == found.USD_per_h else None,
            "layouts": [{**row, "step": step_json(r, found.job.assumptions)}
                        for row, r in zip(plan_rows(found), found.best, strict=True)],
            "why": why(found)}


def plan_report(found: PlanResult, fmt: str) -> Report:
    """The report of one plan (``fmt``: csv prints the ranked rows alone)."""
    warnings = list(dict.fromkeys(w for r in found.best[:1] for w in r.warnings))
    if found.tally.over_limit:
        warnings.append(over_limit_text(found.tally))
    if fmt == "csv":
        return Report("plan", plan_json(found), [Table("Best layouts", plan_rows(found))])
    title = (f"Best distinct layouts on {job_text(found)}; global batch: "
             f"{batch_rule_text(found)} (batch: sequences / microbatches per pipeline)")
    tables = [Table(title, _table_rows(found), name="best_layouts"),
              Table("Search", _search_rows(found)),
              Table("Why the best wins", [{"": why(found)}])]
    return Report("plan", plan_json(found), tables, warnings)


def compare_report(a: PlanResult, b: PlanResult, fmt: str) -> Report:
    """Two plans: the best layout of each design side by side."""
    from topomodel.inputs.units import format_si, format_size

    name_a, name_b = a.design, b.design
    if name_a == name_b:
        name_a, name_b = f"A: {name_a}", f"B: {name_b}"
    metrics: list[tuple[str, Any]] = [
        ("accelerators", lambda r: f"{r.layout.world:,}"),
        ("layout", lambda r: f"TP{r.layout.tp} PP{r.layout.pp} DP{r.layout.dp}"
         f" CP{r.layout.cp} EP{r.layout.ep}"),
        ("micro-batch / interleave / schedule", lambda r: f"{r.layout.micro_batch} /"
         f" {r.layout.interleave} / {r.layout.schedule}"),
        ("recompute / ZeRO / SP", lambda r: f"{r.layout.recompute} / {r.layout.zero} /"
         f" {'on' if r.layout.sequence_parallel else 'off'}"),
        ("order", lambda r: r.layout.order),
        ("step time", lambda r: format_si(r.step_time_s, "s")),
        ("MFU", lambda r: f"{r.mfu:.1%}"), ("tokens/s", lambda r: f"{r.tokens_per_s:,.0f}"),
        ("memory", lambda r: format_size(r.memory["total_bytes"])),
        ("bandwidth wall", lambda r: format_si(r.walls["bandwidth_s"], "s")),
        ("latency wall", lambda r: format_si(r.walls["latency_s"], "s")),
        ("topology wall", lambda r: format_si(r.walls["topology_s"], "s")),
        ("sync wall", lambda r: format_si(r.walls["sync_s"], "s"))]
    rows: list[dict[str, Any]] = []
    best_a, best_b = (a.best[0] if a.best else None), (b.best[0] if b.best else None)
    for label, fn in metrics:
        rows.append({"metric": label, name_a: fn(best_a) if best_a else "none fits",
                     name_b: fn(best_b) if best_b else "none fits"})
    rows.append({"metric": "layouts searched", name_a: f"{a.tally.searched:,}",
                 name_b: f"{b.tally.searched:,}"})
    ratio = (b.value(best_b) / a.value(best_a)) if best_a and best_b and a.value(best_a) \
        else None
    if ratio is not None:
        rows.append({"metric": f"{a.job.objective} ratio (B / A)", name_a: "",
                     name_b: f"{ratio:.3f}"})
    data = {"a": plan_json(a), "b": plan_json(b), "objective": a.job.objective,
            "ratio_b_over_a": ratio}
    if fmt == "csv":
        both = [{"design": found.design, **row} for found in (a, b)
                for row in plan_rows(found)[:1]]
        return Report("plan_compare", data, [Table("Best layout of each design", both)])
    return Report("plan_compare", data, [Table("Best layout of each design", rows)],
                  [f"{f.design}: {w}" for f in (a, b) for r in f.best[:1]
                   for w in r.warnings]
                  + [f"{f.design}: {over_limit_text(f.tally)}" for f in (a, b)
                     if f.tally.over_limit])


def results_frame(found: PlanResult | list[PlanResult]) -> Any:
    """The ranked rows as a pandas DataFrame (``design`` first when several plans)."""
    import pandas as pd

    plans = found if isinstance(found, list) else [found]
    return pd.DataFrame([{"design": f.design, **row} for f in plans for row in plan_rows(f)])
