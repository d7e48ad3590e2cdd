"""Measure: which of a plan's modelled steps were needed, and how far each bound of the
search sat under the step of the layouts it let through.

Run: python benchmarks/measure_plan_bounds.py EXAMPLE --model M [--accelerators N]
     [any other ``plan`` flag]

It runs ``topomodel plan`` in this process with the search's bounds recorded as it
takes them (each wrapped, none changed: the top is the plain run's), then, per modelled
step, prints whether it was needed (its score at least the final top's last: a step
below it could have been pruned by a bound tight enough) and, for each bound, the
bound's step time over the step's (1 = exact):

- ``cheap``: :func:`busy_bound` (busiest stage, no bubble), the group's first key;
- ``timeline``: :func:`step_bound` on the comm-free timeline (the bubble, scaled by the
  frame's share), the group's second key;
- ``unplaced``: the screen with every collective at what no placement beats;
- ``order``: the bound the search last took for the order before modelling it (the
  screen with its known and bounded collective times, or its own timeline's);
- ``screen*`` and ``own*``: the screen and the order's own bound
  (:func:`bound_with_calls`) with the step's own collective times (all routed once the
  search ends), so what is left of a bound's gap is its own, not its collectives'; and
  ``own1*``: the order's own bound with the frame's share at 1 (the gap the share opens).

Then a histogram per layout family (PP 1 or more, interleaved, ZeRO, schedule) of the
unneeded steps by those ratios.
"""

from __future__ import annotations

import sys
import time
from collections import defaultdict
from dataclasses import replace
from typing import Any

import numpy as np

import topomodel.plan.search as search
from topomodel.analysis.training import stepbound
from topomodel.analysis.training.orderscreen import order_screen
from topomodel.analysis.training.step import step_calls
from topomodel.analysis.training.stepshape import collective_times, shape_of
from topomodel.cli import main as cli_main
from topomodel.plan import callfloors, orderbounds

RECORD: dict[str, Any] = {"steps": [], "cpu": [], "missed": {}, "cheap": {}, "timeline": {},
                          "order": {}, "unplaced": {}}


def _family(layout: Any) -> tuple[Any, ...]:
    return tuple(getattr(layout, f) for f in layout.__dataclass_fields__
                 if f not in ("order", "zero"))


def _install() -> None:
    original_step = search.step_time
    original_busy = search.busy_bound
    original_bound = search.step_bound
    original_best = orderbounds.OrderBounds.best_score
    original_unplaced = orderbounds.OrderBounds.unplaced_score
    original_cells = search.search_cells

    def step_time(fabric: Any, model: Any, layout: Any, *args: Any, **kw: Any) -> Any:
        start = time.process_time()
        result = original_step(fabric, model, layout, *args, **kw)
        RECORD["steps"].append(result)
        RECORD["cpu"].append(time.process_time() - start)
        return result

    def busy_bound(model: Any, layout: Any, *args: Any, **kw: Any) -> Any:
        bound = original_busy(model, layout, *args, **kw)
        RECORD["cheap"][_family(layout)] = bound.step_time_s
        return bound

    def step_bound(model: Any, layout: Any, *args: Any, **kw: Any) -> Any:
        bound = original_bound(model, layout, *args, **kw)
        RECORD["timeline"][(_family(layout), layout.zero)] = bound.step_time_s
        return bound

    def best_score(self: Any, layout: Any, worst: float) -> float:
        score = original_best(self, layout, worst)
        RECORD["order"][(_family(layout), layout.zero, layout.order)] = score
        RECORD["missed"][(_family(layout), layout.zero, layout.order)] = self._calls(
            layout)[1]
        return score

    def unplaced_score(self: Any, layout: Any) -> float:
        score = original_unplaced(self, layout)
        RECORD["unplaced"][(_family(layout), layout.zero)] = score
        return score

    def search_cells(fabric: Any, job: Any, *args: Any, **kw: Any) -> Any:
        RECORD["fabric"], RECORD["job"] = fabric, job
        return original_cells(fabric, job, *args, **kw)

    search.step_time = step_time
    search.busy_bound = busy_bound
    search.step_bound = step_bound
    orderbounds.OrderBounds.best_score = best_score
    orderbounds.OrderBounds.unplaced_score = unplaced_score
    search.search_cells = search_cells


def _label(layout: Any) -> str:
    return (f"PP {layout.pp}{' VP' if layout.interleave > 1 else ''} ZeRO {layout.zero}"
            f" {layout.schedule}")


def _exact(fabric: Any, job: Any, layout: Any) -> tuple[float, float, float]:
    """The screen, the order's own bound and that bound at share 1 with the step's own
    collective times (every one routed by now), seconds."""
    shape = shape_of(fabric, job.model, layout)
    calls, _ = callfloors.order_calls(fabric, job.model, layout, job.assumptions, shape,
                                     routing=job.routing, seed=job.seed)
    base = stepbound.comm_free_pipeline(job.model, layout, job.assumptions, shape)
    screen = order_screen(job.model, layout, job.assumptions, shape, base, calls)
    own_pipe = stepbound.comm_free_pipeline(job.model, layout, job.assumptions, shape, calls)
    frame = stepbound.bound_frame(job.model, layout, job.assumptions, shape)
    return (screen.bound(calls).step_time_s, frame.bound(own_pipe).step_time_s,
            replace(frame, share=1.0).bound(own_pipe).step_time_s)


