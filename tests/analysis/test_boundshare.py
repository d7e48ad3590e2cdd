"""The bounds a search shares between rank orders and layouts: a placement's bound per
byte scaled by the size, the order screen of ZeRO 1 and 2, the passes' bounds in one
pass over every pass, and the unordered layout made without checks, each against what
it stands for."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from test_plan import DESIGN  # the same two HGX servers
from test_stepbound import CASES, _fitting_layouts

from topomodel.analysis.assumptions import TimeModel
from topomodel.analysis.collectives.commbound import (
    DUAL,
    collective_lower_bound_s,
    domain_runs,
    ingress_rates_of,
    unplaced_lower_bound_s,
)
from topomodel.analysis.training.orderscreen import order_screen, screen_works, works_bound
from topomodel.analysis.training.pipeline import cached_dependencies
from topomodel.analysis.training.step import StepAssumptions
from topomodel.analysis.training.stepbound import (
    bound_frame,
    unordered,
)
from topomodel.analysis.training.stepcalls import step_calls
from topomodel.analysis.training.stepshape import node_domains, ranks_of, shape_of
from topomodel.fabric.build import build_fabric
from topomodel.inputs.design import load_design
from topomodel.inputs.parts import Model
from topomodel.plan.callfloors import (
    SIZE_AT,
    collective_bounds,
    collective_latency_shapes,
    order_calls,
    protocol_floor_s,
    unplaced_calls,
)
from topomodel.traffic.layout import Layout


@pytest.fixture(scope="module")
def fabric():
    return build_fabric(*load_design("two.yaml", text=DESIGN))


def test_a_placements_bound_scales_with_the_size(fabric):
    """The bound order_calls keeps per byte is the placement's bound at the call's own
    size (but for the last bits), and the size sits where SIZE_AT says in the key."""
    model = fabric.catalog.get("llama3-8b", Model)
    fresh = build_fabric(*load_design("two.yaml", text=DESIGN))  # nothing timed
    layout = Layout(tp=2, pp=2, dp=4, global_batch=16, seq=4096, order="dp,tp,cp,pp")
    shape = shape_of(fresh, model, layout)
    seen = {}

    def unrouted(collective, groups, size, key):
        assert key[SIZE_AT] == size
        placed = key[:SIZE_AT] + key[SIZE_AT + 1:]
        bytes_s = collective_lower_bound_s(fresh, collective, groups(), size, TimeModel())
        floor, added = protocol_floor_s(fresh, collective, key[1], groups, size,
                                       TimeModel(), placed, bytes_s)
        assert added and floor > bytes_s > 0
        seen[key] = floor
        return 0.0

    step_calls(fresh, model, layout, unrouted=unrouted, shape=shape)
    _, missed = order_calls(fresh, model, layout, StepAssumptions(), shape)
    assert missed == len(seen) > 3
    known = fresh.derived(collective_bounds)
    for key, exact in seen.items():
        assert exact > 0
        assert known[key] == pytest.approx(exact, rel=1e-14), key
    sizes = {key[SIZE_AT] for key in seen}
    assert len(sizes) > 1  # several sizes, some over one placement


def test_the_unplaced_bound_is_kept_as_found():
    fabric = build_fabric(*load_design("two.yaml", text=DESIGN))
    tm = TimeModel()
    first = [unplaced_lower_bound_s(fabric, c, 8, 16, 2**28, tm)
             for c in ("allgather", "reducescatter", "allreduce", "alltoall")]
    again = build_fabric(*load_design("two.yaml", text=DESIGN))
    assert first == [unplaced_lower_bound_s(again, c, 8, 16, 2**28, tm)
                     for c in ("allgather", "reducescatter", "allreduce", "alltoall")]
    assert first == [unplaced_lower_bound_s(fabric, c, 8, 16, 2**28, tm)
                     for c in ("allgather", "reducescatter", "allreduce", "alltoall")]


def _delivered_by_loop(collective, groups, size, node_Bps, domain_Bps, domains):
    """The bytes' bound of commbound's table, found row by row and domain by domain in
    ascending order (the order its domain sums are added in); ``sendrecv``: pair by
    pair."""
    t = groups.shape[1]
    if collective == "sendrecv":  # each row a sender and a receiver
        got, into = {}, np.zeros(len(domain_Bps))
        for src, dst in groups.tolist():
            got[dst] = got.get(dst, 0) + 1
            if domains[src] != domains[dst]:
                into[domains[dst]] += 1
        rank_s = max(n * size / node_Bps[r] for r, n in got.items())
        return max(rank_s, float((into * size / domain_Bps).max()))
    share = {"allgather": (t - 1) / t, "reducescatter": 1 / t, "allreduce": 1.0,
             "alltoall": (t - 1) / t}[collective]
    rank_s = max(share * size / node_Bps[r] for r in groups.ravel())
    need = {"allgather": lambda k: (t - k) / t, "reducescatter": lambda k: k / t,
            "allreduce": lambda k: 1.0, "alltoall": lambda k: k * (t - k) / t}[collective]
    into = np.zeros(len(domain_Bps))
    for row in groups:
        held = domains[row]
        for d in sorted(set(held.tolist())):
            k = int((held == d).sum())
            into[d] += need(k) * (k < t)
    return max(rank_s, float((into * size / domain_Bps).max()))


@pytest.mark.parametrize("t", [2, 3, 4, 8])
@pytest.mark.parametrize("in_rank_order", [False, True])
def test_a_placements_domain_bound_is_the_row_by_row_count(fabric, t, in_rank_order):
    """The bytes' bound, its ranks per group and domain counted with each row sorted,
    is bit for bit what counting them row by row and domain by domain finds, for
    groups scattered over both servers' domains in any order, or each in rank order
    (rows already sorted, not sorted again), and for pairs, the rate into each
    receiver read at the receivers only."""
    rng = np.random.default_rng(t)
    tm = TimeModel()
    rates = ingress_rates_of(fabric, tm)
    domains = fabric.derived(node_domains)
    ranks = ranks_of(fabric)
    for _ in range(4):
        groups = rng.permutation(ranks)[:16 // t * t].reshape(-1, t)
        if in_rank_order:
            groups = np.sort(groups, axis=1)
        assert len(set(domains[groups].ravel().tolist())) == 2
        for collective in ("allgather", "reducescatter", "allreduce", "alltoall"):
            size = float(rng.integers(1, 2**30))
            expected = max(
                _delivered_by_loop(collective, groups, size, rates.node_Bps,
                                   rates.domain_Bps, domains),
                _delivered_by_loop(DUAL[collective], groups, size, rates.node_out_Bps,
                                   rates.domain_out_Bps, domains))
            assert collective_lower_bound_s(fabric, collective, groups, size, tm) \
                == expected, (collective, groups.tolist())
            # with the groups' runs given (as order_calls keeps them per grid)
            assert collective_lower_bound_s(
                fabric, collective, groups, size, tm,
                runs=lambda groups=groups: domain_runs(fabric, groups)) == expected
        # pairs: some ranks receive from several senders, some pairs stay in a domain
        pairs = rng.choice(ranks, size=(3 * t, 2))
        pairs = pairs[pairs[:, 0] != pairs[:, 1]]
        size = float(rng.integers(1, 2**30))
        expected = max(
            _delivered_by_loop("sendrecv", pairs, size, rates.node_Bps,
                               rates.domain_Bps, domains),
            _delivered_by_loop("sendrecv", pairs[:, ::-1], size, rates.node_out_Bps,
                               rates.domain_out_Bps, domains))
        assert collective_lower_bound_s(fabric, "sendrecv", pairs, size, tm) == expected


@pytest.mark.parametrize("design", ["two", "asymmetric-sites"])
def test_each_ways_seconds_kept_per_grid_give_the_same_bound(fabric, design):
    """One memo of each way's seconds shared by every collective over a grid (as
    order_calls keeps it) gives each collective's bound bit for bit as a fresh one: on a
    fabric whose rates are the same both ways (the two servers) the all-gather's way out
    is then the reduce-scatter's way in; on one whose uplinks send slower than they
    receive (asymmetric-sites) every way is its own."""
    fab = fabric if design == "two" else build_fabric(
        *load_design(f"examples/{design}.yaml"))
    tm = TimeModel()
    rates = ingress_rates_of(fab, tm)
    assert rates.symmetric == (design == "two")
    rng = np.random.default_rng(7)
    ranks = ranks_of(fab)
    for t in (2, 4, 8):
        groups = rng.permutation(ranks)[:len(ranks) // t * t].reshape(-1, t)
        kept: dict = {}
        for collective in ("allgather", "reducescatter", "allreduce", "alltoall",
                           "reducescatter", "allgather"):
            expected = max(
                _delivered_by_loop(collective, groups, 1.0, rates.node_Bps,
                                   rates.domain_Bps, fab.derived(node_domains)),
                _delivered_by_loop(DUAL[collective], groups, 1.0, rates.node_out_Bps,
                                   rates.domain_out_Bps, fab.derived(node_domains)))
            assert collective_lower_bound_s(fab, collective, groups, 1.0, tm,
                                            delivered=kept) == expected, collective
        # each way found once: the duals share on the symmetric fabric only
        assert len(kept) == (4 if rates.symmetric else 8)


def _fields(screen):
    return {k: v for k, v in vars(screen).items() if k not in ("frame", "gathers", "passes",
                                                              "pipeline")}


@pytest.mark.parametrize("case", ["dense", "moe"])
def test_zero_1_and_2_share_one_screen(fabric, case):
    """The screen of a layout at ZeRO 1 and at ZeRO 2 is the same, array for array, and
    bounds every order alike (what lets a search keep one for both); its operations'
    part is ZeRO 0's."""
    name, _, _, a = CASES[case]
    model = fabric.catalog.get(name, Model)
    compared = 0
    for _, layout, shape, pipeline in _fitting_layouts(fabric, case):
        if layout.zero != 1 or compared >= 6:
            continue
        other = replace(layout, zero=2)
        calls, _ = order_calls(fabric, model, layout, a, shape)
        assert order_calls(fabric, model, other, a, shape)[0] == calls
        one = order_screen(model, layout, a, shape, pipeline, calls)
        two = order_screen(model, other, a, shape, pipeline, calls)
        for part in ("frame", "gathers", "passes"):
            for k, v in vars(getattr(one, part)).items():
                assert np.array_equal(v, vars(getattr(two, part))[k]), (part, k)
        for k, v in _fields(one).items():
            assert np.array_equal(v, _fields(two)[k]) if isinstance(v, np.ndarray) \
                else v == _fields(two)[k], k
        assert one.bound(calls) == two.bound(calls)
        # the operations' part found at ZeRO 0 (an all-reduce, no gathers) serves too
        zero = replace(layout, zero=0)
        plain, _ = order_calls(fabric, model, zero, a, shape)
        shared = order_screen(model, other, a, shape, pipeline, calls,
                              screen_works(model, zero, a, shape, pipeline, plain))
        assert shared.bound(calls) == one.bound(calls)
        assert np.array_equal(shared.term_call, one.term_call)
        compared += 1
    assert compared >= 3


