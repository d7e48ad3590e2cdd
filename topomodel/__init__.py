"""topomodel: cluster-network topology and link-budget modeler for AI training clusters."""

from topomodel.errors import (
    CatalogError,
    DesignError,
    InputError,
    Problem,
    TopomodelError,
    UnitError,
    UsageError,
)

__version__ = "0.1.0"

__all__ = [
    "CatalogError",
    "DesignError",
    "InputError",
    "Problem",
    "TopomodelError",
    "UnitError",
    "UsageError",
    "__version__",
]