def _call_ratios(fabric: Any, job: Any, layout: Any) -> dict[str, tuple[float, float]]:
    """Per collective of ``layout``'s step: its bound on the order's placement over its
    routed time, and the routed time's latency share."""
    shape = shape_of(fabric, job.model, layout)
    timed, _ = step_calls(fabric, job.model, layout, job.assumptions, shape=shape,
                          routing=job.routing, seed=job.seed)
    views = next(v for v in fabric.__dict__.values()
                 if isinstance(v, dict) and (collective_times, ()) in v)
    table = views[collective_times, ()]
    views[collective_times, ()] = {}
    try:
        bounded, _ = callfloors.order_calls(fabric, job.model, layout, job.assumptions,
                                           shape, routing=job.routing, seed=job.seed)
    finally:
        views[collective_times, ()] = table
    return {n: (bounded[n].time_s / c.time_s if c.time_s > 0 else 1.0,
                c.latency_s / c.time_s if c.time_s > 0 else 0.0)
            for n, c in timed.items()}


def _histogram(ratios: list[float]) -> str:
    edges = [0.0, 0.5, 0.8, 0.9, 0.95, 0.98, 1.0 + 1e-6]
    counts, _ = np.histogram(np.clip(ratios, 0, 1), bins=edges)
    return " ".join(f"{c:4d}" for c in counts)


def report() -> None:
    fabric, job = RECORD["fabric"], RECORD["job"]
    steps = RECORD["steps"]
    tokens = [r.tokens_per_s for r in steps]
    best: dict[tuple[Any, ...], float] = {}
    for r in steps:
        key = search.distinct_key(r.layout)
        best[key] = max(best.get(key, -np.inf), r.tokens_per_s)
    kept = sorted(best.values(), reverse=True)
    worst = kept[min(job.top, len(kept)) - 1]
    worst_s = min(r.step_time_s for r in steps if r.tokens_per_s == worst)
    print(f"steps modelled {len(steps)}; top's last {worst_s:.6f} s, {worst:.6g} tokens/s")
    rows: dict[str, list[dict[str, float]]] = defaultdict(list)
    per_call: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for r, tps, cpu in zip(steps, tokens, RECORD["cpu"], strict=True):
        lay = r.layout
        fam = _family(lay)
        row = {"step": r.step_time_s, "needed": float(tps >= worst),
               "cheap": RECORD["cheap"].get(fam, float("nan")) / r.step_time_s,
               "timeline": RECORD["timeline"].get((fam, lay.zero), float("nan"))
               / r.step_time_s}
        tokens_step = r.tokens_per_s * r.step_time_s
        for key, name in (((fam, lay.zero), "unplaced"), ((fam, lay.zero, lay.order),
                                                         "order")):
            score = RECORD[name].get(key)
            row[name] = (tokens_step / score / r.step_time_s if score else float("nan"))
        screen, own, own1 = _exact(fabric, job, lay)
        row |= {"screen*": screen / r.step_time_s, "own*": own / r.step_time_s,
                "own1*": own1 / r.step_time_s, "miss": tps / worst,
                "cpu": cpu, "routed": float(RECORD["missed"].get(
                    (fam, lay.zero, lay.order), 1) > 0)}
        rows[_label(lay)].append(row)
        if not row["needed"] and row["routed"]:
            for n, pair in _call_ratios(fabric, job, lay).items():
                per_call[n].append(pair)
    names = ("cheap", "timeline", "unplaced", "order", "screen*", "own*", "own1*")
    print("family | modelled | unneeded (of them routing) | their CPU s | tokens/s over"
          " the top's last, unneeded (median) | "
          + " | ".join(f"{n} median (min-max)" for n in names))
    for label, group in sorted(rows.items()):
        unneeded = [g for g in group if not g["needed"]]
        cells = []
        for n in names:
            v = np.array([g[n] for g in unneeded or group])
            v = v[np.isfinite(v)]
            cells.append(f"{np.median(v):.3f} ({v.min():.3f}-{v.max():.3f})" if len(v)
                         else "-")
        miss = np.median([g["miss"] for g in unneeded]) if unneeded else float("nan")
        routed = sum(g["routed"] for g in unneeded)
        cpu = sum(g["cpu"] for g in unneeded)
        print(f"{label} | {len(group)} | {len(unneeded)} ({routed:.0f}) | {cpu:.1f} |"
              f" {miss:.3f} | " + " | ".join(cells))
    print("histogram of the unneeded steps' bound/step, bins <0.5 0.5-0.8 0.8-0.9"
          " 0.9-0.95 0.95-0.98 0.98-1:")
    for which, keep in (("all", lambda g: True), ("routing", lambda g: g["routed"]),
                        ("timed", lambda g: not g["routed"])):
        every = [g for group in rows.values() for g in group
                 if not g["needed"] and keep(g)]
        print(f" {which} ({len(every)} steps, {sum(g['cpu'] for g in every):.1f} CPU s)")
        for n in names:
            v = [g[n] for g in every if np.isfinite(g[n])]
            print(f"  {n:9} {_histogram(v)}")


    print("per collective of the unneeded routing steps: bound on the placement / routed"
          " time, median (min-max); routed time's latency share, median")
    for n, pairs in sorted(per_call.items()):
        r = np.array([x for x, _ in pairs])
        lat = np.array([y for _, y in pairs])
        print(f"  {n:8} {len(r):5d}  {np.median(r):.3f} ({r.min():.3f}-{r.max():.3f})"
              f"  latency {np.median(lat):.3f}")


def main() -> None:
    _install()
    argv = ["plan", *sys.argv[1:], "--no-progress", "--format", "json", "-o",
            "/tmp/measure_plan_bounds.json"]
    status = cli_main(argv)
    if status:
        raise SystemExit(status)
    report()


if __name__ == "__main__":
    main()
