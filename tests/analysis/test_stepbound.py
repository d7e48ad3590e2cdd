"""The step bound against the step: never above any rank order's step time, so a search
that skips by it loses nothing, and close to it on deep pipelines."""

from __future__ import annotations

import itertools
from dataclasses import replace

import numpy as np
import pytest
from test_plan import DESIGN  # the same two HGX servers

from topomodel.analysis.collectives.commbound import collective_lower_bound_s
from topomodel.analysis.training import pipeline as pipe_run
from topomodel.analysis.training.orderscreen import order_screen
from topomodel.analysis.training.step import StepAssumptions, layout_memory, step_time
from topomodel.analysis.training.stepbound import (
    bound_with_calls,
    busy_bound,
    busy_pipeline,
    calls_busy_figures,
    calls_busy_sums,
    comm_free_pipeline,
    step_bound,
    unordered,
)
from topomodel.analysis.training.stepcalls import step_calls
from topomodel.analysis.training.stepshape import shape_of
from topomodel.errors import UsageError
from topomodel.fabric.build import build_fabric
from topomodel.inputs.design import load_design
from topomodel.inputs.parts import Model
from topomodel.plan.callfloors import order_bound, order_calls, unplaced_calls
from topomodel.plan.orderbounds import OrderMemo, unplaced_floor_calls
from topomodel.plan.search import PlanJob
from topomodel.plan.space import PlanSpace, cell_layouts, cells
from topomodel.traffic.layout import Layout


@pytest.fixture(scope="module")
def fabric():
    return build_fabric(*load_design("two.yaml", text=DESIGN))


# each case a model, a base layout (the fields the space does not search), a space and
# assumptions that reach the bound's every branch: ZeRO gathers, blocking sends, sends
# and gradients after the backward, stragglers, MoE imbalance and DualPipe
CASES = {
    "dense": ("llama3-8b", Layout(global_batch=16, seq=4096),
              PlanSpace(max_micro_batch=1, max_interleave=2, max_cp=2,
                        fixed={"recompute": "selective", "zero": 1}), StepAssumptions()),
    "blocking, no overlap, stragglers": (
        "llama3-8b", Layout(global_batch=8, seq=4096, pp_blocking=True, dp_overlap=False),
        PlanSpace(max_micro_batch=1, max_interleave=2, max_cp=1,
                  fixed={"sequence_parallel": True}),
        StepAssumptions(straggler_share=0.01, straggler_slowdown=0.5, jitter_cv=0.05)),
    "moe, dualpipe": ("mixtral-8x7b", Layout(global_batch=16, seq=4096,
                                             ep_overlap="dualpipe"),
                      PlanSpace(max_micro_batch=1, max_interleave=1, max_cp=1,
                                fixed={"recompute": "full", "sequence_parallel": True}),
                      StepAssumptions()),
    "moe": ("mixtral-8x7b", Layout(global_batch=16, seq=4096),
            PlanSpace(max_micro_batch=1, max_interleave=2, max_cp=1,
                      fixed={"recompute": "full", "sequence_parallel": True}),
            StepAssumptions(hot_expert_factor=1.3)),
}


def _fitting_layouts(fabric, case):
    """Every layout of ``case``'s space that fits the memory, with its fields, its
    shape and the comm-free pipeline it shares with its other rank orders."""
    name, base, space, a = CASES[case]
    model = fabric.catalog.get(name, Model)
    pipelines = {}
    for cell in cells(model, fabric.accelerator_count, space, base):
        for fields in cell_layouts(model, cell, base, space):
            layout = replace(base, **fields)
            try:
                layout_memory(fabric, model, layout, a)
            except UsageError:
                continue
            shape = shape_of(fabric, model, layout)
            key = unordered(layout)
            if key not in pipelines:
                pipelines[key] = comm_free_pipeline(model, layout, a, shape)
            yield fields, layout, shape, pipelines[key]


