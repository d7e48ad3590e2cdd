"""One collective on a fabric: time, algbw, busbw, per-tier load, hotspots, bisection.

JSON (``schema: topomodel.route``, ``version: 1``) keys:

- ``collective``, ``algorithm`` (the one run; with ``auto``, ``candidates`` lists the
  others' times), ``protocol`` (LL, LL128 or Simple: the fastest, as NCCL's tuner
  picks), ``routing``, ``router``, ``size_bytes`` and ``size_convention``,
  ``ranks`` (of the largest group of any set, whatever the order of the sets),
  ``groups`` (count per group set), ``group_sets`` (per set: ``spec``, ``groups``,
  ``ranks``, ``busbw_Bps`` with that set's own nccl-tests factor);
- ``time_s``, ``algbw_Bps``, ``busbw_Bps`` (nccl-tests definitions, of the delivered
  bytes: see ``delivered_share``), ``latency_s``, ``bandwidth_s``, ``topology_s`` (they
  add up to ``time_s``);
- ``tiers``: per link tier ``bytes``, ``capacity_Bps`` (all links, one direction, line
  rate), ``efficiency`` (effective / line rate) with ``efficiency_source``,
  ``effective_capacity_Bps``, ``peak_utilization``, ``mean_utilization`` (busy time /
  collective time, 0-1),
  ``time_share`` (share of the bandwidth time whose slowest link is in this tier);
- ``hotspots``: the busiest links: ``link``, ``tier``, ``bytes``, ``utilization``,
  ``groups`` (group sets that put bytes on it);
- ``bisection``: ``bytes`` crossing between the halves, ``capacity_Bps``, ``time_s`` at
  that capacity;
- ``unroutable_flows``, ``unroutable_bytes`` (never silently dropped: also a warning),
  ``delivered_share`` (share of the traffic's bytes that have a path, 0-1: below 1,
  ``time_s`` covers only them, and ``algbw_Bps`` and ``busbw_Bps`` are the size times
  this share over it, the rate of the delivered part, not of the collective);
- ``assumptions``: the time model's parameters.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from topomodel.analysis.collectives.collective import SIZE_CONVENTIONS, CollectiveRun
from topomodel.analysis.collectives.linkrates import efficiency_sources, launch_latency_source
from topomodel.analysis.collectives.loads import bisection_traffic, hotspots, tier_loads
from topomodel.analysis.collectives.timing import TimeModel
from topomodel.fabric.tables import Fabric
from topomodel.inputs.units import format_rate, format_si, format_size
from topomodel.report.output import Report, Table
from topomodel.routing.policy import resolve_routing

_IN_NETWORK_WHY = (
    "in-network reduction: each rank sends its data to a switch and takes the reduced"
    " result back, so no rank's bytes go to a rank on the other half (the reduction"
    " tree's own links carry their load in the tiers above)")
"""Why an in-network AllReduce moves no bytes across the bisection."""


def _launch_note(fabric: Fabric) -> str:
    """Where the latency includes the system's launch latency, it and its source."""
    launch = launch_latency_source(fabric)
    return "" if launch is None else (f" (latency with launch latency"
                                      f" {format_si(launch[0], 's')}, {launch[1]})")


