"""Diagrams: valid images of the expected size, readable labels on every example, bundle
counts that match the fabric's closed forms, colours that follow the load, and the
``draw`` command with its error paths.

Oracles: cable counts of the link table (each bundle appears once per direction), the
closed forms of the example designs (cited below), and a brute-force pandas group-by
for the per-bundle utilization.
"""

import json
import os
import time
import xml.etree.ElementTree as ET
from functools import cache
from itertools import pairwise
from pathlib import Path

import numpy as np
import pytest
from matplotlib.figure import Figure
from PIL import Image

from topomodel import draw
from topomodel.analysis.collectives.collective import run_collective
from topomodel.analysis.tiers import tier_summaries
from topomodel.analysis.training.step import step_time
from topomodel.cli import main
from topomodel.errors import UsageError
from topomodel.fabric.build import build_fabric
from topomodel.inputs.design import load_design
from topomodel.inputs.parts import Model
from topomodel.report.route import route_report
from topomodel.traffic.layout import Layout

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
NAMES = sorted(p.stem for p in EXAMPLES.glob("*.yaml"))
BIG = {"100k-4k-supernodes", "100k-8npu-servers"}
"""Opt-in (~8 s and ~4 s to build and draw); 100k-8gpu-3tier stands for them by default."""
PNG_SAMPLE = {"hgx-h100-server", "dgx-h100-superpod", "100k-8gpu-3tier", "tpu-v4-pod",
              "100k-4k-supernodes"}
SLOW = bool(os.environ.get("TOPOMODEL_SLOW_TESTS"))
TOY_FAT_TREE = "system: toy-box\nsystems: 4\nscaleout:\n  switch: toy-switch-8\n"


@cache
def built(name):
    design, catalog = load_design(EXAMPLES / f"{name}.yaml")
    return build_fabric(design, catalog)


def fabric_of(name):
    if name in BIG:
        design, catalog = load_design(EXAMPLES / f"{name}.yaml")
        return build_fabric(design, catalog)
    return built(name)


def cables(fabric, tier):
    links = fabric.links
    return int(links.loc[links["tier"] == tier, "cables"].sum()) // 2


def bundle_totals(layout):
    out = {}
    for b in layout.bundles:
        out[b.tier] = out.get(b.tier, 0) + b.cables
    return out


def png_size(path):
    with Image.open(path) as image:
        image.load()
        return image.size, image.convert("L").getextrema()


def expected_pixels(fig):
    width, height = fig.get_size_inches()
    return round(width * draw.DPI), round(height * draw.DPI)


def assert_readable(fig):
    """No two drawn texts overlap and none is cut off at the page's edge."""
    page = fig.bbox
    boxes = [(t.get_text(), t.get_window_extent()) for t in draw.drawn_texts(fig)]
    assert boxes
    for text, box in boxes:
        assert page.x0 - 1 <= box.x0 and box.x1 <= page.x1 + 1, text
        assert page.y0 - 1 <= box.y0 and box.y1 <= page.y1 + 1, text
    for i, (text_a, a) in enumerate(boxes):
        for text_b, b in boxes[i + 1:]:
            width = min(a.x1, b.x1) - max(a.x0, b.x0)
            height = min(a.y1, b.y1) - max(a.y0, b.y0)
            assert width <= 0.5 or height <= 0.5, (text_a, text_b)


# ------------------------------------------------------------------ every example


@pytest.mark.parametrize("name", [n for n in NAMES if n not in BIG] + [
    pytest.param(n, marks=pytest.mark.skipif(not SLOW, reason="set TOPOMODEL_SLOW_TESTS=1 to"
                                             " draw the largest examples too"))
    for n in sorted(BIG)])
