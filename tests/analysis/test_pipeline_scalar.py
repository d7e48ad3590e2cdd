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
def test_scalar_and_array_runs_agree_bit_for_bit(monkeypatch, name, p, m, v, blocking):
    s = schedule(name, p, m, v)
    rng = np.random.default_rng(p * 100 + m + v)
    duration = rng.uniform(0.5, 2.0, (p, s.ops))
    send = rng.uniform(0.0, 0.3, (p, 2))
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
