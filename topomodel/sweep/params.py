"""What a sweep point may set and what it records.

A point sets step options (:data:`OPTIONS`, plus ``efficiency.TIER``), or in a serve
sweep serve's (:data:`SERVE_SWEEP_KEYS`), and ``design.KEY.PATH`` overrides of the base
design (:func:`design_path`, :func:`apply_overrides`); a setting it leaves out has its
default (:func:`default_value`). It records :data:`JOB_METRICS` of its job.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from topomodel.analysis.assumptions import StepAssumptions
from topomodel.analysis.options import COST_OPTIONS, DECODE_OPTIONS, SERVE_OPTIONS, StepOption
from topomodel.analysis.options import OPTIONS as STEP_OPTIONS
from topomodel.analysis.options import option as step_option
from topomodel.inputs.records import Invalid, Reader, Reading
from topomodel.inputs.yamlsource import KeyPath, format_path

DESIGN_PREFIX = "design."


def _quantity_text(read: Reader) -> Reader:
    """A quantity checked by ``read`` but kept as written (``"40 MB"``): points and their
    keys hold text."""

    def keep(reading: Reading, path: KeyPath, value: Any) -> str:
        read(reading, path, value)
        return str(value)

    return keep


@dataclass(frozen=True)
class Option:
    """A step option a sweep point may set: its default, reader and meaning (from
    :data:`topomodel.analysis.options.OPTIONS`)."""

    default: Any
    read: Reader
    doc: str


def _sweep_option(opt: StepOption) -> Option:
    quantity = opt.quantity_kind is not None
    read = _quantity_text(opt.read) if quantity else opt.read
    default = None if quantity or opt.arg == "list" else opt.default
    return Option(default, read, opt.doc)


STEP_DEFAULTS = StepAssumptions()
"""The step model's default assumptions: the defaults of the options below."""
OPTIONS: dict[str, Option] = {key: _sweep_option(opt) for key, opt in STEP_OPTIONS.items()
                              if opt.arg != "pairs" and key not in DECODE_OPTIONS + SERVE_OPTIONS}
"""Step options by key: :data:`topomodel.analysis.options.OPTIONS`, the same readers,
defaults and meaning as ``topomodel step``'s flags. ``efficiency.TIER`` (a link tier) is
an option too; design fields are ``design.KEY.PATH``. Decode's options
(:data:`~topomodel.analysis.options.DECODE_OPTIONS`) are not: a point runs the training
step and its goodput, not decode. The running cost's
(:data:`~topomodel.analysis.options.COST_OPTIONS`) are: the cost metrics read them."""


JOBS = ("step", "serve")
"""What a sweep's points run (its ``job`` key): the training step and its goodput, or a
serving job (:func:`~topomodel.analysis.serving.serve.serve`)."""

SERVE_SWEEP_KEYS = (*SERVE_OPTIONS, "dtype", "kv_dtype", "activation_dtype", "comm_overlap",
                    "model", "compute_efficiency", "hbm_efficiency", *COST_OPTIONS,
                    "routing", "seed", "fail", "fail_domain", "scaleout_factor", "overhead",
                    "protocol", "pxn", "measured_curves")
"""The options a point of a serve sweep may set: ``topomodel serve``'s flags (the pools,
the request mix and load, the hand-off, the data types, the compute and cost options,
the fabric's what-ifs), plus ``efficiency.TIER``."""

SERVE_OPTIONS_BY_KEY: dict[str, Option] = {key: _sweep_option(STEP_OPTIONS[key])
                                           for key in SERVE_SWEEP_KEYS}
"""Serve sweep options by key, as :data:`OPTIONS` for the step's."""


