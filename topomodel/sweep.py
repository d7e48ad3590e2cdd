"""Design-space sweeps: many step-model points over one base design, resumable.

A sweep file (see ``docs/sweeps.md``) names a base design, settings every point shares
(``fixed``) and the parameters to vary (``parameters``: lists and ranges, combined as
cartesian products, zipped groups and unions of blocks). Each point is a full parameter
set: step options (model, layout, assumptions, the ``scaleout_factor`` what-if) and
``design.KEY.PATH`` overrides of the design file. :func:`load_sweep` checks the whole
file (every problem with its line and key) and expands the points; :func:`run_sweep`
evaluates them on a local process pool or a Dask cluster and writes one row per point
to Parquet or CSV.

Speed: points are grouped by the design they build; each worker keeps the last few
built fabrics (:data:`FABRIC_CACHE_SIZE`), so a design is built once per worker, not
once per point. Safety: every finished point is appended to a journal next to the
results (``RESULTS.journal``, JSON lines) as soon as the worker hands it back, so a
Ctrl-C, a killed worker or a killed process loses no finished point; ``resume=True``
skips the points already in the journal or in a previous results file, and the results
file is written (atomically) from them at the end. A point that fails records its
error in its row and the sweep goes on.
"""

from __future__ import annotations

import ast
import copy
import hashlib
import itertools
import json
import math
import os
import re
import sys
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path
from typing import Any

from topomodel.catalog import Catalog, Model
from topomodel.design import Design, load_design
from topomodel.errors import InputError, TopomodelError, UnitError, UsageError
from topomodel.pareto import Objective, pareto_mask, parse_objective
from topomodel.records import Invalid, Reading, did_you_mean, read_record
from topomodel.step import BYTES, DIMENSIONS, StepAssumptions
from topomodel.yamlsource import KeyPath, Source, format_path, load_yaml

MAX_POINTS_PER_TASK = 8
"""Points sent to a worker at once. Several amortise the hand-over on small designs;
few keep the progress bar moving and the work spread on large ones (a 16k-accelerator
point takes about half a second)."""

FABRIC_CACHE_SIZE = 4
"""Built fabrics each worker keeps (least recently used dropped). Points are sent grouped
by design, so a handful suffices (a whole process building a 131k-accelerator fabric
peaks at about 300 MiB: benchmarks/README.md)."""

MAX_POINTS = 2_000_000
"""Largest expansion accepted: a guard against a range with a typo in its step."""

STRING_STORAGE = "python"
"""pandas storage for the string columns of fabrics built where this module runs the
points (its own worker processes, or the sweep's process with one worker). With pyarrow
installed, pandas 3 stores strings in Arrow arrays, and the step model's conversions of
node kinds and link tiers to NumPy cost about 40 % of a 16k-accelerator point; Python
storage gives the same numbers 1.7x faster (measured). Options are process-wide, so
Dask workers (threads of someone else's process) are left as they are."""

DASK_CONNECT_TIMEOUT = "10s"
"""How long to try reaching a Dask scheduler before giving up."""

JOURNAL_SUFFIX = ".journal"
RESULTS_FORMATS = ("parquet", "csv")
JOURNAL_VERSION = 1


class SweepError(InputError):
    """A sweep file is malformed: unknown keys, parameters or metrics, empty ranges."""


# Step options a point may set ---------------------------------------------------------


def _what(value: Any) -> str:
    if isinstance(value, bool):
        return f"a boolean ({value})"
    if isinstance(value, int | float):
        return f"a number ({value})"
    if isinstance(value, str):
        return f"a string ({value!r})"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "a mapping"
    return "nothing" if value is None else type(value).__name__


