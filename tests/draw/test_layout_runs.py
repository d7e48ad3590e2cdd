"""The topology layout on the link table's runs against the per-row implementation it
replaced (kept below as the oracle, as of commit 4bafe1f): every box, bundle and field
the same, on every example, intact, loaded (with NaN, negative and infinite loads),
with failed parts, in both views, and on the per-row fallbacks of the run helpers.

The two 98k examples of ``test_draw.BIG`` join with ``TOPOMODEL_SLOW_TESTS=1``.
"""

import dataclasses
import math
import os
from functools import cache
from pathlib import Path

import numpy as np
import pytest

from topomodel.arrays import distinct
from topomodel.draw import layout as layout_module
from topomodel.draw import runs as runs_module
from topomodel.draw.layout import (
    BOX_WIDTH,
    FULL_BOX_MAX,
    FULL_BOX_SHARE,
    MIN_COLUMNS,
    Box,
    Bundle,
    TopologyLayout,
    _clear_passing_links,
    resolve_detail,
    topology_layout,
)
from topomodel.draw.runs import add_into, run_rows, run_starts, sequential_sums
from topomodel.fabric.build import build_fabric
from topomodel.inputs.design import load_design
from topomodel.vocabulary import NODE_TIERS

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
BIG = {"100k-4k-supernodes", "100k-8npu-servers"}
SLOW = bool(os.environ.get("TOPOMODEL_SLOW_TESTS"))
NAMES = [p.stem for p in sorted(EXAMPLES.glob("*.yaml")) if SLOW or p.stem not in BIG]


# ---------------------------------------------------------------- the oracle (per row)
def oracle_layout(fabric, *, link_utilization=None, detail="auto", max_columns=8):
    detail = resolve_detail(fabric, detail)
    utilization = None
    if link_utilization is not None:
        values = np.asarray(link_utilization, dtype=float)
        utilization = np.clip(np.nan_to_num(values, nan=0.0), 0.0, None)
    rows = _oracle_rows(fabric)
    if detail == "full":
        return _oracle_full(fabric, rows, utilization)
    return _oracle_aggregate(fabric, rows, utilization, max(1, max_columns))


def _oracle_rows(fabric):
    column = fabric.nodes["tier"]
    per_category = np.array([NODE_TIERS.index(c) if c in NODE_TIERS else len(NODE_TIERS) - 1
                             for c in column.cat.categories], dtype=np.int64)
    return per_category[column.cat.codes.to_numpy()]


def _oracle_full(fabric, rows, utilization):
    count = len(fabric.nodes)
    links = fabric.links
    src, dst = links["src"].to_numpy(), links["dst"].to_numpy()
    present = [r for r in range(len(NODE_TIERS)) if (rows == r).any()]
    slots = max((int((rows == r).sum()) for r in present), default=1)
    x = np.zeros(count)
    down = rows[dst] < rows[src]
    pitch_of = {}
    for r in present:
        members = np.flatnonzero(rows == r)
        mask = down & (rows[src] == r)
        total = np.bincount(src[mask], weights=x[dst[mask]], minlength=count)
        seen = np.bincount(src[mask], minlength=count)
        centre = np.where(seen > 0, total / np.maximum(seen, 1), 0.0)[members]
        order = members[np.lexsort((members, centre))]
        pitch_of[r] = slots / len(members)
        x[order] = (np.arange(len(members)) + 0.5) * pitch_of[r]
    width = np.array([min(FULL_BOX_SHARE * pitch_of[int(r)], FULL_BOX_MAX) for r in rows])
    _clear_passing_links(width, x, rows, src, dst)
    names = fabric.nodes["name"].astype(str).to_numpy()
    models = fabric.nodes["model"].astype(str).to_numpy()
    planes = fabric.nodes["plane"].to_numpy()
    boxes = tuple(Box(row=int(rows[i]), x=float(x[i]), width=float(width[i]), nodes=1,
                      models=(str(models[i]),), planes=int(planes[i] >= 0),
                      label=str(names[i])) for i in range(count))
    node_box = np.arange(count)
    return TopologyLayout("full", boxes, _oracle_bundles(fabric, node_box, count, utilization),
                          (), "", float(slots), node_box)


