"""Failure domains and their blast radius, against counts made by hand."""

import json
import subprocess
import sys

import pytest
from conftest import DUAL_PLANE

from topomodel.analysis.reliability.blast_radius import SECONDS_PER_DAY, blast_radius, worst
from topomodel.errors import CatalogError, DesignError
from topomodel.fabric.build import build_fabric
from topomodel.fabric.domains import domain_map, systems_per_rack
from topomodel.inputs.catalog import load_catalog
from topomodel.inputs.design import load_design
from topomodel.inputs.parts import Model
from topomodel.traffic.layout import Layout

YEAR_S = 365.25 * 86400


@pytest.fixture(scope="module")
def dual():
    return build_fabric(*load_design("dual.yaml", text=DUAL_PLANE))


def _stopped(fabric, kind):
    dmap = domain_map(fabric, kind)
    return int((dmap.of_node[fabric.accelerators] == 0).sum()), dmap.count


def test_gb200_counts_by_hand(example_fabric):
    """8 NVL72 racks: a rack is one system (72 GPUs); 4 racks a feed (288); 8 racks a
    loop (576); one plane; one site."""
    fabric = example_fabric("gb200-nvl72-cluster")
    assert systems_per_rack(fabric) == 1
    assert _stopped(fabric, "rack") == (72, 8)
    assert _stopped(fabric, "power_feed") == (288, 2)
    assert _stopped(fabric, "cooling_loop") == (576, 1)
    assert _stopped(fabric, "site") == (576, 1)
    assert domain_map(fabric, "plane").count == 1


def test_servers_counts_by_hand(dual):
    """32 8-GPU servers, 4 a rack: 8 racks of 32 GPUs; 2 racks a feed (64 GPUs, 4
    feeds); 4 racks a loop (128, 2 loops); 2 sites of 16 servers (128 GPUs)."""
    assert systems_per_rack(dual) == 4
    assert _stopped(dual, "rack") == (32, 8)
    assert _stopped(dual, "power_feed") == (64, 4)
    assert _stopped(dual, "cooling_loop") == (128, 2)
    assert _stopped(dual, "site") == (128, 2)
    plane = domain_map(dual, "plane")
    assert plane.count == 2
    assert (plane.of_node[dual.accelerators] == -1).all()  # a plane stops no GPU


def test_blast_radius_rows(dual):
    rows = {r.kind: r for r in blast_radius(dual)}
    rack, plane = rows["rack"], rows["plane"]
    assert rack.accelerators_stopped == 32 and rack.job_stopped
    # a rack's 32 NICs of 256 lose their leaf links: 1/8 of the leaf tier
    assert rack.tier_left["leaf"] == pytest.approx(7 / 8)
    assert plane.accelerators_stopped == 0 and not plane.job_stopped
    assert plane.tier_left["leaf"] == pytest.approx(0.5)
    assert plane.scaleout_removed_share == pytest.approx(0.5)
    assert plane.bisection_Bps == pytest.approx(plane.healthy_bisection_Bps / 2)
    catalog = dual.catalog
    rack_rate = catalog.entries["rack-default"].rate_per_s
    assert rack.failures_per_day == pytest.approx(8 * rack_rate * SECONDS_PER_DAY)
    assert rack.repair_s == 8 * 3600
    # a loop and a site both stop 128 GPUs: a tie goes to the first kind
    assert worst(list(rows.values())).kind == "cooling_loop"


def test_plane_step_rerouted(dual):
    """The job survives a plane; its step is routed around it and is no faster."""
    layout = Layout(tp=8, dp=32)
    rows = {r.kind: r for r in blast_radius(dual, kinds=("plane", "rack"),
                                            model=dual.catalog.get("llama3-8b", Model),
                                            layout=layout)}
    assert rows["plane"].step_s is not None
    assert rows["plane"].step_s >= rows["plane"].healthy_step_s
    assert rows["rack"].step_s is None  # stopped: no step to re-route


