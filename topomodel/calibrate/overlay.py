"""A calibration as a catalog overlay: each fitted figure's entry copied from the catalog
file it came from, the figure replaced, ``figure_provenance`` ``measured`` and the source
naming the input file, and the systems made of NCCL topology dumps, written atomically
(:func:`topomodel.files.atomic_write`). Given with ``--catalog``, it overrides the
built-in entries of the same id on every verb. A figure fitted on a system the same
call's dump made (a design already on that system) is set in the dump's new entry.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

import yaml

from topomodel.calibrate.fit import Fitted
from topomodel.calibrate.nccltopo import TopologyImport
from topomodel.errors import UsageError
from topomodel.files import atomic_write
from topomodel.inputs.catalog import Catalog


def overlay_data(catalog: Catalog, fitted: Sequence[Fitted],
                 systems: Sequence[TopologyImport] = ()) -> dict[str, Any]:
    """The overlay's YAML data: one entry per fitted figure's entry, and the entries of
    each system made of an NCCL topology dump (:func:`.nccltopo.system_from_dump`).

    Raises
    ------
    UsageError
        When an entry's catalog file cannot be read again, or two inputs make entries
        of the same id.
    """
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for made in systems:
        for name, entries in made.overlay.items():
            for ident, made_entry in entries.items():
                if ident in out.get(name, {}):
                    raise UsageError(f"two NCCL topology dumps make {name} entry"
                                     f" {ident!r}: name them apart (their file names)")
                out.setdefault(name, {})[ident] = copy.deepcopy(made_entry)
    for figure in fitted:
        entry = catalog.entries[figure.entry]
        section = out.setdefault(figure.section, {})
        if figure.entry not in section:
            try:
                raw = yaml.safe_load(Path(entry.file).read_text(encoding="utf-8"))
                section[figure.entry] = copy.deepcopy(raw[figure.section][figure.entry])
            except (OSError, KeyError, TypeError, yaml.YAMLError) as exc:
                raise UsageError(f"{entry.file}: cannot read entry {figure.entry} again to"
                                 f" copy it into the overlay ({exc})") from None
        data = section[figure.entry]
        data[figure.key] = (f"{figure.after * 1e6:.4g} us" if figure.key == "launch_latency"
                            else round(figure.after, 4))
        data["figure_provenance"] = {**data.get("figure_provenance", {}),
                                     figure.key: "measured"}
        files = ", ".join(figure.files)
        earlier = re.sub(rf"; {re.escape(figure.key)}: measured \([^)]*\), topomodel"
                         " calibrate", "", str(data.get("source", "")))
        data["source"] = f"{earlier}; {figure.key}: measured ({files}), topomodel calibrate"
        notes = str(data.get("notes", "")).split(" Calibrated:")[0]
        data["notes"] = (f"{notes} Calibrated: {figure.key}"
                         f" {figure.before:.4g} -> {figure.after:.4g} on"
                         f" {len(figure.sizes)} sizes ({figure.sizes[0]:,}-"
                         f"{figure.sizes[-1]:,} B) of {files}; relative time residual rms"
                         f" {figure.rms_before:.1%} before, {figure.rms_after:.1%} after."
                         ).strip()
    return out


def overlay_text(catalog: Catalog, fitted: Sequence[Fitted],
                 systems: Sequence[TopologyImport] = ()) -> str:
    """The overlay as the text of a catalog file (see :func:`overlay_data`)."""
    return ("# Catalog overlay written by topomodel calibrate: give it with --catalog.\n"
            + yaml.safe_dump(overlay_data(catalog, fitted, systems), sort_keys=False,
                             width=88))


def write_overlay(path: str | Path, catalog: Catalog, fitted: Sequence[Fitted],
                  systems: Sequence[TopologyImport] = ()) -> Path:
    """Write the overlay of ``fitted`` (and ``systems``) to ``path`` atomically;
    returns the path."""
    text = overlay_text(catalog, fitted, systems)

    def write(stream: IO[bytes]) -> None:
        stream.write(text.encode("utf-8"))

    return atomic_write(path, write)
