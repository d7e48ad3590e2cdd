"""The layout planner against the step model called directly: the same best layout as
an exhaustive brute force, the same memory verdicts, the same numbers as ``step``."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from conftest import EXAMPLES

from topomodel.analysis.training.step import (
    StepAssumptions,
    collective_times,
    layout_memory,
    step_time,
)
from topomodel.cli import main
from topomodel.errors import ParameterError, UsageError
from topomodel.fabric.build import build_fabric
from topomodel.fabric.tables import VIEW_HOMES
from topomodel.inputs.design import load_design
from topomodel.inputs.parts import Model
from topomodel.plan.explain import why_better
from topomodel.plan.search import PlanJob, assess, merge, plan, plan_cells, search_cells
from topomodel.plan.space import Cell, PlanSpace, cell_layouts, cells, orders
from topomodel.traffic.layout import Layout

DESIGN = """
name: two hgx
system: hgx-h100
systems: 2
scaleout:
  kind: fat_tree
  nic: connectx-7
  switch: qm9700
"""

# small enough to brute-force, large enough for every verdict: Llama 3 8B unsharded on
# 16 GPUs fits only with TP or PP, interleaving needs enough microbatches, and TP, PP,
# micro-batches, orders, schedules and recomputation all vary
SPACE = PlanSpace(max_micro_batch=2, max_interleave=2, max_cp=1,
                  fixed={"zero": 0, "sequence_parallel": True})
MODEL = "llama3-8b"
BASE = Layout(global_batch=16, seq=4096)


@pytest.fixture(scope="module")
def setup():
    design, catalog = load_design("two.yaml", text=DESIGN)
    return design, catalog


def _fabric(setup):
    return build_fabric(*setup)


def _job(setup, **kw):
    model = setup[1].get(MODEL, Model)
    return PlanJob(model, BASE, kw.pop("space", SPACE), top=3, **kw)


def _space_layouts(fabric, job):
    for cell in plan_cells(fabric, job):
        yield from cell_layouts(job.model, cell, job.base, job.space)


@pytest.fixture(scope="module")
def brute(setup):
    """Every layout of the space through step_time alone, on a fabric whose caches are
    emptied before each call: (fields, result or None when step_time refuses it)."""
    fabric = _fabric(setup)
    job = _job(setup)
    out = []
    for fields in _space_layouts(fabric, job):
        for views in VIEW_HOMES.values():  # nothing shared between layouts
            fabric.__dict__.pop(views, None)
        try:
            layout = replace(job.base, **fields)
            result = step_time(fabric, job.model, layout, job.assumptions)
        except UsageError:
            result = None
        out.append((fields, result))
    return out


def test_the_best_layouts_are_the_brute_forces(setup, brute):
    found = plan(_fabric(setup), _job(setup))
    fitting = [r for _, r in brute if r is not None and r.fits]
    ranked = sorted(enumerate(fitting), key=lambda ir: (-ir[1].tokens_per_s, ir[0]))
    assert [r.layout for r in found.best] == [r.layout for _, r in ranked[:3]]
    for mine, theirs in zip(found.best, (r for _, r in ranked[:3]), strict=True):
        assert mine.step_time_s == theirs.step_time_s
        assert mine.mfu == theirs.mfu and mine.walls == theirs.walls
        assert mine.memory == theirs.memory
    assert found.tally.searched == len(brute)
    assert found.tally.invalid == sum(r is None for _, r in brute)
    # memory is asked only of the layouts the bound cannot prune: the pruned ones may
    # include some that do not fit, never one that fits and is left uncounted
    valid = len(brute) - found.tally.invalid
    assert found.tally.evaluated + found.tally.pruned + found.tally.no_fit == valid
    assert found.tally.no_fit <= valid - len(fitting)
    assert found.tally.evaluated + found.tally.pruned >= len(fitting)
    # (sets, plan.coarse, leave few to model: 9 here, 13 bounded family by family)
    assert found.tally.no_fit > 0 and found.tally.invalid > 0 and found.tally.evaluated > 5
    assert found.tally.pruned > 0  # the bound skipped layouts, and the top is the same


WIDE = replace(SPACE, fixed={"sequence_parallel": True}, max_cp=2)  # every ZeRO stage, CP


@pytest.fixture(scope="module")
def every_fitting(setup):
    """Every layout of WIDE that fits, its step modelled: (place, result)."""
    fabric = _fabric(setup)
    job = _job(setup, space=WIDE)
    out = []
    for ci, cell in enumerate(plan_cells(fabric, job)):
        for k, fields in enumerate(cell_layouts(job.model, cell, job.base, job.space)):
            verdict = assess(fabric, job, fields)
            if verdict.status == "evaluated":
                out.append(((-ci, -k), verdict.result))
    return out


@pytest.mark.parametrize(("objective", "top"), [
    ("tokens_per_s", 1), ("tokens_per_s", 12), ("mfu", 4), ("step_time_s", 4),
    ("tokens_per_J", 2), ("cost_per_token", 3)])
def test_pruning_keeps_the_unpruned_top(setup, every_fitting, objective, top):
    from topomodel.plan.search import objective_value

    fabric = _fabric(setup)
    job = replace(_job(setup, objective=objective, space=WIDE), top=top)
    power, usd_per_h = 21468.0, 40.0
    sign = -1 if objective in ("step_time_s", "cost_per_token") else 1
    ranked = sorted(every_fitting, key=lambda pr: (
        sign * objective_value(pr[1], objective, power, usd_per_h), pr[0]),
        reverse=True)[:top]
    pruned = search_cells(fabric, job, range(len(plan_cells(fabric, job))), power_W=power)
    assert [r.place for r in pruned.best] == [place for place, _ in ranked]
    assert [r.result for r in pruned.best] == [result for _, result in ranked]
    t = pruned.tally
    assert t.evaluated + t.pruned + t.no_fit == t.searched - t.invalid
    assert len(every_fitting) <= t.evaluated + t.pruned <= t.searched - t.invalid
    assert pruned.tally.pruned > 0


def test_without_pruning_every_fitting_layout_is_modelled(setup):
    fabric = _fabric(setup)
    job = _job(setup)
    n = range(len(plan_cells(fabric, job)))
    pruned, whole = search_cells(fabric, job, n), search_cells(fabric, job, n, prune=False)
    assert whole.tally.pruned == 0 and pruned.tally.pruned > 0
    assert (whole.tally.evaluated + whole.tally.no_fit
            == pruned.tally.evaluated + pruned.tally.pruned + pruned.tally.no_fit)
    assert whole.tally.no_fit >= pruned.tally.no_fit  # memory asked only of the unpruned
    assert [r.result for r in pruned.best] == [r.result for r in whole.best]


def test_memory_rejections_are_the_steps_that_do_not_fit(setup, brute):
    fabric = _fabric(setup)
    job = _job(setup)
    for fields, result in brute:
        verdict = assess(fabric, job, fields)
        if result is None:
            assert verdict.status == "invalid"
        else:
            assert (verdict.status == "no_fit") == (not result.fits), fields


def test_headroom_rejects_what_exceeds_the_hbm_less_the_headroom(setup, brute):
    fabric = _fabric(setup)
    tight = _job(setup, headroom=0.3)
    hbm = layout_memory(fabric, tight.model, replace(BASE, tp=8)).hbm_bytes
    checked = 0
    for fields, result in brute:
        if result is None or not result.fits:
            continue
        over = max(result.stage_memory_bytes) > 0.7 * hbm
        assert (assess(fabric, tight, fields).status == "no_fit") == over, fields
        checked += over
    assert checked > 0  # the headroom turned some fitting layouts away


def test_split_search_merges_to_the_whole(setup):
    fabric = _fabric(setup)
    job = _job(setup)
    whole = plan(fabric, job)
    n = len(plan_cells(fabric, job))
    parts = [search_cells(_fabric(setup), job, range(n // 2)),
             search_cells(_fabric(setup), job, range(n // 2, n))]
    merged = merge(parts[::-1], job.top)  # the order parts arrive in does not matter
    assert [r.result.layout for r in merged.best] == [r.layout for r in whole.best]
    assert merged.tally.searched == whole.tally.searched


def test_cached_collectives_give_the_cold_numbers(setup):
    model = setup[1].get("llama3-70b", Model)
    warm = _fabric(setup)
    layouts = [Layout(tp=8, pp=2, dp=1, global_batch=16, zero=1),
               Layout(tp=4, pp=2, dp=2, global_batch=16, zero=1, order="dp,tp,cp,pp"),
               Layout(tp=4, pp=2, dp=2, global_batch=16, zero=1, order="tp,cp,pp,dp")]
    for layout in layouts * 2:
        step_time(warm, model, layout)
    assert collective_times(warm) == {}  # the function makes a fresh, empty table
    assert warm.derived(collective_times)  # the fabric's own table is filled
    for layout in layouts:
        cold = step_time(_fabric(setup), model, layout)
        assert step_time(warm, model, layout) == cold


def test_the_cache_lives_and_dies_with_its_fabric(setup):
    import gc
    import weakref

    fabric = _fabric(setup)
    model = setup[1].get("llama3-70b", Model)
    step_time(fabric, model, Layout(tp=8, pp=2, global_batch=16))
    gone = weakref.ref(fabric)
    del fabric
    gc.collect()
    assert gone() is None


def test_orders_list_each_placement_once():
    assert orders(Cell(tp=1, cp=1, pp=1, dp=8)) == ["tp,cp,dp,pp"]
    assert len(orders(Cell(tp=2, cp=1, pp=2, dp=2))) == 6
    assert len(orders(Cell(tp=2, cp=2, pp=2, dp=2))) == 24
    assert all(o.split(",").index("cp") == 1 for o in orders(Cell(2, 1, 2, 2)))


def test_space_limits_and_fixed_values(setup):
    model = setup[1].get("llama3-70b", Model)
    assert {c.tp for c in cells(model, 16, PlanSpace(max_tp=4))} == {1, 2, 4}
    assert {c.pp for c in cells(model, 16, PlanSpace(fixed={"pp": 4}))} == {4}
    assert all(c.tp * c.cp * c.pp * c.dp == 16 for c in cells(model, 16, PlanSpace()))
    with pytest.raises(ParameterError, match="fixed: bogus is not a searched dimension"):
        PlanSpace(fixed={"bogus": 1})
    with pytest.raises(ParameterError, match="max_tp: must be at least 1"):  # the CLI: --max-tp
        PlanSpace(max_tp=0)
    layouts = list(cell_layouts(model, Cell(1, 1, 1, 16), Layout(global_batch=12),
                                PlanSpace()))
    assert layouts == []  # 12 sequences do not split over 16 DP ranks


def test_why_names_the_parts_that_differ(setup):
    model = setup[1].get("llama3-70b", Model)
    fabric = _fabric(setup)
    a = step_time(fabric, model, Layout(tp=8, pp=2, global_batch=16, zero=1))
    b = step_time(fabric, model, Layout(tp=8, pp=2, global_batch=16, zero=1,
                                        recompute="full"))
    text = why_better(a, b, objective="tokens_per_s", best_value=a.tokens_per_s,
                      other_value=b.tokens_per_s)
    assert "recompute none vs full" in text and "compute" in text
    assert f"{(a.tokens_per_s / b.tokens_per_s - 1):.2%}" in text


def test_objectives_rank_by_their_metric(setup):
    fabric = _fabric(setup)
    by_time = plan(fabric, _job(setup, objective="step_time_s"))
    assert [r.step_time_s for r in by_time.best] == sorted(r.step_time_s for r in by_time.best)
    with pytest.raises(ParameterError, match=r"^objective: choose from"):
        _job(setup, objective="speed")


def run(capsys, *argv):
    status = main(list(argv))
    out, err = capsys.readouterr()
    return status, out, err


PLAN_FLAGS = ("--model", MODEL, "--global-batch", "16", "--seq", "4096",
              "--max-micro-batch", "2", "--max-interleave", "2", "--max-cp", "1",
              "--fixed", "zero=0", "--fixed", "sequence_parallel=true", "--no-progress")


@pytest.fixture
def design_file(tmp_path):
    path = tmp_path / "two.yaml"
    path.write_text(DESIGN)
    return str(path)


def test_plan_best_is_what_step_gives(capsys, design_file):
    status, out, _ = run(capsys, "plan", design_file, *PLAN_FLAGS, "--top", "2",
                         "--format", "json")
    assert status == 0
    data = json.loads(out)
    assert data["schema"] == "topomodel.plan" and len(data["layouts"]) == 2
    search = data["search"]
    assert search["searched"] == (search["invalid"] + search["no_fit"] + search["pruned"]
                                  + search["evaluated"]) and search["pruned"] > 0
    best = data["layouts"][0]
    flags = [f"--{k.replace('_', '-')}={best[k]}" for k in
             ("tp", "pp", "dp", "ep", "cp", "micro_batch", "interleave", "schedule",
              "recompute", "zero", "order")]
    flags.append("--sequence-parallel" if best["sequence_parallel"] else
                 "--no-sequence-parallel")
    status, out, _ = run(capsys, "step", design_file, "--model", MODEL, "--global-batch",
                         "16", "--seq", "4096", *flags, "--no-goodput", "--format", "json")
    assert status == 0
    step = json.loads(out)
    for key in ("step_time_s", "mfu", "tokens_per_s", "walls", "memory", "compute_s",
                "bubble_s", "exposed_comm_s", "wait_s"):
        assert step[key] == best["step"][key], key
    assert "beats the runner-up" in data["why"] or "ties with" in data["why"]


def test_plan_table_csv_and_parquet(capsys, design_file, tmp_path):
    status, out, _ = run(capsys, "plan", design_file, *PLAN_FLAGS, "--max-tp", "8",
                         "--fixed", "pp=2")
    assert status == 0
    assert "Best distinct layouts" in out and "Why the best wins" in out
    assert "layouts searched" in out
    status, out, _ = run(capsys, "plan", design_file, *PLAN_FLAGS, "--fixed", "pp=2",
                         "--format", "csv")
    assert status == 0 and out.splitlines()[0].startswith("table,rank,tp,pp,dp")  # tidy
    pd = pytest.importorskip("pandas")
    import io

    best = pd.read_csv(io.StringIO(out)).query("table == 'best_layouts'")
    assert len(best) and (best["pp"] == 2).all()
    target = tmp_path / "plan.parquet"
    status, out, _ = run(capsys, "plan", design_file, *PLAN_FLAGS, "--fixed", "pp=2",
                         "--format", "parquet", "-o", str(target))
    pytest.importorskip("pyarrow")
    assert status == 0 and (pd.read_parquet(target)["pp"] == 2).all()


def test_plan_output_file_holds_what_its_suffix_says(capsys, design_file, tmp_path):
    """``-o x.json`` writes the document ``--format json`` prints (it once wrote CSV
    rows under a .json name); ``-o x.csv`` the ranked rows; a .json file cannot hold
    Parquet, refused before the search."""
    flags = (design_file, *PLAN_FLAGS, "--fixed", "pp=2")
    status, printed, _ = run(capsys, "plan", *flags, "--format", "json")
    assert status == 0
    target = tmp_path / "plan.json"
    status, _, _ = run(capsys, "plan", *flags, "-o", str(target))
    written, shown = json.loads(target.read_text()), json.loads(printed)
    for doc in (written, shown):  # the search's own clock and counts differ run to run
        doc.pop("search")
    assert status == 0 and written == shown
    rows = tmp_path / "plan.csv"
    status, _, _ = run(capsys, "plan", *flags, "-o", str(rows))
    assert status == 0 and rows.read_text().startswith("design,rank,tp,pp,dp")
    status, _, err = run(capsys, "plan", *flags, "--format", "parquet", "-o",
                         str(tmp_path / "x.json"))
    assert status == 2 and "cannot hold --format parquet" in err
    assert not (tmp_path / "x.json").exists()


def test_plan_compare_puts_the_best_of_each_side_by_side(capsys, design_file, tmp_path):
    other = tmp_path / "four.yaml"
    other.write_text(DESIGN.replace("systems: 2", "systems: 4").replace("two hgx",
                                                                        "four hgx"))
    status, out, _ = run(capsys, "plan", design_file, *PLAN_FLAGS, "--fixed", "pp=2",
                         "--compare", str(other))
    assert status == 0
    header = next(line for line in out.splitlines() if line.startswith("metric"))
    assert "two hgx" in header and "four hgx" in header
    assert "tokens_per_s ratio (B / A)" in out


@pytest.mark.parametrize(("flags", "message"), [
    (("--fixed", "bogus=1"), "--fixed bogus: not a searched dimension"),
    (("--fixed", "tp=x"), "--fixed tp=x: expected a whole number"),
    (("--format", "parquet"), "--format parquet writes a file: give -o FILE"),
    (("--memory-headroom", "1.5"), "--memory-headroom"),
])
def test_plan_errors_are_one_line(capsys, design_file, flags, message):
    status, out, err = run(capsys, "plan", design_file, *PLAN_FLAGS, *flags)
    assert status == 2 and out == ""
    assert err.count("\n") == 1 and message in err


def test_assumptions_reach_the_search(setup):
    fabric = _fabric(setup)
    slow = _job(setup, assumptions=StepAssumptions(compute_efficiency=0.2),
                space=PlanSpace(max_micro_batch=1, max_interleave=1, max_cp=1,
                                fixed={"zero": 1, "sequence_parallel": True,
                                       "pp": 2, "recompute": "none"}))
    fast = replace(slow, assumptions=StepAssumptions(compute_efficiency=0.8))
    assert plan(fabric, slow).best[0].step_time_s > plan(fabric, fast).best[0].step_time_s


def test_local_pool_and_dask_give_the_in_process_plan(setup, tmp_path):
    from topomodel.plan.spread import plan_context, plan_spread

    path = tmp_path / "two.yaml"
    path.write_text(DESIGN)
    job = _job(setup, space=replace(SPACE, fixed={**SPACE.fixed, "pp": 2}))
    context = plan_context(str(path))
    alone = plan_spread(context, job)
    pool = plan_spread(context, job, workers=2)
    assert [r.layout for r in pool.best] == [r.layout for r in alone.best]
    assert [r.step_time_s for r in pool.best] == [r.step_time_s for r in alone.best]
    for count in ("searched", "invalid"):
        assert getattr(pool.tally, count) == getattr(alone.tally, count)
    # each worker prunes against its own best, so the split of the rest may differ
    assert (pool.tally.evaluated + pool.tally.pruned + pool.tally.no_fit
            == alone.tally.evaluated + alone.tally.pruned + alone.tally.no_fit)
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(n_workers=1, threads_per_worker=2, processes=False,
                                  dashboard_address=None) as cluster:
        dask = plan_spread(context, job, scheduler=cluster.scheduler_address)
    assert dask.best == alone.best


MID = DESIGN.replace("systems: 2", "systems: 16").replace("two hgx", "sixteen hgx")


def test_pruning_keeps_the_unpruned_top_on_128_gpus():
    """A mid-size fabric (16 servers, two leaf levels of placements to tell apart):
    the pruned search's top 5 is the unpruned one's, layout for layout and bit for bit."""
    design, catalog = load_design("mid.yaml", text=MID)
    model = catalog.get("llama3-70b", Model)
    # no CP here (1,072 layouts in 25 cells, not 4,416 in 47: 1.5 s, not 8): the
    # placements are what this fabric adds; CP's pruning is checked on WIDE's 16 GPUs
    space = PlanSpace(max_tp=8, max_cp=1, max_micro_batch=1, max_interleave=2,
                      fixed={"sequence_parallel": True, "recompute": "none"})
    job = PlanJob(model, Layout(global_batch=128, seq=4096), space, top=5)
    fabric = build_fabric(design, catalog)
    n = range(len(plan_cells(fabric, job)))
    pruned = search_cells(fabric, job, n)
    whole = search_cells(build_fabric(design, catalog), job, n, prune=False)
    assert [(r.place, r.result) for r in pruned.best] == [(r.place, r.result)
                                                          for r in whole.best]
    assert pruned.tally.pruned > whole.tally.evaluated // 2  # the bound does bite
    assert (pruned.tally.evaluated + pruned.tally.pruned + pruned.tally.no_fit
            == whole.tally.evaluated + whole.tally.no_fit)


def test_a_layouts_orders_are_pruned_together_before_any_is_bounded(monkeypatch):
    """On the 128 GPUs, with a pipeline's bubble and sends in its bounds: some layouts
    are pruned with all their rank orders at once (each collective at what no placement
    beats), before any order's collectives are looked up, and the top is still the
    unpruned search's, bit for bit."""
    from topomodel.plan import orderbounds

    design, catalog = load_design("mid.yaml", text=MID)
    model = catalog.get("llama3-70b", Model)
    space = PlanSpace(max_tp=8, max_cp=1, max_micro_batch=1, max_interleave=2,
                      fixed={"sequence_parallel": True, "recompute": "none", "zero": 1})
    job = PlanJob(model, Layout(global_batch=512, seq=4096), space, top=2)
    fabric = build_fabric(design, catalog)
    n = range(len(plan_cells(fabric, job)))
    whole = search_cells(build_fabric(design, catalog), job, n, prune=False)
    seen: dict[int, list[str]] = {}
    unplaced, best = orderbounds.OrderBounds.unplaced_score, orderbounds.OrderBounds.best_score
    monkeypatch.setattr(orderbounds.OrderBounds, "unplaced_score",
                        lambda self, lay, worst, orders=(): (
                            seen.setdefault(id(self), []).append("all")
                            or unplaced(self, lay, worst, orders)))
    monkeypatch.setattr(orderbounds.OrderBounds, "best_score", lambda self, lay, worst: (
        seen.setdefault(id(self), []).append("one") or best(self, lay, worst)))
    pruned = search_cells(fabric, job, n, sets=False)  # nor the sets' floors
    assert [(r.place, r.result) for r in pruned.best] == [(r.place, r.result)
                                                          for r in whole.best]
    together = sum(calls == ["all"] for calls in seen.values())
    assert together > 0 and any("one" in calls for calls in seen.values())
    assert (pruned.tally.evaluated + pruned.tally.pruned + pruned.tally.no_fit
            == whole.tally.evaluated + whole.tally.no_fit)


