"""What steps share on one fabric: the times of collectives no failure can reach."""

import functools

import numpy as np
import pytest

import topomodel.analysis.training.stepcalls as step_module
from topomodel.analysis.training.step import StepAssumptions
from topomodel.analysis.training.stepcalls import step_calls
from topomodel.analysis.training.stepshape import (
    UNSHARED_ALGORITHMS,
    in_system_failure_times,
    scaleout_failure_times,
    untouched_by_failures,
)
from topomodel.fabric.build import build_fabric
from topomodel.fabric.failures import with_failures
from topomodel.inputs.design import load_design
from topomodel.inputs.parts import Model
from topomodel.routing import route
from topomodel.routing.sections import kept_sections
from topomodel.traffic.collectives import collective_traffic
from topomodel.traffic.layout import Layout, rank_groups

# (example, layout): 8-GPU NVSwitch servers, 72-GPU NVL72 racks, and a 384-NPU
# supernode whose scale-up crosses systems through two switch levels
JOBS = [("examples/dgx-h100-superpod.yaml", Layout(tp=8, pp=4, dp=31)),
        ("examples/gb200-nvl72-cluster.yaml", Layout(tp=8, pp=3, dp=24)),
        ("examples/cloudmatrix384.yaml", Layout(tp=8, pp=4, dp=12))]
A = StepAssumptions()


@functools.cache
def _fabric(example):
    return build_fabric(*load_design(example))


def _count_routing(monkeypatch):
    """A list that grows by one each time the step routes a collective (``fastest``)."""
    routed = []
    original = step_module.fastest

    def counted(*args, **kwargs):
        routed.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(step_module, "fastest", counted)
    return routed


def _scaleout_parts(fabric, per_tier=2):
    """Switches and links of every scale-out tier: the first and the last of each."""
    nodes, links = fabric.nodes, fabric.links
    names = nodes["name"].to_numpy()
    parts = []
    for tier in ("leaf", "spine", "core"):
        switches = names[(nodes["tier"] == tier).to_numpy()]
        parts += [((str(n),), ()) for n in switches[[0, -1]][:per_tier]] if len(
            switches) else []
    for tier in ("host", "leaf", "spine", "core"):
        rows = np.flatnonzero((links["tier"] == tier).to_numpy())
        for row in rows[[0, -1]][:per_tier] if len(rows) else []:
            a, b = names[links["src"].iat[row]], names[links["dst"].iat[row]]
            parts.append(((), (f"{a} -- {b}",)))
    return parts


def _model(fabric):
    return fabric.catalog.get("llama3-70b", Model)


@pytest.mark.parametrize(("example", "layout"), JOBS)
def test_collectives_inside_domains_keep_their_time_on_scaleout_failures(
        example, layout, monkeypatch):
    """On every copy with one scale-out part failed, each collective of the step, timed
    once for all such copies where the rule allows, is bit for bit what routing it on
    that copy alone gives; and the rule did spare routing."""
    fabric = _fabric(example)
    model = _model(fabric)
    parts = _scaleout_parts(fabric)
    routed = _count_routing(monkeypatch)
    shared = [step_calls(with_failures(fabric, *part), model, layout, A)[0]
              for part in parts]
    with_sharing = len(routed)
    alone = []
    for part in parts:
        for kept in (scaleout_failure_times, in_system_failure_times, kept_sections):
            fabric.derived(kept).clear()  # route this copy's own
        alone.append(step_calls(with_failures(fabric, *part), model, layout, A)[0])
    assert len(routed) - with_sharing > with_sharing  # shared: routed once, not per copy
    for part, kept, own in zip(parts, shared, alone, strict=True):
        assert kept == own, part  # every field, floats bit for bit


def test_a_scaleup_failure_is_not_shared():
    """A failed NVSwitch chip slows its server's TP groups: its copy must time them
    itself (the rule refuses it), and it gets a time the scale-out copies do not."""
    fabric = _fabric("examples/dgx-h100-superpod.yaml")
    model, layout = _model(fabric), JOBS[0][1]
    tp = rank_groups(fabric.accelerators[:layout.world], layout, "tp")
    out = with_failures(fabric, ["leaf00"], ())
    chip = fabric.nodes["name"][(fabric.nodes["kind"] == "scaleup_switch").to_numpy()].iat[0]
    up = with_failures(fabric, [chip], ())
    assert untouched_by_failures(out, ("ring",), tp)
    assert not untouched_by_failures(up, ("ring",), tp)
    fabric.derived(scaleout_failure_times).clear()
    kept = step_calls(out, model, layout, A)[0]
    own = step_calls(up, model, layout, A)[0]
    tp_call = next(n for n in kept if n.startswith("tp"))
    assert own[tp_call].time_s > kept[tp_call].time_s


