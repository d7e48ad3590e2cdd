"""Bisection: closed-form counts, the exact minimum against brute force on tiny fabrics,
and the worst cut of an oversubscribed fabric at the spine tier."""

import pytest
from conftest import MESH_CATALOG

from topomodel.analysis.bisection import (
    bisection,
    brute_force_bisection,
    candidate_halves,
    closed_form,
)
from topomodel.fabric.build import build_fabric
from topomodel.fabric.tables import link_weaker_Bps
from topomodel.inputs.design import load_design


def hosts(n, k, extra=""):
    return f"system: toy-host\nsystems: {n}\nscaleout:\n  switch: toy-switch-{k}\n" + extra


def tier_capacity_Bps(fabric, tier):
    links = fabric.links[fabric.links["tier"] == tier]
    return float(links["capacity_Bps"].sum()) / 2  # one direction


@pytest.mark.parametrize(("n", "k", "ratio", "spine_links"), [
    (8, 4, "1:1", 8),    # 4 leaves x 2 up
    (16, 8, "1:1", 16),  # 4 leaves x 4 up
    (12, 8, "3:1", 4),   # 2 leaves of 6 down, 2 up each
])
def test_closed_form_is_half_the_least_tier(toy, n, k, ratio, spine_links):
    fabric = toy(hosts(n, k, f"  oversubscription: ['{ratio}']\n"))
    nic_Bps = 100e9 / 8
    assert tier_capacity_Bps(fabric, "spine") == pytest.approx(spine_links * nic_Bps)
    value, how = closed_form(fabric)
    assert value == pytest.approx(min(n, spine_links) * nic_Bps / 2)
    assert "spine" in how or "leaf" in how


@pytest.mark.parametrize("text", [
    hosts(8, 4),                                       # 2-tier, non-blocking
    hosts(12, 8, "  oversubscription: ['3:1']\n"),     # oversubscribed leaves
    hosts(12, 8, "  unit: 4\n  oversubscription: ['2:1']\n"),  # three units: no even split
    hosts(10, 8, "  unit: 6\n  partial_unit: true\n"),        # units of 6 and 4
    hosts(8, 4, "failures:\n  nodes: [spine0]\n"),     # a failed spine
    "system: toy-box\nsystems: 3\nscaleout:\n  switch: toy-switch-8\n",  # 4-acc domains
    "system: toy-box\nsystems: 2\nscaleout:\n  switch: toy-switch-4\n",
])
def test_exact_bisection_is_the_brute_force_minimum(toy, text):
    """Over every balanced partition of the accelerators, the cheapest cut is the one the
    candidates find (tiny fabrics: at most 12 accelerators)."""
    fabric = toy(text)
    oracle = brute_force_bisection(fabric)
    cut = bisection(fabric)
    assert cut.max_flow_Bps == pytest.approx(oracle, rel=1e-6)
    assert cut.bisection_Bps == cut.max_flow_Bps


def test_one_favourable_partition_is_not_the_bisection(toy):
    """Units of 6 and 4 hosts under 8-port leaves: rank-order halves put five hosts of
    the first unit against one of it and four of the other; brute force finds the worst
    cut, and the reported bisection is never above it."""
    fabric = toy(hosts(10, 8, "  unit: 6\n  partial_unit: true\n"))
    assert bisection(fabric).bisection_Bps <= brute_force_bisection(fabric) * (1 + 1e-9)


def test_candidates_are_balanced(toy):
    fabric = toy(hosts(12, 8, "  unit: 4\n  oversubscription: ['2:1']\n"))
    for _, a, b in candidate_halves(fabric):
        assert len(a) == len(b) == 6