@pytest.mark.parametrize("case", list(CASES))
def test_no_order_beats_the_bound(case):
    fabric = build_fabric(*load_design("two.yaml", text=DESIGN))  # no collective timed
    name, _, _, a = CASES[case]
    model = fabric.catalog.get(name, Model)
    checked = tight = ordered = 0
    for fields, layout, shape, pipeline in _fitting_layouts(fabric, case):
        bound = step_bound(model, layout, a, shape, pipeline)
        # the planner's first, cheap bound (no timeline) is never above it
        assert busy_bound(model, layout, a, shape).step_time_s <= bound.step_time_s, fields
        # before the step times them, this order's new collectives are bounded
        own = order_bound(fabric, model, layout, a, shape)
        step = step_time(fabric, model, layout, a)
        assert bound.step_time_s <= step.step_time_s, fields
        assert own is None or own.step_time_s <= step.step_time_s, fields
        ordered += own is not None
        assert bound.mfu >= step.mfu and bound.tokens_per_s >= step.tokens_per_s
        checked += 1
        tight += bound.step_time_s > 0.75 * step.step_time_s
    assert checked > 50 and ordered > 5
    # a bound that prunes, not zero: at least 1 in 20 within 75 % of the step (measured:
    # 64 of 672 for the MoE with DualPipe, the fewest, since the step tries what NCCL
    # runs and no longer the hierarchical ring across the two servers; 83 before)
    assert tight > checked // 20


@pytest.mark.parametrize("case", list(CASES))
def test_the_order_screen_is_below_the_orders_bound_and_its_step(case):
    """The screen of every order, from the collective bounds (before routing) and from
    the routed times (after the step): never above the order's own bound nor its step,
    and close to the step where the times are the step's (a screen scaled up by a
    hundredth would exceed some steps)."""
    fabric = build_fabric(*load_design("two.yaml", text=DESIGN))  # no collective timed
    name, _, _, a = CASES[case]
    model = fabric.catalog.get(name, Model)
    screens, ratios = {}, []
    screened = floored = 0
    for fields, layout, shape, pipeline in _fitting_layouts(fabric, case):
        calls, missed = order_calls(fabric, model, layout, a, shape)
        group = replace(layout, order=Layout().order)
        if group not in screens:
            screens[group] = order_screen(model, layout, a, shape, pipeline, calls)
        screen = screens[group]
        before = screen.bound(calls).step_time_s
        if missed:
            own = bound_with_calls(model, layout, a, shape, calls)
            # the same sums in another order: equal but for the last bits
            assert before <= own.step_time_s * (1 + 1e-12), fields
            screened += 1
        step = step_time(fabric, model, layout, a)
        timed, missed = step_calls(fabric, model, layout, a, shape=shape)
        assert not missed
        # every order's at once: each collective no slower than on this placement
        floor = unplaced_calls(fabric, layout, a, calls)
        for n, call in floor.items():
            assert call.time_s <= min(calls[n].time_s, timed[n].time_s) * (1 + 1e-12), n
        unplaced = screen.bound(floor).step_time_s
        assert unplaced <= before * (1 + 1e-12), fields
        floored += unplaced > screen.bound(
            {n: replace(c, time_s=0.0) for n, c in calls.items()}).step_time_s
        after = screen.bound(timed)
        assert before <= step.step_time_s and after.step_time_s <= step.step_time_s, (
            fields)
        assert after.tokens_per_s >= step.tokens_per_s and after.mfu >= step.mfu
        ratios.append(after.step_time_s / step.step_time_s)
    # the collectives' floor raises the screen (under DualPipe it reads none)
    assert screened > 5 and (floored > 5 or "dualpipe" in case)
    # scaled up by 1 %, the screen would exceed some step (under DualPipe it is the
    # least compute of a stage plus the wait, by 25 %)
    assert max(ratios) * (1.25 if "dualpipe" in case else 1.01) > 1
    assert np.median(ratios) > 0.5


def test_the_screen_at_no_collective_time_is_the_layouts_bound(fabric):
    """With every call taking no time the screen is the comm-free bound, and its
    critical path is the comm-free timeline's: as long as the makespan."""
    model = fabric.catalog.get("llama3-8b", Model)
    a = StepAssumptions()
    for layout in (Layout(tp=2, pp=4, dp=2, global_batch=16, seq=4096, interleave=2),
                   Layout(tp=4, pp=2, dp=2, global_batch=16, seq=4096, zero=1,
                          schedule="zb-h1", dp_overlap=False)):
        shape = shape_of(fabric, model, layout)
        pipeline = comm_free_pipeline(model, layout, a, shape)
        calls, _ = order_calls(fabric, model, layout, a, shape)
        screen = order_screen(model, layout, a, shape, pipeline, calls)
        assert screen.path_s == pytest.approx(pipeline.timeline.makespan_s, rel=1e-12)
        idle = {name: replace(call, time_s=0.0) for name, call in calls.items()}
        free = step_bound(model, layout, a, shape, pipeline).step_time_s
        assert screen.bound(idle).step_time_s == pytest.approx(free, rel=1e-12)
        assert screen.bound(calls).step_time_s > free  # the collectives add to it


