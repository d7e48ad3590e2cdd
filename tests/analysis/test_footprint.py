"""The job's network parts (analysis/training/footprint.py) against the per-row implementation
they replaced, kept here as the oracle: every component line, every field, on every
example, intact and with parts failed, on the whole fabric and on part of it."""

from pathlib import Path

import numpy as np
import pytest

from topomodel.analysis.reliability import goodput
from topomodel.analysis.reliability.goodput import component_lines, degraded_lines, with_part_failed
from topomodel.analysis.training import footprint
from topomodel.fabric.build import build_fabric
from topomodel.fabric.columns import Coded, CodeLabels
from topomodel.inputs.design import load_design
from topomodel.inputs.parts import Optic, ScaleupSwitch

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
NAMES = sorted(p.stem for p in EXAMPLES.glob("*.yaml"))


def oracle_parts(fabric, in_job):
    """The network parts as the per-row implementation found them (goodput.py before
    analysis/training/footprint.py): masks and gathers over every link row, a fixed-point climb,
    a full ``below`` table and ``np.unique`` group-bys."""
    nodes, links, catalog = fabric.nodes, fabric.links, fabric.catalog
    level = np.array([footprint.TIER_LEVEL[t] for t in nodes["tier"].cat.categories])[
        nodes["tier"].cat.codes.to_numpy()]
    src, dst = links["src"].to_numpy(), links["dst"].to_numpy()
    alive = ~links["failed"].to_numpy()
    level_src, level_dst = level[src], level[dst]
    up = np.flatnonzero((level_src < level_dst) & alive)
    side = np.flatnonzero((level_src == level_dst) & alive)
    up_src, up_dst = src[up], dst[up]
    needed = in_job.copy()
    for _ in footprint.TIER_LEVEL:
        reach = needed.copy()
        reach[up_dst[needed[up_src]]] = True
        if (reach == needed).all():
            break
        needed = reach
    cables = links["cables"].to_numpy()
    up_cables = np.bincount(up_src, weights=cables[up], minlength=len(nodes))
    up_neighbours = np.bincount(up_src, minlength=len(nodes))
    footprint_up = up[needed[up_src]]
    below = np.full(len(nodes), -1)
    below[dst[footprint_up]] = src[footprint_up]
    kind = Coded(nodes["kind"])
    must_reach = in_job & kind.equals("nic")
    sole_uplink = footprint_up[cables[footprint_up] == up_cables[src[footprint_up]]]
    sole_level = level_src[sole_uplink]
    for lower in sorted(set(footprint.TIER_LEVEL.values())):
        rows = sole_uplink[must_reach[src[sole_uplink]] & (sole_level == lower)]
        must_reach[dst[rows]] = True
    critical = must_reach & ~in_job
    system = nodes["system"].to_numpy()
    names = nodes["name"]
    switches = np.flatnonzero(needed & (system < 0) & (kind.equals("switch")
                                                       | kind.equals("scaleup_switch")))

    def alternatives(switch):
        node = below[switch]
        while node >= 0 and up_neighbours[node] == 1 and below[node] >= 0:
            node = below[node]
        return max(1, int(up_neighbours[node])) if node >= 0 else 1

    parts = []
    for (model, tier, single), (count, first) in oracle_grouped(
            switches, CodeLabels(nodes["model"]), CodeLabels(nodes["tier"]), critical,
            np.ones(len(nodes))).items():
        part = "scaleup_switch" if isinstance(catalog.entries[model], ScaleupSwitch) else "switch"
        parts.append(footprint.NetworkPart(part, model, tier, count, single, (),
                                           str(names.iat[first]), 1, alternatives(first)))
    peer = side[(src[side] < dst[side]) & needed[src[side]] & needed[dst[side]]]
    crossed = ~Coded(links["optic"]).equals("")
    counted = np.zeros(len(src), bool)
    counted[footprint_up] = True
    counted[peer] = True
    cabled = np.flatnonzero(counted & crossed)
    peer_cables = np.bincount(src[side], weights=cables[side], minlength=len(nodes))
    upward = np.zeros(len(src), bool)
    upward[up] = True
    single_link = np.zeros(len(src), bool)
    c_src, c_dst = src[cabled], dst[cabled]
    single_link[cabled] = (upward[cabled] & must_reach[c_src] & (up_cables[c_src] == 1)) | (
        (system[c_src] >= 0) & (system[c_src] == system[c_dst]))
    for (optic_id, tier, single), (count, first) in oracle_grouped(
            cabled, CodeLabels(links["optic"]), CodeLabels(links["tier"]), single_link,
            cables).items():
        form = catalog.get(optic_id, Optic).form
        per_link = 2 if form in footprint.MODULE_FORMS else 1
        parts.append(footprint.NetworkPart(
            "optic", optic_id, f"{tier} link", count * per_link, single, (form,),
            f"{names.iat[src[first]]} -- {names.iat[dst[first]]}", int(cables[first]),
            max(1, int(up_cables[src[first]] if upward[first] else peer_cables[src[first]]))))
    return parts


