"""Design files: what one cluster is made of, validated against the catalog.

A design names a system from the catalog and how many, optionally overrides its
scale-up wiring, and describes the scale-out network, the physical layout that decides
cable types, and failed parts. See ``docs/design-files.md``; the JSON Schema comes from
:func:`topomodel.inputs.schema.design_schema`.
"""

from __future__ import annotations

import copy
import math
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from topomodel import limits
from topomodel.errors import DesignError, Problem
from topomodel.files import outside_folders
from topomodel.inputs.catalog import Catalog, builtin_catalog_dir, load_catalog, reference_problem
from topomodel.inputs.parts import Nic, ScaleupSwitch, Switch, System
from topomodel.inputs.records import (
    Invalid,
    Reading,
    bandwidth,
    boolean,
    choice,
    did_you_mean,
    integer,
    list_of,
    mapping_of,
    quantity,
    read_record,
    record,
    ref,
    spec,
    text,
    yaml_keys,
)
from topomodel.inputs.yamlsource import KeyPath, Source, format_path, load_yaml
from topomodel.vocabulary import LINK_TIERS as LINK_TIERS  # re-exported for old readers

SCALEUP_KINDS = ("switched", "full_mesh", "torus", "supernode", "none")
SCALEOUT_KINDS = ("fat_tree", "rail_only", "none")


def ratio_reader(_: Reading, __: Any, value: Any) -> float:
    """An oversubscription ``"down:up"`` (``"7:1"``, ``"1:1"``) as down/up > 0."""
    if not isinstance(value, str) or value.count(":") != 1:
        raise Invalid(f"expected an oversubscription 'down:up' such as '3:1', got {value!r}")
    try:
        down, up = (float(part) for part in value.split(":"))
    except ValueError:
        raise Invalid(f"expected numbers in 'down:up', got {value!r}") from None
    if not (0 < down < math.inf and 0 < up < math.inf):
        raise Invalid(f"both sides of {value!r} must be positive numbers")
    if down < up:
        raise Invalid(f"{value!r} gives more uplink than downlink bandwidth; use at most 1:1")
    return down / up


@dataclass(frozen=True, kw_only=True)
class ScaleupDesign:
    """Scale-up wiring: the system's by default; torus and supernode span systems."""

    kind: str | None = spec(choice(*SCALEUP_KINDS), default=None)
    link: str | None = spec(ref("scaleup_link"), default=None)
    shape: tuple[int, ...] = spec(list_of(integer(1)), default=(),
                                  doc="torus shape in accelerators, over the domain")
    wraparound: bool | None = spec(boolean, default=None)
    links_per_neighbor: int = spec(integer(1), default=1,
                                   doc="parallel links to each torus neighbour")
    ocs: bool = spec(boolean, default=False,
                     doc="torus links between systems go through optical circuit switches")
    systems_per_domain: int | None = spec(integer(1), default=None,
                                          doc="systems joined into one scale-up domain")
    switch: str | None = spec(ref("scaleup_switch"), default=None,
                              doc="supernode: the upper-level switch chip")
    uplinks: int | None = spec(integer(1), default=None,
                               doc="supernode: uplinks from each in-system switch chip")
    oversubscription: float = spec(ratio_reader, default=1.0,
                                   doc="supernode: down:up of the middle level (3 levels)")
    nvls: bool = spec(boolean, default=True,
                      doc="the scale-up switch chips reduce (NVLS, NVLink SHARP) where"
                      " their catalog entry can: on by default, as NCCL_NVLS_ENABLE is;"
                      " false as a recipe's NCCL_NVLS_ENABLE=0")


