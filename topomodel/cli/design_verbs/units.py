"""``topomodel units``: what is this quantity in other units, and how do two quantities
compare (with the direction of a bandwidth kept apart)?"""

from __future__ import annotations

import argparse

from topomodel.cli.shared import usage
from topomodel.report.output import Report, Table


def run(args: argparse.Namespace) -> Report:
    from topomodel.errors import UnitError
    from topomodel.inputs.units import compare, convert, parse, split_direction

    words = args.quantity
    if words[0] == "compare":
        if len(words) != 3:
            raise usage("units compare takes two quantities: units compare A B")
        c = compare(words[1], words[2])
        row = {"a": c.a, "b": c.b, "ratio": round(c.ratio, 6),
               "ratio_per_direction": round(c.ratio_per_direction, 6)}
        text = f"{c.a} is {c.ratio:.4g}x {c.b}"
        return Report("units_compare", row, warnings=[c.warning] if c.warning else [],
                      text=text)
    if len(words) != 1:
        raise usage("give one quantity, e.g. units '900 GB/s' --to Gb/s")
    body, direction = split_direction(words[0])
    targets = [args.to] if args.to else _default_targets(body)
    try:
        results = [convert(words[0], unit) for unit in targets]
    except UnitError as exc:
        if not args.to or exc.text != args.to:
            raise
        raise usage(f"--to: {exc}") from None
    marker = {"bidir": " bidir", "per_direction": " /dir", None: ""}[direction]
    text = " = ".join([words[0]] + [f"{v:.6g} {u}{marker}" for v, u in results])
    data: dict[str, object] = {"input": words[0], "direction": direction,
                               "values": [{"value": v, "unit": u} for v, u in results]}
    if direction == "bidir":
        rate_Bps = parse(body, "rate") / 2
        text += f"\n  per direction: {rate_Bps / 1e9:.6g} GB/s = {rate_Bps * 8 / 1e9:.6g} Gb/s"
        data["per_direction_Bps"] = rate_Bps
    rows = [{"value": v, "unit": u} for v, u in results]
    return Report("units", data, [Table(words[0], rows, name="conversions")], text=text)


def _default_targets(body: str) -> list[str]:
    """Units people would compare a quantity in, with prefixes that suit its size."""
    from topomodel.inputs.units import KINDS, format_si, quantity, registry

    q = quantity(body)
    for kind in KINDS.values():
        if q.dimensionality == registry().get_dimensionality(kind.dimensionality):
            canonical = float(q.to(kind.canonical).magnitude)
            if kind.name == "rate":
                return [_prefixed(canonical, "B/s"), _prefixed(canonical * 8, "b/s"),
                        _prefixed(canonical, "iB/s")]
            if kind.name == "size":
                return [_prefixed(canonical, "B"), _prefixed(canonical, "iB"),
                        _prefixed(canonical * 8, "b")]
            if kind.name in ("time", "power", "length", "compute_rate"):
                return [format_si(canonical, kind.canonical).split(" ", 1)[1]]
            return [kind.canonical]
    return [str(q.units)]


def _prefixed(value: float, unit: str) -> str:
    """``unit`` with the decimal (or, for ``iB``, binary) prefix that suits ``value``."""
    if unit.startswith("i"):
        for prefix, factor in (("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10)):
            if value >= factor:
                return prefix + unit[1:]
        return unit[1:]
    from topomodel.inputs.units import format_si

    return format_si(value, unit).split(" ", 1)[1]