def test_the_top_holds_distinct_layouts_each_at_its_best_variant(setup):
    """The top is distinct layouts (not one layout at interleave 1 and 2, or in two
    rank orders); each is the best of its interleave depths and orders, which the
    unpruned search of every fitting layout confirms, and why-the-best-wins compares
    the best with the best distinct runner-up."""
    from topomodel.plan.search import distinct_key

    fabric = _fabric(setup)
    job = replace(_job(setup), top=4)
    found = plan(fabric, job)
    keys = [distinct_key(r.layout) for r in found.best]
    assert len(found.best) == 4 and len(set(keys)) == 4
    every = search_cells(fabric, replace(job, top=10**6), range(len(plan_cells(fabric, job))),
                         prune=False)
    best_of: dict = {}
    for ranked in every.best:  # best first
        best_of.setdefault(distinct_key(ranked.result.layout), ranked.result)
    expect = list(best_of.values())[:4]
    assert [r.layout for r in found.best] == [r.layout for r in expect]
    from topomodel.report.plan import why

    runner_up = found.best[1]
    assert f"{runner_up.step_time_s:.4g} s a step" in why(found)


def test_accelerators_plans_a_job_of_that_size(setup):
    fabric = _fabric(setup)
    found = plan(fabric, _job(setup, accelerators=8))
    assert found.best and {r.layout.world for r in found.best} == {8}
    assert found.accelerators == 8 and found.idle == 8
    with pytest.raises(ParameterError, match="accelerators: 32 is more than"):
        plan(fabric, _job(setup, accelerators=32))


