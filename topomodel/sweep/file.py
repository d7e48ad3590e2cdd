"""Sweep files: read and check one (every problem with its line and key), expand its
points, and give each point a stable key.

A sweep file (see ``docs/sweeps.md``) names a base design, settings every point shares
(``fixed``) and the parameters to vary (``parameters``: lists and ranges, combined as
cartesian products, zipped groups and unions of blocks); what a point may set is in
:mod:`topomodel.sweep.params`.
"""

from __future__ import annotations

import hashlib
import itertools
import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from topomodel.analysis.pareto import Objective, parse_objective
from topomodel.catalog import Catalog, Model
from topomodel.design import Design, _unknown_refs, load_design
from topomodel.errors import InputError, UsageError
from topomodel.records import (
    Invalid,
    Reader,
    Reading,
    _what,
    did_you_mean,
    list_of,
    number,
    read_record,
)
from topomodel.records import text as nonempty_text
from topomodel.sweep.constraints import compile_constraint
from topomodel.sweep.params import (
    DESIGN_PREFIX,
    METRIC_BY_NAME,
    OPTIONS,
    OVERLAP_PREFIX,
    STEP_DEFAULTS,
    apply_overrides,
    canonical,
    default_value,
    design_overrides,
    design_path,
    option,
)
from topomodel.yamlsource import KeyPath, Source, format_path, load_yaml

MAX_POINTS = 2_000_000
"""Largest expansion accepted: a guard against a range with a typo in its step."""


class SweepError(InputError):
    """A sweep file is malformed: unknown keys, parameters or metrics, empty ranges."""


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
        return point[key] if key in point else default_value(key, self.design_data)


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
    catalogs = _read(source, ("catalogs",), data.get("catalogs", []),
                     list_of(nonempty_text, min_len=0, what="a list of file names")) or ()
    source.raise_if_problems(SweepError)
    design_file = str(here / str(design_rel).strip())
    sweep_catalogs = [str(here / c) for c in catalogs]
    for at, name in [(("design",), design_file),
                     *((("catalogs", i), c) for i, c in enumerate(sweep_catalogs))]:
        if not Path(name).is_file():
            source.problem(at, f"no such file: {name}")
    source.raise_if_problems(SweepError)
    design, catalog = load_design(design_file, extra_catalogs=[*extra_catalogs,
                                                                *sweep_catalogs])
    design_source = load_yaml(design_file)
    own = [str(Path(design_file).parent / c) for c in design.catalogs]
    digest = _digest([design_file, *extra_catalogs, *sweep_catalogs, *own])

    fixed, where = _read_fixed(source, data.get("fixed", {}), catalog)
    blocks = _read_blocks(source, data.get("parameters"), fixed, catalog)
    metrics = _read_metrics(source, data.get("metrics"))
    varied = list(dict.fromkeys(k for b in blocks for a in b.axes for k in a.keys))
    if "model" not in fixed and not all(
            any("model" in a.keys for a in b.axes) for b in blocks):
        source.problem(("fixed",) if "fixed" in data else (),
                       "no model: set fixed.model (or vary model in every block)")
    names = {n: m.kind for n, m in METRIC_BY_NAME.items()} | dict.fromkeys(
        [*OPTIONS, *fixed, *varied])
    constraints = _read_constraints(source, data.get("constraints", []), names)
    pareto = _read_pareto(source, data.get("pareto"), metrics)
    scheduler = _read_dask(source, data.get("dask"))

    expanded = sum(b.count for b in blocks)
    if expanded > MAX_POINTS:
        source.problem(("parameters",), f"{expanded:,} points is more than the"
                       f" {MAX_POINTS:,} a sweep takes; split it")
        source.raise_if_problems(SweepError)
    points = [{**fixed, **p} for p in _expand(blocks)]
    for axis in (a for b in blocks for a in b.axes):
        for values, paths in zip(axis.values, axis.where, strict=True):
            for key, value, at in zip(axis.keys, values, paths, strict=True):
                where.setdefault((key, canonical(value)), at)
    _check_designs(source, design_file, design_source, points, where, catalog)
    source.raise_if_problems(SweepError)

    base = design_source.data
    unique: dict[str, dict[str, Any]] = {}
    for point in points:
        unique.setdefault(point_key(digest, point, base), point)
    keys, kept = tuple(unique), tuple(unique.values())
    columns = tuple(dict.fromkeys([*fixed, *varied]))
    types = {c: _column_type([p[c] if c in p else default_value(c, base) for p in kept])
             for c in columns}
    name = data.get("name") if isinstance(data.get("name"), str) else ""
    return Sweep(str(path), str(name or Path(path).stem), design_file, base, catalog,
                 digest, fixed, tuple(blocks), kept, keys, columns, tuple(varied), types,
                 tuple(metrics), tuple(constraints), pareto, scheduler,
                 len(points) - len(kept))


