"""The provenance of every catalog figure a review used."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from topomodel.fabric.tables import Fabric, present_labels

if TYPE_CHECKING:
    from topomodel.catalog import Model


PROVENANCE_ORDER = ("datasheet", "paper", "secondary", "derived", "unverified", "assumed")


def review_provenance(fabric: Fabric, model: Model | None = None,
                      more: Sequence[str] = ()) -> list[dict[str, Any]]:
    """Every catalog entry the design uses (and the model, and the ``more`` ids such as
    the failure rates of the goodput section), with each figure's value and provenance
    (datasheet, paper, secondary, derived, unverified, assumed)."""
    from topomodel.catalog import Optic, System
    from topomodel.report.catalog import catalog_show

    catalog = fabric.catalog
    s = fabric.structure
    system = catalog.get(fabric.design.system, System)
    ids: list[str] = [system.id]
    ids += sorted(set(present_labels(fabric.nodes["model"])) - {system.id})
    ids += [ident for ident in (s.scaleup.link, s.scaleout.host_link) if ident]
    optics = sorted(set(present_labels(fabric.links["optic"])) - {""})
    ids += optics
    ids += sorted({o.fibre for o in (catalog.get(i, Optic) for i in optics) if o.fibre})
    if model is not None:
        ids.append(model.id)
    ids += more
    out = []
    for ident in dict.fromkeys(ids):
        entry = catalog.entries[ident]
        sheet = catalog_show(catalog, ident)
        figures = [{"key": r["key"], "value": r["value"], "provenance": r["provenance"]}
                   for r in sheet.tables[1].rows]
        out.append({"id": ident, "kind": entry.kind, "name": entry.title,
                    "source": entry.source, "provenance": entry.provenance,
                    "file": entry.file, "line": entry.line, "figures": figures})
    return out