def test_with_no_layout_of_every_accelerator_the_largest_job_is_planned(capsys, tmp_path):
    """Three servers at a global batch of 16: no DP of 24 accelerators divides 16 with
    TP x PP x CP at most 8... so the plan falls back to the largest job of whole servers
    that has a layout (two, 16 GPUs) and says that 8 accelerators are left idle."""
    path = tmp_path / "three.yaml"
    path.write_text(DESIGN.replace("systems: 2", "systems: 3"))
    status = main(["plan", str(path), "--model", MODEL, "--global-batch", "16", "--seq",
                   "4096", "--max-micro-batch", "1", "--max-interleave", "1", "--max-cp",
                   "1", "--max-pp", "1", "--fixed", "zero=0", "--format", "json",
                   "--no-progress"])
    out = capsys.readouterr().out
    assert status == 0
    data = json.loads(out)
    assert data["accelerators"] == 16 and data["idle_accelerators"] == 8
    assert {row["step"]["layout"]["tp"] * row["step"]["layout"]["dp"]
            for row in data["layouts"]} == {16}
    status = main(["plan", str(path), "--model", MODEL, "--global-batch", "16", "--seq",
                   "4096", "--max-micro-batch", "1", "--max-interleave", "1", "--max-cp",
                   "1", "--max-pp", "1", "--fixed", "zero=0", "--no-progress"])
    text = capsys.readouterr().out
    assert "8 left idle" in text.splitlines()[0]