def _oracle_aggregate(fabric, rows, utilization, max_columns):
    nodes = fabric.nodes
    column_of_system, columns, grouping = _oracle_columns(fabric, max_columns)
    n_columns = len(columns)
    count = len(nodes)
    system = nodes["system"].to_numpy()
    has_system = system >= 0
    first = np.full(count, n_columns, np.int64)
    last = np.full(count, -1, np.int64)
    first[has_system] = last[has_system] = column_of_system[system[has_system]]
    links = fabric.links
    src, dst = links["src"].to_numpy(), links["dst"].to_numpy()
    row_src = rows[src]
    climbs = np.flatnonzero((rows[dst] < row_src) & ~has_system[src])
    up_src, up_dst, up_row = src[climbs], dst[climbs], row_src[climbs]
    for r in range(len(NODE_TIERS)):
        mask = up_row == r
        if mask.any():
            np.minimum.at(first, up_src[mask], first[up_dst[mask]])
            np.maximum.at(last, up_src[mask], last[up_dst[mask]])
    alone = last < 0
    first[alone], last[alone] = 0, n_columns - 1
    node_box = np.empty(count, np.int64)
    runs = []
    for r in range(len(NODE_TIERS)):
        members = np.flatnonzero(rows == r)
        if not len(members):
            continue
        merged = []
        spans = distinct(first[members] * (n_columns + 1) + last[members])
        for lo, hi in zip(*np.divmod(spans, n_columns + 1), strict=True):
            if merged and lo <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], hi)
            else:
                merged.append([lo, hi])
        starts = np.array([m[0] for m in merged])
        node_box[members] = len(runs) + np.searchsorted(starts, first[members], "right") - 1
        runs += [(r, lo, hi) for lo, hi in merged]
    model_names = list(nodes["model"].cat.categories)
    model = nodes["model"].cat.codes.to_numpy().astype(np.int64)
    plane = nodes["plane"].to_numpy()
    n_planes = int(plane.max()) + 2
    per_model = np.bincount(node_box * len(model_names) + model,
                            minlength=len(runs) * len(model_names)).reshape(len(runs), -1)
    per_plane = np.bincount(node_box * n_planes + plane + 1,
                            minlength=len(runs) * n_planes).reshape(len(runs), -1)
    boxes = []
    for b, (r, lo, hi) in enumerate(runs):
        boxes.append(Box(row=r, x=(lo + hi) / 2, width=hi - lo + BOX_WIDTH,
                         nodes=int(per_model[b].sum()),
                         models=tuple(str(model_names[m]) for m in np.flatnonzero(per_model[b])),
                         planes=int((per_plane[b, 1:] > 0).sum()),
                         label=columns[lo] if r == 0 and lo == hi else "",
                         first_column=lo, last_column=hi))
    return TopologyLayout("aggregate", tuple(boxes),
                          _oracle_bundles(fabric, node_box, len(boxes), utilization), columns,
                          grouping, float(n_columns), node_box)