def _digest(files: Sequence[str | Path]) -> str:
    from topomodel import __version__

    h = hashlib.sha256(__version__.encode())
    for f in files:
        try:
            h.update(Path(f).read_bytes())
        except OSError:
            h.update(str(f).encode())  # the loaders report unreadable files
    return h.hexdigest()[:16]


def point_key(digest: str, point: Mapping[str, Any], base_design: Any) -> str:
    """A stable hash of a point's parameter set and its base design: 16 hex digits.

    Settings equal to their default (an option's, or the base design's value) are left
    out, so writing ``tp: 1`` or leaving it out gives the same key.
    """
    significant = {}
    for key, value in point.items():
        default = default_value(key, base_design)
        if value != default or type(value) is not type(default):
            significant[key] = value
    payload = canonical({"base": digest, "point": significant})
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


def _read(source: Source, path: KeyPath, value: Any, reader: Reader) -> Any:
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

    got = _read(source, path, value, read)  # no reader gives None
    return _BAD if got is None else got


def _check_key(source: Source, path: KeyPath, key: Any) -> bool:
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
    if option(key) is None:
        choices = [*OPTIONS, *(OVERLAP_PREFIX + k for k in STEP_DEFAULTS.overlap)]
        source.problem(path, "unknown parameter: a step option (tp, pp, micro_batch, ...),"
                       " overlap.KIND, efficiency.TIER or design.KEY.PATH"
                       + did_you_mean(key, choices))
        return False
    return True


def _read_fixed(source: Source, data: Any, catalog: Catalog
                ) -> tuple[dict[str, Any], dict[tuple[str, str], KeyPath]]:
    """The fixed settings, and the key path of each (key, canonical value)."""
    fixed: dict[str, Any] = {}
    where: dict[tuple[str, str], KeyPath] = {}
    if not isinstance(data, dict):
        source.problem(("fixed",), "expected a mapping of settings, got"
                       f" {_what(data)}")
        return fixed, where
    for key, value in data.items():
        path = ("fixed", key)
        if _check_key(source, path, key):
            read = _read_value(source, path, key, value, catalog)
            if read is not _BAD:
                fixed[key] = read
                where[(key, canonical(read))] = path
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
    axes: list[Axis | None] = []
    for key, spec in data.items():
        if key != "zip":
            axes.append(_read_axis(source, path, {key: spec}, catalog))
            continue
        for i, group in enumerate(spec if isinstance(spec, list) else [spec]):
            gpath = (*path, "zip", i) if isinstance(spec, list) else (*path, "zip")
            if isinstance(group, dict) and len(group) >= 2:
                axes.append(_read_axis(source, gpath, group, catalog))
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


def _read_axis(source: Source, path: KeyPath, data: dict[Any, Any], catalog: Catalog
               ) -> Axis | None:
    """Parameters whose values walk together (one, or a zip group) as one axis."""
    columns: dict[str, list[tuple[Any, KeyPath]]] = {}
    for key, spec in data.items():
        kpath = (*path, key)
        values = _read_values(source, kpath, key, spec, catalog) if _check_key(
            source, kpath, key) else []
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


def _read_values(source: Source, path: KeyPath, key: str, spec: Any, catalog: Catalog
                 ) -> list[tuple[Any, KeyPath]]:
    """The values of one parameter, each with its key path: a list, or a range mapping."""
    if isinstance(spec, list):
        if not spec:
            source.problem(path, "an empty list: give at least one value")
        raw = [(v, (*path, i)) for i, v in enumerate(spec)]
    elif isinstance(spec, dict):
        raw = [(v, path) for v in _range(source, path, spec)]
    else:
        source.problem(path, f"expected a list of values or a range {{start, stop, step}},"
                       f" got {_what(spec)} (a single value goes under fixed)")
        return []
    out = [(_read_value(source, at, key, value, catalog), at) for value, at in raw]
    return [] if any(v is _BAD for v, _ in out) else out


