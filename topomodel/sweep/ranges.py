"""The parameters of a sweep file: fixed settings and varied values read and checked,
ranges expanded, and blocks of axes expanded into points.

``fixed`` holds settings every point shares; ``parameters`` holds one block, or a list of
blocks, each a cartesian product of axes (one parameter's list or range, or a ``zip``
group of parameters whose lists walk together). Each value is read by its option's
reader (design overrides are checked later with the whole design) and keeps the key path
it came from, so a problem found later is reported at the sweep key that asked for it.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from topomodel.errors import UsageError
from topomodel.inputs.catalog import Catalog
from topomodel.inputs.parts import Model
from topomodel.inputs.records import Invalid, Reader, Reading, describe_value, did_you_mean, number
from topomodel.inputs.yamlsource import KeyPath, Source
from topomodel.limits import DEFAULT_MAX_SWEEP_POINTS, format_count
from topomodel.sweep.params import (
    DESIGN_PREFIX,
    OPTIONS,
    SERVE_SWEEP_KEYS,
    canonical,
    design_path,
    job_refuses,
    option,
)


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


RANGE_KEYS = ("start", "stop", "step", "num", "factor", "format")


def read_range(source: Source, path: KeyPath, value: Any, reader: Reader) -> Any:
    """``reader``'s value, or ``None`` with the problem recorded at ``path``."""
    try:
        return reader(Reading(source), path, value)
    except Invalid as exc:
        source.problem(path if exc.key is None else (*path, exc.key), exc.message)
    except UsageError as exc:
        source.problem(path, str(exc))
    return None


_BAD = object()  # a value that did not read


def _read_value(source: Source, path: KeyPath, key: str, value: Any, catalog: Catalog
                ) -> Any:
    """One value of parameter ``key`` read and checked, or ``_BAD``."""
    if design_path(key) is not None:
        return value  # checked with the whole design in _check_designs

    opt = option(key)
    assert opt is not None  # keys are checked first

    def read(reading: Reading, at: KeyPath, raw: Any) -> Any:
        out = opt.read(reading, at, raw)
        if key == "model":
            catalog.get(out, Model)  # an unknown id: UsageError with a did-you-mean
        return out

    got = read_range(source, path, value, read)  # no reader gives None
    return _BAD if got is None else got


def _check_key(source: Source, path: KeyPath, key: Any, job: str) -> bool:
    if not isinstance(key, str):
        source.problem(path, "a parameter is named by text")
        return False
    if key.startswith(DESIGN_PREFIX):
        parts = design_path(key)
        if parts is None:
            source.problem(path, "expected design.KEY.PATH, items as [N]"
                           " (e.g. design.scaleout.oversubscription[0])")
        elif parts[0] == "catalogs":
            source.problem(path, "catalogs cannot vary within a sweep; give them under"
                           " catalogs at the top of the sweep file")
        return parts is not None and parts[0] != "catalogs"
    if (why := job_refuses(key, job)) is not None:
        source.problem(path, why)
        return False
    if option(key) is None:
        known = SERVE_SWEEP_KEYS if job == "serve" else OPTIONS
        source.problem(path, f"unknown parameter: a {job} option ("
                       + ("prefill_tp, decode_ep, rate, ..." if job == "serve"
                          else "tp, pp, micro_batch, ...")
                       + "), efficiency.TIER or design.KEY.PATH" + did_you_mean(key, known))
        return False
    return True


def read_fixed(source: Source, data: Any, catalog: Catalog, *, job: str = "step"
                ) -> tuple[dict[str, Any], dict[tuple[str, str], KeyPath]]:
    """The fixed settings of a sweep of ``job``, and the key path of each (key,
    canonical value)."""
    fixed: dict[str, Any] = {}
    where: dict[tuple[str, str], KeyPath] = {}
    if not isinstance(data, dict):
        source.problem(("fixed",), "expected a mapping of settings, got"
                       f" {describe_value(data)}")
        return fixed, where
    for key, value in data.items():
        path = ("fixed", key)
        if _check_key(source, path, key, job):
            read = _read_value(source, path, key, value, catalog)
            if read is not _BAD:
                fixed[key] = read
                where[(key, canonical(read))] = path
    return fixed, where


