"""The torus diagram: one torus domain drawn as its grid, a panel per z-plane.

A torus (or mesh) is drawn as what it is, not as a tier of boxes: each accelerator a
square at its coordinates, each link between neighbours a segment, each wrap-around link
a stub leaving the grid's edge (it closes on the opposite edge). A 3D torus is drawn as
small multiples, one panel per plane along its third dimension; the links between
planes are not drawn (the footnote counts them). Links are coloured by medium, or by
utilization when a load is given (the busier direction of the busiest parallel link).
"""

from __future__ import annotations

import math

import numpy as np
from matplotlib.collections import LineCollection
from matplotlib.colors import Normalize
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from topomodel.draw.io import DPI
from topomodel.draw.palette import (
    KIND_COLOURS,
    MEDIUM_COLOURS,
    MEDIUM_LABELS,
    UTILIZATION_CMAP,
)
from topomodel.draw.text import fit_text, wrap_text
from topomodel.fabric.tables import Fabric

PITCH_IN = 0.19
"""Distance between neighbouring accelerators, inches: a 16 x 16 plane is 3 inches, so
the 4 x 4 panels of a 16 x 16 x 16 pod fit a 16-inch page each way."""

MIN_WIDTH_IN = 8.0  # the tiered diagram's narrowest page: titles and footnote fit

PANEL_GAP = 1.6  # room between panels and for the wrap stubs, in pitches

STUB = 0.42  # a wrap-around stub's length, in pitches

MAX_PANELS = 16
"""Most z-planes drawn (a 16 x 16 x 16 pod shows every plane); a longer third dimension
draws its first planes and says how many are left out."""

MARGIN_IN = (0.5, 1.9, 1.15, 0.75)  # left, right (legend), top (titles), bottom (footnote)


def draws_torus(fabric: Fabric, detail: str) -> bool:
    """Whether the topology figure draws this fabric as a torus grid: ``detail='auto'``
    on a torus scale-up of one to three dimensions with no scale-out (a scale-out is
    drawn in tiers, which ``full`` and ``aggregate`` also ask for)."""
    s = fabric.structure
    return (detail == "auto" and s.scaleup.kind == "torus" and s.scaleout.kind == "none"
            and 1 <= len(s.scaleup.torus.shape) <= 3)