def test_the_passes_bounds_are_the_per_pass_sums(fabric):
    """The passes' operations before them and comm-free start, found for every pass at
    once, are what a loop over the passes finds."""
    name, _, _, a = CASES["dense"]
    model = fabric.catalog.get(name, Model)
    checked = 0
    for _, layout, shape, pipeline in _fitting_layouts(fabric, "dense"):
        if pipeline.timeline is None or layout.pp < 2:
            continue
        calls, _ = order_calls(fabric, model, layout, a, shape)
        screen = order_screen(model, layout, a, shape, pipeline, calls)
        p = screen.passes
        if not len(p.stage):
            continue
        tl = pipeline.timeline
        span = tl.end_s - tl.start_s
        units = screen.stage_units.shape[1]
        for i, (st, pos) in enumerate(zip(p.stage, p.pos, strict=True)):
            assert p.prefix_s[i] == pytest.approx(float(span[st, :pos].sum()), rel=1e-12)
            assert p.before[i].sum() == pos and p.before.shape[1] == units
        checked += 1
    assert checked > 3


def test_the_unordered_layout_is_the_replaced_one():
    for layout in (Layout(tp=2, dp=4, zero=2, order="dp,tp,cp,pp"),
                   Layout(tp=2, pp=2, dp=2, zero=3, recompute="full"), Layout(zero=0)):
        found = unordered(layout)
        made = replace(layout, zero=0, order=Layout().order)
        assert found == made and hash(found) == hash(made)
    held = Layout(tp=2, zero=2, order="dp,tp,cp,pp")
    unordered(held)
    assert held.zero == 2 and held.order == "dp,tp,cp,pp"


