"""Cost and energy per unit of work: capex amortised per hour plus energy, over tokens.

The hourly cost of a job is its share of the cluster (its accelerators over the
design's) of three terms:

- IT capex per hour: the bill of materials' capex paid off over
  ``amortisation_years`` at ``cost_of_capital`` (an annuity: the capital recovery
  factor), over the hours of a year;
- facility capex per hour: ``facility_USD_per_kW`` times the IT power in kW, paid off
  over ``facility_years`` the same way;
- energy per hour: the IT power times the PUE, in kW, times the electricity price.

The IT power is the bill of materials' total: the maximum where published, so the
energy is an upper bound on the draw of a job that keeps every part busy. The cost per
million tokens is the hourly cost over the tokens of an hour, goodput tokens where the
goodput model ran; the energy per token is the facility power (IT power x PUE) over
tokens/s. Every term and default is in docs/cost.md. :func:`optics_swaps` is the
what-if that puts LPO or CPO modules in place of pluggable transceivers.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from topomodel.analysis.assumptions import CostAssumptions
from topomodel.analysis.bom import (
    BomLine,
    PowerSummary,
    bill_of_materials,
    part_power_W,
    power_summary,
)
from topomodel.fabric.tables import Fabric
from topomodel.inputs.catalog import Catalog
from topomodel.inputs.parts import Optic

HOURS_PER_YEAR = 365.25 * 24
"""Hours of an average (Julian) year: 8,766."""


def recovery_factor(rate: float, years: float) -> float:
    """The capital recovery factor: the share of a capex paid each year to pay it off
    over ``years`` at annual ``rate`` (``rate / (1 - (1 + rate) ** -years)``; 1/years
    at rate 0).

    Examples
    --------
    >>> round(recovery_factor(0.08, 5), 4), recovery_factor(0.0, 4)
    (0.2505, 0.25)
    """
    if rate == 0:
        return 1.0 / years
    return rate / (1.0 - (1.0 + rate) ** -years)


@dataclass(frozen=True)
class TokenCost:
    """A job's cost per hour and per unit of work, with what it assumed.

    ``share`` is the job's share of the cluster (its accelerators over the design's);
    the capex and power are the job's share of the cluster's. ``tokens_per_s`` is the
    rate the cost is spread over: goodput tokens/s where ``goodput`` is true.
    """

    share: float
    capex_USD: float
    it_power_W: float
    facility_power_W: float  # IT power x PUE
    tokens_per_s: float
    goodput: bool
    capex_USD_per_h: float
    facility_USD_per_h: float
    energy_USD_per_h: float
    USD_per_h: float
    USD_per_Mtok: float
    J_per_token: float
    assumptions: CostAssumptions

    @property
    def text(self) -> str:
        """The prices, power and utilisation it assumed, in one line."""
        return self.describe()

    def describe(self, tokens: str = "tokens") -> str:
        """:attr:`text`, naming the tokens counted (``'output tokens'`` for serving)."""
        a = self.assumptions
        return (f"capex over {a.amortisation_years:g} y, facility"
                f" {a.facility_USD_per_kW:,.0f} USD/kW over {a.facility_years:g} y, at"
                f" {a.cost_of_capital:.0%}; {self.it_power_W / 1e3:,.1f} kW (BOM maximum)"
                f" x PUE {a.pue:g} at {a.electricity_USD_per_kWh:g} USD/kWh;"
                f" {self.share:.0%} of the cluster, always busy;"
                f" {'goodput ' if self.goodput else ''}{tokens}/s")


def token_cost(capex_USD: float, it_power_W: float, tokens_per_s: float,
               assumptions: CostAssumptions | None = None, *, share: float = 1.0,
               goodput: bool = False) -> TokenCost:
    """US dollars per hour and per million tokens, and joules per token, of a job using
    ``share`` of a cluster of capex ``capex_USD`` (US dollars) and IT power
    ``it_power_W`` (watts) at ``tokens_per_s``.

    Examples
    --------
    By hand: 1 M USD over 5 years at 8 % is 1e6 x 0.25046 / 8766 = 28.57 USD/h; 100 kW
    of IT power is 1.1 M USD of facility, 1.1e6 x 0.11683 (15 years at 8 %) / 8766 =
    14.66 USD/h; 100 kW x PUE 1.3 = 130 kW at 0.0806 USD/kWh is 10.48 USD/h. 53.71 USD/h
    over 10,000 tokens/s (36 M tokens an hour) is 1.492 USD per million tokens, and
    130 kW over 10,000 tokens/s is 13 J per token.

    >>> c = token_cost(1e6, 100e3, 1e4)
    >>> round(c.capex_USD_per_h, 2), round(c.facility_USD_per_h, 2)
    (28.57, 14.66)
    >>> round(c.energy_USD_per_h, 2), round(c.USD_per_h, 2)
    (10.48, 53.71)
    >>> round(c.USD_per_Mtok, 3), c.J_per_token
    (1.492, 13.0)
    """
    a = assumptions or CostAssumptions()
    capex, it_W = capex_USD * share, it_power_W * share
    facility_W = it_W * a.pue
    per_h = (recovery_factor(a.cost_of_capital, a.amortisation_years) * capex
             / HOURS_PER_YEAR)
    facility = (recovery_factor(a.cost_of_capital, a.facility_years)
                * a.facility_USD_per_kW * it_W / 1e3 / HOURS_PER_YEAR)
    energy = facility_W / 1e3 * a.electricity_USD_per_kWh
    total = per_h + facility + energy
    rate = max(tokens_per_s, 0.0)
    return TokenCost(share, capex, it_W, facility_W, tokens_per_s, goodput, per_h, facility,
                     energy, total,
                     total / (rate * 3600.0) * 1e6 if rate else float("inf"),
                     facility_W / rate if rate else float("inf"), a)


def fabric_cost(fabric: Fabric, accelerators: int, tokens_per_s: float,
                assumptions: CostAssumptions | None = None, *, goodput: bool = False
                ) -> tuple[TokenCost, PowerSummary]:
    """:func:`token_cost` of a job on ``accelerators`` of ``fabric``, charged that share
    of the whole design's capex and power from its bill of materials (the network and
    the facility included: the rest of the cluster runs other jobs), and the bill's
    power summary (:func:`cost_warnings` says what its sums leave out).

    Examples
    --------
    A serving job on the 8 GPUs of one HGX H100 server (US$310,000, 10.2 kW) at 1,000
    output tokens/s, by hand: capex 310,000 x CRF(8 %, 5 y) 0.25046 / 8,766 = 8.857
    USD/h; facility 10.2 kW x 11,000 = 112,200 USD x CRF(8 %, 15 y) 0.11683 / 8,766 =
    1.495 USD/h; energy 10.2 kW x PUE 1.3 x 0.0806 = 1.069 USD/h; 11.42 USD/h over 3.6 M
    tokens an hour is 3.173 USD per million output tokens; 13.26 kW over 1,000 tokens/s
    is 13.26 J per output token. Half the server pays half of each term.

    >>> from topomodel.fabric.build import build_fabric
    >>> from topomodel.inputs.design import load_design
    >>> server = build_fabric(*load_design("examples/hgx-h100-server.yaml"))
    >>> cost, power = fabric_cost(server, 8, 1000.0)
    >>> power.capex_USD, power.total_W
    (310000.0, 10200.0)
    >>> round(cost.capex_USD_per_h, 3), round(cost.facility_USD_per_h, 3)
    (8.857, 1.495)
    >>> round(cost.energy_USD_per_h, 3), round(cost.USD_per_Mtok, 3), cost.J_per_token
    (1.069, 3.173, 13.26)
    >>> half, _ = fabric_cost(server, 4, 500.0)
    >>> half.share, round(half.USD_per_Mtok, 3)
    (0.5, 3.173)
    """
    power = power_summary(bill_of_materials(fabric), fabric.accelerator_count)
    share = accelerators / fabric.accelerator_count if fabric.accelerator_count else 1.0
    return token_cost(power.capex_USD or 0.0, power.total_W, tokens_per_s, assumptions,
                      share=share, goodput=goodput), power


def cost_warnings(power: PowerSummary) -> list[str]:
    """What a cost per token from ``power``'s sums leaves out: parts without a price or
    without a power figure."""
    warnings = [] if power.capex_complete else [
        f"cost per token leaves out parts without a price: {', '.join(power.unpriced)}"]
    if not power.complete:
        warnings.append("cost per token uses a partial power sum: no power figure for"
                        f" {', '.join(power.unknown)}")
    return warnings


SWAP_FORMS = ("lpo", "cpo")
"""The module forms the optics what-if puts in place of a pluggable (DSP) transceiver:
linear pluggable and co-packaged optics."""


@dataclass(frozen=True)
class OpticsSwap:
    """One tier's pluggable transceivers replaced by an LPO or CPO part of the same rate
    and at least the same reach: the change in power (watts) and capex (US dollars;
    ``None`` when either part has no price) over ``modules`` modules."""

    tier: str
    pluggable: str
    replacement: str
    form: str
    modules: int
    power_delta_W: float
    capex_delta_USD: float | None


def optics_swaps(lines: Sequence[BomLine], catalog: Catalog) -> list[OpticsSwap]:
    """Every (tier, pluggable, LPO or CPO part) the catalog allows: the replacement has
    the pluggable's one-way rate (within 1 %) and at least its reach, and both have a
    power figure. Empty where the catalog has no such pair."""
    out = []
    alternatives = [o for o in catalog.of_kind(Optic) if o.form in SWAP_FORMS]
    for line in lines:
        if line.category != "module" or line.unit_power_W is None:
            continue
        optic = catalog.get(line.model, Optic)
        if optic.form != "transceiver":
            continue
        for alt in alternatives:
            alt_W = part_power_W(alt)[0]
            if (alt_W is None or alt.reach_m < optic.reach_m
                    or not math.isclose(alt.rate_Bps, optic.rate_Bps, rel_tol=0.01)):
                continue
            price = catalog.price_of(alt.id)
            delta = (None if price is None or line.unit_price_USD is None
                     else (price.price_USD - line.unit_price_USD) * line.count)
            out.append(OpticsSwap(line.tier, optic.id, alt.id, alt.form, line.count,
                                  (alt_W - line.unit_power_W) * line.count, delta))
    return out
