"""The synchronisation wait grows with the ranks, from sourced defaults, and says so."""

from itertools import pairwise

import numpy as np
import pytest

from topomodel.analysis.assumptions import JITTER_CV
from topomodel.analysis.training.step import StepAssumptions, step_time
from topomodel.analysis.training.syncwait import expected_max_normal, sync_wait
from topomodel.inputs.parts import Model
from topomodel.inputs.records import REASONS
from topomodel.traffic.layout import Layout


@pytest.mark.parametrize("n", [2, 8, 64, 1000])
def test_expected_max_matches_sampling(n):
    draws = np.random.default_rng(n).standard_normal((4000, n)).max(axis=1)
    assert expected_max_normal(n) == pytest.approx(draws.mean(), rel=0.06)


def test_wait_grows_with_ranks_from_the_sourced_default():
    a = StepAssumptions()
    assert a.jitter_cv == JITTER_CV == 0.015
    assert "Sinha" in REASONS["step.JITTER_CV"]
    shares = [sync_wait(a, n).share for n in (1, 8, 1024, 16384, 131072)]
    assert shares[0] == 0 and all(b > s for s, b in pairwise(shares))
    assert shares[3] == pytest.approx(0.015 * expected_max_normal(16384))


def test_stragglers_wait_whenever_one_rank_is_slow():
    a = StepAssumptions(jitter_cv=0.0, straggler_share=0.001, straggler_slowdown=0.5)
    wait = sync_wait(a, 1000)
    assert wait.share == pytest.approx(0.5 * (1 - 0.999 ** 1000))
    assert "stragglers 0.10 % of accelerators 50 % slower" in wait.text
    assert sync_wait(StepAssumptions(), 8).text.endswith("no stragglers")


def test_step_wait_and_sync_wall_follow_the_ranks(toy):
    fabric = toy("system: toy-host\nsystems: 32\nscaleout:\n  switch: toy-switch-8\n")
    model = fabric.catalog.get("toy-dense", Model)
    results = [step_time(fabric, model, Layout(dp=n, micro_batch=1, global_batch=n))
               for n in (2, 32)]
    for n, r in zip((2, 32), results, strict=True):
        assert r.wait_s == pytest.approx(r.compute_s * 0.015 * expected_max_normal(n))
        assert r.walls["sync_s"] == r.wait_s
    assert results[1].wait_s / results[1].compute_s > results[0].wait_s / results[0].compute_s
