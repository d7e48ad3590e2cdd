"""Optical link budget per link class: channel insertion loss against the module's maximum.

    channel_loss_dB = length_km x fibre_loss_dB_per_km
                      + connectors x connector_loss_dB + splices x splice_loss_dB
                      (+ OCS_INSERTION_LOSS_DB through an optical circuit switch)

A link closes when ``channel_loss_dB <= max_channel_loss_dB`` (the IEEE/TIA way of
closing the budget: a naive Tx minus Rx subtraction is not the criterion) and its length
is within the module's reach. The margin is their difference in dB.
"""

from __future__ import annotations

from dataclasses import dataclass

from topomodel.fabric.cabling import OCS_INSERTION_LOSS_DB, cable_classes, channel_loss_dB
from topomodel.fabric.tables import Fabric
from topomodel.inputs.parts import Fibre, Optic

__all__ = ["OCS_INSERTION_LOSS_DB", "LinkBudget", "link_budgets"]


@dataclass(frozen=True)
class LinkBudget:
    """The budget of one optical link class (tier, module, length, through an OCS?)."""

    tier: str
    optic: str
    length_m: float
    links: int
    ocs: bool
    fibre: str
    channel_loss_dB: float | None
    max_channel_loss_dB: float | None
    margin_dB: float | None
    reach_m: float
    closes: bool | None  # None: within reach, no loss to check (no fibre or no maximum)
    note: str


OPTICAL_MEDIA = ("smf", "mmf", "ocs")
"""The media of fibre links, which have a budget."""


def link_budgets(fabric: Fabric) -> list[LinkBudget]:
    """A budget for every optical (fibre) link class of the fabric."""
    catalog = fabric.catalog
    layout = fabric.design.layout
    classes = fabric.derived(cable_classes)
    out = []
    for (tier, optic_id, length, med), cables in sorted(classes.items()):
        if med not in OPTICAL_MEDIA:
            continue
        count = cables // 2
        optic = catalog.get(str(optic_id), Optic)
        ocs = med == "ocs"
        within_reach = length <= optic.reach_m
        fibre = catalog.get(optic.fibre, Fibre) if optic.fibre else None
        reach_only = None if within_reach else False  # beyond reach: it does not close
        if fibre is None:
            out.append(LinkBudget(str(tier), optic.id, float(length), int(count), ocs, "",
                                  None, optic.max_channel_loss_dB, None, optic.reach_m,
                                  reach_only, "no fibre type in the catalog entry: reach"
                                  " checked only" + ("" if within_reach else "; beyond reach")))
            continue
        loss = channel_loss_dB(fibre, float(length), connectors=layout.connectors,
                               splices=layout.splices, ocs=ocs)
        maximum = optic.max_channel_loss_dB
        if maximum is None:
            out.append(LinkBudget(str(tier), optic.id, float(length), int(count), ocs,
                                  fibre.id, loss, None, None, optic.reach_m, reach_only,
                                  "no maximum channel loss published: reach checked only"
                                  + ("" if within_reach else "; beyond reach")))
            continue
        margin = maximum - loss
        closes = margin >= 0 and within_reach
        note = "" if closes else ("beyond reach" if not within_reach else
                                  f"channel loss exceeds the {maximum:g} dB maximum")
        out.append(LinkBudget(str(tier), optic.id, float(length), int(count), ocs, fibre.id,
                              loss, maximum, margin, optic.reach_m, closes, note))
    return out
