"""The review's in-network reduction what-if: where the scale-out switches could reduce
AllReduce in the network (SHARP: their catalog entry's ``in_network_reduction``) and
the design does not enable it (``scaleout.in_network_reduction``, off by default as
stock NCCL runs no CollNet without the SHARP plugin and ``NCCL_COLLNET_ENABLE=1``), the
collective table's AllReduce over the scale-out network timed again with it on, beside
the default."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from topomodel.fabric.tables import Fabric
from topomodel.inputs.parts import Switch
from topomodel.inputs.units import format_si
from topomodel.report.output import Table
from topomodel.report.review.document import Section, TableBlock, Text, size_text
from topomodel.report.review.schedule import Part, Results, ReviewContext, ReviewSection, Work


def could_reduce(fabric: Fabric) -> bool:
    """Whether the scale-out switches could reduce in the network and the design does
    not let them (the what-if this section shows)."""
    switch = fabric.structure.scaleout.switch
    if not switch or fabric.design.scaleout.in_network_reduction:
        return False
    return fabric.catalog.get(switch, Switch).in_network_reduction


def with_reduction(fabric: Fabric) -> Fabric:
    """The same design built again with ``scaleout.in_network_reduction: true``."""
    from topomodel.fabric.build import build_fabric

    design = fabric.design
    return build_fabric(replace(design, scaleout=replace(design.scaleout,
                                                         in_network_reduction=True)),
                        fabric.catalog)


def in_network_rows(c: ReviewContext, table_rows: list[dict[str, Any]]
                    ) -> list[dict[str, Any]]:
    """Each AllReduce row of the collective table over the scale-out network, timed on
    the fabric with in-network reduction on (the fastest algorithm, as ``auto``),
    beside the table's default: plain numbers, seconds and bytes/s."""
    from topomodel.analysis.collectives.collective import run_collective

    enabled = with_reduction(c.fabric)
    out = []
    for row in table_rows:
        if row["collective"] != "allreduce" or row["network"] != "scale-out":
            continue
        run = run_collective(enabled, "allreduce", row["size_bytes"], [row["group"]],
                             routing=c.routing, seed=c.seed, time_model=c.timing)
        out.append({"group": row["group"], "ranks": row["ranks"],
                    "size_bytes": row["size_bytes"],
                    "default_algorithm": row["algorithm"], "default_time_s": row["time_s"],
                    "default_busbw_Bps": row["busbw_Bps"],
                    "enabled_algorithm": run.algorithm, "enabled_time_s": run.time_s,
                    "enabled_busbw_Bps": run.busbw_Bps,
                    "speedup": row["time_s"] / run.time_s if run.time_s > 0 else 1.0})
    return out


def in_network_table(rows: list[dict[str, Any]]) -> Table:
    """The what-if's table: one row per AllReduce of the collective table."""
    def timed(r: dict[str, Any], which: str) -> str:
        return f"{format_si(r[which + '_time_s'], 's')} [{r[which + '_algorithm']}]"

    shown = [{"group": f"{r['group']} ({r['ranks']} ranks)",
              "size": size_text(r["size_bytes"]),
              "default (off)": timed(r, "default"),
              "busbw off": format_si(r["default_busbw_Bps"], "B/s"),
              "with in-network": timed(r, "enabled"),
              "busbw on": format_si(r["enabled_busbw_Bps"], "B/s"),
              "speed-up": f"x{r['speedup']:.3g}"} for r in rows]
    return Table("In-network reduction what-if", shown, rows, name="in_network_what_if")


def _work(c: ReviewContext) -> list[Work]:
    if not could_reduce(c.fabric):
        return []
    return [Work("in-network what-if",
                 lambda got: in_network_rows(c, got["collectives"].rows), ("collectives",))]


def _part(c: ReviewContext, got: Results) -> Part:
    if "in-network what-if" not in got:
        return Part(data={"in_network_what_if": []})
    rows = got["in-network what-if"]
    switch = c.fabric.structure.scaleout.switch
    table = in_network_table(rows)
    section = Section("in-network-what-if", "In-network reduction what-if", (
        Text(f"The scale-out switches ({switch}) can reduce AllReduce in the network"
             " (SHARP, NCCL's CollNet), but the design does not enable it"
             " (scaleout.in_network_reduction: false, the default: stock NCCL runs it only"
             " with the SHARP plugin and NCCL_COLLNET_ENABLE=1). Every AllReduce of the"
             " collective table over the scale-out network, timed again with it on (the"
             " fastest algorithm NCCL would run), beside the default the rest of this"
             " review uses."),
        TableBlock(table)))
    return Part(section, {"in_network_what_if": rows}, tables=(table,))


IN_NETWORK = ReviewSection("in-network-what-if", _work, _part)
"""The in-network reduction what-if (where the switches could and the design does not)."""
