"""Evaluating sweep points: one point's parameter set through the step model, in a
worker or in this process.

:func:`evaluate_point` computes every metric of one point; :func:`run_points` runs a few
points, checks the sweep's constraints on each and turns an exception into the point's
error, so a failing point never stops a sweep. What a worker needs is sent once as a
:class:`SweepContext`; each worker keeps the last few built fabrics
(:data:`FABRIC_CACHE_SIZE`), so a design is built once per worker, not once per point.
"""

from __future__ import annotations

import math
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from topomodel.errors import InputError, TopomodelError, UsageError
from topomodel.inputs.catalog import Catalog
from topomodel.inputs.design import load_design
from topomodel.inputs.parts import Model
from topomodel.sweep.constraints import compiled, constraint_holds
from topomodel.sweep.params import (
    Settings,
    apply_overrides,
    canonical,
    design_overrides,
    step_values,
)

FABRIC_CACHE_SIZE = 4
"""Built fabrics each worker keeps (least recently used dropped). Points are sent grouped
by design, so a handful suffices (a whole process building a 131k-accelerator fabric
peaks at about 300 MiB: benchmarks/README.md)."""


@dataclass(frozen=True)
class SweepContext:
    """What every worker needs, sent once: the base design, the catalog, constraints."""

    digest: str
    design_file: str
    design_data: Any
    catalog: Catalog
    constraints: tuple[str, ...]
    job: str = "step"  # what a point runs (topomodel.sweep.params.JOBS)


@dataclass(frozen=True)
class Outcome:
    """A point's result as a worker hands it back."""

    index: int
    metrics: dict[str, Any]
    feasible: bool
    violations: str | None
    error: str | None
    elapsed_s: float


Evaluate = Callable[[SweepContext, Mapping[str, Any]], dict[str, Any]]

_CACHE: OrderedDict[tuple[Any, ...], Any] = OrderedDict()
_CACHE_LOCK = threading.Lock()


def evaluate_point(context: SweepContext, params: Mapping[str, Any]) -> dict[str, Any]:
    """Every metric of :data:`~topomodel.sweep.params.JOB_METRICS` of the context's job
    for one point (a training step on its design, or a serving job:
    :func:`serve_point`).

    Raises
    ------
    TopomodelError
        When the design cannot be built or the layout does not fit (the caller records
        it as the point's error).
    """
    from topomodel.analysis.cost import token_cost
    from topomodel.analysis.reliability.goodput import job_goodput
    from topomodel.analysis.training.step import step_time
    from topomodel.analysis.training.studies import fill_dp

    if context.job == "serve":
        return serve_point(context, params)
    inputs = _inputs(params)
    fabric, design_metrics = sweep_fabric(context, design_overrides(params), inputs.fail,
                                     inputs.scaleout_factor, inputs.fail_domain)
    model = context.catalog.get(str(inputs.model), Model)
    layout = inputs.layout
    if inputs.fill_dp:  # fill the fabric; the global batch stays what the point says
        layout = fill_dp(fabric.accelerator_count, layout)
    assumptions = inputs.assumptions
    r = step_time(fabric, model, layout, assumptions, routing=inputs.routing,
                  seed=inputs.seed)
    good = job_goodput(fabric, model, layout, assumptions, r, inputs.goodput,
                       routing=inputs.routing,
                       seed=inputs.seed, route_degradation=False)
    seq = layout.seq or model.sequence
    power = design_metrics["power_W"]
    capex = design_metrics["capex_USD"]
    cost = token_cost(0.0 if math.isnan(capex) else capex, power,
                      good.goodput_tokens_per_s, inputs.cost,
                      share=r.layout.world / fabric.accelerator_count, goodput=True)
    return {
        **design_metrics,
        "step_time_s": r.step_time_s, "compute_s": r.compute_s, "bubble_s": r.bubble_s,
        "exposed_comm_s": r.exposed_comm_s, "wait_s": r.wait_s,
        "comm_share": r.comm_share,
        "bandwidth_wall_s": r.walls["bandwidth_s"], "latency_wall_s": r.walls["latency_s"],
        "topology_wall_s": r.walls["topology_s"], "sync_wall_s": r.walls["sync_s"],
        "mfu": r.mfu, "hfu": r.hfu, "tokens_per_s": r.tokens_per_s,
        "interruptions_per_day": good.interruptions_per_day,
        "effective_time_fraction": good.effective_time_fraction,
        "spare_systems": good.spare_systems, "repair_s": good.repair_s,
        "spares_for_target": (good.spares_for_target or (None, None))[0],
        "goodput_tokens_per_s": good.goodput_tokens_per_s,
        "tokens_per_J": r.tokens_per_s / power if power else math.nan,
        "USD_per_h": cost.USD_per_h if not math.isnan(capex) else math.nan,
        "USD_per_Mtok": _finite(cost.USD_per_Mtok) if not math.isnan(capex) else math.nan,
        "J_per_token": _finite(cost.J_per_token),
        "memory_bytes": r.memory["total_bytes"], "fits": r.fits,
        "world": r.layout.world, "dp_used": r.layout.dp,
        "global_batch_used": round(r.tokens_per_s * r.step_time_s / seq),
        "microbatches_used": r.microbatches,
        "warnings": "; ".join(r.warnings) or None,
    }


