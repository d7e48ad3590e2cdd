"""Torus collectives (the bucket algorithm): closed-form bytes, every link busy, time,
conservation, errors and the ``auto`` pick."""

from pathlib import Path

import numpy as np
import pytest

from topomodel.analysis.collectives.collective import run_collective
from topomodel.analysis.collectives.timing import time_traffic
from topomodel.fabric.build import build_fabric
from topomodel.inputs.design import load_design
from topomodel.routing import route
from topomodel.traffic.collectives import collective_traffic
from topomodel.traffic.communicators import CollectiveError

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
S = 1e9
SENT = {"allreduce": 2.0, "allgather": 1.0, "reducescatter": 1.0}
"""Each rank sends (and receives) SENT x (N-1)/N x S."""


def torus_design(shape, *, systems, system="toy-host", wrap=True):
    return (f"system: {system}\nsystems: {systems}\nscaleup:\n  kind: torus\n"
            + ("  link: toy-link\n" if system == "toy-host" else "")
            + f"  shape: {list(shape)}\n  wraparound: {str(wrap).lower()}\n")


@pytest.fixture(scope="module")
def cubes(tmp_path_factory):
    """Two TPU v4 cubes, each its own 4x4x4 torus domain with wraparound (ICI, 6 links
    per chip)."""
    path = tmp_path_factory.mktemp("cubes") / "cubes.yaml"
    path.write_text("name: two cubes\nsystem: tpu-v4-cube\nsystems: 2\nscaleup:\n"
                    "  kind: torus\n  shape: [4, 4, 4]\n  wraparound: true\n"
                    "scaleout:\n  kind: none\n")
    return build_fabric(*load_design(path))


def domains(fabric):
    return fabric.accelerators.reshape(-1, int(np.prod(fabric.structure.scaleup.torus.shape)))


def per_rank(fabric, traffic):
    n = len(fabric.nodes)
    sent = sum(np.bincount(p.src, weights=p.bytes * p.steps, minlength=n) for p in traffic.phases)
    got = sum(np.bincount(p.dst, weights=p.bytes * p.steps, minlength=n) for p in traffic.phases)
    return sent[fabric.accelerators], got[fabric.accelerators]


@pytest.mark.parametrize("collective", sorted(SENT))
@pytest.mark.parametrize("shape", [(4, 4, 4), (2, 4, 8), (4, 1, 4), (8,)])
def test_each_rank_sends_and_receives_the_ring_bytes(toy, collective, shape):
    fabric = toy(torus_design(shape, systems=int(np.prod(shape))))
    n = fabric.accelerator_count
    t = collective_traffic(fabric, collective, domains(fabric), S, algorithm="torus")
    dims = sum(1 for length in shape if length > 1)
    assert len(t.phases) == dims * (2 if collective == "allreduce" else 1)
    sent, got = per_rank(fabric, t)
    assert sent == pytest.approx(np.full(n, SENT[collective] * (n - 1) / n * S))
    assert got == pytest.approx(sent)
    assert all(p.flows == n * 2 * dims for p in t.phases)  # a flow per rank per part


def test_every_stage_uses_all_six_links_of_every_chip(cubes):
    t = collective_traffic(cubes, "allreduce", domains(cubes), S, algorithm="torus")
    links = cubes.links
    up = (links["tier"] == "scaleup").to_numpy()
    acc_src = np.isin(links["src"].to_numpy(), cubes.accelerators)
    assert set(np.bincount(links["src"][up & acc_src])[cubes.accelerators]) == {6}
    for p in t.phases:
        load = route(cubes, p).link_bytes
        assert (load[up & acc_src] > 0).all(), p.label  # every chip, all six links
        # the stages are balanced: each link direction carries the same bytes
        assert load[up & acc_src] == pytest.approx(np.full((up & acc_src).sum(),
                                                           load[up & acc_src].max()))


