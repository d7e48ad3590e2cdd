"""Goodput: failure rates, interruptions, checkpoint interval, degradation, CLI."""

import json
import math
import textwrap
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from topomodel.analysis.bom import per_system_cost
from topomodel.analysis.reliability.goodput import (
    SECONDS_PER_DAY,
    SECONDS_PER_YEAR,
    SPARE_CEILING_SHARE,
    TARGET_EFFECTIVE_TIME,
    ComponentLine,
    GoodputAssumptions,
    component_lines,
    daly_interval_s,
    effective_time_fraction,
    estimated_loss,
    goodput,
    job_goodput,
    no_spare_probability,
    poisson_tail,
)
from topomodel.analysis.reliability.goodput_whatifs import what_ifs, with_optic_form
from topomodel.analysis.training.model import parameter_counts
from topomodel.analysis.training.step import StepAssumptions, step_time
from topomodel.cli import main
from topomodel.errors import CatalogError
from topomodel.fabric.build import build_fabric
from topomodel.inputs.catalog import load_catalog
from topomodel.inputs.design import load_design
from topomodel.inputs.parts import Model
from topomodel.inputs.reliability import FailureRate
from topomodel.report.goodput import (
    effective_time_text,
    goodput_json,
    goodput_tables,
    storage_text,
)
from topomodel.traffic.layout import Layout

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
QUIET = StepAssumptions(jitter_cv=0.0)


def fabric_of(example, *extra):
    design, catalog = load_design(EXAMPLES / f"{example}.yaml", extra_catalogs=list(extra))
    return build_fabric(design, catalog)


def interruptions_per_day(lines):
    return sum(ln.failures_per_s for ln in lines if ln.interrupts) * SECONDS_PER_DAY


def test_young_daly_closed_form():
    # Young's first order sqrt(2 delta M) for a small write time; Daly's series above it.
    write, mtbi = 30.0, 10 * SECONDS_PER_DAY
    young = math.sqrt(2 * write * mtbi)
    x = write / (2 * mtbi)
    assert daly_interval_s(write, mtbi) == pytest.approx(
        young * (1 + math.sqrt(x) / 3 + x / 9) - write)
    assert daly_interval_s(write, mtbi) == pytest.approx(young, rel=0.01)
    assert daly_interval_s(3 * mtbi, mtbi) == mtbi  # writing takes longer than 2 MTBI
    assert daly_interval_s(write, math.inf) == math.inf


def test_effective_time_by_hand():
    # 1 h between checkpoints, 1 min to write, 10 min down, a failure per day of running:
    # each day of running redoes half a cycle, and 60/61 of the rest computes; each
    # costs a day and 10 minutes of wall time
    tau, delta, down, mtbi = 3600.0, 60.0, 600.0, SECONDS_PER_DAY
    expected = tau / (tau + delta) * (mtbi - (tau + delta) / 2) / (mtbi + down)
    assert effective_time_fraction(tau, delta, down, mtbi) == pytest.approx(expected)
    first_order = tau / (tau + delta) * (1 - ((tau + delta) / 2 + down) / mtbi)
    # R << M: they differ in the second order, R (cycle / 2 + R) / M^2 (2e-4 here)
    assert expected - first_order == pytest.approx(
        tau / (tau + delta) * down * ((tau + delta) / 2 + down) / mtbi**2, rel=0.05)
    assert effective_time_fraction(tau, delta, down, math.inf) == pytest.approx(tau / 3660)
    # down as long as it runs: half the wall time runs, less its rework and writes
    assert effective_time_fraction(tau, delta, mtbi, mtbi) == pytest.approx(expected * (
        mtbi + down) / (2 * mtbi))
    assert effective_time_fraction(tau, delta, down, 1000.0) == 0.0  # all rework
    assert effective_time_fraction(math.inf, delta, down, math.inf) == 1.0  # no failures
    assert effective_time_fraction(0.0, 0.0, down, mtbi) == pytest.approx(mtbi / (mtbi + down))


def test_no_spare_probability_is_the_poisson_tail():
    # Mean 2 systems in repair; 3 spares: none is free when 3 or more are in repair.
    mean = 2.0
    tail = 1 - sum(math.exp(-mean) * mean**k / math.factorial(k) for k in range(3))
    assert no_spare_probability(mean / 100.0, 100.0, 3) == pytest.approx(tail)
    assert no_spare_probability(1.0, 1.0, 0) == 1.0