def _inputs(params: Mapping[str, Any]) -> Any:
    """The point's :class:`~topomodel.analysis.options.StepInputs`."""
    from topomodel.analysis.options import step_inputs
    from topomodel.inputs.records import Invalid

    try:
        return step_inputs(step_values(params))
    except Invalid as exc:  # the sweep file was checked; values a point combines badly
        raise UsageError(f"{exc.key}: {exc.message}" if exc.key else exc.message) from None


def serve_point(context: SweepContext, params: Mapping[str, Any]) -> dict[str, Any]:
    """The metrics of a serve sweep's point: ``topomodel serve``'s job on its design
    (:func:`~topomodel.analysis.serving.serve.serve`), with the design's metrics."""
    from topomodel.analysis.serving.serve import serve

    inputs = _inputs(params)
    fabric, design_metrics = sweep_fabric(context, design_overrides(params), inputs.fail,
                                          inputs.scaleout_factor, inputs.fail_domain)
    model = context.catalog.get(str(inputs.model), Model)
    r = serve(fabric, model, serving=inputs.serve, decode=inputs.decode,
              assumptions=inputs.assumptions, cost=inputs.cost, routing=inputs.routing,
              seed=inputs.seed)
    part, tier = r.limiting
    cost = r.cost
    return {
        **design_metrics,
        "ttft_s": r.ttft_s, "tpot_s": r.tpot_s, "request_s": r.request_s,
        "queue_s": r.queue_s, "prefill_s": r.prefill_s, "kv_exposed_s": r.kv.exposed_s,
        "kv_transfer_s": r.kv.time_s, "kv_bottleneck_tier": r.kv.bottleneck_tier or None,
        "rate_requests_per_s": r.rate_rps, "prefill_load": r.prefill_load,
        "decode_batch": r.decode.batch, "output_tokens_per_s": r.output_tokens_per_s,
        "tokens_per_s_per_accelerator": r.tokens_per_s_per_accelerator,
        "pool_accelerators": r.accelerators, "network_share": r.network_share,
        "network_limiting_part": part, "network_limiting_tier": tier or None,
        "prefill_memory_bytes": r.prefill_memory_bytes,
        "decode_memory_bytes": r.decode_memory_bytes,
        "USD_per_h": math.nan if cost is None else cost.USD_per_h,
        "USD_per_M_output_tokens": math.nan if cost is None else _finite(cost.USD_per_Mtok),
        "J_per_output_token": math.nan if cost is None else _finite(cost.J_per_token),
        "warnings": "; ".join(r.warnings) or None,
    }


def sweep_fabric(context: SweepContext, overrides: Mapping[str, Any], fails: tuple[str, ...],
            factor: float, domains: tuple[str, ...] = ()) -> tuple[Any, dict[str, Any]]:
    """The built fabric of a point and its design-level metrics (``fails``: parts failed
    by name, ``domains``: ``KIND:N`` failure domains failed whole), from the worker's
    cache when a recent point used the same design."""
    from topomodel.analysis.training.studies import scale_scaleout
    from topomodel.fabric.build import build_fabric
    from topomodel.fabric.failures import with_failures

    key = (context.digest, canonical(overrides), fails, factor, domains)
    with _CACHE_LOCK:
        hit = _CACHE.get(key)
        if hit is not None:
            _CACHE.move_to_end(key)
    if hit is None:
        try:
            if fails or factor != 1.0 or domains:
                from topomodel.fabric.domains import with_domains_failed

                base, _ = sweep_fabric(context, overrides, (), 1.0)
                fabric = with_failures(base, fails) if fails else base
                fabric = with_domains_failed(fabric, domains, label="fail_domain"
                                             ) if domains else fabric
                fabric = scale_scaleout(fabric, factor) if factor != 1.0 else fabric
            else:
                import yaml

                data = apply_overrides(context.design_data, overrides)
                design, _ = load_design(context.design_file, text=yaml.safe_dump(data),
                                        catalog=context.catalog)
                fabric = build_fabric(design, context.catalog)
            hit = (fabric, _design_metrics(fabric))
        except TopomodelError as exc:
            hit = exc  # a design that cannot be built fails every point alike
        with _CACHE_LOCK:
            _CACHE[key] = hit
            while len(_CACHE) > FABRIC_CACHE_SIZE:
                _CACHE.popitem(last=False)
    if isinstance(hit, TopomodelError):
        raise hit
    fabric, metrics = hit
    return fabric, dict(metrics)


