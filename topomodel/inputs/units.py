"""Quantities with units: parse at the edges, plain floats in canonical units inside.

Canonical units, one per kind (the unit is part of every internal name):

============== ============ =================== ============================
kind           canonical    name suffix         example input
============== ============ =================== ============================
rate           B/s          ``_Bps``            ``"400 Gb/s"``, ``"900 GBps"``
size           B            ``_bytes``          ``"64 MiB"``
time           s            ``_s``              ``"2 us"``
power          W            ``_W``              ``"17 W"``
energy_per_bit pJ/bit       ``_pJ_per_bit``     ``"22.5 pJ/bit"``
length         m            ``_m``              ``"500 m"``
loss           dB           ``_dB``             ``"3 dB"``
loss_per_length dB/km       ``_dB_per_km``      ``"0.4 dB/km"``
optical_power  dBm          ``_dBm``            ``"-2.2 dBm"``
compute_rate   FLOP/s       ``_flops``          ``"989.4 TFLOP/s"``
transfer_rate  transfer/s   ``_Tps``            ``"32 GT/s"``
price          USD          ``_USD``            ``"30000 USD"``
============== ============ =================== ============================

A link or port bandwidth also states its direction (``"900 GB/s bidir"``,
``"400 Gb/s /dir"``); :func:`parse_bandwidth` returns the per-direction rate.

A quantity is a decimal number and unit names (``"1.5e3 GB/s"``), nothing else: no
arithmetic (``"2**1024 GB"`` would make pint compute a 300-digit number), so a value
is finite before it is converted. Each kind has a sane range (:attr:`Kind.bounds`),
wide enough for any device or cluster figure, narrow enough that results computed from
it stay finite.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from functools import cache, lru_cache
from importlib import resources
from typing import Any, Literal

from topomodel.errors import UnitError
from topomodel.inputs import unitcache
from topomodel.inputs.store import catalogstore

Direction = Literal["per_direction", "bidir"]


@dataclass(frozen=True)
class Kind:
    """A kind of quantity: its pint dimensionality, canonical unit, sign rule and the
    range a value must lie in (``bounds``: the lowest and highest, as quantities)."""

    name: str
    dimensionality: str
    canonical: str
    example: str
    sign: Literal["positive", "non_negative", "any"]
    bounds: tuple[str, str]


KINDS: dict[str, Kind] = {
    k.name: k
    for k in (
        # The bounds: a bit per second to an exabyte per second (a 51.2T switch is
        # 6.4e12 B/s); a bit to a zettabyte; up to a millennium (a part's MTBF of 10^6 h is
        # 114 years); up to a gigawatt (a cluster is ~100 MW); lengths from a millimetre
        # to the Earth's circumference.
        Kind("rate", "[information] / [time]", "B/s", "400 Gb/s", "positive",
             ("1 b/s", "1 EB/s")),
        Kind("size", "[information]", "B", "64 MiB", "positive", ("1 b", "1 ZB")),
        Kind("time", "[time]", "s", "2 us", "non_negative", ("0 s", "1000 yr")),
        Kind("power", "[power]", "W", "17 W", "non_negative", ("0 W", "1 GW")),
        Kind("energy_per_bit", "[power] * [time] / [information]", "pJ/bit", "22.5 pJ/bit",
             "non_negative", ("0 pJ/bit", "1 uJ/bit")),
        Kind("length", "[length]", "m", "500 m", "positive", ("1 mm", "40000 km")),
        Kind("loss", "[optical_loss]", "dB", "3 dB", "non_negative", ("0 dB", "1000 dB")),
        Kind("loss_per_length", "[optical_loss] / [length]", "dB/km", "0.4 dB/km",
             "non_negative", ("0 dB/km", "1000 dB/km")),
        Kind("optical_power", "[optical_level]", "dBm", "-2.2 dBm", "any",
             ("-100 dBm", "100 dBm")),
        Kind("compute_rate", "[operation] / [time]", "FLOP/s", "989.4 TFLOP/s", "positive",
             ("1 FLOP/s", "1 ZFLOP/s")),
        Kind("transfer_rate", "[transfer] / [time]", "transfer/s", "32 GT/s", "positive",
             ("1 transfer/s", "1e15 transfer/s")),
        Kind("failure_rate", "1 / [time]", "1/s", "2 %/yr", "non_negative",
             ("0 /s", "1 /s")),
        Kind("price", "[currency]", "USD", "30000 USD", "non_negative",
             ("0 USD", "1e12 USD")),
    )
}

# What a quantity of a given dimensionality is, for messages that say what was given.
_DIMENSION_NAMES = {
    "1 / [time]": "a frequency",
    "[symbol] / [time]": "a symbol rate (baud)",
    "[power] * [time]": "an energy",
    "[information] * [time]": "a size times a time",
    "[time] / [information]": "a time per size",
    "": "a plain number",
}

_DIRECTION_WORDS: dict[str, Direction] = {
    "/dir": "per_direction",
    "per direction": "per_direction",
    "per-direction": "per_direction",
    "bidir": "bidir",
    "bidirectional": "bidir",
}
_DIRECTION_RE = re.compile(
    r"^(?P<quantity>.*?)\s*(?P<direction>/dir|per[ -]direction|bidirectional|bidir)\s*$",
    re.IGNORECASE,
)


_NUMBER_FIRST = re.compile(r"^[+-]?(\d|\.\d)")
# A decimal number, then unit names joined by '/', '*', '·' or spaces (a leading "1/"
# for a reciprocal): no other digits, so no arithmetic for pint to do (2**1024, 9**9**9).
_QUANTITY = re.compile(r"^(?P<number>[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?)"
                       r"(?P<unit>(?:\s+1\s*/)?(?:[^\W\d]|[%/*·.\s])*)$")


PINT_SCALAR_ONLY = ("numpy", "scipy", "dask", "babel", "uncertainties")
"""The optional packages pint probes when it is imported. topomodel gives pint strings
and takes floats back, never arrays, so the command line (:func:`pint_for_scalars_only`)
keeps those not loaded yet out of pint's import: 0.1-0.3 s of start-up for a verb such
as ``units`` that loads none of them otherwise."""

_scalars_only = False


def pint_for_scalars_only() -> None:
    """From now on, import pint with the :data:`PINT_SCALAR_ONLY` packages that are not
    loaded yet hidden from it (they import normally afterwards; pint in this process
    then handles scalars only, which is all topomodel asks of it). The command line
    calls this; a library caller gets pint as installed."""
    global _scalars_only
    _scalars_only = True


def _pint() -> Any:
    """The pint module, imported as :func:`pint_for_scalars_only` says."""
    import sys

    if not _scalars_only or "pint" in sys.modules:
        import pint

        return pint
    hidden = [name for name in PINT_SCALAR_ONLY if name not in sys.modules]
    for name in hidden:
        sys.modules[name] = None  # type: ignore[assignment]  # `import` raises ImportError
    try:
        import pint
    finally:
        for name in hidden:
            if name in sys.modules and sys.modules[name] is None:
                del sys.modules[name]
    return pint


def keep_unit_answers() -> None:
    """From now on, keep what pint says about each unit on disk (:mod:`unitcache`), so a
    later process that reads only units seen before does not import pint, and keep each
    parsed catalog there too (:mod:`~topomodel.inputs.store.catalogstore`, keyed by this
    store's key among the rest). The command line calls this; a library caller asks pint
    and parses every time."""
    import hashlib
    import os
    from importlib.util import find_spec

    spec = find_spec("pint")
    origin = spec.origin if spec is not None and spec.origin else ""
    installed = f"{origin}:{os.stat(origin).st_mtime_ns}" if origin else ""
    definitions = (resources.files("topomodel.inputs") / "unit_definitions.txt").read_bytes()
    key = hashlib.sha256(definitions + repr(sorted(KINDS.items())).encode()
                         + installed.encode()).hexdigest()[:20]
    unitcache.enable(key)
    catalogstore.enable(unitcache.cache_folder(), key)


def _kept(name: str, ask: Any) -> Any:
    """The answer kept under ``name``, or ``ask()``'s, kept (see :func:`keep_unit_answers`)."""
    found, answer = unitcache.get(name)
    if not found:
        answer = ask()
        unitcache.put(name, answer)
    return answer


@cache
def registry() -> Any:
    """The package's pint registry, built from ``unit_definitions.txt`` only."""
    ureg: Any = _pint().UnitRegistry(None, autoconvert_offset_to_baseunit=False, cache_folder=None)
    with resources.as_file(resources.files("topomodel.inputs") / "unit_definitions.txt") as path:
        ureg.load_definitions(str(path))
    return ureg


def _describe(dimensionality: str) -> str:
    for kind in KINDS.values():
        if registry().get_dimensionality(kind.dimensionality) == registry().get_dimensionality(
            dimensionality or "[]"
        ):
            return f"a {kind.name.replace('_', ' ')}"
    return _DIMENSION_NAMES.get(dimensionality, f"of dimension {dimensionality}")


def quantity(text: str) -> Any:
    """Read ``text`` as a pint quantity of the package registry.

    Raises
    ------
    UnitError
        If ``text`` is not a string, has no unit or names an unknown unit.
    """
    pint = _pint()

    if not isinstance(text, str):
        raise UnitError(
            text, "a bare number where a quantity is expected: write it as a string with a"
            " unit, e.g. '400 Gb/s'"
        )
    stripped = text.strip()
    if not stripped:
        raise UnitError(text, "empty quantity")
    if not _NUMBER_FIRST.match(stripped):
        raise UnitError(text, "a quantity starts with a number, e.g. '400 Gb/s'")
    written = _QUANTITY.match(stripped)
    if written is None:
        raise UnitError(text, "a quantity is a decimal number and unit names, e.g."
                        " '1.5e3 GB/s' (no arithmetic)")
    if not math.isfinite(float(written["number"])):
        raise UnitError(text, "is not a finite number")
    try:
        q = registry().Quantity(stripped)
    except pint.errors.UndefinedUnitError as exc:
        names = exc.unit_names if isinstance(exc.unit_names, (tuple, list)) else (
            exc.unit_names,)
        raise UnitError(text, "unknown unit " + ", ".join(repr(str(n)) for n in names)
                        ) from None
    except Exception:  # pint raises many parser errors; all mean the same to a user
        raise UnitError(text, "cannot be read as a number with a unit") from None
    if not isinstance(q, registry().Quantity) or q.dimensionless:
        raise UnitError(text, "has no unit; write e.g. '400 Gb/s' or '80 GB'")
    if not math.isfinite(float(q.magnitude)):
        raise UnitError(text, "is not a finite number")
    return q


def parse(text: str, kind: str) -> float:
    """Read ``text`` as a quantity of ``kind``; return it in the kind's canonical unit.

    Examples
    --------
    >>> parse("400 Gb/s", "rate")  # bytes per second
    50000000000.0
    >>> parse("2 us", "time")
    2e-06
    >>> parse("64 MiB", "size")
    67108864.0
    >>> parse("900 GB", "rate")
    Traceback (most recent call last):
    ...
    topomodel.errors.UnitError: '900 GB': is a size, not a rate (e.g. '400 Gb/s')
    """
    if not isinstance(text, str):
        quantity(text)  # raises the bare-number error
    return _parse_cached(text, kind)


@lru_cache(maxsize=4096)
def _parse_cached(text: str, kind: str) -> float:
    written = _QUANTITY.match(text.strip())
    if written is not None and math.isfinite(number := float(written["number"])):
        factor = _unit_factor(written["unit"].strip(), kind)
        if factor is not None:
            return _checked(text, kind, number * factor)
    return _checked(text, kind, _read_canonical(text, kind))  # pint, and its errors


@lru_cache(maxsize=256)
def _unit_factor(unit: str, kind: str) -> float | None:
    """One ``unit`` in the canonical unit of ``kind``, or None if it is not a unit of
    that kind. A number times this is what pint gives for the whole quantity (pint
    converts a magnitude by multiplying it by the unit's factor), at the cost of one
    pint parse per unit instead of one per figure (a catalog has ~300 figures in ~20
    units; a pint parse is about a millisecond)."""
    if not unit:
        return None

    def ask() -> float | None:
        try:
            return _read_canonical(f"1 {unit}", kind)
        except UnitError:
            return None

    answer: float | None = _kept(f"factor\t{kind}\t{unit}", ask)
    return answer


def _read_canonical(text: str, kind: str) -> float:
    """``text`` read by pint, in the canonical unit of ``kind`` (no range checks)."""
    spec = KINDS[kind]
    q = quantity(text)
    ureg = registry()
    if q.dimensionality != ureg.get_dimensionality(spec.dimensionality):
        raise UnitError(text, _wrong_kind_reason(q, spec))
    if kind == "failure_rate" and "hertz" in str(q.units):
        raise UnitError(text, "is a frequency, not a failure rate: give failures per time,"
                        " e.g. '2 %/yr', '500 FIT' or '0.1 /yr'")
    return float(q.to(spec.canonical).magnitude)


def _checked(text: str, kind: str, value: float) -> float:
    """``value`` (of ``text``, canonical unit) if its sign and range suit ``kind``."""
    spec = KINDS[kind]
    if spec.sign == "positive" and value <= 0:
        raise UnitError(text, f"a {kind.replace('_', ' ')} must be greater than zero")
    if spec.sign == "non_negative" and value < 0:
        raise UnitError(text, f"a {kind.replace('_', ' ')} cannot be negative")
    low, high = bounds(kind)
    if not low <= value <= high:
        raise UnitError(text, f"a {kind.replace('_', ' ')} must be between"
                        f" {spec.bounds[0]} and {spec.bounds[1]}")
    return value


@cache
def bounds(kind: str) -> tuple[float, float]:
    """The sane range of ``kind`` in its canonical unit (:attr:`Kind.bounds`).

    Examples
    --------
    >>> bounds("rate")  # bytes per second
    (0.125, 1e+18)
    """
    spec = KINDS[kind]

    def ask() -> list[float]:
        return [float(registry().Quantity(b).to(spec.canonical).magnitude)
                for b in spec.bounds]

    low, high = _kept(f"bounds\t{kind}", ask)
    return float(low), float(high)


def unit_name(text: str) -> str:
    """The unit of the quantity ``text`` as pint names it (``"1 GiB"`` -> ``"gibibyte"``).

    Raises
    ------
    UnitError
        As :func:`quantity`.
    """
    written = _QUANTITY.match(text.strip()) if isinstance(text, str) else None
    if (written is None or not written["unit"].strip()
            or not math.isfinite(float(written["number"]))):
        return str(quantity(text).units)  # pint, and its errors
    unit = written["unit"].strip()

    def ask() -> str:
        try:
            return str(quantity(f"1 {unit}").units)
        except UnitError:
            return str(quantity(text).units)  # raises, naming what was written

    name: str = _kept(f"name\t{unit}", ask)
    return name


def _wrong_kind_reason(q: Any, spec: Kind) -> str:
    given = str(q.dimensionality)
    wanted = spec.name.replace("_", " ")
    if spec.name == "rate" and given == "[transfer] / [time]":
        return (
            "is a transfer (signalling) rate, not a bandwidth: the data rate depends on"
            f" lanes and encoding; give it in Gb/s or GB/s (e.g. '{spec.example}')"
        )
    if spec.name == "rate" and given in ("1 / [time]", "[symbol] / [time]"):
        return (
            f"is {_DIMENSION_NAMES[given]}, not a bandwidth: give bits or bytes per second"
            f" (e.g. '{spec.example}')"
        )
    return f"is {_describe(given)}, not a {wanted} (e.g. '{spec.example}')"


@dataclass(frozen=True)
class Bandwidth:
    """A link or port bandwidth as stated, and its per-direction value in bytes/s."""

    per_direction_Bps: float
    stated: Direction

    @property
    def bidir_Bps(self) -> float:
        """Both directions added, bytes/s."""
        return 2 * self.per_direction_Bps


def split_direction(text: str) -> tuple[str, Direction | None]:
    """Split a direction marker off a bandwidth string.

    Examples
    --------
    >>> split_direction("900 GB/s bidir")
    ('900 GB/s', 'bidir')
    >>> split_direction("400 Gb/s")
    ('400 Gb/s', None)
    """
    match = _DIRECTION_RE.match(text) if isinstance(text, str) else None
    if not match:
        return text, None
    word = re.sub(r"\s+", " ", match["direction"].lower())
    return match["quantity"], _DIRECTION_WORDS[word]


def parse_bandwidth(text: str) -> Bandwidth:
    """Read a link bandwidth that states its direction; bytes/s per direction.

    Examples
    --------
    >>> parse_bandwidth("900 GB/s bidir").per_direction_Bps
    450000000000.0
    >>> parse_bandwidth("400 Gb/s /dir").per_direction_Bps
    50000000000.0
    >>> parse_bandwidth("400 Gb/s")
    Traceback (most recent call last):
    ...
    topomodel.errors.UnitError: '400 Gb/s': a link bandwidth must say its direction: ...
    """
    body, direction = split_direction(text)
    if direction is None:
        if isinstance(text, str):
            parse(text, "rate")  # a wrong unit is the more useful message
            raise UnitError(
                text,
                "a link bandwidth must say its direction: add '/dir' or 'bidir'",
            )
        quantity(text)  # raises the bare-number error
    rate_Bps = parse(body, "rate")
    per_direction = rate_Bps / 2 if direction == "bidir" else rate_Bps
    return Bandwidth(per_direction_Bps=per_direction, stated=direction or "per_direction")


_SI_PREFIXES = ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"), (1.0, ""))
_SMALL_PREFIXES = ((1.0, ""), (1e-3, "m"), (1e-6, "u"), (1e-9, "n"), (1e-12, "p"))


def _number(value: float) -> str:
    """Up to four significant digits, no trailing zeros."""
    return f"{value:.4g}" if abs(value) < 1e4 else f"{value:.0f}"


_SHORT_RANGE = (1e-15, 1e19)
"""Magnitudes :func:`format_si` writes with a prefix: from 0.001 of the smallest to
9,999 of the largest; beyond them, scientific notation in the unit itself."""


RESIDUE_FRACTION = 1e-12
"""Below this fraction of the whole it is part of, a value is floating-point residue and
printed as 0: a sum of a few dozen float64 terms carries rounding error near 1e-15 of
its size, and a real part this small would not show in a whole printed to 4 digits."""


def format_si(value: float, unit: str, *, of: float | None = None) -> str:
    """Format ``value`` (in ``unit``) with the largest SI prefix that keeps it >= 1; a
    value beyond the prefixes (a step of 10^300 s) in scientific notation, never as a
    number of hundreds of digits. With ``of`` (the whole ``value`` is part of, in the
    same unit), a value below :data:`RESIDUE_FRACTION` of it is printed as 0.

    Examples
    --------
    >>> format_si(450e9, "B/s")
    '450 GB/s'
    >>> format_si(2e-6, "s")
    '2 us'
    >>> format_si(0, "W")
    '0 W'
    >>> format_si(1.136e300, "s"), format_si(-2.5e-300, "s"), format_si(9999e15, "s")
    ('1.136e+300 s', '-2.5e-300 s', '9999 Ps')
    >>> format_si(1.776e-15, "s", of=186.9), format_si(2e-6, "s", of=186.9)
    ('0 s', '2 us')
    """
    if of is not None and math.isfinite(of) and abs(value) < RESIDUE_FRACTION * abs(of):
        value = 0.0
    if value == 0 or not math.isfinite(value):
        return f"{_number(value)} {unit}"
    if not _SHORT_RANGE[0] <= abs(value) < _SHORT_RANGE[1]:
        return f"{value:.4g} {unit}"
    table = _SI_PREFIXES if abs(value) >= 1 else _SMALL_PREFIXES
    for factor, prefix in table:
        if abs(value) >= factor * (1 - 1e-12):
            return f"{_number(value / factor)} {prefix}{unit}"
    factor, prefix = table[-1]
    return f"{_number(value / factor)} {prefix}{unit}"


def format_rate(rate_Bps: float) -> str:
    """A rate in both conventions people compare: bytes and bits per second.

    Examples
    --------
    >>> format_rate(450e9)
    '450 GB/s (3.6 Tb/s)'
    """
    return f"{format_si(rate_Bps, 'B/s')} ({format_si(rate_Bps * 8, 'b/s')})"


def format_size(size_bytes: float) -> str:
    """A size with a decimal prefix (GB = 10^9 bytes).

    Examples
    --------
    >>> format_size(80e9)
    '80 GB'
    """
    return format_si(size_bytes, "B")


def convert(text: str, to_unit: str) -> tuple[float, str]:
    """Convert a quantity string to ``to_unit``; return the magnitude and the unit.

    A direction marker on ``text`` is kept as it is: converting changes the unit, not
    what the figure counts.

    Examples
    --------
    >>> convert("900 GB/s", "Gb/s")
    (7200.0, 'Gb/s')
    """
    body, _ = split_direction(text)
    source = quantity(body)
    try:
        target = quantity(f"1 {to_unit}") if isinstance(to_unit, str) else None
    except UnitError as exc:  # say it of the unit asked for, not of "1 unit"
        raise UnitError(to_unit, exc.reason.replace(f"'1 {to_unit}'", repr(to_unit))
                        ) from None
    if target is None or source.dimensionality != target.dimensionality:
        wanted = next((k for k in KINDS.values() if target is not None and
                       target.dimensionality == registry().get_dimensionality(k.dimensionality)),
                      None)
        if wanted is not None:
            raise UnitError(text, f"{_wrong_kind_reason(source, wanted)}: cannot convert"
                            f" to {to_unit}")
        raise UnitError(to_unit, f"is not a unit {text!r} can be converted to")
    kind = next((k for k in KINDS.values() if source.dimensionality
                 == registry().get_dimensionality(k.dimensionality)
                 and k.name != "failure_rate"), None)  # a frequency has its dimension
    if kind is not None and not abs(float(source.to(kind.canonical).magnitude)) <= bounds(
            kind.name)[1]:
        raise UnitError(text, f"is more than the largest {kind.name.replace('_', ' ')}"
                        f" topomodel takes, {kind.bounds[1]}")
    value = float(f"{source.to(target.units).magnitude:.12g}")
    if not math.isfinite(value) or (value == 0 and source.magnitude != 0):
        raise UnitError(text, f"is out of range in {to_unit}")
    return value, to_unit


@dataclass(frozen=True)
class Comparison:
    """How many times ``a`` is ``b``, as stated and per direction."""

    a: str
    b: str
    ratio: float
    ratio_per_direction: float
    warning: str | None


def compare(a: str, b: str) -> Comparison:
    """Compare two quantities of the same kind after converting both.

    Directions matter only when both are marked: a bidirectional total against a
    per-direction figure is reported with a warning and the per-direction ratio.

    Examples
    --------
    >>> compare("900 GB/s", "400 Gb/s").ratio
    18.0
    >>> c = compare("900 GB/s bidir", "400 Gb/s /dir")
    >>> c.ratio_per_direction, c.warning is not None
    (9.0, True)
    """
    body_a, dir_a = split_direction(a)
    body_b, dir_b = split_direction(b)
    qa, qb = quantity(body_a), quantity(body_b)
    if qa.dimensionality != qb.dimensionality:
        raise UnitError(b, f"is {_describe(str(qb.dimensionality))}; {a!r} is"
                        f" {_describe(str(qa.dimensionality))}: they cannot be compared")
    ratio = float((qa / qb).to("").magnitude)
    if not math.isfinite(ratio) or (ratio == 0 and qa.magnitude != 0):
        raise UnitError(b, f"and {a!r} are too far apart to compare")
    halves = {"bidir": 0.5, "per_direction": 1.0, None: 1.0}
    per_direction = ratio * halves[dir_a] / halves[dir_b]
    warning = None
    if dir_a and dir_b and dir_a != dir_b:
        said = {"bidir": "a bidirectional total", "per_direction": "per direction"}
        warning = (f"{a!r} is {said[dir_a]} and {b!r} is {said[dir_b]}: per direction the"
                   f" ratio is {per_direction:.4g}x")
    return Comparison(a, b, ratio, per_direction, warning)
