"""One search with a top per family (topomodel.plan.tops): each family's best from the
one pass is its own plan's, bit for bit, and the unpruned search's; its counts of the
first pass (searched, invalid, over the router's limit) are its own plan's; a space not
inside the job's is not taken as a family; the scorecard's strategy rows from the one
pass are those of a plan per family."""

from __future__ import annotations

import test_plan_limits
from conftest import EXAMPLES

from topomodel import limits
from topomodel.analysis.training.step import StepAssumptions
from topomodel.fabric.build import build_fabric
from topomodel.inputs.design import load_design
from topomodel.inputs.parts import Model
from topomodel.plan.search import PlanJob, plan, plan_cells, search_cells
from topomodel.plan.space import PlanSpace
from topomodel.plan.tops import Family, space_family
from topomodel.traffic.layout import Layout

SUPERPOD_SPACE = PlanSpace(max_tp=8, max_cp=2, max_micro_batch=2, max_interleave=2,
                           fixed={"sequence_parallel": True, "schedule": "1f1b",
                                  "recompute": "none"})
MOE_SPACE = PlanSpace(max_micro_batch=1, max_interleave=1, max_pp=4,
                      fixed={"zero": 1, "recompute": "full", "sequence_parallel": True,
                             "schedule": "1f1b"})


def _restricted(space: PlanSpace, **limits_: int) -> PlanSpace:
    from dataclasses import replace

    return replace(space, **{f"max_{k}": v for k, v in limits_.items()})


def _summary(part):
    return [(r.score, r.result.layout, r.result.step_time_s, r.result) for r in part.best]


def _check_families(design, catalog, job, spaces):
    """Each family's top and first-pass counts from one pass equal its own plan's (and
    the unpruned search's); the whole's top is the plan's without families."""
    families = [space_family(name, space, job.space) for name, space in spaces.items()]
    assert all(f is not None for f in families)
    fabric = build_fabric(design, catalog)
    together = search_cells(fabric, job, range(len(plan_cells(fabric, job))),
                            families=families)
    alone = plan(build_fabric(design, catalog), job)
    assert [r.result for r in together.best] == list(alone.best)
    assert together.tally.searched == alone.tally.searched
    for (name, space), part in zip(spaces.items(), together.families, strict=True):
        own = replace_space(job, space)
        fresh = build_fabric(design, catalog)
        cells = range(len(plan_cells(fresh, own)))
        separate = search_cells(fresh, own, cells)
        unpruned = search_cells(build_fabric(design, catalog), own, cells, prune=False)
        assert _summary(part) == _summary(separate) == _summary(unpruned), name
        for count in ("searched", "invalid", "over_limit"):
            assert getattr(part.tally, count) == getattr(separate.tally, count), (name,
                                                                                 count)
        assert part.tally.reasons == separate.tally.reasons
        t = part.tally
        assert t.searched == t.invalid + t.no_fit + t.pruned + t.evaluated + t.over_limit
    return together


def replace_space(job, space):
    from dataclasses import replace

    return replace(job, space=space)


def test_each_familys_top_on_a_superpod_is_its_own_plans():
    """128 GPUs of the DGX H100 SuperPOD example, Llama 3 8B, top 3: DP only, no
    pipeline, TP up to 2 and the whole space, from one pass."""
    design, catalog = load_design(str(EXAMPLES / "dgx-h100-superpod.yaml"))
    job = PlanJob(catalog.get("llama3-8b", Model), Layout(global_batch=256, seq=4096),
                  SUPERPOD_SPACE, top=3, accelerators=128)
    spaces = {"dp": _restricted(SUPERPOD_SPACE, tp=1, pp=1, cp=1, ep=1),
              "no pp": _restricted(SUPERPOD_SPACE, pp=1),
              "tp 2": _restricted(SUPERPOD_SPACE, tp=2, micro_batch=1)}
    together = _check_families(design, catalog, job, spaces)
    assert all(part.best for part in together.families)
    assert together.families[0].tally.searched < together.tally.searched


two_servers = test_plan_limits.two_servers  # the same two-server design, a fixture


def test_moe_families_keep_their_own_tops_and_skipped_counts(two_servers, monkeypatch):
    """Mixtral on 16 GPUs with the router's limit lowered between EP 4's and EP 8's
    All-to-All (as tests/sweep/test_plan_limits.py): the whole space skips EP 8, the
    no-EP family nothing; each family's top and counts are its own plan's."""
    monkeypatch.setattr(limits, "MAX_FLOWS", 60)
    design, catalog = load_design(two_servers)
    job = PlanJob(catalog.get("mixtral-8x7b", Model), Layout(), MOE_SPACE,
                  StepAssumptions(compute_efficiency=0.5), top=2, routing="auto")
    spaces = {"no ep": _restricted(MOE_SPACE, ep=1), "ep 4": _restricted(MOE_SPACE, ep=4),
              "dp": _restricted(MOE_SPACE, tp=1, pp=1, cp=1, ep=1)}
    together = _check_families(design, catalog, job, spaces)
    assert together.tally.over_limit > 0
    assert [p.tally.over_limit for p in together.families] == [0, 0, 0]


def test_a_space_not_inside_the_jobs_is_no_family():
    whole = PlanSpace(max_tp=8, fixed={"zero": 1})
    assert space_family("f", PlanSpace(max_tp=4, fixed={"zero": 1}), whole) is not None
    assert space_family("f", PlanSpace(fixed={"zero": 1}), whole) is None  # TP unbounded
    assert space_family("f", PlanSpace(max_tp=16, fixed={"zero": 1}), whole) is None
    assert space_family("f", PlanSpace(max_tp=4), whole) is None  # ZeRO not fixed
    assert space_family("f", PlanSpace(max_tp=4, max_micro_batch=16, fixed={"zero": 1}),
                        whole) is None
    # a fixed field is listed whatever the limit, but for the micro-batch and interleave
    pinned = PlanSpace(max_tp=8, fixed={"tp": 8})
    family = space_family("f", PlanSpace(max_tp=1, max_micro_batch=2, fixed={"tp": 8}),
                          pinned)
    fields = {"tp": 8, "cp": 1, "pp": 1, "ep": 1, "micro_batch": 2, "interleave": 1}
    assert family is not None and family.holds(fields)
    assert not family.holds({**fields, "micro_batch": 4})


def test_a_predicate_family_gets_its_own_top():
    """A family given as a predicate on the fields (ZeRO 1 only, a field the space does
    not limit): its top is the best of the plan's layouts it holds."""
    design, catalog = load_design(str(EXAMPLES / "dgx-h100-superpod.yaml"))
    space = _restricted(SUPERPOD_SPACE, cp=1, micro_batch=1)
    job = PlanJob(catalog.get("llama3-8b", Model), Layout(global_batch=256, seq=4096),
                  space, top=2, accelerators=64)
    fabric = build_fabric(design, catalog)
    cells = range(len(plan_cells(fabric, job)))
    zero1 = Family("zero 1", lambda f: f["zero"] == 1)
    together = search_cells(fabric, job, cells, families=[zero1])
    from dataclasses import replace
    own = replace(job, space=replace(space, fixed={**space.fixed, "zero": 1}))
    separate = search_cells(build_fabric(design, catalog), own, cells)
    assert _summary(together.families[0]) == _summary(separate)