def read_blocks(source: Source, data: Any, fixed: Mapping[str, Any], catalog: Catalog,
                 *, max_points: int = DEFAULT_MAX_SWEEP_POINTS, job: str = "step"
                 ) -> list[Block]:
    """The blocks of ``parameters`` of a sweep of ``job``; a range longer than
    ``max_points`` is refused before its values are made."""
    if data is None:
        return [Block(())]  # one point: the fixed settings
    if isinstance(data, list):
        if not data:
            source.problem(("parameters",), "an empty list of blocks")
        return [_read_block(source, ("parameters", i), b, fixed, catalog, max_points, job)
                for i, b in enumerate(data)]
    return [_read_block(source, ("parameters",), data, fixed, catalog, max_points, job)]


def _read_block(source: Source, path: KeyPath, data: Any,
                fixed: Mapping[str, Any], catalog: Catalog, max_points: int, job: str
                ) -> Block:
    if not isinstance(data, dict) or not data:
        source.problem(path, "expected a mapping from parameters to values (lists or"
                       " ranges), with optional zip groups")
        return Block(())
    axes: list[Axis | None] = []
    for key, spec in data.items():
        if key != "zip":
            axes.append(_read_axis(source, path, {key: spec}, catalog, max_points, job))
            continue
        for i, group in enumerate(spec if isinstance(spec, list) else [spec]):
            gpath = (*path, "zip", i) if isinstance(spec, list) else (*path, "zip")
            if isinstance(group, dict) and len(group) >= 2:
                axes.append(_read_axis(source, gpath, group, catalog, max_points, job))
            else:
                source.problem(gpath, "a zip group maps two or more parameters to lists"
                               " of equal length")
    seen: set[str] = set()
    for key in (k for a in axes if a is not None for k in a.keys):
        if key in fixed:
            source.problem((*path, key), "also set under fixed; a setting is fixed or"
                           " varied, not both")
        elif key in seen:
            source.problem(path, f"{key} is varied twice in this block")
        seen.add(key)
    return Block(tuple(a for a in axes if a is not None))


def _read_axis(source: Source, path: KeyPath, data: dict[Any, Any], catalog: Catalog,
               max_points: int, job: str) -> Axis | None:
    """Parameters whose values walk together (one, or a zip group) as one axis."""
    columns: dict[str, list[tuple[Any, KeyPath]]] = {}
    for key, spec in data.items():
        kpath = (*path, key)
        values = _read_values(source, kpath, key, spec, catalog, max_points) if _check_key(
            source, kpath, key, job) else []
        if not values:
            return None
        columns[key] = values
    if len({len(c) for c in columns.values()}) > 1:
        source.problem(path, "zipped parameters need lists of the same length; got "
                       + ", ".join(f"{k}: {len(c)}" for k, c in columns.items()))
        return None
    rows = list(zip(*columns.values(), strict=True))
    return Axis(tuple(columns), tuple(tuple(v for v, _ in r) for r in rows),
                tuple(tuple(w for _, w in r) for r in rows))


def _read_values(source: Source, path: KeyPath, key: str, spec: Any, catalog: Catalog,
                 max_points: int) -> list[tuple[Any, KeyPath]]:
    """The values of one parameter, each with its key path: a list, or a range mapping."""
    if isinstance(spec, list):
        if not spec:
            source.problem(path, "an empty list: give at least one value")
        raw = [(v, (*path, i)) for i, v in enumerate(spec)]
    elif isinstance(spec, dict):
        raw = [(v, path) for v in _range(source, path, spec, max_points)]
    else:
        source.problem(path, f"expected a list of values or a range {{start, stop, step}},"
                       f" got {describe_value(spec)} (a single value goes under fixed)")
        return []
    out = [(_read_value(source, at, key, value, catalog), at) for value, at in raw]
    return [] if any(v is _BAD for v, _ in out) else out