@pytest.mark.parametrize("case", list(CASES))
def test_the_works_bound_is_below_the_screens(fabric, case):
    """The bound from the screen's operations' part alone is never above the screen's
    own, with the orders' own times and with the unplaced floors, and is the same
    figure where the screen has neither ZeRO gathers nor gradient buckets."""
    name, _, _, a = CASES[case]
    model = fabric.catalog.get(name, Model)
    checked = same = below = 0
    for _, layout, shape, pipeline in _fitting_layouts(fabric, case):
        calls, _ = order_calls(fabric, model, layout, a, shape)
        screen = order_screen(model, layout, a, shape, pipeline, calls)
        works = screen_works(model, layout, a, shape, pipeline, calls)
        frame = bound_frame(model, layout, a, shape)
        for timed in (calls, unplaced_calls(fabric, layout, a, calls)):
            part = works_bound(works, pipeline, frame, timed).step_time_s
            whole = screen.bound(timed).step_time_s
            assert part <= whole, layout
            if not len(screen.bucket_stage) and not len(screen.gathers.call):
                assert part == whole, layout
                same += 1
            below += part < whole
            checked += 1
    assert checked > 6 and (below > 0 or "dual" in case)
    assert same > 0 or case == "dense"  # ZeRO 1 throughout: every layout gathers


