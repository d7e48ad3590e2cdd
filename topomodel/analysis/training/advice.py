"""A sizing check: is communication the bottleneck of a training step, which wall
dominates it, and what scale-out bandwidth brings it below a threshold.

The share is the step model's exposed communication and synchronisation wait over the
step (:attr:`~topomodel.analysis.training.step.StepResult.comm_share`); the bandwidth is found by
:func:`~topomodel.analysis.training.studies.required_scaleout_factor`, which scales every
scale-out link (host, leaf, spine, core) and re-runs the step.
"""

from __future__ import annotations

from dataclasses import dataclass

from topomodel.analysis.assumptions import DEFAULT_COMM_THRESHOLD
from topomodel.analysis.training.step import StepAssumptions, StepResult, step_time
from topomodel.analysis.training.studies import NO_EFFECT, required_scaleout_factor
from topomodel.fabric.structure import scaleout_injection_Bps
from topomodel.fabric.tables import Fabric
from topomodel.inputs.parts import Model
from topomodel.inputs.records import check_share
from topomodel.traffic.layout import Layout

WALLS = {"bandwidth_s": "bandwidth", "latency_s": "latency", "topology_s": "topology",
         "sync_s": "synchronisation"}
"""The step's four walls, by key of :attr:`StepResult.walls`."""


@dataclass(frozen=True)
class Advice:
    """The verdict and its numbers (shares 0-1, bandwidths bytes/s per direction)."""

    threshold: float
    result: StepResult
    comm_share: float
    bound: bool  # comm_share above the threshold
    dominant_wall: str  # bandwidth, latency, topology or synchronisation
    walls_s: dict[str, float]
    has_scaleout: bool
    factor: float | None  # scale-out factor that reaches the threshold; None: see outcome
    outcome: str  # how the factor search ended (topomodel.analysis.training.studies.FOUND, ...)
    nic_port_Bps: float  # one NIC port as built
    injection_Bps: float  # scale-out bandwidth per accelerator as built (scaleout_injection_Bps)
    at_factor: StepResult | None  # the step at that factor
    one_switch: bool = False  # the scale-out is one switch per plane: none oversubscribed

    @property
    def required_nic_port_Bps(self) -> float | None:
        """One NIC port at the factor, bytes/s per direction."""
        return None if self.factor is None else self.factor * self.nic_port_Bps

    @property
    def required_injection_Bps(self) -> float | None:
        """Scale-out bandwidth per accelerator at the factor, bytes/s per direction."""
        return None if self.factor is None else self.factor * self.injection_Bps


def advise(fabric: Fabric, model: Model, layout: Layout,
           assumptions: StepAssumptions | None = None, *,
           threshold: float = DEFAULT_COMM_THRESHOLD, routing: str = "ecmp",
           seed: int = 0) -> Advice:
    """Whether communication is the bottleneck of a step of ``model`` with ``layout``.

    Raises
    ------
    UsageError
        For a threshold outside (0, 1), or a layout the fabric or model cannot run.
    """
    check_share(threshold, "threshold", low_open=True, high_open=True)
    result = step_time(fabric, model, layout, assumptions, routing=routing, seed=seed)
    walls = {WALLS[k]: float(v) for k, v in result.walls.items() if k in WALLS}
    dominant = max(walls, key=lambda name: walls[name])
    has_scaleout = fabric.structure.scaleout.kind != "none"
    factor: float | None = None
    at: StepResult | None = None
    outcome = NO_EFFECT
    if has_scaleout:
        search = required_scaleout_factor(fabric, model, layout, assumptions,
                                          target_share=threshold, routing=routing, seed=seed)
        factor, at, outcome = search.factor, search.result, search.outcome
    return Advice(threshold, result, result.comm_share, result.comm_share > threshold,
                  dominant, walls, has_scaleout, factor, outcome,
                  fabric.structure.scaleout.port_rate_Bps,
                  scaleout_injection_Bps(fabric.injection), at,
                  fabric.structure.scaleout.fat_tree_tiers == 1)