def test_every_example_draws_readably(name, tmp_path):
    fabric = fabric_of(name)
    start = time.perf_counter()
    fig = draw.topology_figure(fabric)
    elapsed = time.perf_counter() - start
    assert elapsed < 15, f"{name} took {elapsed:.1f} s to lay out and draw"
    assert_readable(fig)
    width, height = fig.get_size_inches()
    assert draw.MIN_WIDTH_IN <= width <= draw.MAX_WIDTH_IN and 2 < height < 16
    expected = expected_pixels(fig)
    assert expected == pytest.approx((width * draw.DPI, height * draw.DPI))  # whole pixels
    if name in PNG_SAMPLE:  # encoding takes ~1 s a page: a sample of the views
        path = draw.save_figure(fig, tmp_path / f"{name}.png")
        size, (darkest, lightest) = png_size(path)
        assert size == expected
        assert darkest < 100 and lightest == 255  # ink on a white page


@pytest.mark.parametrize("name", [n for n in NAMES if n not in BIG])
def test_bundles_add_up_to_the_link_table(name):
    fabric = built(name)
    layout = draw.topology_layout(fabric)
    assert layout.detail == ("full" if len(fabric.nodes) <= draw.AUTO_FULL_MAX_NODES
                             else "aggregate")
    assert len(layout.columns) <= draw.MAX_COLUMNS
    assert bundle_totals(layout) == {t.name: t.links for t in tier_summaries(fabric)}
    assert sum(b.nodes for b in layout.boxes) == len(fabric.nodes)


@pytest.mark.parametrize("name", ["dgx-h100-superpod", "hgx-h100-server"])
def test_loaded_examples_stay_readable(name):
    fabric = built(name)
    load = np.linspace(0, 1.3, len(fabric.links))
    fig = draw.topology_figure(fabric, link_utilization=load)
    assert_readable(fig)
    bars = [a for a in fig.axes if a.get_ylabel().startswith("utilization (%)")]
    assert len(bars) == 1 and bars[0].get_ylim()[1] == pytest.approx(130)


# ------------------------------------------------------------------ closed forms


def test_dgx_h100_superpod_bundles_per_scalable_unit():
    # NVIDIA DGX SuperPOD (H100) reference architecture: 127 DGX H100 in 4 SUs of 32
    # (the last one 31, leaving room for UFM), 8 x 400G ConnectX-7 per system, 18 NVLink4
    # links per GPU to 4 NVSwitch chips, 8 leaves per SU, 16 spines.
    layout = draw.topology_layout(built("dgx-h100-superpod"))
    assert layout.columns == ("unit 0", "unit 1", "unit 2", "unit 3")
    per_tier = {}
    for b in layout.bundles:
        per_tier.setdefault(b.tier, []).append(b.cables)
    systems = [32, 32, 32, 31]
    assert per_tier["scaleup"] == [s * 8 * 18 for s in systems]
    assert per_tier["host"] == per_tier["leaf"] == [s * 8 for s in systems]
    assert per_tier["spine"] == [256] * 4  # every leaf: 32 uplinks at 400G (non-blocking)
    rates = {b.tier: b.rate_Bps * 8 for b in layout.bundles}
    assert rates["leaf"] == pytest.approx(400e9) and rates["scaleup"] == pytest.approx(200e9)
    leaves = [layout.boxes[b.upper] for b in layout.bundles if b.tier == "leaf"]
    assert [box.nodes for box in leaves] == [8, 8, 8, 8]
    spine = {layout.boxes[b.upper].nodes for b in layout.bundles if b.tier == "spine"}
    assert spine == {16}


def test_100k_three_tier_columns_are_runs_of_pods():
    # 12,288 HGX B200 systems, units of 64, pods of 8 units: 24 pods, drawn 3 per column;
    # every tier carries one 800G cable per GPU (rail-optimized, non-blocking).
    fabric = built("100k-8gpu-3tier")
    layout = draw.topology_layout(fabric)
    assert layout.columns[0] == "pods 0–2" and len(layout.columns) == 8
    per_column = 98_304 // 8
    for tier in ("host", "leaf", "spine", "core"):
        counts = [b.cables for b in layout.bundles if b.tier == tier]
        assert counts == [per_column] * 8, tier
    assert {b.cables for b in layout.bundles if b.tier == "scaleup"} == {per_column * 18}
    tops = {b.upper for b in layout.bundles if b.tier == "core"}
    assert len(tops) == 1  # every pod's spines reach the same core switches
    core = layout.boxes[tops.pop()]
    assert core.nodes == 1024 and (core.first_column, core.last_column) == (0, 7)
    assert sum(b.cables for b in layout.bundles if b.tier == "core") == cables(fabric, "core")


