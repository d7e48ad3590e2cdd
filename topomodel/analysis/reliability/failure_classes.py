"""What one failed part does to a job: the catalog's failure classes, looked up per part.

A part's class (``stops_job``, ``degrades``, ``absorbed``; catalog ``failure_classes``,
see :class:`~topomodel.inputs.catalog.FailureClass`) is read from the first entry that applies
to one of its keys (its catalog id, then for a link or switch of a scale-up domain the
scale-up link technology, then its optic form), else from its component's default. The
topology has the last word on one thing only: a part with no alternative (a single
point of failure) stops the job whatever its class.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol, TypeVar

from topomodel.errors import UsageError
from topomodel.inputs.catalog import Catalog
from topomodel.inputs.parts import Accelerator, System
from topomodel.inputs.reliability import FailureClass

if TYPE_CHECKING:
    from topomodel.fabric.tables import Fabric

SINGLE_POINT = "single point of failure"
"""The class entry named for a part the topology leaves without an alternative."""


class _Scoped(Protocol):
    @property
    def applies_to(self) -> tuple[str, ...]: ...


S = TypeVar("S", bound=_Scoped)


def first_applying(entries: Sequence[S], keys: Sequence[str]) -> S | None:
    """The entry for the first of ``keys`` that some entry's ``applies_to`` names (the
    last loaded of those), else the last loaded default (no ``applies_to``), else None.

    Examples
    --------
    >>> from types import SimpleNamespace as E
    >>> entries = [E(id="d", applies_to=()), E(id="lpo", applies_to=("lpo",))]
    >>> first_applying(entries, ["osfp", "lpo"]).id, first_applying(entries, ["x"]).id
    ('lpo', 'd')
    """
    for key in keys:
        for entry in reversed(entries):
            if key in entry.applies_to:
                return entry
    defaults = [e for e in entries if not e.applies_to]
    return defaults[-1] if defaults else None


def failure_class(catalog: Catalog, component: str, *keys: str) -> FailureClass:
    """The failure-class entry of a ``component`` part with ``keys`` (tried in order).

    Raises
    ------
    UsageError
        If the catalog has no entry for the component.
    """
    entries = [e for e in catalog.entries.values()
               if isinstance(e, FailureClass) and e.component == component]
    entry = first_applying(entries, [k for k in keys if k])
    if entry is None:
        raise UsageError(f"no failure class for {component} parts in the catalog: add a"
                         f" failure_classes entry with component: {component}")
    return entry


def scaleup_technology(fabric: Fabric) -> str:
    """The scale-up link technology of the fabric's accelerators (catalog id, e.g.
    ``nvlink5``, ``ub``), or ``""`` when the accelerator names none."""
    system = fabric.catalog.get(fabric.design.system, System)
    return fabric.catalog.get(system.accelerator, Accelerator).scaleup_link or ""


def on_failure(entry: FailureClass, single: bool) -> str:
    """The class that applies: ``stops_job`` for a single point of failure, else the
    entry's."""
    return "stops_job" if single else entry.on_failure