def torus_figure(fabric: Fabric, *, link_utilization: np.ndarray | None = None,
                 title: str | None = None) -> Figure:
    """The first torus domain as a grid, link load as colour (utilization in %) if given.

    Parameters
    ----------
    fabric
        A built fabric whose scale-up is a torus (:func:`draws_torus`).
    link_utilization
        Per row of ``fabric.links``: busy time / collective time (0-1, above 1 when
        overcommitted).
    title
        Figure title (default: the design's name).
    """
    torus = fabric.structure.scaleup.torus
    nx, ny, nz = (*torus.shape, 1, 1)[:3]
    shape = (nx, ny, nz)
    shown = min(nz, MAX_PANELS)
    columns = min(shown, 4)
    rows = math.ceil(shown / columns)
    acc = fabric.accelerators
    domain = fabric.node_arrays["domain"][acc]
    first = domain == domain.min()
    coords = np.zeros((len(acc), 3), np.int64)
    coords[:, :len(torus.shape)] = torus.coords
    where = np.full((len(fabric.node_arrays), 3), -1, np.int64)
    where[acc[first]] = coords[first]
    links = fabric.links
    src, dst = links["src"].to_numpy(), links["dst"].to_numpy()
    a, b = where[src], where[dst]
    inside = (a[:, 0] >= 0) & (b[:, 0] >= 0) & (src < dst)
    differ = a != b
    in_plane = inside & (differ[:, 2] == 0) & (a[:, 2] < shown)
    panel_w, panel_h = nx + PANEL_GAP, ny + PANEL_GAP

    def place(xyz: np.ndarray) -> np.ndarray:  # grid coordinates to page units
        panel = xyz[:, 2]
        return np.column_stack([(panel % columns) * panel_w + xyz[:, 0],
                                -(panel // columns) * panel_h - xyz[:, 1]])

    rows_of = np.flatnonzero(in_plane)
    pa, pb = place(a[rows_of]), place(b[rows_of])
    dim = np.argmax(differ[rows_of], axis=1)
    wrap = np.abs((a[rows_of] - b[rows_of])[np.arange(len(rows_of)), dim]) > 1
    unit = np.zeros((len(rows_of), 2))
    unit[np.arange(len(rows_of)), np.minimum(dim, 1)] = np.where(dim == 0, 1.0, -1.0)
    # a wrap link leaves each end outward: the low end towards lower coordinates
    low_a = (a[rows_of] < b[rows_of])[np.arange(len(rows_of)), dim]
    out_a = np.where(low_a[:, None], -unit, unit)
    paths = [np.array([p, p + STUB * o]) if w else np.array([p, q])
             for p, q, o, w in zip(pa, pb, out_a, wrap, strict=True)]
    paths += [np.array([q, q - STUB * o]) for q, o, w in zip(pb, out_a, wrap, strict=True)
              if w]
    order = np.concatenate([np.arange(len(rows_of)), np.flatnonzero(wrap)])
    medium = links["medium"].astype(str).to_numpy()[rows_of][order]

    grid_in = columns * panel_w * PITCH_IN
    width_in = max(MIN_WIDTH_IN, MARGIN_IN[0] + MARGIN_IN[1] + grid_in)
    height_in = MARGIN_IN[2] + MARGIN_IN[3] + rows * panel_h * PITCH_IN
    width_in, height_in = round(width_in * DPI) / DPI, round(height_in * DPI) / DPI
    fig = Figure(figsize=(width_in, height_in), dpi=DPI)
    ax = fig.add_axes((MARGIN_IN[0] / width_in, MARGIN_IN[3] / height_in,
                       grid_in / width_in,
                       (height_in - MARGIN_IN[2] - MARGIN_IN[3]) / height_in))
    ax.set_xlim(-PANEL_GAP / 2, columns * panel_w - PANEL_GAP / 2)
    ax.set_ylim(-rows * panel_h + PANEL_GAP / 2, PANEL_GAP / 2 + 0.3)
    ax.set_axis_off()
    lines = LineCollection(paths, linewidths=1.2, zorder=1, capstyle="butt")
    lines.set_gid("links")
    legend_x = 1 - (MARGIN_IN[1] - 0.25) / width_in
    top = 1 - MARGIN_IN[2] / height_in
    if link_utilization is not None:
        load = np.asarray(link_utilization, dtype=float)
        pair = (np.where(src < dst, src, dst) * len(fabric.node_arrays)
                + np.where(src < dst, dst, src))
        keys, inverse = np.unique(pair, return_inverse=True)
        peak = np.zeros(len(keys))
        np.maximum.at(peak, inverse, np.nan_to_num(np.clip(load, 0, None)))
        values = 100 * peak[inverse[rows_of][order]]
        lines.set_array(values)
        lines.set_cmap(UTILIZATION_CMAP)
        lines.set_norm(Normalize(0.0, max(100.0, float(values.max()) if len(values) else 100)))
        cax = fig.add_axes((legend_x, top - 0.5 * top, 0.16 / width_in, 0.45 * top))
        bar = fig.colorbar(lines, cax=cax)
        bar.set_label("utilization (%)\nbusier direction of each link", fontsize=8)
        bar.ax.tick_params(labelsize=7)
    else:
        lines.set_color([MEDIUM_COLOURS.get(m, MEDIUM_COLOURS["mixed"]) for m in medium])
        present = sorted(set(medium), key=lambda m: list(MEDIUM_COLOURS).index(m)
                         if m in MEDIUM_COLOURS else len(MEDIUM_COLOURS))
        handles = [Line2D([], [], color=MEDIUM_COLOURS.get(m, MEDIUM_COLOURS["mixed"]), lw=3)
                   for m in present]
        fig.legend(handles, [MEDIUM_LABELS.get(m, m) for m in present], loc="upper left",
                   bbox_to_anchor=(legend_x, top), fontsize=7, title="link medium",
                   title_fontsize=7.5, frameon=False, alignment="left")
    ax.add_collection(lines)
    drawn = first & (coords[:, 2] < shown)
    xy = place(coords[drawn])
    ax.scatter(xy[:, 0], xy[:, 1], s=(0.45 * PITCH_IN * 72) ** 2, marker="s",
               c=KIND_COLOURS["accelerator"], edgecolors="#555555", linewidths=0.5,
               zorder=2)
    if nz > 1:
        for z in range(shown):
            ax.text((z % columns) * panel_w + (nx - 1) / 2, -(z // columns) * panel_h + 0.9,
                    f"z = {z}", fontsize=8, ha="center", va="bottom")
    name = fabric.design.name or fabric.design.file
    text, size = fit_text(title or f"{name}: network topology", width_in - 0.8, 12.0,
                          bold=True)
    fig.text(0.5 / width_in, 1 - 0.3 / height_in, text, fontsize=size, fontweight="bold",
             va="top")
    fig.text(0.5 / width_in, 1 - 0.6 / height_in, "\n".join(wrap_text(
        _subtitle(fabric), int((width_in - 0.8) * 72 / (0.55 * 8.5)))),
        fontsize=8.5, va="top", color="#333333", linespacing=1.3)
    between = int((inside & (differ[:, 2] != 0)).sum())
    fig.text(0.5 / width_in, 0.12 / height_in, "\n".join(wrap_text(
        _footnote(shape, shown, between, torus.wraparound),
        int((width_in - 0.8) * 72 / (0.55 * 7.0)))),
        fontsize=7.0, va="bottom", color="#444444", linespacing=1.3)
    return fig


def _subtitle(fabric: Fabric) -> str:
    torus = fabric.structure.scaleup.torus
    domains = len(np.unique(fabric.node_arrays["domain"][fabric.accelerators]))
    kind = "torus" if torus.wraparound else "mesh"
    dims = " x ".join(map(str, torus.shape))
    text = (f"{fabric.accelerator_count:,} accelerators · a {dims} {kind}"
            f" ({torus.links_per_neighbor} link{'s' if torus.links_per_neighbor != 1 else ''}"
            " to each neighbour)")
    return text + (f" · domain 0 of {domains:,} drawn" if domains > 1 else "")


def _footnote(shape: tuple[int, int, int], shown: int, between: int, wrap: bool) -> str:
    text = "One square per accelerator at its (x, y); x grows to the right, y downward."
    if wrap:
        text += " A stub at an edge is a wrap-around link to the opposite edge."
    if shape[2] > 1:
        text += (f" One panel per z-plane; the {between:,} links between planes"
                 " (z to z±1, same x, y) are not drawn.")
    if shown < shape[2]:
        text += f" Planes z = {shown}–{shape[2] - 1} are left out."
    return text