def test_collectives_across_domains_are_not_shared():
    """The pipeline's sends cross the scale-out network here: a failed leaf and a failed
    spine give them different times, so the rule must refuse them (a looser rule would
    hand one copy's time to the other)."""
    fabric = _fabric("examples/dgx-h100-superpod.yaml")
    model, layout = _model(fabric), JOBS[0][1]
    stages = rank_groups(fabric.accelerators[:layout.world], layout, "pp")
    pairs = np.stack([stages[:, :-1], stages[:, 1:]], axis=2).reshape(-1, 2)
    copies = [with_failures(fabric, *part) for part in (
        (["leaf00"], ()), (["spine00"], ()))]
    assert not any(untouched_by_failures(c, ("p2p",), pairs) for c in copies)
    fabric.derived(scaleout_failure_times).clear()
    sends = [step_calls(c, model, layout, A)[0]["pp"] for c in copies]
    assert sends[0].spills and sends[0].time_s != sends[1].time_s


def test_the_rule_needs_failures_all_in_scaleout_and_no_in_network_plan():
    fabric = _fabric("examples/dgx-h100-superpod.yaml")
    tp = rank_groups(fabric.accelerators[:248], Layout(tp=8, pp=1, dp=31), "tp")
    out = with_failures(fabric, ["leaf00"], ())
    assert not untouched_by_failures(fabric, ("ring",), tp)  # nothing failed
    assert untouched_by_failures(out, ("ring", "tree"), tp)
    assert not untouched_by_failures(out, ("ring", UNSHARED_ALGORITHMS[0]), tp)
    spilled = np.concatenate([tp[:, 4:], tp[::-1, :4]], axis=1)  # halves of two servers
    assert not untouched_by_failures(out, ("ring",), spilled)
    both = with_failures(fabric, ["leaf00", fabric.nodes["name"][
        (fabric.nodes["kind"] == "scaleup_switch").to_numpy()].iat[-1]], ())
    assert not untouched_by_failures(both, ("ring",), tp)


def _upper_level_parts(fabric):
    """The first and last switch of a supernode's level 2, and its first link up."""
    nodes, links = fabric.nodes, fabric.links
    names = nodes["name"].to_numpy()
    l2 = names[(nodes["tier"] == "scaleup_l2").to_numpy()]
    row = np.flatnonzero((links["tier"] == "scaleup_l2").to_numpy())[0]
    link = f"{names[links['src'].iat[row]]} -- {names[links['dst'].iat[row]]}"
    return [((str(l2[0]),), ()), ((str(l2[-1]),), ()), ((), (link,))]


def test_collectives_in_systems_keep_their_time_on_upper_level_failures(monkeypatch):
    """TP groups of one 8-NPU system of a supernode: on copies with a failed level-2
    switch or link, or a scale-out part, each collective is bit for bit what routing
    it on that copy alone gives, and TP is timed once for all of them."""
    example, layout = JOBS[2]
    fabric = _fabric(example)
    model = _model(fabric)
    parts = _upper_level_parts(fabric) + _scaleout_parts(fabric, per_tier=1)
    tp = rank_groups(fabric.accelerators[:layout.world], layout, "tp")
    assert all(untouched_by_failures(with_failures(fabric, *p), ("ring",), tp)
               for p in parts)
    routed = _count_routing(monkeypatch)
    for kept in (scaleout_failure_times, in_system_failure_times, kept_sections):
        fabric.derived(kept).clear()
    shared = [step_calls(with_failures(fabric, *part), model, layout, A)[0]
              for part in parts]
    with_sharing = len(routed)
    alone = []
    for part in parts:
        for kept in (scaleout_failure_times, in_system_failure_times, kept_sections):
            fabric.derived(kept).clear()
        alone.append(step_calls(with_failures(fabric, *part), model, layout, A)[0])
    assert len(routed) - with_sharing > with_sharing
    for part, kept_calls, own in zip(parts, shared, alone, strict=True):
        assert kept_calls == own, part


def test_a_collective_across_systems_is_not_shared_on_upper_level_failures():
    """Groups spanning two systems of a supernode cross its level-2 switches: a failed
    one moves their loads, so the rule must refuse them there (it shares them only on
    scale-out failures)."""
    example, layout = JOBS[2]
    fabric = _fabric(example)
    tp = rank_groups(fabric.accelerators[:layout.world], layout, "tp")
    spilled = np.concatenate([tp[:, 4:], tp[::-1, :4]], axis=1)  # halves of two systems
    upper = with_failures(fabric, *_upper_level_parts(fabric)[0])
    out = with_failures(fabric, *_scaleout_parts(fabric, per_tier=1)[0])
    assert not untouched_by_failures(upper, ("ring",), spilled)
    assert untouched_by_failures(out, ("ring",), spilled)
    traffic = collective_traffic(fabric, "allreduce", spilled, 2**24, algorithm="ring")
    loads = [route(copy, traffic.phases[0]).link_bytes for copy in (upper, out)]
    assert not np.array_equal(*loads)


