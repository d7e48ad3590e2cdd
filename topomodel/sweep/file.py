"""Sweep files: read and check one (every problem with its line and key), expand its
points, and give each point a stable key.

A sweep file (see ``docs/sweeps.md``) names a base design, settings every point shares
(``fixed``) and the parameters to vary (``parameters``: lists and ranges, combined as
cartesian products, zipped groups and unions of blocks); what a point may set is in
:mod:`topomodel.sweep.params`; reading the parameters and expanding their ranges and
blocks is :mod:`topomodel.sweep.ranges`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from topomodel.analysis.pareto import Objective, parse_objective
from topomodel.errors import InputError, UsageError
from topomodel.files import outside_folders, read_input_text
from topomodel.inputs.catalog import Catalog
from topomodel.inputs.design import Design, catalog_path_problem, load_design, unknown_refs
from topomodel.inputs.records import (
    Invalid,
    Reading,
    choice,
    describe_value,
    did_you_mean,
    list_of,
    read_record,
)
from topomodel.inputs.records import text as nonempty_text
from topomodel.inputs.yamlsource import KeyPath, Source, format_path, load_yaml
from topomodel.limits import BYTES_PER_SWEEP_POINT, DEFAULT_MAX_SWEEP_POINTS, too_many
from topomodel.sweep.constraints import compile_constraint
from topomodel.sweep.params import (
    JOB_METRICS,
    JOBS,
    METRIC_BY_NAME,
    OPTIONS,
    SERVE_SWEEP_KEYS,
    apply_overrides,
    canonical,
    default_value,
    design_overrides,
    design_path,
)
from topomodel.sweep.ranges import Block, expand_ranges, read_blocks, read_fixed, read_range


class SweepError(InputError):
    """A sweep file is malformed: unknown keys, parameters or metrics, empty ranges."""


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
    job: str = "step"  # what a point runs: the training step, or serve

    @property
    def expanded(self) -> int:
        """Points the blocks expand to, before duplicates are removed (closed form)."""
        return sum(b.count for b in self.blocks)

    def value(self, point: Mapping[str, Any], key: str) -> Any:
        """The value of parameter ``key`` at ``point``: set, else the default (an
        option's, or the base design's)."""
        return point[key] if key in point else default_value(key, self.design_data)


TOP_KEYS = ("name", "description", "job", "design", "catalogs", "fixed", "parameters",
            "metrics", "constraints", "pareto", "dask")



# C901: one reader per key of a sweep file, in the file's order
def load_sweep(path: str | Path, *, text: str | None = None,  # noqa: C901
               extra_catalogs: Sequence[str | Path] = (),
               catalog_dirs: Sequence[str | Path] = (),
               max_points: int = DEFAULT_MAX_SWEEP_POINTS) -> Sweep:
    """Read and check a sweep file; expand its points.

    Parameters
    ----------
    path
        The sweep file (also the name in messages when ``text`` is given); the design and
        catalogs it names are relative to it.
    extra_catalogs
        Catalog files added before the sweep's and the design's own.
    catalog_dirs
        Folders the sweep's and the design's ``catalogs`` may be in besides the naming
        file's own folder tree and the built-in catalogs (``--catalog-dir``).
    max_points
        The most points the blocks may expand to (counted before any is made; the CLI's
        ``--max-points``).

    Raises
    ------
    SweepError
        With every problem found, each located ``FILE:LINE: key.path``: unknown keys,
        parameters or metrics, empty ranges, zipped lists of different lengths, bad
        values, constraints that do not parse, design overrides the design loader
        refuses, more than ``max_points`` points.
    DesignError
        If the base design itself does not load.
    """
    source = load_yaml(path, text=text, error=SweepError)
    data = source.data
    if not isinstance(data, dict):
        source.problem((), "a sweep file is a mapping (design, fixed, parameters, ...)")
        source.raise_if_problems(SweepError)
    for key in data:
        if key not in TOP_KEYS:
            source.problem((key,), "unknown key" + did_you_mean(key, TOP_KEYS))
    here = Path(path).parent
    design_rel = data.get("design")
    if not isinstance(design_rel, str) or not design_rel.strip():
        source.problem(("design",) if "design" in data else (),
                       "missing the base design: design: PATH (relative to this file)")
        source.raise_if_problems(SweepError)
    catalogs = read_range(source, ("catalogs",), data.get("catalogs", []),
                     list_of(nonempty_text, min_len=0, what="a list of file names")) or ()
    source.raise_if_problems(SweepError)
    design_file = str(here / str(design_rel).strip())
    if why := design_path_problem(str(design_rel).strip(), here, catalog_dirs):
        source.problem(("design",), why)
        source.raise_if_problems(SweepError)
    sweep_catalogs = [str(here / c) for c in catalogs]
    for i, name in enumerate(catalogs):
        if why := catalog_path_problem(name, here, catalog_dirs):
            source.problem(("catalogs", i), why)
    for at, name in [(("design",), design_file),
                     *((("catalogs", i), c) for i, c in enumerate(sweep_catalogs))]:
        if not Path(name).is_file() and not source.problems:
            source.problem(at, f"no such file: {name}")
    source.raise_if_problems(SweepError)
    design, catalog = load_design(design_file, extra_catalogs=[*extra_catalogs,
                                                                *sweep_catalogs],
                                  catalog_dirs=catalog_dirs)
    design_source = load_yaml(design_file)
    own = [str(Path(design_file).parent / c) for c in design.catalogs]
    digest = file_digest([design_file, *extra_catalogs, *sweep_catalogs, *own])

    job = read_range(source, ("job",), data.get("job", "step"), choice(*JOBS)) or "step"
    fixed, where = read_fixed(source, data.get("fixed", {}), catalog, job=job)
    blocks = read_blocks(source, data.get("parameters"), fixed, catalog,
                          max_points=max_points, job=job)
    metrics = _read_metrics(source, data.get("metrics"), job)
    varied = list(dict.fromkeys(k for b in blocks for a in b.axes for k in a.keys))
    if "model" not in fixed and not all(
            any("model" in a.keys for a in b.axes) for b in blocks):
        source.problem(("fixed",) if "fixed" in data else (),
                       "no model: set fixed.model (or vary model in every block)")
    names = {n: METRIC_BY_NAME[n].kind for n in JOB_METRICS[job]} | dict.fromkeys(
        [*(SERVE_SWEEP_KEYS if job == "serve" else OPTIONS), *fixed, *varied])
    constraints = _read_constraints(source, data.get("constraints", []), names)
    pareto = _read_pareto(source, data.get("pareto"), metrics)
    scheduler = _read_dask(source, data.get("dask"))

    expanded = sum(b.count for b in blocks)
    if expanded > max_points:
        source.problem(("parameters",), too_many(
            expanded, max_points, "points", BYTES_PER_SWEEP_POINT, doing="to hold")
            + "; split the sweep, or raise the limit with --max-points")
        source.raise_if_problems(SweepError)
    points = [{**fixed, **p} for p in expand_ranges(blocks)]
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
                 len(points) - len(kept), job)


def file_digest(files: Sequence[str | Path]) -> str:
    from topomodel import __version__

    h = hashlib.sha256(__version__.encode())
    for f in files:
        try:
            h.update(read_input_text(f).encode())
        except (OSError, UnicodeDecodeError):
            h.update(str(f).encode())  # the loaders report unreadable files
    return h.hexdigest()[:16]


def design_folders(folder: Path, catalog_dirs: Sequence[str | Path] = ()) -> list[Path]:
    """The folders the base design of a sweep file in ``folder`` may be in (with
    everything under them): that folder; the folder above it when it is named ``sweeps``
    (a ``sweeps/`` folder beside its designs, as ``examples/sweeps/``); and the folders
    given with ``--catalog-dir``."""
    above = [folder.resolve().parent] if folder.resolve().name == "sweeps" else []
    return [folder, *above, *(Path(d) for d in catalog_dirs)]


def design_path_problem(name: str, folder: Path,
                        catalog_dirs: Sequence[str | Path] = ()) -> str | None:
    """Why the base design ``name`` of a sweep file in ``folder`` is refused unread (a NUL
    byte in its name, a place outside :func:`design_folders`), or ``None``; its content
    is never read, so never shown."""
    if "\0" in name:
        return f"{name!r}: cannot read the file: its name holds a NUL byte"
    folders = design_folders(folder, catalog_dirs)
    if outside_folders(folder / name, folders):
        allowed = ", ".join(str(d) for d in catalog_dirs)
        return (f"{name} is outside {folder.resolve()}, this file's folder; the design a"
                " sweep file names must be in that folder tree, in the folder above a"
                " 'sweeps' folder, or in a folder given with --catalog-dir"
                + (f" ({allowed})" if allowed else ""))
    return None


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



def _read_metrics(source: Source, data: Any, job: str) -> list[str]:
    names = list(JOB_METRICS[job])
    if data is None:
        return names
    if not isinstance(data, list) or not data:
        source.problem(("metrics",), "expected a list of metric names")
        return names
    out = []
    for i, name in enumerate(data):
        if not isinstance(name, str):
            source.problem(("metrics", i), f"expected a metric name, got {describe_value(name)}")
        elif name not in names:
            source.problem(("metrics", i), f"unknown metric {name!r}"
                           + (f" of a {job} sweep" if name in METRIC_BY_NAME else "")
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
            if read_range(source, ("constraints", i), t,
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
    return read_range(source, ("pareto",), data, lambda _, __, v: (
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
        found = [*design.problems, *unknown_refs(reading, catalog)]
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
