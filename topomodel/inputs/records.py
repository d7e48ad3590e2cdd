"""Declarative readers: YAML mappings to frozen dataclasses, with every problem located.

A record class is a frozen dataclass whose fields carry a reader in their metadata
(:func:`spec`). :func:`read_record` checks keys (unknown ones get a did-you-mean),
reads each value, and builds the dataclass; its ``__post_init__`` may raise
:class:`Invalid` naming the key at fault. Problems go to the :class:`Source`, so a whole
file is checked before anything is raised.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import numbers
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from topomodel.errors import ParameterError, UnitError
from topomodel.inputs.units import parse, parse_bandwidth
from topomodel.inputs.yamlsource import KeyPath, Source

T = TypeVar("T")


class Invalid(ValueError):
    """A value is wrong; ``key`` names the offending sub-key when it is not the value."""

    def __init__(self, message: str, key: str | int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.key = key


@dataclass
class Reading:
    """What a read needs: the source for problems, and the ids referred to."""

    source: Source
    refs: list[tuple[KeyPath, str, str]] = field(default_factory=list)  # path, kind, id


class _Recorded(Invalid):
    """Problems already recorded by a nested read; nothing more to say."""

    def __init__(self) -> None:
        super().__init__("")


Reader = Callable[[Reading, KeyPath, Any], Any]
_NO_READING = Reading(Source("<value>", ""))  # for checks of values not read from a file


def spec(read: Reader, *, key: str | None = None, default: Any = dataclasses.MISSING,
         doc: str = "", check: Reader | None = None) -> Any:
    """A dataclass field read from YAML key ``key`` (default: the field name) by ``read``.

    ``doc`` says what the field is and, for an assumption, why its default; CLI help,
    the JSON Schema, sweep docs and the review all show this one text. ``check``
    validates a value already in canonical form (default: ``read``), for records that
    check themselves with :func:`check_fields`.
    """
    metadata = {"read": read, "key": key, "doc": doc, "check": check or read}
    if isinstance(default, list | dict):
        value = default
        return field(default_factory=lambda: type(value)(value), metadata=metadata)
    return field(default=default, metadata=metadata)


def yaml_keys(cls: type) -> dict[str, dataclasses.Field[Any]]:
    """The YAML keys of a record class, mapped to their dataclass fields."""
    return {
        (f.metadata["key"] or f.name): f
        for f in dataclasses.fields(cls)
        if "read" in f.metadata
    }


REASONS: dict[str, str] = {}
"""The reason of every named model constant, by ``module.NAME`` (see :func:`documented`)."""


def documented(name: str, value: T, reason: str) -> T:
    """``value``, with ``reason`` recorded for ``name`` (``module.CONSTANT``): how a
    model constant carries its reason as data, for the review's assumptions table.

    Examples
    --------
    >>> LIMIT = documented("example.LIMIT", 3, "three is plenty")
    >>> LIMIT, REASONS["example.LIMIT"]
    (3, 'three is plenty')
    """
    REASONS[name] = " ".join(reason.split())
    return value


def field_doc(cls: type, name: str) -> str:
    """The ``doc`` of field ``name`` of a record class (empty when it has none)."""
    for f in dataclasses.fields(cls):
        if f.name == name:
            return str(f.metadata.get("doc", ""))
    raise KeyError(name)


def check_fields(record: Any, error: Callable[[str], Exception]) -> None:
    """Check every field of a frozen record against its reader (``__post_init__``).

    Raises ``error(message)`` for the first field whose value its ``check`` refuses,
    with the message ``Class.field: what is wrong``.

    Examples
    --------
    >>> @dataclass(frozen=True)
    ... class Pair:
    ...     n: int = spec(integer(1), default=1)
    ...     def __post_init__(self) -> None:
    ...         check_fields(self, ValueError)
    >>> Pair(0)
    Traceback (most recent call last):
    ...
    ValueError: Pair.n: must be at least 1, got 0
    """
    for f in dataclasses.fields(record):
        check = f.metadata.get("check")
        if check is None:
            continue
        try:
            check(_NO_READING, (f.name,), getattr(record, f.name))
        except Invalid as exc:
            sub = f"{f.name}.{exc.key}" if exc.key is not None else f.name
            raise error(f"{type(record).__name__}.{sub}: {exc.message}") from None


def check_values(cls: type, values: dict[str, Any], error: Callable[[str], Exception]
                 ) -> None:
    """Check ``values`` (some fields of the frozen record class ``cls`` by name) as
    :func:`check_fields` checks them on a record, in field order, with its messages:
    for a copy of a checked record that changes only those fields.

    Examples
    --------
    >>> @dataclass(frozen=True)
    ... class Pair:
    ...     n: int = spec(integer(1), default=1)
    >>> check_values(Pair, {"n": 0}, ValueError)
    Traceback (most recent call last):
    ...
    ValueError: Pair.n: must be at least 1, got 0
    """
    checks = _FIELD_CHECKS.get(cls)
    if checks is None:
        checks = _FIELD_CHECKS[cls] = tuple(
            (f.name, f.metadata["check"]) for f in dataclasses.fields(cls)
            if f.metadata.get("check") is not None)
    for name, check in checks:
        if name not in values:
            continue
        try:
            check(_NO_READING, (name,), values[name])
        except Invalid as exc:
            sub = f"{name}.{exc.key}" if exc.key is not None else name
            raise error(f"{cls.__name__}.{sub}: {exc.message}") from None


_FIELD_CHECKS: dict[type, tuple[tuple[str, Callable[..., Any]], ...]] = {}


def did_you_mean(word: str, options: Iterable[str]) -> str:
    """A ``; did you mean 'x'?`` suffix, or an empty string.

    Examples
    --------
    >>> did_you_mean("hbm_capacty", ["hbm_capacity", "power"])
    "; did you mean 'hbm_capacity'?"
    """
    close = closest(word, options)
    return f"; did you mean {close!r}?" if close else ""


def closest(word: str, options: Iterable[str]) -> str | None:
    """The option ``word`` most likely misspells, or None."""
    close = difflib.get_close_matches(str(word), list(options), n=1, cutoff=0.6)
    return close[0] if close else None


def read_record(reading: Reading, path: KeyPath, data: Any, cls: type[T],
                **fixed: Any) -> T | None:
    """Read mapping ``data`` at ``path`` into ``cls``; ``None`` if a problem was recorded."""
    source = reading.source
    if not isinstance(data, dict):
        source.problem(path, f"expected a mapping of keys, got {describe_value(data)}")
        return None
    keys = yaml_keys(cls)
    before = len(source.problems)
    meant: set[str] = set()  # keys a misspelt one was taken for: said once, there
    for key in data:
        if key not in keys:
            meant.add(closest(key, keys) or "")
            source.problem((*path, key), "unknown key" + did_you_mean(key, keys))
    values: dict[str, Any] = {}
    for key, f in keys.items():
        if key not in data:
            required = (f.default is dataclasses.MISSING
                        and f.default_factory is dataclasses.MISSING)
            if required and key not in meant:
                source.problem(path, f"missing required key {key!r}")
            continue
        try:
            values[f.name] = f.metadata["read"](reading, (*path, key), data[key])
        except _Recorded:
            pass
        except Invalid as exc:
            sub = (*path, key) if exc.key is None else (*path, key, exc.key)
            source.problem(sub, exc.message)
    if len(source.problems) > before:
        return None
    try:
        return cls(**values, **fixed)
    except Invalid as exc:
        source.problem(path if exc.key is None else (*path, exc.key), exc.message)
        return None


def describe_value(value: Any) -> str:
    if isinstance(value, bool):
        return f"a boolean ({value})"
    if isinstance(value, int | float):
        return f"a bare number ({value})"
    if isinstance(value, str):
        return f"a string ({value!r})"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "a mapping"
    return "nothing" if value is None else type(value).__name__


# Readers -----------------------------------------------------------------------------


def text(_: Reading, __: KeyPath, value: Any) -> str:
    """A non-empty string."""
    if not isinstance(value, str) or not value.strip():
        raise Invalid(f"expected text, got {describe_value(value)}")
    return value.strip()


def integer(minimum: int = 1) -> Reader:
    """An integer of at least ``minimum`` (a count)."""

    def read(_: Reading, __: KeyPath, value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, numbers.Integral):
            raise Invalid(f"expected a whole number, got {describe_value(value)}")
        if value < minimum:
            raise Invalid(f"must be at least {minimum}, got {value}")
        return int(value)

    return read


def fraction(_: Reading, __: KeyPath, value: Any) -> float:
    """A number in (0, 1]: an efficiency or a share."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise Invalid(f"expected a fraction between 0 and 1, got {describe_value(value)}")
    if not 0 < value <= 1:
        raise Invalid(f"a fraction must be in (0, 1], got {value}")
    return float(value)