def test_torus_bundle_is_inside_its_box():
    # TPU v4: 4,096 chips in a 16x16x16 torus with wraparound: 3 links per chip.
    layout = draw.topology_layout(built("tpu-v4-pod"))
    (bundle,) = layout.bundles
    assert bundle.lower == bundle.upper and bundle.cables == 4096 * 3
    assert bundle.medium == "mixed" and set(bundle.media) == {"electrical", "ocs"}


def test_full_view_bundles_are_node_pairs():
    # HGX H100: each GPU's 18 NVLink4 links split 5+5+4+4 over 4 NVSwitch chips.
    fabric = built("hgx-h100-server")
    layout = draw.topology_layout(fabric)
    assert layout.detail == "full" and len(layout.boxes) == 12
    assert len(layout.bundles) == 32
    assert sorted(b.cables for b in layout.bundles) == [4] * 16 + [5] * 16
    names = fabric.nodes["name"].tolist()
    assert [layout.boxes[i].label for i in range(12)] == names


# ------------------------------------------------------------------ load as colour


def test_bundle_utilization_is_peak_and_mean_of_its_links():
    fabric = built("mi300x-roce")
    load = np.random.default_rng(1).uniform(0, 1.2, len(fabric.links))
    layout = draw.topology_layout(fabric, link_utilization=load)
    links = fabric.links.assign(load=load, a=layout.node_box[fabric.links["src"]],
                                b=layout.node_box[fabric.links["dst"]])
    links["lo"] = np.minimum(links["a"], links["b"])
    links["hi"] = np.maximum(links["a"], links["b"])
    oracle = links.groupby(["lo", "hi", "tier"], observed=True)["load"].agg(["max", "mean"])
    assert len(oracle) == len(layout.bundles)
    for b in layout.bundles:
        peak, mean = oracle.loc[(b.lower, b.upper, b.tier)]
        assert b.peak_utilization == pytest.approx(peak)
        assert b.mean_utilization == pytest.approx(mean)


def _links_collection(fig):
    (lines,) = [c for ax in fig.axes for c in ax.collections if c.get_gid() == "links"]
    return lines


def test_busier_link_gets_the_higher_colour_full_view():
    fabric = built("hgx-h100-server")
    index = {name: i for i, name in enumerate(fabric.nodes["name"])}
    src, dst = fabric.links["src"].to_numpy(), fabric.links["dst"].to_numpy()

    def pair(a, b):
        return ((src == index[a]) & (dst == index[b])) | ((src == index[b]) & (dst == index[a]))

    load = np.full(len(fabric.links), 0.2)
    load[pair("sys0/acc0", "sys0/sw0")] = 0.9
    load[pair("sys0/acc1", "sys0/sw1") & (src == index["sys0/acc1"])] = 0.5  # one direction
    layout = draw.topology_layout(fabric, link_utilization=load)
    fig = draw.topology_figure(fabric, link_utilization=load)
    lines = _links_collection(fig)
    values = np.asarray(lines.get_array())
    assert values == pytest.approx([100 * b.peak_utilization for b in layout.bundles])
    fig.draw_without_rendering()
    colours = lines.get_edgecolor()
    expected = lines.cmap(lines.norm(values))
    assert colours == pytest.approx(expected)

    def bundle_of(a, b):
        ends = {index[a], index[b]}
        return next(i for i, x in enumerate(layout.bundles) if {x.lower, x.upper} == ends)

    hot, warm = bundle_of("sys0/acc0", "sys0/sw0"), bundle_of("sys0/acc1", "sys0/sw1")
    cold = bundle_of("sys0/acc2", "sys0/sw2")
    norm = lines.norm(values)
    assert norm[hot] > norm[warm] > norm[cold]  # the busier direction counts
    assert values[warm] == pytest.approx(50)