def option(key: str) -> Option | None:
    """The :class:`Option` for a key a step or serve sweep may set, or ``None`` if it is
    not one.

    Examples
    --------
    >>> option("tp").default, option("tp_overlap").default, option("prefill_tp").default
    (1, 'gemm', 8)
    >>> option("design.systems") is None, option("batch") is None  # batch: decode's
    (True, True)
    """
    if key in OPTIONS:
        return OPTIONS[key]
    if key in SERVE_OPTIONS_BY_KEY:
        return SERVE_OPTIONS_BY_KEY[key]
    opt = step_option(key)
    return None if opt is None or opt.arg == "pairs" or key in DECODE_OPTIONS else (
        _sweep_option(opt))


def job_refuses(key: str, job: str) -> str | None:
    """Why a sweep of ``job`` cannot set option ``key`` (an option of the other job, or
    of decode), or ``None`` when it can.

    Examples
    --------
    >>> job_refuses("rate", "step")
    'rate is an option of serve; set job: serve to sweep serving'
    >>> job_refuses("prefill_tp", "serve") is None, job_refuses("efficiency.leaf", "serve")
    (True, None)
    >>> job_refuses("pp", "serve")
    'pp is an option of the training step; a serve sweep sets serve options (prefill_tp, \
decode_ep, rate, ...)'
    """
    if key.startswith(("efficiency.", DESIGN_PREFIX)):
        return None
    if job == "serve":
        if key in SERVE_SWEEP_KEYS:
            return None
        if key in OPTIONS:
            return (f"{key} is an option of the training step; a serve sweep sets serve"
                    " options (prefill_tp, decode_ep, rate, ...)")
    elif key in OPTIONS:
        return None
    elif key in SERVE_SWEEP_KEYS:
        return f"{key} is an option of serve; set job: serve to sweep serving"
    if key in DECODE_OPTIONS:
        return f"{key} is an option of decode; a sweep runs the training step or serve"
    return None


def step_values(point: Mapping[str, Any]) -> dict[str, Any]:
    """The step-option settings of a point (its design keys left out)."""
    return {k: v for k, v in point.items() if not k.startswith(DESIGN_PREFIX)}


_SEGMENT = re.compile(r"^([A-Za-z_][A-Za-z0-9_-]*)((?:\[\d+\])*)$")


@lru_cache(maxsize=4096)
def design_path(key: str) -> KeyPath | None:
    """``design.scaleout.oversubscription[0]`` as ``("scaleout", "oversubscription", 0)``;
    ``None`` if ``key`` is not a well-formed design key.

    Examples
    --------
    >>> design_path("design.scaleout.oversubscription[1]")
    ('scaleout', 'oversubscription', 1)
    >>> design_path("tp") is None
    True
    """
    if not key.startswith(DESIGN_PREFIX):
        return None
    parts: list[str | int] = []
    for segment in key[len(DESIGN_PREFIX):].split("."):
        match = _SEGMENT.match(segment)
        if not match:
            return None
        parts.append(match.group(1))
        parts.extend(int(i) for i in re.findall(r"\[(\d+)\]", match.group(2)))
    return tuple(parts)


def design_overrides(point: Mapping[str, Any]) -> dict[str, Any]:
    """The ``design.KEY.PATH`` settings of a point."""
    return {k: v for k, v in point.items() if k.startswith(DESIGN_PREFIX)}


