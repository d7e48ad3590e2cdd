"""The review's sections as one list: every section of the list is rendered, and no
work runs without the section that names it; the scheduler runs each named piece once,
hands results by name and plans work from the results it needs."""

import dataclasses

import pytest

import topomodel.report.review as review_module
from topomodel.analysis.serving.decode_assumptions import DecodeAssumptions
from topomodel.analysis.serving.serve import ServingJob
from topomodel.analysis.serving.serve_assumptions import ServeAssumptions
from topomodel.fabric.build import build_fabric
from topomodel.inputs.design import load_design
from topomodel.inputs.parts import Model
from topomodel.report.review import SECTIONS, collect_review
from topomodel.report.review.render import render_html, render_markdown
from topomodel.report.review.schedule import Work, run_work
from topomodel.traffic.layout import Layout

FOUR_DGX = ("name: four DGX\nsystem: dgx-h100\nsystems: 4\n"
            "scaleout: {kind: fat_tree, switch: qm9700, unit: 2, tiers: 2}\n")


def _recorded_review(fabric, monkeypatch, **options):
    """The review, with the work each section named and every piece the review ran."""
    named: dict[str, set[str]] = {}
    ran: list[str] = []

    def recorded(section):
        def work(context):
            got = list(section.work(context))
            named[section.id] = {w.name for w in got}
            return got

        def build(context, results):
            assert set(results) == named[section.id]  # its own results, by name
            part = section.build(context, results)
            assert part.section is None or part.section.id == section.id
            return part
        return dataclasses.replace(section, work=work, build=build)

    def run(works, **kwargs):
        results = run_work(works, **kwargs)
        ran.extend(results)
        return results

    monkeypatch.setattr(review_module, "run_work", run)
    review = collect_review(fabric, sizes_bytes=[2**20],
                            sections=[recorded(s) for s in SECTIONS], **options)
    return review, named, ran


@pytest.fixture(scope="module")
def four_dgx(tmp_path_factory):
    design = tmp_path_factory.mktemp("design") / "four.yaml"
    design.write_text(FOUR_DGX)
    d, catalog = load_design(design)
    return build_fabric(d, catalog), catalog


def _check(review, named, ran):
    shown = [s.id for s in review.sections]
    html, md = render_html(review), render_markdown(review)
    for section_id in shown:
        assert f'<section id="{section_id}">' in html and f'<a id="{section_id}"></a>' in md
    # a section that schedules work shows itself; every piece that ran is named by one
    for section_id, names in named.items():
        assert not names or section_id in shown, f"{section_id}: work without its section"
    by_shown = set().union(*(named[s] for s in shown))
    assert set(ran) <= by_shown, f"work no shown section named: {set(ran) - by_shown}"
    assert len(ran) == len(set(ran))
    return shown


def test_every_listed_section_is_rendered_with_a_model(four_dgx, monkeypatch):
    fabric, catalog = four_dgx
    job = ServingJob(ServeAssumptions(decode_instances=2, concurrency=8),
                     DecodeAssumptions())
    review, named, ran = _recorded_review(
        fabric, monkeypatch, model=catalog.get("llama3-8b", Model), layout=Layout(tp=8),
        serving=job)
    assert _check(review, named, ran) == [s.id for s in SECTIONS]
    assert {"build", "step", "featured", "collectives", "goodput", "warnings",
            "single failures", "serving"} <= set(ran)
    assert review.data["serving"]["decode_batch"] == 8


def test_without_a_model_only_the_goodput_section_is_left_out(four_dgx, monkeypatch):
    fabric, _ = four_dgx
    review, named, ran = _recorded_review(fabric, monkeypatch)
    assert _check(review, named, ran) == [s.id for s in SECTIONS
                                          if s.id not in ("goodput", "serving")]
    assert named["goodput"] == set() and "step" not in ran


def test_section_ids_are_unique():
    ids = [s.id for s in SECTIONS]
    assert len(ids) == len(set(ids))


def test_run_work_runs_each_name_once_and_plans_from_what_it_needs():
    calls: list[str] = []

    def piece(name, value):
        return Work(name, lambda got: calls.append(name) or value)

    works = [piece("a", 2), piece("b", 3), piece("a", 2),
             Work("sum", lambda got: got["a"] + got["b"], ("a", "b"), here=True),
             Work("late", lambda got: -got["sum"], ("sum",)),
             Work("first", lambda got: sorted(got), ("a",), rank=1)]
    for workers in (1, 2):
        got = run_work(works, workers=workers)
        assert got == {"a": 2, "b": 3, "sum": 5, "late": -5, "first": ["a"]}
    assert calls == ["a", "b"]  # here (workers=1): each once; forked workers' are theirs


def test_warm_work_runs_here_before_the_pool_and_its_workers_see_what_it_built():
    """The first ``warm`` work runs in this process before the workers fork: they start
    from what it built (here, a mark it leaves), and its result is handed on as any."""
    import os

    built: list[int] = []

    def warm(got):
        built.append(os.getpid())
        return "warm"

    works = [Work("a", lambda got: (os.getpid(), list(built))),
             Work("w", warm, warm=True),
             Work("b", lambda got: got["w"] + "!", ("w",)),
             Work("late", lambda got: 1, warm=True)]  # one warm piece: the first
    for workers in (1, 2):
        built.clear()
        got = run_work(works, workers=workers)
        assert built == [os.getpid()] and got["w"] == "warm" and got["b"] == "warm!"
        assert got["a"][1] == [os.getpid()]  # the worker saw it built before it forked
        assert got["late"] == 1


def test_run_work_refuses_what_is_not_scheduled():
    with pytest.raises(ValueError, match="'missing' is needed but not scheduled"):
        run_work([Work("x", lambda got: 1, ("missing",))], workers=1)
    with pytest.raises(ValueError, match="planned work needs planned work 'y'"):
        run_work([Work("x", lambda got: 1), Work("y", lambda got: 2, ("x",)),
                  Work("z", lambda got: 3, ("y",))], workers=1)
    with pytest.raises(ValueError, match="named twice with different needs"):
        run_work([Work("x", lambda got: 1), Work("x", lambda got: 1, ("y",))], workers=1)


def test_the_featured_run_is_the_one_the_table_held(four_dgx, monkeypatch):
    """The featured collective is not routed again where the process that ran it draws
    it: the run held is the most loaded that may be featured, the table's featured one,
    the same as routing it again; taken once, and never another run's."""
    import numpy as np

    from topomodel.analysis.collectives.timing import TimeModel
    from topomodel.report.review import collect

    fabric, _ = four_dgx
    timing = TimeModel()
    plan = collect.plan_collectives(fabric, [2**20, 2**24])
    rows = collect.measured_runs(fabric, timing, "ecmp", 0, plan.runs,
                                 may_feature=lambda item: collect.may_feature(plan, item))
    table = collect.collect_rows(plan, rows)
    item = table.featured_item
    assert item is not None and collect.may_feature(plan, item)
    others = [r for r in plan.runs if r != item]
    assert collect.held_featured(fabric, timing, "ecmp", 1, item) is None  # another seed
    assert all(collect.held_featured(fabric, timing, "ecmp", 0, r) is None for r in others)
    held = collect.held_featured(fabric, timing, "ecmp", 0, item)
    again = collect.featured_run(fabric, timing, "ecmp", 0, item)
    assert held is not None and held is not again
    assert (held.time_s, held.algorithm) == (again.time_s, again.algorithm)
    assert np.array_equal(held.timing.link_busy_s, again.timing.link_busy_s)
    assert collect.held_featured(fabric, timing, "ecmp", 0, item) is None  # taken once