def test_5_to_1_dgx_h100_bisection_is_the_spine_tier_figure():
    """64 DGX H100 on QM9700 at 5:1 (issue 15): the bisection is half what the spine tier
    carries per direction, not a favourable cut through shared leaves, and its share of
    the injection is the realised oversubscription's inverse."""
    design, catalog = load_design("d.yaml", text="system: dgx-h100\nsystems: 64\n"
                                  "scaleout:\n  switch: qm9700\n"
                                  "  oversubscription: ['5:1']\n")
    fabric = build_fabric(design, catalog)
    spine = tier_capacity_Bps(fabric, "spine")
    cut = bisection(fabric)
    assert cut.bisection_Bps == pytest.approx(spine / 2, rel=1e-6)
    assert cut.closed_form_Bps == pytest.approx(cut.max_flow_Bps, rel=1e-6)
    leaf = next(t for t in fabric.clos_tiers if t.name == "leaf")
    assert cut.ratio == pytest.approx(1 / leaf.oversubscription, rel=1e-6)
    assert cut.bisection_Bps < spine


def test_units_that_cannot_split_evenly_say_why_exact_exceeds_closed_form():
    design, catalog = load_design("d.yaml", text="system: hgx-h200\nsystems: 252\n"
                                  "scaleout:\n  switch: tomahawk5\n  unit: 84\n"
                                  "  oversubscription: ['2:1']\n")
    cut = bisection(build_fabric(design, catalog))
    assert cut.max_flow_Bps > cut.closed_form_Bps
    assert "cannot be split evenly" in cut.note
    assert "TB/s" in cut.note and "e+" not in cut.note


def test_tier_totals_read_the_fabric_s_weaker_directions_bit_for_bit():
    """The totals come from the fabric's kept weaker directions and reverse rows; they
    equal, to the bit, the ones found by pairing each remaining row with its reverse
    (same ends swapped) afresh, with and without failed rows."""
    import numpy as np
    import pandas as pd

    from topomodel.analysis.bisection import _tier_totals

    def again(links):
        cap = links["capacity_Bps"].to_numpy()
        forward = pd.Series(cap, index=pd.MultiIndex.from_arrays(
            [links["src"].to_numpy(), links["dst"].to_numpy()]))
        back = pd.MultiIndex.from_arrays([links["dst"].to_numpy(), links["src"].to_numpy()])
        reverse = forward.reindex(back).to_numpy()  # NaN: the reverse row is gone
        weaker = pd.Series(np.where(np.isnan(reverse), cap, np.minimum(cap, reverse)),
                           index=links.index)
        return {str(t): float(v) / 2 for t, v in weaker.groupby(
            links["tier"], observed=True).sum().items()}

    fabric = build_fabric(*load_design("examples/dual-plane-ethernet.yaml"))
    assert _tier_totals(fabric, unfailed=True) == again(fabric.links)
    assert _tier_totals(fabric, unfailed=False) == again(fabric.links)
    failed = np.zeros(len(fabric.links), bool)
    failed[np.flatnonzero(fabric.links["tier"].to_numpy() == "spine")[:3]] = True
    cut = fabric.with_failed(failed)
    assert _tier_totals(cut, unfailed=True) == again(cut.links[~failed])
    assert _tier_totals(cut, unfailed=True) != _tier_totals(fabric, unfailed=True)
    assert _tier_totals(cut, unfailed=False) == again(cut.links)


def torus(systems, shape):
    return (f"system: toy-host\nsystems: {systems}\nscaleup:\n  kind: torus\n"
            f"  link: toy-link\n  shape: {shape}\n")


@pytest.mark.parametrize(("text", "links"), [
    # 4 accelerators on 2 chips, 2 links to each: the 2 of one half cross with their 8
    ("system: toy-box\nsystems: 1\n", 8),
    # 4 accelerators of 6 links, 2 to each peer: 2 x 2 pairs cross, 2 links each
    ("system: toy-mesh4\nsystems: 1\n", 8),
    # odd meshes: halves of 1 and 2 (2 links a pair), of 2 and 3 (1 link a pair)
    ("system: toy-mesh3\nsystems: 1\n", 1 * 2 * 2),
    ("system: toy-mesh5\nsystems: 1\n", 2 * 3 * 1),
    # a wrapped length-2 dimension links each pair with both directions' cables (2):
    # cut across it, 2 pairs of 2 cross; across a ring of 4, each of 2 rings is cut twice
    (torus(4, "[2, 2]"), 4),
    (torus(2, "[2]"), 2),
    (torus(8, "[2, 4]"), 4),
])
def test_one_scaleup_domain_s_closed_form_is_the_brute_force_minimum(toy, text, links):
    """One scale-up domain, no scale-out: the closed form counts the links the worst
    balanced cut crosses (toy-link: 10 GB/s per direction), as brute force finds."""
    fabric = toy(text, extra=MESH_CATALOG)
    assert fabric.structure.scaleout.kind == "none"
    value, _ = closed_form(fabric)
    assert value == pytest.approx(links * 10e9)
    assert brute_force_bisection(fabric) == pytest.approx(value, rel=1e-6)