@pytest.mark.parametrize("count", [1, 2, 3, 7, 30, 100, 1000])
def test_poisson_tail_matches_scipy(count):
    from scipy.special import pdtrc

    for mean in [*np.geomspace(1e-9, 3e3, 120), count - 0.5, count, count + 0.5]:
        want = float(pdtrc(count - 1, mean))
        assert poisson_tail(count, mean) == pytest.approx(want, rel=1e-11, abs=1e-300)
    assert poisson_tail(count, 0.0) == 0.0 and poisson_tail(count, math.inf) == 1.0


def test_in_system_parts_scale_linearly_with_the_job():
    fabric = fabric_of("dgx-h100-superpod")
    small, large = component_lines(fabric, 504), component_lines(fabric, 1008)
    in_system = {(ln.component, ln.model): ln.count for ln in small if ln.tier == "system"}
    for ln in large:
        if ln.tier == "system":
            assert ln.count == 2 * in_system[(ln.component, ln.model)]
    doubled = [replace(ln, count=2 * ln.count) for ln in small]
    assert interruptions_per_day(doubled) == pytest.approx(2 * interruptions_per_day(small))


def test_counts_match_the_bill_of_materials():
    fabric = fabric_of("dgx-h100-superpod")
    lines = {(ln.component, ln.tier): ln for ln in component_lines(fabric, 1016)}
    assert lines[("accelerator", "system")].count == 1016
    assert lines[("host", "system")].count == 127  # one host per DGX
    assert lines[("nic", "system")].count == 1016
    assert lines[("switch", "leaf")].count + lines[("switch", "spine")].count == 48
    leaf_links = int(fabric.links["tier"].eq("leaf").sum()) // 2  # one row per direction
    # AOC: one assembly per NIC-leaf link.
    assert lines[("optic", "leaf link")].count == leaf_links


def test_single_homed_leaf_interrupts_dual_plane_leaf_degrades():
    single = {ln.tier: ln.interrupts for ln in component_lines(
        fabric_of("dgx-h100-superpod"), 1016) if ln.component in ("switch", "optic")}
    assert single == {"leaf": True, "spine": False, "leaf link": True, "spine link": False}
    dual = [ln for ln in component_lines(fabric_of("dual-plane-ethernet"), 1024)
            if ln.component in ("switch", "optic")]
    assert dual and not any(ln.interrupts for ln in dual)  # two planes: all redundant


def test_a_spine_with_one_core_uplink_is_not_a_single_point():
    # Llama 3's aggregation: each pod spine has all its uplinks to one core switch, but
    # the leaves below have 16 spines, so losing that core only degrades.
    lines = component_lines(fabric_of("llama3-24k-roce"), 16384)
    core = next(ln for ln in lines if ln.tier == "core")
    assert not core.interrupts
    assert core.parallel == 16


@pytest.fixture(scope="module")
def dual_plane():
    """A routed goodput run on a two-plane fabric (every network part redundant)."""
    fabric = fabric_of("dual-plane-ethernet")
    model = fabric.catalog.get("llama3-8b", Model)
    layout = Layout(tp=8, dp=128)
    result = step_time(fabric, model, layout, QUIET)
    return result, job_goodput(fabric, model, layout, QUIET, result)


def test_a_torus_link_shares_its_load_with_the_other_peer_links():
    lines = component_lines(fabric_of("tpu-v4-pod"), 4096)
    torus = [ln for ln in lines if ln.component == "optic"]
    assert torus and all(not ln.interrupts and ln.parallel == 6 for ln in torus)


def test_redundant_parts_add_degradation_not_interruptions(tmp_path, dual_plane):
    _, base = dual_plane
    override = tmp_path / "rates.yaml"
    override.write_text(textwrap.dedent("""
        failure_rates:
          switch-azure:
            component: switch
            afr: "80.8 %/yr"
            source: test
            provenance: assumed
    """))
    lines = component_lines(fabric_of("dual-plane-ethernet", override), 1024)
    worse = goodput(lines, tokens_per_s=base.tokens_per_s, accelerators=1024,
                    accelerators_per_system=8, parameters=base.checkpoint_bytes / 14,
                    degraded_loss=base.degraded_loss, assumptions=GoodputAssumptions())
    assert worse.interruptions_per_day == pytest.approx(base.interruptions_per_day)
    assert worse.degraded_throughput_fraction < base.degraded_throughput_fraction < 1


