"""One job, every verb: step, goodput, compare, review, build and route print the same
numbers, because each number has one code path (#15 item 6)."""

import json

import pytest

from topomodel.cli import main

DESIGN = "system: toy-box\nsystems: 8\nscaleout:\n  switch: toy-switch-8\n"
JOB = ["--model", "toy-dense", "--tp", "4", "--pp", "2"]


def _json(capsys, *argv):
    assert main([*argv, "--format", "json"]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.fixture
def job(toy):
    toy(DESIGN)
    return str(toy.tmp_path / "design.yaml"), ["--catalog", str(toy.catalog_path)]


def test_step_goodput_compare_and_review_agree(job, capsys, tmp_path):
    design, catalog = job
    step = _json(capsys, "step", design, *JOB, *catalog)
    goodput = _json(capsys, "goodput", design, *JOB, *catalog)
    compare = _json(capsys, "compare", design, design, *JOB, *catalog)
    _json(capsys, "review", design, *JOB, *catalog, "-o", str(tmp_path / "review"))
    review = json.loads((tmp_path / "review" / "report.json").read_text())
    build = _json(capsys, "build", design, *catalog)

    for key in ("step_time_s", "tokens_per_s", "mfu", "comm_share", "exposed_comm_s"):
        values = {step[key], goodput.get(key, step[key]), review["step"][key],
                  compare["designs"][0][key]}
        assert len(values) == 1, (key, values)
    # every goodput number of the step is the goodput verb's and the review's
    for key in ("interruptions_per_day", "effective_time_fraction",
                "degraded_throughput_fraction", "degraded_loss_per_part",
                "degraded_routed", "goodput_tokens_per_s", "spare_systems", "repair_s",
                "spares_for_target", "spares_effective_time_fraction"):
        assert step["goodput"][key] == goodput[key] == review["goodput"][key], key
    assert step["goodput"]["degraded_routed"]  # routed everywhere, by the one rule
    for key in ("interruptions_per_day", "effective_time_fraction",
                "goodput_tokens_per_s", "spare_systems", "repair_s", "spares_for_target"):
        assert compare["designs"][0]["goodput"][key] == goodput[key]
    # power: the build's summary, in compare and in the review
    assert compare["designs"][0]["power"] == build["power"] == review["build"]["power"]
    assert review["build"]["tiers"] == build["tiers"]


def test_review_collectives_are_route_s(job, capsys, tmp_path):
    design, catalog = job
    _json(capsys, "review", design, *catalog, "-o", str(tmp_path / "review"),
          "--size", "1 MiB")
    rows = json.loads((tmp_path / "review" / "report.json").read_text())[
        "collectives"]["rows"]
    row = next(r for r in rows if r["collective"] == "allreduce" and r["group"] == "all")
    route = _json(capsys, "route", design, *catalog, "--collective", "allreduce",
                  "--size", "1 MiB", "--group", "all")
    assert (route["algorithm"], route["time_s"], route["busbw_Bps"]) == (
        row["algorithm"], row["time_s"], row["busbw_Bps"])


def test_busbw_does_not_depend_on_the_order_of_group_sets(job, capsys):
    design, catalog = job
    runs = [_json(capsys, "route", design, *catalog, "--collective", "allreduce",
                  "--size", "16 MiB", "--algorithm", "ring", "--group", a, "--group", b)
            for a, b in (("domain", "rail"), ("rail", "domain"))]
    first, second = runs
    assert first["busbw_Bps"] == second["busbw_Bps"] and first["ranks"] == second["ranks"]
    assert first["time_s"] == second["time_s"]
    per_set = [{s["spec"]: s["busbw_Bps"] for s in r["group_sets"]} for r in runs]
    assert per_set[0] == per_set[1] and len(set(per_set[0].values())) == 2
    assert first["busbw_Bps"] == max(per_set[0].values())  # the largest groups' factor
