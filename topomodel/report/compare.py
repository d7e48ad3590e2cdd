"""``topomodel compare``: the same job on any number of designs, side by side, with the
bill of materials, power and capex of each and their differences from the first.

JSON (``schema: topomodel.compare``, ``version: 2``): ``baseline`` (the first design's
name), ``designs`` (one object per design, in the order given: ``design``, ``file``, the
``topomodel step`` data, ``goodput`` (``interruptions_per_day``,
``effective_time_fraction``, ``spare_systems``, ``tokens_per_s``, ``repair_s``,
``spares_for_target``, ``spares_effective_time_fraction``, ``spare_system_W``,
``spare_system_USD``, ``degraded_throughput_fraction``, ``degraded_routed``,
``goodput_tokens_per_s``; null with ``--no-goodput``), ``cost`` (the step's cost per
token, as ``topomodel step`` gives it: ``USD_per_Mtok``, ``J_per_token``, the terms per
hour; null without a price), ``bisection`` (as ``topomodel
build`` gives it), ``busiest_link`` (:func:`busiest_link`), ``power``
(the ``topomodel build`` power summary), ``bom`` (its lines), ``mfu_ratio`` (MFU over
the first design's) and ``deltas`` (``power_W``, ``network_power_W``, ``power_W_per_accelerator``,
``capex_USD``: this design minus the first; null where either is unknown)), and
``bom_deltas`` (per part and design: ``count``, ``count_delta``, ``power_W``,
``power_delta_W``, ``price_USD``, ``price_delta_USD`` against the first design).

Every number comes from the functions the other verbs use: the step of ``step``
(:func:`~topomodel.report.step.step_record`), the goodput of ``goodput_section`` (the
one goodput path of step, goodput and review) and the bill of materials and power
summary of ``build`` (:mod:`topomodel.analysis.bom`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from topomodel.analysis.bom import BomLine, PowerSummary
from topomodel.analysis.cost import TokenCost
from topomodel.analysis.options import software_text
from topomodel.analysis.training.step import StepAssumptions, StepResult
from topomodel.inputs.units import format_si, format_size
from topomodel.report.bisection import bisection_text
from topomodel.report.goodput import effective_time_text
from topomodel.report.output import Report, Table
from topomodel.report.power import format_usd, power_headline
from topomodel.report.step import step_json, step_record

COMPARE_JSON_VERSION = 2
"""Version of the compare JSON: 2 lists ``designs`` (1 had ``a`` and ``b``)."""


@dataclass(frozen=True)
class ComparedDesign:
    """One design of a comparison: its step, goodput, bill of materials and power."""

    name: str
    file: str
    step: StepResult
    assumptions: StepAssumptions
    goodput: dict[str, Any] | None  # goodput_json of report.goodput; None: not modelled
    bom: Sequence[BomLine]
    power: PowerSummary
    bisection: dict[str, Any]  # the Bisection of analysis.bisection, as a dict
    cost: TokenCost | None = None  # over goodput tokens/s; None where nothing is priced
    nic_port_Bps: float = 0.0  # one scale-out NIC port, bytes/s per direction (0: none)
    busiest: dict[str, Any] | None = None  # busiest_link's: the link that limits


SAME_STEP_TOLERANCE = 0.01
"""Step times within this share of each other are the same for the comparison's note
on a faster NIC that changes nothing: the model's own rounding is far below it, and a
1 % change is below what a design review would act on."""


def busiest_link(fabric: Any, step: StepResult, *, routing: str = "ecmp", seed: int = 0,
                 time_model: Any = None) -> dict[str, Any] | None:
    """The busiest link of the step's largest collective that leaves the scale-up domain
    (by exposed time), run over all ranks at its size: ``link``, ``tier``,
    ``utilization`` (0-1), ``collective``, ``size_bytes``, ``routing`` (``routing``, or
    even ECMP where hashing would list more flows than the router's limit); ``None``
    when no collective leaves the scale-up domain. A stand-in for the step's own
    groups, which it names."""
    from topomodel.analysis.collectives.collective import run_collective
    from topomodel.analysis.collectives.loads import hotspots

    spilling = [c for c in step.comm if c.spills]
    if not spilling:
        return None
    from topomodel.errors import RoutingError

    call = max(spilling, key=lambda c: (c.exposed_s, c.time_s))
    try:
        run = run_collective(fabric, call.collective, call.size_bytes, ["all"],
                             routing=routing, seed=seed, time_model=time_model)
    except RoutingError:  # too many flows to list per hash: counted under even ECMP
        routing = "ecmp"
        run = run_collective(fabric, call.collective, call.size_bytes, ["all"],
                             routing=routing, seed=seed, time_model=time_model)
    hot = hotspots(fabric, run, 1)
    if not hot:
        return None
    return {"link": hot[0].link, "tier": hot[0].tier, "utilization": hot[0].utilization,
            "collective": call.collective, "size_bytes": call.size_bytes,
            "routing": routing}


def _busiest_text(d: ComparedDesign) -> str:
    b = d.busiest
    if b is None:
        return "none leaves the scale-up domain"
    return (f"{b['link']} ({b['tier']}, {b['utilization']:.0%} busy) in an all-rank"
            f" {b['collective']} of {format_size(b['size_bytes'])}")


def _same_step_notes(designs: Sequence[ComparedDesign], names: Sequence[str]) -> list[str]:
    """For each design whose NIC ports differ from the first's but whose step does not
    (within :data:`SAME_STEP_TOLERANCE`): the link that limits instead."""
    first = designs[0]
    notes = []
    for name, d in zip(names[1:], designs[1:], strict=True):
        if not (d.nic_port_Bps and first.nic_port_Bps) or d.nic_port_Bps == first.nic_port_Bps:
            continue
        change = d.step.step_time_s / first.step.step_time_s - 1
        if abs(change) >= SAME_STEP_TOLERANCE or d.busiest is None:
            continue
        notes.append(f"{name}: NIC ports {d.nic_port_Bps / first.nic_port_Bps:.3g}x"
                     f" {names[0]}'s change the step by {change:+.1%}: the NIC is not the"
                     f" limit; the busiest link is {_busiest_text(d)}")
    return notes


_GOODPUT_KEYS = ("interruptions_per_day", "effective_time_fraction", "spare_systems",
                 "tokens_per_s",
                 "repair_s", "spares_for_target", "spares_effective_time_fraction",
                 "spare_system_W", "spare_system_USD",
                 "degraded_throughput_fraction", "degraded_routed", "goodput_tokens_per_s")

_DELTA_KEYS = (("power_W", "total_W"), ("network_power_W", "network_W"),
               ("power_W_per_accelerator", "total_W_per_accelerator"),
               ("capex_USD", "capex_USD"))


def _goodput_metrics(first: ComparedDesign
                     ) -> list[tuple[str, Callable[[ComparedDesign], str]]]:
    """The goodput rows of the comparison (every design has its goodput)."""
    def of(d: ComparedDesign) -> dict[str, Any]:
        assert d.goodput is not None  # callers check every design has it
        return d.goodput

    return [
        ("interruptions/day", lambda d: f"{of(d)['interruptions_per_day']:.3g}"),
        ("effective training time", lambda d: effective_time_text(of(d))),
        ("throughput kept while parts are down",
         lambda d: f"{of(d)['degraded_throughput_fraction']:.2%}"),
        ("goodput tokens/s", lambda d: f"{of(d)['goodput_tokens_per_s']:,.0f}"),
        ("goodput / first design's", lambda d: goodput_ratio_text(d, first)),
    ]


def goodput_ratio_text(d: ComparedDesign, first: ComparedDesign) -> str:
    """``d``'s goodput over ``first``'s, as the factors it is the product of: the MFU
    ratio, the compute ratio (accelerators x peak: tokens/s over MFU), the effective
    time ratio and the ratio of throughput kept while parts are down; a goodput ratio
    unlike the MFU ratio says which factor moved it."""
    def ratio(key: str) -> float:
        mine, theirs = (d.goodput or {})[key], (first.goodput or {})[key]
        return mine / theirs if theirs else float("nan")

    mfu = d.step.mfu / first.step.mfu
    compute = ratio("tokens_per_s") / mfu
    return (f"{ratio('goodput_tokens_per_s'):.3f} = MFU {mfu:.3f} x compute {compute:.3f}"
            f" x effective time {ratio('effective_time_fraction'):.3f} x throughput kept"
            f" {ratio('degraded_throughput_fraction'):.3f}")


def _part(value_s: float, d: ComparedDesign) -> str:
    """A part of ``d``'s step time (s), residue printed as 0."""
    return format_si(value_s, "s", of=d.step.step_time_s)


def _minus(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else a - b


def _signed(value: float | None, fmt: Callable[[float], str]) -> str:
    if value is None:
        return "?"
    return ("+" if value > 0 else "-" if value < 0 else "") + fmt(abs(value))


def compare_report(designs: Sequence[ComparedDesign]) -> Report:
    """The comparison of ``designs`` (two or more; the first is the baseline)."""
    names = _column_names(designs)
    first = designs[0]
    metrics: list[tuple[str, Callable[[ComparedDesign], str]]] = [
        ("accelerators", lambda d: f"{d.step.layout.world:,}"),
        ("layout", lambda d: f"TP{d.step.layout.tp} PP{d.step.layout.pp}"
         f" DP{d.step.layout.dp} EP{d.step.layout.ep} CP{d.step.layout.cp}"),
        ("software", lambda d: software_text(d.step.layout, d.assumptions)),
        ("global batch", lambda d: f"{d.step.global_batch:,} sequences,"
         f" {d.step.microbatches:,} microbatches"),
        ("step time", lambda d: format_si(d.step.step_time_s, "s")),
        ("compute", lambda d: _part(d.step.compute_s, d)),
        ("hot-expert imbalance", lambda d: _part(d.step.imbalance_s, d)),
        ("bubble", lambda d: _part(d.step.bubble_s, d)),
        ("exposed communication", lambda d: _part(d.step.exposed_comm_s, d)),
        ("wait", lambda d: _part(d.step.wait_s, d)),
        *[(f"{wall} wall", (lambda w: lambda d: _part(d.step.walls[f"{w}_s"], d))(wall))
          for wall in ("bandwidth", "latency", "topology", "sync")],
        ("communication share", lambda d: f"{d.step.comm_share:.1%}"),
        ("MFU", lambda d: f"{d.step.mfu:.1%}"),
        ("MFU / first design's", lambda d: f"{d.step.mfu / first.step.mfu:.3f}"),
        ("tokens/s", lambda d: f"{d.step.tokens_per_s:,.0f}"),
        *(_goodput_metrics(first) if all(d.goodput for d in designs) else []),
        ("cost per million tokens", lambda d: "-" if d.cost is None
         else f"{d.cost.USD_per_Mtok:.4g} USD"),
        ("energy per token", lambda d: "-" if d.cost is None
         else f"{d.cost.J_per_token:.4g} J"),
        ("bisection", lambda d: bisection_text(d.bisection)),
        ("busiest link", _busiest_text),
    ]
    rows = [{"metric": label, **{n: fn(d) for n, d in zip(names, designs, strict=True)}}
            for label, fn in metrics]
    records = [_design_record(d, n, first) for n, d in zip(names, designs, strict=True)]
    power_rows = [_power_row(d, n, first) for n, d in zip(names, designs, strict=True)]
    bom_rows, bom_records = _bom_deltas(designs, names)
    data: dict[str, Any] = {
        "version": COMPARE_JSON_VERSION,
        "baseline": names[0],
        "designs": [{"design": n, "file": d.file, **step_json(d.step, d.assumptions),
                     "goodput": d.goodput and {k: d.goodput[k] for k in _GOODPUT_KEYS},
                     "bisection": d.bisection, "busiest_link": d.busiest,
                     "power": dataclasses.asdict(d.power),
                     "bom": [dataclasses.asdict(line) for line in d.bom],
                     "mfu_ratio": d.step.mfu / first.step.mfu,
                     "cost": None if d.cost is None else {
                         **{k: v for k, v in dataclasses.asdict(d.cost).items()
                            if k != "assumptions"}, "text": d.cost.text},
                     "deltas": {key: records[i][f"{key}_delta"] for key, _ in _DELTA_KEYS}}
                    for i, (n, d) in enumerate(zip(names, designs, strict=True))],
        "bom_deltas": bom_records,
    }
    warnings = _same_step_notes(designs, names)
    warnings += [f"{n}: {w}" for n, d in zip(names, designs, strict=True)
                 for w in d.step.warnings]
    warnings += [f"{n}: power is a partial sum (no figure for {', '.join(d.power.unknown)})"
                 for n, d in zip(names, designs, strict=True) if not d.power.complete]
    return Report("compare", data, [
        Table("Compare", rows, records, name="designs"),
        Table(f"Power and capex against {names[0]}", power_rows, records, name="power"),
        Table(f"Bill of materials against {names[0]}", bom_rows, bom_records, name="bom"),
    ], warnings)


def _column_names(designs: Sequence[ComparedDesign]) -> list[str]:
    """One column name per design: its name, or ``N: name`` when names repeat."""
    names = [d.name for d in designs]
    if len(set(names)) == len(names):
        return names
    return [f"{i + 1}: {n}" for i, n in enumerate(names)]


def _design_record(d: ComparedDesign, name: str, first: ComparedDesign) -> dict[str, Any]:
    """One design as a row of plain numbers, with its power and capex deltas."""
    power = dataclasses.asdict(d.power)
    base = dataclasses.asdict(first.power)
    record = {**step_record(d.step, name), "file": d.file,
              "mfu_ratio": d.step.mfu / first.step.mfu,
              **{k: d.goodput[k] for k in _GOODPUT_KEYS if d.goodput},
              "bisection_Bps": d.bisection["bisection_Bps"],
              "power_complete": d.power.complete, "capex_complete": d.power.capex_complete,
              "USD_per_Mtok": None if d.cost is None else d.cost.USD_per_Mtok,
              "J_per_token": None if d.cost is None else d.cost.J_per_token}
    for key, field in _DELTA_KEYS:
        record[key] = power[field]
        record[f"{key}_delta"] = _minus(power[field], base[field])
    return record


def _watts(value: float) -> str:
    return format_si(value, "W")


def _power_row(d: ComparedDesign, name: str, first: ComparedDesign) -> dict[str, str]:
    power, base = d.power, first.power
    capex = "-" if power.capex_USD is None else format_usd(power.capex_USD) + (
        "" if power.capex_complete else " (partial)")
    return {
        "design": name, "power": power_headline(dataclasses.asdict(power)),
        "change in power": _signed(_minus(power.total_W, base.total_W), _watts),
        "network power": format_si(power.network_W, "W"),
        "change in network power": _signed(_minus(power.network_W, base.network_W), _watts),
        "per accelerator": format_si(power.total_W_per_accelerator, "W"),
        "capex": capex,
        "change in capex": "-" if power.capex_USD is None and base.capex_USD is None else
        _signed(_minus(power.capex_USD, base.capex_USD), format_usd)}


def _bom_deltas(designs: Sequence[ComparedDesign], names: Sequence[str]
                ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Per part (category, tier, model): each design's count and its change from the
    first, for people and as plain records."""
    keyed: list[dict[tuple[str, str, str], BomLine]] = [
        {(ln.category, ln.tier, ln.model): ln for ln in d.bom} for d in designs]
    order: dict[tuple[str, str, str], None] = {}
    for lines in keyed:
        order.update(dict.fromkeys(lines))
    rows, records = [], []
    for part in order:
        base = keyed[0].get(part)
        row: dict[str, Any] = {"category": part[0], "tier": part[1] or "-", "model": part[2]}
        for name, lines in zip(names, keyed, strict=True):
            line = lines.get(part)
            count = line.count if line else 0
            row[name] = f"{count:,}"
            if lines is not keyed[0]:
                row[f"change ({name})"] = f"{count - (base.count if base else 0):+,}"
            power = line.power_W if line else 0.0
            price = line.price_USD if line else 0.0
            records.append({
                "design": name, "category": part[0], "tier": part[1], "model": part[2],
                "count": count, "count_delta": count - (base.count if base else 0),
                "power_W": power, "power_delta_W": _minus(power, base.power_W if base
                                                          else 0.0),
                "in_system": bool(line.in_system) if line else False,
                "price_USD": price,
                "price_delta_USD": _minus(price, base.price_USD if base else 0.0)})
        rows.append(row)
    return rows, records