def test_user_override_changes_the_result_as_expected(tmp_path):
    override = tmp_path / "rates.yaml"
    override.write_text(textwrap.dedent("""
        failure_rates:
          my-gpus:
            component: accelerator
            mtbf: "50000 h"
            source: our fleet
            provenance: assumed
    """))
    fabric = fabric_of("dgx-h100-superpod")
    mine = fabric_of("dgx-h100-superpod", override)
    base = {ln.component: ln for ln in component_lines(fabric, 1016)}
    new = {ln.component: ln for ln in component_lines(mine, 1016)}
    assert new["accelerator"].rate_entry == "my-gpus"  # the user's default wins
    assert new["accelerator"].rate_per_s == pytest.approx(1 / (50000 * 3600))
    delta = (new["accelerator"].failures_per_s - base["accelerator"].failures_per_s)
    assert (interruptions_per_day(new.values()) - interruptions_per_day(base.values())
            ) == pytest.approx(delta * SECONDS_PER_DAY)


@pytest.mark.parametrize("rate, message", [
    ('afr: "-1 %/yr"', "cannot be negative"),
    ('afr: "2 GB"', "not a failure rate"),
    ('afr: "1 GHz"', "is a frequency"),
    ('afr: 2', "bare number"),
    ('afr: "2"', "has no unit"),
    ('afr: "1 %/yr"\n    mtbf: "1e6 h"', "exactly one of afr and mtbf"),
])
def test_bad_rates_are_one_line_errors(tmp_path, capsys, rate, message):
    bad = tmp_path / "bad.yaml"
    bad.write_text(f"failure_rates:\n  x:\n    component: nic\n    {rate}\n"
                   "    source: s\n    provenance: assumed\n")
    with pytest.raises(CatalogError, match=message):
        load_catalog([bad])
    status = main(["goodput", str(EXAMPLES / "hgx-h100-server.yaml"), "--model",
                   "llama3-8b", "--catalog", str(bad)])
    err = capsys.readouterr().err.strip().splitlines()
    assert status == 2 and len(err) == 1 and f"{bad}:4" in err[0]


def test_optic_what_if_rerates_modules_and_aocs():
    fabric = fabric_of("dgx-h100-superpod")
    lines = component_lines(fabric, 1016)
    lpo = with_optic_form(lines, fabric.catalog, "lpo")
    rate = next(e for e in fabric.catalog.of_kind(FailureRate) if e.id == "optic-lpo")
    for old, new in zip(lines, lpo, strict=True):
        if old.model == "aoc-800g":
            assert new.rate_per_s == pytest.approx(2 * rate.rate_per_s)
        elif old.component == "optic":
            assert new.rate_per_s == pytest.approx(rate.rate_per_s)
        else:
            assert new == old


def test_cpo_what_if_fails_the_part_that_holds_each_end():
    """DGX SuperPOD: a leaf link (1,016 AOCs) ends at a NIC and a single-homed leaf, a
    spine link (2,048 modules) at a leaf and a spine; as CPO each end is its holder's
    failure at the CPO's rate: NIC and leaf ends stop the job, spine ends degrade it as
    a failed spine does (docs/cost.md, serviceability)."""
    fabric = fabric_of("dgx-h100-superpod")
    lines = component_lines(fabric, 1016)
    cpo = with_optic_form(lines, fabric.catalog, "cpo")
    rate = next(e for e in fabric.catalog.of_kind(FailureRate) if e.id == "optic-cpo")
    ends = [(ln.tier, ln.count, ln.on_failure, ln.representative)
            for ln in cpo if ln.component == "optic"]
    assert ends == [("system", 1016, "stops_job", "sys000/nic0"),
                    ("leaf", 1016, "stops_job", "leaf00"),
                    ("leaf", 1024, "stops_job", "leaf00"),
                    ("spine", 1024, "degrades", "spine00")]
    assert all(ln.rate_per_s == rate.rate_per_s for ln in cpo if ln.component == "optic")
    assert [ln for ln in cpo if ln.component != "optic"] == [
        ln for ln in lines if ln.component != "optic"]
    # the leaf ends of the spine links now stop the job, but at a tenth of the rate
    # of the pluggables the AOCs and modules had, so fewer interruptions overall
    assert interruptions_per_day(cpo) < interruptions_per_day(lines)


def test_one_of_p_parallel_parts_down_slows_their_communication_by_1_over_p_minus_1():
    """p parts share the load; with one down, each of the p - 1 left carries p / (p - 1)
    of its share, so communication bottlenecked there takes p / (p - 1) - 1 longer."""
    comm = 0.3
    for p in (2, 4, 16):
        line = ComponentLine("optic", "m", "spine link", 100, 1e-7, False, "r", "assumed",
                             parallel=p)
        assert estimated_loss(line, comm) == pytest.approx(comm * (p / (p - 1) - 1))


