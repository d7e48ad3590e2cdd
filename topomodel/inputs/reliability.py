"""The catalog's reliability entries: how often each kind of component fails
(:class:`FailureRate`) and what one failure does to a job (:class:`FailureClass`)."""

from __future__ import annotations

from dataclasses import dataclass

from topomodel.inputs.parts import Entry
from topomodel.inputs.records import Invalid, choice, list_of, quantity, spec, text

COMPONENTS = ("accelerator", "hbm", "software", "host", "nic", "scaleup_switch", "switch",
              "optic")

DOMAIN_KINDS = ("rack", "power_feed", "cooling_loop", "plane", "site")
"""Failure domains: parts that fail together (a rack's shared power shelf and manifold, a
power feed, a cooling loop, a scale-out plane, a site). A ``failure_rates`` entry for
one counts failures per domain and gives its ``repair`` time."""


@dataclass(frozen=True, kw_only=True)
class FailureRate(Entry):
    """How often one kind of component fails: an annualised rate, or an MTBF.

    ``component`` says what one failure is counted against: each accelerator
    (``accelerator``, ``hbm``, ``software``), each host server (``host``), each NIC or
    switch, and for ``optic`` each module (transceiver, LPO, CPO: two per link) or each
    cable assembly (DAC, ACC, AEC, AOC: one per link), and for a failure domain
    (:data:`DOMAIN_KINDS`) each domain, with its ``repair`` time. ``applies_to`` narrows an entry
    to catalog ids or optic forms; the entry without it is the component's default.
    """

    kind = "failure_rate"
    component: str = spec(choice(*COMPONENTS, *DOMAIN_KINDS))
    applies_to: tuple[str, ...] = spec(list_of(text), default=())
    afr_per_s: float | None = spec(quantity("failure_rate"), key="afr", default=None,
                                   doc="failures per component per unit time, e.g. '2 %/yr'")
    mtbf_s: float | None = spec(quantity("time"), key="mtbf", default=None)
    repair_s: float | None = spec(quantity("time"), key="repair", default=None,
                                  doc="a failure domain's time to restore, e.g. '4 h'")

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.component in DOMAIN_KINDS and self.repair_s is None:
            raise Invalid(f"a {self.component} failure domain needs its repair time",
                          "repair")
        if self.repair_s is not None and self.component not in DOMAIN_KINDS:
            raise Invalid("repair is a failure domain's (the goodput's repair_time"
                          " option sets the parts')", "repair")
        if (self.afr_per_s is None) == (self.mtbf_s is None):
            raise Invalid("give exactly one of afr and mtbf", "afr")
        if self.mtbf_s is not None and self.mtbf_s <= 0:
            raise Invalid("an MTBF must be greater than zero", "mtbf")

    @property
    def rate_per_s(self) -> float:
        """Failures per component per second."""
        return self.afr_per_s if self.afr_per_s is not None else 1 / float(self.mtbf_s or 1)


FAILURE_CLASSES = ("stops_job", "degrades", "absorbed")
"""What one failed part does to a synchronous job: stops it (restart from a checkpoint),
degrades it (it runs on, re-routed around the part, slower until the repair) or nothing
measurable (absorbed by redundancy)."""


UNROUTABLE_COMPONENTS = ("accelerator", "hbm", "software", "host")
"""Components no route can avoid: their failure stops the job or is absorbed."""


@dataclass(frozen=True, kw_only=True)
class FailureClass(Entry):
    """What a failure of one kind of component does to a job whose traffic it carries.

    ``component`` is a failure-rate component; ``applies_to`` narrows the entry to
    catalog ids, optic forms or, for links and switches of a scale-up domain, the
    scale-up link technology (``nvlink5``, ``ub``, ``ici-v4``); the entry without it is
    the component's default. A part the topology leaves without an alternative (a single
    point of failure) stops the job whatever its class.
    """

    kind = "failure_class"
    component: str = spec(choice(*COMPONENTS))
    applies_to: tuple[str, ...] = spec(list_of(text), default=())
    on_failure: str = spec(choice(*FAILURE_CLASSES),
                           doc="stops_job, degrades (re-routed, slower) or absorbed")

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.on_failure == "degrades" and self.component in UNROUTABLE_COMPONENTS:
            raise Invalid(f"a failed {self.component} cannot be routed around: give"
                          " stops_job or absorbed", "on_failure")