def test_busier_bundle_gets_the_higher_colour_aggregated():
    fabric = built("dgx-h100-superpod")
    load = np.full(len(fabric.links), 0.1)
    unit3_leaf = (fabric.links["tier"] == "leaf").to_numpy() & (
        fabric.nodes["unit"].to_numpy()[fabric.links["dst"]] == 3)
    load[unit3_leaf] = 0.8
    fig = draw.topology_figure(fabric, link_utilization=load)
    layout = draw.topology_layout(fabric, link_utilization=load)
    values = np.asarray(_links_collection(fig).get_array())
    leaf = [i for i, b in enumerate(layout.bundles) if b.tier == "leaf"]
    assert int(np.argmax(values)) == leaf[3]
    assert values[leaf[3]] == pytest.approx(80) and values[leaf[0]] == pytest.approx(10)
    labels = [t.get_text() for t in fig.axes[0].texts]
    assert "248 × 400 Gb/s\npeak 80% · mean 45%" in labels  # mean over both directions


def test_utilization_must_match_the_link_table():
    fabric = built("hgx-h100-server")
    with pytest.raises(ValueError, match="one value per link row"):
        draw.topology_layout(fabric, link_utilization=np.zeros(3))


# ------------------------------------------------------------------ detail and layout


def test_detail_choice_and_limits():
    assert draw.resolve_detail(built("hgx-h100-server")) == "full"
    assert draw.resolve_detail(built("dgx-h100-superpod")) == "aggregate"
    assert draw.resolve_detail(built("hgx-h100-server"), "aggregate") == "aggregate"
    with pytest.raises(UsageError, match="at most 400 nodes"):
        draw.topology_layout(built("dgx-h100-superpod"), detail="full")
    with pytest.raises(UsageError, match="unknown detail"):
        draw.topology_layout(built("dgx-h100-superpod"), detail="medium")


@pytest.mark.parametrize("text", [
    TOY_FAT_TREE,
    "system: toy-host\nsystems: 16\nscaleout:\n  switch: toy-switch-4\n",
    "system: toy-host\nsystems: 16\nscaleup:\n  kind: torus\n  link: toy-link\n"
    "  shape: [4, 4]\nscaleout:\n  kind: none\n",
])
@pytest.mark.parametrize("detail", ["full", "aggregate"])
def test_toy_fabrics_draw_readably_both_ways(toy, text, detail):
    fabric = toy(text)
    fig = draw.topology_figure(fabric, detail=detail)
    assert_readable(fig)
    assert bundle_totals(draw.topology_layout(fabric, detail=detail)) == {
        t.name: t.links for t in tier_summaries(fabric)}


def test_full_view_keeps_boxes_clear_of_links_passing_by(toy):
    fabric = toy(TOY_FAT_TREE)  # accelerator-NIC links pass the in-system switch chips
    layout = draw.topology_layout(fabric, detail="full")
    accelerators = [b.x for b in layout.boxes if b.row == 0]
    for box in (b for b in layout.boxes if b.row == 1):
        assert all(abs(x - box.x) >= box.width / 2 for x in accelerators)


def test_aggregated_boxes_of_a_row_never_overlap():
    for name in ("mi300x-roce", "gb200-nvl72-cluster", "llama3-24k-roce", "cloudmatrix384"):
        layout = draw.topology_layout(built(name))
        for row in {b.row for b in layout.boxes}:
            spans = sorted((b.first_column, b.last_column) for b in layout.boxes if b.row == row)
            assert all(a[1] < b[0] for a, b in pairwise(spans)), name


def test_text_overlaps_sees_overlapping_labels():
    fig = Figure(figsize=(4, 2))
    fig.text(0.1, 0.5, "one label")
    fig.text(0.12, 0.5, "another label")
    assert len(draw.text_overlaps(fig)) == 1
    fig = Figure(figsize=(4, 2))
    fig.text(0.1, 0.2, "one label")
    fig.text(0.1, 0.7, "another label")
    assert draw.text_overlaps(fig) == []


# ------------------------------------------------------------------ charts


@pytest.fixture
def toy_route(toy):
    """A toy fat-tree of 4 four-accelerator boxes and one all-reduce on it."""
    fabric = toy(TOY_FAT_TREE)
    run = run_collective(fabric, "allreduce", 64e6, ["all"])
    return fabric, run, fabric.catalog, toy.tmp_path / "design.yaml", toy.catalog_path


