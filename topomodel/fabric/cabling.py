"""Cable and module choice by reach and link budget: copper inside a rack, optics between
racks, and through an optical circuit switch an optic whose budget covers the switch.

Each link tier gets a length from the design's layout. For each (tier, rate) the
lowest-power catalog cable or module whose rate covers the link without exceeding it by
more than :data:`MAX_PART_TO_LINK_RATE` (a part fits the port), whose reach covers the
length and, where it publishes a maximum channel loss, whose budget covers the channel
(:func:`channel_loss_dB`: fibre, connectors, splices and any OCS) is chosen, unless the
layout names one. A link through an OCS takes only an optic with a published maximum
channel loss: a budget that cannot be checked is not taken to close. One module per link
end is assumed
(a twin-port module carrying two links would halve the count; name it in
``layout.cables`` and the BOM counts it as one per link end all the same).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, cast

import numpy as np

from topomodel.errors import UsageError
from topomodel.fabric.columns import Category, Columns, group_totals
from topomodel.fabric.scaleup import scaleup_kind
from topomodel.fabric.tables import (
    MEDIA,
    PROPAGATION_S_PER_M,
    Fabric,
    cable_group,
    ignores_failures,
)
from topomodel.inputs.catalog import Catalog
from topomodel.inputs.design import Design
from topomodel.inputs.parts import Fibre, Optic
from topomodel.inputs.records import documented

if TYPE_CHECKING:
    import pandas as pd

OCS_INSERTION_LOSS_DB = documented(
    "linkbudget.OCS_INSERTION_LOSS_DB", 2.0,
    """Added loss through one optical circuit switch, dB (a MEMS OCS: Google's Palomar,
    Urata et al., "Mission Apollo", arXiv 2208.10041, reports insertion loss below 2 dB,
    secondary; taken at that upper end). The cable choice and the link budget both add
    it, so a link through an OCS gets an optic whose budget covers it.""")

MAX_PART_TO_LINK_RATE = documented(
    "cabling.MAX_PART_TO_LINK_RATE", 2.0,
    """Largest ratio of a part's rate to the rate of a link it serves. A module carries a
    link on some of its lanes at the lane rate of the port: one port of a twin-port
    module (an 800G OSFP is 2 x 400G, NVIDIA MMS4X00-NS / MMA4Z00-NS) or a documented
    reduced mode on half the lanes (NVIDIA's 400G SR4/DR4 in 200G mode), so up to 2.
    Wider breakouts (800G to 4 x 200G, 400G DR4 to 4 x 100G DR1) are real but put a
    different part at the far end and several links on one module, which one part per
    link end cannot count; and a part far above the link rate does not fit the port
    (an 800G OSFP does not plug into an SFP28 or QSFP56 cage). A part named in
    ``layout.cables`` is held to the same ratio. A what-if that scales link rates
    (``--scaleout-factor``) falls back to any faster part where none is within the
    ratio: its rates are hypothetical, with no port to fit.""")

_LENGTH_KEY = {"leaf": "row_cable", "spine": "spine_cable", "core": "core_cable",
               "scaleup": "scaleup_cable", "scaleup_l2": "scaleup_cable",
               "scaleup_l3": "scaleup_cable"}
"""The layout key (as written in the design file) of each cabled tier's length."""


_RATIO_NOTE = f"; only parts of 1 to {MAX_PART_TO_LINK_RATE:g}x the link rate fit its port"
"""How messages state :data:`MAX_PART_TO_LINK_RATE`."""


def tier_length_m(design: Design, tier: str) -> float:
    """Cable length of a link tier from the layout, metres."""
    layout = design.layout
    if tier == "leaf" and layout.leaf_in_rack:
        return layout.rack_cable_m
    scaleup = layout.scaleup_cable_m
    return {"leaf": layout.row_cable_m, "spine": layout.spine_cable_m,
            "core": layout.core_cable_m, "scaleup": scaleup, "scaleup_l2": scaleup,
            "scaleup_l3": scaleup}[tier]


def channel_loss_dB(fibre: Fibre, length_m: float, *, connectors: int, splices: int,
                    ocs: bool) -> float:
    """Insertion loss of an optical channel, dB: fibre attenuation over ``length_m``, the
    mated connector pairs and splices, and :data:`OCS_INSERTION_LOSS_DB` through an OCS.

    Examples
    --------
    >>> from topomodel.inputs.catalog import load_catalog
    >>> os2 = load_catalog().get("os2", Fibre)  # 0.4 dB/km, 0.75 dB per connector pair
    >>> round(channel_loss_dB(os2, 50, connectors=2, splices=0, ocs=True), 3)
    3.52
    """
    return (length_m / 1000 * fibre.loss_dB_per_km + connectors * fibre.connector_loss_dB
            + splices * fibre.splice_loss_dB + (OCS_INSERTION_LOSS_DB if ocs else 0.0))


def _carries(optic: Optic, rate_Bps: float, length_m: float,
             max_ratio: float | None = MAX_PART_TO_LINK_RATE) -> bool:
    """Whether ``optic`` serves links of ``rate_Bps`` over ``length_m``: rate at least the
    link's and at most ``max_ratio`` times it (no limit with ``None``), reach at least the
    length."""
    return (rate_Bps * (1 - 1e-9) <= optic.rate_Bps
            and (max_ratio is None or optic.rate_Bps <= rate_Bps * max_ratio * (1 + 1e-9))
            and optic.reach_m >= length_m)


def _closes(catalog: Catalog, optic: Optic, design: Design | None, length_m: float,
            ocs: bool) -> bool:
    """Whether ``optic``'s budget covers the channel: always for a part without a
    published maximum (reach is its only check), except through an OCS, which needs
    one."""
    if optic.max_channel_loss_dB is None or optic.fibre is None:
        return not ocs
    if design is None:
        return True
    layout = design.layout
    loss = channel_loss_dB(catalog.get(optic.fibre, Fibre), length_m,
                           connectors=layout.connectors, splices=layout.splices, ocs=ocs)
    return loss <= optic.max_channel_loss_dB


def choose_optic(catalog: Catalog, rate_Bps: float, length_m: float, *,
                 design: Design | None = None, ocs: bool = False,
                 max_ratio: float | None = MAX_PART_TO_LINK_RATE) -> Optic | None:
    """Lowest-power cable or module with rate from ``rate_Bps`` (bytes/s) to ``max_ratio``
    times it (by default :data:`MAX_PART_TO_LINK_RATE`; ``None``: any faster part), reach
    >= ``length_m`` (metres) and, with
    ``design`` (its connectors and splices), a budget that covers the channel
    (through an OCS with ``ocs``: only parts with a published maximum channel loss).

    Power is the part's maximum, else its typical figure; entries without either come
    last: an unknown power is not a low one.

    Examples
    --------
    >>> from topomodel.inputs.catalog import load_catalog
    >>> catalog = load_catalog()
    >>> choose_optic(catalog, 50e9, 2.0).form  # 400G at 2 m: passive copper
    'dac'
    >>> choose_optic(catalog, 50e9, 50.0).id  # 400G at 50 m: the 9 W single-mode DR4
    'osfp-400g-dr4'
    >>> choose_optic(catalog, 25e9 / 8, 30.0).id  # 25G at 30 m: an SFP28 SR, not 800G
    'sfp28-25g-sr'
    >>> choose_optic(catalog, 10e9 / 8, 30.0).id  # 10G at 30 m: an SFP+ SR
    'sfpp-10g-sr'
    >>> choose_optic(catalog, 40e9 / 8, 30.0) is None  # 40G: no part in the catalog
    True
    """
    fits = [o for o in catalog.of_kind(Optic) if _carries(o, rate_Bps, length_m, max_ratio)
            and ((design is None and not ocs) or _closes(catalog, o, design, length_m, ocs))]
    if not fits:
        return None
    def power(optic: Optic) -> float | None:
        return optic.power_W if optic.power_W is not None else optic.power_typical_W

    return min(fits, key=lambda o: (power(o) is None, power(o) or 0.0, o.rate_Bps, o.id))


@ignores_failures
def cable_classes(fabric: Fabric) -> dict[tuple[str, str, float, str], int]:
    """Cables of every link row (both directions, failed ones too) per link class:
    (tier, optic, ``length_m``, medium), in the order of the tier's and the optic's
    codes, then ascending length, then the medium's code. Read it with
    :meth:`~topomodel.fabric.tables.Fabric.derived`: one pass over the rows per fabric,
    for the link budgets and the bill of materials alike (shared: read it, never change
    it)."""
    links = fabric.link_arrays
    classes = group_totals([links[k] for k in ("tier", "optic", "length_m", "medium")],
                           links["cables"], None)
    return cast(dict[tuple[str, str, float, str], int], classes)


@dataclass(frozen=True, eq=False)
class Cabling:
    """The cabled columns of a link table: ``length_m`` (metres), ``medium`` (codes into
    :data:`~topomodel.fabric.tables.MEDIA`) and each row's optic, ``optic_codes`` into
    ``optic_ids`` ('' for none)."""

    length_m: np.ndarray
    medium: np.ndarray
    optic_codes: np.ndarray
    optic_ids: list[str]


def assign_cables(links: pd.DataFrame, design: Design, catalog: Catalog, *,
                  tiers: Collection[str] | None = None, whatif: str | None = None) -> None:
    """Set ``length_m``, ``medium``, ``optic`` and ``latency_s`` of cabled links of a
    pandas link table in place (:func:`recabled`; it raises what that raises)."""
    cabled = recabled(Columns.of_frame(links), design, catalog, tiers=tiers, whatif=whatif)
    frame = cabled.frame()
    for column in ("length_m", "medium", "optic", "latency_s"):
        links[column] = frame[column]


def recabled(links: Columns, design: Design, catalog: Catalog, *,
             tiers: Collection[str] | None = None, whatif: str | None = None) -> Columns:
    """``links`` with the ``length_m``, ``medium``, ``optic`` and ``latency_s`` of
    :func:`cable_links` on its columns (it raises what that raises); the other columns
    shared."""
    rates, rate_codes = np.unique(links["rate_Bps"], return_inverse=True)
    tier, optic = links["tier"], links["optic"]
    groups = cable_group(tier.codes, rate_codes.ravel(), len(rates), links["medium"].codes)
    cabling = cable_links(groups, tier.categories, np.asarray(rates, float), design, catalog,
                          tiers=tiers, whatif=whatif, length_m=links["length_m"],
                          optic=(optic.codes, optic.categories) if whatif else None)
    return links.replaced(length_m=cabling.length_m, medium=Category(cabling.medium, MEDIA),
                          optic=Category(cabling.optic_codes, cabling.optic_ids),
                          latency_s=cabling.length_m * PROPAGATION_S_PER_M)


# PLR0913: keyword-only options of an entry point, as networkx's; a record would hide them
def cable_links(groups: np.ndarray, tier_names: Sequence[str], rates_Bps: np.ndarray,  # noqa: PLR0913
                design: Design, catalog: Catalog, *,
                tiers: Collection[str] | None = None, whatif: str | None = None,
                length_m: np.ndarray | None = None,
                optic: tuple[np.ndarray, Sequence[str]] | None = None) -> Cabling:
    """Length, medium and optic of every link row: one choice per link tier and rate,
    the same for every row of the group.

    ``groups`` is each row's :func:`~topomodel.fabric.tables.cable_group` of its tier
    (a code into ``tier_names``), its rate (a code into ``rates_Bps``, ascending,
    bytes/s) and its medium (a code into :data:`~topomodel.fabric.tables.MEDIA`). Rows
    that are not cabled keep their medium, ``length_m`` and ``optic`` (codes, ids) as
    given (0 and '' when not given).

    Board and backplane links (scale-up inside a system) and host links stay as built,
    and so does every scale-up tier of a PCIe server (GPU, PCIe switch and socket links
    are all on the board).
    ``tiers`` limits the choice to those link tiers (the others keep their parts).
    ``whatif`` names a what-if that changed link rates (``--scaleout-factor 4``): the
    links are re-cabled for their new rate, a part the layout names is kept only where
    it still carries the rate, a rate no part of 1 to :data:`MAX_PART_TO_LINK_RATE` times
    it serves gets the lowest-power faster part (a scaled rate such as 2.2 Gb/s has no
    real port to fit), and a rate no catalog part carries over the tier's
    length is refused with a :class:`~topomodel.errors.UsageError` naming the what-if.

    Raises
    ------
    DesignError
        When no part (or not the named part) carries a tier's links as designed.
    UsageError
        When ``whatif`` is given and no part carries a tier's faster links.
    """
    from topomodel.inputs.parts import System

    system = catalog.entries.get(design.system)
    board_only = isinstance(system, System) and scaleup_kind(
        design.scaleup.kind or system.scaleup.kind).board_only
    media, rates = len(MEDIA), len(rates_Bps)
    size = len(tier_names) * rates * media
    rows = np.bincount(groups, minlength=size)
    # every group's tier, rate and medium, and whether its rows are cabled
    tier_of, medium_of = np.arange(size) // (rates * media), np.arange(size) % media
    tier_cabled = np.array([not (tier == "host" or (board_only and tier.startswith("scaleup"))
                                 or (tiers is not None and tier not in tiers))
                            for tier in tier_names])
    cabled = tier_cabled[tier_of] & (rows > 0)
    if "scaleup" in tier_names:  # board and backplane links are not cabled
        cabled &= ~((tier_of == tier_names.index("scaleup"))
                    & (medium_of == MEDIA.index("electrical")))
    ocs = MEDIA.index("ocs")
    optic_ids = list(optic[1]) if optic is not None else [""]
    group_length = np.zeros(size)
    group_optic = np.zeros(size, np.int16)
    group_medium = medium_of.astype(np.int8)
    # one choice per (tier, rate), in tier-code order, then ascending rate
    by_choice = cabled.reshape(-1, media)  # a row per (tier, rate), a column per medium
    for choice in np.flatnonzero(by_choice.any(axis=1)).tolist():
        tier, link_rate = tier_names[choice // rates], float(rates_Bps[choice % rates])
        members = choice * media + np.flatnonzero(by_choice[choice])  # its groups
        meters = tier_length_m(design, tier)
        chosen = _part_for(design, catalog, tier, link_rate, meters,
                           through_ocs=bool((medium_of[members] == ocs).any()), whatif=whatif)
        group_length[members] = meters
        if chosen.id not in optic_ids:
            optic_ids.append(chosen.id)
        group_optic[members] = optic_ids.index(chosen.id)
        group_medium[members[medium_of[members] != ocs]] = MEDIA.index(chosen.medium)
    length, optic_codes = group_length[groups], group_optic[groups]
    if length_m is not None or optic is not None:
        row_cabled = cabled[groups]
        if length_m is not None:
            length = np.where(row_cabled, length, length_m)
        if optic is not None:
            optic_codes = np.where(row_cabled, optic_codes, optic[0])
    return Cabling(length, group_medium[groups], optic_codes, optic_ids)


def _part_for(design: Design, catalog: Catalog, tier: str, link_rate: float, meters: float,
              *, through_ocs: bool, whatif: str | None) -> Optic:
    """The cable or module for ``tier``'s links of ``link_rate`` (bytes/s) over
    ``meters``: the layout's named part, else the catalog's choice (see
    :func:`cable_links`).

    Raises
    ------
    DesignError
        When no part (or not the named part) carries the links as designed.
    UsageError
        When ``whatif`` is given and no part carries the faster links.
    """
    named = design.layout.cables.get(tier)
    chosen = catalog.get(named, Optic) if named else None
    if chosen is None or (whatif and not _carries(chosen, link_rate, meters)):
        chosen = choose_optic(catalog, link_rate, meters, design=design, ocs=through_ocs)
    if chosen is None and whatif:  # a hypothetical rate has no port to fit
        chosen = choose_optic(catalog, link_rate, meters, design=design, ocs=through_ocs,
                              max_ratio=None)
    if chosen is None and whatif:
        raise UsageError(f"{whatif}: no cable or module in the catalog carries"
                         f" {link_rate * 8 / 1e9:g} Gb/s over {meters:g} m ({tier}"
                         " links); add one to a catalog to model this what-if")
    if chosen is None:
        raise design.problem(
            ("layout", "leaf_in_rack" if tier == "leaf" and design.layout.leaf_in_rack
             else _LENGTH_KEY[tier]),
            f"no cable or module in the catalog reaches {meters:g} m at"
            f" {link_rate * 8 / 1e9:g} Gb/s ({tier} links{_RATIO_NOTE})"
            + (" with a published channel-loss budget covering the optical"
               f" circuit switch's {OCS_INSERTION_LOSS_DB:g} dB" if through_ocs
               else "") + "; add a part for this rate to a catalog")
    if not whatif and not _carries(chosen, link_rate, meters):  # a named part
        raise design.problem(("layout", "cables", tier),
                             f"{chosen.id} ({chosen.rate_Bps * 8 / 1e9:g} Gb/s, reach"
                             f" {chosen.reach_m:g} m) cannot carry {tier} links of"
                             f" {link_rate * 8 / 1e9:g} Gb/s over {meters:g} m"
                             f" ({_RATIO_NOTE.lstrip('; ')})")
    return chosen
