"""Serviceability of optics: what a failed optical module takes out of service, and for
how long, as built and with the LPO or CPO parts of the optics what-if
(:func:`~topomodel.analysis.cost.optics_swaps`).

A pluggable module (DSP transceiver or LPO) sits in a front-panel cage: when it fails,
its one link is down until the module is swapped. A co-packaged optical engine sits on
the switch package: a failed one cannot be swapped in place, so the switch (or NIC)
that holds it comes out of service, with every cabled link it has, until it is
replaced. Both are restored in ``repair_s`` (the goodput's ``network_repair_s``, 4 h
by default: "time to swap a failed switch or optic"), so the difference is the rate
(the catalog's per-module figures: 1 %/yr pluggable, 0.1 %/yr CPO per link end, the
vendor's 10x claim) times what one failure takes out. The mean links out of service
at a random time is failures/s x links per failure x repair time (Little's law).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from topomodel.analysis.reliability.lines import failure_rate
from topomodel.inputs.parts import Optic

if TYPE_CHECKING:
    from topomodel.analysis.cost import OpticsSwap
    from topomodel.fabric.tables import Fabric

SECONDS_PER_YEAR = 365.25 * 86_400.0
ON_PACKAGE = ("cpo",)
"""Module forms on the switch (or NIC) package: a failure takes the part out."""


@dataclass(frozen=True)
class OpticsService:
    """One tier's optics as built (``before``) and swapped (``after``): failures per
    year, cabled links one failure takes out, and mean links out of service."""

    tier: str
    form: str  # the replacement's form: lpo or cpo
    links: int  # cabled links of the tier
    repair_s: float
    before_failures_per_year: float
    after_failures_per_year: float
    before_links_per_failure: float
    after_links_per_failure: float  # a CPO's: the cabled links of the part holding it

    @property
    def before_links_down(self) -> float:
        """Mean links of the tier out of service at a random time, as built."""
        return (self.before_failures_per_year / SECONDS_PER_YEAR
                * self.before_links_per_failure * self.repair_s)

    @property
    def after_links_down(self) -> float:
        """Mean links out of service at a random time with the replacement."""
        return (self.after_failures_per_year / SECONDS_PER_YEAR
                * self.after_links_per_failure * self.repair_s)


def links_per_part_failure(fabric: Fabric, tier: str) -> float:
    """Mean cabled links (links with a cable model) of the part (switch or NIC) at an
    end of a ``tier`` link,
    weighted by the tier's cables: what a failure on the package takes out with it."""
    links = fabric.links
    src = links["src"].to_numpy()
    cables = links["cables"].to_numpy().astype(float)
    optic = links["optic"]
    cabled = optic.notna().to_numpy() & (optic.astype(str).to_numpy() != "")
    # a part's cabled links (its board and in-system links are not network links),
    # one row a way
    ports = np.bincount(src[cabled], weights=cables[cabled], minlength=len(fabric.node_arrays))
    at = links["tier"].astype(str).to_numpy() == tier
    if not at.any():
        return 0.0
    return float(np.average(ports[src[at]], weights=cables[at]))


def optics_service(fabric: Fabric, swap: OpticsSwap, *, repair_s: float) -> OpticsService:
    """The :class:`OpticsService` of one swap of the optics what-if: the catalog's
    failure rates of the pluggable and its replacement (per module), one link per
    pluggable failure, and for a co-packaged replacement the links of the part that
    holds it (:func:`links_per_part_failure`)."""
    catalog = fabric.catalog
    rates = []
    for part in (swap.pluggable, swap.replacement):
        optic = catalog.get(part, Optic)
        rates.append(failure_rate(catalog, "optic", optic.id, optic.form).rate_per_s)
    links = fabric.links
    at = links["tier"].astype(str).to_numpy() == swap.tier
    cabled = int(links["cables"].to_numpy()[at].sum()) // 2  # both directions listed
    whole = links_per_part_failure(fabric, swap.tier) if swap.form in ON_PACKAGE else 1.0
    return OpticsService(swap.tier, swap.form, cabled, repair_s,
                         swap.modules * rates[0] * SECONDS_PER_YEAR,
                         swap.modules * rates[1] * SECONDS_PER_YEAR, 1.0, whole)