def test_a_known_step_of_the_same_failed_links_is_taken(dual, monkeypatch):
    """A step already run with the plane failed (the goodput's degraded step) is the
    plane row's: not run again; a step of other failed links is not taken."""
    import topomodel.analysis.training.step as step_module
    from topomodel.analysis.reliability.goodput import with_part_failed

    layout = Layout(tp=8, dp=32)
    model = dual.catalog.get("llama3-8b", Model)
    (routed,) = blast_radius(dual, kinds=("plane",), model=model, layout=layout)
    plane = with_part_failed(dual, "plane:0").link_arrays["failed"]
    spine = with_part_failed(dual, "p0/spine0").link_arrays["failed"]
    ran = []
    real = step_module.step_time

    def step_time(fabric, *args, **kwargs):
        ran.append(fabric)
        return real(fabric, *args, **kwargs)

    monkeypatch.setattr(step_module, "step_time", step_time)
    (taken,) = blast_radius(dual, kinds=("plane",), model=model, layout=layout,
                            healthy_step_s=routed.healthy_step_s,
                            known_steps=[(spine, 1.0), (plane, routed.step_s)])
    assert taken == routed and not ran
    (again,) = blast_radius(dual, kinds=("plane",), model=model, layout=layout,
                            healthy_step_s=routed.healthy_step_s,
                            known_steps=[(spine, 1.0)])
    assert again == routed and len(ran) == 1


def test_single_plane_failure_stops_job(example_fabric):
    rows = {r.kind: r for r in blast_radius(example_fabric("gb200-nvl72-cluster"))}
    assert rows["plane"].job_stopped and rows["plane"].bisection_Bps == 0.0


def test_too_many_sites_refused():
    with pytest.raises(DesignError, match=r"domains\.sites"):
        load_design("x.yaml", text=DUAL_PLANE.replace("sites: 2", "sites: 33"))