def test_tier_utilization_bars(toy_route):
    fabric, run, _, _, _ = toy_route
    tiers = route_report(fabric, run, routing="ecmp").data["tiers"]
    fig = draw.tier_utilization_figure(tiers, title="toy all-reduce")
    assert_readable(fig)
    ax = fig.axes[0]
    heights = [p.get_height() for p in ax.patches]
    peaks = [100 * t["peak_utilization"] for t in tiers]
    means = [100 * t["mean_utilization"] for t in tiers]
    assert heights == pytest.approx(peaks + means)
    assert ax.get_ylabel().startswith("utilization (%)")


def test_tier_utilization_bars_of_a_single_tier_fit_the_page(toy_route):
    fabric, run, _, _, _ = toy_route
    tiers = route_report(fabric, run, routing="ecmp").data["tiers"][:1]
    assert_readable(draw.tier_utilization_figure(tiers))


def test_step_bars_add_up_to_the_step(toy_route):
    fabric, _, catalog, _, _ = toy_route
    result = step_time(fabric, catalog.get("toy-dense", Model),
                       Layout(tp=4, dp=4, global_batch=16))
    fig = draw.step_figure(result)
    assert_readable(fig)
    ax = fig.axes[0]
    scale = 1e3 if result.step_time_s < 10 else 1.0
    step_bars = [p for p in ax.patches if p.get_y() > 0.5]
    wall_bars = [p for p in ax.patches if p.get_y() < 0.5]
    assert sum(p.get_width() for p in step_bars) == pytest.approx(result.step_time_s * scale)
    comm_and_wait = result.exposed_comm_s + result.wait_s
    assert sum(p.get_width() for p in wall_bars) == pytest.approx(comm_and_wait * scale)
    assert wall_bars[0].get_x() == pytest.approx((result.compute_s + result.bubble_s) * scale)
    assert "time per step (ms)" in ax.get_xlabel()


def test_scaling_figure(toy_route):
    from topomodel.analysis.training.studies import scale_curve

    fabric, _, catalog, _, _ = toy_route
    points = scale_curve(fabric.design, catalog, catalog.get("toy-dense", Model),
                         Layout(tp=4, dp=1, global_batch=8), [4, 8, 16])
    fig = draw.scaling_figure(points, title="toy scaling")
    assert_readable(fig)
    lines = fig.axes[0].get_lines()
    assert list(lines[0].get_xdata()) == [4, 8, 16]


# ------------------------------------------------------------------ files


def test_svg_is_xml_of_the_page_size(tmp_path):
    fig = draw.topology_figure(built("dgx-h100-superpod"))
    width, height = fig.get_size_inches()
    path = draw.save_figure(fig, tmp_path / "topology.svg")
    root = ET.parse(path).getroot()
    assert root.tag.endswith("svg")
    assert float(root.get("width").removesuffix("pt")) == pytest.approx(width * 72)
    assert float(root.get("height").removesuffix("pt")) == pytest.approx(height * 72)
    assert len(path.read_bytes()) > 10_000
    again = draw.save_figure(draw.topology_figure(built("dgx-h100-superpod")),
                             tmp_path / "again.svg")
    assert again.read_bytes() == path.read_bytes()  # no dates or random ids


def test_figure_bytes_and_format_errors(tmp_path):
    png = draw.figure_bytes(draw.topology_figure(built("hgx-h100-server")))
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(UsageError, match="png, svg, pdf"):
        draw.figure_bytes(Figure(), "jpg")
    with pytest.raises(UsageError, match=r"ends in \.png, \.svg or \.pdf"):
        draw.save_figure(Figure(), tmp_path / "out.jpg")
    assert not list(tmp_path.iterdir())