@dataclass(frozen=True, kw_only=True)
class ScaleoutDesign:
    """The scale-out network: a fat-tree (rail-optimized or not), rail-only, or none."""

    kind: str = spec(choice(*SCALEOUT_KINDS), default="fat_tree")
    switch: str | None = spec(ref("switch"), default=None)
    nic: str | None = spec(ref("nic"), default=None)
    nics_per_system: int | None = spec(integer(1), default=None)
    port_rate_Bps: float | None = spec(bandwidth, key="port_rate", default=None,
                                       doc="per NIC port per plane; default NIC rate / planes")
    uplink_rate_Bps: float | None = spec(bandwidth, key="uplink_rate", default=None,
                                         doc="switch-to-switch ports; default port_rate")
    port_rate_up_Bps: float | None = spec(bandwidth, key="port_rate_up", default=None,
                                          doc="NIC port to leaf (what a system sends), at"
                                          " most the port's rate; default the port's rate")
    port_rate_down_Bps: float | None = spec(bandwidth, key="port_rate_down", default=None,
                                            doc="leaf to NIC port (what a system"
                                            " receives); default the port's rate")
    tiers: int | None = spec(integer(1), default=None, doc="1 to 3; default the fewest")
    oversubscription: tuple[float, ...] = spec(list_of(ratio_reader), default=(),
                                               doc="down:up per tier, from the leaf up")
    rail_optimized: bool = spec(boolean, default=True)
    planes: int = spec(integer(1), default=1)
    unit: int | None = spec(integer(1), default=None,
                            doc="systems per scalable unit; leaves never span units")
    pod_units: int | None = spec(integer(1), default=None,
                                 doc="units per pod in a 3-tier fabric")
    partial_unit: bool = spec(boolean, default=False,
                              doc="allow a last unit with fewer systems")
    in_network_reduction: bool = spec(
        boolean, default=False,
        doc="the scale-out switches reduce AllReduce in the network (SHARP, NCCL's"
        " CollNet), where their catalog entry can: off by default, as stock NCCL runs"
        " it only with the SHARP plugin and NCCL_COLLNET_ENABLE=1")
    adaptive_routing: bool | None = spec(
        boolean, default=None,
        doc="the scale-out switches route adaptively (or spray packets) as deployed;"
        " unset: what every scale-out switch's catalog entry says. Sets the default"
        " routing: even split with it, ECMP by hash without it")
    transport: str = spec(choice("rdma", "sockets"), default="rdma",
                          doc="rdma (InfiniBand, RoCE) or sockets (NCCL's TCP/IP"
                          " transport, at transports.SOCKETS_EFFICIENCY of the line rate)")

    def __post_init__(self) -> None:
        if self.kind != "none" and not self.switch:
            raise Invalid(f"a {self.kind} scale-out needs 'switch'")
        if self.tiers is not None and not 1 <= self.tiers <= 3:
            raise Invalid("a fat-tree has 1 to 3 switch tiers", "tiers")


def nic_port_rate_Bps(scaleout: ScaleoutDesign, nic: Nic) -> float:
    """The rate of one NIC port on one plane, bytes/s per direction: the design's
    ``port_rate``, else the NIC's rate split evenly over the planes."""
    return scaleout.port_rate_Bps or nic.rate_Bps / scaleout.planes


@dataclass(frozen=True, kw_only=True)
class LayoutDesign:
    """Physical layout: rack size and cable lengths, which decide cable types."""

    leaf_in_rack: bool = spec(boolean, default=False, doc="top-of-rack leaves")
    rack_cable_m: float = spec(quantity("length"), key="rack_cable", default=2.0,
                               doc="inside a rack (default 2 m)")
    row_cable_m: float = spec(quantity("length"), key="row_cable", default=30.0,
                              doc="system to a leaf in another rack (default 30 m)")
    spine_cable_m: float = spec(quantity("length"), key="spine_cable", default=50.0,
                                doc="leaf to spine (default 50 m)")
    core_cable_m: float = spec(quantity("length"), key="core_cable", default=200.0,
                               doc="spine to core (default 200 m)")
    scaleup_cable_m: float = spec(quantity("length"), key="scaleup_cable", default=50.0,
                                  doc="scale-up links between racks (default 50 m)")
    connectors: int = spec(integer(0), default=2, doc="mated connector pairs per channel")
    splices: int = spec(integer(0), default=0, doc="splices per channel")
    cables: dict[str, str] = spec(mapping_of(LINK_TIERS, ref("optic")), default={},
                                  doc="cable or module per link tier, instead of by reach")


