"""A fabric copy with failed links times its traffic with the failed rows' rates read as
0 on reading (:class:`~topomodel.analysis.collectives.linkrates.FailedLinkRates`), bit
for bit as with an array of every row's rate, 0 where failed (the code before it)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from topomodel.analysis.collectives import timing
from topomodel.analysis.collectives.linkrates import FailedLinkRates
from topomodel.analysis.collectives.timing import TimeModel, link_rates_of, time_traffic
from topomodel.fabric.build import build_fabric
from topomodel.fabric.failures import with_failures
from topomodel.inputs.design import load_design
from topomodel.traffic.collectives import collective_traffic
from topomodel.traffic.groups import parse_groups
from topomodel.traffic.phases import concurrent

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_rows_and_slices_read_as_the_zeroed_array():
    rng = np.random.default_rng(5)
    rates = rng.random(1_000) * 1e11
    failed = rng.random(1_000) < 0.1
    whole = np.where(failed, 0.0, rates)
    lazy = FailedLinkRates(rates, failed)
    rows = rng.integers(0, 1_000, 3_000)
    assert np.array_equal(lazy[rows], whole[rows])
    for part in (slice(0, 1_000), slice(17, 340), slice(999, 1_000), slice(5, 5)):
        assert np.array_equal(lazy[part], whole[part])
    got = lazy[rows]
    got *= 0.5  # a reader scales its rows in place: the rates are not touched
    assert np.array_equal(lazy[rows], whole[rows]) and np.array_equal(np.asarray(lazy), whole)
    assert len(lazy) == 1_000
    with pytest.raises(ValueError):
        FailedLinkRates(rates, failed[1:])


def failed_copy(fabric, tier, count):
    names = fabric.nodes["name"].to_numpy()
    links = fabric.links
    rows = np.flatnonzero(links["tier"].astype(str).to_numpy() == tier)[::7][:count]
    return with_failures(fabric, link_names=[
        f"{names[links['src'].iat[r]]} -- {names[links['dst'].iat[r]]}" for r in rows])


@pytest.mark.parametrize(("design", "tier", "specs", "routing"), [
    ("dgx-h100-superpod", "spine", ["block:127", "system"], "ecmp"),
    ("dgx-h100-superpod", "leaf", ["block:127"], "hash"),
    ("cloudmatrix384", "scaleup", ["all"], "ecmp"),
])
def test_failed_copies_time_as_with_the_zeroed_array_bit_for_bit(
        design, tier, specs, routing, monkeypatch):
    fabric = build_fabric(*load_design(EXAMPLES / f"{design}.yaml"))
    model = TimeModel()

    def run():
        copy = failed_copy(fabric, tier, 6)  # a copy of its own: its rates made anew
        assert copy.link_arrays["failed"].any()
        parts = [collective_traffic(copy, c, parse_groups(copy, s), 3e7, algorithm=a)
                 for c, a in (("allreduce", "ring"), ("alltoall", "direct")) for s in specs]
        return copy, time_traffic(copy, concurrent(parts), time_model=model,
                                  routing=routing)

    copy, lazy = run()
    assert isinstance(link_rates_of(copy, model).link_Bps, FailedLinkRates)
    monkeypatch.setattr(timing, "FailedLinkRates",
                        lambda rates, failed: np.where(failed, 0.0, rates))
    copy, dense = run()
    assert isinstance(link_rates_of(copy, model).link_Bps, np.ndarray)
    assert np.array_equal(lazy.link_bytes, dense.link_bytes)
    assert (lazy.time_s, lazy.protocol, lazy.unroutable_flows, lazy.unroutable_bytes) == (
        dense.time_s, dense.protocol, dense.unroutable_flows, dense.unroutable_bytes)
    for a, b in zip(lazy.phases, dense.phases, strict=True):
        assert (a.bandwidth_s, a.ideal_s, a.latency_s, a.bottleneck) == (
            b.bandwidth_s, b.ideal_s, b.latency_s, b.bottleneck)
        assert np.array_equal(a.loaded_time_s(), b.loaded_time_s())
        assert np.array_equal(a.loaded_time_s(3, 40), b.loaded_time_s(3, 40))
