"""What a sweep point may set and what it records.

A point sets step options (:data:`OPTIONS`, plus ``overlap.KIND`` and
``efficiency.TIER``) and ``design.KEY.PATH`` overrides of the base design
(:func:`design_path`, :func:`apply_overrides`); a setting it leaves out has its default
(:func:`default_value`). It records :data:`METRICS`.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from topomodel.analysis.model import BYTES
from topomodel.analysis.step import StepAssumptions
from topomodel.records import (
    Invalid,
    Reader,
    Reading,
    boolean,
    choice,
    integer,
    list_of,
    number,
    quantity,
    text,
)
from topomodel.traffic.layout import DIMENSIONS
from topomodel.yamlsource import KeyPath, format_path

OVERLAP_PREFIX, EFFICIENCY_PREFIX, DESIGN_PREFIX = "overlap.", "efficiency.", "design."


def _order(reading: Reading, path: KeyPath, value: Any) -> str:
    order = text(reading, path, value)
    if sorted(p.strip() for p in order.split(",")) != sorted(DIMENSIONS):
        raise Invalid(f"expected {', '.join(DIMENSIONS)} once each, innermost first;"
                      f" got {order!r}")
    return order


def _quantity_text(kind: str) -> Reader:
    """A quantity of ``kind``, kept as written (``"40 MB"``): points and keys hold text."""
    check = quantity(kind)

    def read(reading: Reading, path: KeyPath, value: Any) -> str:
        check(reading, path, value)
        return str(value)

    return read


def _names(reading: Reading, path: KeyPath, value: Any) -> list[str]:
    return list(list_of(text, min_len=0, what="a list of node names")(reading, path, value))


@dataclass(frozen=True)
class Option:
    """A step option a sweep point may set: its default, reader and meaning."""

    default: Any
    read: Reader
    doc: str


STEP_DEFAULTS = StepAssumptions()
"""The step model's default assumptions: the defaults of the options below."""
OPTIONS: dict[str, Option] = {
    "model": Option(None, text, "model id from the catalog (required)"),
    "tp": Option(1, integer(1), "tensor-parallel degree"),
    "pp": Option(1, integer(1), "pipeline-parallel degree"),
    "ep": Option(1, integer(1), "expert-parallel degree"),
    "cp": Option(1, integer(1), "context-parallel degree"),
    "dp": Option(0, integer(0), "data-parallel degree; 0 fills the design's accelerators"),
    "micro_batch": Option(1, integer(1), "sequences per microbatch"),
    "global_batch": Option(0, integer(0), "sequences per step, all DP ranks together;"
                           " 0: dp x micro_batch x 4 x pp"),
    "seq": Option(0, integer(0), "tokens per sequence; 0: the model's"),
    "sequence_parallel": Option(True, boolean, "TP gathers/scatters instead of"
                                " all-reduces"),
    "dp_mode": Option("allreduce", choice("allreduce", "zero"),
                      "gradient all-reduce, or ZeRO reduce-scatter + all-gather"),
    "interleave": Option(1, integer(1), "virtual pipeline stages per rank"),
    "recompute": Option(False, boolean, "activation recomputation"),
    "order": Option("tp,cp,dp,pp", _order, "rank placement, innermost dimension first"),
    "grad_precision": Option(STEP_DEFAULTS.grad_dtype, choice(*BYTES),
                             "gradient communication precision"),
    "compute_efficiency": Option(STEP_DEFAULTS.compute_efficiency,
                                 number(0, 1, low_open=True),
                                 "achieved / peak FLOP/s on compute"),
    "hot_expert": Option(STEP_DEFAULTS.hot_expert_factor, number(1),
                         "busiest expert's load / mean"),
    "jitter_cv": Option(STEP_DEFAULTS.jitter_cv, number(0),
                        "per-rank compute time variation"),
    "straggler_share": Option(STEP_DEFAULTS.straggler_share, number(0, 1),
                              "share of accelerators that run slow"),
    "straggler_slowdown": Option(STEP_DEFAULTS.straggler_slowdown, number(0),
                                 "a slow accelerator's extra compute time"),
    "bucket": Option(None, _quantity_text("size"), "DP gradient bucket with a unit;"
                     " default 40 MB"),
    "overhead": Option(None, _quantity_text("time"), "per-message software overhead with"
                       " a unit; default 5 us"),
    "scaleout_factor": Option(1.0, number(0, low_open=True),
                              "what-if: every scale-out link this many times faster"),
    "routing": Option("ecmp", choice("ecmp", "hash", "dmodk"), "routing policy"),
    "fail": Option(None, _names, "node names to fail"),
}
"""Step options by key, with the same meaning and defaults as ``topomodel step``'s
options. ``overlap.KIND`` (tp, cp, ep, pp, dp, edp) and ``efficiency.TIER`` (a link
tier) are options too; design fields are ``design.KEY.PATH``."""


def option(key: str) -> Option | None:
    """The :class:`Option` for a step-option key, or ``None`` if it is not one.

    Examples
    --------
    >>> option("tp").default, option("overlap.dp").default
    (1, 0.8)
    >>> option("design.systems") is None
    True
    """
    from topomodel.design import LINK_TIERS

    if key in OPTIONS:
        return OPTIONS[key]
    kind = key.removeprefix(OVERLAP_PREFIX)
    if key.startswith(OVERLAP_PREFIX) and kind in STEP_DEFAULTS.overlap:
        return Option(STEP_DEFAULTS.overlap[kind], number(0, 1),
                      f"overlapped share of {kind}")
    tier = key.removeprefix(EFFICIENCY_PREFIX)
    if key.startswith(EFFICIENCY_PREFIX) and tier in LINK_TIERS:
        return Option(None, number(0, 1, low_open=True),
                      f"effective / nominal rate of {tier} links")
    return None


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
    Metric("tokens_per_J", "float", "max", None, "tokens/s over the fabric's known power"),
    Metric("interruptions_per_day", "float", "min", None, "expected job interruptions a"
           " day (topomodel.analysis.goodput, default assumptions)"),
    Metric("effective_time_fraction", "float", "max", None, "share of wall time that"
           " advances training, 0-1"),
    Metric("goodput_tokens_per_s", "float", "max", None, "tokens/s after failures,"
           " checkpoints and degraded operation (bounded)"),
    Metric("memory_bytes", "float", "min", "size", "memory per accelerator, bytes"),
    Metric("fits", "bool", None, None, "the memory fits the accelerator's HBM"),
    Metric("world", "int", None, None, "accelerators the layout uses"),
    Metric("dp_used", "int", None, None, "DP degree used (filled when dp is 0)"),
    Metric("global_batch_used", "int", None, None, "sequences per step actually run"),
    Metric("accelerators", "int", None, None, "accelerators in the design"),
    Metric("injection_Bps", "float", "max", "rate", "scale-out bandwidth per accelerator,"
           " bytes/s per direction"),
    Metric("bisection_Bps", "float", "max", "rate", "bisection bandwidth (closed form),"
           " bytes/s per direction"),
    Metric("power_W", "float", "min", "power", "accelerators + network parts with a known"
           " power, W"),
    Metric("accelerator_power_W", "float", "min", "power", "accelerators, W"),
    Metric("network_power_W", "float", "min", "power", "switches, NICs, cables and modules"
           " with a known power, W"),
    Metric("optics_power_W", "float", "min", "power", "cables and optical modules, W"),
    Metric("network_W_per_accelerator", "float", "min", "power", "network power per"
           " accelerator, W"),
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
"""Every metric a point records (the catalog has no prices: cost is power and part
counts)."""

METRIC_BY_NAME = {m.name: m for m in METRICS}
