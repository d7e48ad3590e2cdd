"""topomodel: cluster-network topology and link-budget modeler for AI training clusters.

``import topomodel as tm`` gives the front door: read a design (:func:`load_design`),
build its fabric (:func:`build_fabric`), then route and time collectives
(:func:`run_collective`), model a training step (:func:`step_time`) and its goodput
(:func:`job_goodput`), and count what the fabric is made of (:func:`bisection`,
:func:`bill_of_materials`, :func:`tier_summaries`). ``docs/api.md`` is a tour.

The names are loaded on first use, so ``import topomodel`` imports neither numpy nor
pandas nor matplotlib; the errors are imported at once (they are small).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from topomodel.errors import (
    CatalogError,
    CollectiveError,
    DesignError,
    FlowLimit,
    InputError,
    NotApplicable,
    ParameterError,
    Problem,
    RouterLimit,
    RoutingError,
    TopomodelError,
    UnitError,
    UsageError,
)

if TYPE_CHECKING:  # the real types for type checkers and editors; keep in step with _HOMES
    from topomodel.analysis.assumptions import StepAssumptions, TimeModel
    from topomodel.analysis.bisection import bisection
    from topomodel.analysis.bom import bill_of_materials, power_summary
    from topomodel.analysis.collectives.collective import run_collective
    from topomodel.analysis.collectives.timing import time_traffic
    from topomodel.analysis.reliability.goodput import GoodputAssumptions, job_goodput
    from topomodel.analysis.tiers import tier_summaries
    from topomodel.analysis.training.step import StepResult, step_time
    from topomodel.fabric.build import build_fabric
    from topomodel.fabric.failures import with_failures
    from topomodel.fabric.tables import Fabric
    from topomodel.inputs.catalog import load_catalog
    from topomodel.inputs.design import load_design
    from topomodel.routing import route
    from topomodel.traffic.layout import Layout

_HOMES = {
    "topomodel.inputs.catalog": ("load_catalog",),
    "topomodel.inputs.design": ("load_design",),
    "topomodel.fabric.build": ("build_fabric",),
    "topomodel.fabric.failures": ("with_failures",),
    "topomodel.fabric.tables": ("Fabric",),
    "topomodel.routing": ("route",),
    "topomodel.traffic.layout": ("Layout",),
    "topomodel.analysis.collectives.collective": ("run_collective",),
    "topomodel.analysis.assumptions": ("StepAssumptions", "TimeModel"),
    "topomodel.analysis.collectives.timing": ("time_traffic",),
    "topomodel.analysis.training.step": ("StepResult", "step_time"),
    "topomodel.analysis.bisection": ("bisection",),
    "topomodel.analysis.bom": ("bill_of_materials", "power_summary"),
    "topomodel.analysis.reliability.goodput": ("GoodputAssumptions", "job_goodput"),
    "topomodel.analysis.tiers": ("tier_summaries",),
}
_MODULE_OF = {name: module for module, names in _HOMES.items() for name in names}

__all__ = [
    "CatalogError",
    "CollectiveError",
    "DesignError",
    "Fabric",
    "FlowLimit",
    "GoodputAssumptions",
    "InputError",
    "Layout",
    "NotApplicable",
    "ParameterError",
    "Problem",
    "RouterLimit",
    "RoutingError",
    "StepAssumptions",
    "StepResult",
    "TimeModel",
    "TopomodelError",
    "UnitError",
    "UsageError",
    "__version__",
    "bill_of_materials",
    "bisection",
    "build_fabric",
    "job_goodput",
    "load_catalog",
    "load_design",
    "power_summary",
    "route",
    "run_collective",
    "step_time",
    "tier_summaries",
    "time_traffic",
    "with_failures",
]


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("topomodel")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "0+unknown"


def __getattr__(name: str) -> Any:
    if name == "__version__":
        value: Any = _version()
    elif name in _MODULE_OF:
        value = getattr(importlib.import_module(_MODULE_OF[name]), name)
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}; its public "
                             f"names are listed in topomodel.__all__")
    globals()[name] = value  # found once; later lookups do not come back here
    return value


def __dir__() -> list[str]:
    """The public names only: the helpers this module imports (``importlib``, ``Any``)
    and its subpackages are not the front door."""
    return sorted(__all__)