def number(low: float = -math.inf, high: float = math.inf, *, low_open: bool = False
           ) -> Reader:
    """A finite plain number in ``[low, high]`` (``(low, high]`` with ``low_open``), as a
    float; NaN and infinities are refused."""

    def read(_: Reading, __: KeyPath, value: Any) -> float:
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise Invalid(f"expected a number, got {describe_value(value)}")
        try:
            x = float(value)
        except OverflowError:  # a whole number of 309 digits or more
            raise Invalid("expected a finite number, got one too large for a float"
                          " (309 digits or more)") from None
        if not math.isfinite(x):
            raise Invalid(f"expected a finite number, got {value}")
        if x < low or (low_open and x == low) or x > high:
            raise Invalid(f"must be in {'(' if low_open else '['}{low:g}, {high:g}],"
                          f" got {value}")
        return float(value)

    return read


def check_share(value: float, name: str, *, low_open: bool = False,
                high_open: bool = False) -> float:
    """``value`` as a share between 0 and 1 (an end excluded where ``low_open`` or
    ``high_open``), else a :class:`~topomodel.errors.ParameterError` naming the
    parameter ``name``: the one check of a share a caller gives.

    Examples
    --------
    >>> check_share(0.3, "threshold", low_open=True, high_open=True)
    0.3
    >>> check_share(1.0, "threshold", low_open=True, high_open=True)
    Traceback (most recent call last):
    ...
    topomodel.errors.ParameterError: threshold: a share in (0, 1), got 1.0
    """
    x = float(value)
    if not (x > 0 if low_open else x >= 0) or not (x < 1 if high_open else x <= 1):
        raise ParameterError(name, f"a share in {'(' if low_open else '['}0, 1"
                                   f"{')' if high_open else ']'}, got {value}")
    return x