@dataclass(frozen=True, kw_only=True)
class FailureDesign:
    """Failed parts, by node name or link ``"a -- b"``."""

    nodes: tuple[str, ...] = spec(list_of(text), default=())
    links: tuple[str, ...] = spec(list_of(text), default=())


SERVERS_PER_RACK = 4
"""Default systems per rack for a server or node (a rack-scale system is its own rack):
NVIDIA's DGX SuperPOD data-center design (DGX H100) recommends four DGX H100 systems
(4 x 10.2 kW = 40.8 kW) per compute rack."""

RACKS_PER_POWER_FEED = 4
"""Default racks per power feed (one PDU, busway or phase whose loss stops them):
a topomodel assumption, no public figure: half of an 8-rack scalable-unit row, as a row
fed from two upstream feeds. Give your hall's figure."""

RACKS_PER_COOLING_LOOP = 8
"""Default racks per cooling loop (one coolant distribution unit's secondary loop):
a topomodel assumption from NVIDIA's DGX SuperPOD reference architecture (GB200): one
scalable unit is one row of 8 racks at 1.2 MW, the size of one row-level CDU."""


@dataclass(frozen=True, kw_only=True)
class DomainsDesign:
    """Failure domains: racks, power feeds, cooling loops and sites (the scale-out
    planes are ``scaleout.planes``). See ``docs/failure-domains.md``."""

    systems_per_rack: int | None = spec(
        integer(1), default=None,
        doc="systems per rack; default 1 for a rack-scale system, else SERVERS_PER_RACK"
        " (4, NVIDIA's DGX H100 data-center design)")
    racks_per_power_feed: int = spec(
        integer(1), default=RACKS_PER_POWER_FEED,
        doc="racks one power feed (PDU, busway, phase) serves; default 4 (assumed)")
    racks_per_cooling_loop: int = spec(
        integer(1), default=RACKS_PER_COOLING_LOOP,
        doc="racks one cooling loop (CDU) serves; default 8 (one GB200 SuperPOD row)")
    sites: int = spec(integer(1), default=1,
                      doc="sites the systems are spread over, evenly, in system order")


@dataclass(frozen=True, kw_only=True)
class Design:
    """One cluster design, validated; ``file`` and ``lines`` locate its keys."""

    file: str
    lines: dict[tuple[Any, ...], int]
    name: str = spec(text, default="")
    description: str = spec(text, default="")
    catalogs: tuple[str, ...] = spec(list_of(text), default=(),
                                     doc="extra catalog files, relative to the design")
    system: str = spec(ref("system"))
    systems: int | None = spec(integer(1), default=None)
    accelerators: int | None = spec(integer(1), default=None)
    scaleup: ScaleupDesign = spec(record(ScaleupDesign), default=ScaleupDesign())
    scaleout: ScaleoutDesign = spec(record(ScaleoutDesign),
                                    default=ScaleoutDesign(kind="none"))
    layout: LayoutDesign = spec(record(LayoutDesign), default=LayoutDesign())
    failures: FailureDesign = spec(record(FailureDesign), default=FailureDesign())
    domains: DomainsDesign = spec(record(DomainsDesign), default=DomainsDesign())

    def __post_init__(self) -> None:
        if (self.systems is None) == (self.accelerators is None):
            raise Invalid("give exactly one of 'systems' and 'accelerators'")

    def locate(self, key_path: Sequence[str | int], message: str) -> Problem:
        """A :class:`Problem` at ``key_path`` of this design (the line of its nearest
        key that has one)."""
        return problem_at(self.file, self.lines, key_path, message)

    def problem(self, key_path: Sequence[str | int], message: str) -> DesignError:
        """A :class:`DesignError` located at ``key_path`` of this design."""
        return DesignError([self.locate(key_path, message)])


