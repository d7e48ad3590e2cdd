"""Colours and names the network diagrams share (the tiered topology, the torus grid):
link media, node kinds and the utilization colour map."""

from __future__ import annotations

UTILIZATION_CMAP = "viridis"
"""Perceptually uniform and readable in grey: dark = idle, yellow = saturated."""


MEDIUM_COLOURS = {"electrical": "#4d4d4d", "pcie": "#8c564b", "copper": "#d95f02",
                  "mmf": "#1b9e77", "smf": "#7570b3", "ocs": "#e7298a", "optical": "#66a61e",
                  "mixed": "#a6a6a6"}


MEDIUM_LABELS = {"electrical": "board / backplane", "pcie": "PCIe", "copper": "copper cable",
                 "mmf": "multimode optics", "smf": "single-mode optics",
                 "ocs": "optics + circuit switch", "optical": "optics",
                 "mixed": "mixed media"}


MEDIUM_SHORT = {"electrical": "board", "pcie": "PCIe", "copper": "copper", "mmf": "MMF",
                "smf": "SMF", "ocs": "OCS", "optical": "optics"}


KIND_COLOURS = {"accelerator": "#cfe2f3", "scaleup_switch": "#d9ead3", "nic": "#fce5cd",
                "switch": "#e4dcf1"}