def boolean(_: Reading, __: KeyPath, value: Any) -> bool:
    """``true`` or ``false``."""
    if not isinstance(value, bool):
        raise Invalid(f"expected true or false, got {describe_value(value)}")
    return value


def choice(*options: str) -> Reader:
    """One of ``options``."""

    def read(_: Reading, __: KeyPath, value: Any) -> str:
        if value not in options:
            hint = did_you_mean(value, options) if isinstance(value, str) else ""
            raise Invalid(f"expected one of {', '.join(options)},"
                          f" got {describe_value(value)}{hint}")
        return str(value)

    return read


def quantity(kind: str) -> Reader:
    """A string with a unit, of ``kind`` (see :mod:`topomodel.inputs.units`), canonical float."""

    def read(_: Reading, __: KeyPath, value: Any) -> float:
        try:
            return parse(value, kind)
        except UnitError as exc:
            raise Invalid(str(exc)) from None

    read.kind = kind  # type: ignore[attr-defined]  # lets displays pick the unit
    return read


def bandwidth(_: Reading, __: KeyPath, value: Any) -> float:
    """A link bandwidth with its direction; bytes/s per direction."""
    try:
        return parse_bandwidth(value).per_direction_Bps
    except UnitError as exc:
        raise Invalid(str(exc)) from None


bandwidth.kind = "bandwidth"  # type: ignore[attr-defined]


def ref(kind: str) -> Reader:
    """The id of a catalog entry of ``kind``, checked once every file is loaded."""

    def read(reading: Reading, path: KeyPath, value: Any) -> str:
        ident = text(reading, path, value)
        reading.refs.append((path, kind, ident))
        return ident

    return read


def list_of(item: Reader, *, min_len: int = 1, what: str = "a list") -> Reader:
    """A list whose items are read by ``item``; a tuple. ``what`` names it in messages."""

    def read(reading: Reading, path: KeyPath, value: Any) -> tuple[Any, ...]:
        if not isinstance(value, list):
            raise Invalid(f"expected {what}, got {describe_value(value)}")
        if len(value) < min_len:
            raise Invalid(f"expected at least {min_len} item(s)")
        out = []
        for index, element in enumerate(value):
            try:
                out.append(item(reading, (*path, index), element))
            except _Recorded:
                raise
            except Invalid as exc:
                raise Invalid(exc.message, index) from None
        return tuple(out)

    read.kind = getattr(item, "kind", None)  # type: ignore[attr-defined]
    return read


def mapping_of(keys: tuple[str, ...], value: Reader) -> Reader:
    """A mapping from a key in ``keys`` to a value read by ``value``."""

    def read(reading: Reading, path: KeyPath, data: Any) -> dict[str, Any]:
        if not isinstance(data, dict) or not data:
            raise Invalid(f"expected a mapping with at least one of {', '.join(keys)}")
        out: dict[str, Any] = {}
        for key, element in data.items():
            if key not in keys:
                raise Invalid(f"expected one of {', '.join(keys)}" + did_you_mean(key, keys),
                              key)
            try:
                out[key] = value(reading, (*path, key), element)
            except _Recorded:
                raise
            except Invalid as exc:
                raise Invalid(exc.message, key) from None
        return out

    read.kind = getattr(value, "kind", None)  # type: ignore[attr-defined]
    return read


def record(cls: type[T]) -> Reader:
    """A nested mapping read into ``cls``."""

    def read(reading: Reading, path: KeyPath, data: Any) -> T:
        result = read_record(reading, path, data, cls)
        if result is None:
            raise _Recorded()
        return result

    return read