def load_design(path: str | Path, *, text: str | None = None,
                catalog: Catalog | None = None,
                extra_catalogs: Sequence[str | Path] = (),
                catalog_dirs: Sequence[str | Path] = ()) -> tuple[Design, Catalog]:
    """Read and check a design file; return it with the catalog it was checked against.

    Every problem is collected before one :class:`DesignError` lists them: keys and
    values, catalog ids, then the consistency of the design with the catalog (checked on
    what remains once the refused keys are left out, so a file with an unknown key, a
    NIC the switch cannot speak to and a count that is not whole systems reports all
    three).

    Parameters
    ----------
    path
        The design file (also the name in messages when ``text`` is given).
    text
        The document, if not read from ``path``.
    catalog
        The catalog to use; by default the built-in one plus ``extra_catalogs`` and the
        design's own ``catalogs``.
    catalog_dirs
        Folders the design's ``catalogs`` may be in besides its own folder tree and the
        built-in catalogs (``--catalog-dir``); a catalog elsewhere is refused unread.

    Raises
    ------
    DesignError
        With every problem found: YAML, keys, units, unknown ids, inconsistent choices.
    """
    source = load_yaml(path, text=text, error=DesignError)
    keys = yaml_keys(Design)
    if source.data is not None and not (isinstance(source.data, dict) and any(
            key in keys or did_you_mean(key, keys) for key in source.data)):
        # nothing here is a design: say so without echoing what the file holds
        source.problem((), "not a design file: a design is a mapping with design keys"
                       f" ({', '.join(keys)})")
        source.raise_if_problems(DesignError)
    reading = Reading(source)
    design = read_record(reading, (), source.data, Design, file=source.file,
                         lines=source.lines)
    problems = list(source.problems)
    if catalog is None:
        base = Path(path).parent
        files = _catalog_files(design, source.data)
        own = [base / c for c in files]
        refused = [problem_at(source.file, source.lines, ("catalogs", i), why)
                   for i, c in enumerate(files)
                   if (why := catalog_path_problem(c, base, catalog_dirs))]
        if refused:
            raise DesignError(refused)
        catalog = load_catalog([*extra_catalogs, *own])
    unknown = unknown_refs(reading, catalog)
    problems += unknown
    if design is None or unknown:
        design = _lenient_design(source, _paths_of(reading, unknown))
    if design is not None:
        seen = {(p.key_path, p.message) for p in problems}
        problems += [p for p in _check(design, catalog) if (p.key_path, p.message) not in seen]
    if problems:
        raise DesignError(problems)
    assert design is not None  # no problem recorded: the strict read gave a design
    return design, catalog


def _catalog_files(design: Design | None, data: Any) -> tuple[str, ...]:
    """The design's own catalog files, also when another key of it was refused."""
    if design is not None:
        return design.catalogs
    files = data.get("catalogs") if isinstance(data, dict) else None
    if not isinstance(files, list) or not all(isinstance(f, str) for f in files):
        return ()
    return tuple(files)


def _paths_of(reading: Reading, unknown: list[Problem]) -> list[KeyPath]:
    """Key paths of the references that ``unknown`` reports."""
    bad = {p.key_path for p in unknown}
    return [path for path, _, _ in reading.refs if format_path(path) in bad]


class _PathSource(Source):
    """A :class:`Source` that also keeps the key path of each problem it records."""

    def __init__(self, file: str, data: Any, lines: dict[KeyPath, int]) -> None:
        super().__init__(file, data, lines)
        self.paths: list[KeyPath] = []

    def problem(self, path: KeyPath, message: str) -> None:
        self.paths.append(tuple(path))
        super().problem(path, message)


def _lenient_design(source: Source, drop: list[KeyPath]) -> Design | None:
    """The design with every refused key (and ``drop``) left out, so that its defaults
    apply; ``None`` when even that cannot be read (a required key is missing). Used
    only to check the rest of a file that has problems."""
    data = copy.deepcopy(source.data)
    pending = list(drop)
    for _ in range(8):  # each pass leaves out what the last one refused
        for path in pending:
            _remove(data, path)
        retry = _PathSource(source.file, data, source.lines)
        design = read_record(Reading(retry), (), data, Design, file=source.file,
                             lines=source.lines)
        if design is not None:
            return design
        pending = [p for p in retry.paths if p]
        if not pending:
            return None
    return None