def test_time_is_a_sixth_of_a_single_ring(cubes):
    """Bandwidth time on a 4x4x4 torus (N = 64 chips, D = 3, link rate B per direction).

    A ring AllReduce sends 2(N-1)/N S per rank, all on one outgoing link (its next rank):
    2(N-1)/N S / B. The bucket algorithm sends the same bytes per rank but splits them
    evenly over its 2D = 6 outgoing links (each stage puts one part on each dimension
    in each direction, and the stages are balanced on a cube), so each link carries
    2(N-1)/N S / (2D) = S (N-1)/(D N) and the time is the ring's / 2D = 1/6. Both are
    the only traffic on their links, so the routed slowest-link times show exactly that.
    """
    rate = cubes.structure.scaleup.link_rate_Bps
    n = 64
    times = {}
    for alg in ("ring", "torus"):
        timing = time_traffic(cubes, collective_traffic(cubes, "allreduce", domains(cubes),
                                                        S, algorithm=alg))
        times[alg] = sum(p.steps * p.bandwidth_s for p in timing.phases)
    efficiency = times["ring"] / (2 * (n - 1) / n * S / rate)
    assert times["torus"] == pytest.approx(S * (n - 1) / (3 * n) / rate * efficiency)
    assert times["torus"] == pytest.approx(times["ring"] / 6)


@pytest.mark.parametrize("wrap", [True, False])
def test_link_bytes_are_flow_bytes_times_hops(toy, wrap):
    # on a mesh each ring's closing flow runs back along its line: several hops
    fabric = toy(torus_design((4, 2, 4), systems=32, wrap=wrap))
    t = collective_traffic(fabric, "allreduce", domains(fabric), S, algorithm="torus")
    longest = 0
    for p in t.phases:
        routed = route(fabric, p)
        assert not len(routed.unroutable)
        assert routed.link_bytes.sum() == pytest.approx((p.bytes * routed.hops).sum(),
                                                        rel=1e-9)
        n = len(fabric.nodes)
        out = np.bincount(fabric.links["src"], weights=routed.link_bytes, minlength=n)
        into = np.bincount(fabric.links["dst"], weights=routed.link_bytes, minlength=n)
        sent = np.bincount(p.src, weights=p.bytes, minlength=n)
        got = np.bincount(p.dst, weights=p.bytes, minlength=n)
        assert np.allclose(out - into, sent - got, atol=1e-3)
        longest = max(longest, int(routed.hops.max()))
    assert longest == (1 if wrap else 3)


def test_groups_in_any_rank_order_and_concurrent_domains(cubes):
    rows = domains(cubes)
    shuffled = np.stack([np.random.default_rng(i).permutation(r) for i, r in enumerate(rows)])
    a = collective_traffic(cubes, "allreduce", rows, S, algorithm="torus")
    b = collective_traffic(cubes, "allreduce", shuffled, S, algorithm="torus")
    for p, q in zip(a.phases, b.phases, strict=True):
        assert sorted(zip(p.src, p.dst, p.bytes, strict=True)) == sorted(
            zip(q.src, q.dst, q.bytes, strict=True))
        assert (p.group == (p.src >= rows[1].min())).all()  # flows stay in their domain


def test_torus_refuses_groups_that_are_not_whole_torus_domains(cubes):
    hgx, cat = load_design(EXAMPLES / "hgx-h100-server.yaml")
    with pytest.raises(CollectiveError, match="needs a torus scale-up domain; this"
                       " fabric's scale-up is switched"):
        collective_traffic(build_fabric(hgx, cat), "allreduce", [np.arange(8)], S,
                           algorithm="torus")
    acc = cubes.accelerators
    with pytest.raises(CollectiveError, match=r"whole torus domains of 64 accelerators"
                       r" \(4x4x4\); group 'g0' has 32 ranks"):
        collective_traffic(cubes, "allreduce", [acc[:32]], S, algorithm="torus")
    with pytest.raises(CollectiveError, match="group 'g0' spans several domains"):
        collective_traffic(cubes, "allgather", [acc[32:96]], S, algorithm="torus")
    with pytest.raises(CollectiveError, match="alltoall has no algorithm 'torus'"):
        collective_traffic(cubes, "alltoall", [acc[:64]], S, algorithm="torus")


@pytest.mark.parametrize("collective", sorted(SENT))
def test_auto_picks_torus_on_a_torus_and_skips_it_elsewhere(cubes, collective):
    run = run_collective(cubes, collective, 1e9, ["domain"], algorithm="auto")
    assert run.algorithm == "torus"
    assert run.candidates["torus"] < run.candidates.get("ring", np.inf)
    hgx = build_fabric(*load_design(EXAMPLES / "hgx-h100-server.yaml"))
    assert run_collective(hgx, collective, 1e9, ["all"], algorithm="auto").algorithm != "torus"
