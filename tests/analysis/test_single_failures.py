"""Single-failure what-ifs: one spine, leaf, optic and NIC failed, routed exactly."""

import pytest

import topomodel.analysis.collectives.routes as routes_module
import topomodel.routing as routing_module
from topomodel.analysis.collectives.collective import run_collective
from topomodel.analysis.reliability.single_failures import WHAT_IF_KINDS, single_failures
from topomodel.analysis.training.step import StepAssumptions, step_time
from topomodel.fabric.build import build_fabric
from topomodel.fabric.failures import with_failures
from topomodel.inputs.design import load_design
from topomodel.inputs.parts import Model
from topomodel.traffic.layout import Layout

TWO_TIER = """name: 16 HGX H100, two tiers
system: hgx-h100
systems: 16
scaleout:
  kind: fat_tree
  switch: qm9700
  tiers: 2
  rail_optimized: true
"""
QUIET = StepAssumptions(jitter_cv=0.0)


@pytest.fixture(scope="module")
def case():
    design, catalog = load_design("two-tier.yaml", text=TWO_TIER)
    fabric = build_fabric(design, catalog)
    model = catalog.get("llama3-8b", Model)
    layout = Layout(tp=8, dp=16)
    run = run_collective(fabric, "allreduce", 2**28, ["rail"], algorithm="ring")
    step = step_time(fabric, model, layout, QUIET)
    return fabric, model, layout, run, step


def _what_ifs(case):
    fabric, model, layout, run, step = case
    return single_failures(fabric, collective=run, group="rail", model=model,
                           layout=layout, assumptions=QUIET, step=step)


def test_one_of_each_kind_with_its_class(case):
    rows = _what_ifs(case)
    assert [r.kind for r in rows] == list(WHAT_IF_KINDS)
    got = {r.kind: (r.part, r.on_failure) for r in rows}
    assert got == {"spine": ("spine0", "degrades"), "leaf": ("leaf0", "stops_job"),
                   "optic": ("leaf0 -- spine0", "degrades"),
                   "nic": ("sys00/nic0", "stops_job")}
    leaf = next(r for r in rows if r.kind == "leaf")
    assert leaf.class_entry == "single point of failure"
    # a failure never speeds the step or the collective up; a cut-off leaf slows both
    for r in rows:
        assert r.collective_ratio >= 1 - 1e-12 and r.step_ratio >= 1 - 1e-12
    assert leaf.collective_ratio > 1.05 and leaf.unroutable_flows == 0


def test_each_what_if_is_the_run_on_the_failed_fabric(case):
    fabric, model, layout, _, _ = case
    for r in _what_ifs(case):
        link = " -- " in r.part
        failed = with_failures(fabric, () if link else (r.part,), (r.part,) if link else ())
        again = run_collective(failed, "allreduce", 2**28, ["rail"], algorithm="ring")
        assert r.collective_s == pytest.approx(again.time_s, rel=1e-12)
        assert r.step_s == pytest.approx(
            step_time(failed, model, layout, QUIET).step_time_s, rel=1e-12)


def test_the_structured_router_agrees_with_the_general_one(case, monkeypatch):
    structured = _what_ifs(case)
    monkeypatch.setattr(routing_module, "structured_supported", lambda fabric: "forced")
    monkeypatch.setattr(routes_module, "structured_supported", lambda fabric: "forced")
    fabric, model, layout, _, _ = case
    general_case = (fabric, model, layout,
                    run_collective(fabric, "allreduce", 2**28, ["rail"], algorithm="ring",
                                   router="general"),
                    step_time(fabric, model, layout, QUIET))
    general = _what_ifs(general_case)
    for s, g in zip(structured, general, strict=True):
        assert (s.kind, s.part) == (g.kind, g.part)
        assert s.collective_s == pytest.approx(g.collective_s, rel=1e-9)
        assert s.step_s == pytest.approx(g.step_s, rel=1e-9)


def test_a_design_without_spines_says_so():
    design, catalog = load_design("examples/small-4x8-l40s-25gbe.yaml")
    rows = single_failures(build_fabric(design, catalog))
    spine = next(r for r in rows if r.kind == "spine")
    assert spine.part == "" and spine.collective_s is None and spine.step_s is None
    assert all(r.part for r in rows if r.kind != "spine")


def test_review_runs_each_failed_step_once_with_goodputs_and_what_ifs_values(
        case, tmp_path, monkeypatch):
    """The review fails each part once for the goodput section and the what-ifs (a
    spine and a spine-leaf optic are in both here): the same numbers as each computes
    alone, one step per distinct part."""
    import topomodel.analysis.training.step as step_module
    from topomodel.analysis.reliability.goodput import (
        GoodputAssumptions,
        component_lines,
        degraded_lines,
        job_goodput,
    )
    from topomodel.analysis.reliability.single_failures import CollectiveSpec, what_if_lines
    from topomodel.report.review import collect_review

    fabric, model, layout, _, step = case
    lines = component_lines(fabric, layout.world)
    goodput_parts = [ln.representative for ln in degraded_lines(lines)]
    shown = [ln.representative for ln in what_if_lines(fabric, lines=lines).values()]
    assert set(goodput_parts) & set(shown)  # something to share
    alone_goodput = job_goodput(fabric, model, layout, QUIET, step, workers=1)
    calls = []
    original = step_module.step_time

    def counted(f, *args, **kwargs):
        calls.append(int(f.links["failed"].sum()))
        return original(f, *args, **kwargs)

    monkeypatch.setattr(step_module, "step_time", counted)
    review = collect_review(fabric, model=model, layout=layout, assumptions=QUIET,
                            goodput_assumptions=GoodputAssumptions(), workers=1)
    assert len(calls) == 1 + len(set(goodput_parts) | set(shown))  # healthy + one a part
    monkeypatch.setattr(step_module, "step_time", original)
    data = review.data
    assert data["goodput"]["degraded_loss_per_part"] == alone_goodput.degraded_loss
    run = data["collectives"]["featured"]
    healthy = CollectiveSpec(run["collective"], run["size_bytes"], run["algorithm"],
                             run["time_s"])
    alone = single_failures(fabric, collective=healthy, group=next(iter(run["groups"])),
                            model=model, layout=layout, assumptions=QUIET, step=step,
                            workers=1)
    assert [(r["kind"], r["part"], r["step_s"], r["collective_s"])
            for r in data["single_failures"]] == [
        (r.kind, r.part, r.step_s, r.collective_s) for r in alone]


def test_known_runs_with_a_part_failed_are_not_run_again(case, monkeypatch):
    import topomodel.analysis.collectives.collective as collective_module
    from topomodel.analysis.reliability.goodput import with_part_failed
    from topomodel.analysis.reliability.single_failures import failed_collective

    fabric, model, layout, run, step = case
    rows = _what_ifs(case)
    known_runs = {r.part: failed_collective(with_part_failed(fabric, r.part), run,
                                            group="rail")
                  for r in rows}
    assert {p: k.time_s for p, k in known_runs.items()} == {
        r.part: r.collective_s for r in rows}
    assert {k.algorithm for k in known_runs.values()} == {r.algorithm for r in rows}

    def refused(*args, **kwargs):
        raise AssertionError("routed again")

    monkeypatch.setattr(collective_module, "run_collective", refused)
    again = single_failures(fabric, collective=run, group="rail", model=model,
                            layout=layout, assumptions=QUIET, step=step, workers=1,
                            known_step_s={r.part: r.step_s for r in rows},
                            known_collectives=known_runs)
    assert again == rows
