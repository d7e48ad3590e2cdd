"""What a plan reads of the whole fabric besides its layouts: its known power and its
cost per hour (the ``tokens_per_J`` and ``cost_per_token`` objectives)."""

from __future__ import annotations

from topomodel.analysis.assumptions import CostAssumptions
from topomodel.fabric.tables import Fabric


def fabric_USD_per_h(fabric: Fabric, assumptions: CostAssumptions) -> float:
    """The whole fabric's cost per hour, US dollars: capex and facility amortised plus
    energy (:func:`~topomodel.analysis.cost.token_cost`); capex counts the parts with a
    price."""
    from topomodel.analysis.bom import bill_of_materials, power_summary
    from topomodel.analysis.cost import token_cost

    power = power_summary(bill_of_materials(fabric), fabric.accelerator_count)
    return token_cost(power.capex_USD or 0.0, power.total_W, 1.0, assumptions).USD_per_h


def fabric_power_W(fabric: Fabric) -> float:
    """The fabric's known power (accelerators and network), watts."""
    from topomodel.analysis.bom import bill_of_materials, power_summary

    return float(power_summary(bill_of_materials(fabric), fabric.accelerator_count).total_W)