def test_domain_rate_needs_repair(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("failure_rates:\n  my-rack:\n    name: r\n    component: rack\n"
                    "    afr: '1 %/yr'\n    source: s\n    provenance: assumed\n")
    with pytest.raises(CatalogError, match="repair"):
        load_catalog([path])


def test_build_cli_failure_domains(tmp_path):
    path = tmp_path / "dual.yaml"
    path.write_text(DUAL_PLANE)
    out = subprocess.run([sys.executable, "-m", "topomodel", "build", str(path),
                          "--failure-domains", "--format", "json"],
                         capture_output=True, text=True, check=True).stdout
    data = json.loads(out)
    kinds = [r["kind"] for r in data["failure_domains"]]
    assert kinds == ["rack", "power_feed", "cooling_loop", "plane", "site"]
    assert data["failure_domains"][0]["accelerators_stopped"] == 32


def test_a_rack_that_holds_the_whole_fabric_leaves_no_bisection():
    # one HGX H100 server: its rack, feed, loop and site hold every link; the closed
    # form over no live scale-up link raised a KeyError before
    fabric = build_fabric(*load_design("examples/hgx-h100-server.yaml"))
    rows = blast_radius(fabric)
    assert [r.kind for r in rows] == ["rack", "power_feed", "cooling_loop", "site"]
    for r in rows:
        assert r.accelerators_stopped == 8 and r.job_stopped
        assert r.bisection_Bps == 0.0 and r.tier_left == {"scaleup": 0.0}


def test_fail_domain_fails_what_the_blast_radius_fails(dual, tmp_path, capsys):
    import numpy as np

    from topomodel.cli import main
    from topomodel.fabric.domains import failed_domain_links, with_domains_failed

    for kind in ("rack", "plane", "site"):
        failed = with_domains_failed(dual, [f"{kind}:0"]).links["failed"].to_numpy()
        dead = domain_map(dual, kind).of_node == 0
        assert np.array_equal(failed, failed_domain_links(dual, dead))
    both = with_domains_failed(dual, ["rack:0", "rack:1"]).links["failed"].sum()
    assert both == 2 * with_domains_failed(dual, ["rack:0"]).links["failed"].sum()
    # the step with --fail-domain plane:0 is the blast radius's re-routed plane row
    design = tmp_path / "dual.yaml"
    design.write_text(DUAL_PLANE)
    layout = Layout(tp=8, dp=32)
    row = blast_radius(dual, kinds=("plane",), model=dual.catalog.get("llama3-8b", Model),
                       layout=layout)[0]
    assert main(["step", str(design), "--model", "llama3-8b", "--tp", "8",
                 "--fail-domain", "plane:0", "--routing", "ecmp", "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["step_time_s"] == pytest.approx(row.step_s)


@pytest.mark.parametrize(("spec", "said"), [
    ("plane:2", "--fail-domain: plane:2: the design has 2 plane domain(s) (domains 0-1)"),
    ("pdu:0", "--fail-domain: 'pdu:0': expected KIND:N")])
def test_fail_domain_refuses_what_the_design_lacks(tmp_path, capsys, spec, said):
    from topomodel.cli import main

    design = tmp_path / "dual.yaml"
    design.write_text(DUAL_PLANE)
    assert main(["route", str(design), "--collective", "allreduce", "--size", "1 MiB",
                 "--fail-domain", spec]) == 2
    err = capsys.readouterr().err
    assert said in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_fail_domain_is_a_sweep_option():
    from topomodel.analysis.options import OPTIONS, step_inputs

    assert OPTIONS["fail_domain"].flag == "--fail-domain"
    inputs = step_inputs({"model": "llama3-8b", "fail_domain": ["power_feed:1"]})
    assert inputs.fail_domain == ("power_feed:1",)


def test_every_domain_sweep_worst_and_median_by_hand():
    """30 servers, 4 a rack: racks 0-6 hold 4 servers (32 GPUs), rack 7 two (16). A job
    on the first 64 GPUs is in racks 0 and 1: the worst rack is 0 (stops the job), and
    ranked from least harmful (rack 7, then 6, 5, 4 ...) the median (4th of 8) is rack 4,
    which stops 32 GPUs and not the job."""
    fabric = build_fabric(*load_design("d.yaml", text=DUAL_PLANE.replace(
        "systems: 32", "systems: 30")))
    rows = blast_radius(fabric, kinds=(), every=("rack",), layout=Layout(tp=8, dp=8))
    assert [(r.pick, r.domain) for r in rows] == [("worst", 0), ("median", 4)]
    worst_row, median = rows
    assert worst_row.job_stopped and worst_row.accelerators_stopped == 32
    assert not median.job_stopped and median.accelerators_stopped == 32
    assert median.job_accelerators_stopped == 0


def test_sweep_order_matches_each_domain_failed_alone(dual):
    """The array ranking against each domain failed one at a time."""
    import numpy as np

    from topomodel.analysis.reliability.blast_radius import sweep_order
    from topomodel.fabric.domains import with_domains_failed
    from topomodel.vocabulary import FAT_TREE_TIERS

    links = dual.links
    out = links["tier"].astype(str).isin(FAT_TREE_TIERS).to_numpy()
    capacity = links["capacity_Bps"].to_numpy()
    in_job = np.zeros(len(dual.nodes), bool)
    in_job[dual.accelerators[:64]] = True
    for kind in ("rack", "power_feed", "plane"):
        dmap = domain_map(dual, kind)
        keys = []
        for k in range(dmap.count):
            failed = with_domains_failed(dual, [f"{kind}:{k}"]).links["failed"].to_numpy()
            dead = dmap.of_node == k
            keys.append((bool((dead & in_job).any()),
                         int((dead[dual.accelerators]).sum()),
                         capacity[out & failed].sum() / capacity[out].sum(), -k))
        expected = sorted(range(dmap.count), key=lambda k: keys[k])
        assert list(sweep_order(dual, dmap, in_job, spans=True)) == expected


def test_dual_plane_example_counts_by_hand(example_fabric):
    """examples/dual-plane-ethernet.yaml, default domains: 128 HGX H200 servers, 4 a rack
    (32 racks of 32 GPUs), 4 racks a feed (8 feeds of 128), 8 racks a loop (4 loops of
    256), its 2 planes (no GPU in either), one site (all 1,024). Every domain of a kind
    holds as many, and together they hold every GPU once."""
    import numpy as np

    fabric = example_fabric("dual-plane-ethernet")
    assert systems_per_rack(fabric) == 4
    for kind, (per_domain, count) in {"rack": (32, 32), "power_feed": (128, 8),
                                      "cooling_loop": (256, 4), "site": (1024, 1)}.items():
        assert _stopped(fabric, kind) == (per_domain, count)
        held = domain_map(fabric, kind).of_node[fabric.accelerators]
        assert (np.bincount(held, minlength=count) == per_domain).all()
    plane = domain_map(fabric, "plane")
    assert plane.count == 2 and (plane.of_node[fabric.accelerators] == -1).all()
    # each plane holds half the 24 scale-out switches (16 leaves, 8 spines)
    assert [int((plane.of_node == p).sum()) for p in (0, 1)] == [12, 12]


def test_rows_are_the_same_with_the_sums_subtracted_or_added_afresh(monkeypatch):
    """The tier shares and bisections of each row, from the sums over every row less
    the failed rows' (capacities whose sums are exact), equal to the bit those added
    over the live rows afresh."""
    from topomodel.analysis import bisection

    def rows(exact):
        monkeypatch.setattr(bisection, "exact_sums", lambda values: exact)
        fabric = build_fabric(*load_design("dual.yaml", text=DUAL_PLANE))
        return blast_radius(fabric, every=("rack", "power_feed"))

    assert rows(True) == rows(False)