def test_the_pipeline_is_shared_by_zero_stages_and_orders(fabric):
    model = fabric.catalog.get("llama3-8b", Model)
    a = StepAssumptions()
    layouts = [Layout(tp=2, pp=2, dp=4, global_batch=16, seq=4096, zero=z, order=o)
               for z in (0, 1, 3) for o in ("tp,cp,dp,pp", "dp,cp,tp,pp")]
    assert {unordered(lay) for lay in layouts} == {unordered(layouts[0])}
    first = comm_free_pipeline(model, layouts[0], a, shape_of(fabric, model, layouts[0]))
    for lay in layouts:
        mine = comm_free_pipeline(model, lay, a, shape_of(fabric, model, lay))
        assert (mine.finish_s == first.finish_s).all()
        assert (mine.busy_s == first.busy_s).all()


def _most_sends(layout):
    """The most pipeline sends any path of ``layout``'s schedule crosses: its timeline
    with operations taking no time and every send one."""
    sched = pipe_run.schedule(layout.schedule, layout.pp, layout.global_batch // layout.dp
                              // layout.micro_batch, layout.interleave)
    return round(pipe_run.timeline(sched, np.zeros((layout.pp, sched.ops)), np.ones((layout.pp, 2)),
                          blocking_sends=layout.pp_blocking).makespan_s)


def test_the_screen_counts_the_sends_on_its_critical_path(fabric):
    """A pipeline's screen and its order's own bound take the sends' time: the
    critical path crosses sends (the wrap of interleaving and zero bubble's included),
    each adds its time, and both stay under the step."""
    model = fabric.catalog.get("llama3-8b", Model)
    a = StepAssumptions()
    for layout in (Layout(tp=2, pp=4, dp=2, global_batch=16, seq=4096, interleave=2),
                   Layout(tp=4, pp=2, dp=2, global_batch=16, seq=4096, zero=1,
                          schedule="zb-h1", dp_overlap=False),
                   Layout(tp=1, pp=4, dp=4, global_batch=32, seq=4096, pp_blocking=True)):
        shape = shape_of(fabric, model, layout)
        pipeline = comm_free_pipeline(model, layout, a, shape)
        step = step_time(fabric, model, layout, a)
        timed, _ = step_calls(fabric, model, layout, a, shape=shape)
        screen = order_screen(model, layout, a, shape, pipeline, timed)
        assert 0 < screen.path_sends <= _most_sends(layout)
        silent = {**timed, "pp": replace(timed["pp"], time_s=0.0)}
        assert timed["pp"].time_s > 0
        # the sends on the path raise the screen's end of that stage by their time
        free, sent = screen.bound(silent), screen.bound(timed)
        assert free.step_time_s <= sent.step_time_s <= step.step_time_s
        own = bound_with_calls(model, layout, a, shape, timed).step_time_s
        assert bound_with_calls(model, layout, a, shape, silent).step_time_s < own
        assert own <= step.step_time_s * (1 + 1e-12)


def test_the_unplaced_bound_is_each_placements_least():
    """Groups of a domain's size may sit inside one: the bound of every order is the
    rank's alone, and a placement across the domains is slower; groups larger than a
    domain cross it in every order, and the bound is the placement's."""
    from topomodel.analysis.assumptions import TimeModel
    from topomodel.analysis.collectives.commbound import unplaced_lower_bound_s

    fabric = build_fabric(*load_design("two.yaml", text=DESIGN))
    ranks = fabric.accelerators
    inside, across = ranks.reshape(2, 8), ranks.reshape(8, 2).T.reshape(2, 8)
    size, tm = 2**28, TimeModel()
    for collective in ("allgather", "reducescatter", "allreduce", "alltoall"):
        eight = unplaced_lower_bound_s(fabric, collective, 8, 16, size, tm)
        assert 0 < eight <= collective_lower_bound_s(fabric, collective, inside, size, tm)
        assert eight < collective_lower_bound_s(fabric, collective, across, size, tm)
        whole = unplaced_lower_bound_s(fabric, collective, 16, 16, size, tm)
        assert whole == pytest.approx(collective_lower_bound_s(
            fabric, collective, ranks.reshape(1, 16), size, tm), rel=1e-12)
        assert whole > unplaced_lower_bound_s(fabric, collective, 16, 16, size / 2, tm)
    pairs = ranks[[[0, 1], [8, 9]]]
    send = unplaced_lower_bound_s(fabric, "sendrecv", 2, 16, size, tm)
    assert 0 < send <= collective_lower_bound_s(fabric, "sendrecv", pairs, size, tm)


FOUR = DESIGN.replace("systems: 2", "systems: 4").replace("two hgx", "four hgx")


def _four_placements():
    """The four-server design and three placements of its ranks: groups inside a
    server, across servers, and half in each of two servers."""
    fabric = build_fabric(*load_design("four.yaml", text=FOUR))
    ranks = fabric.accelerators
    return fabric, {"inside a server": ranks.reshape(-1, 8),
                    "across servers": ranks.reshape(4, 8).T,
                    "half and half": ranks.reshape(2, 2, 8).transpose(0, 2, 1).reshape(-1, 4)}


@pytest.mark.parametrize("collective", ["allgather", "reducescatter", "allreduce",
                                        "alltoall"])
def test_no_algorithm_beats_the_placement_bound(collective):
    from test_commbound import routed_times

    from topomodel.analysis.assumptions import TimeModel

    fabric, placements = _four_placements()
    model = TimeModel()
    timed = 0
    for name, groups in placements.items():
        for size in (1e3, 64e6):
            bound = collective_lower_bound_s(fabric, collective, groups, size, model)
            assert bound > 0
            times = routed_times(fabric, collective, groups, size, model)
            assert all(bound <= t for t in times.values()), (name, size, times)
            timed += len(times)
    assert timed >= 6
    crossing = collective_lower_bound_s(fabric, collective, placements["across servers"],
                                        64e6, model)
    inside = collective_lower_bound_s(fabric, collective, placements["inside a server"],
                                      64e6, model)
    assert crossing > 2 * inside  # the NICs, not NVLink, carry what crosses servers


def test_send_receive_bound_counts_what_crosses(fabric):
    from topomodel.analysis.assumptions import TimeModel

    ranks = fabric.accelerators
    inside = np.stack([ranks[:7], ranks[1:8]], axis=1)
    across = np.stack([ranks[:8], ranks[8:]], axis=1)
    model = TimeModel()
    assert collective_lower_bound_s(fabric, "sendrecv", across, 1e8, model) > (
        2 * collective_lower_bound_s(fabric, "sendrecv", inside, 1e8, model))


def test_a_failed_link_leaves_no_collective_bound():
    from topomodel.analysis.assumptions import TimeModel
    from topomodel.fabric.failures import with_failures

    fabric = build_fabric(*load_design("two.yaml", text=DESIGN))
    switch = fabric.nodes.loc[fabric.nodes["kind"] == "switch", "name"].iloc[0]
    broken = with_failures(fabric, [switch])
    groups = broken.accelerators.reshape(8, 2)
    assert collective_lower_bound_s(broken, "allgather", groups, 1e8, TimeModel()) == 0.0


@pytest.mark.parametrize("case", ["dense", "blocking, no overlap, stragglers", "moe"])
def test_the_cheap_bound_is_the_same_at_every_zero_stage(case):
    """The planner bounds one ZeRO stage of a layout for all of them: the cheap bound
    is bit for bit the same at every stage (and with or without its busy pipeline)."""
    fabric = build_fabric(*load_design("two.yaml", text=DESIGN))
    name, _, _, a = CASES[case]
    model = fabric.catalog.get(name, Model)
    checked = 0
    for _, layout, shape, _ in _fitting_layouts(fabric, case):
        if layout.dp * layout.cp == 1:
            continue
        busy = busy_pipeline(model, layout, a, shape)
        first = busy_bound(model, layout, a, shape)
        for zero in range(4):
            other = replace(layout, zero=zero)
            assert busy_bound(model, other, a, shape) == first, other
            assert busy_bound(model, other, a, shape, busy) == first, other
            checked += 1
    assert checked


@pytest.mark.parametrize("overlap", [True, False])
def test_the_zero_gathers_raise_the_screen_and_stay_under_the_step(fabric, overlap):
    """ZeRO 1-2's gathers of the updated weights before the first forward: with them the
    screen and the order's own bound are higher than without (on layouts where the gather
    outlasts the first forward), and never above the step; under ZeRO 0 nothing
    changes."""
    from topomodel.analysis.training.orderscreen import Gathers

    model = fabric.catalog.get("llama3-8b", Model)
    a = StepAssumptions()
    raised = 0
    for zero in (0, 1, 2):
        for pp, tp in ((1, 2), (2, 2), (1, 4)):
            layout = Layout(tp=tp, pp=pp, dp=16 // (tp * pp), global_batch=16, seq=4096,
                            zero=zero, dp_overlap=overlap)
            shape = shape_of(fabric, model, layout)
            step = step_time(fabric, model, layout, a)
            calls, missed = step_calls(fabric, model, layout, a, shape=shape)
            assert not missed
            pipeline = comm_free_pipeline(model, layout, a, shape)
            screen = order_screen(model, layout, a, shape, pipeline, calls)
            gathers = screen.gathers
            none = Gathers(gathers.call[:0], gathers.count[:0], gathers.first_unit,
                           gathers.first_s)
            without = replace(screen, gathers=none).bound(calls).step_time_s
            with_gathers = screen.bound(calls).step_time_s
            own = bound_with_calls(model, layout, a, shape, calls).step_time_s
            assert with_gathers <= step.step_time_s and own <= step.step_time_s, layout
            assert with_gathers >= without, layout
            if zero == 0:
                assert with_gathers == without, layout
            raised += with_gathers > without
    assert raised >= 3


def test_a_reduce_scatter_sends_what_an_all_gather_receives():
    """What must leave a rank or a domain in a reduce-scatter is what must enter it in
    an all-gather (each other rank's reduced share depends on this rank's part of it),
    and the other way round: on a fabric whose links run as fast each way the two
    bounds are equal, the reduce-scatter's t - 1 times its bound into the ranks alone
    (S / t into a rank, (t - 1) / t S out of it)."""
    from topomodel.analysis.assumptions import TimeModel
    from topomodel.analysis.collectives.commbound import (
        DUAL,
        ingress_rates_of,
        unplaced_lower_bound_s,
    )

    fabric = build_fabric(*load_design("four.yaml", text=FOUR))
    ranks, tm = fabric.accelerators, TimeModel()
    rates = ingress_rates_of(fabric, tm)
    assert np.array_equal(rates.node_Bps, rates.node_out_Bps)
    assert np.array_equal(rates.domain_Bps, rates.domain_out_Bps)
    size = 64e6
    for groups in (ranks.reshape(-1, 8), ranks.reshape(4, 8).T):
        t = groups.shape[1]
        gather = collective_lower_bound_s(fabric, "allgather", groups, size, tm)
        scatter = collective_lower_bound_s(fabric, "reducescatter", groups, size, tm)
        assert scatter == gather > 0
        node_Bps = rates.node_Bps[groups].min()
        assert scatter >= (t - 1) / t * size / node_Bps * (1 - 1e-12)
    for t in (4, 8, 32):
        assert unplaced_lower_bound_s(fabric, "reducescatter", t, 32, size, tm) == (
            unplaced_lower_bound_s(fabric, "allgather", t, 32, size, tm))
    assert all(DUAL[DUAL[c]] == c for c in DUAL)


@pytest.mark.parametrize("case", list(CASES))
def test_the_busy_pipeline_is_the_operations_sums(case):
    """:func:`busy_pipeline` reads the chunks' figures without making their works: every
    stage's busy time and compute bit for bit the sums of the operations
    :func:`step_ops` makes (no collective timed; an MoE layout's All-to-All idle;
    timed, every operation's figures as :func:`chunk_durations` and :func:`op_durations`
    read them), across recomputation, interleaving, sequence parallelism and zero-bubble's W."""
    from topomodel.analysis.training.compute import shared_device_model, shared_layer_times
    from topomodel.analysis.training.model import BYTES
    from topomodel.analysis.training.stagework import Call, chunk_durations, op_durations
    from topomodel.analysis.training.step import step_ops

    fabric = build_fabric(*load_design("two.yaml", text=DESIGN))
    name, _, _, a = CASES[case]
    model = fabric.catalog.get(name, Model)
    checked = exposed = 0
    for _, layout, shape, _ in _fitting_layouts(fabric, case):
        for schedule in {layout.schedule, "zb-h1"} if layout.interleave == 1 \
                else {layout.schedule}:
            lay = replace(layout, schedule=schedule)
            sh = shape if schedule == layout.schedule else shape_of(fabric, model, lay)
            device = shared_device_model(sh.accelerator, a.compute_dtype,
                                         override=a.compute_efficiency,
                                         hbm_efficiency=a.hbm_efficiency)
            calls = {}
            if lay.ep > 1 and model.is_moe:
                calls["ep"] = Call("ep", "alltoall", "direct", 1.0, 0.0, 0.0, 0.0, 0.0,
                                   False)
            ops = step_ops(device, model, lay, a, sh.seq, sh.schedule, calls,
                           sh.sizes - sh.moe_sizes, sh.moe_sizes)
            busy = busy_pipeline(model, lay, a, sh)
            assert np.array_equal(busy.busy_s, ops.duration_s.sum(axis=1)), lay
            assert np.array_equal(busy.finish_s, busy.busy_s)
            assert np.array_equal(busy.compute_s, ops.compute_s.sum(axis=1)), lay
            assert busy.dualpipe == (lay.ep_overlap == "dualpipe")
            if lay.ep_overlap != "dualpipe":  # with the step's collectives timed too
                timed, _ = step_calls(fabric, model, lay, a, shape=sh)
                ops = step_ops(device, model, lay, a, sh.seq, sh.schedule, timed,
                               sh.sizes - sh.moe_sizes, sh.moe_sizes)
                lt_dense, lt_moe, edges = shared_layer_times(
                    device, model, lay, sh.seq, main_grad_bytes=BYTES[a.main_grad_dtype])
                duration, compute = chunk_durations(
                    lt_dense, lt_moe, edges, timed, lay, sh.sizes - sh.moe_sizes,
                    sh.moe_sizes, hot=a.hot_expert_factor if model.is_moe else 1.0,
                    split_w=schedule == "zb-h1", share=a.comm_sm_share)
                rows = np.arange(lay.pp)[:, None]
                s = sh.schedule
                assert np.array_equal(duration[s.kind, rows, s.chunk], ops.duration_s), lay
                assert np.array_equal(compute[s.kind, rows, s.chunk], ops.compute_s), lay
                per_op = op_durations(
                    lt_dense, lt_moe, edges, timed, lay, sh.sizes - sh.moe_sizes,
                    sh.moe_sizes, s, hot=a.hot_expert_factor if model.is_moe else 1.0,
                    split_w=schedule == "zb-h1", share=a.comm_sm_share)
                assert np.array_equal(per_op[0], ops.duration_s), lay
                assert np.array_equal(per_op[1], ops.compute_s), lay
                exposed += bool(sum(float(e.sum()) for e in ops.exposed_s.values()))
            checked += 1
    assert checked > 20
    assert exposed or case == "moe, dualpipe"


def test_a_call_timed_again_is_what_replace_makes():
    from topomodel.analysis.training.stagework import Call

    call = Call("tp", "allgather", "ring", 1e6, 2e-3, 1e-5, 1.5e-3, 4.9e-4, True, "curve")
    again = call.timed(1e-3, 0.0, 1e-3, 0.0)
    assert again == replace(call, time_s=1e-3, latency_s=0.0, bandwidth_s=1e-3,
                            topology_s=0.0)
    assert call.timed(call.time_s, call.latency_s, call.bandwidth_s, call.topology_s) == call


@pytest.mark.parametrize("collective", ["allgather", "reducescatter", "allreduce",
                                        "alltoall"])
def test_no_candidate_beats_the_latency_floor(collective):
    """The step keeps the fastest of ``auto``'s candidates: its time is never below the
    latency floor an unrouted collective is bounded by, and for small sizes the floor is
    the tighter of the two bounds (latency, not bytes, is most of the time)."""
    from topomodel.analysis.assumptions import TimeModel
    from topomodel.analysis.collectives.collective import fastest
    from topomodel.analysis.collectives.timing import floor_s
    from topomodel.plan.callfloors import protocol_floor_s
    from topomodel.traffic.algorithms import auto_candidates
    from topomodel.traffic.collectives import collective_shapes, collective_traffic
    from topomodel.traffic.communicators import group_blocks

    fabric, placements = _four_placements()
    model = TimeModel()
    for name, groups in placements.items():
        candidates = tuple(auto_candidates(fabric, collective, groups.shape[1]))
        blocks = group_blocks(fabric, groups)
        for size in (1e3, 64e6):
            floor, added = protocol_floor_s(fabric, collective, candidates,
                                           lambda g=groups: g, size, model,
                                           (collective, candidates, name))
            _, _, timed, _ = fastest(
                fabric, lambda alg, s=size, b=blocks: collective_traffic(
                    fabric, collective, b, s, algorithm=alg),
                candidates, time_model=model)
            assert 0 < floor <= timed.time_s, (name, size)
            # a latency the time adds to its bandwidth part, which the bytes' bound is
            # no more than: the fastest protocol's time at that bound is under the time
            bytes_s = collective_lower_bound_s(fabric, collective, groups, size, model)
            at_bytes, added = protocol_floor_s(fabric, collective, candidates,
                                              lambda g=groups: g, size, model,
                                              (collective, candidates, name), bytes_s)
            assert added
            assert floor + bytes_s <= at_bytes <= timed.time_s, (name, size)
            # found without the channels, the same as from the traffic's own shapes
            assert floor == min(floor_s(fabric, collective_shapes(
                fabric, collective, blocks, size, algorithm=alg), model)
                for alg in candidates), (name, size)
            if size == 1e3:
                assert floor > collective_lower_bound_s(fabric, collective, groups, size,
                                                        model), name


@pytest.mark.parametrize("case", list(CASES))
def test_the_comm_free_pipeline_is_the_step_operations_timeline(case):
    """:func:`comm_free_pipeline` reads the operations' durations from the chunks'
    figures (dualpipe aside): its timeline, compute and finish bit for bit those of the
    operations :func:`step_ops` makes, with no collective timed and with the step's
    collectives (sends, gathers and gradient buckets timed)."""
    from topomodel.analysis.training.compute import shared_device_model
    from topomodel.analysis.training.memory import stage_parameters
    from topomodel.analysis.training.pipeline import timeline
    from topomodel.analysis.training.stagework import Call
    from topomodel.analysis.training.step import step_ops
    from topomodel.analysis.training.stepbound import gather_ready_s, per_send_s

    fabric = build_fabric(*load_design("two.yaml", text=DESIGN))
    name, _, _, a = CASES[case]
    model = fabric.catalog.get(name, Model)
    checked = 0
    for _, lay, sh, _ in _fitting_layouts(fabric, case):
        device = shared_device_model(sh.accelerator, a.compute_dtype,
                                     override=a.compute_efficiency,
                                     hbm_efficiency=a.hbm_efficiency)
        timed, _ = step_calls(fabric, model, lay, a, shape=sh)
        for given in (None, timed):
            calls = dict(given or {})
            if lay.ep > 1 and model.is_moe and "ep" not in calls:
                calls["ep"] = Call("ep", "alltoall", "direct", 1.0, 0.0, 0.0, 0.0, 0.0,
                                   False)
            ops = step_ops(device, model, lay, a, sh.seq, sh.schedule, calls,
                           sh.sizes - sh.moe_sizes, sh.moe_sizes)
            dense, experts = stage_parameters(model, lay, sh.sizes.sum(axis=1),
                                              sh.moe_sizes.sum(axis=1))
            tl = timeline(sh.schedule, ops.duration_s,
                          np.full((lay.pp, 2), per_send_s(calls)),
                          stage_ready_s=gather_ready_s(calls, lay, a, dense, experts, sh,
                                                       ops.duration_s),
                          blocking_sends=lay.pp_blocking)
            pipe = comm_free_pipeline(model, lay, a, sh, given)
            assert np.array_equal(pipe.timeline.start_s, tl.start_s), lay
            assert np.array_equal(pipe.timeline.end_s, tl.end_s), lay
            assert np.array_equal(pipe.busy_s, tl.busy_s), lay
            assert np.array_equal(pipe.compute_s, ops.compute_s.sum(axis=1)), lay
            if given is None or not ({"dp", "edp"} & set(calls)):
                assert np.array_equal(pipe.finish_s, tl.stage_end_s), lay
            checked += 1
    assert checked > 20


@pytest.mark.parametrize("case", list(CASES))
def test_the_busy_bound_is_its_frame_without_the_excess(case):
    """:func:`busy_bound` makes its own frame (no optimizer step, no share): bit for
    bit the bound of the layout's full :func:`bound_frame` with the share set to 0."""
    from topomodel.analysis.training.stepbound import BoundFrame, bound_frame

    fabric = build_fabric(*load_design("two.yaml", text=DESIGN))
    name, _, _, a = CASES[case]
    model = fabric.catalog.get(name, Model)
    checked = 0
    for _, layout, shape, _ in _fitting_layouts(fabric, case):
        busy = busy_pipeline(model, layout, a, shape)
        frame = bound_frame(model, layout, a, shape)
        full = BoundFrame(frame.optimizer_s, frame.wait_per_compute, 0.0, frame.tokens,
                          frame.model_flops, frame.peak_flops).bound(busy)
        assert frame.optimizer_s.max() > 0
        assert busy_bound(model, layout, a, shape, busy) == full, layout
        checked += 1
    assert checked > 20


@pytest.mark.parametrize("case", list(CASES))
def test_a_kept_frame_is_the_layouts_own(case):
    """:func:`bound_frame` keeps a frame by the layout fields it reads
    (:func:`frame_key`): the frame a layout finds, made for another of the same shape
    (sequence parallelism, ZeRO 1 or 2, the TP overlap, the micro-batch's other fields
    changed), is bit for bit the one made for it afresh."""
    from topomodel.analysis.training.stepbound import _bound_frame, bound_frame, forget_frames

    fabric = build_fabric(*load_design("two.yaml", text=DESIGN))
    name, _, _, a = CASES[case]
    model = fabric.catalog.get(name, Model)
    forget_frames()
    checked = shared = 0
    for _, layout, shape, _ in _fitting_layouts(fabric, case):
        variants = [layout]
        for change in ({"sequence_parallel": not layout.sequence_parallel},
                       {"zero": {1: 2, 2: 1}.get(layout.zero, layout.zero)},
                       {"tp_overlap": "none"}, {"pp_blocking": not layout.pp_blocking}):
            try:
                variants.append(replace(layout, **change))
            except UsageError:
                continue
        first = bound_frame(model, variants[0], a, shape)
        for lay in variants:
            kept = bound_frame(model, lay, a, shape)
            fresh = _bound_frame(model, lay, a, shape)
            shared += kept is first and lay != variants[0]
            assert np.array_equal(kept.optimizer_s, fresh.optimizer_s), lay
            assert (kept.wait_per_compute, kept.share, kept.tokens, kept.model_flops,
                    kept.peak_flops) == (fresh.wait_per_compute, fresh.share,
                                         fresh.tokens, fresh.model_flops,
                                         fresh.peak_flops), lay
            checked += 1
    assert checked > 20 and shared > 0


# deep pipelines on few micro-batches: their critical paths cross more sends than a
# stage's own 2 m v, and with ZeRO 1-2 the stage that starts the path may gather more
DEEP = [Layout(pp=16, global_batch=g, seq=4096, zero=z, order=o, schedule=sc,
               pp_blocking=b)
        for g, z, o, sc, b in itertools.product([2, 4], [0, 1], ["tp,cp,dp,pp", "pp,tp,cp,dp"],
                                                ["1f1b", "zb-h1"], [True, False])]


@pytest.mark.parametrize("layout", DEEP, ids=lambda x: f"{x.global_batch}-{x.zero}-"
                         f"{x.order}-{x.schedule}-{x.pp_blocking}")
def test_deep_pipelines_are_bounded_below_their_step_and_near_it(fabric, layout):
    """The step's parts add up to its own timeline's end (sends and gathers of other
    stages that the slowest waits for are bubble, not dropped), so the comm-free bound
    keeps the whole bubble: at most the step and within a tenth of it here (it kept
    ~1/3 of the bubble when the step dropped those sends: 0.6 of the step). The order's
    bound with its collectives' floors and with its own times stays under the step."""
    model = fabric.catalog.get("llama3-8b", Model)
    a = StepAssumptions()
    shape = shape_of(fabric, model, layout)
    step = step_time(fabric, model, layout, a)
    assert step.step_time_s >= step.pipeline_s + step.wait_s
    free = step_bound(model, layout, a, shape,
                      comm_free_pipeline(model, layout, a, shape)).step_time_s
    floors, _ = order_calls(fabric, model, layout, a, shape)
    placed, _ = step_calls(fabric, model, layout, a, shape=shape)
    for calls in (floors, placed):
        assert bound_with_calls(model, layout, a, shape, calls).step_time_s \
            <= step.step_time_s
    assert 0.9 * step.step_time_s < free <= step.step_time_s


@pytest.mark.parametrize("case", ["dense", "moe"])
def test_the_stage_sums_are_every_operations_figures_summed(case):
    """A set's floor (plan/coarse.py) takes the stages' sums without every operation's
    duration (``calls_busy_sums``): the same sums, to the bit, as the figures summed
    per stage, with the collectives at their unplaced floors."""
    fabric = build_fabric(*load_design("two.yaml", text=DESIGN))
    name, base, space, a = CASES[case]
    model = fabric.catalog.get(name, Model)
    job = PlanJob(model, base, space, a)
    memo = OrderMemo()
    checked = 0
    for _, layout, shape, _ in _fitting_layouts(fabric, case):
        if layout.pp == 1 or layout.ep_overlap == "dualpipe":
            continue
        calls = unplaced_floor_calls(fabric, job, layout, shape, memo)
        duration, compute = calls_busy_figures(model, layout, a, shape, calls)
        sums = calls_busy_sums(model, layout, a, shape, calls)
        assert sums.busy_s.tobytes() == duration.sum(axis=1).tobytes()
        assert sums.compute_s.tobytes() == compute.sum(axis=1).tobytes()
        checked += 1
    assert checked > 5