def test_estimate_bounds_the_routed_degradation(dual_plane):
    result, routed = dual_plane
    assert routed.degraded_routed and routed.degraded_loss
    for ln in routed.lines:
        if not ln.interrupts:
            assert routed.degraded_loss[ln.tier] <= estimated_loss(ln, result.comm_share) + 1e-12


def test_goodput_combines_the_parts():
    fabric = fabric_of("hgx-h100-server")
    model = fabric.catalog.get("llama3-8b", Model)
    layout = Layout(tp=8, dp=1)
    result = step_time(fabric, model, layout, QUIET)
    g = job_goodput(fabric, model, layout, QUIET, result)
    assert g.checkpoint_bytes == pytest.approx(14 * parameter_counts(model)["total"])
    # one 8-GPU server's share of Llama 3's 2 TB/s over 16,384 GPUs, not all of it
    assert g.storage_Bps == pytest.approx(8 * 2e12 / 16_384) and not g.storage_given
    assert g.checkpoint_write_s == pytest.approx(g.checkpoint_bytes / g.storage_Bps)
    assert g.interruptions_per_day == pytest.approx(interruptions_per_day(g.lines))
    assert g.goodput_tokens_per_s == pytest.approx(
        result.tokens_per_s * g.effective_time_fraction * g.degraded_throughput_fraction)
    # One 8-GPU server, which the job takes: 2 % rounded up would be one spare system,
    # but the design has none free; as a library call without the design, one.
    assert g.spare_systems == 0 and g.idle_systems == 0 and g.accelerators_per_system == 8
    # the spare pool of parts alone (the domains' downtimes: test_domain_goodput.py)
    parts = [ln for ln in g.lines if not ln.is_domain]
    alone = goodput(parts, tokens_per_s=g.tokens_per_s, accelerators=8,
                    accelerators_per_system=8, parameters=g.checkpoint_bytes / 14,
                    degraded_loss={}, assumptions=GoodputAssumptions())
    assert alone.spare_systems == 1 and alone.idle_systems is None
    no_spares = goodput(parts, tokens_per_s=g.tokens_per_s, accelerators=8,
                        accelerators_per_system=8, parameters=g.checkpoint_bytes / 14,
                        degraded_loss={}, assumptions=GoodputAssumptions(spare_systems=0))
    a = GoodputAssumptions()
    assert no_spares.downtime_per_interruption_s == pytest.approx(
        a.detection_s + a.restart_s + a.repair_s)
    three = goodput(parts, tokens_per_s=g.tokens_per_s, accelerators=8,
                    accelerators_per_system=8, parameters=g.checkpoint_bytes / 14,
                    degraded_loss={}, assumptions=GoodputAssumptions(spare_systems=3))
    per_system = sum(ln.failures_per_s for ln in parts  # one system; software faults
                     if ln.interrupts and ln.component != "software")  # need no repair
    wait = no_spare_probability(per_system * 4, a.repair_s, 3) * a.repair_s / 4
    assert three.downtime_per_interruption_s == pytest.approx(
        a.detection_s + a.restart_s + wait)


def test_stragglers_feed_the_sync_wall(toy):
    fabric = toy("system: toy-host\nsystems: 8\nscaleout:\n  switch: toy-switch-8\n")
    model = fabric.catalog.get("toy-dense", Model)
    layout = Layout(dp=8, global_batch=64)
    base = step_time(fabric, model, layout, QUIET)
    share, slowdown = 0.05, 0.2
    slow = step_time(fabric, model, layout, replace(QUIET, straggler_share=share,
                                                     straggler_slowdown=slowdown))
    extra = base.compute_s * slowdown * (1 - (1 - share) ** 8)
    assert slow.walls["sync_s"] == pytest.approx(base.walls["sync_s"] + extra)
    assert slow.step_time_s == pytest.approx(base.step_time_s + extra)


def test_llama3_interruptions_match_the_published_rate():
    """Llama 3: 419 unexpected interruptions in 54 days on 16,384 GPUs (Table 5).

    Most built-in rates are derived from that same table, so this checks the footprint
    accounting (GPUs, hosts, NICs of the job) and adds the network parts from their own
    sources (switch study, assumed cable rates): not an independent validation.
    """
    lines = component_lines(fabric_of("llama3-24k-roce"), 16384)
    assert interruptions_per_day(lines) == pytest.approx(419 / 54, rel=0.15)


