"""The report of ``topomodel advise``: one paragraph, then the numbers behind it."""

from __future__ import annotations

import textwrap
from typing import Any

from topomodel.analysis.training.advice import Advice
from topomodel.analysis.training.studies import BELOW_RANGE, NO_EFFECT
from topomodel.inputs.units import format_rate, format_si
from topomodel.report.output import Report, Table
from topomodel.report.step import batch_text, memory_text

_FIX = {"bandwidth": "more scale-out bandwidth (or less traffic: gradient precision,"
        " bucket overlap, a layout keeping TP inside the server)",
        "latency": "fewer, larger messages (bigger buckets, fewer pipeline microbatches) more"
        " than bandwidth",
        "topology": "a less oversubscribed fabric or a placement keeping the heavy groups"
        " under one switch",
        "synchronisation": "fewer stragglers and less jitter; bandwidth does little for it"}

_ONE_SWITCH_TOPOLOGY = (
    "flows spread more evenly over the links inside the servers and the NIC ports"
    " (more queue pairs, adaptive routing, a placement keeping the heavy groups inside a"
    " server): the scale-out is one switch, with no oversubscription to remove")
"""The topology wall's fix where every system hangs off one switch per plane: the
contention is inside the systems (PCIe, inter-socket links) or in hashing flows onto
ports, not in a fabric that a less oversubscribed one would relieve."""


def wall_fix(advice: Advice) -> str:
    """What the dominant wall asks for, as fits the fabric (:data:`_FIX`)."""
    if advice.dominant_wall == "topology" and advice.one_switch:
        return _ONE_SWITCH_TOPOLOGY
    return _FIX[advice.dominant_wall]


def _gbit(rate_Bps: float) -> str:
    return f"{rate_Bps * 8 / 1e9:.3g} Gb/s"


def _factor_text(advice: Advice) -> str:
    if advice.factor is not None:
        return f"{advice.factor:.3g}x"
    return {NO_EFFECT: "none changes the share", BELOW_RANGE: "below 1/64x"}.get(
        advice.outcome, "not reached by 64x")


def advice_paragraph(advice: Advice, *, design: str, model: str) -> str:
    """The verdict in words: bound or not, the wall, the bandwidth that fixes it."""
    r = advice.result
    share, limit = advice.comm_share, advice.threshold
    lay = r.layout
    fit = "" if r.fits else (
        f"the layout does not fit: it needs {r.memory['total_bytes'] / 1e9:.1f} GB per"
        f" accelerator on {r.hbm_bytes / 1e9:.0f} GB, so this step cannot run as given"
        " (more PP or TP, ZeRO, recomputation or a smaller micro-batch; topomodel plan"
        " finds one that fits); as modelled, ")
    given = "given" if lay.global_batch else "the default"
    head = (f"{model} with TP {lay.tp} x PP {lay.pp} x DP {lay.dp} on {design}, a global"
            f" batch of {r.global_batch:,} sequences ({given}; {r.microbatches:,}"
            f" microbatches per pipeline): {fit}exposed communication and wait are"
            f" {share:.0%} of the {format_si(r.step_time_s, 's')} step, ")
    head += (f"above the {limit:.0%} threshold, so communication is the bottleneck" if
             advice.bound else f"within the {limit:.0%} threshold, so communication is not"
             " the bottleneck")
    head += (f"; the {advice.dominant_wall} wall dominates"
             f" ({format_si(advice.walls_s[advice.dominant_wall], 's')} of"
             f" {format_si(r.exposed_comm_s + r.wait_s, 's')})")
    if not advice.has_scaleout:
        return head + ". There is no scale-out network here, so the fix is inside the" \
            " scale-up domain or the layout."
    port = advice.nic_port_Bps
    if advice.outcome == NO_EFFECT:
        return head + (". No scale-out bandwidth changes the share (the same at 1/64x and"
                       " 64x today's): the traffic that counts stays inside the scale-up"
                       " domain, so the fix is inside it or in the layout.")
    if advice.outcome == BELOW_RANGE:
        return head + (f". The scale-out could fall below 1/64 of today's ({_gbit(port / 64)}"
                       f" per NIC port) before communication reaches {limit:.0%}.")
    if advice.factor is None:
        left = (f" (it leaves {advice.at_factor.comm_share:.0%})" if advice.at_factor
                else "")
        return head + (f". Even 64x today's scale-out bandwidth ({_gbit(64 * port)} per NIC"
                       f" port) does not bring it to {limit:.0%}{left}: the step needs less"
                       " communication for its compute (a larger batch per step, lower"
                       " gradient precision, more of the traffic inside the servers), not"
                       " only a faster network.")
    needed = advice.required_nic_port_Bps or 0.0
    at = advice.at_factor
    if advice.bound:
        return head + (f". {advice.factor:.3g}x today's scale-out bandwidth brings it to"
                       f" {limit:.0%}: {_gbit(needed)} per NIC port instead of"
                       f" {_gbit(port)}" + (f", MFU {r.mfu:.1%} -> {at.mfu:.1%}" if at else "")
                       + f". The {advice.dominant_wall} wall asks for "
                       + wall_fix(advice) + ".")
    return head + (f". The scale-out could fall to {advice.factor:.2g}x today's"
                   f" ({_gbit(needed)} per NIC port instead of {_gbit(port)}) before"
                   f" communication reaches {limit:.0%}.")


