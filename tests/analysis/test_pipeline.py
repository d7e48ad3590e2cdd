"""Pipeline schedules and their timeline, held to the closed forms of their papers."""

import numpy as np
import pytest

from topomodel.analysis.training.pipeline import (
    B,
    F,
    W,
    chunk_first_layer,
    chunk_layers,
    dependencies,
    schedule,
    timeline,
)
from topomodel.errors import UsageError


def durations(p, v=1, f=1.0, b=2.0, w=0.0):
    d = np.zeros((3, p, v))
    d[F], d[B], d[W] = f, b, w
    return d


@pytest.mark.parametrize(("p", "m"), [(1, 4), (2, 4), (4, 8), (8, 32), (8, 3), (64, 512)])
def test_1f1b_makespan_is_m_plus_p_minus_1_steps(p, m):
    """With equal stages and free sends, 1F1B takes (m + p - 1)(F + B): a bubble of
    (p - 1)(F + B) (Narayanan et al. 2021, section 2.2.1), also with fewer microbatches
    than stages."""
    t = timeline(schedule("1f1b", p, m), durations(p), np.zeros((p, 2)))
    assert t.makespan_s == pytest.approx((m + p - 1) * 3.0)
    assert np.allclose(t.busy_s, m * 3.0)


@pytest.mark.parametrize(("p", "m", "v"), [(4, 8, 2), (4, 16, 4), (8, 64, 3)])
def test_interleaving_divides_the_bubble_by_the_chunks(p, m, v):
    """v model chunks of 1/v the work each: bubble (p - 1)(F + B) / v (section 2.2.2)."""
    t = timeline(schedule("1f1b", p, m, v), durations(p, v, 1 / v, 2 / v), np.zeros((p, 2)))
    assert t.makespan_s == pytest.approx(m * 3.0 + (p - 1) * 3.0 / v)


@pytest.mark.parametrize(("p", "m"), [(2, 4), (4, 8), (8, 32), (16, 64)])
def test_zb_h1_bubble_is_p_minus_1_times_f_plus_b_minus_w(p, m):
    """Qi et al. 2023: with B split into B and W, ZB-H1's bubble is
    (p - 1)(T_F + T_B - T_W); with equal passes a third of 1F1B's."""
    t = timeline(schedule("zb-h1", p, m), durations(p, 1, 1.0, 1.0, 1.0), np.zeros((p, 2)))
    assert t.makespan_s == pytest.approx(3.0 * m + (p - 1) * 1.0)
    one = timeline(schedule("1f1b", p, m), durations(p, 1, 1.0, 2.0), np.zeros((p, 2)))
    assert one.makespan_s - 3.0 * m == pytest.approx(3 * (t.makespan_s - 3.0 * m))


def _forwards_before_the_first_backward(s, stage):
    kinds = s.kind[stage].tolist()
    return kinds.index(B) if B in kinds else len(kinds)


@pytest.mark.parametrize(("p", "m", "v", "warmup"), [
    (4, 8, 1, [3, 2, 1, 0]),  # p - s - 1
    (8, 3, 1, [3, 3, 3, 3, 3, 2, 1, 0]),  # at most m
    (4, 8, 2, [10, 8, 6, 4]),  # 2 (p - s - 1) + (v - 1) p
    (2, 2, 3, [6, 4]),  # stage 0: 2 + 4 = 6, every forward it has (m v = 6)
])
def test_each_stage_warms_up_with_megatron_s_forwards(p, m, v, warmup):
    """Megatron-LM's schedules.py: a stage runs num_warmup_microbatches forwards (p - s - 1
    in 1F1B; 2 (p - s - 1) + (v - 1) p interleaved; at most every forward it has) before
    its steady phase, which starts with one more forward; so it holds warm-up + 1
    microbatches (chunks) when its first backward runs."""
    s = schedule("1f1b", p, m, v)
    assert [_forwards_before_the_first_backward(s, stage) for stage in range(p)] == [
        min(w + 1, m * v) for w in warmup]


def test_every_operation_runs_once_in_dependency_order():
    for name, v in (("1f1b", 1), ("1f1b", 3), ("zb-h1", 1)):
        s = schedule(name, 4, 12, v)
        kinds = (F, B, W) if name == "zb-h1" else (F, B)
        for stage in range(4):
            seen = {(int(k), int(i), int(c)) for k, i, c in zip(
                s.kind[stage], s.micro[stage], s.chunk[stage], strict=True)}
            assert len(seen) == s.ops == len(kinds) * 12 * v
        t = timeline(s, durations(4, v, 1, 2, 1), np.full((4, 2), 0.25))
        dep_stage, dep_pos, _ = dependencies(s)
        has = dep_pos >= 0
        rows = np.broadcast_to(np.arange(4)[:, None], dep_pos.shape)
        assert (t.start_s[has] >= t.end_s[dep_stage[has], dep_pos[has]] - 1e-12).all()
        assert (np.diff(t.start_s, axis=1) > 0).all()  # each stage runs one op at a time
        assert rows.shape == t.start_s.shape