def canonical(value: Any) -> str:
    """``value`` as compact JSON with sorted keys: equal values give equal text."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def apply_overrides(data: Any, overrides: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of design mapping ``data`` with each ``design.KEY.PATH`` set.

    Missing mappings on the way are created, and a list index one past the end appends.
    Setting ``systems`` drops ``accelerators`` and the other way round (a design gives
    one of them). Shorter paths go first, so a whole list can be set and then one item.

    Raises
    ------
    Invalid
        When a path runs through a value that is not a mapping or a list.

    Examples
    --------
    >>> apply_overrides({"systems": 4, "scaleout": {"switch": "qm9700"}},
    ...                 {"design.accelerators": 64, "design.scaleout.oversubscription[0]": "2:1"})
    {'scaleout': {'switch': 'qm9700', 'oversubscription': ['2:1']}, 'accelerators': 64}
    """
    out: dict[str, Any] = copy.deepcopy(data) if isinstance(data, dict) else {}
    paths = sorted(((design_path(k), v) for k, v in overrides.items()),
                   key=lambda pv: len(pv[0] or ()))
    for path, value in paths:
        if not path:
            raise Invalid("not a design key path")
        if path[0] in ("systems", "accelerators"):
            out.pop("accelerators" if path[0] == "systems" else "systems", None)
        node: Any = out
        for depth, part in enumerate(path):
            last = depth == len(path) - 1
            fresh: Any = copy.deepcopy(value) if last else (
                [] if isinstance(path[depth + 1], int) else {})
            where = format_path(path[:depth])
            if isinstance(part, str):
                if not isinstance(node, dict):
                    raise Invalid(f"{where} is not a mapping in the design")
                if last or node.get(part) is None:
                    node[part] = fresh
            else:
                if not isinstance(node, list):
                    raise Invalid(f"{where} is not a list in the design")
                if part > len(node):
                    raise Invalid(f"index {part} is past the end of {where}"
                                  f" ({len(node)} items)")
                if part == len(node):
                    node.append(fresh)
                elif last:
                    node[part] = fresh
            node = node[part]
    return out


def default_value(key: str, design_data: Any) -> Any:
    """The value of parameter ``key`` at a point that does not set it: the base design's
    (mapping ``design_data``) for a design key, else the option's default; ``None`` when
    there is none."""
    path = design_path(key)
    if path is None:
        opt = option(key)
        return None if opt is None else opt.default
    node = design_data
    for part in path:
        found = (isinstance(node, dict) and part in node) if isinstance(part, str) else (
            isinstance(node, list) and part < len(node))
        if not found:
            return None
        node = node[part]
    return node


class Settings(dict[str, Any]):
    """A point's values; one it does not set reads as its :func:`default_value`."""

    def __init__(self, values: Mapping[str, Any], design_data: Any) -> None:
        super().__init__(values)
        self.design_data = design_data

    def __missing__(self, key: str) -> Any:
        return default_value(key, self.design_data)


@dataclass(frozen=True)
class Metric:
    """One recorded result: its type, which way is better, and its unit kind."""

    name: str
    dtype: str  # "float", "int", "bool" or "str"
    better: str | None  # "min", "max", or None (no natural direction)
    kind: str | None  # unit kind for quantities written in constraints ("80 GB")
    doc: str