def _oracle_columns(fabric, max_columns):
    nodes, links = fabric.nodes, fabric.links
    system = nodes["system"].to_numpy()
    n_systems = int(system.max()) + 1
    acc = fabric.accelerators
    domain = np.arange(n_systems)
    acc_domain = nodes["domain"].to_numpy()[acc]
    if len(acc) and (acc_domain >= 0).all():
        domain = np.zeros(n_systems, np.int64)
        domain[system[acc]] = acc_domain
    n_domains = len(distinct(domain))
    per_system = n_domains == n_systems
    candidates = [("system", "systems", domain) if per_system else
                  ("domain", "domains", domain)]
    src, dst = links["src"].to_numpy(), links["dst"].to_numpy()
    to_leaf = (nodes["kind"] == "nic").to_numpy()[src] & (nodes["tier"] == "leaf").to_numpy()[
        dst]
    for name, plural in (("unit", "units"), ("pod", "pods")):
        if to_leaf.any():
            values = np.full(n_systems, -1, np.int64)
            values[system[src[to_leaf]]] = nodes[name].to_numpy()[dst[to_leaf]]
            candidates.append((name, plural, values))
    valid = []
    for name, plural, values in candidates:
        groups = len(distinct(values))
        if len(np.unique(np.stack([domain, values], 1), axis=0)) == n_domains:
            valid.append((groups, name, plural, values))
    valid.sort(key=lambda v: -v[0])
    fitting = [v for v in valid if min(MIN_COLUMNS, max_columns) <= v[0] <= max_columns]
    too_many = [v for v in valid if v[0] > max_columns]
    run = 1
    if fitting:
        groups, name, plural, values = fitting[0]
    elif too_many:
        groups, name, plural, values = too_many[-1]
        run = math.ceil(groups / max_columns)
    else:
        groups, name, plural, values = valid[0]
    keys, rank = np.unique(values, return_inverse=True)
    column = rank // run
    names = []
    for c in range(int(column.max()) + 1):
        inside = keys[c * run:(c + 1) * run]
        names.append(f"{name} {inside[0]}" if len(inside) == 1 else
                     f"{plural} {inside[0]}–{inside[-1]}")
    grouping = (f"{run} {plural} each" if run > 1 else f"one {name} each")
    return column, tuple(names), grouping


def _oracle_bundles(fabric, node_box, n_boxes, utilization):
    links = fabric.links
    src, dst = links["src"].to_numpy(), links["dst"].to_numpy()
    tiers = list(links["tier"].cat.categories)
    size = n_boxes * n_boxes * len(tiers)
    key_type = np.int32 if size < np.iinfo(np.int32).max else np.int64
    box = node_box.astype(key_type)
    box_a, box_b = box[src], box[dst]
    key = (np.minimum(box_a, box_b) * n_boxes + np.maximum(box_a, box_b)) * len(tiers)
    key += links["tier"].cat.codes.to_numpy()
    once = np.flatnonzero((box_a < box_b) | ((box_a == box_b) & (src < dst)))
    k = key[once]
    arcs = np.bincount(k, minlength=size)
    cables = links["cables"].to_numpy()[once]
    sum_cables = np.bincount(k, weights=cables, minlength=size)
    sum_capacity = np.bincount(k, weights=links["capacity_Bps"].to_numpy()[once],
                               minlength=size)
    sum_failed = np.bincount(k, weights=cables * links["failed"].to_numpy()[once],
                             minlength=size)
    rate = links["rate_Bps"].to_numpy()[once]
    low_rate, high_rate = np.full(size, np.inf), np.zeros(size)
    np.minimum.at(low_rate, k, rate)
    np.maximum.at(high_rate, k, rate)
    media = list(links["medium"].cat.categories)
    medium = links["medium"].cat.codes.to_numpy()[once].astype(np.int64)
    has_medium = np.bincount(k.astype(np.int64) * len(media) + medium,
                             minlength=size * len(media)).reshape(size, len(media)) > 0
    peak = mean = np.full(size, np.nan)
    if utilization is not None:
        peak = np.zeros(size)
        np.maximum.at(peak, key, utilization)
        mean = np.bincount(key, weights=utilization, minlength=size) / np.maximum(
            np.bincount(key, minlength=size), 1)
    out = []
    for index in np.flatnonzero(arcs).tolist():
        pair, t = divmod(index, len(tiers))
        lower, upper = divmod(pair, n_boxes)
        out.append(Bundle(
            lower=lower, upper=upper, tier=str(tiers[t]), cables=int(sum_cables[index]),
            links=int(arcs[index]), rate_Bps=float(low_rate[index]),
            max_rate_Bps=float(high_rate[index]), capacity_Bps=float(sum_capacity[index]),
            medium=str(media[int(np.argmax(has_medium[index]))]) if (
                has_medium[index].sum() == 1) else "mixed",
            media=tuple(str(media[m]) for m in np.flatnonzero(has_medium[index])),
            failed_cables=int(sum_failed[index]), peak_utilization=float(peak[index]),
            mean_utilization=float(mean[index])))
    return tuple(out)


