"""One collective on a fabric: time, algbw, busbw, per-tier load, hotspots, bisection.

JSON (``schema: topomodel.route``, ``version: 1``) keys:

- ``collective``, ``algorithm`` (the one run; with ``auto``, ``candidates`` lists the
  others' times), ``routing``, ``router``, ``size_bytes`` and ``size_convention``,
  ``ranks`` (per group), ``groups`` (count per group set);
- ``time_s``, ``algbw_Bps``, ``busbw_Bps`` (nccl-tests definitions), ``latency_s``,
  ``bandwidth_s``, ``topology_s`` (they add up to ``time_s``);
- ``tiers``: per link tier ``bytes``, ``capacity_Bps`` (all links, one direction),
  ``peak_utilization``, ``mean_utilization`` (busy time / collective time, 0-1),
  ``time_share`` (share of the bandwidth time whose slowest link is in this tier);
- ``hotspots``: the busiest links: ``link``, ``tier``, ``bytes``, ``utilization``,
  ``groups`` (group sets that put bytes on it);
- ``bisection``: ``bytes`` crossing between the halves, ``capacity_Bps``, ``time_s`` at
  that capacity;
- ``unroutable_flows``, ``unroutable_bytes`` (never silently dropped: also a warning);
- ``assumptions``: the time model's parameters.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from topomodel.analysis.bisection import closed_form, halves
from topomodel.analysis.collective import SIZE_CONVENTIONS, CollectiveRun
from topomodel.analysis.timing import TimeModel, TrafficTime, tier_efficiency
from topomodel.fabric.tables import Fabric, labels
from topomodel.report.output import Report, Table
from topomodel.traffic.phases import Traffic
from topomodel.units import format_rate, format_si, format_size
from topomodel.vocabulary import LINK_TIERS


def route_report(fabric: Fabric, run: CollectiveRun, *, routing: str, top: int = 10,
                 model: TimeModel | None = None) -> Report:
    """The report of one collective run."""
    model = model or TimeModel()
    timing = run.timing
    links = fabric.links
    total = timing.time_s
    tiers = _tier_rows(fabric, timing)
    hotspots = _hotspots(fabric, run, top)
    cross = _bisection_traffic(fabric, run.traffic)
    warnings = []
    if timing.unroutable_flows:
        warnings.append(f"{timing.unroutable_flows} flows ({format_size(timing.unroutable_bytes)})"
                        " have no path and were NOT delivered: the time covers only the rest")
    if links["failed"].any():
        warnings.append(f"{int(links['failed'].sum() // 2)} failed links; traffic re-routed")
    efficiency = tier_efficiency(fabric, model)
    data: dict[str, Any] = {
        "design": fabric.design.name or fabric.design.file,
        "collective": run.collective, "algorithm": run.algorithm,
        "candidates": {k: {"time_s": v} for k, v in run.candidates.items()},
        "routing": routing, "router": timing.phases[0].routed.router if timing.phases else "",
        "size_bytes": run.size_bytes, "size_convention": SIZE_CONVENTIONS[run.collective],
        "ranks": run.ranks, "groups": dict(zip(run.group_sets, run.groups, strict=True)),
        "time_s": total, "algbw_Bps": run.algbw_Bps, "busbw_Bps": run.busbw_Bps,
        "latency_s": timing.latency_s, "bandwidth_s": timing.bandwidth_s,
        "topology_s": timing.topology_s,
        "tiers": tiers, "hotspots": hotspots, "bisection": cross,
        "unroutable_flows": timing.unroutable_flows,
        "unroutable_bytes": timing.unroutable_bytes,
        "phases": [{"label": p.label, "steps": p.steps, "bandwidth_s": p.bandwidth_s,
                    "ideal_s": p.ideal_s, "latency_s": p.latency_s} for p in timing.phases],
        "assumptions": {**dataclasses.asdict(model), "efficiency": efficiency},
    }
    summary = [
        {"item": "collective", "value": f"{run.collective} ({run.algorithm}), "
         f"{format_size(run.size_bytes)} ({SIZE_CONVENTIONS[run.collective]})"},
        {"item": "groups", "value": ", ".join(f"{n} x {spec}" for spec, n in
                                              zip(run.group_sets, run.groups, strict=True))
         + f" of {run.ranks} ranks"},
        {"item": "time", "value": format_si(total, "s")},
        {"item": "algbw / busbw", "value": f"{format_rate(run.algbw_Bps)} /"
         f" {format_rate(run.busbw_Bps)}"},
        {"item": "latency / bandwidth / topology", "value": " / ".join(
            format_si(v, "s") for v in (timing.latency_s, timing.bandwidth_s,
                                        timing.topology_s))},
        {"item": "routing", "value": f"{routing} ({data['router']} router)"},
    ]
    if run.candidates:
        summary.append({"item": "auto candidates", "value": ", ".join(
            f"{k} {format_si(v, 's')}" for k, v in sorted(run.candidates.items(),
                                                           key=lambda kv: kv[1]))})
    tier_rows = [{"tier": t["name"], "bytes": format_size(t["bytes"]),
                  "capacity (per dir)": format_rate(t["capacity_Bps"]),
                  "peak util": f"{t['peak_utilization']:.0%}",
                  "mean util": f"{t['mean_utilization']:.0%}",
                  "share of time": f"{t['time_share']:.0%}"} for t in tiers]
    hot_rows = [{"link": h["link"], "tier": h["tier"], "bytes": format_size(h["bytes"]),
                 "util": f"{h['utilization']:.0%}", "groups": ", ".join(h["groups"])}
                for h in hotspots]
    tables = [Table("Collective", summary), Table("Tiers", tier_rows),
              Table(f"Hotspots (top {top})", hot_rows)]
    if cross:
        tables.append(Table("Bisection", [{
            "bytes across": format_size(cross["bytes"]),
            "capacity (per dir)": format_rate(cross["capacity_Bps"]),
            "time at capacity": format_si(cross["time_s"], "s")}]))
    return Report("route", data, tables, warnings)


def _tier_rows(fabric: Fabric, timing: TrafficTime) -> list[dict[str, Any]]:
    links = fabric.links
    total = timing.time_s or 1.0
    codes = links["tier"].cat.codes.to_numpy()
    names = list(links["tier"].cat.categories)
    capacity = links["capacity_Bps"].to_numpy()
    bottleneck_time: dict[str, float] = {}
    for p in timing.phases:
        if p.bottleneck >= 0 and p.bandwidth_s > 0:
            tier = names[codes[p.bottleneck]]
            bottleneck_time[tier] = bottleneck_time.get(tier, 0.0) + p.steps * p.bandwidth_s
    all_bw = sum(bottleneck_time.values()) or 1.0
    rows = []
    for code in np.unique(codes):
        mask = codes == code
        util = timing.link_busy_s[mask] / total
        rows.append({"name": names[code], "bytes": float(timing.link_bytes[mask].sum()),
                     "capacity_Bps": float(capacity[mask].sum() / 2),
                     "peak_utilization": float(util.max()),
                     "mean_utilization": float(util.mean()),
                     "time_share": bottleneck_time.get(names[code], 0.0) / all_bw})
    return sorted(rows, key=lambda r: LINK_TIERS.index(r["name"]))


def _hotspots(fabric: Fabric, run: CollectiveRun, top: int) -> list[dict[str, Any]]:
    timing = run.timing
    busy = timing.link_busy_s
    count = min(top, int((busy > 0).sum()))
    if not count:
        return []
    rows = np.argsort(-busy, kind="stable")[:count]
    names = fabric.nodes["name"].to_numpy()
    links = fabric.links
    src, dst = links["src"].to_numpy(), links["dst"].to_numpy()
    tier = labels(links["tier"])
    total = timing.time_s or 1.0
    return [{"link": f"{names[src[r]]} -> {names[dst[r]]}", "tier": tier[r],
             "bytes": float(timing.link_bytes[r]), "utilization": float(busy[r] / total),
             "groups": [name for name, per in zip(run.group_sets, run.set_link_bytes,
                                                  strict=True) if per[r] > 0]}
            for r in rows]


def _bisection_traffic(fabric: Fabric, traffic: Traffic) -> dict[str, float]:
    """Bytes crossing between the bisection halves (the busier direction)."""
    capacity, _ = closed_form(fabric)
    if not capacity:
        return {}
    side_a, _ = halves(fabric)
    in_a = np.zeros(len(fabric.nodes), bool)
    in_a[side_a] = True
    crossing = 0.0
    for p in traffic.phases:
        a_to_b = float(p.bytes[in_a[p.src] & ~in_a[p.dst]].sum())
        b_to_a = float(p.bytes[~in_a[p.src] & in_a[p.dst]].sum())
        crossing += max(a_to_b, b_to_a) * p.steps
    return {"bytes": crossing, "capacity_Bps": capacity, "time_s": crossing / capacity}