def test_rates_are_per_year_in_the_table():
    entry = load_catalog().get("accelerator-llama3", FailureRate)
    assert entry.rate_per_s * SECONDS_PER_YEAR == pytest.approx(0.0809)
    assert entry.rate_per_s * SECONDS_PER_YEAR == pytest.approx(196 * 365.25 / (16384 * 54),
                                                                rel=1e-3)


def test_storage_default_scales_with_the_job_up_to_llama3s_2_TBps():
    fabric = fabric_of("hgx-h100-server")
    g = job_goodput(fabric, fabric.catalog.get("llama3-8b", Model), Layout(tp=8, dp=1), QUIET,
                    step_time(fabric, fabric.catalog.get("llama3-8b", Model),
                              Layout(tp=8, dp=1), QUIET))

    def rate(accelerators, **given):
        return goodput(g.lines, tokens_per_s=1.0, accelerators=accelerators,
                       accelerators_per_system=8, parameters=8e9, degraded_loss={},
                       assumptions=GoodputAssumptions(**given)).storage_Bps

    per_gpu = 2e12 / 16_384  # Llama 3's Tectonic: 2 TB/s sustained for up to 16K GPUs
    assert rate(16) == pytest.approx(16 * per_gpu)
    assert rate(16_384) == pytest.approx(2e12)
    assert rate(98_304) == pytest.approx(2e12)  # not extrapolated past the published rate
    assert rate(16, storage_Bps=5e9) == 5e9  # --storage-bandwidth overrides the rule
    assert rate(16, storage_Bps_per_accelerator=1e9) == pytest.approx(16e9)
    twice = dict(what_ifs(g, fabric.catalog, GoodputAssumptions()))
    assert twice["twice the checkpoint bandwidth"].storage_Bps == pytest.approx(2 * g.storage_Bps)
    (summary, *_) = goodput_tables(g)
    (line,) = [row["value"] for row in summary.rows if row["item"] == "checkpoint"]
    assert "976.6 MB/s (122.1 MB/s per accelerator x 8, Llama 3's Tectonic per GPU" in line
    given = goodput(g.lines, tokens_per_s=1.0, accelerators=8, accelerators_per_system=8,
                    parameters=8e9, degraded_loss={},
                    assumptions=GoodputAssumptions(storage_Bps=5e9))
    assert storage_text(given) == "5 GB/s (given)"


