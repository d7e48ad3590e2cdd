"""The hardware catalog: sourced entries with units resolved, loaded from YAML files.

Entries are frozen dataclasses; every figure inside is a plain float in a canonical unit
named by its field (``port_rate_Bps`` is bytes/s per direction). The built-in catalogs
ship with the package; user files given later override entries with the same id.
See ``docs/catalog-format.md`` for the file format.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from topomodel.errors import CatalogError, Problem, UsageError
from topomodel.inputs.parts import (
    ENTRY_ID_RE,
    Accelerator,
    E,
    Entry,
    Fibre,
    HostLink,
    Model,
    Nic,
    Optic,
    Part,
    ScaleupLink,
    ScaleupSwitch,
    Switch,
    System,
)
from topomodel.inputs.prices import SECTION as PRICE_SECTION
from topomodel.inputs.prices import Price, read_prices
from topomodel.inputs.records import (
    Reading,
    did_you_mean,
    read_record,
)
from topomodel.inputs.reliability import FailureClass, FailureRate
from topomodel.inputs.store import catalogstore
from topomodel.inputs.yamlsource import KeyPath, Source, format_path, load_yaml

ENTRY_TYPES: dict[str, type[Entry]] = {
    "accelerators": Accelerator,
    "scaleup_links": ScaleupLink,
    "scaleup_switches": ScaleupSwitch,
    "host_links": HostLink,
    "nics": Nic,
    "switches": Switch,
    "systems": System,
    "optics": Optic,
    "fibres": Fibre,
    "models": Model,
    "failure_rates": FailureRate,
    "failure_classes": FailureClass,
}
KIND_NAMES = {cls.kind: section for section, cls in ENTRY_TYPES.items()}


@dataclass(frozen=True)
class Override:
    """A user entry that replaced an entry of the same id."""

    id: str
    file: str
    replaced_file: str

    def __str__(self) -> str:
        return f"{self.file}: {self.id} overrides the entry from {self.replaced_file}"


@dataclass(frozen=True)
class Catalog:
    """Entries by id, the overrides that produced them, and the prices of parts by id
    (:mod:`topomodel.inputs.prices`)."""

    entries: dict[str, Entry]
    overrides: tuple[Override, ...] = field(default=())
    prices: dict[str, Price] = field(default_factory=dict)

    def __contains__(self, ident: object) -> bool:
        return ident in self.entries

    def __len__(self) -> int:
        return len(self.entries)

    def get(self, ident: str, cls: type[E]) -> E:
        """The entry ``ident``, which must be a ``cls``.

        Raises
        ------
        UsageError
            If there is no such entry, or it is of another kind.
        """
        entry = self.entries.get(ident)
        if entry is None:
            ids = [i for i, e in self.entries.items() if isinstance(e, cls)]
            raise UsageError(f"unknown {cls.kind} id {ident!r}" + did_you_mean(ident, ids))
        if not isinstance(entry, cls):
            raise UsageError(f"{ident!r} is a {entry.kind}, not a {cls.kind}")
        return entry

    def price_of(self, ident: str) -> Price | None:
        """The price of part (or fibre) ``ident``, or ``None`` when it has none."""
        return self.prices.get(ident)

    def of_kind(self, cls: type[E]) -> list[E]:
        """Every entry of one kind, sorted by id."""
        return sorted((e for e in self.entries.values() if isinstance(e, cls)),
                      key=lambda e: e.id)


def builtin_catalog_dir() -> Path:
    """Where the built-in catalogs are: inside the installed package, or the checkout."""
    installed = resources.files("topomodel") / "_catalogs"
    if installed.is_dir():
        return Path(str(installed))
    return Path(__file__).resolve().parents[2] / "catalogs"


def builtin_catalog_files() -> list[Path]:
    """The built-in catalog files, sorted by name."""
    return sorted(builtin_catalog_dir().glob("*.yaml"))


def load_catalog(paths: Sequence[str | Path] = (), *, builtin: bool = True) -> Catalog:
    """Load the built-in catalogs (unless ``builtin=False``), then each of ``paths``.

    A later file's entry replaces an earlier one with the same id; replacements of a
    built-in entry by a user file are listed in :attr:`Catalog.overrides`. When the
    command line has turned on the store of parsed catalogs
    (:mod:`~topomodel.inputs.store.catalogstore`), a catalog read before from the same
    files (same bytes, same parsing code and units) is read back from it instead.

    Raises
    ------
    CatalogError
        With every problem of every file: YAML errors, unknown kinds or keys, bad units,
        unknown ids, inconsistent figures.

    Examples
    --------
    >>> catalog = load_catalog()
    >>> catalog.get("qm9700", Switch).port_rate_Bps  # 400 Gb/s per direction
    50000000000.0
    """
    builtin_files = builtin_catalog_files() if builtin else []
    files = [*builtin_files, *(Path(p) for p in paths)]
    key = catalogstore.key_of(files)
    kept = catalogstore.load(key)
    if isinstance(kept, Catalog):
        return kept
    catalog = _parse(files, len(builtin_files))
    catalogstore.save(key, catalog)
    return catalog


def _parse(files: Sequence[Path], builtins: int) -> Catalog:
    """The catalog of ``files``, the first ``builtins`` of them built in (see
    :func:`load_catalog`)."""
    problems: list[Problem] = []
    entries: dict[str, Entry] = {}
    overrides: list[Override] = []
    readings: list[Reading] = []
    prices: dict[str, Price] = {}
    for index, path in enumerate(files):
        try:
            source = load_yaml(path, error=CatalogError)
        except CatalogError as exc:
            problems.extend(exc.problems)
            continue
        reading = Reading(source)
        readings.append(reading)
        for entry in _read_file(reading):
            previous = entries.get(entry.id)
            if previous is not None:
                if index < builtins:
                    source.problem(_entry_path(entry),
                                   f"id already used by {previous.file}:{previous.line}")
                    continue
                overrides.append(Override(entry.id, entry.file, previous.file))
            entries[entry.id] = entry
        for price in read_prices(reading):
            earlier = prices.get(price.part)
            if earlier is not None and index < builtins:
                source.problem((PRICE_SECTION, price.part),
                               f"part already priced in {earlier.file}:{earlier.line}")
                continue
            prices[price.part] = price
        problems.extend(source.problems)
    catalog = Catalog(entries, tuple(overrides), prices)
    for reading in readings:
        problems.extend(_check_references(reading, catalog))
    problems.extend(_check_prices(catalog))
    if not problems:
        for entry in entries.values():
            for key, message in entry.check(catalog):
                problems.append(Problem(entry.file, entry.line,
                                        f"{format_path(_entry_path(entry))}.{key}", message))
    if problems:
        raise CatalogError(problems)
    return catalog


def _entry_path(entry: Entry) -> KeyPath:
    return (KIND_NAMES[entry.kind], entry.id)


def _read_file(reading: Reading) -> Iterable[Entry]:
    source: Source = reading.source
    if source.data is None:
        return []
    if not isinstance(source.data, dict):
        source.problem((), "a catalog file is a mapping from entry kinds"
                       f" ({', '.join(ENTRY_TYPES)}) to entries")
        return []
    if source.data and not any(section in ENTRY_TYPES or section == PRICE_SECTION
                               or did_you_mean(section, ENTRY_TYPES)
                               for section in source.data):
        # nothing here is a catalog: say so without echoing what the file holds
        source.problem((), "not a catalog file: none of its top-level keys is an entry"
                       f" kind ({', '.join(ENTRY_TYPES)})")
        return []
    found: list[Entry] = []
    seen: dict[str, str] = {}
    for section, items in source.data.items():
        if section == PRICE_SECTION:
            continue  # read by read_prices
        cls = ENTRY_TYPES.get(section)
        if cls is None:
            source.problem((section,), "unknown entry kind"
                           + did_you_mean(section, [*ENTRY_TYPES, PRICE_SECTION]))
            continue
        if not isinstance(items, dict):
            source.problem((section,), "expected a mapping from ids to entries")
            continue
        for ident, data in items.items():
            path = (section, ident)
            if not ENTRY_ID_RE.match(ident):
                source.problem(path, "an id is lower case letters, digits, '.', '-' or '_'")
                continue
            if ident in seen:
                source.problem(path, f"id already used in {seen[ident]}")
                continue
            seen[ident] = section
            entry = read_record(reading, path, data, cls, id=ident, file=source.file,
                                line=source.line(path))
            if entry is not None:
                found.append(entry)
    return found


def reference_problem(catalog: Catalog, source: Source, path: KeyPath, kind: str,
                      ident: str) -> Problem | None:
    """The problem with a reference to entry ``ident`` of ``kind`` at ``path``, if any."""
    target = catalog.entries.get(ident)
    if target is not None and target.kind == kind:
        return None
    ids = [i for i, e in catalog.entries.items() if e.kind == kind]
    what = "unknown" if target is None else f"{target.kind}, not a"
    return Problem(source.file, source.line(path), format_path(path),
                   f"{what} {kind} id {ident!r}" + did_you_mean(ident, ids))


def _check_references(reading: Reading, catalog: Catalog) -> Iterator[Problem]:
    source = reading.source
    for path, kind, ident in reading.refs:
        owner = catalog.entries.get(str(path[1]))
        if owner is None or owner.file != source.file:
            continue  # the referring entry was invalid or has been overridden
        problem = reference_problem(catalog, source, path, kind, ident)
        if problem:
            yield problem


def _check_prices(catalog: Catalog) -> Iterator[Problem]:
    """A price must name a part (or a fibre) of the catalog."""
    for price in catalog.prices.values():
        entry = catalog.entries.get(price.part)
        if entry is None or not isinstance(entry, Part | Fibre):
            ids = [i for i, e in catalog.entries.items() if isinstance(e, Part | Fibre)]
            what = "unknown part id" if entry is None else f"a {entry.kind}, not a part:"
            yield Problem(price.file, price.line, f"{PRICE_SECTION}.{price.part}",
                          f"{what} {price.part!r}" + did_you_mean(price.part, ids))