METRICS: tuple[Metric, ...] = (
    Metric("step_time_s", "float", "min", "time", "training step time, s"),
    Metric("compute_s", "float", "min", "time", "compute part of the step, s"),
    Metric("bubble_s", "float", "min", "time", "pipeline bubble, s"),
    Metric("exposed_comm_s", "float", "min", "time", "communication not hidden by compute,"
           " s"),
    Metric("wait_s", "float", "min", "time", "synchronisation wait (jitter, hot experts), s"),
    Metric("comm_share", "float", "min", None, "(exposed communication + wait) / step, 0-1"),
    Metric("bandwidth_wall_s", "float", "min", "time", "exposed time a non-blocking fabric"
           " would also take, s"),
    Metric("latency_wall_s", "float", "min", "time", "exposed latency terms, s"),
    Metric("topology_wall_s", "float", "min", "time", "exposed congestion and"
           " oversubscription, s"),
    Metric("sync_wall_s", "float", "min", "time", "the wait, s"),
    Metric("mfu", "float", "max", None, "model FLOPs utilisation, 0-1"),
    Metric("hfu", "float", "max", None, "hardware FLOPs utilisation (with recomputation),"
           " 0-1"),
    Metric("tokens_per_s", "float", "max", None, "training throughput, tokens/s"),
    Metric("tokens_per_J", "float", "max", None, "tokens/s over power_W (an upper bound"
           " when power_W is a partial sum)"),
    Metric("USD_per_h", "float", "min", None, "the job's share of the design's capex and"
           " facility amortised plus energy at PUE (docs/cost.md, the point's cost"
           " options), US dollars per hour"),
    Metric("USD_per_Mtok", "float", "min", None, "USD_per_h over goodput tokens/s, US"
           " dollars per million tokens (a partial sum when capex_unpriced names parts)"),
    Metric("J_per_token", "float", "min", None, "the job's share of power_W x PUE over"
           " goodput tokens/s, joules at the meter"),
    Metric("interruptions_per_day", "float", "min", None, "expected job interruptions a"
           " day (topomodel.analysis.reliability.goodput, default assumptions)"),
    Metric("effective_time_fraction", "float", "max", None, "share of wall time that"
           " advances training, 0-1"),
    Metric("spare_systems", "int", None, None, "hot spare systems the effective time"
           " assumed"),
    Metric("repair_s", "float", None, "time", "time a failed system is out of the pool, s"),
    Metric("spares_for_target", "int", None, None, "with no spares: the fewest spare systems"
           " that bring the effective time to 90 % (or near the most spares give); empty"
           " when the job has spares or needs none"),
    Metric("goodput_tokens_per_s", "float", "max", None, "tokens/s after failures,"
           " checkpoints and degraded operation (a lower bound: the degradation is bounded,"
           " not re-routed)"),
    Metric("memory_bytes", "float", "min", "size", "memory per accelerator, bytes"),
    Metric("fits", "bool", None, None, "the memory fits the accelerator's HBM"),
    Metric("world", "int", None, None, "accelerators the layout uses"),
    Metric("dp_used", "int", None, None, "DP degree used (filled when dp is 0)"),
    Metric("global_batch_used", "int", None, None, "sequences per step actually run (a"
           " point without global_batch: the default rule, Layout.sequences)"),
    Metric("microbatches_used", "int", None, None, "microbatches per pipeline in the step"),
    Metric("accelerators", "int", None, None, "accelerators in the design"),
    Metric("injection_Bps", "float", "max", "rate", "scale-out bandwidth per accelerator,"
           " bytes/s per direction"),
    Metric("bisection_Bps", "float", "max", "rate", "bisection bandwidth (closed form),"
           " bytes/s per direction"),
    Metric("power_W", "float", "min", "power", "every part once, at its maximum (else"
           " typical) figure; a system's figure covers its insides; a partial sum when"
           " power_unknown names parts, W"),
    Metric("power_complete", "bool", None, None, "every part has a power figure, so"
           " power_W is a total"),
    Metric("power_W_per_accelerator", "float", "min", "power", "power_W per accelerator,"
           " W"),
    Metric("accelerator_power_W", "float", "min", "power", "accelerators, W"),
    Metric("network_power_W", "float", "min", "power", "switches, scale-up switch chips,"
           " NICs, cables and modules, each at its own figure (inside a system's figure"
           " or not), W"),
    Metric("switch_power_W", "float", "min", "power", "scale-out switches, W"),
    Metric("nic_power_W", "float", "min", "power", "NICs, W"),
    Metric("optics_power_W", "float", "min", "power", "cables and optical modules, W"),
    Metric("network_W_per_accelerator", "float", "min", "power", "network power per"
           " accelerator, W"),
    Metric("capex_USD", "float", "min", "price", "list prices of the parts that have one"
           " (NaN when none has); a partial sum when capex_unpriced names parts, USD"),
    Metric("capex_low_USD", "float", "min", "price", "capex_USD with every price at the"
           " low end of its range, USD"),
    Metric("capex_high_USD", "float", "min", "price", "capex_USD with every price at the"
           " high end of its range, USD"),
    Metric("network_capex_USD", "float", "min", "price", "capex of the network parts"
           " counted (switches, NICs outside systems, cables, modules, fibre), USD"),
    Metric("capex_unpriced", "str", None, None, "parts without a price in the catalog"),
    Metric("switches", "int", "min", None, "scale-out switches"),
    Metric("scaleup_switches", "int", "min", None, "scale-up switch chips"),
    Metric("nics", "int", "min", None, "NICs"),
    Metric("cables", "int", "min", None, "copper and active optical cable assemblies"),
    Metric("optical_modules", "int", "min", None, "pluggable / LPO / CPO optical modules"),
    Metric("fibres", "int", "min", None, "fibre cables between optical modules"),
    Metric("power_unknown", "str", None, None, "parts without a power figure in the"
           " catalog"),
    Metric("warnings", "str", None, None, "the step model's warnings"),
)
"""Every metric a point records (cost is power, part counts and, where the catalog has
prices, capex)."""