# ---------------------------------------------------------------- comparisons
@cache
def built(name):
    design, catalog = load_design(EXAMPLES / f"{name}.yaml")
    return build_fabric(design, catalog)


def fields(value):
    """A dataclass as a tuple whose floats compare bit for bit (NaN equal to NaN)."""
    return tuple(float(v).hex() if isinstance(v, float) else v
                 for v in dataclasses.astuple(value))


def assert_same(got, want):
    assert (got.detail, got.columns, got.grouping, got.slots) == (
        want.detail, want.columns, want.grouping, want.slots)
    assert np.array_equal(got.node_box, want.node_box)
    assert [fields(b) for b in got.boxes] == [fields(b) for b in want.boxes]
    assert [fields(b) for b in got.bundles] == [fields(b) for b in want.bundles]


def hostile_load(fabric, seed=0):
    """Loads 0-1.3 with some NaN, negative, -0.0 and infinite values."""
    rng = np.random.default_rng(seed)
    n = len(fabric.links)
    load = rng.random(n) * 1.3
    for value, share in ((np.nan, 0.01), (-0.4, 0.01), (-0.0, 0.01), (np.inf, 0.0005),
                         (-np.inf, 0.0005)):
        load[rng.random(n) < share] = value
    return load


def failed_copy(fabric, seed=1):
    rng = np.random.default_rng(seed)
    return fabric.with_failed(rng.random(len(fabric.links)) < 0.02)


def details(fabric):
    return ["auto", "aggregate"] + (["full"] if len(fabric.nodes) <= 400 else [])


@pytest.mark.parametrize("name", NAMES)
def test_layout_matches_the_per_row_oracle(name):
    fabric = built(name)
    degraded = failed_copy(fabric)
    for detail in details(fabric):
        for fab in (fabric, degraded):
            for load in (None, hostile_load(fab), np.linspace(0, 1, len(fab.links))):
                assert_same(topology_layout(fab, link_utilization=load, detail=detail),
                            oracle_layout(fab, link_utilization=load, detail=detail))


@pytest.mark.parametrize("name", ["tpu-v4-pod", "dual-plane-ethernet", "gb200-nvl72-cluster",
                                  "small-4x8-l40s-25gbe", "llama3-24k-roce"])
def test_layout_matches_the_oracle_on_the_per_row_fallbacks(name, monkeypatch):
    monkeypatch.setattr(runs_module, "RUNS_MAX", 0)
    design, catalog = load_design(EXAMPLES / f"{name}.yaml")
    fabric = build_fabric(design, catalog)  # no view built with the usual limits
    for fab in (fabric, failed_copy(fabric)):
        for detail in details(fab):
            load = hostile_load(fab)
            assert_same(topology_layout(fab, link_utilization=load, detail=detail),
                        oracle_layout(fab, link_utilization=load, detail=detail))


@pytest.mark.parametrize("name", ["dgx-h100-superpod", "tpu-v4-pod", "hgx-h100-server"])
def test_a_link_table_missing_directions_matches_the_oracle(name):
    """Rows whose reverse is gone: a tier left with its downward rows only (bundles
    with rows but none counted once, so not drawn) and others thinned at random."""
    fabric = built(name)
    rng = np.random.default_rng(5)
    links = fabric.links
    rows = layout_module._node_rows(fabric)
    src, dst = links["src"].to_numpy(), links["dst"].to_numpy()
    upward = (rows[src] < rows[dst]) | ((rows[src] == rows[dst]) & (src < dst))
    tier = links["tier"].to_numpy()
    keep = ~(upward & (tier == tier[-1])) & (rng.random(len(links)) > 0.2)
    links = links[keep].reset_index(drop=True)
    links["failed"] = rng.random(len(links)) < 0.05
    odd = fabric.with_frames(links=links)
    for detail in details(odd):
        load = hostile_load(odd)
        assert_same(topology_layout(odd, link_utilization=load, detail=detail),
                    oracle_layout(odd, link_utilization=load, detail=detail))
    view = odd.derived(layout_module._aggregate_view, 8)
    assert (view.sums.bundle_of_run == len(view.sums.keys)).any()