def test_cli_goodput_json_and_step_section(capsys):
    args = [str(EXAMPLES / "hgx-h100-server.yaml"), "--model", "llama3-8b", "--tp", "8",
            "--format", "json"]
    assert main(["goodput", *args]) == 0
    data = json.loads(capsys.readouterr().out)
    for key in ("interruptions_per_day", "checkpoint_interval_s", "effective_time_fraction",
                "goodput_tokens_per_s"):
        assert isinstance(data[key], float)
    assert main(["step", *args]) == 0
    step = json.loads(capsys.readouterr().out)
    assert step["goodput"]["interruptions_per_day"] == pytest.approx(
        data["interruptions_per_day"])
    assert main(["step", *args, "--no-goodput"]) == 0
    assert "goodput" not in json.loads(capsys.readouterr().out)
    assert main(["goodput", *args, "--spare-systems", "-1"]) == 2
    assert main(["goodput", *args, "--straggler-share", "2"]) == 2
    assert main(["goodput", *args, "--storage-bandwidth", "2 TB"]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 3


def test_unrouted_degradation_is_the_bound():
    fabric = fabric_of("dgx-h100-superpod")
    model = fabric.catalog.get("llama3-8b", Model)
    layout = Layout(tp=8, dp=127)
    result = step_time(fabric, model, layout, QUIET)
    g = job_goodput(fabric, model, layout, QUIET, result, route_degradation=False)
    assert not g.degraded_routed
    redundant = [ln for ln in g.lines if not ln.interrupts]
    assert redundant and all(g.degraded_loss[ln.tier] == pytest.approx(
        estimated_loss(ln, result.comm_share)) for ln in redundant)


def test_catalog_shows_failure_rates_as_people_quote_them(tmp_path, capsys):
    mine = tmp_path / "mine.yaml"
    mine.write_text("failure_rates:\n  my-nic:\n    component: nic\n    mtbf: \"2e6 h\"\n"
                    "    source: s\n    provenance: assumed\n")
    assert main(["catalog", "show", "optic-cpo"]) == 0
    assert "0.1 %/yr, MTBF 8,766,000 h" in capsys.readouterr().out
    assert main(["catalog", "show", "my-nic", "--catalog", str(mine)]) == 0
    assert "2,000,000 h" in capsys.readouterr().out
    assert main(["catalog", "list", "--kind", "failure_rate"]) == 0
    assert "accelerator: 8.09 %/yr" in capsys.readouterr().out


def test_degraded_losses_do_not_add_the_worst_tier_sets_the_pace():
    from topomodel.analysis.reliability.goodput import degraded_throughput

    def line(tier, per_day):
        return ComponentLine("optic", "m", tier, 1, per_day / SECONDS_PER_DAY, False, "r",
                             "assumed")

    # one part always down (mean 20 down) per tier: kept is the worse tier's 1 - loss
    lines = [line("a", 20 * 6), line("b", 20 * 6)]
    kept, tiers = degraded_throughput(lines, {"a": 0.3, "b": 0.1}, 4 * 3600.0)
    assert kept == pytest.approx(0.7, abs=1e-8)  # not 0.7 x 0.9, nor 1 - 0.4
    assert [t.tier for t in tiers] == ["a", "b"] and tiers[1].worst == pytest.approx(0, abs=1e-8)
    # by hand with one tier: P(none down) + P(down) x (1 - loss)
    mean = 0.5
    kept, (tier,) = degraded_throughput([line("a", mean * 6)], {"a": 0.2}, 4 * 3600.0)
    assert tier.parts_down == pytest.approx(mean)
    assert kept == pytest.approx(math.exp(-mean) + (1 - math.exp(-mean)) * 0.8)
    # a tier with no loss is no part of the derivation; kept stays within [1 - worst, 1]
    kept, tiers = degraded_throughput([line("a", 1.0), line("c", 50.0)], {"a": 0.05, "c": 0},
                                      4 * 3600.0)
    assert [t.tier for t in tiers] == ["a"] and 0.95 < kept < 1


def test_degradation_is_routed_at_any_size_on_a_clos(monkeypatch, dual_plane):
    import topomodel.analysis.reliability.goodput as gp

    result, routed = dual_plane
    monkeypatch.setattr(gp, "DEGRADED_ROUTING_MAX_WORK", 0)
    fabric = fabric_of("dual-plane-ethernet")
    model = fabric.catalog.get("llama3-8b", Model)
    again = job_goodput(fabric, model, Layout(tp=8, dp=128), QUIET, result)
    assert again.degraded_routed and again.degraded_loss == routed.degraded_loss
    assert again.degraded_tiers and again.degraded_throughput_fraction == pytest.approx(
        routed.degraded_throughput_fraction)
    torus = fabric_of("tpu-v4-pod")
    layout = Layout(tp=4, dp=16)
    flat = replace(QUIET, compute_efficiency=0.5)
    small = step_time(torus, torus.catalog.get("llama3-8b", Model), layout, flat)
    bounded = job_goodput(torus, torus.catalog.get("llama3-8b", Model), layout, flat, small)
    assert not bounded.degraded_routed  # the general router's limit still holds there


def test_llama3_check_separates_the_reproduction_from_the_prediction():
    """docs/goodput.md: the rates derived from Meta's Table 5 give back its own 384
    interruptions in 54 days (a reproduction); the independently sourced parts predict
    0.50 per day, 0.27 of them network switches and cables where Table 5 has 35 of its
    419 interruptions in 54 days (8.4 %, 0.65 per day)."""
    lines = [ln for ln in component_lines(fabric_of("llama3-24k-roce"), 16384) if ln.interrupts]
    derived = sum(ln.failures_per_s for ln in lines if ln.rate_entry.endswith("-llama3"))
    independent = [ln for ln in lines  # the failure domains are counted apart
                   if not ln.rate_entry.endswith("-llama3") and not ln.is_domain]
    assert derived * SECONDS_PER_DAY == pytest.approx((196 + 72 + 63 + 46 + 7) / 54, rel=1e-3)
    assert {ln.component for ln in independent} == {"switch", "optic", "scaleup_switch"}
    assert sum(ln.failures_per_s for ln in independent) * SECONDS_PER_DAY == pytest.approx(
        0.50, abs=0.005)
    network = sum(ln.failures_per_s for ln in independent if ln.component != "scaleup_switch")
    assert network * SECONDS_PER_DAY == pytest.approx(0.27, abs=0.005)
    assert 35 / 54 / (network * SECONDS_PER_DAY) == pytest.approx(2.4, abs=0.05)


def test_the_failure_views_copies_share_are_built_before_the_workers_fork():
    from topomodel.routing.clos.live import SurvivorShape

    fabric = fabric_of("dual-plane-ethernet")
    model = fabric.catalog.get("llama3-8b", Model)
    layout = Layout(tp=8, dp=128)
    result = step_time(fabric, model, layout, QUIET)
    assert (SurvivorShape, ()) not in fabric.__dict__.get("_failure_free", {})
    job_goodput(fabric, model, layout, QUIET, result, workers=2)
    # built here, in the caller, so the forked workers start with it
    assert (SurvivorShape, ()) in fabric.__dict__["_failure_free"]


def test_grouped_parts_match_a_pandas_group_by_over_their_labels():
    """The parts' group-by on integer codes lists what a group-by over the strings
    lists: the same groups in label order, their summed weights and first rows."""
    import numpy as np
    import pandas as pd

    from topomodel.analysis.training.footprint import _grouped
    from topomodel.fabric.columns import CodeLabels

    rng = np.random.default_rng(7)
    # categories not in label order, one never used, rows picked out of order of codes
    model = pd.Series(pd.Categorical.from_codes(rng.integers(0, 4, 500),
                                                ["q3400", "cx8", "", "a-optic", "unused"]))
    tier = pd.Series(pd.Categorical.from_codes(rng.integers(0, 3, 500),
                                               ["spine", "leaf", "core"]))
    single = rng.random(500) < 0.3
    weight = rng.integers(1, 9, 500).astype(float)
    rows = np.flatnonzero(rng.random(500) < 0.6)
    frame = pd.DataFrame({"model": np.asarray(model.astype(object))[rows],
                          "tier": np.asarray(tier.astype(object))[rows],
                          "single": single[rows], "weight": weight[rows], "row": rows})
    oracle = frame.groupby(["model", "tier", "single"], sort=True).agg(
        count=("weight", "sum"), first=("row", "first"))
    expected = {(m, t, bool(s)): (int(c), int(f)) for (m, t, s), c, f in zip(
        oracle.index, oracle["count"], oracle["first"], strict=True)}
    got = _grouped(rows, CodeLabels(model), CodeLabels(tier), single[rows], weight[rows])
    assert got == expected and list(got) == list(expected)
    # the same rows as a mask over all of them
    masked = _grouped(np.arange(500), CodeLabels(model), CodeLabels(tier), single, weight,
                      counted=np.isin(np.arange(500), rows))
    assert masked == expected and list(masked) == list(expected)


@pytest.mark.parametrize(("name", "node"), [("dual-plane-ethernet", None),
                                          ("tpu-v4-pod", None), ("tpu-v4-pod", "sys05/acc03")])
def test_after_the_shared_views_a_failed_copy_sorts_no_link_table(name, node, monkeypatch):
    """What a worker builds for its degraded step (the named part's mask, the failure
    view, the general router's wiring for detours) reads the arc index the caller
    built before the fork: no sort of the link table is left to any worker (also where
    the first part is a node of a fabric the structured router does not cover)."""
    import numpy as np

    from topomodel.analysis.reliability.goodput import (
        degraded_lines,
        share_failure_views,
        with_part_failed,
    )
    from topomodel.routing import general
    from topomodel.routing.structured import structured_supported

    fabric = fabric_of(name)
    parts = [node] if node else [
        ln.representative
        for ln in degraded_lines(component_lines(fabric, fabric.accelerator_count))]
    assert parts and (node or any(" -- " in part for part in parts))
    share_failure_views(fabric, parts)
    sorts = []
    argsort = np.argsort

    def counted(a, *args, **kwargs):
        if np.size(a) >= len(fabric.links):
            sorts.append(part)
        return argsort(a, *args, **kwargs)

    monkeypatch.setattr(np, "argsort", counted)
    for part in parts:
        copy = with_part_failed(fabric, part)
        structured_supported(copy)
        copy.derived(general._Wiring)
    assert sorts == []


def test_degraded_table_has_a_short_name_and_plain_records(dual_plane):
    from topomodel.report.goodput import degraded_table

    _, routed = dual_plane
    table = degraded_table(routed)
    assert table.key == "degraded_operation"
    records = table.machine_rows
    assert [r["tier"] for r in records[-2:]] == ["none down", "throughput kept"]
    assert records[-1]["contribution"] == routed.degraded_throughput_fraction
    # the worst-tier chances and the none-down chance add to one
    assert sum(r["worst_down_probability"] for r in records[:-1]) == pytest.approx(1)


def test_default_spares_are_those_the_design_leaves_free(dual_plane):
    from topomodel.report.goodput import goodput_tables

    _, routed = dual_plane
    # the job takes all 128 systems of the design: 2 % would be 3, but none is free
    assert routed.idle_systems == 0 and routed.spare_systems == 0
    assert routed.no_spare_probability == 1.0

    def said(result):
        return {row["item"]: row["value"] for row in goodput_tables(result)[0].rows}[
            "spare systems"]

    assert "the job takes every system of the design" in said(routed)
    given = replace(routed, spare_systems=3)  # as --spare-systems 3 gives them
    assert "the other 3 are not in its bill of materials" in said(given)
    free = goodput(list(routed.lines), tokens_per_s=1.0, accelerators=1024,
                   accelerators_per_system=8, parameters=8e9, degraded_loss={},
                   assumptions=GoodputAssumptions(), idle_systems=100)
    assert free.spare_systems == 3 and "of the 100 systems" in said(free)


def test_a_job_with_no_spares_is_told_the_spares_that_reach_the_target():
    # 98k accelerators, 12,288 8-GPU systems, the Llama 3 accelerator rate (8.09 %/yr):
    # every failure waits out the 24 h repair, so effective time collapses
    rate = 0.0809 / SECONDS_PER_YEAR
    line = ComponentLine("accelerator", "gpu", "system", 98304, rate, True, "r", "derived")

    def run(spares):
        return goodput([line], tokens_per_s=1.0, accelerators=98304,
                       accelerators_per_system=8, parameters=1e9, degraded_loss={},
                       assumptions=GoodputAssumptions(spare_systems=spares))

    none = run(0)
    assert none.effective_time_fraction < 0.1 and none.repair_s == SECONDS_PER_DAY
    assert none.spares_for_target is not None
    n, reached = none.spares_for_target
    # 21.8 interruptions a day: a 600 s detection and restart each hold it under 90 %,
    # so the hint aims at 99 % of what unlimited spares give
    best = run(12288).effective_time_fraction
    assert best < TARGET_EFFECTIVE_TIME
    assert reached == run(n).effective_time_fraction >= SPARE_CEILING_SHARE * best
    assert run(n - 1).effective_time_fraction < SPARE_CEILING_SHARE * best
    assert run(n).spares_for_target is None  # it has spares: no hint
    text = effective_time_text(goodput_json(none, GoodputAssumptions(spare_systems=0)))
    assert text.startswith(f"{none.effective_time_fraction:.1%} (0 spare systems, a failed"
                           " system out 24 h)")
    assert f"{n:,} spare systems would bring it to {reached:.1%}, near the most" in text
    # a 16k job (2,048 systems) can reach 90 %: the fewest spares that do
    small = replace(line, count=16384)
    hint = goodput([small], tokens_per_s=1.0, accelerators=16384, accelerators_per_system=8,
                   parameters=1e9, degraded_loss={},
                   assumptions=GoodputAssumptions(spare_systems=0)).spares_for_target
    assert hint is not None and hint[1] >= TARGET_EFFECTIVE_TIME


def test_job_goodput_prices_the_spares_it_suggests():
    fabric = fabric_of("hgx-h100-server")  # one server, taken by the job: no spare
    model = fabric.catalog.get("llama3-8b", Model)
    layout = Layout(tp=8, dp=1)
    g = job_goodput(fabric, model, layout, QUIET, step_time(fabric, model, layout, QUIET),
                    GoodputAssumptions(repair_s=5e6))  # a 58-day repair
    assert g.spare_systems == 0 and g.spares_for_target is not None
    assert g.spares_for_target[0] == 1
    assert g.spare_system_W == per_system_cost(fabric)[0] and g.spare_system_W > 0


@pytest.mark.parametrize("given_step", [True, False])
def test_degraded_steps_without_the_steps_routes_give_the_same_goodput(given_step):
    """``keep_routes=False`` drops the routes the step kept on the fabric before the
    degraded steps (each routes on its own copy): the same step and goodput as with
    them kept, and nothing left in the fabric's kept routes."""
    from topomodel.analysis.collectives.routes import kept_routes
    from topomodel.analysis.reliability.goodput import step_and_goodput

    model_name, layout = "llama3-8b", Layout(tp=8, dp=128)
    runs = []
    for keep in (True, False):
        fabric = fabric_of("dual-plane-ethernet")
        model = fabric.catalog.get(model_name, Model)
        given = step_time(fabric, model, layout, QUIET) if given_step else None
        step, good = step_and_goodput(fabric, model, layout, QUIET, step_result=given,
                                      workers=1, keep_routes=keep)
        assert (len(fabric.derived(kept_routes)) == 0) is not keep
        runs.append((step, good))
    (step_kept, good_kept), (step_dropped, good_dropped) = runs
    assert step_dropped == step_kept
    assert good_dropped == good_kept
