"""The provenance of every catalog figure a review used, the bibliography of the source
tags they cite, and the input files (with their hashes) the review was made from."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from topomodel.fabric.tables import Fabric, present_labels

if TYPE_CHECKING:
    from topomodel.inputs.parts import Model


PROVENANCE_ORDER = ("datasheet", "paper", "secondary", "measured", "derived", "unverified",
                    "assumed")


def review_provenance(fabric: Fabric, model: Model | None = None,
                      more: Sequence[str] = ()) -> list[dict[str, Any]]:
    """Every catalog entry the design uses (and the model, and the ``more`` ids such as
    the failure rates of the goodput section), with each figure's value and provenance
    (datasheet, paper, secondary, measured, derived, unverified, assumed)."""
    from topomodel.inputs.parts import Optic, System
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
                    "source": entry.source, "notes": entry.notes,
                    "provenance": entry.provenance,
                    "file": entry.file, "line": entry.line, "figures": figures})
    return out


def review_inputs(fabric: Fabric, *, now: datetime | None = None) -> dict[str, Any]:
    """When and from what the review was made: ``generated_utc`` (ISO 8601),
    ``topomodel_version``, and ``files``: every input file (the design, every catalog
    file loaded: built-in, the design's own and the caller's) with its ``role``,
    ``bytes`` and ``sha256``, so a reader can tell whether a report is of the files at
    hand."""
    from topomodel import __version__
    from topomodel.inputs.catalog import builtin_catalog_files

    catalog = fabric.catalog
    builtin = [str(p) for p in builtin_catalog_files()]
    others = sorted(({e.file for e in catalog.entries.values()}
                     | {o.replaced_file for o in catalog.overrides}) - set(builtin))
    files = [(fabric.design.file, "design"), *((f, "built-in catalog") for f in builtin),
             *((f, "catalog") for f in others)]
    rows = []
    for path, role in dict.fromkeys(files):
        data = Path(path).read_bytes() if Path(path).is_file() else None
        rows.append({"file": path, "role": role,
                     "bytes": None if data is None else len(data),
                     "sha256": None if data is None else hashlib.sha256(data).hexdigest()})
    moment = (now or datetime.now(timezone.utc)).astimezone(timezone.utc)
    return {"generated_utc": moment.isoformat(timespec="seconds"),
            "topomodel_version": __version__, "files": rows}


def review_bibliography(provenance: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every source tag (``[S27]``) the entries of ``provenance`` cite, in their source or
    notes, with the citation shipped in the package (:mod:`topomodel.inputs.sources`), its date
    and kind, and the entries citing it; a tag the package does not know says so."""
    from topomodel.inputs.sources import bibliography, cited_tags

    cited_by: dict[str, list[str]] = {}
    for item in provenance:
        for tag in cited_tags(f"{item['source']} {item.get('notes', '')}"):
            cited_by.setdefault(tag, []).append(item["id"])
    known = bibliography()

    def order(tag: str) -> tuple[str, int, str]:
        digits = "".join(c for c in tag[1:] if c.isdigit())
        return tag[0], int(digits or 0), tag[1 + len(digits):]

    out = []
    for tag in sorted(cited_by, key=order):
        citation = known.get(tag)
        out.append({"tag": tag, "citation": citation.text if citation else
                    "(not in the package's bibliography)",
                    "date": citation.date if citation else "",
                    "kind": citation.kind if citation else "",
                    "cited_by": cited_by[tag]})
    return out
