"""The report of ``topomodel check-nccl``: an nccl-tests log beside the model, per size."""

from __future__ import annotations

from typing import Any

from topomodel.analysis.collectives.collective import SIZE_CONVENTIONS
from topomodel.analysis.collectives.measured import NcclCheck
from topomodel.inputs.measured.nccltests import NcclTestsLog
from topomodel.inputs.units import format_si
from topomodel.report.output import Report, Table
from topomodel.vocabulary import LINK_TIER_LABELS


def _gbps(rate_Bps: float | None) -> str:
    return "" if rate_Bps is None else f"{rate_Bps / 1e9:.2f}"


def _bottleneck_label(name: str) -> str:
    if name == "latency":
        return "latency (no link saturated)"
    return f"{name} ({LINK_TIER_LABELS.get(name, name)})"


def nccl_check_report(check: NcclCheck, log: NcclTestsLog, *, design_name: str,
                      link_rates: str = "") -> Report:
    """Tables and JSON of a check: one row per size, the summary and the verdict;
    ``link_rates`` (when given) says which link efficiencies are as measured."""
    flagged = check.flagged
    largest = check.sizes[-1]
    verdict = (
        f"{len(flagged)} of {len(check.sizes)} sizes measured more than"
        f" {check.threshold:.0%} below the model (first at {flagged[0].size_bytes:,} bytes);"
        if flagged else f"no size measured more than {check.threshold:.0%} below the model;")
    verdict += (f" at {largest.size_bytes:,} bytes the model says"
                f" {_bottleneck_label(largest.bottleneck)} limits it, and the measurement"
                f" reaches {largest.ratio:.0%} of the model")
    summary = [
        {"item": "log", "value": log.file + (f" ({log.test})" if log.test else "")},
        {"item": "design", "value": design_name},
        *([{"item": "link rates", "value": link_rates}] if link_rates else []),
        {"item": "collective", "value": f"{check.collective}, {check.ranks} ranks"
         f" ({SIZE_CONVENTIONS[check.collective]})"},
        {"item": "ranks placed", "value": check.placement},
        {"item": "hosts in the log", "value": ", ".join(log.hosts) or "not listed"},
        {"item": "model algorithm", "value": check.algorithm},
        {"item": "model protocol", "value": check.protocol},
        {"item": "measured column", "value": check.column},
        {"item": "flag threshold", "value": f"measured busbw below the model by more than"
         f" {check.threshold:.0%}"},
        {"item": "likely bottleneck", "value": _bottleneck_label(check.bottleneck)},
        {"item": "verdict", "value": verdict},
    ]
    rows = [{"size (B)": s.size_bytes,
             "measured time": format_si(s.measured_time_s, "s"),
             "busbw oop GB/s": _gbps(s.out_of_place_busbw_Bps),
             "busbw ip GB/s": _gbps(s.in_place_busbw_Bps),
             "model time": format_si(s.model_time_s, "s"),
             "model busbw GB/s": _gbps(s.model_busbw_Bps),
             "measured / model": f"{s.ratio:.0%}",
             "model algorithm": f"{s.algorithm} {s.protocol}".strip(),
             "bottleneck": s.bottleneck,
             "flag": "BELOW" if s.below else ""} for s in check.sizes]
    data: dict[str, Any] = {
        "log": log.file, "test": log.test, "design": design_name,
        "collective": check.collective, "ranks": check.ranks,
        "placement": check.placement, "rank_accelerators": list(check.rank_nodes),
        "algorithm": check.algorithm, "protocol": check.protocol,
        "hosts": list(log.hosts), "column": check.column, "threshold": check.threshold,
        "size_convention": SIZE_CONVENTIONS[check.collective],
        "bottleneck": check.bottleneck, "flagged_sizes_bytes": [s.size_bytes for s in flagged],
        "sizes": [{"size_bytes": s.size_bytes, "log_line": s.line,
                   "measured_time_s": s.measured_time_s,
                   "measured_busbw_Bps": s.measured_busbw_Bps,
                   "out_of_place_busbw_Bps": s.out_of_place_busbw_Bps,
                   "in_place_busbw_Bps": s.in_place_busbw_Bps,
                   "model_time_s": s.model_time_s, "model_busbw_Bps": s.model_busbw_Bps,
                   "measured_over_model": s.ratio, "algorithm": s.algorithm,
                   "protocol": s.protocol, "bottleneck": s.bottleneck, "below": s.below}
                  for s in check.sizes],
        "verdict": verdict,
    }
    record = {k: v for k, v in data.items() if k not in ("sizes", "rank_accelerators")}
    return Report("check_nccl", data, [
        Table("nccl-tests against the model", summary, [record], name="check"),
        Table("Per size", rows, data["sizes"], name="sizes")],
        [*check.warnings, *log.warnings])