def test_uneven_halves_take_the_smaller_halfs_share():
    # 127 DGX H100 (1,016 GPUs): the balanced halves allowed by whole systems are 504 and
    # 512 GPUs, so the worst cut is the smaller half's 504 x 50 GB/s = 25.2 TB/s (one
    # half's share would give 25.4), and the exact max-flow agrees
    superpod = build_fabric(*load_design("examples/dgx-h100-superpod.yaml"))
    value, how = closed_form(superpod)
    assert value == pytest.approx(504 * 50e9, rel=1e-12)
    assert "504 of 1,016" in how
    assert bisection(superpod).max_flow_Bps == pytest.approx(value, rel=1e-9)


def test_an_in_network_allreduce_says_why_no_bytes_cross(capsys):
    import json as _json
    from pathlib import Path

    from topomodel.cli import main as _main

    design = str(Path(__file__).resolve().parents[2] / "examples" / "hgx-h100-server.yaml")
    argv = ["route", design, "--collective", "allreduce", "--size", "1 GiB"]
    assert _main([*argv, "--algorithm", "innetwork", "--format", "json"]) == 0
    cross = _json.loads(capsys.readouterr().out)["bisection"]
    assert cross["bytes"] == 0
    assert _main([*argv, "--algorithm", "innetwork"]) == 0
    assert "in-network reduction: each rank sends its data to a switch" in (
        capsys.readouterr().out)
    assert _main([*argv, "--algorithm", "ring"]) == 0  # bytes cross: nothing to explain
    assert "in-network reduction" not in capsys.readouterr().out


@pytest.mark.parametrize("design", ["examples/dual-plane-ethernet.yaml",
                                    "examples/asymmetric-sites.yaml"])
def test_failed_copies_subtract_their_failed_rows_bit_for_bit(monkeypatch, design):
    """Where every sum of the capacities is exact, a copy with failed rows takes its
    tier totals as the sums over every row less the failed rows' (and adds back the live
    rows whose reverse row failed, at their own capacity): the same figures, to the bit,
    as adding the live rows afresh, for rows failed one way or both ways."""
    import numpy as np

    from topomodel.analysis import bisection as module

    def totals(exact):
        monkeypatch.setattr(module, "exact_sums", lambda values: exact)
        fabric = build_fabric(*load_design(design))
        assert fabric.derived(module.tier_sums).exact is exact
        rng = np.random.default_rng(7)
        out = []
        for share in (0.001, 0.05, 0.5):
            failed = rng.random(len(fabric.links)) < share  # often one direction alone
            cut = fabric.with_failed(failed)
            out.append((module._tier_totals(cut, unfailed=True), closed_form(cut)))
        whole = np.zeros(len(fabric.links), bool)
        whole[:40] = True
        whole[fabric.reverse_rows[:40]] = True  # both directions
        out.append((module._tier_totals(fabric.with_failed(whole), unfailed=True), None))
        return out

    assert totals(True) == totals(False)
    if "asymmetric" in design:  # rows whose reverse failed count at their own rate
        fabric = build_fabric(*load_design(design))
        assert (fabric.link_arrays["capacity_Bps"] != fabric.derived(link_weaker_Bps)).any()


def test_exact_sums_needs_whole_multiples_of_the_top_spacing():
    import numpy as np

    from topomodel.analysis.bisection import exact_sums

    assert exact_sums(np.array([50e9, 25e9, 800e9] * 1000))
    assert not exact_sums(np.array([50e9, 0.1]))
    assert not exact_sums(np.array([50e9, -25e9]))
    assert not exact_sums(np.array([50e9, np.inf]))
    assert exact_sums(np.zeros(3)) and exact_sums(np.zeros(0))
