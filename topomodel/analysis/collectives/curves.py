"""Collectives timed from a measured nccl-tests curve of the system, seconds.

The rule (:func:`measured_time`): a collective whose groups each lie inside one
scale-up domain of one system (a domain of one system, no failed scale-up link) and
whose system has a measured curve (``measured_collectives`` in the catalog) for that
collective and group size is timed from the curve, when the time model allows it
(``TimeModel.measured_curves``, on by default, and no forced protocol or scale-up
efficiency, which are what-ifs the measurement cannot answer). The curve's points
become times (size x the nccl-tests factor / busbw) and a size between two points is
interpolated in log size and log time; outside the measured sizes the model times it.

An AllGather or ReduceScatter without a curve of its own is timed from the system's
AllReduce curve of the same group size (:data:`FROM_ALLREDUCE`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from topomodel.fabric.tables import Fabric
from topomodel.inputs.parts import Accelerator, MeasuredCollective, System
from topomodel.inputs.records import documented
from topomodel.inputs.sources import TAG
from topomodel.traffic.collectives import busbw_factor
from topomodel.traffic.phases import Shape

FROM_ALLREDUCE = documented(
    "curves.FROM_ALLREDUCE", ("allgather", "reducescatter"),
    """Collectives timed from the AllReduce curve, at its busbw at the same size, when
    the system has no curve of their own. NCCL's ring AllReduce is a ReduceScatter
    followed by an AllGather over the same ring in chunks of the same size (S / n per
    step for a size S), and nccl-tests' busbw factors (2(n-1)/n against (n-1)/n) make
    the three equal when the ring runs at the same rate: on 8 x H200 ring AllGather and
    ReduceScatter reach 361.4 and 362.9 GB/s at 16 GiB where ring AllReduce reaches
    about 370 (shared reference collectives-compute-power.md section 1.2, [R20], [R2]).
    Vendors publish AllReduce curves far more often than the other two.""")


@dataclass(frozen=True)
class Curve:
    """One measured curve as arrays: log sizes (bytes) and log times (seconds)."""

    curve: MeasuredCollective
    system: str
    log_size: np.ndarray
    log_time: np.ndarray

    def time_s(self, collective: str, size_bytes: float) -> float | None:
        """Seconds for ``collective`` of ``size_bytes`` (nccl-tests' count), or None
        outside the measured sizes."""
        log_size = np.log(size_bytes) if size_bytes > 0 else -np.inf
        if not self.log_size[0] <= log_size <= self.log_size[-1]:
            return None
        seconds = float(np.exp(np.interp(log_size, self.log_size, self.log_time)))
        if collective != self.curve.collective:  # FROM_ALLREDUCE: same busbw, same size
            seconds *= (busbw_factor(collective, self.curve.ranks)
                        / busbw_factor(self.curve.collective, self.curve.ranks))
        return seconds

    def note(self, collective: str) -> str:
        """What timed the collective, for reports."""
        via = "" if collective == self.curve.collective else (
            f" (at the {self.curve.collective} curve's busbw)")
        tags = " ".join(f"[{tag}]" for tag in dict.fromkeys(TAG.findall(self.curve.source)))
        return (f"{collective} on {self.curve.ranks} ranks timed from the measured"
                f" {self.curve.collective} curve of {self.system}"
                f"{' ' + tags if tags else ''}{via}, not the model")


def curve_from(system: str, curve: MeasuredCollective) -> Curve:
    """The curve's points as log sizes and log times (size x factor / busbw)."""
    size = np.array([p[0] for p in curve.points])
    busbw = np.array([p[1] for p in curve.points])
    seconds = size * busbw_factor(curve.collective, curve.ranks) / busbw
    return Curve(curve, system, np.log(size), np.log(seconds))


def _curves(fabric: Fabric) -> dict[tuple[str, int], Curve]:
    """The fabric system's curves by (collective, ranks), when they can apply at all:
    scale-up domains of one system wired as the catalog's (the design changes neither
    its kind nor its link) and no failed scale-up link."""
    system = fabric.catalog.get(fabric.design.system, System)
    if not system.measured_collectives:
        return {}
    wiring, asked = fabric.structure.scaleup, fabric.design.scaleup
    link = system.scaleup.link or fabric.catalog.get(system.accelerator,
                                                     Accelerator).scaleup_link
    if (wiring.systems_per_domain != 1 or asked.kind not in (None, system.scaleup.kind)
            or asked.link not in (None, link)):
        return {}
    links = fabric.link_arrays
    tier = links["tier"]
    scaleup = tier.isin([t for t in tier.categories if t.startswith("scaleup")])
    if bool((links["failed"] & scaleup).any()):
        return {}
    out = {(c.collective, c.ranks): curve_from(system.id, c)
           for c in system.measured_collectives}
    for (collective, ranks), curve in list(out.items()):
        if collective == "allreduce":
            for derived in FROM_ALLREDUCE:
                out.setdefault((derived, ranks), curve)
    return out


def measured_time(fabric: Fabric, shapes: tuple[Shape, ...]) -> tuple[float, str] | None:
    """(seconds, note) of concurrent collectives ``shapes`` from the system's measured
    curves (the slowest of them), or None when any of them is not covered: a group
    spanning domains, no curve for its collective and group size, or a size outside
    the curve. The caller checks that the time model allows curves."""
    if not shapes:
        return None
    curves = fabric.derived(_curves)
    worst: tuple[float, str] | None = None
    for shape in shapes:
        curve = curves.get((shape.collective, shape.ranks))
        if curve is None or shape.nodes != 1:
            return None
        seconds = curve.time_s(shape.collective, shape.size_bytes)
        if seconds is None:
            return None
        if worst is None or seconds > worst[0]:
            worst = (seconds, curve.note(shape.collective))
    return worst