def _remove(data: Any, path: KeyPath) -> None:
    """Delete ``path`` from nested ``data`` (the nearest mapping key on the way)."""
    *parents, last = path
    node = data
    for part in parents:
        inside = (part in node if isinstance(node, dict) else
                  isinstance(node, list) and isinstance(part, int) and part < len(node))
        if not inside:
            return
        node = node[part]
    if isinstance(node, dict):
        node.pop(last, None)
    elif isinstance(node, list) and parents:
        _remove(data, tuple(parents))  # a bad list item: drop the whole list


def problem_at(file: str, lines: Mapping[KeyPath, int], key_path: Sequence[str | int],
               message: str) -> Problem:
    """A :class:`Problem` at ``key_path`` of a file (the line of its nearest key that
    has one)."""
    path = tuple(key_path)
    line = None
    while path and line is None:
        line = lines.get(path)
        path = path[:-1]
    return Problem(file, line or lines.get(()), format_path(tuple(key_path)), message)


def catalog_path_problem(name: str | Path, folder: Path,
                         catalog_dirs: Sequence[str | Path]) -> str | None:
    """Why the catalog ``name``, named by a file in ``folder``, is refused unread (a NUL
    byte in its name, a place outside the folders it may be in, no file there), or
    ``None``."""
    if "\0" in str(name):
        return f"{str(name)!r}: cannot read the file: its name holds a NUL byte"
    if outside_folders(folder / name, [folder, builtin_catalog_dir(), *catalog_dirs]):
        return named_file_problem(name, folder, catalog_dirs)
    if not os.path.exists(folder / name):  # said at the key that names it
        return f"{name}: no such file (looked for {folder / name})"
    return None


def named_file_problem(name: str | Path, folder: Path,
                       catalog_dirs: Sequence[str | Path]) -> str:
    """Why the catalog ``name``, named by a file in ``folder``, is refused unread."""
    allowed = ", ".join(str(d) for d in catalog_dirs)
    return (f"{name} is outside {folder.resolve()}, this file's folder; a catalog a design"
            " or sweep file names must be in that folder tree, built in, or in a folder"
            " given with --catalog-dir" + (f" ({allowed})" if allowed else ""))


def unknown_refs(reading: Reading, catalog: Catalog) -> list[Problem]:
    found = (reference_problem(catalog, reading.source, path, kind, ident)
             for path, kind, ident in reading.refs)
    return [p for p in found if p is not None]


def _check_supernode(design: Design, system: System) -> list[tuple[KeyPath, str]]:
    """A supernode joins switched systems through the upper chip it names."""
    up = design.scaleup
    if system.scaleup.kind != "switched" or not up.switch or not up.uplinks:
        return [(("scaleup",), "a supernode needs a switched system, 'switch' (the upper"
                 " switch chip) and 'uplinks' (per in-system switch chip)")]
    return []


def _check_torus(design: Design, system: System) -> list[tuple[KeyPath, str]]:
    """A torus over systems is whole systems along every dimension."""
    up, inner = design.scaleup, system.scaleup.shape
    if up.shape and inner and (len(up.shape) < len(inner) or any(
            d % s for d, s in zip(up.shape, inner, strict=False))):
        return [(("scaleup", "shape"), f"shape {list(up.shape)} must be a multiple of the"
                 f" system's {list(inner)} in each dimension")]
    return []


SCALEUP_CHECKS: dict[str, Callable[[Design, System], list[tuple[KeyPath, str]]]] = {
    "supernode": _check_supernode, "torus": _check_torus}
"""The design's own checks of each scale-up kind that has any, by its name: (key path,
message) per problem. They stay with the design record (not with the kind's module in
:mod:`topomodel.fabric.scaleup`) because a design is checked when it is read, below
the fabric layer, so that every problem of a file is reported together."""