def oracle_grouped(rows, model, tier, single, weight):
    tiers = max(len(tier.labels), 1)
    keys = (model.codes[rows].astype(np.int64) * tiers + tier.codes[rows]) * 2 + single[rows]
    found, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
    totals = np.bincount(inverse, weights=weight[rows], minlength=len(found))
    groups = [((model.label(int(k) // 2 // tiers), tier.label(int(k) // 2 % tiers),
                bool(k % 2)), (int(total), int(rows[at])))
              for k, total, at in zip(found, totals, first, strict=True)]
    return dict(sorted(groups, key=lambda group: group[0]))


def assert_lines_match_the_oracle(fabric, world, monkeypatch):
    lines = component_lines(fabric, world)
    with monkeypatch.context() as patched:
        patched.setattr(goodput, "network_parts", oracle_parts)
        expected = component_lines(fabric, world)
    assert lines == expected  # every field of every line, in order
    assert any(ln.tier.endswith(" link") for ln in lines) or not any(
        ln.component == "optic" for ln in expected)
    return lines


def failed_copies(fabric, lines):
    """The fabric with each redundant tier's representative failed (a switch or a link
    bundle), as the degraded steps fail them: the first and the last such tier."""
    tiers = degraded_lines(lines)
    picked = {id(ln): ln for ln in (tiers[:1] + tiers[-1:])}.values()
    return [with_part_failed(fabric, ln.representative) for ln in picked]


@pytest.mark.parametrize("name", NAMES)
def test_lines_match_the_per_row_implementation(name, monkeypatch, example_fabric):
    fabric = example_fabric(name)
    world = fabric.accelerator_count
    lines = assert_lines_match_the_oracle(fabric, world, monkeypatch)
    for failed in failed_copies(fabric, lines):
        assert failed.links["failed"].any()
        assert_lines_match_the_oracle(failed, world, monkeypatch)
    if world > 1:  # part of the fabric: the footprint climbs from fewer systems
        assert_lines_match_the_oracle(fabric, world // 2 + 1, monkeypatch)


@pytest.mark.parametrize("name", ["dgx-h100-superpod", "tpu-v4-pod", "dual-plane-ethernet",
                                  "gb200-nvl72-cluster"])
def test_lines_match_with_each_level_picked_by_search(name, monkeypatch, example_fabric):
    """With the runs of upward rows too many to walk as slices, each level's rows are
    found by one search: the same lines."""
    fabric = example_fabric(name)
    lines = component_lines(fabric, fabric.accelerator_count)
    monkeypatch.setattr(footprint, "RUNS_MAX", 0)
    assert_lines_match_the_oracle(fabric, fabric.accelerator_count, monkeypatch)
    assert component_lines(fabric, fabric.accelerator_count) == lines


@pytest.mark.parametrize("design", [
    "system: toy-host\nsystems: 8\nscaleout:\n  switch: toy-switch-8\n",
    "system: toy-host\nsystems: 6\nscaleout:\n  switch: toy-switch-4\n",
    "system: toy-host\nsystems: 8\nscaleup:\n  kind: torus\n  link: toy-link\n"
    "  shape: [8]\nlayout:\n  cables: {scaleup: toy-dr-100g}\n",
])
def test_lines_match_on_toy_fabrics(toy, design, monkeypatch):
    fabric = toy(design)
    lines = assert_lines_match_the_oracle(fabric, fabric.accelerator_count, monkeypatch)
    for failed in failed_copies(fabric, lines):
        assert_lines_match_the_oracle(failed, fabric.accelerator_count, monkeypatch)


@pytest.mark.parametrize("failures", [
    'failures:\n  links: ["sys004/nic2 -- leaf02"]\n',  # a NIC left one uplink
    "failures:\n  nodes: [leaf02]\n  links: [\"leaf05 -- spine01\"]\n",
])
def test_a_design_that_fails_parts_matches_too(tmp_path, failures, monkeypatch, example_fabric):
    """A design's own ``failures:``: failed rows are neither climbed nor counted."""
    path = tmp_path / "d.yaml"
    path.write_text((EXAMPLES / "dgx-h100-superpod.yaml").read_text() + failures)
    design, catalog = load_design(path)
    fabric = build_fabric(design, catalog)
    assert fabric.links["failed"].any()
    lines = assert_lines_match_the_oracle(fabric, fabric.accelerator_count, monkeypatch)
    assert lines != component_lines(example_fabric("dgx-h100-superpod"), fabric.accelerator_count)