def test_the_plan_on_a_superpod_is_the_exhaustive_searchs():
    """256 GPUs of the DGX H100 SuperPOD example, every ZeRO stage and recomputation
    searched (what the planner bounds together and decides lazily): the planned top 3
    is the exhaustive search's (every layout that fits modelled), layout for layout
    and bit for bit, and the bound pruned most of it."""
    design, catalog = load_design(str(EXAMPLES / "dgx-h100-superpod.yaml"))
    model = catalog.get("llama3-8b", Model)
    space = PlanSpace(max_tp=8, max_cp=1, max_micro_batch=1, max_interleave=2,
                      fixed={"sequence_parallel": True, "schedule": "1f1b"})
    job = PlanJob(model, Layout(global_batch=256, seq=4096), space, top=3,
                  accelerators=256)
    fabric = build_fabric(design, catalog)
    n = range(len(plan_cells(fabric, job)))
    planned = search_cells(fabric, job, n)
    exhaustive = search_cells(build_fabric(design, catalog), job, n, prune=False)
    assert [(r.place, r.result) for r in planned.best] == [(r.place, r.result)
                                                           for r in exhaustive.best]
    assert exhaustive.tally.pruned == 0 and exhaustive.tally.evaluated > 100
    assert planned.tally.pruned > exhaustive.tally.evaluated // 2
    assert planned.tally.searched == exhaustive.tally.searched
    assert planned.tally.invalid == exhaustive.tally.invalid
    assert planned.tally.no_fit <= exhaustive.tally.no_fit  # asked of the unpruned only