def _range(source: Source, path: KeyPath, spec: dict[str, Any]) -> list[Any]:
    """Values of a range: ``{start, stop, step}`` (stop included when on the grid),
    ``{start, stop, num}`` (evenly spaced, both ends) or ``{start, stop, factor}``
    (geometric); ``format`` turns each into text (``"{}:1"``)."""
    for key in spec:
        if key not in _RANGE_KEYS:
            source.problem((*path, key), "unknown range key" + did_you_mean(key, _RANGE_KEYS))
    numbers = {k: spec[k] for k in ("start", "stop", "step", "num", "factor") if k in spec}
    for key, value in numbers.items():
        if _read(source, (*path, key), value, number()) is None:
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
    values: list[float] = []
    if modes == ["step"]:
        count = math.floor((stop - start) / by + 1e-9) + 1 if by else 0
        if count < 1:
            source.problem(path, f"an empty range: from {start} to {stop} in steps of {by}")
            return []
        if count > MAX_POINTS:
            source.problem(path, f"{count:,} values: more than a sweep takes")
            return []
        values = [start + i * by for i in range(count)]
        whole = whole and isinstance(by, int)
    elif modes == ["num"]:
        if not isinstance(by, int) or by < 1 or by > MAX_POINTS:
            source.problem((*path, "num"), f"num is a whole number of values from 1 to"
                           f" {MAX_POINTS:,}, got {by}")
            return []
        values = [start + (stop - start) * i / (by - 1) for i in range(by)] if by > 1 else [
            start]
        whole = whole and all(float(v).is_integer() for v in values)
    else:
        if by <= 1 or start <= 0 or stop < start:
            source.problem(path, "a geometric range needs factor > 1 and 0 < start <= stop")
            return []
        value = start
        while value <= stop * (1 + 1e-9):
            values.append(value)
            value *= by
        whole = whole and isinstance(by, int)
    out: list[Any] = [round(v) if whole else float(f"{v:.12g}") for v in values]
    fmt = spec.get("format")
    if fmt is None:
        return out
    if not isinstance(fmt, str) or "{}" not in fmt:
        source.problem((*path, "format"), "format is text with {} where the value goes,"
                       " e.g. '{}:1'")
        return []
    return [fmt.replace("{}", f"{v:g}" if isinstance(v, float) else str(v)) for v in out]


def _expand(blocks: Sequence[Block]) -> Iterator[dict[str, Any]]:
    """Every point of every block: products of axes, the first axis slowest."""
    for block in blocks:
        for combo in itertools.product(*(range(len(a.values)) for a in block.axes)):
            point: dict[str, Any] = {}
            for axis, index in zip(block.axes, combo, strict=True):
                point.update(zip(axis.keys, axis.values[index], strict=True))
            yield point


def _read_metrics(source: Source, data: Any) -> list[str]:
    names = list(METRIC_BY_NAME)
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
    return [t for i, t in enumerate(data)
            if _read(source, ("constraints", i), t,
                     lambda _, __, v: compile_constraint(v, names)) is not None]


def _read_pareto(source: Source, data: Any, metrics: Sequence[str]
                 ) -> tuple[Objective, Objective] | None:
    if data is None:
        return None
    if not (isinstance(data, list) and len(data) == 2 and all(isinstance(d, str)
                                                              for d in data)):
        source.problem(("pareto",), "expected two metrics, e.g. [power_W, step_time_s]")
        return None
    known = {m: METRIC_BY_NAME[m].better for m in metrics}
    return _read(source, ("pareto",), data, lambda _, __, v: (
        parse_objective(v[0], known), parse_objective(v[1], known)))


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
    reported: set[tuple[str, str]] = set()
    seen: set[str] = set()
    for point in points:
        overrides = design_overrides(point)
        signature = canonical(overrides)
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
        found = [*design.problems, *_unknown_refs(reading, catalog)]
        problems.extend((_blame(overrides, p.key_path), p.key_path, p.message) for p in found)
        for key, design_key, message in problems:
            at = where.get((key, canonical(overrides[key])), ())
            said = message if design_key in (None, format_path(design_path(key) or ())) else (
                f"the design's {design_key}: {message}")
            if (key, said) not in reported:
                reported.add((key, said))
                source.problem(at, said)


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