def _range(source: Source, path: KeyPath, spec: dict[str, Any],
           max_points: int = DEFAULT_MAX_SWEEP_POINTS) -> list[Any]:
    """Values of a range: ``{start, stop, step}`` (stop included when on the grid),
    ``{start, stop, num}`` (evenly spaced, both ends) or ``{start, stop, factor}``
    (geometric); ``format`` turns each into text (``"{}:1"``). Its length is worked out
    first and a range of more than ``max_points`` values is refused."""
    for key in spec:
        if key not in RANGE_KEYS:
            source.problem((*path, key), "unknown range key" + did_you_mean(key, RANGE_KEYS))
    numbers = {k: spec[k] for k in ("start", "stop", "step", "num", "factor") if k in spec}
    for key, value in numbers.items():
        if read_range(source, (*path, key), value, number()) is None:
            return []
    if "start" not in numbers or "stop" not in numbers:
        source.problem(path, "a range needs start and stop")
        return []
    modes = [k for k in ("step", "num", "factor") if k in numbers]
    if len(modes) != 1:
        source.problem(path, "a range needs exactly one of step, num or factor")
        return []
    start, stop, by = numbers["start"], numbers["stop"], numbers[modes[0]]
    whole = isinstance(start, int) and isinstance(stop, int)
    count = _range_count(modes[0], float(start), float(stop), float(by))
    if isinstance(count, str):
        source.problem((*path, "num") if modes == ["num"] else path, count)
        return []
    if count > max_points:
        source.problem(path, f"{format_count(count)} values: more than the {max_points:,}"
                       " points a sweep takes (--max-points raises the limit)")
        return []
    n = int(count)
    values: list[float]
    if modes == ["step"]:
        values = [start + i * by for i in range(n)]
        whole = whole and isinstance(by, int)
    elif modes == ["num"]:
        values = [start + (stop - start) * i / (n - 1) for i in range(n)] if n > 1 else [
            start]
        whole = whole and all(float(v).is_integer() for v in values)
    else:
        values = [start * by**i for i in range(n)]
        whole = whole and isinstance(by, int)
    if not all(math.isfinite(v) for v in values):
        source.problem(path, "a range whose values are not all finite numbers")
        return []
    out: list[Any] = [round(v) if whole else float(f"{v:.12g}") for v in values]
    fmt = spec.get("format")
    if fmt is None:
        return out
    if not isinstance(fmt, str) or "{}" not in fmt:
        source.problem((*path, "format"), "format is text with {} where the value goes,"
                       " e.g. '{}:1'")
        return []
    return [fmt.replace("{}", f"{v:g}" if isinstance(v, float) else str(v)) for v in out]


def _range_count(mode: str, start: float, stop: float, by: float) -> float | str:
    """How many values a range has, worked out in floats before any is made (infinity
    when a float cannot hold it); or why it has none."""
    if mode == "step":
        if by == 0:
            return "a range with a step of 0"
        steps = (stop - start) / by  # an infinity when stop - start overflows
        if steps < -1e-9:
            return f"an empty range: from {start:g} to {stop:g} in steps of {by:g}"
        return math.inf if steps > 1e15 else math.floor(steps + 1e-9) + 1
    if mode == "num":
        if not by.is_integer() or by < 1:
            return f"num is a whole number of values (at least 1), got {by:g}"
        return by
    if by <= 1 or start <= 0 or stop < start:
        return "a geometric range needs factor > 1 and 0 < start <= stop"
    # the largest i with start * by**i <= stop (to a relative 1e-9), in logarithms
    return math.floor((math.log(stop) - math.log(start) + 1e-9) / math.log(by) + 1e-9) + 1


def expand_ranges(blocks: Sequence[Block]) -> Iterator[dict[str, Any]]:
    """Every point of every block: products of axes, the first axis slowest."""
    for block in blocks:
        for combo in itertools.product(*(range(len(a.values)) for a in block.axes)):
            point: dict[str, Any] = {}
            for axis, index in zip(block.axes, combo, strict=True):
                point.update(zip(axis.keys, axis.values[index], strict=True))
            yield point