def _count(minimum: int) -> Callable[[Any], int]:
    def read(value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise Invalid(f"expected a whole number, got {_what(value)}")
        if value < minimum:
            raise Invalid(f"must be at least {minimum}, got {value}")
        return value

    return read


def _number(low: float, high: float = math.inf, *, low_open: bool = False
            ) -> Callable[[Any], float]:
    def read(value: Any) -> float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise Invalid(f"expected a number, got {_what(value)}")
        if value < low or (low_open and value == low) or value > high:
            bounds = f"{'(' if low_open else '['}{low:g}, {high:g}]"
            raise Invalid(f"must be in {bounds}, got {value}")
        return float(value)

    return read


def _boolean(value: Any) -> bool:
    if not isinstance(value, bool):
        raise Invalid(f"expected true or false, got {_what(value)}")
    return value


def _choice(*options: str) -> Callable[[Any], str]:
    def read(value: Any) -> str:
        if value not in options:
            hint = did_you_mean(value, options) if isinstance(value, str) else ""
            raise Invalid(f"expected one of {', '.join(options)}, got {_what(value)}{hint}")
        return str(value)

    return read


def _text(value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise Invalid(f"expected text, got {_what(value)}")
    return value.strip()


def _order(value: Any) -> str:
    text = _text(value)
    if sorted(p.strip() for p in text.split(",")) != sorted(DIMENSIONS):
        raise Invalid(f"expected {', '.join(DIMENSIONS)} once each, innermost first;"
                      f" got {text!r}")
    return text


def _quantity(kind: str) -> Callable[[Any], str]:
    def read(value: Any) -> str:
        from topomodel.units import parse

        try:
            parse(value, kind)
        except UnitError as exc:
            raise Invalid(str(exc)) from None
        return str(value)

    return read


def _names(value: Any) -> list[str]:
    if not isinstance(value, list):
        raise Invalid(f"expected a list of node names, got {_what(value)}")
    return [_text(v) for v in value]


@dataclass(frozen=True)
class Option:
    """A step option a sweep point may set: its default, reader and meaning."""

    default: Any
    read: Callable[[Any], Any]
    doc: str


_BASE = StepAssumptions()
OPTIONS: dict[str, Option] = {
    "model": Option(None, _text, "model id from the catalog (required)"),
    "tp": Option(1, _count(1), "tensor-parallel degree"),
    "pp": Option(1, _count(1), "pipeline-parallel degree"),
    "ep": Option(1, _count(1), "expert-parallel degree"),
    "cp": Option(1, _count(1), "context-parallel degree"),
    "dp": Option(0, _count(0), "data-parallel degree; 0 fills the design's accelerators"),
    "micro_batch": Option(1, _count(1), "sequences per microbatch"),
    "global_batch": Option(0, _count(0), "sequences per step, all DP ranks together;"
                           " 0: dp x micro_batch x 4 x pp"),
    "seq": Option(0, _count(0), "tokens per sequence; 0: the model's"),
    "sequence_parallel": Option(True, _boolean, "TP gathers/scatters instead of"
                                " all-reduces"),
    "dp_mode": Option("allreduce", _choice("allreduce", "zero"),
                      "gradient all-reduce, or ZeRO reduce-scatter + all-gather"),
    "interleave": Option(1, _count(1), "virtual pipeline stages per rank"),
    "recompute": Option(False, _boolean, "activation recomputation"),
    "order": Option("tp,cp,dp,pp", _order, "rank placement, innermost dimension first"),
    "grad_precision": Option(_BASE.grad_dtype, _choice(*BYTES),
                             "gradient communication precision"),
    "compute_efficiency": Option(_BASE.compute_efficiency, _number(0, 1, low_open=True),
                                 "achieved / peak FLOP/s on compute"),
    "hot_expert": Option(_BASE.hot_expert_factor, _number(1),
                         "busiest expert's load / mean"),
    "jitter_cv": Option(_BASE.jitter_cv, _number(0), "per-rank compute time variation"),
    "bucket": Option(None, _quantity("size"), "DP gradient bucket with a unit;"
                     " default 40 MB"),
    "overhead": Option(None, _quantity("time"), "per-message software overhead with a unit;"
                       " default 5 us"),
    "scaleout_factor": Option(1.0, _number(0, low_open=True),
                              "what-if: every scale-out link this many times faster"),
    "routing": Option("ecmp", _choice("ecmp", "hash", "dmodk"), "routing policy"),
    "fail": Option(None, _names, "node names to fail"),
}
"""Step options by key, with the same meaning and defaults as ``topomodel step``'s
options. ``overlap.KIND`` (tp, cp, ep, pp, dp, edp) and ``efficiency.TIER`` (a link
tier) are options too; design fields are ``design.KEY.PATH``."""

OVERLAP_PREFIX, EFFICIENCY_PREFIX, DESIGN_PREFIX = "overlap.", "efficiency.", "design."


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
    if key.startswith(OVERLAP_PREFIX) and kind in _BASE.overlap:
        return Option(_BASE.overlap[kind], _number(0, 1), f"overlapped share of {kind}")
    tier = key.removeprefix(EFFICIENCY_PREFIX)
    if key.startswith(EFFICIENCY_PREFIX) and tier in LINK_TIERS:
        return Option(None, _number(0, 1, low_open=True),
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
        if path[0] == "systems":
            out.pop("accelerators", None)
        elif path[0] == "accelerators":
            out.pop("systems", None)
        node: Any = out
        for depth, part in enumerate(path):
            last = depth == len(path) - 1
            fresh: Any = copy.deepcopy(value) if last else (
                [] if isinstance(path[depth + 1], int) else {})
            if isinstance(part, str):
                if not isinstance(node, dict):
                    raise Invalid(f"{format_path(path[:depth])} is not a mapping in the design")
                if last or node.get(part) is None:
                    node[part] = fresh
            else:
                if not isinstance(node, list):
                    raise Invalid(f"{format_path(path[:depth])} is not a list in the design")
                if part > len(node):
                    raise Invalid(f"index {part} is past the end of"
                                  f" {format_path(path[:depth])} ({len(node)} items)")
                if part == len(node):
                    node.append(fresh)
                elif last:
                    node[part] = fresh
            node = node[part]
    return out


def _base_value(data: Any, path: KeyPath) -> Any:
    """The base design's value at ``path``, or ``None``."""
    node = data
    for part in path:
        found = (isinstance(node, dict) and part in node) if isinstance(part, str) else (
            isinstance(node, list) and part < len(node))
        if not found:
            return None
        node = node[part]
    return node


# Metrics ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Metric:
    """One recorded result: its type, which way is better, and its unit kind."""

    name: str
    dtype: str  # "float", "int", "bool" or "str"
    better: str | None  # "min", "max", or None (no natural direction)
    kind: str | None  # unit kind for quantities written in constraints ("80 GB")
    doc: str


def _m(name: str, dtype: str, better: str | None, kind: str | None, doc: str) -> Metric:
    return Metric(name, dtype, better, kind, doc)


METRICS: tuple[Metric, ...] = (
    _m("step_time_s", "float", "min", "time", "training step time, s"),
    _m("compute_s", "float", "min", "time", "compute part of the step, s"),
    _m("bubble_s", "float", "min", "time", "pipeline bubble, s"),
    _m("exposed_comm_s", "float", "min", "time", "communication not hidden by compute, s"),
    _m("wait_s", "float", "min", "time", "synchronisation wait (jitter, hot experts), s"),
    _m("comm_share", "float", "min", None, "(exposed communication + wait) / step, 0-1"),
    _m("bandwidth_wall_s", "float", "min", "time", "exposed time a non-blocking fabric"
       " would also take, s"),
    _m("latency_wall_s", "float", "min", "time", "exposed latency terms, s"),
    _m("topology_wall_s", "float", "min", "time", "exposed congestion and"
       " oversubscription, s"),
    _m("sync_wall_s", "float", "min", "time", "the wait, s"),
    _m("mfu", "float", "max", None, "model FLOPs utilisation, 0-1"),
    _m("hfu", "float", "max", None, "hardware FLOPs utilisation (with recomputation), 0-1"),
    _m("tokens_per_s", "float", "max", None, "training throughput, tokens/s"),
    _m("tokens_per_J", "float", "max", None, "tokens/s over the fabric's known power"),
    _m("memory_bytes", "float", "min", "size", "memory per accelerator, bytes"),
    _m("fits", "bool", None, None, "the memory fits the accelerator's HBM"),
    _m("world", "int", None, None, "accelerators the layout uses"),
    _m("dp_used", "int", None, None, "DP degree used (filled when dp is 0)"),
    _m("global_batch_used", "int", None, None, "sequences per step actually run"),
    _m("accelerators", "int", None, None, "accelerators in the design"),
    _m("injection_Bps", "float", "max", "rate", "scale-out bandwidth per accelerator,"
       " bytes/s per direction"),
    _m("bisection_Bps", "float", "max", "rate", "bisection bandwidth (closed form),"
       " bytes/s per direction"),
    _m("power_W", "float", "min", "power", "accelerators + network parts with a known"
       " power, W"),
    _m("accelerator_power_W", "float", "min", "power", "accelerators, W"),
    _m("network_power_W", "float", "min", "power", "switches, NICs, cables and modules"
       " with a known power, W"),
    _m("optics_power_W", "float", "min", "power", "cables and optical modules, W"),
    _m("network_W_per_accelerator", "float", "min", "power", "network power per"
       " accelerator, W"),
    _m("switches", "int", "min", None, "scale-out switches"),
    _m("scaleup_switches", "int", "min", None, "scale-up switch chips"),
    _m("nics", "int", "min", None, "NICs"),
    _m("cables", "int", "min", None, "copper and active optical cable assemblies"),
    _m("optical_modules", "int", "min", None, "pluggable / LPO / CPO optical modules"),
    _m("fibres", "int", "min", None, "fibre cables between optical modules"),
    _m("power_unknown", "str", None, None, "parts without a power figure in the catalog"),
    _m("warnings", "str", None, None, "the step model's warnings"),
)
"""Every metric a point records (the catalog has no prices: cost is power and part
counts)."""

METRIC_BY_NAME = {m.name: m for m in METRICS}
OUTCOME_COLUMNS = ("feasible", "violations", "error", "elapsed_s")


# Sweep files ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Axis:
    """One dimension of a product: one key, or a zipped group of keys whose values
    walk together. ``values[i]`` holds one value per key; ``where[i]`` the sweep-file
    key path each came from."""

    keys: tuple[str, ...]
    values: tuple[tuple[Any, ...], ...]
    where: tuple[tuple[KeyPath, ...], ...]


@dataclass(frozen=True)
class Block:
    """A cartesian product of axes (the first varies slowest)."""

    axes: tuple[Axis, ...]

    @property
    def count(self) -> int:
        """Points in the block: the product of the axes' lengths."""
        return math.prod(len(a.values) for a in self.axes)


@dataclass(frozen=True)
class Sweep:
    """A checked sweep file with its points expanded."""

    file: str
    name: str
    design_file: str
    design_data: Any
    catalog: Catalog
    digest: str  # of the base design, extra catalogs and topomodel version
    fixed: dict[str, Any]
    blocks: tuple[Block, ...]
    points: tuple[dict[str, Any], ...]  # fixed + varied values, duplicates removed
    keys: tuple[str, ...]  # one stable hash per point
    columns: tuple[str, ...]  # parameter columns, fixed first, then varied, file order
    varied: tuple[str, ...]
    column_types: dict[str, str]  # parameter column -> int, float, bool, str or json
    metrics: tuple[str, ...]  # recorded
    constraints: tuple[str, ...]
    pareto: tuple[Objective, Objective] | None
    scheduler: str | None
    duplicates: int = 0

    @property
    def expanded(self) -> int:
        """Points the blocks expand to, before duplicates are removed (closed form)."""
        return sum(b.count for b in self.blocks)

    def value(self, point: Mapping[str, Any], key: str) -> Any:
        """The value of parameter ``key`` at ``point``: set, else the default (an
        option's, or the base design's)."""
        if key in point:
            return point[key]
        path = design_path(key)
        if path is not None:
            return _base_value(self.design_data, path)
        opt = option(key)
        return None if opt is None else opt.default


_TOP_KEYS = ("name", "description", "design", "catalogs", "fixed", "parameters", "metrics",
             "constraints", "pareto", "dask")
_RANGE_KEYS = ("start", "stop", "step", "num", "factor", "format")


def load_sweep(path: str | Path, *, text: str | None = None,
               extra_catalogs: Sequence[str | Path] = ()) -> Sweep:
    """Read and check a sweep file; expand its points.

    Parameters
    ----------
    path
        The sweep file (also the name in messages when ``text`` is given); the design and
        catalogs it names are relative to it.
    extra_catalogs
        Catalog files added before the sweep's and the design's own.

    Raises
    ------
    SweepError
        With every problem found, each located ``FILE:LINE: key.path``: unknown keys,
        parameters or metrics, empty ranges, zipped lists of different lengths, bad
        values, constraints that do not parse, design overrides the design loader
        refuses.
    DesignError
        If the base design itself does not load.
    """
    source = load_yaml(path, text=text, error=SweepError)
    data = source.data
    if not isinstance(data, dict):
        source.problem((), "a sweep file is a mapping (design, fixed, parameters, ...)")
        source.raise_if_problems(SweepError)
    for key in data:
        if key not in _TOP_KEYS:
            source.problem((key,), "unknown key" + did_you_mean(key, _TOP_KEYS))
    here = Path(path).parent
    design_rel = data.get("design")
    if not isinstance(design_rel, str) or not design_rel.strip():
        source.problem(("design",) if "design" in data else (),
                       "missing the base design: design: PATH (relative to this file)")
        source.raise_if_problems(SweepError)
    catalogs = _list_of_text(source, ("catalogs",), data.get("catalogs", []))
    source.raise_if_problems(SweepError)
    design_file = str(here / str(design_rel).strip())
    sweep_catalogs = [str(here / c) for c in catalogs]
    for key, names in (("design", [design_file]), ("catalogs", sweep_catalogs)):
        for i, name in enumerate(names):
            if not Path(name).is_file():
                source.problem((key,) if key == "design" else (key, i),
                               f"no such file: {name}")
    source.raise_if_problems(SweepError)
    design, catalog = load_design(design_file, extra_catalogs=[*extra_catalogs,
                                                                *sweep_catalogs])
    design_source = load_yaml(design_file)
    own = [str(Path(design_file).parent / c) for c in design.catalogs]
    digest = _digest([design_file, *extra_catalogs, *sweep_catalogs, *own])

    fixed, fixed_where = _read_fixed(source, data.get("fixed", {}), catalog)
    blocks = _read_blocks(source, data.get("parameters"), fixed, catalog)
    names = [m.name for m in METRICS]
    metrics = _read_metrics(source, data.get("metrics"), names)
    varied = list(dict.fromkeys(k for b in blocks for a in b.axes for k in a.keys))
    if "model" not in fixed and not all(
            any("model" in a.keys for a in b.axes) for b in blocks):
        source.problem(("fixed",) if "fixed" in data else (),
                       "no model: set fixed.model (or vary model in every block)")
    constraint_names = {m.name: m.kind for m in METRICS} | dict.fromkeys(
        [*OPTIONS, *fixed, *varied])
    constraints = _read_constraints(source, data.get("constraints", []), constraint_names)
    known = {m: METRIC_BY_NAME[m].better for m in metrics}
    pareto = _read_pareto(source, data.get("pareto"), known)
    scheduler = _read_dask(source, data.get("dask"))

    expanded = sum(b.count for b in blocks)
    if expanded > MAX_POINTS:
        source.problem(("parameters",), f"{expanded:,} points is more than the"
                       f" {MAX_POINTS:,} a sweep takes; split it")
        source.raise_if_problems(SweepError)
    points = [{**fixed, **p} for p in _expand(blocks)]
    where = dict(fixed_where)
    for block in blocks:
        for axis in block.axes:
            for values, paths in zip(axis.values, axis.where, strict=True):
                for key, value, at in zip(axis.keys, values, paths, strict=True):
                    where.setdefault((key, _canonical(value)), at)
    _check_designs(source, design_file, design_source, points, where, catalog)
    source.raise_if_problems(SweepError)

    columns = tuple(dict.fromkeys([*fixed, *varied]))
    base = design_source.data
    keys, unique = [], []
    seen: set[str] = set()
    for point in points:
        key = point_key(digest, point, base)
        if key not in seen:
            seen.add(key)
            keys.append(key)
            unique.append(point)
    probe = Sweep(str(path), "", design_file, base, catalog, digest, fixed, tuple(blocks),
                  (), (), columns, tuple(varied), {}, (), (), None, None)
    types = {c: _column_type([probe.value(p, c) for p in unique]) for c in columns}
    name = data.get("name") if isinstance(data.get("name"), str) else ""
    return replace(probe, name=str(name or Path(path).stem), points=tuple(unique),
                   keys=tuple(keys), column_types=types, metrics=tuple(metrics),
                   constraints=tuple(constraints), pareto=pareto, scheduler=scheduler,
                   duplicates=len(points) - len(unique))


def _digest(files: Sequence[str | Path]) -> str:
    from topomodel import __version__

    h = hashlib.sha256(__version__.encode())
    for f in files:
        try:
            h.update(Path(f).read_bytes())
        except OSError:
            h.update(str(f).encode())  # the loaders report unreadable files
    return h.hexdigest()[:16]


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def point_key(digest: str, point: Mapping[str, Any], base_design: Any) -> str:
    """A stable hash of a point's parameter set and its base design: 16 hex digits.

    Settings equal to their default (an option's, or the base design's value) are left
    out, so writing ``tp: 1`` or leaving it out gives the same key.
    """
    significant = {}
    for key, value in point.items():
        path = design_path(key)
        opt = option(key)
        default = _base_value(base_design, path) if path is not None else (
            opt.default if opt is not None else None)
        if value != default or type(value) is not type(default):
            significant[key] = value
    payload = _canonical({"base": digest, "point": significant})
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


def _list_of_text(source: Source, path: KeyPath, value: Any) -> list[str]:
    if not isinstance(value, list):
        source.problem(path, f"expected a list of file names, got {_what(value)}")
        return []
    out = []
    for i, item in enumerate(value):
        try:
            out.append(_text(item))
        except Invalid as exc:
            source.problem((*path, i), exc.message)
    return out


def _read_value(source: Source, path: KeyPath, key: str, value: Any, catalog: Catalog,
                ) -> tuple[bool, Any]:
    """One value of parameter ``key`` read and checked; ``(ok, value)``."""
    if design_path(key) is not None:
        return True, value  # checked with the whole design in _check_designs
    opt = option(key)
    assert opt is not None  # keys are checked first
    try:
        read = opt.read(value)
        if key == "model":
            catalog.get(read, Model)
        return True, read
    except Invalid as exc:
        source.problem(path, exc.message)
    except UsageError as exc:
        source.problem(path, str(exc))
    return False, None


def _check_key(source: Source, path: KeyPath, key: Any) -> bool:
    if not isinstance(key, str):
        source.problem(path, "a parameter is named by text")
        return False
    if key.startswith(DESIGN_PREFIX):
        parts = design_path(key)
        if parts is None:
            source.problem(path, "expected design.KEY.PATH, items as [N]"
                           " (e.g. design.scaleout.oversubscription[0])")
            return False
        if parts[0] == "catalogs":
            source.problem(path, "catalogs cannot vary within a sweep; give them under"
                           " catalogs at the top of the sweep file")
            return False
        return True
    if option(key) is None:
        choices = [*OPTIONS, *(OVERLAP_PREFIX + k for k in _BASE.overlap)]
        source.problem(path, "unknown parameter: a step option (tp, pp, micro_batch, ...),"
                       " overlap.KIND, efficiency.TIER or design.KEY.PATH"
                       + did_you_mean(key, choices))
        return False
    return True


def _read_fixed(source: Source, data: Any, catalog: Catalog
                ) -> tuple[dict[str, Any], dict[tuple[str, str], KeyPath]]:
    fixed: dict[str, Any] = {}
    where: dict[tuple[str, str], KeyPath] = {}
    if not isinstance(data, dict):
        source.problem(("fixed",), f"expected a mapping of settings, got {_what(data)}")
        return fixed, where
    for key, value in data.items():
        path = ("fixed", key)
        if not _check_key(source, path, key):
            continue
        ok, read = _read_value(source, path, key, value, catalog)
        if ok:
            fixed[key] = read
            where[(key, _canonical(read))] = path
    return fixed, where


def _read_blocks(source: Source, data: Any, fixed: Mapping[str, Any], catalog: Catalog,
                 ) -> list[Block]:
    if data is None:
        return [Block(())]  # one point: the fixed settings
    if isinstance(data, list):
        if not data:
            source.problem(("parameters",), "an empty list of blocks")
        return [_read_block(source, ("parameters", i), b, fixed, catalog)
                for i, b in enumerate(data)]
    return [_read_block(source, ("parameters",), data, fixed, catalog)]


def _read_block(source: Source, path: KeyPath, data: Any, fixed: Mapping[str, Any],
                catalog: Catalog) -> Block:
    if not isinstance(data, dict) or not data:
        source.problem(path, "expected a mapping from parameters to values (lists or"
                       " ranges), with optional zip groups")
        return Block(())
    axes: list[Axis] = []
    for key, spec in data.items():
        if key == "zip":
            groups = spec if isinstance(spec, list) else [spec]
            for i, group in enumerate(groups):
                gpath = (*path, "zip", i) if isinstance(spec, list) else (*path, "zip")
                axis = _read_zip(source, gpath, group, fixed, catalog)
                if axis is not None:
                    axes.append(axis)
            continue
        kpath = (*path, key)
        if not _check_key(source, kpath, key):
            continue
        values = _read_values(source, kpath, key, spec, catalog)
        if values:
            axes.append(Axis((key,), tuple((v,) for v, _ in values),
                             tuple((w,) for _, w in values)))
    seen: dict[str, None] = {}
    for axis in axes:
        for key in axis.keys:
            if key in fixed:
                source.problem((*path, key), "also set under fixed; a setting is fixed or"
                               " varied, not both")
            elif key in seen:
                source.problem(path, f"{key} is varied twice in this block")
            seen[key] = None
    return Block(tuple(axes))


def _read_zip(source: Source, path: KeyPath, data: Any, fixed: Mapping[str, Any],
              catalog: Catalog) -> Axis | None:
    if not isinstance(data, dict) or len(data) < 2:
        source.problem(path, "a zip group maps two or more parameters to lists of equal"
                       " length")
        return None
    columns: list[list[tuple[Any, KeyPath]]] = []
    keys: list[str] = []
    for key, spec in data.items():
        kpath = (*path, key)
        if not _check_key(source, kpath, key):
            return None
        values = _read_values(source, kpath, key, spec, catalog)
        if not values:
            return None
        keys.append(key)
        columns.append(values)
    lengths = [len(c) for c in columns]
    if len(set(lengths)) > 1:
        source.problem(path, "zipped parameters need lists of the same length; got "
                       + ", ".join(f"{k}: {n}" for k, n in zip(keys, lengths, strict=True)))
        return None
    rows = list(zip(*columns, strict=True))
    return Axis(tuple(keys), tuple(tuple(v for v, _ in r) for r in rows),
                tuple(tuple(w for _, w in r) for r in rows))


def _read_values(source: Source, path: KeyPath, key: str, spec: Any, catalog: Catalog
                 ) -> list[tuple[Any, KeyPath]]:
    """The values of one parameter: a list, or a range mapping."""
    if isinstance(spec, list):
        if not spec:
            source.problem(path, "an empty list: give at least one value")
        raw = [(v, (*path, i)) for i, v in enumerate(spec)]
    elif isinstance(spec, dict):
        generated = _range(source, path, spec)
        raw = [(v, path) for v in generated]
    else:
        source.problem(path, f"expected a list of values or a range {{start, stop, step}},"
                       f" got {_what(spec)} (a single value goes under fixed)")
        return []
    out = []
    for value, where in raw:
        ok, read = _read_value(source, where, key, value, catalog)
        if ok:
            out.append((read, where))
    return out if len(out) == len(raw) else []


def _range(source: Source, path: KeyPath, spec: dict[str, Any]) -> list[Any]:
    """Values of a range: ``{start, stop, step}`` (stop included when on the grid),
    ``{start, stop, num}`` (evenly spaced, both ends) or ``{start, stop, factor}``
    (geometric); ``format`` turns each into text (``"{}:1"``)."""
    for key in spec:
        if key not in _RANGE_KEYS:
            source.problem((*path, key), "unknown range key" + did_you_mean(key, _RANGE_KEYS))
    numbers: dict[str, Any] = {}
    for key in ("start", "stop", "step", "num", "factor"):
        value = spec.get(key)
        if key in spec and (isinstance(value, bool) or not isinstance(value, int | float)):
            source.problem((*path, key), f"expected a number, got {_what(value)}")
            return []
        if key in spec:
            numbers[key] = value
    if "start" not in numbers or "stop" not in numbers:
        source.problem(path, "a range needs start and stop")
        return []
    modes = [k for k in ("step", "num", "factor") if k in numbers]
    if len(modes) != 1:
        source.problem(path, "a range needs exactly one of step, num or factor")
        return []
    start, stop = numbers["start"], numbers["stop"]
    mode = modes[0]
    whole = isinstance(start, int) and isinstance(stop, int)
    values: list[float] = []
    if mode == "step":
        step = numbers["step"]
        count = math.floor((stop - start) / step + 1e-9) + 1 if step else 0
        if step == 0 or count < 1:
            source.problem(path, f"an empty range: from {start} to {stop} in steps of {step}")
            return []
        if count > MAX_POINTS:
            source.problem(path, f"{count:,} values: more than a sweep takes")
            return []
        values = [start + i * step for i in range(count)]
        whole = whole and isinstance(step, int)
    elif mode == "num":
        num = numbers["num"]
        if not isinstance(num, int) or num < 1 or num > MAX_POINTS:
            source.problem((*path, "num"), f"num is a whole number of values from 1 to"
                           f" {MAX_POINTS:,}, got {num}")
            return []
        values = [start + (stop - start) * i / (num - 1) for i in range(num)] if num > 1 else [
            start]
        whole = whole and all(float(v).is_integer() for v in values)
    else:
        factor = numbers["factor"]
        if factor <= 1 or start <= 0 or stop < start:
            source.problem(path, "a geometric range needs factor > 1 and 0 < start <= stop")
            return []
        value = start
        while value <= stop * (1 + 1e-9):
            values.append(value)
            value *= factor
        whole = whole and isinstance(factor, int)
    out: list[Any] = [round(v) if whole else float(f"{v:.12g}") for v in values]
    fmt = spec.get("format")
    if fmt is not None:
        if not isinstance(fmt, str) or "{}" not in fmt:
            source.problem((*path, "format"), "format is text with {} where the value goes,"
                           " e.g. '{}:1'")
            return []
        out = [fmt.replace("{}", f"{v:g}" if isinstance(v, float) else str(v)) for v in out]
    return out


def _expand(blocks: Sequence[Block]) -> Iterator[dict[str, Any]]:
    """Every point of every block: products of axes, the first axis slowest."""
    for block in blocks:
        for combo in itertools.product(*(range(len(a.values)) for a in block.axes)):
            point: dict[str, Any] = {}
            for axis, index in zip(block.axes, combo, strict=True):
                point.update(zip(axis.keys, axis.values[index], strict=True))
            yield point


def _read_metrics(source: Source, data: Any, names: list[str]) -> list[str]:
    if data is None:
        return names
    if not isinstance(data, list) or not data:
        source.problem(("metrics",), "expected a list of metric names")
        return names
    out = []
    for i, name in enumerate(data):
        if name not in METRIC_BY_NAME:
            source.problem(("metrics", i), f"unknown metric {name!r}"
                           + did_you_mean(str(name), names))
        elif name not in out:
            out.append(name)
    return out


def _read_constraints(source: Source, data: Any, names: Mapping[str, str | None]
                      ) -> list[str]:
    if not isinstance(data, list):
        source.problem(("constraints",), "expected a list of expressions such as"
                       " 'comm_share <= 0.2'")
        return []
    out = []
    for i, text in enumerate(data):
        try:
            compile_constraint(text, names)
            out.append(text)
        except Invalid as exc:
            source.problem(("constraints", i), exc.message)
    return out


def _read_pareto(source: Source, data: Any, known: dict[str, str | None]
                 ) -> tuple[Objective, Objective] | None:
    if data is None:
        return None
    if not (isinstance(data, list) and len(data) == 2 and all(isinstance(d, str)
                                                              for d in data)):
        source.problem(("pareto",), "expected two metrics, e.g. [power_W, step_time_s]")
        return None
    try:
        return parse_objective(data[0], known), parse_objective(data[1], known)
    except UsageError as exc:
        source.problem(("pareto",), str(exc))
        return None


def _read_dask(source: Source, data: Any) -> str | None:
    if data is None:
        return None
    if isinstance(data, dict):
        for key in data:
            if key != "scheduler":
                source.problem(("dask", key), "unknown key; did you mean 'scheduler'?")
        data = data.get("scheduler")
    if not isinstance(data, str) or not data.strip():
        source.problem(("dask",), "expected the scheduler address, e.g."
                       " dask: {scheduler: 'tcp://host:8786'}")
        return None
    return data.strip()


def _check_designs(source: Source, design_file: str, design_source: Source,
                   points: Sequence[Mapping[str, Any]],
                   where: Mapping[tuple[str, str], KeyPath], catalog: Catalog) -> None:
    """Read each distinct design a sweep asks for; report what the design loader refuses
    (unknown keys, bad units or ids) at the sweep key that asked for it.

    Consistency between parts (a switch without ports at a NIC's rate) and fabrics that
    cannot be built are left to the points, which record them as their error."""
    from topomodel.catalog import reference_problem

    reported: set[tuple[str, str]] = set()
    seen: set[str] = set()
    for point in points:
        overrides = {k: v for k, v in point.items() if k.startswith(DESIGN_PREFIX)}
        signature = _canonical(overrides)
        if not overrides or signature in seen:
            continue
        seen.add(signature)
        problems: list[tuple[str, str | None, str]] = []  # override, design key, message
        data = design_source.data
        for key in sorted(overrides, key=lambda k: len(design_path(k) or ())):
            try:  # one at a time, so a path that cannot be set names its own key
                data = apply_overrides(data, {key: overrides[key]})
            except Invalid as exc:
                problems.append((key, None, exc.message))
        design = Source(design_file, data, dict(design_source.lines))
        reading = Reading(design)
        read_record(reading, (), data, Design, file=design_file, lines=design.lines)
        found = list(design.problems) + [
            p for p in (reference_problem(catalog, design, path, kind, ident)
                        for path, kind, ident in reading.refs) if p is not None]
        problems.extend((_blame(overrides, p.key_path), p.key_path, p.message) for p in found)
        for key, design_key, message in problems:
            at = where.get((key, _canonical(overrides[key])), ())
            text = message if design_key in (None, format_path(design_path(key) or ())) else (
                f"the design's {design_key}: {message}")
            if (key, text) not in reported:
                reported.add((key, text))
                source.problem(at, text)


def _blame(overrides: Mapping[str, Any], problem_path: str | None) -> str:
    """The override a design problem at ``problem_path`` comes from."""
    if problem_path is not None:
        for key in overrides:
            own = format_path(design_path(key) or ())
            if problem_path == own or problem_path.startswith((own + ".", own + "[")) or (
                    own.startswith((problem_path + ".", problem_path + "["))):
                return key
    return next(iter(overrides))


def _column_type(values: Sequence[Any]) -> str:
    present = [v for v in values if v is not None]
    if all(isinstance(v, bool) for v in present) and present:
        return "bool"
    if all(isinstance(v, int) and not isinstance(v, bool) for v in present):
        return "int"
    if all(isinstance(v, int | float) and not isinstance(v, bool) for v in present):
        return "float"
    if all(isinstance(v, str) for v in present):
        return "str"
    return "json"


# Constraints ------------------------------------------------------------------------------

_COMPARE: dict[type[ast.cmpop], Callable[[Any, Any], bool]] = {
    ast.Lt: lambda a, b: a < b, ast.LtE: lambda a, b: a <= b,
    ast.Gt: lambda a, b: a > b, ast.GtE: lambda a, b: a >= b,
    ast.Eq: lambda a, b: a == b, ast.NotEq: lambda a, b: a != b,
}
_ARITHMETIC: dict[type[ast.operator], Callable[[Any, Any], Any]] = {
    ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b,
    ast.Mult: lambda a, b: a * b, ast.Div: lambda a, b: a / b,
}


def _dotted(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        inner = _dotted(node.value)
        return None if inner is None else f"{inner}.{node.attr}"
    return None


class _Quantities(ast.NodeTransformer):
    """Checks a constraint's names and nodes; turns ``"80 GB"`` next to a metric with a
    unit into its canonical number."""

    def __init__(self, names: Mapping[str, str | None] | None) -> None:
        self.names = names

    def generic_visit(self, node: ast.AST) -> ast.AST:
        allowed = (ast.Expression, ast.BoolOp, ast.And, ast.Or, ast.UnaryOp, ast.Not,
                   ast.USub, ast.UAdd, ast.Compare, ast.BinOp, ast.Constant, ast.Load,
                   *_COMPARE, *_ARITHMETIC)
        if not isinstance(node, allowed):
            raise Invalid(f"{type(node).__name__.lower()} is not allowed in a constraint;"
                          " use names, numbers, comparisons, + - * /, and, or, not")
        return super().generic_visit(node)

    def visit_Name(self, node: ast.Name) -> ast.AST:
        self._check(node.id)
        return node

    def visit_Attribute(self, node: ast.Attribute) -> ast.AST:
        name = _dotted(node)
        if name is None:
            raise Invalid("only dotted parameter names (overlap.dp, design.X.Y) may use '.'")
        self._check(name)
        return node

    def visit_Constant(self, node: ast.Constant) -> ast.AST:
        if not isinstance(node.value, int | float | str) or node.value is None:
            raise Invalid(f"{node.value!r} is not a number or text")
        return node

    def visit_Compare(self, node: ast.Compare) -> ast.AST:
        self.generic_visit(node)
        operands = [node.left, *node.comparators]
        kinds = [self._kind(o) for o in operands]
        for i, operand in enumerate(operands):
            if isinstance(operand, ast.Constant) and isinstance(operand.value, str):
                kind = next((k for k in kinds if k), None)
                if kind is not None:
                    from topomodel.units import parse

                    try:
                        number = ast.Constant(parse(operand.value, kind))
                    except UnitError as exc:
                        raise Invalid(str(exc)) from None
                    if i == 0:
                        node.left = number
                    else:
                        node.comparators[i - 1] = number
        return node

    def _kind(self, node: ast.expr) -> str | None:
        name = _dotted(node)
        metric = METRIC_BY_NAME.get(name or "")
        return metric.kind if metric is not None else None

    def _check(self, name: str) -> None:
        if self.names is not None and name not in self.names:
            raise Invalid(f"unknown name {name!r}: a metric or a parameter of this sweep"
                          + did_you_mean(name, self.names))


def compile_constraint(text: Any, names: Mapping[str, str | None] | None = None
                       ) -> ast.Expression:
    """Parse and check a constraint such as ``comm_share <= 0.2 and fits``.

    Names are metrics or parameters (dotted ones too: ``overlap.dp``); text next to a
    metric with a unit is read as a quantity (``memory_bytes < "70 GB"``).

    Raises
    ------
    Invalid
        For text that is not such an expression, or names not in ``names``.

    Examples
    --------
    >>> tree = compile_constraint('memory_bytes <= "80 GB" and tp >= 2', {"memory_bytes":
    ...                           "size", "tp": None})
    >>> constraint_holds(tree, {"memory_bytes": 7e10, "tp": 4})
    True
    """
    if not isinstance(text, str) or not text.strip():
        raise Invalid("expected an expression such as 'comm_share <= 0.2'")
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError as exc:
        raise Invalid(f"not an expression: {exc.msg} in {text.strip()!r}") from None
    checked = _Quantities(names).visit(tree)
    assert isinstance(checked, ast.Expression)
    return checked


@lru_cache(maxsize=256)
def _compiled(text: str) -> ast.Expression:
    return compile_constraint(text)


def constraint_holds(tree: ast.Expression, values: Mapping[str, Any]) -> bool:
    """Evaluate a compiled constraint; missing or NaN values make it false."""
    try:
        return bool(_evaluate(tree.body, values))
    except (KeyError, TypeError, ZeroDivisionError):
        return False


def _evaluate(node: ast.expr, values: Mapping[str, Any]) -> Any:
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name | ast.Attribute):
        value = values[_dotted(node) or ""]
        if value is None:
            raise TypeError("no value")
        return value
    if isinstance(node, ast.BoolOp):
        parts = (_evaluate(v, values) for v in node.values)
        return all(parts) if isinstance(node.op, ast.And) else any(parts)
    if isinstance(node, ast.UnaryOp):
        operand = _evaluate(node.operand, values)
        return (not operand if isinstance(node.op, ast.Not)
                else -operand if isinstance(node.op, ast.USub) else +operand)
    if isinstance(node, ast.BinOp):
        return _ARITHMETIC[type(node.op)](_evaluate(node.left, values),
                                          _evaluate(node.right, values))
    if isinstance(node, ast.Compare):
        left = _evaluate(node.left, values)
        for op, right_node in zip(node.ops, node.comparators, strict=True):
            right = _evaluate(right_node, values)
            if not _COMPARE[type(op)](left, right):
                return False
            left = right
        return True
    raise TypeError(f"unsupported {type(node).__name__}")


# Evaluating one point (runs in the workers) -------------------------------------------------


@dataclass(frozen=True)
class SweepContext:
    """What every worker needs, sent once: the base design, the catalog, constraints."""

    digest: str
    design_file: str
    design_data: Any
    catalog: Catalog
    constraints: tuple[str, ...]


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


def _setting(params: Mapping[str, Any], key: str) -> Any:
    if key in params:
        return params[key]
    opt = option(key)
    return None if opt is None else opt.default


def evaluate_point(context: SweepContext, params: Mapping[str, Any]) -> dict[str, Any]:
    """Every metric of :data:`METRICS` for one point (a training step on its design).

    Raises
    ------
    TopomodelError
        When the design cannot be built or the layout does not fit (the caller records
        it as the point's error).
    """
    from topomodel.step import Layout, step_time
    from topomodel.studies import layout_for
    from topomodel.timing import TimeModel
    from topomodel.units import parse

    overrides = {k: v for k, v in params.items() if k.startswith(DESIGN_PREFIX)}
    fails = tuple(_setting(params, "fail") or ())
    factor = float(_setting(params, "scaleout_factor"))
    fabric, design_metrics = _fabric(context, overrides, fails, factor)
    model = context.catalog.get(_setting(params, "model"), Model)
    s = {k: _setting(params, k) for k in OPTIONS}
    layout = Layout(tp=s["tp"], pp=s["pp"], dp=max(s["dp"], 1), ep=s["ep"], cp=s["cp"],
                    micro_batch=s["micro_batch"], global_batch=s["global_batch"],
                    seq=s["seq"], sequence_parallel=s["sequence_parallel"],
                    dp_mode=s["dp_mode"], interleave=s["interleave"],
                    recompute=s["recompute"], order=s["order"])
    if not s["dp"]:  # fill the fabric; the global batch stays what the point says
        filled = layout_for(fabric.accelerator_count, replace(layout, global_batch=0))
        layout = replace(filled, global_batch=s["global_batch"])
    overlap = {kind: _setting(params, OVERLAP_PREFIX + kind) for kind in _BASE.overlap}
    efficiency = {k.removeprefix(EFFICIENCY_PREFIX): float(v) for k, v in params.items()
                  if k.startswith(EFFICIENCY_PREFIX)}
    time_model = TimeModel(efficiency=efficiency)
    if s["overhead"] is not None:
        time_model = replace(time_model, per_message_overhead_s=parse(s["overhead"], "time"))
    assumptions = replace(
        _BASE, overlap=overlap, grad_dtype=s["grad_precision"],
        compute_efficiency=s["compute_efficiency"], hot_expert_factor=s["hot_expert"],
        jitter_cv=s["jitter_cv"], time=time_model,
        dp_bucket_bytes=(parse(s["bucket"], "size") if s["bucket"] is not None
                         else _BASE.dp_bucket_bytes))
    r = step_time(fabric, model, layout, assumptions, routing=s["routing"])
    seq = layout.seq or model.sequence
    power = design_metrics["power_W"]
    return {
        **design_metrics,
        "step_time_s": r.step_time_s, "compute_s": r.compute_s, "bubble_s": r.bubble_s,
        "exposed_comm_s": r.exposed_comm_s, "wait_s": r.wait_s,
        "comm_share": r.comm_share,
        "bandwidth_wall_s": r.walls["bandwidth_s"], "latency_wall_s": r.walls["latency_s"],
        "topology_wall_s": r.walls["topology_s"], "sync_wall_s": r.walls["sync_s"],
        "mfu": r.mfu, "hfu": r.hfu, "tokens_per_s": r.tokens_per_s,
        "tokens_per_J": r.tokens_per_s / power if power else math.nan,
        "memory_bytes": r.memory["total_bytes"], "fits": r.fits,
        "world": r.layout.world, "dp_used": r.layout.dp,
        "global_batch_used": round(r.tokens_per_s * r.step_time_s / seq),
        "warnings": "; ".join(r.warnings) or None,
    }


def _fabric(context: SweepContext, overrides: Mapping[str, Any], fails: tuple[str, ...],
            factor: float) -> tuple[Any, dict[str, Any]]:
    """The built fabric of a point and its design-level metrics, from the worker's cache
    when a recent point used the same design."""
    from topomodel.build import build_fabric, with_failures
    from topomodel.studies import scale_scaleout

    key = (context.digest, _canonical(overrides), fails, factor)
    with _CACHE_LOCK:
        hit = _CACHE.get(key)
        if hit is not None:
            _CACHE.move_to_end(key)
    if hit is None:
        try:
            if fails or factor != 1.0:
                base, _ = _fabric(context, overrides, (), 1.0)
                fabric = with_failures(base, fails) if fails else base
                fabric = scale_scaleout(fabric, factor) if factor != 1.0 else fabric
            else:
                data = apply_overrides(context.design_data, overrides)
                import yaml

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
    from topomodel.bisection import closed_form, injection_Bps
    from topomodel.bom import bill_of_materials, power_summary

    bom = bill_of_materials(fabric)
    power = power_summary(bom, fabric.accelerator_count)

    def count(category: str) -> int:
        return sum(line.count for line in bom if line.category == category)

    bisection, _ = closed_form(fabric)
    return {
        "accelerators": fabric.accelerator_count,
        "injection_Bps": injection_Bps(fabric),
        "bisection_Bps": math.nan if bisection is None else bisection,
        "power_W": power.total_W, "accelerator_power_W": power.accelerators_W,
        "network_power_W": power.network_W, "optics_power_W": power.optics_W,
        "network_W_per_accelerator": power.network_W_per_accelerator,
        "switches": count("switch"), "scaleup_switches": count("scaleup_switch"),
        "nics": count("nic"), "cables": count("cable"),
        "optical_modules": count("module"), "fibres": count("fibre"),
        "power_unknown": ", ".join(power.unknown) or None,
    }


def _error_text(exc: BaseException) -> str:
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


def _fast_strings() -> Any:
    import pandas as pd

    return pd.option_context("mode.string_storage", STRING_STORAGE)


class _Values(dict[str, Any]):
    """A point's metrics and parameters; unset ones read as their defaults."""

    def __init__(self, context: SweepContext, values: Mapping[str, Any]) -> None:
        super().__init__(values)
        self.context = context

    def __missing__(self, key: str) -> Any:
        path = design_path(key)
        if path is not None:
            return _base_value(self.context.design_data, path)
        opt = option(key)
        if opt is None:
            raise KeyError(key)
        return opt.default


def _run_one(context: SweepContext, index: int, params: Mapping[str, Any],
             evaluate: Evaluate) -> Outcome:
    start = time.perf_counter()
    try:
        metrics = evaluate(context, params)
    except Exception as exc:  # the point fails, the sweep goes on
        return Outcome(index, {}, False, None, _error_text(exc), time.perf_counter() - start)
    values = _Values(context, {**params, **metrics})
    broken = [text for text in context.constraints
              if not constraint_holds(_compiled(text), values)]
    return Outcome(index, metrics, not broken, "; ".join(broken) or None, None,
                   time.perf_counter() - start)


# Running ----------------------------------------------------------------------------------


@dataclass
class _Task:
    points: list[tuple[int, dict[str, Any]]]
    isolated: bool = False  # rerun alone after its worker died


def _tasks(sweep: Sweep, todo: Sequence[int], workers: int) -> list[_Task]:
    """Points to run, grouped by the design they build, in chunks."""
    groups: dict[str, list[int]] = {}
    for index in todo:
        point = sweep.points[index]
        design = _canonical({k: v for k, v in point.items() if k.startswith(DESIGN_PREFIX)})
        groups.setdefault(design, []).append(index)
    tasks = []
    for members in groups.values():
        size = max(1, min(MAX_POINTS_PER_TASK, math.ceil(len(members) / (2 * workers))))
        for start in range(0, len(members), size):
            chunk = members[start:start + size]
            tasks.append(_Task([(i, sweep.points[i]) for i in chunk]))
    return tasks


_WORKER: dict[str, Any] = {}


def _worker_init(context: SweepContext, evaluate: Evaluate) -> None:
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent handles Ctrl-C
    import pandas as pd

    pd.set_option("mode.string_storage", STRING_STORAGE)  # this process is ours
    _WORKER["context"], _WORKER["evaluate"] = context, evaluate


def _worker_run(points: list[tuple[int, dict[str, Any]]]) -> list[Outcome]:
    return run_points(_WORKER["context"], points, _WORKER["evaluate"])


def _died(task: _Task) -> list[Outcome]:
    return [Outcome(i, {}, False, None, "the worker process died while computing this"
                    " point (killed, or out of memory)", 0.0) for i, _ in task.points]


def _run_pool(context: SweepContext, tasks: list[_Task], workers: int, evaluate: Evaluate,
              done: Callable[[list[Outcome]], None]) -> None:
    """Run tasks on a local process pool, at most ``workers`` in flight. When a worker
    dies, the pool is rebuilt and the tasks that were in flight rerun one point at a
    time; a point that kills its worker alone is recorded as failed."""
    import multiprocessing
    from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
    from concurrent.futures.process import BrokenProcessPool

    methods = multiprocessing.get_all_start_methods()
    mp = multiprocessing.get_context("forkserver" if "forkserver" in methods else "spawn")
    if "forkserver" in methods:
        mp.set_forkserver_preload(["topomodel.sweep", "topomodel.step", "topomodel.build"])

    def pool() -> ProcessPoolExecutor:
        return ProcessPoolExecutor(max_workers=workers, mp_context=mp,
                                   initializer=_worker_init, initargs=(context, evaluate))

    queue, suspects = deque(tasks), deque[_Task]()
    inflight: dict[Future[list[Outcome]], _Task] = {}
    executor = pool()
    try:
        while queue or suspects or inflight:
            window = 1 if suspects else workers
            while len(inflight) < window and (suspects or queue):
                task = suspects.popleft() if suspects else queue.popleft()
                inflight[executor.submit(_worker_run, task.points)] = task
            finished, _ = wait(list(inflight), return_when=FIRST_COMPLETED)
            broken = False
            for future in finished:
                task = inflight.pop(future)
                try:
                    outcomes = future.result()
                except BrokenProcessPool:
                    broken = True
                    inflight[future] = task  # handled with the rest below
                    continue
                except Exception as exc:  # e.g. a result that cannot be sent back
                    outcomes = [Outcome(i, {}, False, None, _error_text(exc), 0.0)
                                for i, _ in task.points]
                done(outcomes)
            if broken:
                for future, task in inflight.items():
                    if future.done() and future.exception() is None:
                        done(future.result())  # finished just before the others broke
                    elif task.isolated:
                        done(_died(task))
                    else:
                        suspects.extend(_Task([p], isolated=True) for p in task.points)
                inflight.clear()
                executor.shutdown(wait=True, cancel_futures=True)
                executor = pool()
    except BaseException:
        for process in list((getattr(executor, "_processes", None) or {}).values()):
            process.terminate()
        executor.shutdown(wait=True, cancel_futures=True)
        raise
    executor.shutdown(wait=True)


def _run_dask(context: SweepContext, tasks: list[_Task], scheduler: Any, evaluate: Evaluate,
              done: Callable[[list[Outcome]], None]) -> None:
    """Run tasks on a Dask distributed cluster (``scheduler``: an address or a Client)."""
    try:
        from distributed import Client, as_completed
    except ImportError:
        raise UsageError("a Dask scheduler needs dask.distributed: pip install"
                         " 'topomodel[dask]'") from None
    own = isinstance(scheduler, str)
    try:
        client = (Client(scheduler,  # type: ignore[no-untyped-call]
                         timeout=DASK_CONNECT_TIMEOUT)
                  if own else scheduler)
    except (OSError, TimeoutError) as exc:
        raise UsageError(f"cannot reach the Dask scheduler at {scheduler}: {exc}") from None
    futures = []
    try:
        shared = client.scatter(context, broadcast=True, hash=False)
        futures = [client.submit(run_points, shared, t.points, evaluate, pure=False)
                   for t in tasks]
        by_future = dict(zip(futures, tasks, strict=True))
        for future in as_completed(futures):  # type: ignore[no-untyped-call]
            try:
                outcomes = future.result()
            except Exception as exc:  # a worker died too often (KilledWorker), ...
                outcomes = [Outcome(i, {}, False, None, f"on the cluster: {_error_text(exc)}",
                                    0.0) for i, _ in by_future[future].points]
            done(outcomes)
    except BaseException:
        client.cancel(futures)
        raise
    finally:
        if own:
            client.close()


# Results: journal, resume, compaction --------------------------------------------------------


def results_format_for(path: str | Path, requested: str | None = None) -> str:
    """``parquet`` or ``csv``: as requested, else by the file's suffix, else Parquet.

    Examples
    --------
    >>> [results_format_for(name) for name in ("out/results.csv", "r.parquet", "r")]
    ['csv', 'parquet', 'parquet']
    """
    suffix = Path(path).suffix.lower()
    by_suffix = {".csv": "csv", ".parquet": "parquet", ".pq": "parquet"}.get(suffix)
    if requested is not None and requested not in RESULTS_FORMATS:
        raise UsageError(f"results format is one of {', '.join(RESULTS_FORMATS)}")
    if requested and by_suffix and requested != by_suffix:
        raise UsageError(f"{path}: a {suffix} file cannot hold {requested} results")
    return requested or by_suffix or "parquet"


def journal_path(results: str | Path) -> Path:
    """Where finished points are journaled until the results file is written."""
    path = Path(results)
    return path.with_name(path.name + JOURNAL_SUFFIX)


class _Journal:
    """Append-only JSON lines, one finished point each, flushed as they arrive."""

    def __init__(self, path: Path, header: dict[str, Any]) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self.fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            import fcntl

            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except ImportError:  # no advisory locks on this platform
            pass
        except OSError:
            os.close(self.fd)
            raise UsageError(f"{path}: another sweep is writing these results") from None
        size = os.fstat(self.fd).st_size
        if size:  # a process killed mid-write leaves a torn last line: drop it
            content = os.pread(self.fd, size, 0)
            keep = content.rfind(b"\n") + 1
            if keep < size:
                os.ftruncate(self.fd, keep)
            size = keep
        if not size:
            self._write([header])

    def append(self, rows: Sequence[dict[str, Any]]) -> None:
        self._write(rows)

    def _write(self, rows: Sequence[dict[str, Any]]) -> None:
        data = "".join(json.dumps(_json_safe(r), allow_nan=False) + "\n" for r in rows)
        view = memoryview(data.encode())
        while view:
            written = os.write(self.fd, view)
            view = view[written:]

    def close(self) -> None:
        os.close(self.fd)


def _json_safe(row: Mapping[str, Any]) -> dict[str, Any]:
    out = {}
    for key, value in row.items():
        if hasattr(value, "item") and not isinstance(value, str | bytes):
            value = value.item()  # numpy scalars
        if isinstance(value, float) and not math.isfinite(value):
            value = None
        out[key] = value
    return out


def _read_journal(path: Path) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError:
        return rows
    for line in lines[1:]:
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue  # a torn line of a killed process
        if isinstance(row, dict) and "key" in row:
            rows.append(row)
    return rows


def _read_results(path: Path, fmt: str) -> list[dict[str, Any]]:
    """Rows of a previous results file (for resume); none if it cannot be read."""
    if not path.exists():
        return []
    try:
        if fmt == "csv":
            from pyarrow import csv

            table = csv.read_csv(path, convert_options=csv.ConvertOptions(
                strings_can_be_null=True, column_types={"key": "string"}))
        else:
            import pyarrow.parquet as pq

            table = pq.read_table(path)
    except Exception as exc:
        raise UsageError(f"{path}: cannot read the previous results to resume: {exc}"
                         ) from None
    return [r for r in table.to_pylist() if r.get("key")]


def _arrow_schema(sweep: Sweep) -> Any:
    import pyarrow as pa

    types = {"int": pa.int64(), "float": pa.float64(), "bool": pa.bool_(), "str": pa.string(),
             "json": pa.string()}
    fields = [pa.field("point", pa.int64()), pa.field("key", pa.string())]
    fields += [pa.field(c, types[sweep.column_types[c]]) for c in sweep.columns]
    fields += [pa.field(m, types[METRIC_BY_NAME[m].dtype]) for m in sweep.metrics]
    fields += [pa.field("feasible", pa.bool_()), pa.field("violations", pa.string()),
               pa.field("error", pa.string()), pa.field("elapsed_s", pa.float64())]
    from topomodel import __version__

    meta = {"sweep": sweep.file, "name": sweep.name, "design": sweep.design_file,
            "digest": sweep.digest, "topomodel": __version__}
    return pa.schema(fields, metadata={"topomodel.sweep": json.dumps(meta)})


def _full_row(sweep: Sweep, index: int, stored: Mapping[str, Any]) -> dict[str, Any]:
    point = sweep.points[index]
    row: dict[str, Any] = {"point": index, "key": sweep.keys[index]}
    for column in sweep.columns:
        value = sweep.value(point, column)
        kind = sweep.column_types[column]
        row[column] = (None if value is None else _canonical(value)) if kind == "json" else (
            float(value) if kind == "float" and value is not None else value)
    for name in (*sweep.metrics, *OUTCOME_COLUMNS):
        value = stored.get(name)
        if isinstance(value, float) and not math.isfinite(value):
            value = None
        row[name] = value
    return row


def _write_results(sweep: Sweep, path: Path, fmt: str, rows: list[dict[str, Any]]) -> Any:
    """Write the results file atomically (temporary file, then rename); the table."""
    import tempfile

    import pyarrow as pa

    table = pa.Table.from_pylist(rows, schema=_arrow_schema(sweep))
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    os.close(handle)
    umask = os.umask(0o22)
    os.umask(umask)
    os.chmod(temporary, 0o666 & ~umask)  # as an ordinary new file, not mkstemp's 0600
    try:
        if fmt == "csv":
            from pyarrow import csv

            csv.write_csv(table, temporary)
        else:
            import pyarrow.parquet as pq

            pq.write_table(table, temporary)
        os.replace(temporary, path)
    except BaseException:
        os.unlink(temporary)
        raise
    return table


@dataclass(frozen=True)
class SweepOutcome:
    """A finished sweep: where its results are, the table, and what ran."""

    sweep: Sweep
    path: Path
    results_format: str
    frame: Any  # pandas DataFrame of the results file
    ran: int  # points computed by this run
    resumed: int  # points taken from a previous run
    elapsed_s: float
    workers: int
    scheduler: str | None = None
    warnings: tuple[str, ...] = field(default=())


def run_sweep(sweep: Sweep, results: str | Path, *, workers: int | None = None,
              scheduler: Any = None, resume: bool = False, overwrite: bool = False,
              results_format: str | None = None, retry_failed: bool = False,
              progress: bool | None = None, evaluate: Evaluate = evaluate_point
              ) -> SweepOutcome:
    """Evaluate every point of ``sweep``; write one row per point to ``results``.

    Parameters
    ----------
    results
        The results file: Parquet, or CSV by a ``.csv`` suffix or ``results_format``.
        Finished points go to ``RESULTS.journal`` as they arrive; the results file is
        written from it (atomically) when every point is done, and the journal removed.
    workers
        Local processes (default: every core); 1 runs in this process.
    scheduler
        A Dask scheduler address or ``distributed.Client``: run there instead (default:
        the sweep file's ``dask`` setting, if any).
    resume
        Skip points already in the journal or in an existing results file.
    overwrite
        Start over even if results or a journal exist (otherwise that is an error).
    retry_failed
        With ``resume``, run again the points that recorded an error.
    progress
        Show a progress bar on stderr (default: when stderr is a terminal).
    evaluate
        The function computing a point's metrics (tests replace it); it must pickle
        (a module-level function) to run in other processes. As with any process pool,
        a script calling this with several workers needs the ``if __name__ ==
        "__main__":`` guard.

    Raises
    ------
    UsageError
        Results that exist without ``resume``/``overwrite``, both of them, an
        unreachable scheduler, a journal another sweep holds.
    KeyboardInterrupt
        Passed on after the finished points are safe in the journal.
    """
    path = Path(results)
    fmt = results_format_for(path, results_format)
    journal = journal_path(path)
    if resume and overwrite:
        raise UsageError("--resume continues a sweep and --overwrite starts it over: pick"
                         " one")
    if not resume and not overwrite and (path.exists() or journal.exists()):
        there = journal if journal.exists() else path
        raise UsageError(f"{there} exists: add --resume to continue that sweep or"
                         " --overwrite to start over")
    if overwrite and journal.exists():
        journal.unlink()
    scheduler = scheduler if scheduler is not None else sweep.scheduler
    count = workers if workers is not None else _cores()
    if count < 1:
        raise UsageError("--workers must be at least 1")
    index_of = {key: i for i, key in enumerate(sweep.keys)}
    needed = (*sweep.metrics, *OUTCOME_COLUMNS)
    stored: dict[int, dict[str, Any]] = {}
    if resume:
        for row in [*_read_results(path, fmt), *_read_journal(journal)]:
            index = index_of.get(str(row.get("key")))
            if index is not None and all(n in row for n in needed) and not (
                    retry_failed and row.get("error")):
                stored[index] = row
    resumed = len(stored)
    todo = [i for i in range(len(sweep.points)) if i not in stored]
    context = SweepContext(sweep.digest, sweep.design_file, sweep.design_data, sweep.catalog,
                           sweep.constraints)
    header = {"topomodel_sweep_journal": JOURNAL_VERSION, "sweep": sweep.file,
              "digest": sweep.digest, "metrics": list(sweep.metrics)}
    start = time.perf_counter()
    log = _Journal(journal, header)
    bar = _progress(len(todo), sweep.name, progress)
    failed = 0

    def done(outcomes: list[Outcome]) -> None:
        nonlocal failed
        rows = []
        for o in outcomes:
            row = {"key": sweep.keys[o.index], **{m: o.metrics.get(m) for m in sweep.metrics},
                   "feasible": o.feasible, "violations": o.violations, "error": o.error,
                   "elapsed_s": o.elapsed_s}
            rows.append(row)
            stored[o.index] = _json_safe(row)
            failed += o.error is not None
        log.append(rows)
        if bar is not None:
            bar.update(len(outcomes))
            if failed:
                bar.set_postfix(failed=failed, refresh=False)

    try:
        if todo and scheduler is not None:
            _run_dask(context, _tasks(sweep, todo, count), scheduler, evaluate, done)
        elif todo and count == 1:
            with _fast_strings():
                for index in todo:
                    done(run_points(context, [(index, sweep.points[index])], evaluate))
        elif todo:
            _run_pool(context, _tasks(sweep, todo, count), count, evaluate, done)
    finally:
        if bar is not None:
            bar.close()
        log.close()
    rows = [_full_row(sweep, i, stored[i]) for i in sorted(stored)]
    frame = _write_results(sweep, path, fmt, rows).to_pandas()
    journal.unlink(missing_ok=True)
    warnings = []
    if sweep.duplicates:
        warnings.append(f"{sweep.duplicates} duplicate point(s) were run once")
    where = scheduler if scheduler is None or isinstance(scheduler, str) else str(
        getattr(getattr(scheduler, "scheduler", None), "address", "a Dask client"))
    return SweepOutcome(sweep, path, fmt, frame, len(todo), resumed,
                        time.perf_counter() - start, count, where, tuple(warnings))


def _cores() -> int:
    """Cores this process may use."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def _progress(total: int, name: str, show: bool | None) -> Any:
    if show is False or not total:
        return None
    from tqdm import tqdm

    return tqdm(total=total, desc=name, unit="pt", file=sys.stderr, smoothing=0.05,
                disable=None if show is None else False, dynamic_ncols=True)


# Reports ---------------------------------------------------------------------------------


def format_metric(name: str, value: Any) -> str:
    """A metric's value for people: SI prefixes and units, percentages for shares.

    Examples
    --------
    >>> format_metric("step_time_s", 2.25), format_metric("mfu", 0.4211)
    ('2.25 s', '42.1%')
    """
    from topomodel.units import format_rate, format_si, format_size

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
    if name.endswith("_s"):
        return format_si(value, "s")
    if name.endswith(("_W", "_W_per_accelerator")):
        return format_si(value, "W")
    metric = METRIC_BY_NAME.get(name)
    if isinstance(value, int) or (metric is not None and metric.dtype == "int"):
        return f"{int(value):,}"
        return f"{value:,}"
    return f"{value:,.4g}"


def _describe(sweep: Sweep, row: Mapping[str, Any]) -> str:
    return ", ".join(f"{c}={row[c]}" for c in sweep.varied) or "(fixed settings)"


def pareto_objectives(sweep: Sweep, specs: Sequence[str] | None
                      ) -> tuple[Objective, Objective] | None:
    """The two Pareto objectives from ``--pareto X Y`` (else the sweep file's)."""
    if not specs:
        return sweep.pareto
    if len(specs) != 2:
        raise UsageError("--pareto takes two metrics, e.g. --pareto power_W step_time_s")
    known: dict[str, str | None] = {m: METRIC_BY_NAME[m].better for m in sweep.metrics}
    known |= {c: None for c in sweep.columns if sweep.column_types[c] in ("int", "float")}
    return parse_objective(specs[0], known), parse_objective(specs[1], known)


def sweep_report(outcome: SweepOutcome, *, pareto: tuple[Objective, Objective] | None = None,
                 plot: str | None = None) -> Any:
    """The summary of a sweep as a :class:`~topomodel.output.Report`: counts and time,
    the best point per metric, and the Pareto front when asked (drawn to ``plot``)."""
    from topomodel.output import Report, Table

    sweep, frame = outcome.sweep, outcome.frame
    ok = frame["error"].isna().to_numpy()
    feasible = ok & frame["feasible"].fillna(False).to_numpy(dtype=bool)
    failed, infeasible = int((~ok).sum()), int((ok & ~feasible).sum())
    rate = outcome.ran / outcome.elapsed_s if outcome.elapsed_s > 0 else math.nan
    where = (f"Dask scheduler {outcome.scheduler}" if outcome.scheduler else
             f"{outcome.workers} local process{'es' if outcome.workers > 1 else ''}")
    summary = [
        {"item": "sweep", "value": f"{sweep.name} ({sweep.file})"},
        {"item": "base design", "value": sweep.design_file},
        {"item": "points", "value": f"{len(frame):,}"},
        {"item": "computed now", "value": f"{outcome.ran:,} on {where}"},
        {"item": "from a previous run", "value": f"{outcome.resumed:,}"},
        {"item": "failed (error column)", "value": f"{failed:,}"},
        {"item": "breaking a constraint", "value": f"{infeasible:,}"},
        {"item": "time", "value": f"{outcome.elapsed_s:.1f} s"
         + (f" ({rate:.3g} points/s)" if outcome.ran else "")},
        {"item": "results", "value": f"{outcome.path} ({outcome.results_format})"},
    ]
    best_rows, best_data = [], []
    pool = frame[feasible]
    for name in sweep.metrics:
        better = METRIC_BY_NAME[name].better
        if better is None:
            continue
        column = pool[name].astype(float)
        if column.isna().all() or column.min() == column.max():
            continue  # nothing to choose between
        at = column.idxmin() if better == "min" else column.idxmax()
        row = pool.loc[at]
        best_rows.append({"metric": name, "best": format_metric(name, row[name]),
                          "point": row["key"], "parameters": _describe(sweep, row)})
        best_data.append({"metric": name, "better": better, "value": _plain(row[name]),
                          "key": row["key"],
                          "parameters": {c: _plain(row[c]) for c in sweep.varied}})
    data: dict[str, Any] = {
        "sweep": sweep.file, "name": sweep.name, "design": sweep.design_file,
        "results": str(outcome.path), "results_format": outcome.results_format,
        "points": len(frame), "computed": outcome.ran, "resumed": outcome.resumed,
        "failed": failed, "infeasible": infeasible, "time_s": outcome.elapsed_s,
        "points_per_s": rate if outcome.ran else None, "best": best_data}
    tables = [Table("Sweep", summary),
              Table("Best feasible point per metric (metrics that differ)", best_rows)]
    warnings = list(outcome.warnings)
    if failed:
        warnings.append(f"{failed} point(s) failed; their error is in the error column")
    if not feasible.any():
        warnings.append("no point both ran and met every constraint")
    if "power_unknown" in frame and any(m.endswith("_W") or m == "tokens_per_J"
                                        for m in sweep.metrics):
        gaps = pool["power_unknown"].fillna("").unique()
        if len(gaps) > 1:
            warnings.append("the catalog lacks power figures for different parts in"
                            " different points (see power_unknown): compare power only"
                            " between points with the same power_unknown")
    if pareto is not None:
        front_rows, front_data = _pareto(outcome, pareto, feasible, plot)
        tables.append(Table(f"Pareto front: {pareto[0]} vs {pareto[1]}", front_rows))
        data["pareto"] = {"x": pareto[0].name, "x_better": pareto[0].better,
                          "y": pareto[1].name, "y_better": pareto[1].better,
                          "points": front_data}
        if plot:
            data["plot"] = plot
    return Report("sweep", data, tables, warnings)


def _plain(value: Any) -> Any:
    if hasattr(value, "item") and not isinstance(value, str | bytes):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _pareto(outcome: SweepOutcome, objectives: tuple[Objective, Objective],
            feasible: Any, plot: str | None) -> tuple[list[dict[str, Any]],
                                                       list[dict[str, Any]]]:
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
    data = [{"key": r["key"], x_name: _plain(r[x_name]), y_name: _plain(r[y_name]),
             "parameters": {c: _plain(r[c]) for c in sweep.varied}}
            for _, r in front.iterrows()]
    if plot:
        from topomodel.pareto import plot_front

        shown = feasible & ~np.isnan(x) & ~np.isnan(y)
        ok = frame["error"].isna().to_numpy() & ~feasible & ~np.isnan(x) & ~np.isnan(y)
        try:
            plot_front(x[shown], y[shown], mask[shown], plot, objectives=objectives,
                       title=f"{sweep.name}: {int(mask.sum())} Pareto-optimal of"
                       f" {int(shown.sum())}", excluded=(x[ok], y[ok]))
        except (OSError, ValueError) as exc:
            raise UsageError(f"{plot}: cannot draw the front: {exc}") from None
    return rows, data


def dry_run_report(sweep: Sweep, *, show: int = 20) -> Any:
    """What a sweep would run: counts per block and the first ``show`` points."""
    from topomodel.output import Report, Table

    blocks: list[dict[str, Any]] = [{"block": i, "axes": " x ".join(
        "(" + ", ".join(a.keys) + f") {len(a.values)}" if len(a.keys) > 1
        else f"{a.keys[0]} {len(a.values)}" for a in b.axes) or "(fixed)",
        "points": b.count} for i, b in enumerate(sweep.blocks)]
    designs = len({_canonical({k: v for k, v in p.items() if k.startswith(DESIGN_PREFIX)})
                   for p in sweep.points})
    points = [{"point": i, "key": sweep.keys[i],
               **{c: sweep.value(p, c) for c in sweep.varied}}
              for i, p in enumerate(sweep.points[:show])]
    data = {"sweep": sweep.file, "points": len(sweep.points), "expanded": sweep.expanded,
            "duplicates": sweep.duplicates, "designs": designs,
            "blocks": [b["points"] for b in blocks], "metrics": list(sweep.metrics),
            "constraints": list(sweep.constraints)}
    summary: list[dict[str, Any]] = [{"item": "points", "value": f"{len(sweep.points):,}"
                + (f" ({sweep.duplicates} duplicates dropped)" if sweep.duplicates else "")},
               {"item": "distinct designs to build", "value": f"{designs:,}"},
               {"item": "metrics recorded", "value": len(sweep.metrics)},
               {"item": "constraints", "value": "; ".join(sweep.constraints) or "-"}]
    return Report("sweep_plan", data, [Table("Sweep plan", summary), Table("Blocks", blocks),
                                       Table(f"First {min(show, len(points))} points",
                                             points)])