def test_a_shape_fetches_its_schedule_and_one_copy_is_alive():
    """A shape names its schedule and fetches it (a planner keeps every shape it
    bounds: held, schedules of thousands of microbatches were most of its memory); the
    schedule it gets is :func:`pipeline.schedule`'s, bit for bit, and one still held
    elsewhere is given again even after the recent ones dropped it (no second copy)."""
    import gc
    import itertools
    import weakref

    from topomodel.analysis.training.pipeline import schedule
    from topomodel.analysis.training.stepshape import RECENT_SCHEDULES, cached_schedule, shape_of
    from topomodel.inputs.catalog import load_catalog

    fabric = _fabric("examples/dgx-h100-superpod.yaml")
    model = load_catalog().get("llama3-70b", Model)
    layout = Layout(tp=8, pp=4, dp=31, micro_batch=1, global_batch=31 * 64, interleave=2)
    shape = shape_of(fabric, model, layout)
    assert "schedule" not in vars(shape)  # a name, not the arrays
    want = schedule(layout.schedule, 4, shape.microbatches, 2)
    got = shape.schedule
    for field in ("kind", "micro", "chunk", "paired"):
        assert np.array_equal(getattr(got, field), getattr(want, field))
        assert getattr(got, field).dtype == getattr(want, field).dtype
        assert not getattr(got, field).flags.writeable

    def crowd_out():  # ask as many other schedules as the recent ones hold, each one
        # not alive yet (one alive, as other tests leave some, would not be made again
        # and so would not push an older one out of the recent ones)
        from topomodel.analysis.training.stepshape import _LIVE_SCHEDULES
        fresh = (m for m in itertools.count(1) if ("1f1b", 1, m, 1) not in _LIVE_SCHEDULES)
        for m in itertools.islice(fresh, RECENT_SCHEDULES):
            cached_schedule("1f1b", 1, m, 1)

    crowd_out()
    assert shape.schedule is got  # still held here: the same object, not a copy
    seen = weakref.ref(got)
    del got
    crowd_out()
    gc.collect()
    assert seen() is None  # the shape does not keep it alive
    again = shape.schedule  # built again: the same arrays
    assert np.array_equal(again.kind, want.kind) and np.array_equal(again.micro, want.micro)


def _grid(rows):
    """A grid as itself (shape, dtype and every rank in order), to compare by."""
    return (rows.shape, rows.dtype.str, rows.tobytes())


def test_the_strided_key_names_each_grid_exactly():
    """Over every layout of a 96-rank space (sizes, EP, all 24 rank orders) and every
    kind of communicator, and the pipeline pairs (with and without the wrap) of every
    pipeline: two grids
    share a strided key exactly when they are equal (shape, dtype and every rank),
    and the key's shape is the grid's."""
    import itertools
    from dataclasses import replace

    import numpy as np

    from topomodel.analysis.training.stepshape import pairs_key, strided_key
    from topomodel.traffic.layout import rank_groups

    world = 96
    ranks = np.random.default_rng(0).permutation(1000)[:world].astype(np.int64)
    by_key: dict = {}
    by_grid: dict = {}
    orders = [",".join(o) for o in itertools.permutations(["tp", "cp", "dp", "pp"])]
    for tp, cp, pp in itertools.product((1, 2, 4), (1, 2, 3), (1, 2, 4)):
        dp = world // (tp * cp * pp)
        for ep in [e for e in (1, 2, 4) if dp % e == 0]:
            base = Layout(tp=tp, cp=cp, pp=pp, dp=dp, ep=ep, global_batch=dp)
            for order in orders:
                layout = replace(base, order=order)
                for kind in ("tp", "cp", "ep", "pp", "dp", "edp", "grad", "expert_grad"):
                    grid = rank_groups(ranks, layout, kind)
                    key = strided_key(layout, kind)
                    assert key[1] == grid.shape, (layout, kind)
                    by_key.setdefault(key, set()).add(_grid(grid))
                    by_grid.setdefault(_grid(grid), set()).add(key)
                if pp == 1:
                    continue  # no pipeline, no pairs (the step makes none)
                stages = rank_groups(ranks, layout, "pp")
                pairs = np.stack([stages[:, :-1], stages[:, 1:]], axis=2).reshape(-1, 2)
                for wraps in (False, True):
                    if wraps:
                        pairs = np.concatenate([pairs, stages[:, [-1, 0]]])
                    key = pairs_key(layout, wraps)
                    by_key.setdefault(key, set()).add(_grid(pairs))
                    by_grid.setdefault(_grid(pairs), set()).add(key)
    assert all(len(v) == 1 for v in by_key.values())
    assert [v for v in by_grid.values() if len(v) > 1] == []
    assert 150 < len(by_key) < len(orders) * 50  # many grids, many shared by layouts
