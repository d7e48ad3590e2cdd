"""A plan on layouts above the router's limit (topomodel.plan.tally): skipped and
counted, never built, the best the same as with the limit lifted where the skipped
layouts are not the best, and the scorecard finishes.

Reproduced at 16 GPUs by lowering ``limits.MAX_FLOWS``: two 8-GPU PCIe servers whose
two NICs each the structured router does not cover, so every All-to-All pair is listed
(as hash routing lists them at 98k); Mixtral's EP 8 All-to-All is 16 x 7 = 112 flows,
EP 4's 48 and EP 2's 16.
"""

from __future__ import annotations

import json

import pytest
from conftest import EXAMPLES

from topomodel import limits
from topomodel.analysis.training.step import StepAssumptions
from topomodel.cli import main
from topomodel.errors import FlowLimit
from topomodel.fabric.build import build_fabric
from topomodel.inputs.design import load_design
from topomodel.inputs.parts import Model
from topomodel.plan import search
from topomodel.plan.search import PlanJob, plan
from topomodel.plan.space import PlanSpace
from topomodel.plan.tally import alltoall_flows, over_limit
from topomodel.routing.aggregate import lists_all_pairs
from topomodel.traffic.layout import Layout

LIMIT = 60  # between EP 4's 48 flows and EP 8's 112
SPACE = PlanSpace(max_micro_batch=1, max_interleave=1, max_pp=4,
                  fixed={"zero": 1, "recompute": "full", "sequence_parallel": True,
                         "schedule": "1f1b"})


@pytest.fixture(scope="module")
def two_servers(tmp_path_factory):
    text = (EXAMPLES / "small-16x8-a100-100gbe-roce.yaml").read_text().replace(
        "systems: 16", "systems: 2")
    path = tmp_path_factory.mktemp("two") / "two.yaml"
    path.write_text(text)
    return path


def _plan(path, **kw):
    design, catalog = load_design(path)
    fabric = build_fabric(design, catalog)  # fresh: no collective times shared
    job = PlanJob(catalog.get("mixtral-8x7b", Model), Layout(), SPACE,
                  StepAssumptions(compute_efficiency=0.5), top=3, routing="auto", **kw)
    return fabric, plan(fabric, job)


def _summary(found):
    return [(r.layout, r.step_time_s) for r in found.best]


def test_the_count_is_the_steps_all_to_all_flows(two_servers):
    design, catalog = load_design(two_servers)
    fabric = build_fabric(design, catalog)
    assert lists_all_pairs(fabric, "auto") and lists_all_pairs(fabric, "ecmp")
    model = catalog.get("mixtral-8x7b", Model)
    layout = Layout(dp=16, ep=8, global_batch=16, seq=4096)
    assert alltoall_flows(layout) == 16 * 7
    assert over_limit(fabric, model, layout, "auto") is None
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(limits, "MAX_FLOWS", LIMIT)
        refusal = over_limit(fabric, model, layout, "auto")
        assert refusal is not None and "topomodel.limits.MAX_FLOWS" in refusal
        assert over_limit(fabric, model, Layout(dp=16, ep=4), "auto") is None
        with pytest.raises(FlowLimit, match="112 All-to-All flows"):  # the step's own
            from topomodel.analysis.training.step import step_time
            step_time(fabric, model, layout, StepAssumptions(compute_efficiency=0.5))


def test_a_plan_skips_and_counts_the_layouts_above_the_limit(two_servers, monkeypatch):
    timed: list[Layout] = []
    step_time = search.step_time

    def recording(fabric, model, layout, *args, **kw):
        timed.append(layout)
        return step_time(fabric, model, layout, *args, **kw)

    monkeypatch.setattr(search, "step_time", recording)
    _, lifted = _plan(two_servers)
    assert lifted.tally.over_limit == 0
    assert all(r.layout.ep < 8 for r in lifted.best)  # the skipped ones are not the best
    assert any(alltoall_flows(layout) > LIMIT for layout in timed)  # timed when lifted
    timed.clear()
    monkeypatch.setattr(limits, "MAX_FLOWS", LIMIT)
    _, found = _plan(two_servers)
    t = found.tally
    assert t.over_limit > 0
    assert t.searched == t.invalid + t.no_fit + t.pruned + t.evaluated + t.over_limit
    assert _summary(found) == _summary(lifted)
    # decided from counts: no layout above the limit was handed to the step model
    assert timed and all(alltoall_flows(layout) <= LIMIT for layout in timed)


def test_a_refusal_the_check_misses_is_counted_when_the_router_refuses(two_servers,
                                                                       monkeypatch):
    """Where the up-front check cannot tell (groups the router lists though the fabric
    would count them), the router's own refusal skips the layout the same way."""
    _, lifted = _plan(two_servers)
    monkeypatch.setattr(limits, "MAX_FLOWS", LIMIT)
    monkeypatch.setattr(search, "over_limit", lambda *_: None)
    _, found = _plan(two_servers)
    assert found.tally.over_limit > 0
    assert _summary(found) == _summary(lifted)


def test_the_plan_output_names_the_count_and_the_limit(two_servers, monkeypatch, capsys):
    monkeypatch.setattr(limits, "MAX_FLOWS", LIMIT)
    args = ["plan", str(two_servers), "--model", "mixtral-8x7b", "--compute-efficiency",
            "0.5", "--max-micro-batch", "1", "--max-interleave", "1", "--max-pp", "4",
            "--fixed", "zero=1", "--fixed", "recompute=full", "--fixed", "schedule=1f1b",
            "--fixed", "sequence_parallel=true", "--no-progress", "--top", "3"]
    assert main([*args, "--format", "json"]) == 0
    search_json = json.loads(capsys.readouterr().out)["search"]
    assert search_json["over_limit"] > 0
    assert "(limits.py MAX_FLOWS)" in search_json["over_limit_text"]
    assert main(args) == 0
    text = capsys.readouterr().out
    assert f"{search_json['over_limit']:,} layouts above the router's limit of 60" in text


def test_the_scorecard_finishes_with_layouts_above_the_limit(two_servers, monkeypatch,
                                                             tmp_path):
    monkeypatch.setattr(limits, "MAX_FLOWS", LIMIT)
    out = tmp_path / "card.json"
    assert main(["scorecard", str(two_servers), "--model", "mixtral-8x7b",
                 "--compute-efficiency", "0.5", "--only", "strategies",
                 "-o", str(out)]) == 0
    notes = [f["note"] for f in json.loads(out.read_text())["figures"]
             if f["part"] == "strategies"]
    assert any("above the router's limit" in note for note in notes)