def test_a_routed_load_matches_the_oracle():
    from topomodel.analysis.collectives.collective import run_collective
    from topomodel.analysis.collectives.loads import link_utilization

    fabric = built("dgx-h100-superpod")
    run = run_collective(fabric, "allreduce", 2**30, ["all"])
    load = link_utilization(run.timing)
    assert_same(topology_layout(fabric, link_utilization=load),
                oracle_layout(fabric, link_utilization=load))


def test_the_fabric_part_is_built_once_and_shared_with_failed_copies(monkeypatch):
    design, catalog = load_design(EXAMPLES / "selene-dgx-a100.yaml")
    fabric = build_fabric(design, catalog)
    calls = []
    link_sums = layout_module._link_sums
    monkeypatch.setattr(layout_module, "_link_sums",
                        lambda *a: calls.append(1) or link_sums(*a))
    intact = topology_layout(fabric)
    loaded = topology_layout(fabric, link_utilization=hostile_load(fabric))
    degraded = failed_copy(fabric)
    failed = topology_layout(degraded)
    assert len(calls) == 1
    assert intact.boxes is loaded.boxes is failed.boxes
    assert sum(b.failed_cables for b in failed.bundles) > 0 == sum(
        b.failed_cables for b in intact.bundles)
    assert_same(failed, oracle_layout(degraded))
    topology_layout(fabric, max_columns=4)  # another column count: its own view
    assert len(calls) == 2
    with pytest.raises(ValueError, match="read-only"):
        intact.node_box[0] = 1


# ---------------------------------------------------------------- the run helpers
def test_run_starts_and_rows():
    a = np.array([3, 3, 3, 1, 1, 3])
    b = np.array([0, 0, 1, 1, 1, 1])
    bounds = run_starts((a, b))
    assert bounds.tolist() == [0, 2, 3, 5, 6]
    assert run_rows(bounds[:-1][[0, 2]], bounds[1:][[0, 2]]).tolist() == [0, 1, 3, 4]
    assert run_rows(np.empty(0, np.int64), np.empty(0, np.int64)).tolist() == []


@pytest.mark.parametrize("runs_max", [runs_module.RUNS_MAX, 0])
def test_sequential_sums_are_bincount_bit_for_bit(runs_max, monkeypatch):
    monkeypatch.setattr(runs_module, "RUNS_MAX", runs_max)
    rng = np.random.default_rng(7)
    lengths = rng.integers(64, 400, 60)
    bounds = np.concatenate(([0], np.cumsum(lengths)))
    key = rng.integers(0, 6, 60)  # keys recur: later runs continue a bin's sum
    key[::7] = 6  # left out
    values = rng.random(bounds[-1]) * rng.choice([1e-9, 1.0, 1e9], bounds[-1])
    got = sequential_sums(values, key, bounds, 6)
    want = np.bincount(np.repeat(key, lengths), weights=values, minlength=7)[:6]
    assert [v.hex() for v in got] == [v.hex() for v in want]
    assert (got != np.array([values[np.repeat(key, lengths) == k].sum()
                             for k in range(6)])).any()  # the order matters here


def test_add_into_is_exact_beyond_float_precision():
    big = 2**53 + 1
    assert add_into(2, np.array([1, 1]), np.array([big, 2])).tolist() == [0, big + 2]
