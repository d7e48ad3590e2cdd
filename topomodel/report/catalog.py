"""Catalog listings and entry sheets, in both GB/s and Gb/s, with provenance."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from topomodel.errors import UsageError
from topomodel.inputs.catalog import KIND_NAMES, Catalog
from topomodel.inputs.parts import (
    Accelerator,
    Entry,
    Fibre,
    HostLink,
    Model,
    Nic,
    Optic,
    ScaleupLink,
    ScaleupSwitch,
    Switch,
    System,
)
from topomodel.inputs.records import did_you_mean, yaml_keys
from topomodel.inputs.reliability import FailureClass, FailureRate
from topomodel.inputs.units import format_rate, format_si, format_size
from topomodel.report.output import Report, Table

if TYPE_CHECKING:
    from topomodel.calibrate.nccltopo import TopologyImport


def _gbps(rate_Bps: float) -> str:
    """A per-direction port rate as network people say it."""
    return format_si(rate_Bps * 8, "b/s")


def summary(entry: Entry) -> str:
    """One line with an entry's headline figures."""
    if isinstance(entry, Accelerator):
        flops = entry.peak_flops.get("bf16") or max(entry.peak_flops.values())
        dtype = "bf16" if "bf16" in entry.peak_flops else max(
            entry.peak_flops, key=entry.peak_flops.__getitem__)
        return (f"{dtype} {format_si(flops, 'FLOP/s')} dense, {format_size(entry.hbm_bytes)}"
                f" HBM at {format_si(entry.hbm_Bps, 'B/s')}")
    if isinstance(entry, ScaleupLink):
        return f"{format_rate(entry.link_rate_Bps)} per direction per link"
    if isinstance(entry, ScaleupSwitch | Switch):
        return f"{entry.ports} x {_gbps(entry.port_rate_Bps)} per direction"
    if isinstance(entry, Nic):
        return f"{entry.ports} x {_gbps(entry.port_rate_Bps)} ({', '.join(entry.protocols)})"
    if isinstance(entry, HostLink):
        return f"{format_rate(entry.rate_Bps)} per direction"
    if isinstance(entry, System):
        wiring = entry.scaleup
        how = wiring.kind + (f", {wiring.switches} x {wiring.switch}" if wiring.switch else "")
        how += f", {'x'.join(map(str, wiring.shape))}" if wiring.shape else ""
        nics = f", {entry.nic_count} x {entry.nic}" if entry.nic else ""
        return f"{entry.accelerators} x {entry.accelerator} ({how}){nics}"
    if isinstance(entry, Optic):
        power = f", {entry.power_W:g} W" if entry.power_W is not None else ""
        return (f"{entry.form} on {entry.medium}, {_gbps(entry.rate_Bps)},"
                f" reach {format_si(entry.reach_m, 'm')}{power}")
    if isinstance(entry, Model):
        from topomodel.analysis.training.model import parameter_counts

        counts = parameter_counts(entry)
        moe = (f", MoE {entry.experts} experts top-{entry.top_k},"
               f" {counts['active'] / 1e9:.1f}B active in matmuls" if entry.is_moe else "")
        return (f"{counts['total'] / 1e9:.1f}B parameters, {entry.layers} layers, d"
                f" {entry.hidden}{moe}, seq {entry.sequence}")
    if isinstance(entry, Fibre):
        return f"{entry.loss_dB_per_km:g} dB/km, {entry.connector_loss_dB:g} dB per connector"
    if isinstance(entry, FailureRate):
        scope = f" ({', '.join(entry.applies_to)})" if entry.applies_to else ""
        return f"{entry.component}{scope}: {_failure_rate(entry.rate_per_s)}"
    if isinstance(entry, FailureClass):
        scope = f" ({', '.join(entry.applies_to)})" if entry.applies_to else ""
        return f"{entry.component}{scope}: {entry.on_failure}"
    return ""


def _failure_rate(per_s: float) -> str:
    """A failure rate as people quote it: %/yr and the MTBF in hours."""
    from topomodel.analysis.reliability.goodput import SECONDS_PER_YEAR

    mtbf = f"MTBF {1 / per_s / 3600:,.0f} h" if per_s > 0 else "never fails"
    return f"{100 * per_s * SECONDS_PER_YEAR:.3g} %/yr, {mtbf}"


def catalog_list(catalog: Catalog, kind: str | None = None) -> Report:
    """Every entry (or those of ``kind``) with its headline figures and provenance."""
    if kind is not None:
        kind = _kind_name(kind)
    rows = [
        {"id": e.id, "kind": e.kind, "name": e.title, "summary": summary(e),
         "provenance": e.provenance}
        for e in sorted(catalog.entries.values(), key=lambda e: (e.kind, e.id))
        if kind is None or e.kind == kind
    ]
    overrides = [str(o) for o in catalog.overrides]
    return Report("catalog_list", {"entries": rows, "overrides": overrides},
                  [Table("Catalog" + (f": {kind}" if kind else ""), rows)], overrides)


def _kind_name(kind: str) -> str:
    name = kind.replace("-", "_")
    if name in KIND_NAMES:
        return name
    for singular, plural in KIND_NAMES.items():
        if name == plural:
            return singular
    raise UsageError(f"unknown kind {kind!r}; kinds: {', '.join(KIND_NAMES)}"
                     + did_you_mean(name, KIND_NAMES))


