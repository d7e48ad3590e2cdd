"""Cost and energy per token: the annuity, the terms, a published cluster's capex and
power, and the step's cost table with its options."""

import json
from pathlib import Path

import pytest
from conftest import b200_rail_design

from topomodel.analysis.assumptions import CostAssumptions
from topomodel.analysis.bom import bill_of_materials, power_summary
from topomodel.analysis.cost import HOURS_PER_YEAR, recovery_factor, token_cost
from topomodel.cli import main
from topomodel.errors import UsageError

SUPERPOD = str(Path(__file__).resolve().parents[2] / "examples" / "dgx-h100-superpod.yaml")


def test_recovery_factor_pays_the_capex_off():
    # the payments' present value is the capex: sum of crf / (1 + r)^k over the years
    rate, years = 0.08, 5
    crf = recovery_factor(rate, years)
    assert sum(crf / (1 + rate) ** k for k in range(1, years + 1)) == pytest.approx(1.0)
    assert recovery_factor(0.0, 4) == 0.25


def test_terms_scale_as_they_should():
    base = token_cost(2e6, 200e3, 5e4)
    assert token_cost(2e6, 200e3, 1e5).USD_per_Mtok == pytest.approx(base.USD_per_Mtok / 2)
    half = token_cost(2e6, 200e3, 5e4, share=0.5)
    assert half.USD_per_h == pytest.approx(base.USD_per_h / 2)
    assert half.J_per_token == pytest.approx(base.J_per_token / 2)
    free = token_cost(2e6, 200e3, 5e4, CostAssumptions(electricity_USD_per_kWh=0.0))
    assert free.USD_per_h == pytest.approx(base.capex_USD_per_h + base.facility_USD_per_h)
    assert base.capex_USD_per_h == pytest.approx(
        2e6 * recovery_factor(0.08, 5) / HOURS_PER_YEAR)
    assert token_cost(2e6, 200e3, 0.0).USD_per_Mtok == float("inf")


def test_assumptions_are_checked():
    with pytest.raises(UsageError, match="pue"):
        CostAssumptions(pue=0.9)


def test_dgx_h100_superpod_capex_and_power_against_published_figures(example_fabric):
    """Capex: E. Cheah's 'H100 Freakonomics' spreadsheet (Aug 2024) prices 128 nodes of
    8 H100 on a 2-tier NDR fabric at US$39.68M of nodes, US$1.728M of switches and
    US$2.621M of cables and optics: US$44.03M, US$43.0k per GPU, 9.9 % network. Our
    central DGX price is SemiAnalysis' US$270k against his US$310k node, so the
    central capex is lower; his figure must lie inside our low-high range, the
    central within 15 %, the network share within 2 points. Power: about 330 kW per
    32-node scalable unit (kshirol-dev, 'Network topologies', DGX H100 SuperPOD),
    within 10 %."""
    fabric = example_fabric("dgx-h100-superpod")
    n = fabric.accelerator_count
    power = power_summary(bill_of_materials(fabric), n)
    published_per_gpu = (39.68e6 + 1.728e6 + 2.621e6) / 1024
    assert power.capex_low_USD / n < published_per_gpu < power.capex_high_USD / n
    assert power.capex_USD / n == pytest.approx(published_per_gpu, rel=0.15)
    assert power.network_capex_USD / power.capex_USD == pytest.approx(
        (1.728 + 2.621) / 44.029, abs=0.02)
    per_unit_W = power.total_W / (fabric.structure.systems / 32)
    assert per_unit_W == pytest.approx(330e3, rel=0.10)
    assert power.capex_complete


def test_step_reports_cost_per_token_and_its_options(capsys):
    args = ["step", SUPERPOD, "--model", "llama3-70b", "--tp", "8", "--pp", "4",
            "--no-goodput", "--format", "json"]
    assert main(args) == 0
    base = json.loads(capsys.readouterr().out)["cost"]
    assert base["goodput"] is False and base["capex_complete"]
    assert base["USD_per_Mtok"] == pytest.approx(
        base["USD_per_h"] / (base["tokens_per_s"] * 3600) * 1e6)
    assert main([*args, "--pue", "1.5", "--electricity-price", "0.16"]) == 0
    dear = json.loads(capsys.readouterr().out)["cost"]
    assert dear["capex_USD_per_h"] == pytest.approx(base["capex_USD_per_h"])
    assert dear["energy_USD_per_h"] == pytest.approx(
        base["energy_USD_per_h"] * 1.5 / 1.3 * 0.16 / 0.0806)
    assert "PUE 1.5" in dear["text"]
    assert main([*args, "--cost-of-capital", "2"]) == 2
    assert "--cost-of-capital" in capsys.readouterr().err


