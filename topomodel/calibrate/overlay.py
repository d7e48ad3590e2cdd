"""A calibration as a catalog overlay: each fitted figure's entry copied from the catalog
file it came from, the figure replaced, ``figure_provenance`` ``measured`` and the source
naming the input file, written atomically (:func:`topomodel.files.atomic_write`). Given
with ``--catalog``, it overrides the built-in entries of the same id on every verb.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

import yaml

from topomodel.calibrate.fit import Fitted
from topomodel.errors import UsageError
from topomodel.files import atomic_write
from topomodel.inputs.catalog import Catalog


def overlay_data(catalog: Catalog, fitted: Sequence[Fitted]) -> dict[str, Any]:
    """The overlay's YAML data: one entry per fitted figure's entry.

    Raises
    ------
    UsageError
        When an entry's catalog file cannot be read again.
    """
    out: dict[str, dict[str, Any]] = {}
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


def write_overlay(path: str | Path, catalog: Catalog, fitted: Sequence[Fitted]) -> Path:
    """Write the overlay of ``fitted`` to ``path`` atomically; returns the path."""
    text = ("# Catalog overlay written by topomodel calibrate: give it with --catalog.\n"
            + yaml.safe_dump(overlay_data(catalog, fitted), sort_keys=False, width=88))

    def write(stream: IO[bytes]) -> None:
        stream.write(text.encode("utf-8"))

    return atomic_write(path, write)
