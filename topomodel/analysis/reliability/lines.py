"""A line of the goodput's failure table: one kind of part (or one failure domain) in a
job's footprint, how often it fails and what a failure does; and the catalog's failure
rate that a line reads."""

from __future__ import annotations

from dataclasses import dataclass

from topomodel.analysis.reliability.failure_classes import first_applying
from topomodel.errors import UsageError
from topomodel.inputs.catalog import Catalog
from topomodel.inputs.reliability import DOMAIN_KINDS, FailureRate


@dataclass(frozen=True)
class ComponentLine:
    """One kind of part in the job's footprint and what its failures do."""

    component: str  # a catalog failure-rate component: accelerator, host, optic, rack, ...
    model: str  # catalog id of the part (a domain's: its failure-rate entry)
    tier: str  # where it sits: system, or the link or switch tier, or the domain kind
    count: int  # parts (optic modules or cable assemblies for links; domains)
    rate_per_s: float  # failures per part per second
    interrupts: bool  # False: the job runs on, degraded
    rate_entry: str  # id of the failure-rate entry used
    provenance: str
    representative: str = ""  # a part to fail for the degradation run ("A -- B" links)
    representative_cables: int = 1  # cables that failing the representative takes down
    parallel: int = 1  # uplinks (cables or switches) sharing the load where it sits
    on_failure: str = ""  # its class: stops_job, degrades, absorbed (default: interrupts)
    class_entry: str = ""  # the failure-class entry, or "single point of failure"
    # a failure domain's line only (0 and False for a part):
    systems: int = 0  # the job's systems one failure takes out (the most of any domain)
    repair_s: float = 0.0  # time to restore the domain (0: the job's repair time)
    spares_apart: bool = False  # spares can sit outside the domain and stand in

    def __post_init__(self) -> None:
        if not self.on_failure:
            object.__setattr__(self, "on_failure",
                               "stops_job" if self.interrupts else "degrades")

    @property
    def failures_per_s(self) -> float:
        """All parts of this line together, failures per second."""
        return self.count * self.rate_per_s

    @property
    def is_domain(self) -> bool:
        """Whether the line is a failure domain's (one failure takes all its parts)."""
        return self.component in DOMAIN_KINDS


def failure_rate(catalog: Catalog, component: str, *keys: str) -> FailureRate:
    """The failure-rate entry for ``component``: the first that applies to one of
    ``keys`` (catalog ids, optic forms, tried in order), else the component's default.

    The last-loaded default wins, so a user catalog's default replaces the built-in.
    """
    entries = [e for e in catalog.entries.values()
               if isinstance(e, FailureRate) and e.component == component]
    entry = first_applying(entries, keys)
    if entry is None:
        raise UsageError(f"no failure rate for {component} parts in the catalog: add a"
                         f" failure_rates entry with component: {component}")
    return entry
