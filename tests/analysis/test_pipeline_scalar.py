"""The timeline run one operation at a time in floats (small pipelines) against the
same timeline run a round of stages at a time in arrays: equal bit for bit."""

from __future__ import annotations

import numpy as np
import pytest

from topomodel.analysis.training import pipeline
from topomodel.analysis.training.pipeline import schedule, timeline


@pytest.mark.parametrize(("name", "p", "m", "v"), [("1f1b", 4, 8, 1), ("1f1b", 4, 8, 3),
                                                   ("zb-h1", 8, 16, 1), ("1f1b", 2, 2, 1),
                                                   ("1f1b", 16, 32, 2), ("zb-h1", 3, 5, 1)])
@pytest.mark.parametrize("blocking", [False, True])
@pytest.mark.parametrize("comm_free", [False, True])
def test_scalar_and_array_runs_agree_bit_for_bit(monkeypatch, name, p, m, v, blocking,
                                                 comm_free):
    """Also with no send taking time (a comm-free timeline, as the planner's bounds run)."""
    s = schedule(name, p, m, v)
    rng = np.random.default_rng(p * 100 + m + v)
    duration = rng.uniform(0.5, 2.0, (p, s.ops))
    send = np.zeros((p, 2)) if comm_free else rng.uniform(0.0, 0.3, (p, 2))
    ready = rng.uniform(0.0, 1.0, p)
    held = ready.copy()
    extra = rng.uniform(0.0, 0.1, (p, s.ops))
    fast = timeline(s, duration, send, stage_ready_s=ready, per_op_extra_s=extra,
                    blocking_sends=blocking)
    monkeypatch.setattr(pipeline, "SCALAR_STAGES", 0)  # every run in arrays
    slow = timeline(s, duration, send, stage_ready_s=ready, per_op_extra_s=extra,
                    blocking_sends=blocking)
    for field in ("start_s", "end_s", "busy_s", "stage_end_s", "critical_stages"):
        assert np.array_equal(getattr(fast, field), getattr(slow, field)), field
    assert fast.makespan_s == slow.makespan_s
    assert fast.critical_send_s == slow.critical_send_s
    assert np.array_equal(ready, held)  # the caller's ready times are not written


def test_a_nan_time_runs_in_arrays():
    s = schedule("1f1b", 2, 2)
    duration = np.ones((2, s.ops))
    duration[0, 1] = np.nan
    tl = timeline(s, duration, np.zeros((2, 2)))
    assert np.isnan(tl.makespan_s)


def _walk_back(tl, send, outgoing, dep_stage, dep_pos):
    """The critical path walked back on the arrays, one operation at a time (the
    reference the timeline's walk on flat lists must give bit for bit)."""
    stage, j = int(np.argmax(tl.end_s[:, -1])), tl.schedule.ops - 1
    waited = np.zeros_like(tl.end_s, dtype=bool)
    has = dep_stage >= 0
    arrive = np.full(tl.end_s.shape, -np.inf)
    arrive[has] = tl.end_s[dep_stage[has], dep_pos[has]] + send[has]
    waited[has] = arrive[has] == tl.start_s[has]
    total, visited = 0.0, [stage]
    while j >= 0:
        if waited[stage, j] and (j == 0 or arrive[stage, j] > tl.end_s[stage, j - 1]
                                 + outgoing[stage, j - 1]):
            total += float(send[stage, j])
            stage, j = int(dep_stage[stage, j]), int(dep_pos[stage, j])
            if stage != visited[-1]:
                visited.append(stage)
        else:
            j -= 1
            if j >= 0:
                total += float(outgoing[stage, j])
    return total, visited[::-1]


@pytest.mark.parametrize(("name", "p", "m", "v"), [("1f1b", 4, 8, 3), ("zb-h1", 3, 5, 1)])
def test_the_critical_send_is_the_walk_on_the_arrays(name, p, m, v):
    """Unblocked sends, every stage ready at 0: an operation waited for its input
    exactly where its start is its input's arrival and later than its stage's previous
    end (no ties: random times)."""
    from topomodel.analysis.training.pipeline import dependencies

    s = schedule(name, p, m, v)
    rng = np.random.default_rng(7)
    duration = rng.uniform(0.5, 2.0, (p, s.ops))
    send_s = rng.uniform(0.0, 0.3, (p, 2))
    tl = timeline(s, duration, send_s)
    dep_stage, dep_pos, boundary = dependencies(s)
    send = np.zeros((p, s.ops))
    crossing = boundary >= 0
    send[crossing] = send_s[boundary[crossing], np.where(s.kind == 0, 0, 1)[crossing]]
    total, visited = _walk_back(tl, send, np.zeros((p, s.ops)), dep_stage, dep_pos)
    assert tl.critical_send_s == total > 0
    assert tl.critical_stages.tolist() == visited
