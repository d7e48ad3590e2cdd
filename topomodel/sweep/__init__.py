"""Design-space sweeps: many step-model points over one base design, resumable.

A sweep file (see ``docs/sweeps.md``) names a base design, settings every point shares
and the parameters to vary; each point is a full parameter set: step options (model,
layout, assumptions, the ``scaleout_factor`` what-if) and ``design.KEY.PATH`` overrides
of the design file. :func:`load_sweep` checks the whole file and expands the points;
:func:`run_sweep` evaluates them on a local process pool or a Dask cluster and writes
one row per point to Parquet or CSV; :func:`topomodel.report.sweep.sweep_report` summarises the run.

This module is the public entry point; the parts live in

- :mod:`topomodel.sweep.params`: what a point may set (options, design keys) and record;
- :mod:`topomodel.sweep.file`: reading and checking a sweep file, expansion, point keys;
- :mod:`topomodel.sweep.constraints`: the safe constraint expressions;
- :mod:`topomodel.sweep.run`: evaluating points, the local pool and Dask, the journal
  and the results file, resume;
- :mod:`topomodel.report.sweep`: the summary, the best points, the Pareto front.
"""

from topomodel.sweep.constraints import compile_constraint, constraint_holds
from topomodel.sweep.evaluate import SweepContext, evaluate_point
from topomodel.sweep.file import Sweep, SweepError, load_sweep, pareto_objectives, point_key
from topomodel.sweep.journal import journal_path, results_format_for
from topomodel.sweep.params import METRICS, OPTIONS, apply_overrides, option
from topomodel.sweep.run import SweepOutcome, run_sweep

__all__ = [
    "METRICS", "OPTIONS", "Sweep", "SweepContext", "SweepError", "SweepOutcome",
    "apply_overrides", "compile_constraint", "constraint_holds",
    "evaluate_point", "journal_path", "load_sweep", "option",
    "pareto_objectives", "point_key", "results_format_for", "run_sweep",
]