def advice_report(advice: Advice, *, design: str, model: str,
                  software: str = "") -> Report:
    """Paragraph (text) and numbers (table, JSON) of a sizing check; ``software`` the
    line naming the software preset (:func:`~topomodel.analysis.options.software_text`)."""
    r = advice.result
    text = advice_paragraph(advice, design=design, model=model)
    rows: list[dict[str, Any]] = [
        *([{"item": "software", "value": software}] if software else []),
        {"item": "memory", "value": memory_text(r)},
        {"item": "global batch", "value": batch_text(r)},
        {"item": "step time", "value": format_si(r.step_time_s, "s")},
        {"item": "compute", "value": format_si(r.compute_s, "s")},
        {"item": "exposed communication", "value": format_si(r.exposed_comm_s, "s")},
        {"item": "wait", "value": format_si(r.wait_s, "s")},
        {"item": "communication share", "value": f"{advice.comm_share:.1%}"},
        {"item": "threshold", "value": f"{advice.threshold:.0%}"},
        {"item": "communication-bound", "value": "yes" if advice.bound else "no"},
        *({"item": f"{name} wall", "value": format_si(value, "s")}
          for name, value in advice.walls_s.items()),
        {"item": "dominant wall", "value": advice.dominant_wall},
        {"item": "MFU", "value": f"{r.mfu:.1%}"},
    ]
    if advice.has_scaleout:
        rows += [{"item": "NIC port today", "value": format_rate(advice.nic_port_Bps)},
                 {"item": "scale-out per accelerator today",
                  "value": format_rate(advice.injection_Bps)},
                 {"item": "factor for the threshold", "value": _factor_text(advice)}]
        if advice.factor is not None:
            rows += [{"item": "NIC port needed",
                      "value": format_rate(advice.required_nic_port_Bps or 0.0)},
                     {"item": "scale-out per accelerator needed",
                      "value": format_rate(advice.required_injection_Bps or 0.0)}]
            if advice.at_factor is not None:
                rows.append({"item": "share / MFU there", "value":
                             f"{advice.at_factor.comm_share:.1%} /"
                             f" {advice.at_factor.mfu:.1%}"})
    data = {"design": design, "model": model, "paragraph": text,
            "threshold": advice.threshold, "comm_share": advice.comm_share,
            "communication_bound": advice.bound, "dominant_wall": advice.dominant_wall,
            "walls_s": advice.walls_s, "step_time_s": r.step_time_s, "mfu": r.mfu,
            "global_batch": r.global_batch, "microbatches": r.microbatches,
            "fits": r.fits, "memory_bytes": r.memory["total_bytes"],
            "has_scaleout": advice.has_scaleout, "factor": advice.factor,
            "factor_search": advice.outcome,
            "nic_port_Bps": advice.nic_port_Bps, "injection_Bps": advice.injection_Bps,
            "required_nic_port_Bps": advice.required_nic_port_Bps,
            "required_injection_Bps": advice.required_injection_Bps,
            "mfu_at_factor": advice.at_factor.mfu if advice.at_factor else None}
    # the paragraph heads the numbers (Report.text would replace the table)
    heading = "\n".join(textwrap.wrap(text, width=92))
    record = advice_record(advice, design=design, model=model, software=software)
    return Report("advise", data, [Table(heading, rows, [record], name="advise")],
                  list(r.warnings))


def advice_record(advice: Advice, *, design: str, model: str,
                  software: str = "") -> dict[str, Any]:
    """The check as one row of plain numbers, the unit in each name: the ``advise``
    table of ``--format csv`` and ``parquet`` (the verdict sentence in ``paragraph``)."""
    r, at = advice.result, advice.at_factor
    lay = r.layout
    return {"design": design, "model": model, "software": software,
            "tp": lay.tp, "pp": lay.pp, "dp": lay.dp, "cp": lay.cp, "ep": lay.ep,
            "global_batch": r.global_batch, "microbatches": r.microbatches,
            "step_time_s": r.step_time_s, "compute_s": r.compute_s,
            "exposed_comm_s": r.exposed_comm_s, "wait_s": r.wait_s,
            "comm_share": advice.comm_share, "threshold": advice.threshold,
            "communication_bound": advice.bound,
            **{f"{name}_wall_s": value for name, value in advice.walls_s.items()},
            "dominant_wall": advice.dominant_wall, "mfu": r.mfu,
            "has_scaleout": advice.has_scaleout,
            "nic_port_Bps": advice.nic_port_Bps if advice.has_scaleout else None,
            "injection_Bps": advice.injection_Bps if advice.has_scaleout else None,
            "factor": advice.factor, "factor_search": advice.outcome,
            "required_nic_port_Bps": advice.required_nic_port_Bps,
            "required_injection_Bps": advice.required_injection_Bps,
            "comm_share_at_factor": at.comm_share if at else None,
            "mfu_at_factor": at.mfu if at else None,
            "paragraph": advice_paragraph(advice, design=design, model=model)}