def catalog_show(catalog: Catalog, ident: str) -> Report:
    """One entry's every figure, in both conventions, with its provenance."""
    entry = catalog.entries.get(ident)
    if entry is None:
        raise UsageError(f"unknown catalog id {ident!r}" + did_you_mean(ident, catalog.entries))
    rows: list[dict[str, Any]] = []
    records: list[dict[str, Any]] = []
    data: dict[str, Any] = {"id": entry.id, "kind": entry.kind, "file": entry.file,
                            "line": entry.line}
    for key, f in yaml_keys(type(entry)).items():
        value = getattr(entry, f.name)
        if value is None or value == {} or value == () or value == f.default:
            continue
        data[f.name] = _json_value(value)
        if key in ("name", "vendor", "source", "provenance", "figure_provenance", "notes"):
            continue
        kind = getattr(f.metadata["read"], "kind", None)
        rows.append({"key": key, "value": _display(value, kind),
                     "provenance": entry.provenance_of(key)})
        records.append({"key": key, "field": f.name, "value": data[f.name],
                        "provenance": entry.provenance_of(key)})
        if kind == "bandwidth":
            data[f.name.replace("_Bps", "_bps")] = value * 8
    data["provenance"] = entry.provenance
    info = [{"key": k, "value": v} for k, v in (
        ("id", entry.id), ("kind", entry.kind), ("name", entry.title),
        ("vendor", entry.vendor), ("source", entry.source),
        ("provenance", entry.provenance), ("notes", entry.notes),
        ("defined in", f"{entry.file}:{entry.line}")) if v]
    if isinstance(entry, Optic) and entry.energy_pJ_per_bit is not None:
        rows.append({"key": "energy per bit", "value": f"{entry.energy_pJ_per_bit:.3g} pJ/bit",
                     "provenance": "derived"})
        data["energy_pJ_per_bit"] = entry.energy_pJ_per_bit
        records.append({"key": "energy per bit", "field": "energy_pJ_per_bit",
                        "value": entry.energy_pJ_per_bit, "provenance": "derived"})
    price = catalog.price_of(entry.id)
    if price is not None:  # the catalog's prices section (inputs/prices.py)
        from topomodel.report.power import capex_range, format_usd

        rows.append({"key": "price", "value": format_usd(price.price_USD) + capex_range(
            price.low_USD, price.high_USD) + f", {price.date}",
                     "provenance": price.provenance})
        data["price"] = {"price_USD": price.price_USD, "low_USD": price.low_USD,
                         "high_USD": price.high_USD, "date": price.date,
                         "source": price.source, "provenance": price.provenance,
                         "notes": price.notes, "defined_in": f"{price.file}:{price.line}"}
        records.append({"key": "price", "field": "price_USD", "value": price.price_USD,
                        "provenance": price.provenance})
    return Report("catalog_entry", data,
                  [Table(f"{entry.kind} {entry.id}", info, name="entry"),
                   Table("Figures", rows, records)])


_UNIT_OF_KIND = {"time": "s", "power": "W", "length": "m", "compute_rate": "FLOP/s",
                 "transfer_rate": "T/s"}


def _display(value: Any, kind: str | None) -> str:
    if isinstance(value, dict):
        return ", ".join(f"{k} {_display(v, kind)}" for k, v in value.items())
    if isinstance(value, tuple):
        return "; ".join(_display(v, kind) for v in value)
    if dataclasses.is_dataclass(value):
        parts = []
        for key, f in yaml_keys(type(value)).items():
            item = getattr(value, f.name)
            if item not in (None, (), 0) or key == "kind":
                parts.append(f"{key}={_display(item, getattr(f.metadata['read'], 'kind', None))}")
        return " ".join(parts)
    if kind == "bandwidth":
        return f"{format_rate(value)} per direction = {format_rate(2 * value)} bidir"
    if kind == "rate":
        return format_rate(value)
    if kind == "size":
        return f"{format_size(value)} ({value / 2**30:.4g} GiB)"
    if kind in ("loss", "loss_per_length", "optical_power"):
        unit = {"loss": "dB", "loss_per_length": "dB/km", "optical_power": "dBm"}[kind]
        return f"{value:g} {unit}"
    if kind == "failure_rate":
        return _failure_rate(value)
    if kind == "price":
        from topomodel.report.power import format_usd

        return format_usd(value)
    if kind == "time" and value >= 86_400:  # an MTBF: in hours, as datasheets give it
        return f"{value / 3600:,.0f} h"
    if kind in _UNIT_OF_KIND:
        return format_si(value, _UNIT_OF_KIND[kind])
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value)


def _json_value(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _json_value(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, tuple):
        return [_json_value(v) for v in value]
    return value


def topology_import_report(result: TopologyImport, output: str) -> Report:
    """What ``catalog import-nccl-topo`` found in a dump, what it could not identify,
    and the catalog systems the new one matches."""
    rows = [{"figure": what, "from the dump": how} for what, how in result.found]
    rows += [{"figure": "not identified", "from the dump": what}
             for what in result.not_identified]
    same = ", ".join(result.matches) or "none"
    summary = [{"item": "written", "value": output},
               {"item": "system", "value": f"{result.system_id} (provenance measured)"},
               {"item": "same accelerator, count, wiring and NICs as", "value": same}]
    data = {"output": output, "system_id": result.system_id,
            "found": [{"figure": w, "how": h} for w, h in result.found],
            "not_identified": list(result.not_identified), "matches": list(result.matches),
            "overlay": result.overlay}
    return Report("catalog-import", data, [Table("Catalog overlay", summary),
                                           Table("From the NCCL topology dump", rows)])
