"""``topomodel draw`` writes the same bytes as before the layout moved onto the link
runs and the drawing onto one Agg canvas: PNG and SVG, intact and loaded, against a
reference pathway with the per-row layout (the oracle of ``test_layout_runs``), boxes
added with ``add_patch`` and the pairwise overlap check on a throwaway canvas, as
commit 4bafe1f drew them.
"""

from pathlib import Path

import numpy as np
import pytest
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.patches import FancyBboxPatch
from test_layout_runs import oracle_layout

from topomodel.cli import main
from topomodel.draw import topology

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def pairwise_overlaps(fig):
    """The overlap check as it was: a throwaway canvas, every pair compared in Python."""
    from matplotlib.axis import Axis
    from matplotlib.text import Text

    fig.draw_without_rendering()
    hidden = set()
    for axis in fig.findobj(Axis):
        low, high = sorted(axis.get_view_interval())
        slack = 1e-9 * max(abs(high - low), 1e-300)
        for tick in [*axis.get_major_ticks(), *axis.get_minor_ticks()]:
            if not low - slack <= tick.get_loc() <= high + slack:
                hidden.update((id(tick.label1), id(tick.label2)))
    extents = [(t.get_text(), t.get_window_extent()) for t in fig.findobj(Text)
               if t.get_visible() and t.get_text().strip() and id(t) not in hidden]
    extents = [(t, b) for t, b in extents if b.width > 0 and b.height > 0]
    out = []
    for i, (text_a, a) in enumerate(extents):
        for text_b, b in extents[i + 1:]:
            dx = min(a.x1, b.x1) - max(a.x0, b.x0)
            dy = min(a.y1, b.y1) - max(a.y0, b.y0)
            if a.overlaps(b) and not (dx <= 0.5 or dy <= 0.5):
                out.append((text_a, text_b))
    return out


@pytest.fixture
def reference(monkeypatch):
    """Switch ``topomodel draw`` to the reference pathway inside the ``with`` block."""
    from contextlib import contextmanager

    @contextmanager
    def use():
        add_artist = Axes.add_artist
        calls = []

        def layout(*args, **kwargs):
            calls.append(1)
            return oracle_layout(*args, **kwargs)

        def add(ax, artist):
            if isinstance(artist, FancyBboxPatch):
                return ax.add_patch(artist)
            return add_artist(ax, artist)

        with monkeypatch.context() as m:
            m.setattr(topology, "topology_layout", layout)
            m.setattr(topology, "text_overlaps", pairwise_overlaps)
            m.setattr(Axes, "add_artist", add)
            yield
        assert calls  # the reference did draw

    return use


CASES = [("hgx-h100-server", []), ("small-4x8-l40s-25gbe", ["--detail", "aggregate"]),
         ("dgx-h100-superpod", []), ("tpu-v4-pod", ["--detail", "aggregate"]),
         ("dual-plane-ethernet", ["--route", "allreduce", "--size", "1GiB"]),
         ("small-16x8-a100-100gbe-roce", ["--route", "alltoall", "--size", "64MiB"]),
         ("hgx-h100-server", ["--route", "allreduce", "--size", "1GiB"])]


@pytest.mark.parametrize(("name", "extra"), CASES)
@pytest.mark.parametrize("suffix", ["png", "svg"])
def test_draw_writes_the_reference_bytes(name, extra, suffix, reference, tmp_path, capsys):
    argv = ["draw", str(EXAMPLES / f"{name}.yaml"), *extra]
    assert main([*argv, "-o", str(tmp_path / f"new.{suffix}")]) == 0
    with reference():
        assert main([*argv, "-o", str(tmp_path / f"old.{suffix}")]) == 0
    capsys.readouterr()
    new, old = (tmp_path / f"new.{suffix}").read_bytes(), (tmp_path / f"old.{suffix}").read_bytes()
    assert len(new) > 10_000 and new == old


def test_overlaps_are_the_pairwise_ones_on_a_crowded_page():
    fig = Figure(figsize=(3, 2))
    ax = fig.add_axes((0.1, 0.1, 0.8, 0.8))
    rng = np.random.default_rng(3)
    for i in range(40):
        ax.text(*rng.random(2), f"label {i}", transform=ax.transAxes, fontsize=8)
    ax.set_yticks([0.0, 0.5, 1.0, 2.0], ["low", "mid", "high", "hidden"])
    ax.set_ylim(0, 1)
    got = topology.text_overlaps(fig)
    assert len(got) > 10 and got == pairwise_overlaps(fig)
    assert not any("hidden" in pair for pair in got)