def test_orders_share_their_collectives_where_the_step_issues_the_same(setup):
    """What lets a search keep an order's collectives for the layouts of its cell that
    differ in recomputation or in ZeRO 1 and 2 (``plan.orderbounds.CALLS_FIELDS``): the
    step issues the same collectives, bit for bit; a copy in another order is the
    layout ``replace`` makes."""
    from topomodel.analysis.training.stepcalls import step_calls
    from topomodel.plan.orderbounds import in_order

    fabric = _fabric(setup)
    model = setup[1].get(MODEL, Model)
    for order in ("tp,cp,dp,pp", "dp,cp,tp,pp", "pp,cp,dp,tp"):
        first = Layout(tp=2, pp=2, dp=4, global_batch=16, seq=4096, zero=1, order=order)
        calls, _ = step_calls(fabric, model, first)
        for recompute in ("none", "selective", "full"):
            for zero in (1, 2):
                other = replace(first, recompute=recompute, zero=zero)
                assert step_calls(fabric, model, other)[0] == calls, other
        moved = in_order(first, "pp,tp,cp,dp")
        assert moved == replace(first, order="pp,tp,cp,dp") and moved.zero == 1
        assert in_order(first, order) is first  # its own order: no copy
    assert step_calls(fabric, model, replace(first, zero=0))[0] != calls  # all-reduce
    with pytest.raises(UsageError):
        in_order(first, "tp,tp,dp,pp")