SWAP_DESIGN = b200_rail_design("swap test", "osfp-800g-dr8")


def test_optics_what_if_swaps_pluggables_of_the_same_rate_only(example_fabric):
    from topomodel.analysis.cost import optics_swaps

    fabric = example_fabric("dgx-h100-superpod")  # 400G DR4 modules: no 400G LPO or CPO
    assert optics_swaps(bill_of_materials(fabric), fabric.catalog) == []


def test_review_has_a_cost_section_with_the_optics_what_if(tmp_path, capsys):
    design = tmp_path / "swap.yaml"
    design.write_text(SWAP_DESIGN)
    out = tmp_path / "review"
    assert main(["review", str(design), "--model", "llama3-8b", "--tp", "8", "-o", str(out),
                 "--workers", "1", "--pue", "1.2"]) == 0
    capsys.readouterr()
    cost = json.loads((out / "report.json").read_text())["cost"]
    assert cost["assumptions"]["pue"] == 1.2 and "PUE 1.2" in cost["per_token"]["text"]
    (swap,) = cost["optics_whatif"]
    # 1,024 spine modules: 17 W DR8 -> 9 W LPO, 1,250 -> 800 USD each
    assert swap["pluggable"] == "osfp-800g-dr8" and swap["replacement"] == "lpo-800g"
    assert swap["modules"] == 1024
    assert swap["power_delta_W"] == pytest.approx(-8192)
    assert swap["capex_delta_USD"] == pytest.approx(-460_800)
    assert swap["USD_per_Mtok_after"] < swap["USD_per_Mtok_before"]
    # serviceability: an LPO, like the pluggable, takes only its link when it fails
    assert swap["links_per_failure_before"] == swap["links_per_failure_after"] == 1
    assert swap["failures_per_year_after"] == pytest.approx(swap["failures_per_year_before"])
    assert swap["links_down_before"] == pytest.approx(
        swap["failures_per_year_before"] / (365.25 * 86400) * 4 * 3600)
    assert cost["network_capex_USD"] < cost["capex_USD"]
    assert "## Cost and energy per token" in (out / "report.md").read_text()


def test_compare_reports_cost_per_token_of_each_design(capsys):
    server = str(Path(SUPERPOD).with_name("hgx-h100-server.yaml"))
    assert main(["compare", server, SUPERPOD, "--model", "llama3-8b", "--tp", "8",
                 "--format", "json", "--workers", "1", "--electricity-price", "0.1"]) == 0
    designs = json.loads(capsys.readouterr().out)["designs"]
    for d in designs:
        cost = d["cost"]
        assert cost["goodput"] and "0.1 USD/kWh" in cost["text"]
        assert cost["USD_per_Mtok"] == pytest.approx(
            cost["USD_per_h"] / (d["goodput"]["goodput_tokens_per_s"] * 3600) * 1e6)


def test_plan_ranks_by_cost_per_token(capsys, example_fabric):
    server = str(Path(SUPERPOD).with_name("hgx-h100-server.yaml"))
    assert main(["plan", server, "--model", "llama3-8b", "--objective", "cost_per_token",
                 "--top", "3", "--no-progress", "--format", "json", "--pue", "1.1"]) == 0
    found = json.loads(capsys.readouterr().out)
    fabric = example_fabric("hgx-h100-server")
    power = power_summary(bill_of_materials(fabric), fabric.accelerator_count)
    usd_per_h = token_cost(power.capex_USD, power.total_W, 1.0,
                           CostAssumptions(pue=1.1)).USD_per_h
    assert found["USD_per_h"] == pytest.approx(usd_per_h)
    costs = [r["USD_per_Mtok"] for r in found["layouts"]]
    assert costs == sorted(costs)  # cheapest first
    for r in found["layouts"]:
        assert r["USD_per_Mtok"] == pytest.approx(usd_per_h / (r["tokens_per_s"] * 3600) * 1e6)