def _design_metrics(fabric: Any) -> dict[str, Any]:
    """Size, bandwidth, parts and power of a built fabric."""
    from topomodel.analysis.bisection import closed_form
    from topomodel.analysis.bom import bill_of_materials, power_summary
    from topomodel.fabric.structure import scaleout_injection_Bps

    bom = bill_of_materials(fabric)
    power = power_summary(bom, fabric.accelerator_count)

    def count(category: str) -> int:
        return sum(line.count for line in bom if line.category == category)

    bisection, _ = closed_form(fabric)
    return {
        "accelerators": fabric.accelerator_count,
        "injection_Bps": scaleout_injection_Bps(fabric.injection),
        "bisection_Bps": math.nan if bisection is None else bisection,
        "power_W": power.total_W, "power_complete": power.complete,
        "power_W_per_accelerator": power.total_W_per_accelerator,
        "accelerator_power_W": power.accelerators_W,
        "network_power_W": power.network_W, "switch_power_W": power.switches_W,
        "nic_power_W": power.nics_W, "optics_power_W": power.optics_W,
        "network_W_per_accelerator": power.network_W_per_accelerator,
        "capex_USD": math.nan if power.capex_USD is None else power.capex_USD,
        "capex_low_USD": math.nan if power.capex_low_USD is None else power.capex_low_USD,
        "capex_high_USD": math.nan if power.capex_high_USD is None
        else power.capex_high_USD,
        "network_capex_USD": math.nan if power.network_capex_USD is None
        else power.network_capex_USD,
        "capex_unpriced": ", ".join(power.unpriced) or None,
        "switches": count("switch"), "scaleup_switches": count("scaleup_switch"),
        "nics": count("nic"), "cables": count("cable"),
        "optical_modules": count("module"), "fibres": count("fibre"),
        "power_unknown": ", ".join(power.unknown) or None,
    }


def _finite(value: float) -> float:
    """``value``, or NaN for an infinity (a point that runs no tokens)."""
    return value if math.isfinite(value) else math.nan


def error_text(exc: BaseException) -> str:
    if isinstance(exc, InputError):  # located in a generated design text: drop file:line
        return "; ".join(f"{p.key_path}: {p.message}" if p.key_path else p.message
                         for p in exc.problems)
    if isinstance(exc, TopomodelError):
        return str(exc)
    return f"{type(exc).__name__}: {exc}"


def run_points(context: SweepContext, points: Sequence[tuple[int, Mapping[str, Any]]],
               evaluate: Evaluate = evaluate_point) -> list[Outcome]:
    """Evaluate points in this process; a point that raises records its error."""
    return [_run_one(context, index, params, evaluate) for index, params in points]


def _run_one(context: SweepContext, index: int, params: Mapping[str, Any],
             evaluate: Evaluate) -> Outcome:
    start = time.perf_counter()
    try:
        metrics = evaluate(context, params)
    except Exception as exc:  # the point fails, the sweep goes on
        return Outcome(index, {}, False, None, error_text(exc), time.perf_counter() - start)
    values = Settings({**params, **metrics}, context.design_data)
    broken = [text for text in context.constraints
              if not constraint_holds(compiled(text), values)]
    return Outcome(index, metrics, not broken, "; ".join(broken) or None, None,
                   time.perf_counter() - start)


def failed_point(points: Sequence[tuple[int, Any]], error: str) -> list[Outcome]:
    """Outcomes recording ``error`` for points that returned nothing."""
    return [Outcome(i, {}, False, None, error, 0.0) for i, _ in points]