def test_save_is_atomic(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(OSError):
        draw.save_figure(Figure(), blocker / "out.png")
    target = tmp_path / "out.png"
    target.write_bytes(b"old")
    draw.save_figure(draw.topology_figure(built("hgx-h100-server")), target)
    assert target.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file", "out.png"]


# ------------------------------------------------------------------ command line


def test_draw_command(toy_route, tmp_path, capsys):
    _, _, _, design, catalog = toy_route
    out = tmp_path / "topology.png"
    assert main(["draw", str(design), "--catalog", str(catalog), "-o", str(out),
                 "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["file"] == str(out) and data["detail"] == "full"
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    routed = tmp_path / "routed.svg"
    assert main(["draw", str(design), "--catalog", str(catalog), "-o", str(routed),
                 "--route", "allreduce", "--size", "64 MB", "--detail", "aggregate",
                 "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["collective"] == "allreduce" and data["size_bytes"] == 64e6
    assert 0 < data["peak_utilization"] <= 1 + 1e-9 and data["detail"] == "aggregate"
    ET.parse(routed)
    tiers = tmp_path / "tiers.png"
    assert main(["draw", str(design), "--catalog", str(catalog), "-o", str(tiers),
                 "--what", "tiers", "--route", "allreduce", "--size", "64 MB"]) == 0
    assert "wrote" in capsys.readouterr().out and tiers.exists()


@pytest.mark.parametrize(("extra", "message"), [
    (["-o", "{tmp}/out.jpg"], "ends in .png, .svg or .pdf"),
    (["-o", "{tmp}/out.png", "--what", "tiers"], "--what tiers needs a load"),
    (["-o", "{tmp}/out.png", "--route", "allreduce"], "--route needs --size"),
    (["-o", "{tmp}/out.png", "--route", "allgatherx", "--size", "1 MB"],
     "unknown collective"),
])
def test_draw_command_errors(toy_route, tmp_path, capsys, extra, message):
    _, _, _, design, catalog = toy_route
    out = tmp_path / "out"
    out.mkdir()
    argv = ["draw", str(design), "--catalog", str(catalog)]
    argv += [a.replace("{tmp}", str(out)) for a in extra]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("topomodel: error:") and message in err[0]
    assert not list(out.iterdir())  # nothing half-written


def test_draw_command_refuses_full_detail_on_a_large_fabric(tmp_path, capsys):
    status = main(["draw", str(EXAMPLES / "dgx-h100-superpod.yaml"), "-o",
                   str(tmp_path / "x.png"), "--detail", "full"])
    assert status == 2 and "use --detail aggregate" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())


# ------------------------------------------------------------------ the torus as a grid


def test_a_torus_is_drawn_as_its_grid_a_panel_per_z_plane():
    # TPU v4: 16x16x16 with wraparound, one link to each neighbour. Each plane has 256 x
    # and 256 y links, 16 + 16 of them wrap-around (drawn as two stubs each); the 4,096
    # z links join the planes and are counted, not drawn.
    fabric = built("tpu-v4-pod")
    fig = draw.topology_figure(fabric)
    assert_readable(fig)
    paths = _links_collection(fig).get_paths()
    assert len(paths) == 16 * (512 + 32)
    texts = {t.get_text() for t in draw.drawn_texts(fig)}
    assert {f"z = {z}" for z in range(16)} <= texts
    assert any("4,096 links between planes" in t for t in texts)
    # full and aggregate still draw the tiers
    assert draw.topology_layout(fabric, detail="aggregate").detail == "aggregate"


def test_a_loaded_torus_colours_each_link_by_its_busier_direction():
    fabric = built("tpu-v4-pod")
    load = np.zeros(len(fabric.links))
    load[0] = 0.7
    fig = draw.topology_figure(fabric, link_utilization=load)
    values = np.asarray(_links_collection(fig).get_array())
    assert values.max() == pytest.approx(70) and (values > 0).sum() in (1, 2)


def test_a_toy_torus_auto_draws_the_grid_readably(toy):
    fabric = toy("system: toy-host\nsystems: 16\nscaleup:\n  kind: torus\n  link: toy-link\n"
                 "  shape: [4, 4]\nscaleout:\n  kind: none\n")
    fig = draw.topology_figure(fabric)
    assert_readable(fig)
    assert len(_links_collection(fig).get_paths()) == 32 + 8  # 4 + 4 wraps as two stubs
