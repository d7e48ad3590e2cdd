"""One calibration from every input of one ``calibrate`` call: the measured curves of
nccl-tests runs and of profiler traces fitted together (:func:`.fit.fit_series`), and
each NCCL topology dump made a catalog system (:func:`.nccltopo.system_from_dump`), all
for one overlay (:func:`.overlay.write_overlay`).

- nccl-tests runs are grouped by collective and rank count: the runs of one binary are
  one curve (the median per size over them), each other binary another.
- The traces given are one job's (every file and folder together, as ``check-trace``
  reads them): a curve per collective kind and group size (:mod:`.tracefit`).
- A figure that curves of several inputs bound (the NVLink efficiency from an
  all-reduce log and from a trace's all-gathers) is fitted on all of them together, and
  names every file.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from topomodel.analysis.assumptions import TimeModel
from topomodel.analysis.collectives.measured import log_collective
from topomodel.calibrate.fit import FitResult, Series, fit_series
from topomodel.calibrate.nccl import nccl_series
from topomodel.calibrate.nccltopo import TopologyImport, system_from_dump
from topomodel.calibrate.tracefit import trace_curves
from topomodel.calibrate.tracesteps import TraceMeasure, measure_traces
from topomodel.errors import UsageError
from topomodel.fabric.tables import Fabric
from topomodel.inputs.measured.nccltests import NcclTestsLog


@dataclass(frozen=True)
class Calibration:
    """What one call of ``calibrate`` found: the fit over every curve, the systems of
    the dumps, the traces' measure (None without traces) and notes on what fitted
    nothing."""

    fit: FitResult
    systems: tuple[TopologyImport, ...]
    dumps: tuple[str, ...]  # the dump file of each system
    trace: TraceMeasure | None
    notes: tuple[str, ...]

    @property
    def files(self) -> tuple[str, ...]:
        """Every measurement file read, curves first."""
        named = [f for c in self.fit.curves for f in c.series.files]
        return tuple(dict.fromkeys([*named, *self.dumps]))


def _log_groups(logs: Sequence[NcclTestsLog], collective: str | None
                ) -> list[list[NcclTestsLog]]:
    groups: dict[tuple[str, int], list[NcclTestsLog]] = {}
    for log in logs:
        groups.setdefault((log_collective(log, collective), len(log.ranks)), []).append(log)
    return list(groups.values())


# PLR0913: keyword-only options of an entry point, as calibrate_nccl's and check_nccl's
def calibrate_inputs(fabric: Fabric, groups: dict[str, list[Any]], *,  # noqa: PLR0913
                     collective: str | None = None, ranks: str | None = None,
                     routing: str = "ecmp", seed: int = 0,
                     time_model: TimeModel | None = None, algorithm: str | None = None,
                     accelerator: str | None = None) -> Calibration:
    """Calibrate ``fabric`` from the records :func:`.inputs.read_inputs` read, by fit
    (``nccl-tests``: logs; ``trace``: tuples of rank traces; ``system``: dumps).

    ``collective``, ``ranks`` and ``algorithm`` apply to the nccl-tests runs (as
    ``check-nccl``'s); ``accelerator`` to the dumps (as ``catalog import-nccl-topo``'s).

    Raises
    ------
    UsageError
        When there is nothing to calibrate from, or the inputs fit nothing and make no
        system.
    """
    series: list[Series] = []
    notes: list[str] = []
    for logs in _log_groups(groups.get("nccl-tests", []), collective):
        series.append(nccl_series(fabric, logs, collective=collective, ranks=ranks,
                                  routing=routing, seed=seed, time_model=time_model,
                                  algorithm=algorithm))
    measure = None
    traces = [t for found in groups.get("trace", []) for t in found]
    if traces:
        measure = measure_traces(traces)
        curves = trace_curves(fabric, measure, routing=routing, seed=seed,
                              time_model=time_model)
        series += curves.series
        notes += curves.notes
        if not curves.series:
            notes.append("the traces hold no NCCL collective the model times: they fit"
                         " nothing")
    dumps = groups.get("system", [])
    systems = tuple(system_from_dump(dump, fabric.catalog, accelerator=accelerator)
                    for dump in dumps)
    if not series and not systems:
        said = f" ({'; '.join(notes)})" if notes else ""
        raise UsageError("no measured collective the model times and no topology dump"
                         f" among the inputs: nothing to calibrate from{said}")
    fit = fit_series(fabric, series) if series else FitResult((), (), ())
    return Calibration(fit, systems, tuple(d.file for d in dumps), measure, tuple(notes))