def test_the_issued_collectives_of_a_family_place_as_each_layouts_own(setup):
    """What a search keeps per family of layouts (``OrderMemo.issues``: the same
    ``CALLS_FIELDS`` and ZeRO kind) and places in each rank order: the collectives,
    their times and bounds, how many are not timed yet, and the bounds' table are
    each layout's own (``order_calls`` without them, on a fresh fabric), bit for bit,
    for pipelines with one neighbour and interleaved, TP with and without sequence
    parallelism, CP, and every ZeRO stage, in every rank order."""
    import itertools

    from topomodel.analysis.training.step import StepAssumptions
    from topomodel.analysis.training.stepcalls import issued_calls
    from topomodel.analysis.training.stepshape import shape_of
    from topomodel.plan.callfloors import collective_bounds, order_calls

    model = setup[1].get(MODEL, Model)
    a = StepAssumptions()
    shared, own = _fabric(setup), _fabric(setup)
    orders = [",".join(o) for o in itertools.permutations(["tp", "cp", "dp", "pp"])]
    families = [Layout(tp=2, pp=2, dp=4, global_batch=16, seq=4096, zero=1),
                Layout(tp=2, pp=4, dp=2, global_batch=16, seq=4096, interleave=2,
                       sequence_parallel=True),
                Layout(cp=2, pp=2, dp=4, global_batch=16, seq=4096, zero=3),
                Layout(tp=4, dp=4, global_batch=16, seq=4096, zero=2)]
    placed = 0
    for first in families:
        shape = shape_of(shared, model, first)
        issued = issued_calls(shared, model, first, a, shape.seq, shape.sizes,
                              shape.moe_sizes)
        for order, recompute in itertools.product(orders, ("none", "full")):
            zero = 2 if first.zero == 1 else first.zero  # ZeRO 1 and 2 share theirs
            layout = replace(first, order=order, recompute=recompute, zero=zero)
            found = order_calls(shared, model, layout, a, shape, issued=issued)
            assert found == order_calls(own, model, layout, a, shape_of(own, model, layout)
                                        ), layout
            placed += found[1]
    assert placed > 100  # most not timed: bounded, from the same keys
    assert shared.derived(collective_bounds) == own.derived(collective_bounds)


