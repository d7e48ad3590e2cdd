"""Correlated failures in the goodput: a failure domain (a rack's shared parts, a power
feed, a cooling loop, a scale-out plane, a site; :mod:`topomodel.fabric.domains`) fails
as one interruption that takes all of the job's parts in it at once.

The parts' own rates stay as they are (the catalog's domain entries count only the
domain's own shared parts: power shelf, busbar, PDU, CDU, subnet manager), so nothing
is counted twice: a domain adds its own interruptions, one per failure of any domain of
the kind that holds some of the job, each stopping every accelerator in it.

What a domain's failure costs beyond detection and restart depends on the spares:

- a rack, power feed, cooling loop or site takes ``systems`` of the job's systems out
  until the domain is restored (its catalog ``repair`` time). Spares stand in when the
  design has another domain of the kind for them to sit in (:data:`SPARES_APART`: a
  spare rack on another PDU) and enough of them are free: the job needs ``systems``
  spares at once, so a spare pool smaller than the largest domain of the job waits out
  the repair every time. Free spares are the spares less the systems in repair, a
  Poisson count (:func:`~topomodel.analysis.reliability.poisson.poisson_tail`) whose
  mean now includes each domain's systems while it is repaired.
- a plane holds no system: with one plane a job that spans scale-up domains has no path
  between them until it is restored, and no spare system helps; with more planes the
  job runs on over the others, degraded (its step re-routed around the plane, as the
  goodput re-routes around any redundant part), for the plane's repair time.
- a site that is the design's only one, or a cooling loop or feed that holds the whole
  design, leaves no other domain for spares: the job waits for the repair.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from topomodel.analysis.reliability.lines import ComponentLine, failure_rate
from topomodel.analysis.reliability.poisson import poisson_tail
from topomodel.fabric.domains import domain_map
from topomodel.inputs.records import documented
from topomodel.inputs.reliability import DOMAIN_KINDS

if TYPE_CHECKING:
    from topomodel.fabric.tables import Fabric

SPARES_APART = documented(
    "domain_failures.SPARES_APART", True,
    """Whether spare systems are kept outside the domains they stand in for, wherever the
    design has another domain of the kind (a spare rack on another PDU and another
    cooling loop): spares kept beside the job on its own feed would fail with it, which
    is the point the issue of failure domains makes, so the default assumes an operator
    who places them apart. A kind with one domain in the design (one site, one loop
    for the whole hall) leaves nowhere apart: there the job waits for the repair.""")


def domain_lines(fabric: Fabric, world: int) -> list[ComponentLine]:
    """One line per failure-domain kind that holds some of a job on the first ``world``
    accelerators (a plane: when the job spans scale-up domains), with the catalog's
    rate per domain and repair time: ``count`` the domains of the kind the job touches
    (planes: the design's), ``systems`` the most of the job's systems one holds."""
    job = fabric.accelerators[:world]
    node_system = fabric.node_arrays["system"]
    spans = len(np.unique(fabric.node_arrays["domain"][job])) > 1
    lines = []
    for kind in DOMAIN_KINDS:
        dmap = domain_map(fabric, kind)
        if dmap.count == 0 or (kind == "plane" and not spans):
            continue
        entry = failure_rate(fabric.catalog, kind)
        repair_s = float(entry.repair_s or 0.0)
        common = {"rate_entry": entry.id, "provenance": entry.provenance,
                  "repair_s": repair_s, "class_entry": f"{kind} domain"}
        if kind == "plane":
            several = dmap.count > 1  # the others carry the traffic, degraded
            lines.append(ComponentLine(
                kind, entry.id, kind, dmap.count if several else 1, entry.rate_per_s,
                not several, representative="plane:0" if several else "",
                parallel=dmap.count, **common))  # type: ignore[arg-type]
            continue
        of_job = dmap.of_node[job]
        # the job's (domain, system) pairs, as one key each, then systems per domain
        width = int(node_system.max()) + 1
        pairs = np.unique(of_job * width + node_system[job])
        touched, systems = np.unique(pairs // width, return_counts=True)
        lines.append(ComponentLine(
            kind, entry.id, kind, len(touched), entry.rate_per_s, True,
            systems=int(systems.max()), spares_apart=SPARES_APART and dmap.count > 1,
            **common))  # type: ignore[arg-type]
    return lines


def domain_systems_in_repair(lines: Sequence[ComponentLine]) -> float:
    """Mean systems out for a domain's repair at a random time: failures/s x systems x
    repair time, summed over the domain lines."""
    return sum(ln.failures_per_s * ln.systems * ln.repair_s
               for ln in lines if ln.is_domain and ln.interrupts)


def downtime_by_line(lines: Sequence[ComponentLine], *, part_downtime_s: float,
                     spares: int, in_repair_mean: float, restart_s: float
                     ) -> list[float]:
    """Each interrupting line's downtime per failure, seconds, in line order: a part's is
    ``part_downtime_s``; a domain's is ``restart_s`` (detection and restart) plus its
    repair time when no spares can stand in (the kind has nowhere apart, a plane, or
    fewer spares than its ``systems``), else its repair time x the chance that fewer
    than ``systems`` spares are free (at least ``spares - systems + 1`` in repair)."""
    out = []
    for ln in lines:
        if not ln.interrupts:
            continue
        if not ln.is_domain:
            out.append(part_downtime_s)
            continue
        stand_in = ln.spares_apart and ln.systems <= spares
        wait = (poisson_tail(spares - ln.systems + 1, in_repair_mean) if stand_in
                else 1.0)
        out.append(restart_s + wait * ln.repair_s)
    return out


def lost_by_cause(lines: Sequence[ComponentLine], downtimes: Sequence[float],
                  cycle_s: float, lost: float) -> dict[str, float]:
    """Share of wall time each cause of interruption costs, by component (a domain's by
    its kind), largest first: the time ``lost`` to interruptions (the checkpointing
    share less the effective time) split in proportion to each cause's failures/s x
    (half a checkpoint cycle of rework + its downtime)."""
    half = cycle_s / 2 if np.isfinite(cycle_s) else 0.0
    weight: dict[str, float] = {}
    stopping = [ln for ln in lines if ln.interrupts]
    for ln, down in zip(stopping, downtimes, strict=True):
        weight[ln.component] = weight.get(ln.component, 0.0) + ln.failures_per_s * (half + down)
    total = sum(weight.values())
    return {k: lost * w / total for k, w in sorted(weight.items(), key=lambda kv: (-kv[1], kv[0]))
            if total > 0}