def test_an_orders_bounds_check_each_communicator_once_alike():
    """order_calls checks the communicators once for every collective over them (the
    pipeline's exchanges apart): each bound it keeps is the one found with the
    communicators given afresh to each collective."""
    fresh = build_fabric(*load_design("two.yaml", text=DESIGN))
    model = fresh.catalog.get("llama3-8b", Model)
    tm = TimeModel()
    for layout in (Layout(tp=2, pp=2, dp=4, global_batch=16, seq=4096, zero=1,
                          sequence_parallel=True, order="dp,tp,cp,pp"),
                   Layout(tp=2, pp=4, dp=2, global_batch=16, seq=4096, zero=2,
                          schedule="zb-h1")):
        shape = shape_of(fresh, model, layout)
        _, missed = order_calls(fresh, model, layout, StepAssumptions(), shape)
        known = fresh.derived(collective_bounds)
        alone = build_fabric(*load_design("two.yaml", text=DESIGN))
        seen = {}

        def unrouted(collective, groups, size, key, alone=alone, seen=seen):
            placed = key[:SIZE_AT] + key[SIZE_AT + 1:]
            bytes_s = size * collective_lower_bound_s(alone, collective, groups(), 1.0, tm)
            floor, added = protocol_floor_s(alone, collective, key[1], groups, size, tm,
                                           placed, bytes_s)
            seen[key] = floor if added else max(bytes_s, floor)
            return 0.0

        step_calls(alone, model, layout, unrouted=unrouted, shape=shape)
        assert missed >= 4 and len(seen) >= missed
        assert {k: known[k] for k in seen} == seen
        # the candidates' shapes behind the latency floors, placement by placement
        shapes = alone.derived(collective_latency_shapes)
        assert len({s for per in shapes.values() for c in per for s in c}) >= 3
        kept = fresh.derived(collective_latency_shapes)
        assert {k: kept[k] for k in shapes} == shapes


def _path_by_arrays(pipeline, op_units, count):
    """The comm-free critical path walked back on the timeline's arrays themselves."""
    tl = pipeline.timeline
    dep_stage, dep_pos, boundary = cached_dependencies(tl.schedule)
    on_path, sends, length = np.zeros(count), 0, 0.0
    stage = last = int(np.argmax(tl.stage_end_s))
    j = tl.schedule.ops - 1
    while j >= 0:
        on_path[op_units[stage, j]] += 1
        length += float(tl.end_s[stage, j] - tl.start_s[stage, j])
        ds, dp = int(dep_stage[stage, j]), int(dep_pos[stage, j])
        before = float(tl.end_s[stage, j - 1]) if j > 0 else 0.0
        if dp >= 0 and float(tl.end_s[ds, dp]) > before:
            sends += int(boundary[stage, j] >= 0)
            stage, j = ds, dp
        else:
            j -= 1
    return on_path, last, length, sends


@pytest.mark.parametrize("case", ["dense", "blocking, no overlap, stragglers", "moe"])
def test_the_critical_path_is_the_one_walked_on_the_arrays(fabric, case):
    """The screen's critical path, walked on lists, is bit for bit the one walked on
    the timeline's arrays: its units, stage, length and sends."""
    name, _, _, a = CASES[case]
    model = fabric.catalog.get(name, Model)
    walked = 0
    for _, layout, shape, pipeline in _fitting_layouts(fabric, case):
        if pipeline.timeline is None:
            continue
        calls, _ = order_calls(fabric, model, layout, a, shape)
        works = screen_works(model, layout, a, shape, pipeline, calls)
        units, stage, length, sends = works.path
        ref = _path_by_arrays(pipeline, works.op_units, works.stage_units.shape[1])
        assert np.array_equal(units, ref[0]) and units.dtype == ref[0].dtype
        assert (stage, length, sends) == ref[1:]
        walked += sends > 0
    assert walked > 3