def route_report(fabric: Fabric, run: CollectiveRun, *, routing: str, top: int = 10,
                 time_model: TimeModel | None = None) -> Report:
    """The report of one collective run."""
    time_model = time_model or TimeModel()
    timing = run.timing
    links = fabric.link_arrays
    applied = resolve_routing(fabric, routing)
    total = timing.time_s
    tiers = [dataclasses.asdict(t) for t in tier_loads(fabric, timing)]
    hot = [{**dataclasses.asdict(h), "groups": list(h.groups)}
           for h in hotspots(fabric, run, top)]
    crossing = bisection_traffic(fabric, run.traffic)
    cross = {} if crossing is None else dataclasses.asdict(crossing)
    warnings = []
    delivered = run.delivered_share
    if timing.unroutable_flows:
        warnings.append(f"{timing.unroutable_flows} flows ({format_size(timing.unroutable_bytes)})"
                        " have no path and were NOT delivered: the time covers only the rest,"
                        f" and algbw and busbw count only the {delivered:.1%} of the bytes"
                        " delivered (the collective as asked does not complete)")
    if links["failed"].any():
        warnings.append(f"{int(links['failed'].sum() // 2)} failed links; traffic re-routed")
    sources = efficiency_sources(fabric, time_model)
    efficiency = {tier: value for tier, (value, _) in sources.items()}
    for t in tiers:
        t["efficiency"] = efficiency.get(t["name"], 1.0)
        t["efficiency_source"] = sources.get(t["name"], (1.0, ""))[1]
        t["effective_capacity_Bps"] = t["capacity_Bps"] * t["efficiency"]
    data: dict[str, Any] = {
        "design": fabric.design.name or fabric.design.file,
        "collective": run.collective, "algorithm": run.algorithm,
        "candidates": {k: {"time_s": v} for k, v in run.candidates.items()},
        "protocol": timing.protocol or None,
        "measured_curve": timing.measured or None,
        "routing": applied.routing, "routing_reason": applied.reason,
        "router": timing.phases[0].routed.router if timing.phases else "",
        "size_bytes": run.size_bytes, "size_convention": SIZE_CONVENTIONS[run.collective],
        "ranks": run.ranks, "groups": dict(zip(run.group_sets, run.groups, strict=True)),
        "group_sets": [{"spec": spec, "groups": count, "ranks": ranks, "busbw_Bps": busbw}
                       for spec, count, ranks, busbw in zip(
                           run.group_sets, run.groups, run.ranks_per_set,
                           run.busbw_per_set_Bps, strict=True)],
        "time_s": total, "algbw_Bps": run.algbw_Bps, "busbw_Bps": run.busbw_Bps,
        "latency_s": timing.latency_s, "bandwidth_s": timing.bandwidth_s,
        "topology_s": timing.topology_s,
        "tiers": tiers, "hotspots": hot, "bisection": cross,
        "unroutable_flows": timing.unroutable_flows,
        "unroutable_bytes": timing.unroutable_bytes, "delivered_share": delivered,
        "phases": [{"label": p.label, "steps": p.steps, "bandwidth_s": p.bandwidth_s,
                    "ideal_s": p.ideal_s, "latency_s": p.latency_s} for p in timing.phases],
        "assumptions": {**dataclasses.asdict(time_model), "efficiency": efficiency},
    }
    summary = [
        {"item": "collective", "value": f"{run.collective} ({run.algorithm}), "
         f"{format_size(run.size_bytes)} ({SIZE_CONVENTIONS[run.collective]})"},
        {"item": "groups", "value": ", ".join(
            f"{n} x {spec} of {r} ranks" for spec, n, r in
            zip(run.group_sets, run.groups, run.ranks_per_set, strict=True))},
        {"item": "time", "value": format_si(total, "s")},
        {"item": "algbw / busbw" if delivered == 1 else
         "algbw / busbw of the delivered bytes only", "value": (
             "" if delivered == 1 else f"NOT the collective's (it does not complete):"
             f" {delivered:.1%} of its bytes delivered, ")
         + f"{format_rate(run.algbw_Bps)} / {format_rate(run.busbw_Bps)}"
         + ("" if len(set(run.ranks_per_set)) == 1 else
                                             f" (of the {run.ranks}-rank groups; per set: "
                                             + ", ".join(f"{spec} {format_rate(b)}" for spec, b
                                                         in zip(run.group_sets,
                                                                run.busbw_per_set_Bps,
                                                                strict=True)) + ")")},
        {"item": "latency / bandwidth / topology", "value": " / ".join(
            format_si(v, "s") for v in (timing.latency_s, timing.bandwidth_s,
                                        timing.topology_s)) + _launch_note(fabric)},
        {"item": "routing", "value": f"{applied.text} ({data['router']} router)"},
        *([{"item": "protocol", "value": timing.protocol if not timing.measured else
            f"as measured (the model would pick {timing.protocol})"}]
          if timing.protocol else []),
        *([{"item": "timed by", "value": timing.measured}] if timing.measured else []),
    ]
    if run.candidates:
        summary.append({"item": "auto candidates", "value": ", ".join(
            f"{k} {format_si(v, 's')}" for k, v in sorted(run.candidates.items(),
                                                           key=lambda kv: kv[1]))})
    tier_rows = [{"tier": t["name"], "bytes": format_size(t["bytes"]),
                  "capacity (per dir)": format_rate(t["capacity_Bps"]),
                  "effective": f"{format_rate(t['effective_capacity_Bps'])}"
                  f" ({t['efficiency']:.3g}"
                  + (f", {t['efficiency_source']}"
                     if t["efficiency_source"].startswith("as measured") else "") + ")",
                  "peak util": f"{t['peak_utilization']:.0%}",
                  "mean util": f"{t['mean_utilization']:.0%}",
                  "share of time": f"{t['time_share']:.0%}"} for t in tiers]
    hot_rows = [{"link": h["link"], "tier": h["tier"], "bytes": format_size(h["bytes"]),
                 "util": f"{h['utilization']:.0%}", "groups": ", ".join(h["groups"])}
                for h in hot]
    record = {key: data[key] for key in (
        "design", "collective", "algorithm", "protocol", "routing", "router", "size_bytes",
        "ranks", "time_s", "algbw_Bps", "busbw_Bps", "latency_s", "bandwidth_s",
        "topology_s", "unroutable_flows", "unroutable_bytes", "delivered_share")}
    tables = [Table("Collective", summary, [record]), Table("Tiers", tier_rows, tiers),
              Table(f"Hotspots (top {top})", hot_rows, hot, name="hotspots")]
    if cross:
        why = (_IN_NETWORK_WHY if run.algorithm == "innetwork" and cross["bytes"] == 0
               else "")
        tables.append(Table("Bisection", [{
            "bytes across": format_size(cross["bytes"]),
            "capacity (per dir)": format_rate(cross["capacity_Bps"]),
            "time at capacity": format_si(cross["time_s"], "s"),
            **({"why": why} if why else {})}], [{**cross, **({"why": why} if why else {})}]))
    return Report("route", data, tables, warnings)


