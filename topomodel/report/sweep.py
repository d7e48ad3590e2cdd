"""Sweep reports: the summary of a run (counts, time, the best point per metric, the
Pareto front and its plot) and the plan of a dry run."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from topomodel.analysis.pareto import Objective, pareto_mask
from topomodel.draw.charts import plot_front
from topomodel.errors import UsageError
from topomodel.files import plain_json
from topomodel.report.output import Report, Table
from topomodel.sweep.file import Sweep
from topomodel.sweep.params import METRIC_BY_NAME, canonical, design_overrides
from topomodel.sweep.run import SweepOutcome
from topomodel.traffic.layout import BATCH_RULE


def format_metric(name: str, value: Any) -> str:
    """A metric's value for people: SI prefixes and units, percentages for shares.

    Examples
    --------
    >>> format_metric("step_time_s", 2.25), format_metric("mfu", 0.4211)
    ('2.25 s', '42.1%')
    >>> format_metric("tokens_per_s", 1.25e6)
    '1,250,000 /s'
    """
    from topomodel.inputs.units import format_rate, format_si, format_size

    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if isinstance(value, bool) or not isinstance(value, int | float):
        return str(value)
    if name in ("mfu", "hfu", "comm_share"):
        return f"{value:.1%}"
    if name.endswith("_Bps"):
        return format_rate(value)
    if name.endswith("_bytes"):
        return format_size(value)
    if name.endswith("_per_s"):
        return f"{value:,.0f} /s"
    if name.endswith("_s"):
        return format_si(value, "s")
    if name.endswith(("_W", "_W_per_accelerator")):
        return format_si(value, "W")
    if name.endswith("_USD"):
        from topomodel.report.power import format_usd

        return format_usd(value)
    metric = METRIC_BY_NAME.get(name)
    if isinstance(value, int) or (metric is not None and metric.dtype == "int"):
        return f"{int(value):,}"
    return f"{value:,.4g}"


def _describe(sweep: Sweep, row: Mapping[str, Any]) -> str:
    return ", ".join(f"{c}={row[c]}" for c in sweep.varied) or "(fixed settings)"


def _varied(sweep: Sweep, row: Mapping[str, Any]) -> dict[str, Any]:
    return {c: plain_json(row[c]) for c in sweep.varied}


def sweep_report(outcome: SweepOutcome, *, pareto: tuple[Objective, Objective] | None = None,
                 plot: str | None = None) -> Report:
    """The summary of a sweep as a :class:`~topomodel.report.output.Report`: counts and time,
    the best point per metric, and the Pareto front when asked (drawn to ``plot``)."""
    sweep, frame = outcome.sweep, outcome.frame
    ok = frame["error"].isna().to_numpy()
    feasible = ok & frame["feasible"].fillna(False).to_numpy(dtype=bool)
    failed, infeasible = int((~ok).sum()), int((ok & ~feasible).sum())
    rate = outcome.ran / outcome.elapsed_s if outcome.elapsed_s > 0 else math.nan
    where = (f"Dask scheduler {outcome.scheduler}" if outcome.scheduler else
             f"{outcome.workers} local process{'es' if outcome.workers > 1 else ''}")
    summary = [{"item": item, "value": value} for item, value in [
        ("sweep", f"{sweep.name} ({sweep.file})"),
        ("base design", sweep.design_file),
        ("global batch", "each point's global_batch, else the default: " + BATCH_RULE
         + " (columns global_batch_used, microbatches_used)"),
        ("points", f"{len(frame):,}"),
        ("computed now", f"{outcome.ran:,} on {where}"),
        ("from a previous run", f"{outcome.resumed:,}"),
        ("failed (error column)", f"{failed:,}"),
        ("breaking a constraint", f"{infeasible:,}"),
        ("time", f"{outcome.elapsed_s:.1f} s"
         + (f" ({rate:.3g} points/s)" if outcome.ran else "")),
        ("results", f"{outcome.path} ({outcome.results_format})")]]
    best_rows, best_data = [], []
    pool = frame[feasible]
    for name in sweep.metrics:
        better = METRIC_BY_NAME[name].better
        if better is None:
            continue
        column = pool[name].astype(float)
        if column.isna().all() or column.min() == column.max():
            continue  # nothing to choose between
        row = pool.loc[column.idxmin() if better == "min" else column.idxmax()]
        best_rows.append({"metric": name, "best": format_metric(name, row[name]),
                          "point": row["key"], "parameters": _describe(sweep, row)})
        best_data.append({"metric": name, "better": better, "value": plain_json(row[name]),
                          "key": row["key"], "parameters": _varied(sweep, row)})
    report: dict[str, Any] = {
        "sweep": sweep.file, "name": sweep.name, "design": sweep.design_file,
        "results": str(outcome.path), "results_format": outcome.results_format,
        "points": len(frame), "computed": outcome.ran, "resumed": outcome.resumed,
        "failed": failed, "infeasible": infeasible, "time_s": outcome.elapsed_s,
        "points_per_s": rate if outcome.ran else None, "best": best_data}
    record = {k: v for k, v in report.items() if k != "best"}
    tables = [Table("Sweep", summary, [record]),
              Table("Best feasible point per metric (metrics that differ)", best_rows,
                    best_data, name="best")]
    warnings = list(outcome.warnings)
    if failed:
        warnings.append(f"{failed} point(s) failed; their error is in the error column")
    if not feasible.any():
        warnings.append("no point both ran and met every constraint")
    power_metrics = [m for m in (*sweep.metrics, *(o.name for o in pareto or ()))
                     if m.endswith("_W") or m == "tokens_per_J"]
    if "power_unknown" in frame and power_metrics:
        gaps = pool["power_unknown"].fillna("").unique()
        partial = int(pool["power_unknown"].notna().sum())
        if partial:
            warnings.append(f"power is a partial sum in {partial} point(s): the catalog"
                            " has no power figure for the parts power_unknown names")
        if len(gaps) > 1:
            warnings.append("the catalog lacks power figures for different parts in"
                            " different points (see power_unknown): compare power only"
                            " between points with the same power_unknown")
    if pareto is not None:
        front_rows, front_data = _pareto(outcome, pareto, feasible, plot)
        tables.append(Table(f"Pareto front: {pareto[0]} vs {pareto[1]}", front_rows,
                            front_data, name="pareto_front"))
        report["pareto"] = {"x": pareto[0].name, "x_better": pareto[0].better,
                            "y": pareto[1].name, "y_better": pareto[1].better,
                            "points": front_data}
        if plot:
            report["plot"] = plot
    return Report("sweep", report, tables, warnings)


def _pareto(outcome: SweepOutcome, objectives: tuple[Objective, Objective],
            feasible: Any, plot: str | None) -> tuple[list[dict[str, Any]],
                                                       list[dict[str, Any]]]:
    """The Pareto front of the feasible points, for people and for JSON; drawn to
    ``plot`` if given."""
    import numpy as np

    sweep, frame = outcome.sweep, outcome.frame
    x_name, y_name = objectives[0].name, objectives[1].name
    x = frame[x_name].to_numpy(dtype=float, na_value=np.nan)
    y = frame[y_name].to_numpy(dtype=float, na_value=np.nan)
    values = np.where(feasible[:, None], np.c_[x, y], np.nan)
    mask = pareto_mask(values, [o.better == "max" for o in objectives])
    front = frame[mask].assign(_x=x[mask]).sort_values(["_x", y_name], kind="stable")
    rows = [{x_name: format_metric(x_name, r[x_name]),
             y_name: format_metric(y_name, r[y_name]),
             "parameters": _describe(sweep, r), "point": r["key"]}
            for _, r in front.iterrows()]
    data = [{"key": r["key"], x_name: plain_json(r[x_name]), y_name: plain_json(r[y_name]),
             "parameters": _varied(sweep, r)} for _, r in front.iterrows()]
    if plot:
        shown = feasible & ~np.isnan(x) & ~np.isnan(y)
        ok = frame["error"].isna().to_numpy() & ~feasible & ~np.isnan(x) & ~np.isnan(y)
        try:
            plot_front(x[shown], y[shown], mask[shown], plot, objectives=objectives,
                       title=f"{sweep.name}: {int(mask.sum())} Pareto-optimal of"
                       f" {int(shown.sum())}", excluded=(x[ok], y[ok]))
        except (OSError, ValueError) as exc:
            raise UsageError(f"{plot}: cannot draw the front: {exc}") from None
    return rows, data


def dry_run_report(sweep: Sweep, *, show: int = 20) -> Report:
    """What a sweep would run: counts per block and the first ``show`` points."""
    blocks: list[dict[str, Any]] = [{"block": i, "axes": " x ".join(
        "(" + ", ".join(a.keys) + f") {len(a.values)}" if len(a.keys) > 1
        else f"{a.keys[0]} {len(a.values)}" for a in b.axes) or "(fixed)",
        "points": b.count} for i, b in enumerate(sweep.blocks)]
    designs = len({canonical(design_overrides(p)) for p in sweep.points})
    points = [{"point": i, "key": sweep.keys[i],
               **{c: sweep.value(p, c) for c in sweep.varied}}
              for i, p in enumerate(sweep.points[:show])]
    data = {"sweep": sweep.file, "points": len(sweep.points), "expanded": sweep.expanded,
            "duplicates": sweep.duplicates, "designs": designs,
            "blocks": [b["points"] for b in blocks], "metrics": list(sweep.metrics),
            "constraints": list(sweep.constraints)}
    dropped = f" ({sweep.duplicates} duplicates dropped)" if sweep.duplicates else ""
    summary: list[dict[str, Any]] = [
        {"item": "points", "value": f"{len(sweep.points):,}{dropped}"},
        {"item": "distinct designs to build", "value": f"{designs:,}"},
        {"item": "metrics recorded", "value": len(sweep.metrics)},
        {"item": "constraints", "value": "; ".join(sweep.constraints) or "-"}]
    plan = {"points": len(sweep.points), "duplicates": sweep.duplicates,
            "designs": designs, "metrics": len(sweep.metrics),
            "constraints": "; ".join(sweep.constraints)}
    return Report("sweep_plan", data, [Table("Sweep plan", summary, [plan]),
                                       Table("Blocks", blocks),
                                       Table(f"First {min(show, len(points))} points",
                                             points, name="points")])