def test_the_buckets_runs_are_their_stages(fabric):
    """The screen's bucket runs (the stages with buckets and where each starts) cover
    the flat buckets stage by stage, so the per-run maximum is the per-stage one."""
    name, _, _, a = CASES["dense"]
    model = fabric.catalog.get(name, Model)
    seen = 0
    for _, layout, shape, pipeline in _fitting_layouts(fabric, "dense"):
        calls, _ = order_calls(fabric, model, layout, a, shape)
        screen = order_screen(model, layout, a, shape, pipeline, calls)
        stage, stages, starts = screen.bucket_stage, screen.bucket_stages, screen.bucket_starts
        lengths = np.diff(np.r_[starts, len(stage)])
        assert np.array_equal(np.repeat(stages, lengths), stage)
        assert len(np.unique(stages)) == len(stages) and (lengths > 0).all()
        seen += len(stages) > 1
    assert seen > 3


def test_a_grids_checked_communicators_are_kept_for_every_collective_over_it(monkeypatch):
    """The steps of layouts that share communicators, on one fabric while a search
    keeps them (each grid's checked blocks, domain parts and channels found once:
    checked_groups within keeping_groups), equal the same steps each on a fabric of its
    own, field for field; a grid is checked once, the kept blocks stay within
    CHECKED_RANKS, and nothing is kept outside keeping_groups or after it."""
    from topomodel.analysis.training import stepcalls
    from topomodel.analysis.training.step import step_time

    shared = build_fabric(*load_design("two.yaml", text=DESIGN))
    model = shared.catalog.get("llama3-8b", Model)
    layouts = [Layout(tp=2, pp=2, dp=4, global_batch=16, seq=4096, micro_batch=mb,
                      zero=zero, sequence_parallel=sp, order=order)
               for mb, zero, sp, order in ((1, 1, True, "tp,cp,dp,pp"),
                                           (2, 2, True, "tp,cp,dp,pp"),
                                           (1, 0, False, "tp,dp,cp,pp"),
                                           (2, 1, False, "dp,tp,cp,pp"))]
    kept = shared.derived(stepcalls.kept_groups)
    assert step_time(shared, model, layouts[0]) is not None and not kept  # not searching
    with stepcalls.keeping_groups(shared):
        for layout in layouts:
            alone = build_fabric(*load_design("two.yaml", text=DESIGN))
            assert step_time(shared, model, layout) == step_time(alone, model, layout)
        assert kept and all(name[0] == "grid" for name in kept)
        rows = next(iter(kept.values())).blocks[0]
        first = stepcalls.checked_groups(shared, ("test", 1), rows)
        assert stepcalls.checked_groups(shared, ("test", 1), lambda: 1 / 0) is first
        assert np.array_equal(first.blocks[0], rows)
        monkeypatch.setattr(stepcalls, "CHECKED_RANKS", rows.size)
        stepcalls.checked_groups(shared, ("test", 2), rows)  # the others dropped
        assert list(kept) == [("test", 2)]
    assert not kept  # dropped when the search ends