def test_a_layout_must_beat_its_held_variant_to_change_the_top():
    """The bar an order is pruned against: the last of a full top, or the score of a
    variant of the same layout (another order or interleave depth) held in the top if
    higher, full or not, since the top keeps one variant per layout, the better."""
    from types import SimpleNamespace

    from topomodel.plan.search import Ranked, distinct_key, entry_bar, keep_distinct

    def ranked(score, **fields):
        layout = replace(Layout(), **fields)
        return Ranked(score, (0, -int(score)), SimpleNamespace(layout=layout))

    heap = []
    a, b = Layout(tp=2), Layout(tp=4)
    assert entry_bar(heap, 3, distinct_key(a)) == -float("inf")
    keep_distinct(heap, ranked(10.0, tp=2), 3)
    assert entry_bar(heap, 3, distinct_key(a)) == 10.0  # not full: its variant's
    assert entry_bar(heap, 3, distinct_key(replace(a, interleave=2))) == 10.0
    assert entry_bar(heap, 3, distinct_key(b)) == -float("inf")
    for score, tp in ((12.0, 4), (11.0, 8)):
        keep_distinct(heap, ranked(score, tp=tp), 3)
    assert entry_bar(heap, 3, distinct_key(b)) == 12.0
    assert entry_bar(heap, 3, distinct_key(Layout(tp=1))) == 10.0  # full: the last
    # a variant below its held one changes nothing
    before = list(heap)
    keep_distinct(heap, ranked(9.5, tp=2, order="dp,tp,cp,pp"), 3)
    assert heap == before