def _check(design: Design, catalog: Catalog) -> list[Problem]:
    """Consistency between the design and the catalog entries it names."""
    out: list[Problem] = []

    def problem(key_path: tuple[str | int, ...], message: str) -> None:
        out.append(design.locate(key_path, message))

    system = catalog.get(design.system, System)
    if design.accelerators is not None and design.accelerators % system.accelerators:
        problem(("accelerators",), f"{design.accelerators} accelerators is not a whole number"
                f" of {design.system} systems ({system.accelerators} each)")
    up = design.scaleup
    kind_check = SCALEUP_CHECKS.get(up.kind or system.scaleup.kind)
    for key_path, message in kind_check(design, system) if kind_check else ():
        problem(key_path, message)
    if up.switch and up.uplinks and system.scaleup.switch:
        l1 = catalog.get(system.scaleup.switch, ScaleupSwitch)
        down = max(system.scaleup.links_per_switch) * system.accelerators
        if down + up.uplinks > l1.ports:
            problem(("scaleup", "uplinks"), f"{up.uplinks} uplinks and {down} links to"
                    f" accelerators exceed the {l1.ports} ports of {l1.id}")
    systems = design.systems or (design.accelerators or 0) // system.accelerators
    if design.domains.sites > max(systems, 1):
        problem(("domains", "sites"), f"{design.domains.sites} sites for {systems} systems:"
                " at most one site per system")
    if design.scaleout.kind != "none":
        out += _check_scaleout(design, catalog, system)
    return out


def _check_scaleout(design: Design, catalog: Catalog, system: System) -> list[Problem]:
    """The scale-out NIC, switch and rates against each other."""
    out_ = design.scaleout
    problems: list[Problem] = []

    def problem(key: str, message: str) -> None:
        problems.append(design.locate(("scaleout", key), message))

    if len(out_.oversubscription) > 3:
        problem("oversubscription", "at most one ratio per tier (3)")
    refusal = limits.above(out_.planes, "MAX_PLANES", "planes")
    if refusal:  # before the rates a plane's share would have
        problem("planes", refusal)
        return problems
    nic_id = out_.nic or system.nic
    if not nic_id:
        problem("nic", f"{design.system} names no NIC; give scaleout.nic")
        return problems
    if not out_.switch or out_.switch not in catalog or nic_id not in catalog:
        return problems  # already reported as an unknown id
    nic = catalog.get(nic_id, Nic)
    switch = catalog.get(out_.switch, Switch)
    nic_key = "nic" if out_.nic else "switch"
    if switch.protocol not in nic.protocols:
        problem(nic_key, f"{nic.id} speaks {' and '.join(nic.protocols)} only; {switch.id}"
                f" is an {switch.protocol} switch")
    rate = nic_port_rate_Bps(out_, nic)
    if not switch.radix_at(rate):
        problem("port_rate" if out_.port_rate_Bps else "switch",
                f"{switch.id} has no ports at {rate * 8 / 1e9:g} Gb/s per direction"
                " (native or breakout)")
    if out_.port_rate_Bps and rate * out_.planes > nic.rate_Bps * (1 + 1e-9):
        planes = f"{out_.planes} planes x " if out_.planes > 1 else ""
        problem("port_rate", f"{planes}{rate * 8 / 1e9:g} Gb/s per direction exceeds"
                f" {nic.id}'s {nic.ports} x {nic.port_rate_Bps * 8 / 1e9:g} Gb/s")
    if out_.uplink_rate_Bps and not switch.radix_at(out_.uplink_rate_Bps):
        problem("uplink_rate", f"{switch.id} has no ports at this rate")
    for key, value in (("port_rate_up", out_.port_rate_up_Bps),
                       ("port_rate_down", out_.port_rate_down_Bps)):
        if value and value > rate * (1 + 1e-9):
            problem(key, f"{value * 8 / 1e6:g} Mb/s per direction exceeds the port's"
                    f" {rate * 8 / 1e6:g} Mb/s (port_rate); a direction can only be slower")
    return problems


def with_overrides(design: Design, **changes: Any) -> Design:
    """A copy of ``design`` with top-level fields replaced (for what-ifs and benchmarks)."""
    return replace(design, **changes)