def test_a_dropped_grid_asked_again_is_not_checked_again_and_spans_the_same(monkeypatch):
    """With room for one grid (CHECKED_RANKS), the steps of several layouts on one
    fabric within keeping_groups equal each on a fabric of its own, field for field;
    a grid dropped and asked again is held without checking its groups again, with the
    domains its groups span (``nodes``) as found afresh."""
    from topomodel.analysis.training import stepcalls
    from topomodel.analysis.training.step import step_time
    from topomodel.traffic import communicators
    from topomodel.traffic.communicators import group_blocks

    shared = build_fabric(*load_design("two.yaml", text=DESIGN))
    model = shared.catalog.get("llama3-8b", Model)
    layouts = [Layout(tp=tp, pp=2, dp=8 // tp, global_batch=16, seq=4096, micro_batch=1,
                      zero=1, order=order)
               for tp, order in ((2, "tp,cp,dp,pp"), (4, "tp,cp,dp,pp"), (2, "dp,tp,cp,pp"),
                                 (2, "tp,cp,dp,pp"), (4, "tp,cp,dp,pp"))]
    monkeypatch.setattr(stepcalls, "CHECKED_RANKS", 1)  # one grid kept at a time
    dropped = shared.derived(stepcalls.dropped_groups)
    with stepcalls.keeping_groups(shared):
        for layout in layouts:
            alone = build_fabric(*load_design("two.yaml", text=DESIGN))
            assert step_time(shared, model, layout) == step_time(alone, model, layout)
        assert dropped and any(dropped.values())  # some with their spans found
        rows_a = shared.accelerators.reshape(2, -1)  # a group per server
        rows_b = shared.accelerators.reshape(-1, 2)
        first = stepcalls.checked_groups(shared, ("test", "a"), rows_a)
        spans = first.block(0).nodes
        stepcalls.checked_groups(shared, ("test", "b"), rows_b)  # "a" dropped
        assert ("test", "a") not in shared.derived(stepcalls.kept_groups)
        checks: list[object] = []
        real = communicators._verified
        monkeypatch.setattr(communicators, "_verified",
                            lambda g: checks.append(g) or real(g))
        again = stepcalls.checked_groups(shared, ("test", "a"), rows_a)
        assert not checks and again is not first  # held again, not checked again
        assert np.array_equal(again.blocks[0], first.blocks[0])
        assert again.block(0).cache["nodes"] == spans == group_blocks(
            shared, rows_a).block(0).nodes  # as found afresh
        assert checks  # a fresh group_blocks checks
    assert not dropped  # dropped when the search ends


def test_searches_that_end_out_of_order_leave_nothing_kept():
    """Two searches on one fabric that end in the order they began (as two threads'
    may: a dask cluster's), and one on another fabric: keeping holds while any search
    of that fabric runs, and nothing is kept after the last one ends. A process-wide
    flag restored on exit was left on here, so every later step kept its
    communicators."""
    from topomodel.analysis.training import stepcalls

    fabric = build_fabric(*load_design("two.yaml", text=DESIGN))
    other = build_fabric(*load_design("two.yaml", text=DESIGN))
    rows = fabric.accelerators.reshape(2, -1)
    first, second = stepcalls.keeping_groups(fabric), stepcalls.keeping_groups(fabric)
    first.__enter__()
    second.__enter__()
    first.__exit__(None, None, None)  # the first ends while the second still runs
    stepcalls.checked_groups(fabric, ("test", "a"), rows)
    assert ("test", "a") in fabric.derived(stepcalls.kept_groups)  # still keeping
    stepcalls.checked_groups(other, ("test", "a"), other.accelerators.reshape(2, -1))
    assert not other.derived(stepcalls.kept_groups)  # no search of its own
    second.__exit__(None, None, None)
    assert not fabric.derived(stepcalls.kept_groups)  # dropped when the last ends
    stepcalls.checked_groups(fabric, ("test", "b"), rows)
    assert not fabric.derived(stepcalls.kept_groups)  # and nothing kept after


@pytest.mark.parametrize("span_first", [True, False])
def test_a_grids_span_and_its_checked_blocks_share_the_domains_spanned(span_first):
    """grid_span (the spans the planner's group floors read) and the communicators
    checked_groups keeps for the same grid agree on the domains a group spans, as
    found afresh (most_domains), whichever is found first: the one found first hands
    it to the other, which does not find it again."""
    from topomodel.analysis.training import stepcalls
    from topomodel.analysis.training.stepshape import grid_key
    from topomodel.traffic import communicators
    from topomodel.traffic.layout import rank_groups

    fabric = build_fabric(*load_design("two.yaml", text=DESIGN))
    ranks = ranks_of(fabric)
    with stepcalls.keeping_groups(fabric):
        for order in ("tp,cp,dp,pp", "dp,tp,cp,pp", "pp,dp,tp,cp"):
            layout = Layout(tp=2, pp=2, dp=4, global_batch=16, seq=4096, order=order)
            for kind in ("tp", "grad", "pp"):
                key = grid_key(fabric, layout, kind)
                rows = rank_groups(ranks, layout, kind)
                fresh = communicators.most_domains(fabric, rows)
                if span_first:
                    span = stepcalls.grid_span(fabric, key, lambda rows=rows: rows)
                    blocks = stepcalls.checked_groups(fabric, ("grid", key), rows)
                    assert blocks.block(0).cache["nodes"] == fresh  # handed over
                else:
                    blocks = stepcalls.checked_groups(fabric, ("grid", key), rows)
                    span = stepcalls.grid_span(fabric, key, lambda: 1 / 0)  # not built
                    assert blocks.block(0).cache["nodes"] == fresh  # handed over
                assert span == (rows.shape[1], fresh)
