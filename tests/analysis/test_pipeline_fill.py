"""NCCL's NVLS pipeline fill (analysis/collectives/pipeline.py), by hand and on the
fabric it is timed on."""

import pytest
from conftest import EXAMPLES

from topomodel.analysis.collectives import timing
from topomodel.analysis.collectives.collective import run_collective
from topomodel.analysis.collectives.pipeline import (
    NVLS_STAGES,
    fill_share,
    nvls_chunk_bytes,
    nvls_loop_bytes,
)
from topomodel.fabric.build import build_fabric
from topomodel.inputs.design import load_design

MIB, GIB = 2**20, 2**30


@pytest.fixture(scope="module")
def hgx():
    return build_fabric(*load_design(EXAMPLES / "hgx-h100-server.yaml"))


@pytest.mark.parametrize(("size", "chunk_kib"), [
    # NCCL's calcCollChunking on 16 channels x 8 heads: 128 KiB from 64 loops of it
    (GIB, 128), (GIB - 1, 64), (64 * MIB, 64), (64 * MIB - 1, 32), (8 * MIB, 32),
    (8 * MIB - 1, 16), (1024, 16)])
def test_chunk_follows_nccls_size_rule(size, chunk_kib):
    assert nvls_chunk_bytes(size, 16, 8) == chunk_kib * 1024


def test_loop_by_architecture_and_heads():
    assert nvls_loop_bytes(GIB, ranks=8, architecture="hopper") == 16 * 8 * 128 * 1024
    assert nvls_loop_bytes(8 * GIB, ranks=8, architecture="blackwell") == 24 * 8 * 128 * 1024
    # at most 32 heads (NCCL_MAX_NVLS_ARITY): 72 GPUs of an NVL72 rack, 24 channels;
    # 64 loops of 128 KiB would be 6 GiB, so 4 GiB runs 64 KiB chunks
    assert nvls_loop_bytes(4 * GIB, ranks=72, architecture="blackwell") == 24 * 32 * 65536


def test_fill_is_two_loops_and_only_for_one_node_nvls_allreduce():
    assert fill_share("nvls", "allreduce", GIB, ranks=8, nodes=1,
                      architecture="hopper") == pytest.approx(
        (NVLS_STAGES - 1) * 16 * MIB / GIB)
    # smaller than one loop: the one loop is the whole size, passing every stage
    assert fill_share("nvls", "allreduce", MIB, ranks=8, nodes=1,
                      architecture="hopper") == NVLS_STAGES - 1
    for algorithm, collective, nodes in (("ring", "allreduce", 1), ("tree", "allreduce", 1),
                                         ("nvls", "allgather", 1), ("nvls", "allreduce", 2),
                                         ("nvls_tree", "allreduce", 2)):
        assert fill_share(algorithm, collective, GIB, ranks=8, nodes=nodes,
                          architecture="hopper") == 0.0


def test_fill_is_added_to_the_time_not_to_the_links_busy_time(hgx, monkeypatch):
    with_fill = run_collective(hgx, "allreduce", GIB, algorithm="innetwork").timing
    monkeypatch.setattr(timing, "fill_share", lambda *a, **k: 0.0)
    without = run_collective(hgx, "allreduce", GIB, algorithm="innetwork").timing
    share = with_fill.pipeline_fill
    assert share == pytest.approx(2 * 16 * MIB / GIB) and without.pipeline_fill == 0.0
    bandwidth = without.time_s - without.latency_s
    assert with_fill.time_s == pytest.approx(without.time_s + share * bandwidth, rel=1e-12)
    assert with_fill.time_s - without.time_s == pytest.approx(120e-6, rel=0.01)  # 2 x 60 us
    assert with_fill.latency_s == without.latency_s
    assert with_fill.peak_busy_s == pytest.approx(without.peak_busy_s, rel=1e-12)
    assert with_fill.bandwidth_s + with_fill.topology_s + with_fill.latency_s == (
        pytest.approx(with_fill.time_s, rel=1e-12))


def test_ring_is_unchanged(hgx, monkeypatch):
    ring = run_collective(hgx, "allreduce", GIB, algorithm="ring").time_s
    monkeypatch.setattr(timing, "fill_share", lambda *a, **k: 0.0)
    assert run_collective(hgx, "allreduce", GIB, algorithm="ring").time_s == ring


@pytest.mark.parametrize("size", [2 * MIB, 8 * MIB])
def test_auto_chooses_as_nccls_tuner_does_and_times_with_the_fill(hgx, monkeypatch, size):
    """At 2 and 8 MiB the fill makes NVLS slower than the ring's LL/LL128, but NCCL's
    tuner does not see it and runs NVLS (R20's NCCL_DEBUG on 8 x H200): ``auto`` keeps
    the tuner's choice (the one it makes without the fill) and reports its time with it."""
    chosen = run_collective(hgx, "allreduce", size)
    ring = run_collective(hgx, "allreduce", size, algorithm="ring")
    assert ring.time_s < chosen.time_s  # the fill's fastest would be the ring
    assert chosen.timing.pipeline_fill > 0
    assert chosen.timing.tuner_time_s == pytest.approx(
        chosen.time_s - chosen.timing.pipeline_fill * (chosen.time_s
                                                        - chosen.timing.latency_s)
        / (1 + chosen.timing.pipeline_fill), rel=1e-12)
    monkeypatch.setattr(timing, "fill_share", lambda *a, **k: 0.0)
    tuner = run_collective(hgx, "allreduce", size)
    assert tuner.algorithm == chosen.algorithm == "innetwork"
    assert tuner.timing.protocol == chosen.timing.protocol
    assert tuner.time_s == pytest.approx(chosen.timing.tuner_time_s, rel=1e-12)
