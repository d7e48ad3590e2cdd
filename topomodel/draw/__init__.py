"""Diagrams and charts.

- :mod:`.layout`: where the topology diagram puts its boxes and bundles, as plain
  numbers (no matplotlib);
- :mod:`.topology`: the topology figure;
- :mod:`.torus`: a torus drawn as its grid, a panel per z-plane;
- :mod:`.palette`: the colours both share;
- :mod:`.charts`: per-tier utilization, the step's time split, scaling curves, the
  Pareto front;
- :mod:`.text`: text sizes and fitting;
- :mod:`.io`: figures to PNG, SVG or PDF files and bytes.

The names below are loaded on first use, so ``import topomodel.draw.layout`` does not
import matplotlib.
"""

from __future__ import annotations

import importlib
from typing import Any

_HOMES = {
    "layout": ("AUTO_FULL_MAX_NODES", "DETAILS", "FULL_MAX_NODES", "MAX_COLUMNS",
               "MIN_COLUMNS", "Box", "Bundle", "TopologyLayout", "resolve_detail",
               "topology_layout"),
    "topology": ("MAX_WIDTH_IN", "MIN_WIDTH_IN", "drawn_texts", "text_overlaps",
                 "topology_figure"),
    "charts": ("pareto_figure", "plot_front", "scaling_figure", "step_figure",
               "tier_utilization_figure"),
    "io": ("DPI", "FIGURE_FORMATS", "figure_bytes", "figure_format", "save_figure"),
}
_MODULE_OF = {name: module for module, names in _HOMES.items() for name in names}
__all__ = sorted(_MODULE_OF)


def __getattr__(name: str) -> Any:
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)