SERVE_METRICS: tuple[Metric, ...] = (
    Metric("ttft_s", "float", "min", "time", "time to first token: queue, prefill, exposed"
           " KV hand-off, s"),
    Metric("tpot_s", "float", "min", "time", "time per output token (one decode step), s"),
    Metric("request_s", "float", "min", "time", "a request from arrival to its last token,"
           " s"),
    Metric("queue_s", "float", "min", "time", "mean wait for a prefill replica, s"),
    Metric("prefill_s", "float", "min", "time", "one prompt's prefill (compute and exposed"
           " collectives), s"),
    Metric("kv_exposed_s", "float", "min", "time", "the KV hand-off's exposed part of TTFT,"
           " s"),
    Metric("kv_transfer_s", "float", "min", "time", "the hand-offs in flight, routed"
           " together, s"),
    Metric("kv_bottleneck_tier", "str", None, None, "the link tier bounding the hand-offs"),
    Metric("rate_requests_per_s", "float", "max", None, "arrival rate, requests/s"),
    Metric("prefill_load", "float", None, None, "busy share of a prefill replica, 0-1"),
    Metric("decode_batch", "int", None, None, "sequences a decode replica decodes at once"),
    Metric("output_tokens_per_s", "float", "max", None, "generated tokens/s of the job"),
    Metric("tokens_per_s_per_accelerator", "float", "max", None, "generated tokens/s per"
           " accelerator of the two pools"),
    Metric("pool_accelerators", "int", None, None, "accelerators of the prefill and decode"
           " pools"),
    Metric("network_share", "float", "min", None, "the network's exposed share of a"
           " request's time, 0-1"),
    Metric("network_limiting_part", "str", None, None, "the network part that takes"
           " longest (prefill collectives, KV hand-off, decode collectives)"),
    Metric("network_limiting_tier", "str", None, None, "the link tier bounding it"),
    Metric("prefill_memory_bytes", "float", "min", "size", "memory per prefill rank,"
           " bytes"),
    Metric("decode_memory_bytes", "float", "min", "size", "memory per decode rank at the"
           " batch, bytes"),
    Metric("USD_per_M_output_tokens", "float", "min", None, "the pools' share of the"
           " design's cost per hour over output tokens/s, US dollars per million output"
           " tokens (docs/cost.md)"),
    Metric("J_per_output_token", "float", "min", None, "the pools' share of power_W x PUE"
           " over output tokens/s, joules at the meter"),
)
"""What a point of a serve sweep records besides the design's metrics (power, parts,
capex) and ``USD_per_h`` and ``warnings``."""

DESIGN_METRICS = ("accelerators", "injection_Bps", "bisection_Bps", "power_W",
                  "power_complete", "power_W_per_accelerator", "accelerator_power_W",
                  "network_power_W", "switch_power_W", "nic_power_W", "optics_power_W",
                  "network_W_per_accelerator", "capex_USD", "capex_low_USD",
                  "capex_high_USD", "network_capex_USD", "capex_unpriced", "switches",
                  "scaleup_switches", "nics", "cables", "optical_modules", "fibres",
                  "power_unknown")
"""The metrics of the built design, whatever the job."""

METRIC_BY_NAME = {m.name: m for m in (*METRICS, *SERVE_METRICS)}

JOB_METRICS: dict[str, tuple[str, ...]] = {
    "step": tuple(m.name for m in METRICS),
    "serve": (*(m.name for m in SERVE_METRICS), "USD_per_h", *DESIGN_METRICS, "warnings")}
"""The metrics a point of each job records (a sweep's default ``metrics``)."""