def test_sends_and_the_slowest_stage_set_the_pace():
    p, m = 4, 16
    even = timeline(schedule("1f1b", p, m), durations(p), np.zeros((p, 2)))
    send = 0.1
    slow_links = timeline(schedule("1f1b", p, m), durations(p), np.full((p, 2), send))
    # steady state: a stage waits for its neighbour's F and B, each a send away
    assert slow_links.makespan_s > even.makespan_s + 2 * (p - 1) * send - 1e-9
    assert slow_links.critical_send_s >= 2 * (p - 1) * send - 1e-9
    d = durations(p)
    d[:, p - 1] *= 1.5  # the last stage also computes the logits
    lopsided = timeline(schedule("1f1b", p, m), d, np.zeros((p, 2)))
    assert lopsided.makespan_s >= m * 4.5 + (p - 1) * 3.0 - 1e-9
    assert lopsided.busy_s.argmax() == p - 1


def test_stage_ready_times_delay_a_stage_and_extras_lengthen_one_op():
    p, m = 2, 4
    base = timeline(schedule("1f1b", p, m), durations(p), np.zeros((p, 2)))
    late = timeline(schedule("1f1b", p, m), durations(p), np.zeros((p, 2)),
                    stage_ready_s=np.array([0.5, 0.0]))
    assert late.makespan_s == pytest.approx(base.makespan_s + 0.5)
    extra = np.zeros((p, 2 * m))
    extra[0, 0] = 0.5
    longer = timeline(schedule("1f1b", p, m), durations(p), np.zeros((p, 2)),
                      per_op_extra_s=extra)
    assert longer.makespan_s == pytest.approx(base.makespan_s + 0.5)


def test_schedules_that_cannot_run():
    with pytest.raises(UsageError, match="multiple of pp"):
        schedule("1f1b", 4, 6, 2)
    with pytest.raises(UsageError, match="no virtual stages"):
        schedule("zb-h1", 4, 8, 2)
    with pytest.raises(UsageError, match="unknown pipeline schedule"):
        schedule("gpipe", 4, 8)
    with pytest.raises(UsageError, match="cannot fill"):
        chunk_layers(6, 4, 2)


def test_layers_split_into_chunks_in_virtual_order():
    sizes = chunk_layers(61, 16)  # DeepSeek-V3: 61 layers over 16 stages
    assert sizes.sum() == 61 and sizes.max() == 4 and sizes.min() == 3
    assert chunk_first_layer(8, 2, 2).tolist() == [[0, 4], [2, 6]]  # chunk c of stage s


def test_blocking_sends_hold_the_sender_too():
    """Megatron-LM's batched send/receive waits for both directions: each send then
    delays the sender's next operation as well as the receiver."""
    p, m, send = 4, 16, 0.1
    free = timeline(schedule("1f1b", p, m), durations(p), np.full((p, 2), send))
    held = timeline(schedule("1f1b", p, m), durations(p), np.full((p, 2), send),
                    blocking_sends=True)
    assert held.makespan_s > free.makespan_s
    # a stage with one neighbour sends one way per operation; the critical path pays
    # for every send it crosses, on either side
    assert held.critical_send_s >= free.critical_send_s
    assert held.makespan_s == pytest.approx(free.makespan_s + held.critical_send_s
                                            - free.critical_send_s, rel=1e-9)
    # with no sends, blocking changes nothing
    none = timeline(schedule("1f1b", p, m), durations(p), np.zeros((p, 2)),
                    blocking_sends=True)
    assert none.makespan_s == pytest.approx((m + p - 1) * 3.0)


def test_a_timeline_kept_is_the_one_run_afresh():
    """A timeline asked again with the same schedule and times is the kept one (its
    arrays read-only), equal field for field to one run afresh; other times, sends,
    ready times or blocking make a new one."""
    import dataclasses

    from topomodel.analysis.training import pipeline

    rng = np.random.default_rng(7)
    s = pipeline.schedule("1f1b", 4, 8, 2)
    dur = rng.random((3, 4, 2)) + 0.5
    send = np.full((4, 2), 0.01)
    ready = np.array([0.0, 0.1, 0.0, 0.2])
    first = pipeline.timeline(s, dur, send, stage_ready_s=ready, blocking_sends=True)
    again = pipeline.timeline(s, dur.copy(), send.copy(), stage_ready_s=ready.copy(),
                              blocking_sends=True)
    assert again is first
    with pytest.raises(ValueError, match="read-only"):
        first.end_s[0, 0] = 1.0
    pipeline._TIMELINES.clear()
    fresh = pipeline.timeline(s, dur, send, stage_ready_s=ready, blocking_sends=True)
    assert fresh is not first
    for field in dataclasses.fields(fresh):
        a, b = getattr(fresh, field.name), getattr(first, field.name)
        assert (a is b) if field.name == "schedule" else np.array_equal(a, b), field.name
    others = [pipeline.timeline(s, dur * 2, send, stage_ready_s=ready, blocking_sends=True),
              pipeline.timeline(s, dur, send * 0, stage_ready_s=ready, blocking_sends=True),
              pipeline.timeline(s, dur, send, blocking_sends=True),
              pipeline.timeline(s, dur, send, stage_ready_s=ready)]
    assert all(other is not fresh for other in others)
    assert others[3].makespan_s <= fresh.makespan_s
