"""Build a :class:`~topomodel.fabric.tables.Fabric` from a design: scale-up, then scale-out.

Scale-up kinds are the modules of :mod:`topomodel.fabric.scaleup` (``switched``: each
accelerator's links spread over in-system switch chips; ``full_mesh``; ``torus``:
n-dimensional, with or without wraparound, across systems, optionally through optical
circuit switches; ``supernode``: in-system switch chips joined per plane by a Clos of
upper-level switch chips; ``pcie``; ``none``), each wiring its own domains. Scale-out kinds
are the modules of :mod:`topomodel.fabric.scaleout` (``fat_tree``: 1-3 tiers,
rail-optimized or not, several planes; ``rail_only``; ``none``), each building its own
part. Everything is generated with array arithmetic: no per-link Python loops.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from topomodel.fabric.cabling import cable_links
from topomodel.fabric.clos import DEFAULT_SWITCH_LATENCY_S as DEFAULT_SWITCH_LATENCY_S
from topomodel.fabric.columns import Category, Columns
from topomodel.fabric.failures import mark_failures
from topomodel.fabric.scaleout import scaleout_kind
from topomodel.fabric.scaleup import build_scaleup, scaleup_kind
from topomodel.fabric.structure import ScaleoutStructure, Structure, measure_injection
from topomodel.fabric.tables import (
    LINK_TIERS,
    ClosTier,
    Fabric,
    FabricBuilder,
    link_table,
    node_names,
    numbered,
)
from topomodel.inputs.catalog import Catalog
from topomodel.inputs.design import Design
from topomodel.inputs.parts import System
from topomodel.limits import BYTES_PER_ACCELERATOR, BYTES_PER_LINK, above


def build_fabric(design: Design, catalog: Catalog) -> Fabric:
    """Build the fabric a design describes.

    Raises
    ------
    DesignError
        When the design asks for a fabric that cannot be built (a torus shape that does
        not match the count, a radix that cannot give the oversubscription, a unit size
        that does not divide, an unknown failed part), or one larger than the limits of
        :mod:`topomodel.limits` (checked before anything is allocated).
    """
    system = catalog.get(design.system, System)
    n_systems = design.systems if design.systems is not None else (
        (design.accelerators or 0) // system.accelerators)
    per_system = system.accelerators
    check_size(design, system, n_systems)
    builder = FabricBuilder()
    sys_index = np.repeat(np.arange(n_systems), per_system)
    local = np.tile(np.arange(per_system), n_systems)
    prefixes = [f"{name}/" for name in numbered("sys", n_systems)]
    acc = builder.add_nodes(node_names(prefixes, numbered("acc", per_system)),
                            kind="accelerator", tier="accelerator", model=system.accelerator,
                            system=sys_index, local=local)
    domains, scaleup = build_scaleup(builder, design, catalog, system,
                                      acc.reshape(n_systems, per_system))
    clos, scaleout = build_scaleout(builder, design, catalog, system,
                                    acc.reshape(n_systems, per_system), prefixes)
    node_columns = builder.node_columns()
    kind = node_columns["kind"]
    kind_codes = np.asarray(kind.codes)
    is_nic = kind_codes == _code(kind, "nic")
    node_columns["domain"][kind_codes == _code(kind, "accelerator")] = domains
    node_columns["domain"][is_nic] = np.repeat(
        domains.reshape(n_systems, per_system)[:, 0], scaleout.nics_per_system)
    link_columns = builder.link_columns()
    groups, rates = builder.cable_groups()
    cabling = cable_links(groups, LINK_TIERS, rates, design, catalog)  # at the line rates
    _set_port_directions(is_nic, link_columns, design)
    nodes = Columns(node_columns)  # fresh arrays, each its own column
    links = link_table({**link_columns, "medium": cabling.medium}, length_m=cabling.length_m,
                       optic_codes=cabling.optic_codes, optic_ids=cabling.optic_ids)
    links = mark_failures(nodes, links, design)
    structure = Structure(n_systems, per_system, scaleup, scaleout)
    reverse_rows = builder.reverse_rows()
    return Fabric(design, catalog, nodes, links, structure,
                  measure_injection(nodes, links, structure, reverse_rows), reverse_rows,
                  tuple(clos))


def structure_dict(structure: Structure) -> dict[str, Any]:
    """Plain types under the keys of ``topomodel build``'s JSON ``structure`` object: the
    counts, the scale-up kind and its keys (:meth:`ScaleupKind.json_keys
    <topomodel.fabric.scaleup.kind.ScaleupKind.json_keys>`), the scale-out's.

    Examples
    --------
    >>> from topomodel.fabric.structure import ScaleupStructure
    >>> structure_dict(Structure(2, 8, ScaleupStructure("none"), ScaleoutStructure("none")))
    {'systems': 2, 'accelerators_per_system': 8, 'scaleup': 'none', 'scaleout': 'none'}
    """
    return {"systems": structure.systems,
            "accelerators_per_system": structure.accelerators_per_system,
            "scaleup": structure.scaleup.kind,
            **scaleup_kind(structure).json_keys(structure.scaleup),
            **structure.scaleout.as_dict()}


def _code(column: Category, label: str) -> int:
    """The code of ``label`` in a categorical (-1, matching no row, if it has none)."""
    categories = list(column.categories)
    return categories.index(label) if label in categories else -1


def _set_port_directions(is_nic: np.ndarray, link_columns: dict[str, np.ndarray],
                         design: Design) -> None:
    """Give the NIC-to-leaf and leaf-to-NIC rows (``is_nic``: per node) the design's
    per-direction rates (``port_rate_up``, ``port_rate_down``): their ``capacity_Bps``
    in ``link_columns`` (:meth:`FabricBuilder.link_columns`), which routing and timing
    use. ``rate_Bps`` stays the port's line rate, which the cables, optics and switch
    ports are chosen for."""
    out = design.scaleout
    if not (out.port_rate_up_Bps or out.port_rate_down_Bps):
        return
    leaf = link_columns["tier"] == LINK_TIERS.index("leaf")
    cables = link_columns["cables"]
    for rate, end in ((out.port_rate_up_Bps, "src"), (out.port_rate_down_Bps, "dst")):
        if rate:
            rows = leaf & is_nic[link_columns[end]]
            link_columns["capacity_Bps"][rows] = cables[rows] * rate


def check_size(design: Design, system: System, n_systems: int) -> None:
    """Refuse a fabric above the limits of :mod:`topomodel.limits`, before it is built.

    Raises
    ------
    DesignError
        At the design key that sets the count: accelerators, scale-up links, NICs per
        system or planes, with the memory the fabric would take.
    """
    count_key = ("systems",) if design.systems is not None else ("accelerators",)
    per_system = system.accelerators
    accelerators = n_systems * per_system
    refusal = above(accelerators, "MAX_ACCELERATORS", "accelerators", BYTES_PER_ACCELERATOR)
    if refusal:
        raise design.problem(count_key, refusal)
    kind = design.scaleup.kind or system.scaleup.kind
    per_system_links = scaleup_kind(kind).links_per_system(system)
    refusal = above(n_systems * per_system_links, "MAX_SCALEUP_LINKS",
                    f"scale-up links ({kind}, {per_system_links:,} per system)",
                    BYTES_PER_LINK)
    if refusal:
        raise design.problem(count_key, refusal)
    out = design.scaleout
    if not scaleout_kind(out.kind).has_network:
        return
    nics = out.nics_per_system or system.nic_count or per_system
    refusal = above(nics, "MAX_NICS_PER_SYSTEM", "NICs per system")
    if refusal:
        key = ("scaleout", "nics_per_system") if out.nics_per_system else ("system",)
        raise design.problem(key, refusal)
    refusal = above(n_systems * nics, "MAX_ACCELERATORS", "NICs", BYTES_PER_ACCELERATOR)
    if refusal:  # (planes are checked with the design, before the rates they split)
        raise design.problem(count_key, refusal)


def build_scaleout(builder: FabricBuilder, design: Design, catalog: Catalog,
                   system: System, acc: np.ndarray, prefixes: list[str]
                   ) -> tuple[list[ClosTier], ScaleoutStructure]:
    """Wire the design's scale-out network by its kind
    (:func:`~topomodel.fabric.scaleout.scaleout_kind`); return its switch tiers as sized
    and what was built."""
    return scaleout_kind(design.scaleout.kind).build(builder, design, catalog, system, acc,
                                                     prefixes)
