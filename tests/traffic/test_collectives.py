"""Collectives: bytes per rank against closed forms, structure, concurrency and errors."""

import math
import textwrap
from pathlib import Path

import numpy as np
import pytest
from conftest import with_sharp

from topomodel.analysis.collectives.collective import run_collective
from topomodel.analysis.collectives.timing import TimeModel, floor_s
from topomodel.fabric.build import build_fabric
from topomodel.fabric.columns import Columns
from topomodel.inputs.design import load_design
from topomodel.traffic.algorithms.alltoall import direct_rounds
from topomodel.traffic.algorithms.innetwork import in_network_capable
from topomodel.traffic.collectives import (
    ALGORITHMS,
    busbw_factor,
    collective_shapes,
    collective_traffic,
    double_binary_tree,
    tree_depth,
)
from topomodel.traffic.communicators import COLLECTIVES, group_blocks
from topomodel.traffic.groups import parse_groups
from topomodel.traffic.phases import Phase

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
S = 1e6


def up_down(t):
    """The reduction (up) and multicast (down) halves of an in-network phase."""
    (p,) = t.phases
    half = p.flows // 2
    assert (p.src[:half] == p.dst[half:]).all() and (p.dst[:half] == p.src[half:]).all()
    return (Phase(p.src[:half], p.dst[:half], p.bytes[:half], p.group[:half], p.steps),
            Phase(p.src[half:], p.dst[half:], p.bytes[half:], p.group[half:], p.steps))


def example(name):
    design, catalog = load_design(EXAMPLES / name)
    return build_fabric(design, catalog)


@pytest.fixture(scope="module")
def hgx():
    return example("hgx-h100-server.yaml")


@pytest.fixture(scope="module")
def superpod():
    return example("dgx-h100-superpod.yaml")


@pytest.fixture(scope="module")
def sharp_superpod():
    """The SuperPOD with SHARP enabled in its design."""
    return with_sharp(example("dgx-h100-superpod.yaml"))


SHARP_CATALOG = """
scaleup_switches:
  sharp-chip:
    ports: 16
    port_rate: "10 GB/s /dir"
    in_network_reduction: true
    source: test fixture
    provenance: assumed
systems:
  sharp-box:
    accelerator: toy-acc
    accelerators: 4
    scaleup: {kind: switched, switch: sharp-chip, switches: 2, links_per_switch: [3, 1]}
    nic: toy-nic
    nic_count: 4
    source: test fixture
    provenance: assumed
switches:
""" + "".join(textwrap.indent(textwrap.dedent(f"""
    sharp-{k}:
      protocol: ethernet
      ports: {k}
      port_rate: "100 Gb/s /dir"
      breakouts: [{{ports: {2 * k}, port_rate: "50 Gb/s /dir"}}]
      in_network_reduction: true
      source: test fixture
      provenance: assumed
"""), "  ") for k in (4, 8))


@pytest.fixture
def sharp(toy):
    """Build a design against the toy catalog plus switches that reduce in the network."""
    extra = toy.tmp_path / "sharp.yaml"
    extra.write_text(SHARP_CATALOG)

    def build(text):
        path = toy.tmp_path / "sharp-design.yaml"
        path.write_text(textwrap.dedent(text))
        design, catalog = load_design(path, extra_catalogs=[toy.catalog_path, extra])
        return with_sharp(build_fabric(design, catalog))

    return build


# --- oracles ---------------------------------------------------------------------------


def sent(traffic, nodes):
    """Bytes each node sends over the whole collective."""
    return sum(np.bincount(p.src, weights=p.bytes * p.steps, minlength=nodes)
               for p in traffic.phases)


def received(traffic, nodes):
    """Bytes each node receives over the whole collective."""
    return sum(np.bincount(p.dst, weights=p.bytes * p.steps, minlength=nodes)
               for p in traffic.phases)


def check_inside_groups(traffic, groups, nodes):
    """Every flow runs between two members of the group it is tagged with."""
    member = np.concatenate([g * nodes + np.asarray(r) for g, r in enumerate(groups)])
    for p in traffic.phases:
        assert p.flows > 0
        assert np.isin(p.group.astype(np.int64) * nodes + p.src, member).all(), p.label
        assert np.isin(p.group.astype(np.int64) * nodes + p.dst, member).all(), p.label
        assert (p.src != p.dst).all()
        # ends int64, or int32 where a listed All-to-All's node numbers fit
        # (traffic.phases.listed_node_dtype); groups int32
        assert p.src.dtype in (np.int32, np.int64) and p.dst.dtype == p.src.dtype
        assert p.group.dtype == np.int32


def per_rank_sent(collective, algorithm, n, parts=None, nics=8):
    """Closed form: bytes every rank sends, as an array over rank positions.

    A ring over ``parts`` whole DGX-like systems runs one channel per NIC: every rank
    sends S/n per step round its system and, as a channel head, S/(nics n) to the next
    system (the relay of the channel's last chunk to its head is the 1/nics extra)."""
    everyone = np.ones(n)
    if collective == "allreduce" and algorithm == "hierarchical":
        m = n // parts
        return everyone * (2 * (m - 1) / m * S + 2 * (parts - 1) / parts * S / m)
    relay = 1 + 1 / nics if algorithm == "ring" and (parts or 1) > 1 else 1
    if collective == "allreduce":
        return everyone * 2 * (n - 1) / n * S * relay
    if collective in ("allgather", "reducescatter", "alltoall"):
        return everyone * (n - 1) / n * S * (relay if collective != "alltoall" else 1)
    chain = np.r_[np.ones(n - 1), 0.0] * S  # ranks 0 .. n-2 send S
    return chain[::-1] if collective == "reduce" else chain


# --- busbw -----------------------------------------------------------------------------


@pytest.mark.parametrize(("collective", "n", "factor"), [
    ("allreduce", 8, 1.75), ("allreduce", 2, 1.0), ("allreduce", 1, 0.0),
    ("allgather", 8, 0.875), ("reducescatter", 4, 0.75), ("alltoall", 64, 63 / 64),
    ("broadcast", 8, 1.0), ("reduce", 8, 1.0), ("sendrecv", 2, 1.0),
])
def test_busbw_factors_are_nccl_tests(collective, n, factor):
    assert busbw_factor(collective, n) == pytest.approx(factor)


def test_busbw_refuses_unknown_collective_and_empty_group():
    with pytest.raises(ValueError, match="unknown collective 'allscatter'"):
        busbw_factor("allscatter", 4)
    with pytest.raises(ValueError, match="at least one rank"):
        busbw_factor("allreduce", 0)


def test_every_collective_has_algorithms():
    assert set(ALGORITHMS) == set(COLLECTIVES)
    assert all(ALGORITHMS[c] for c in COLLECTIVES)


# --- closed forms per rank -------------------------------------------------------------

CASES = [(c, a) for c in COLLECTIVES for a in ALGORITHMS[c]
         if a not in ("innetwork", "nvlstree", "tree", "torus")]  # torus: test_torus.py


@pytest.mark.parametrize(("collective", "algorithm"), CASES)
@pytest.mark.parametrize("n", [2, 4, 8, 16])
def test_bytes_per_rank_closed_form(superpod, collective, algorithm, n):
    group = superpod.accelerators[:n]  # whole systems of 8: 1 or 2 domain parts
    t = collective_traffic(superpod, collective, [group], S, algorithm=algorithm)
    nodes = len(superpod.nodes)
    parts = max(1, n // 8)
    expected = per_rank_sent(collective, algorithm, n, parts)
    if collective == "sendrecv":
        expected = np.r_[np.full(n - 1, S), 0.0]
    np.testing.assert_allclose(sent(t, nodes)[group], expected)
    assert sent(t, nodes).sum() == pytest.approx(t.total_bytes)
    check_inside_groups(t, [group], nodes)
    assert t.algorithm == algorithm and t.group_names == ("g0",)


@pytest.mark.parametrize(("collective", "algorithm"),
                         [c for c in CASES if c[1] not in ("rhd", "hierarchical")])
@pytest.mark.parametrize("n", [3, 6, 7])
def test_bytes_per_rank_any_group_size(hgx, collective, algorithm, n):
    group = hgx.accelerators[::-1][:n]  # not in node order
    t = collective_traffic(hgx, collective, [group], S, algorithm=algorithm)
    expected = (np.r_[np.full(n - 1, S), 0.0] if collective == "sendrecv"
                else per_rank_sent(collective, algorithm, n))
    np.testing.assert_allclose(sent(t, len(hgx.nodes))[group], expected)


def test_received_mirrors_sent_for_symmetric_collectives(superpod):
    group = superpod.accelerators[:16]
    for collective, algorithm in CASES:
        if collective in ("broadcast", "reduce", "sendrecv"):
            continue
        t = collective_traffic(superpod, collective, [group], S, algorithm=algorithm)
        nodes = len(superpod.nodes)
        np.testing.assert_allclose(received(t, nodes)[group], sent(t, nodes)[group])


def test_chain_broadcast_and_reduce_root_is_rank_zero(hgx):
    group = hgx.accelerators[[3, 1, 4, 6]]
    nodes = len(hgx.nodes)
    down = collective_traffic(hgx, "broadcast", [group], S, algorithm="ring")
    up = collective_traffic(hgx, "reduce", [group], S, algorithm="ring")
    np.testing.assert_allclose(received(down, nodes)[group], [0, S, S, S])
    np.testing.assert_allclose(sent(up, nodes)[group], [0, S, S, S])
    (chain,) = down.phases
    assert chain.src.tolist() == group[:-1].tolist() and chain.dst.tolist() == group[1:].tolist()
    assert chain.steps == 1 and chain.messages_per_step == 3  # n-1 hops of latency


def test_sendrecv_pair_is_one_flow(hgx):
    pair = hgx.accelerators[[2, 5]]
    (p,) = collective_traffic(hgx, "sendrecv", [pair], S, algorithm="p2p").phases
    assert (p.flows, p.src[0], p.dst[0], p.bytes[0]) == (1, pair[0], pair[1], S)


# --- structure of each algorithm -------------------------------------------------------


def test_ring_is_one_phase_of_neighbours(hgx):
    group = hgx.accelerators
    n = len(group)
    (ar,) = collective_traffic(hgx, "allreduce", [group], S, algorithm="ring").phases
    assert ar.steps == 2 * (n - 1) and np.allclose(ar.bytes, S / n)
    assert ar.dst.tolist() == np.roll(group, -1).tolist()
    for collective in ("allgather", "reducescatter"):
        (p,) = collective_traffic(hgx, collective, [group], S, algorithm="ring").phases
        assert p.steps == n - 1 and np.allclose(p.bytes, S / n)


def test_rhd_halves_then_doubles(hgx):
    group = hgx.accelerators
    t = collective_traffic(hgx, "allreduce", [group], S, algorithm="rhd")
    distances = [1, 2, 4, 4, 2, 1]
    assert len(t.phases) == 6
    for p, d in zip(t.phases, distances, strict=True):
        rank = {int(node): i for i, node in enumerate(group)}
        assert all(rank[int(s)] ^ rank[int(r)] == d for s, r in zip(p.src, p.dst, strict=True))
        assert np.allclose(p.bytes, S / (2 * d)) and p.steps == 1
    ag = collective_traffic(hgx, "allgather", [group], S, algorithm="rhd")
    rs = collective_traffic(hgx, "reducescatter", [group], S, algorithm="rhd")
    assert [p.label for p in ag.phases] == [p.label for p in t.phases[3:]]
    assert [p.label for p in rs.phases] == [p.label for p in t.phases[:3]]


def test_rhd_needs_power_of_two(hgx):
    with pytest.raises(ValueError, match="recursive halving-doubling needs a power-of-two"
                                         " group size"):
        collective_traffic(hgx, "allreduce", [hgx.accelerators[:6]], S, algorithm="rhd")


def test_direct_alltoall_is_every_ordered_pair_once(hgx):
    group = hgx.accelerators[:5]
    (p,) = collective_traffic(hgx, "alltoall", [group], S, algorithm="direct").phases
    pairs = set(zip(p.src.tolist(), p.dst.tolist(), strict=True))
    assert len(pairs) == p.flows == 20
    assert pairs == {(a, b) for a in group.tolist() for b in group.tolist() if a != b}
    assert np.allclose(p.bytes, S / 5) and p.messages_per_step == 4


def test_pairwise_alltoall_shifts(hgx):
    group = hgx.accelerators[:5]
    t = collective_traffic(hgx, "alltoall", [group], S, algorithm="pairwise")
    assert len(t.phases) == 4
    for k, p in enumerate(t.phases, start=1):
        assert p.dst.tolist() == np.roll(group, -k).tolist()


# --- trees -----------------------------------------------------------------------------


def children(parents):
    out = {}
    for child, parent in enumerate(parents.tolist()):
        if parent >= 0:
            out.setdefault(parent, []).append(child)
    return {k: sorted(v) for k, v in out.items()}


def test_double_binary_tree_matches_nccl_pictures():
    # the drawings in NCCL's src/graph/trees.cc
    t1, t2 = double_binary_tree(12)
    assert children(t1) == {0: [8], 8: [4, 10], 4: [2, 6], 10: [9, 11], 2: [1, 3], 6: [5, 7]}
    assert children(t2) == {11: [3], 3: [1, 7], 1: [0, 2], 7: [5, 9], 5: [4, 6], 9: [8, 10]}
    t1, t2 = double_binary_tree(13)
    assert children(t2) == {1: [9], 9: [0, 5], 5: [3, 7], 0: [11], 3: [2, 4], 7: [6, 8],
                            11: [10, 12]}
    assert children(double_binary_tree(14)[0])[12] == [10, 13]


@pytest.mark.parametrize("n", range(1, 70))
def test_double_binary_tree_is_two_spanning_binary_trees(n):
    trees = double_binary_tree(n)
    leaves = []
    for parents in trees:
        assert (parents < 0).sum() == 1  # one root, so n-1 edges
        kids = np.bincount(parents[parents >= 0], minlength=n)
        assert kids.max(initial=0) <= 2
        assert tree_depth(parents) <= math.ceil(math.log2(n)) + 1  # reaches the root
        leaves.append(kids == 0)
    if n >= 3:
        assert not (leaves[0] & leaves[1]).any()  # a leaf in one tree is interior in the other


@pytest.mark.parametrize("n", [2, 3, 8, 13])
def test_tree_over_one_rank_per_node_sends_half_per_tree(superpod, n):
    group = superpod.accelerators[5::8][:n]  # rank 5 of n systems: the tree is over nodes
    nodes = len(superpod.nodes)
    t = collective_traffic(superpod, "allreduce", [group], S, algorithm="tree")
    (p,) = t.phases
    assert p.label == "tree reduce + broadcast" and p.steps == 1
    trees = double_binary_tree(n)
    non_root = sum((parents >= 0).astype(float) for parents in trees)
    kids = sum(np.bincount(parents[parents >= 0], minlength=n) for parents in trees)
    assert p.flows == 4 * (n - 1)  # two trees, each edge both ways
    # each rank sends S/2 up each tree it is not the root of and S/2 down to each child
    np.testing.assert_allclose(np.bincount(p.src, weights=p.bytes, minlength=nodes)[group],
                               S / 2 * (non_root + kids))
    depth = max(tree_depth(parents) for parents in trees)
    assert p.messages_per_step == 2 * depth  # up and back down
    check_inside_groups(t, [group], nodes)


def test_tree_inside_one_node_is_a_chain(hgx):
    group = hgx.accelerators[[3, 1, 4, 6, 0]]
    (p,) = collective_traffic(hgx, "allreduce", [group], S, algorithm="tree").phases
    pairs = set(zip(p.src.tolist(), p.dst.tolist(), strict=True))
    chain = list(zip(group[:-1].tolist(), group[1:].tolist(), strict=True))
    assert pairs == set(chain) | {(b, a) for a, b in chain}  # down and up, rank order
    assert np.allclose(p.bytes, S) and p.messages_per_step == 2 * 4  # both trees: S/2 each


@pytest.mark.parametrize("systems", [2, 3, 4])
def test_tree_over_dgx_nodes_is_chains_and_a_tree_per_rail(superpod, systems):
    """NCCL's tree on whole nodes: 8 channels (one per NIC), each a chain inside every
    node from its head (the GPU on the channel's rail) and a double binary tree over the
    nodes among the channel's heads, S/2 per tree, so S/16 per tree per channel."""
    acc = superpod.accelerators
    group = acc[:8 * systems]
    nodes = superpod.nodes
    t = collective_traffic(superpod, "allreduce", [group], S, algorithm="tree")
    (p,) = t.phases
    system, rail = nodes["system"].to_numpy(), nodes["local"].to_numpy()
    across = system[p.src] != system[p.dst]
    assert (rail[p.src[across]] == rail[p.dst[across]]).all()  # same rail both ends
    np.testing.assert_allclose(p.bytes[across], S / 16)
    trees = double_binary_tree(systems)
    non_root = sum((parents >= 0).astype(float) for parents in trees)
    kids = sum(np.bincount(parents[parents >= 0], minlength=systems) for parents in trees)
    net = np.bincount(p.src[across], weights=p.bytes[across], minlength=len(nodes))
    for node in range(systems):  # every GPU (every NIC) of a node sends the same
        np.testing.assert_allclose(net[acc[8 * node:8 * node + 8]],
                                   S / 16 * (non_root[node] + kids[node]))
    inside = np.bincount(p.src[~across], weights=p.bytes[~across], minlength=len(nodes))
    # a GPU sends down and up its node's chain in the 7 channels whose head is not
    # the next GPU round the node (the chain of channel c ends before its head)
    np.testing.assert_allclose(inside[group], 2 * 7 / 8 * S)
    assert p.messages_per_step == 2 * (7 + max(tree_depth(t_) for t_ in trees))
    check_inside_groups(t, [group], len(nodes))


# --- channels --------------------------------------------------------------------------


@pytest.mark.parametrize("collective", ["allreduce", "allgather", "reducescatter"])
@pytest.mark.parametrize("systems", [2, 3, 5])
def test_ring_over_dgx_nodes_runs_a_channel_per_rail(superpod, collective, systems):
    """A ring over whole DGX H100 nodes: 8 channels of S/8, channel c entering and
    leaving every node through its rail-c NIC, so every NIC carries S/(8n) per step and
    every hop between nodes is rail c to rail c."""
    acc = superpod.accelerators
    n = 8 * systems
    group = acc[:n]
    nodes = superpod.nodes
    (p,) = collective_traffic(superpod, collective, [group], S, algorithm="ring").phases
    assert p.steps == (2 * (n - 1) if collective == "allreduce" else n - 1)
    system, rail = nodes["system"].to_numpy(), nodes["local"].to_numpy()
    across = system[p.src] != system[p.dst]
    assert (rail[p.src[across]] == rail[p.dst[across]]).all()
    assert ((system[p.dst[across]] - system[p.src[across]]) % systems == 1).all()
    np.testing.assert_allclose(p.bytes[across], S / (8 * n))
    np.testing.assert_allclose(p.bytes[~across], S / n)
    assert (np.bincount(p.src[across], minlength=len(nodes))[group] == 1).all()
    assert (np.bincount(p.src[~across], minlength=len(nodes))[group] == 1).all()
    inside = set(zip(p.src[~across].tolist(), p.dst[~across].tolist(), strict=True))
    assert inside == {(int(acc[i]), int(acc[(i // 8) * 8 + (i + 1) % 8])) for i in range(n)}


def test_ring_over_dgx_nodes_uses_every_nic(superpod):
    """Routed and timed, a ring over 2 DGX H100 nodes loads all 16 NICs equally (not the
    one NIC of a rank-order ring's last GPU) and its busbw is NCCL's multi-node figure:
    370 GB/s for 8x 400G DGX H100 (GTC25 S72583 slide 12, R22 in
    shared/reference/collectives-compute-power.md), within 10 %."""
    acc = superpod.accelerators
    run = run_collective(superpod, "allreduce", 8 * 2**30, ["0-15"], algorithm="ring")
    links = superpod.links
    host = (links["tier"] == "host").to_numpy() & np.isin(links["src"], acc[:16])
    loads = run.timing.link_bytes[host]
    assert len(loads) == 16 and loads.min() == pytest.approx(loads.max()) and loads.min() > 0
    assert run.busbw_Bps == pytest.approx(370e9, rel=0.10)


def test_channels_follow_rails_of_partial_nodes(superpod):
    """Half of each node (ranks on rails 0, 2, 4, 6): four channels on those rails."""
    acc = superpod.accelerators
    group = np.r_[acc[0:8:2], acc[8:16:2], acc[16:24:2]]
    n = len(group)
    (p,) = collective_traffic(superpod, "allreduce", [group], S, algorithm="ring").phases
    system = superpod.nodes["system"].to_numpy()
    rail = superpod.nodes["local"].to_numpy()
    across = system[p.src] != system[p.dst]
    assert sorted(rail[p.src[across]].tolist()) == sorted([0, 2, 4, 6] * 3)
    assert (rail[p.src[across]] == rail[p.dst[across]]).all()
    np.testing.assert_allclose(p.bytes[across], S / (4 * n))


def test_channels_of_nodes_in_any_rank_order(superpod):
    """Ranks listed node 1 first, interleaved: the ring still goes node by node (parts in
    order of first appearance) and each rank still sends the same bytes."""
    acc = superpod.accelerators
    group = np.r_[acc[8:16], acc[0:8]].reshape(2, 8).T.ravel()  # 8, 0, 9, 1, ...
    nodes = len(superpod.nodes)
    t = collective_traffic(superpod, "allreduce", [group], S, algorithm="ring")
    np.testing.assert_allclose(sent(t, nodes)[group], per_rank_sent("allreduce", "ring", 16,
                                                                    2))
    np.testing.assert_allclose(received(t, nodes)[group], sent(t, nodes)[group])


# --- hierarchical ----------------------------------------------------------------------


@pytest.mark.parametrize(("stride", "count", "m"), [(1, 16, 8), (2, 16, 4), (8, 8, 1)])
def test_hierarchical_allreduce_closed_form(superpod, stride, count, m):
    group = superpod.accelerators[::stride][:count]  # m ranks in each of count/m systems
    nodes = len(superpod.nodes)
    t = collective_traffic(superpod, "allreduce", [group], S, algorithm="hierarchical")
    parts = count // m
    np.testing.assert_allclose(sent(t, nodes)[group],
                               per_rank_sent("allreduce", "hierarchical", count, parts))
    for collective in ("allgather", "reducescatter"):
        other = collective_traffic(superpod, collective, [group], S, algorithm="hierarchical")
        np.testing.assert_allclose(sent(other, nodes)[group], (count - 1) / count * S)
    # the stages are pipelined: one phase, inside flows S/m per step for m-1 steps each
    # way (reduce-scatter, all-gather), across flows S/count for 2(parts-1) steps
    (p,) = t.phases
    stages = [s_ for s_ in ("ring reduce-scatter inside domains",
                            "ring allreduce across domains",
                            "ring allgather inside domains") if s_ in p.label]
    assert len(stages) == (3 if 1 < m < count else 1)
    domain = superpod.nodes["domain"].to_numpy()
    same = domain[p.src] == domain[p.dst]
    np.testing.assert_allclose(p.bytes[same] * p.steps, (m - 1) * S / m)
    np.testing.assert_allclose(p.bytes[~same] * p.steps, 2 * (parts - 1) * S / count)
    steps = 2 * (m - 1) + 2 * (parts - 1)
    assert p.steps * p.messages_per_step == steps  # the first chunk takes every step


def test_hierarchical_pairs_same_position_across_domains(superpod):
    acc = superpod.accelerators
    group = np.r_[acc[8:12], acc[0:4]]  # system 1 first: parts in order of appearance
    t = collective_traffic(superpod, "allreduce", [group], S, algorithm="hierarchical")
    (p,) = t.phases
    assert p.messages_per_step == 3 + 2 + 3
    system = superpod.nodes["system"].to_numpy()
    across = system[p.src] != system[p.dst]
    assert np.allclose(p.bytes[across], 2 * S / 8)  # 2 steps of S/8
    assert sorted(zip(p.src[across].tolist(), p.dst[across].tolist(), strict=True)) == sorted(
        [(int(acc[8 + j]), int(acc[j])) for j in range(4)]
        + [(int(acc[j]), int(acc[8 + j])) for j in range(4)])


def test_hierarchical_is_pipelined(superpod):
    """Its stages run at once: on 2 DGX H100 the time is the slower of NVLink (the
    domain rings) and the NICs (the ring across), not their sum, so it beats the flat
    ring that waits for both at every step."""
    group = "0-15"
    size = 8 * 2**30
    hier = run_collective(superpod, "allreduce", size, [group], algorithm="hierarchical")
    assert len(hier.traffic.phases) == 1
    ring = run_collective(superpod, "allreduce", size, [group], algorithm="ring")
    assert hier.time_s < ring.time_s


def test_hierarchical_needs_even_domain_parts(superpod):
    group = superpod.accelerators[:12]  # 8 ranks in system 0, 4 in system 1
    with pytest.raises(ValueError, match=r"same number of ranks in every scale-up domain part"
                                         r".*'g0' has parts of 8, 4 ranks"):
        collective_traffic(superpod, "allreduce", [group], S, algorithm="hierarchical")


def test_hierarchical_without_domains_is_a_ring(toy):
    fabric = toy("system: toy-host\nsystems: 8\nscaleout:\n  switch: toy-switch-8\n")
    group = fabric.accelerators
    (p,) = collective_traffic(fabric, "allreduce", [group], S, algorithm="hierarchical").phases
    (ring,) = collective_traffic(fabric, "allreduce", [group], S, algorithm="ring").phases
    assert (p.steps, p.src.tolist(), p.dst.tolist()) == (ring.steps, ring.src.tolist(),
                                                         ring.dst.tolist())
    assert np.allclose(p.bytes, ring.bytes)


# --- concurrent groups -----------------------------------------------------------------


@pytest.mark.parametrize(("collective", "algorithm"), CASES)
def test_groups_run_concurrently_tagged(superpod, collective, algorithm):
    acc = superpod.accelerators
    groups = [acc[0:64:8], acc[1:64:8], acc[64:72]]  # two across systems, one inside
    nodes = len(superpod.nodes)
    t = collective_traffic(superpod, collective, groups, S, algorithm=algorithm,
                           group_names=["dp0", "dp1", "tp8"])
    assert t.group_names == ("dp0", "dp1", "tp8")
    check_inside_groups(t, groups, nodes)
    alone = [collective_traffic(superpod, collective, [g], S, algorithm=algorithm)
             for g in groups]
    assert len(t.phases) == len({p.label for a in alone for p in a.phases})
    for i, single in enumerate(alone):
        bytes_i = sum(p.bytes[p.group == i].sum() * p.steps for p in t.phases)
        assert bytes_i == pytest.approx(single.total_bytes)
    np.testing.assert_allclose(sent(t, nodes), sum(sent(a, nodes) for a in alone))


@pytest.mark.parametrize(("collective", "algorithm"),
                         [("allreduce", "ring"), ("allreduce", "rhd"), ("alltoall", "pairwise"),
                          ("allreduce", "hierarchical"), ("allreduce", "tree")])
def test_groups_of_different_sizes_keep_their_bytes(superpod, collective, algorithm):
    acc = superpod.accelerators
    groups = [acc[0:4], acc[8:24], acc[32:34], acc[40:41]]
    nodes = len(superpod.nodes)
    t = collective_traffic(superpod, collective, groups, S, algorithm=algorithm)
    assert t.group_names == ("g0", "g1", "g2", "g3")
    check_inside_groups(t, groups, nodes)
    labels = [p.label for p in t.phases]
    assert len(labels) == len(set(labels))
    for i, g in enumerate(groups):
        single = collective_traffic(superpod, collective, [g], S, algorithm=algorithm)
        bytes_i = sum(p.bytes[p.group == i].sum() * p.steps for p in t.phases)
        assert bytes_i == pytest.approx(single.total_bytes)
        order = [p.label for p in single.phases]  # each group's phases keep their order
        assert order == [la for la in labels if la in order]
    assert np.allclose(sent(t, nodes)[acc[40]], 0)  # a group of one sends nothing


def test_two_dimensional_groups_and_many_flows(superpod):
    groups = superpod.accelerators[:1008].reshape(-1, 16)
    t = collective_traffic(superpod, "alltoall", groups, S, algorithm="direct")
    (p,) = t.phases
    assert p.flows == 63 * 16 * 15
    assert np.bincount(p.group).tolist() == [16 * 15] * 63
    check_inside_groups(t, list(groups), len(superpod.nodes))


# --- in-network reduction --------------------------------------------------------------


def test_nvls_on_hgx_moves_s_one_plus_one_over_n_split_by_cables(hgx):
    """NCCL's NVLS: reduce-scatter by multimem loads (S up, S/n down per GPU) and
    all-gather by multimem stores (S/n up, S down): S (1 + 1/n) each way, 18 units split
    5:5:4:4 over the four NVSwitch chips of an HGX H100."""
    assert hgx.catalog.entries["nvswitch3"].in_network_reduction is True
    assert hgx.catalog.entries["nvswitch3"].nvls_efficiency == 0.85
    acc = hgx.accelerators
    chips = np.flatnonzero((hgx.nodes["kind"] == "scaleup_switch").to_numpy())
    assert in_network_capable(hgx, [acc])
    t = collective_traffic(hgx, "allreduce", [acc], 16.0, algorithm="innetwork")
    up, down = up_down(t)
    assert set(up.dst.tolist()) == set(chips.tolist()) and set(up.src.tolist()) == set(acc)
    nodes = len(hgx.nodes)
    each_way = 16 * (1 + 1 / 8)  # 18
    np.testing.assert_allclose(np.bincount(up.src, weights=up.bytes, minlength=nodes)[acc],
                               each_way)
    for rank in acc:
        share = {int(d): b for s, d, b in zip(up.src, up.dst, up.bytes, strict=True)
                 if s == rank}
        assert [share[int(c)] for c in chips] == [5, 5, 4, 4]
    np.testing.assert_allclose(np.bincount(down.dst, weights=down.bytes, minlength=nodes)[acc],
                               each_way)
    np.testing.assert_allclose(received(t, nodes)[chips], [40, 40, 32, 32])  # 8 ranks
    (p,) = t.phases
    assert p.steps == 1 and p.efficiency == 0.85
    assert "NVLS at 0.85" in " ".join(t.notes)


def test_nvls_for_part_of_a_server(hgx):
    groups = [hgx.accelerators[:4], hgx.accelerators[4:]]
    t = collective_traffic(hgx, "allreduce", groups, S, algorithm="innetwork")
    nodes = len(hgx.nodes)
    np.testing.assert_allclose(sent(t, nodes)[hgx.accelerators], S * (1 + 1 / 4))
    assert set(t.phases[0].group.tolist()) == {0, 1}


def test_nvls_allreduce_busbw_on_8_h100(hgx):
    """8 x H100 NVLS AllReduce: NVLink at NCCL's 20.6 of 25 GB/s per link (the catalog's
    efficiency) and NVLS at NCCL's 0.85 give 370.8 x 0.85 x 2(n-1)/(n+1) = 490 GB/s
    busbw, within 10 % of the published ~480 GB/s (nccl-tests issue #212, maintainer)."""
    run = run_collective(hgx, "allreduce", 8 * 2**30, ["all"], algorithm="innetwork")
    closed_form = 370.8e9 * 0.85 * 2 * 7 / 9
    assert run.busbw_Bps == pytest.approx(closed_form, rel=0.02)
    assert run.busbw_Bps == pytest.approx(480e9, rel=0.10)


@pytest.mark.parametrize(("gpus", "published"), [(5, 414.2), (6, 435.6), (7, 460.0),
                                                 (8, 473.1)])
def test_nvls_gain_follows_gpu_count(hgx, gpus, published):
    """NVLS busbw against the GPU count, 8 x H200 at 8 GiB, NCCL 2.27.7 (stas00/ml-engineering,
    R20 in shared/reference/collectives-compute-power.md): H200 has H100's NVLink 4 and
    NVSwitch gen3, so the same fabric applies; within 10 % at every count."""
    run = run_collective(hgx, "allreduce", 8 * 2**30, [f"0-{gpus - 1}"],
                         algorithm="innetwork")
    assert run.busbw_Bps / 1e9 == pytest.approx(published, rel=0.10)


def test_sharp_across_dgx_nodes_reduces_in_node_first(sharp_superpod):
    superpod = sharp_superpod
    """SHARP across 2 DGX H100 with NCCL's in-node pre-reduction: NVLS inside each node,
    then each GPU's NIC carries its slice S/8 (not S) to the leaf of its rail, which is
    that slice's aggregation root (both nodes' rail-j NICs share it): no spine."""
    acc = superpod.accelerators
    group = acc[:16]
    nodes = superpod.nodes
    t = collective_traffic(superpod, "allreduce", [group], S, algorithm="innetwork")
    (p,) = t.phases
    kind = nodes["kind"].astype(str).to_numpy()
    tier = nodes["tier"].astype(str).to_numpy()
    to_leaf = np.isin(p.src, group) & (tier[p.dst] == "leaf")
    assert to_leaf.sum() == 16
    np.testing.assert_allclose(p.bytes[to_leaf], S / 8)
    rail = nodes["local"].to_numpy()
    assert len(set(p.dst[to_leaf].tolist())) == 8  # one leaf per rail, the slice's root
    for j in range(8):
        assert len(set(p.dst[to_leaf & (rail[p.src] == j)].tolist())) == 1
    assert not (tier[p.src] == "spine").any() and not (tier[p.dst] == "spine").any()
    to_chip = np.isin(p.src, group) & (kind[p.dst] == "scaleup_switch")
    np.testing.assert_allclose(np.bincount(p.src[to_chip], weights=p.bytes[to_chip],
                                           minlength=len(nodes))[group], S * (1 + 1 / 8))
    assert p.efficiency == 0.85  # the NVLS part's; see the innetwork module docstring
    assert any("S / ranks per domain" in note for note in t.notes)


def test_sharp_pre_reduction_by_rings_where_chips_cannot(sharp):
    """Domain parts whose switch chips do not reduce pre-reduce by a ring reduce-scatter
    and all-gather round the part: 2 (m-1)/m S per rank one way, S/m per NIC."""
    fabric = sharp("system: toy-box\nsystems: 4\nscaleout:\n  switch: sharp-8\n")
    acc = fabric.accelerators
    group = acc[:8]  # two boxes of 4
    t = collective_traffic(fabric, "allreduce", [group], S, algorithm="innetwork")
    (p,) = t.phases
    domain = fabric.nodes["domain"].to_numpy()
    kind = fabric.nodes["kind"].astype(str).to_numpy()
    between = np.isin(p.src, group) & np.isin(p.dst, group)
    assert (domain[p.src[between]] == domain[p.dst[between]]).all()
    np.testing.assert_allclose(p.bytes[between], 2 * 3 / 4 * S)
    to_switch = np.isin(p.src, group) & (kind[p.dst] == "switch")
    np.testing.assert_allclose(np.bincount(p.src[to_switch], weights=p.bytes[to_switch],
                                           minlength=len(kind))[group], S / 4)
    assert p.efficiency == 1.0 and p.messages_per_step == 1 + 2 * 3


def test_in_network_across_domains_needs_even_parts(superpod):
    group = superpod.accelerators[:12]
    for algorithm in ("innetwork", "nvlstree"):
        with pytest.raises(ValueError, match=r"same number of ranks in every domain part.*"
                                             r"'g0' has parts of 8, 4 ranks"):
            collective_traffic(superpod, "allreduce", [group], S, algorithm=algorithm)


@pytest.mark.parametrize("systems", [2, 3, 4])
def test_nvls_tree_over_dgx_nodes(superpod, systems):
    """NVLS-Tree: NVLS inside each node, then per slice j (the GPU on rail j) NCCL's
    double binary tree over the nodes, S/16 per tree edge each way: each NIC carries
    S/8 per tree it sits in (not S), on its own rail."""
    acc = superpod.accelerators
    group = acc[:8 * systems]
    nodes = superpod.nodes
    t = collective_traffic(superpod, "allreduce", [group], S, algorithm="nvlstree")
    (p,) = t.phases
    assert p.efficiency == 0.85 and p.label == "NVLS-Tree reduce and broadcast"
    system, rail = nodes["system"].to_numpy(), nodes["local"].to_numpy()
    kind = nodes["kind"].astype(str).to_numpy()
    net = (kind[p.src] == "accelerator") & (kind[p.dst] == "accelerator")
    assert (system[p.src[net]] != system[p.dst[net]]).all()
    assert (rail[p.src[net]] == rail[p.dst[net]]).all()
    np.testing.assert_allclose(p.bytes[net], S / 16)
    trees = double_binary_tree(systems)
    degree = sum((parents >= 0).astype(float) + np.bincount(parents[parents >= 0],
                                                             minlength=systems)
                 for parents in trees)
    out = np.bincount(p.src[net], weights=p.bytes[net], minlength=len(nodes))
    for node in range(systems):
        np.testing.assert_allclose(out[acc[8 * node:8 * node + 8]], S / 16 * degree[node])
    to_chip = np.isin(p.src, group) & (kind[p.dst] == "scaleup_switch")
    np.testing.assert_allclose(np.bincount(p.src[to_chip], weights=p.bytes[to_chip],
                                           minlength=len(nodes))[group], S * (1 + 1 / 8))
    depth = max(tree_depth(parents) for parents in trees)
    assert p.messages_per_step == 1 + 2 * depth
    assert set(p.group.tolist()) == {0}


@pytest.fixture(scope="module")
def nvl72():
    return example("gb200-nvl72-cluster.yaml")


def test_nvls_over_72_ranks_keeps_32_heads(nvl72, hgx):
    """NCCL keeps at most 32 NVLS heads (``NCCL_MAX_NVLS_ARITY``) and only heads reduce:
    in a 72-GPU NVL72 rack a head's ports carry S (1 + 1/32) each way and every other
    rank's S, not S (1 + 1/72); 8 ranks stay at S (1 + 1/8)."""
    acc = nvl72.accelerators[:72]
    t = collective_traffic(nvl72, "allreduce", [acc], S, algorithm="innetwork")
    up, down = up_down(t)
    nodes = len(nvl72.nodes)
    expected = np.where(np.arange(72) < 32, S * (1 + 1 / 32), S)
    np.testing.assert_allclose(np.bincount(up.src, weights=up.bytes, minlength=nodes)[acc],
                               expected)
    np.testing.assert_allclose(np.bincount(down.dst, weights=down.bytes,
                                           minlength=nodes)[acc], expected)
    assert "32 NVLS heads" in " ".join(t.notes)
    eight = collective_traffic(hgx, "allreduce", [hgx.accelerators], S, algorithm="innetwork")
    np.testing.assert_allclose(sent(eight, len(hgx.nodes))[hgx.accelerators], S * (1 + 1 / 8))
    assert "NVLS heads" not in " ".join(eight.notes)


def test_nvls_tree_over_two_nvl72_racks_sends_32_slices(nvl72):
    """NVLS-Tree over two 72-GPU racks: 32 heads per rack, each its slice S/32 over
    the network (S/64 per tree), the other 40 ranks none."""
    acc = nvl72.accelerators[:144]
    t = collective_traffic(nvl72, "allreduce", [acc], S, algorithm="nvlstree")
    (p,) = t.phases
    kind = nvl72.nodes["kind"].astype(str).to_numpy()
    net = (kind[p.src] == "accelerator") & (kind[p.dst] == "accelerator")
    np.testing.assert_allclose(p.bytes[net], S / 64)
    out = np.bincount(p.src[net], weights=p.bytes[net], minlength=len(nvl72.nodes))[acc]
    position = np.arange(144) % 72
    np.testing.assert_allclose(out, np.where(position < 32, S / 32, 0.0))
    to_chip = kind[p.dst] == "scaleup_switch"
    np.testing.assert_allclose(np.bincount(p.src[to_chip], weights=p.bytes[to_chip],
                                           minlength=len(nvl72.nodes))[acc],
                               np.where(position < 32, S * (1 + 1 / 32), S))


def test_sharp_over_two_nvl72_racks_sends_only_the_heads_slices(nvl72):
    """SHARP with NVLS inside each 72-GPU rack: only the 32 heads of a rack send their
    slice, S/32 each, to the switches (NCCL's ``nvls->out`` is set on heads only)."""
    fabric = with_sharp(nvl72)
    acc = fabric.accelerators[:144]
    t = collective_traffic(fabric, "allreduce", [acc], S, algorithm="innetwork")
    (p,) = t.phases
    kind = fabric.nodes["kind"].astype(str).to_numpy()
    up = kind[p.dst] == "switch"
    out = np.bincount(p.src[up], weights=p.bytes[up], minlength=len(kind))[acc]
    np.testing.assert_allclose(out, np.where(np.arange(144) % 72 < 32, S / 32, 0.0))
    assert "32 NVLS heads" in " ".join(t.notes)


def test_nvls_tree_refused_where_it_does_not_apply(superpod, toy):
    with pytest.raises(ValueError, match="nvlstree needs a group spanning two or more"):
        collective_traffic(superpod, "allreduce", [superpod.accelerators[:8]], S,
                           algorithm="nvlstree")
    fabric = toy("system: toy-box\nsystems: 4\nscaleout:\n  switch: toy-switch-8\n")
    assert not in_network_capable(fabric, [fabric.accelerators[:8]], algorithm="nvlstree")
    with pytest.raises(ValueError, match="nvlstree does not apply to group 'g0'"):
        collective_traffic(fabric, "allreduce", [fabric.accelerators[:8]], S,
                           algorithm="nvlstree")
    assert in_network_capable(superpod, [superpod.accelerators[:16]], algorithm="nvlstree")


def names(fabric, numbers):
    return fabric.nodes["name"].to_numpy()[numbers].tolist()


def test_sharp_root_is_the_shared_leaf_or_the_first_spine(sharp_superpod):
    superpod = sharp_superpod
    acc = superpod.accelerators
    nodes = len(superpod.nodes)
    one_leaf = acc[0:256:8]  # rail 0 of unit 0: every NIC on leaf00
    up, _ = up_down(collective_traffic(superpod, "allreduce", [one_leaf], S,
                               algorithm="innetwork"))
    assert set(names(superpod, up.dst)) == {"leaf00"} and up.flows == 32
    two_leaves = acc[0:512:8]  # rail 0 of units 0 and 1
    t = collective_traffic(superpod, "allreduce", [two_leaves], S, algorithm="innetwork")
    up, _ = up_down(t)
    switch_flows = set(zip(names(superpod, up.src[-2:]), names(superpod, up.dst[-2:]),
                           strict=True))
    assert switch_flows == {("leaf00", "spine00"), ("leaf08", "spine00")}
    np.testing.assert_allclose(sent(t, nodes)[two_leaves], S)
    np.testing.assert_allclose(received(t, nodes)[two_leaves], S)
    spine = superpod.node_number("spine00")
    assert received(t, nodes)[spine] == pytest.approx(2 * S)
    assert sent(t, nodes)[spine] == pytest.approx(2 * S)
    assert "1 at spine" in t.notes[0]


def test_sharp_root_is_a_core_across_pods(sharp):
    fabric = sharp("system: toy-host\nsystems: 16\nscaleout:\n  switch: sharp-4\n")
    acc = fabric.accelerators
    nodes = len(fabric.nodes)
    assert fabric.structure.scaleout.fat_tree_tiers == 3
    t = collective_traffic(fabric, "allreduce", [acc], S, algorithm="innetwork")
    up, _ = up_down(t)
    tier = fabric.nodes["tier"].astype(str).to_numpy()
    roots = set(up.dst[tier[up.src] == "leaf"].tolist())
    assert len(roots) == 1 and tier[roots.pop()] == "core"
    np.testing.assert_allclose(sent(t, nodes)[acc], S)
    leaves = np.flatnonzero(tier == "leaf")
    np.testing.assert_allclose(sent(t, nodes)[leaves], 2 * S + S)  # S up, S down to 2 hosts
    in_pod = collective_traffic(fabric, "allreduce", [acc[:4]], S, algorithm="innetwork")
    assert {tier[d] for d in up_down(in_pod)[0].dst} == {"leaf", "spine"}


def test_sharp_splits_over_planes(sharp):
    fabric = sharp("system: toy-host\nsystems: 8\nscaleout:\n  switch: sharp-8\n  planes: 2\n"
                   "  port_rate: '50 Gb/s /dir'\n")
    acc = fabric.accelerators
    t = collective_traffic(fabric, "allreduce", [acc], S, algorithm="innetwork")
    up, _ = up_down(t)
    plane = fabric.nodes["plane"].to_numpy()
    from_ranks = np.isin(up.src, acc)
    assert np.allclose(up.bytes[from_ranks], S / 2)
    assert sorted(np.bincount(plane[up.dst[from_ranks]]).tolist()) == [8, 8]
    np.testing.assert_allclose(sent(t, len(fabric.nodes))[acc], S)


def test_sharp_with_fewer_nics_than_accelerators(sharp):
    fabric = sharp("system: sharp-box\nsystems: 4\nscaleout:\n  switch: sharp-8\n"
                   "  nics_per_system: 2\n")
    acc = fabric.accelerators
    group = acc[::2]  # ranks 0 and 2 of every box; rank 2 owns no NIC of its own
    up, _ = up_down(collective_traffic(fabric, "allreduce", [group], S, algorithm="innetwork"))
    assert set(up.src[np.isin(up.src, acc)].tolist()) == set(group.tolist())


def test_nvls_case_a_wins_inside_one_system(sharp):
    fabric = sharp("system: sharp-box\nsystems: 2\nscaleout:\n  switch: sharp-4\n")
    up, _ = up_down(collective_traffic(fabric, "allreduce", [fabric.accelerators[:4]], 4.0,
                               algorithm="innetwork"))
    assert set(fabric.nodes["kind"].astype(str).to_numpy()[up.dst]) == {"scaleup_switch"}
    # links_per_switch [3, 1], S (1 + 1/4) each way
    assert sorted(up.bytes.tolist()) == [1.25] * 4 + [3.75] * 4


def test_innetwork_refused_where_switches_cannot(toy, superpod):
    fabric = toy("system: toy-box\nsystems: 4\nscaleout:\n  switch: toy-switch-8\n")
    inside = [fabric.accelerators[:4]]
    across = [fabric.accelerators[::4]]
    for groups in (inside, across):
        assert not in_network_capable(fabric, groups)
    with pytest.raises(ValueError, match=r"does not apply to group 'g0': its scale-up switch"
                                         r" chips \(toy-chip\) do not all reduce.*runs only"
                                         r" across scale-up domains"):
        collective_traffic(fabric, "allreduce", inside, S, algorithm="innetwork")
    with pytest.raises(ValueError, match=r"not all in one scale-up system, and scale-out"
                                         r" switch .*toy-switch-8.* has no in-network"):
        collective_traffic(fabric, "allreduce", across, S, algorithm="innetwork")
    alone = toy("system: toy-box\nsystems: 2\n")
    with pytest.raises(ValueError, match="has no scale-out NIC link"):
        collective_traffic(alone, "allreduce", [alone.accelerators[2:6]], S,
                           algorithm="innetwork")
    with pytest.raises(ValueError, match="innetwork"):
        collective_traffic(superpod, "allgather", [superpod.accelerators[:8]], S,
                           algorithm="innetwork")


def test_innetwork_needs_a_common_root(sharp):
    fabric = sharp("system: sharp-box\nsystems: 8\nscaleup:\n  kind: none\nscaleout:\n"
                   "  kind: rail_only\n  switch: sharp-8\n")
    group = fabric.accelerators[:8]  # two boxes: four rails that share no switch
    assert not in_network_capable(fabric, [group])
    with pytest.raises(ValueError, match="no single scale-out switch above all its leaves"):
        collective_traffic(fabric, "allreduce", [group], S, algorithm="innetwork")
    assert in_network_capable(fabric, [fabric.accelerators[::4]])  # one rail


# --- input checks ----------------------------------------------------------------------


def test_input_errors(hgx):
    acc = hgx.accelerators
    with pytest.raises(ValueError, match="unknown collective 'gather'"):
        collective_traffic(hgx, "gather", [acc], S, algorithm="ring")
    with pytest.raises(ValueError, match="alltoall has no algorithm 'ring'; choose from"
                                         " direct, pairwise"):
        collective_traffic(hgx, "alltoall", [acc], S, algorithm="ring")
    with pytest.raises(ValueError, match="size_bytes must be a finite number >= 0"):
        collective_traffic(hgx, "allreduce", [acc], -1, algorithm="ring")
    with pytest.raises(ValueError, match="node 8 is not an accelerator"):
        collective_traffic(hgx, "allreduce", [np.r_[acc[:3], 8]], S, algorithm="ring")
    with pytest.raises(ValueError, match="node 99 is not an accelerator"):
        collective_traffic(hgx, "allreduce", [[0, 99]], S, algorithm="ring")
    with pytest.raises(ValueError, match="node 2 appears twice"):
        collective_traffic(hgx, "allreduce", [[1, 2, 2]], S, algorithm="ring")
    with pytest.raises(ValueError, match="group 1 has no ranks"):
        collective_traffic(hgx, "allreduce", [[1, 2], []], S, algorithm="ring")
    with pytest.raises(ValueError, match="no groups"):
        collective_traffic(hgx, "allreduce", [], S, algorithm="ring")
    with pytest.raises(ValueError, match="1 group names for 2 groups"):
        collective_traffic(hgx, "allreduce", [[0, 1], [2, 3]], S, algorithm="ring",
                           group_names=["a"])


def test_a_node_in_two_groups_is_allowed_one_twice_in_a_group_is_not(hgx):
    """Groups are checked for a repeated node by a count over the whole block first: a
    node in two groups of a block passes (each group's own ranks are then sorted), a
    node twice in one group is named whichever group it is in."""
    acc = hgx.accelerators
    shared = collective_traffic(hgx, "allreduce", [acc[:4], acc[3:7]], S, algorithm="ring")
    alone = [collective_traffic(hgx, "allreduce", [g], S, algorithm="ring").phases[0]
             for g in (acc[:4], acc[3:7])]
    assert len(shared.phases[0].src) == sum(len(p.src) for p in alone)
    with pytest.raises(ValueError, match=f"node {acc[5]} appears twice"):
        collective_traffic(hgx, "allreduce", [acc[:3], [acc[4], acc[5], acc[5]]], S,
                           algorithm="ring")
    # pairs, a node in two of them (a pipeline's stages), then one pair of one node
    pairs = [[acc[0], acc[1]], [acc[1], acc[2]]]
    collective_traffic(hgx, "allreduce", pairs, S, algorithm="ring")
    with pytest.raises(ValueError, match=f"node {acc[3]} appears twice"):
        collective_traffic(hgx, "allreduce", [*pairs, [acc[3], acc[3]], [acc[4], acc[4]]],
                           S, algorithm="ring")

def test_groups_of_one_rank_make_no_traffic(hgx):
    t = collective_traffic(hgx, "allreduce", [[0], [1]], S, algorithm="ring")
    assert t.phases == () and t.total_bytes == 0
    assert in_network_capable(hgx, [[0]])


def test_sharp_does_not_reduce_a_group_inside_one_node():
    """NCCL's CollNet (SHARP) runs across nodes only: on one DGX A100, whose NVSwitch
    gen2 chips do not reduce, in-network reduction does not apply, though its QM8700
    leaves could reduce; across two nodes it does."""
    from topomodel.fabric.build import build_fabric
    from topomodel.inputs.design import load_design
    from topomodel.traffic.communicators import CollectiveError

    selene = with_sharp(build_fabric(*load_design("examples/selene-dgx-a100.yaml")))
    one_node = selene.accelerators[:8]
    with pytest.raises(CollectiveError, match=r"runs only across scale-up domains"):
        collective_traffic(selene, "allreduce", [one_node], 2**20, algorithm="innetwork")
    two_nodes = selene.accelerators[:16]
    assert collective_traffic(selene, "allreduce", [two_nodes], 2**20,
                              algorithm="innetwork").phases


@pytest.fixture(scope="module")
def bound_fabrics(tmp_path_factory):
    from topomodel.fabric.failures import with_failures

    out = {name: build_fabric(*load_design(f"examples/{name}.yaml")) for name in (
        "dgx-h100-superpod", "hgx-h100-server", "dual-plane-ethernet",
        "gb200-nvl72-cluster", "small-4x8-l40s-25gbe")}
    cube = tmp_path_factory.mktemp("cube") / "cube.yaml"
    cube.write_text("name: one cube\nsystem: tpu-v4-cube\nsystems: 1\nscaleup:\n"
                    "  kind: torus\n  shape: [4, 4, 4]\n  wraparound: true\n"
                    "scaleout:\n  kind: none\n")
    out["4x4x4 torus"] = build_fabric(*load_design(cube))
    planes = out["dual-plane-ethernet"]
    spine = planes.nodes.loc[planes.nodes["tier"] == "spine", "name"].iloc[0]
    out["dual plane with a failed spine"] = with_failures(planes, [spine])
    return out


@pytest.mark.parametrize("size", [8.0, 2.0**20, 2.0**30])
@pytest.mark.parametrize("collective", ["allreduce", "allgather", "alltoall"])
def test_the_search_bound_never_exceeds_the_routed_time(bound_fabrics, collective, size):
    """``lower_bound_s`` prunes candidates before routing, so it must be a bound on every
    fabric, algorithm and size; and ``auto`` then keeps the fastest of them all."""
    from topomodel.analysis.collectives.timing import lower_bound_s, time_traffic
    from topomodel.traffic.algorithms import auto_candidates

    for name, fabric in bound_fabrics.items():
        groups = parse_groups(fabric, "all")
        times = {}
        for algorithm in auto_candidates(fabric, collective, 8):
            try:
                traffic = collective_traffic(fabric, collective, groups, size,
                                             algorithm=algorithm)
                times[algorithm] = time_traffic(fabric, traffic).time_s
            except ValueError:  # not for these groups, or beyond the general router
                continue
            assert lower_bound_s(fabric, traffic) <= times[algorithm] * (1 + 1e-9), (
                name, algorithm)
            # the floor known before the traffic is built: never above the bound (the
            # search relies on it exactly), from the shapes the traffic carries
            shapes = collective_shapes(fabric, collective, groups, size, algorithm=algorithm)
            assert shapes == traffic.shapes, (name, algorithm)
            assert floor_s(fabric, shapes) <= lower_bound_s(fabric, traffic), (name, algorithm)
        run = run_collective(fabric, collective, size)
        assert run.time_s == pytest.approx(min(times.values()), rel=1e-12), name


def _search(fabric, size, *, floors):
    """(the search's result, the candidates it built) of an AllReduce over all ranks."""
    from topomodel.analysis.collectives.collective import fastest
    from topomodel.traffic.algorithms import auto_candidates

    groups = group_blocks(fabric, parse_groups(fabric, "all"))
    built = []

    def build(alg):
        built.append(alg)
        return collective_traffic(fabric, "allreduce", groups, size, algorithm=alg)

    def floor(alg):
        return floor_s(fabric, collective_shapes(fabric, "allreduce", groups, size,
                                                 algorithm=alg))

    alg, _, timing, times = fastest(fabric, build, auto_candidates(fabric, "allreduce", 8),
                                    floor=floor if floors else None)
    return (alg, timing.time_s, list(times.items())), built


def test_floors_skip_builds_but_not_what_the_search_routes(bound_fabrics):
    """With floors the search builds fewer candidates, yet routes the same ones in the
    same order and keeps the same fastest: floors only say what need not be built."""
    from topomodel.traffic.algorithms import auto_candidates

    skipped = 0
    for size in (8.0, 2.0**20, 2.0**30):
        for name, fabric in bound_fabrics.items():
            every, built_every = _search(fabric, size, floors=False)
            lazy, built_lazy = _search(fabric, size, floors=True)
            assert lazy == every, (name, size)
            assert set(built_lazy) <= set(built_every) == set(
                auto_candidates(fabric, "allreduce", 8)), (name, size)
            skipped += len(built_every) - len(built_lazy)
    assert skipped > 0  # the floors did spare some builds (small sizes: latency rules)


def test_group_blocks_hold_groups_of_each_size_as_one_2d_block():
    """Groups given as 1-D arrays of several sizes become one 2-D block per size (in
    order of first appearance), numbered as given; every form of the same groups makes
    the same flows."""
    fabric = build_fabric(*load_design("examples/dgx-h100-superpod.yaml"))
    acc = fabric.accelerators
    given = [acc[0:8], acc[8:12], acc[16:24], acc[24:28], acc[32:40]]
    blocks = group_blocks(fabric, given)
    assert [b.shape for b in blocks.blocks] == [(3, 8), (2, 4)]
    assert [i.tolist() for i in blocks.ids] == [[0, 2, 4], [1, 3]]
    assert blocks.sizes.tolist() == [8, 4, 8, 4, 8]
    assert blocks.members(np.array([1, 2])).tolist() == np.r_[acc[8:12], acc[16:24]].tolist()
    assert [(k, ids.tolist()) for k, ids, _ in blocks.select(np.array([3, 4]))] == [
        (1, [3]), (0, [4])]  # block by block, in order of their first group
    as_blocks = [np.stack([acc[0:8]]), acc[8:12], np.stack([acc[16:24]]), acc[24:28],
                 acc[32:40].reshape(1, 8)]
    flows = [collective_traffic(fabric, "allreduce", form, S, algorithm="ring").phases[0]
             for form in (given, as_blocks, blocks)]
    for other in flows[1:]:
        for column in ("src", "dst", "bytes", "group"):
            assert getattr(other, column).tolist() == getattr(flows[0], column).tolist()


def test_parse_groups_gives_a_2d_array_a_row_per_group():
    fabric = build_fabric(*load_design("examples/dgx-h100-superpod.yaml"))
    acc = fabric.accelerators
    n = len(acc)
    assert parse_groups(fabric, "all").tolist() == [acc.tolist()]
    assert parse_groups(fabric, "domain").shape == (n // 8, 8)
    assert parse_groups(fabric, "rail").shape == (8, n // 8)
    stride = parse_groups(fabric, "stride:4")
    assert stride.shape == (4, n // 4) and stride[1, :2].tolist() == [acc[1], acc[5]]
    assert parse_groups(fabric, "0,9").tolist() == [[acc[0], acc[9]]]


def test_parse_groups_refuses_groups_of_different_sizes():

    from topomodel.errors import UsageError

    class Uneven:  # domains of 4 and 2 ranks (the builders make equal ones)
        accelerators = np.arange(6)
        node_arrays = Columns({"domain": np.array([0, 0, 0, 0, 1, 1])})

    with pytest.raises(UsageError, match=r"'domain': its groups differ in size \(2 to 4"):
        parse_groups(Uneven(), "domain")


def test_the_bound_s_terms_kept_per_fabric_and_phase_are_their_formulas(hgx, superpod):
    """The switch term of ``lower_bound_s`` (switch capacities made only when a flow
    starts or ends at a switch) and the ideal time (loads kept per phase, divided by
    each time model's injection) equal, to the bit, the formulas computed directly,
    under two time models in turn; an accelerator-only phase never makes the switch
    capacities."""
    from topomodel.analysis.collectives import timing

    def direct(fabric, ph, model):
        tiers = timing.tier_efficiency(fabric, model)
        links = fabric.links
        rate = links["capacity_Bps"].to_numpy() * np.array(
            [tiers[t] for t in links["tier"].cat.categories])[links["tier"].cat.codes]
        n = len(fabric.nodes)
        switch = fabric.kind_mask("switch") | fabric.kind_mask("scaleup_switch")
        worst = 0.0
        for ends, end in ((ph.src, "src"), (ph.dst, "dst")):
            capacity = np.where(switch, np.bincount(links[end].to_numpy(), weights=rate,
                                                    minlength=n), 0.0)
            at = capacity[ends] > 0
            if at.any():
                load = np.bincount(ends[at], weights=ph.bytes[at], minlength=n)
                busy = load > 0
                worst = max(worst, float((load[busy] / capacity[busy]).max()))
        up, out = timing._injection(fabric, tiers)
        roles = fabric.derived(timing._node_roles)
        local = ((roles.domain[ph.src] == roles.domain[ph.dst]) & (roles.domain[ph.src] >= 0)
                 ) | roles.chip[ph.src] | roles.chip[ph.dst]
        local_bytes = np.where(local, ph.bytes, 0.0)
        ideal = 0.0
        for weights, capacity in ((local_bytes, up), (ph.bytes - local_bytes, out)):
            load = np.maximum(np.bincount(ph.src, weights=weights, minlength=n),
                              np.bincount(ph.dst, weights=weights, minlength=n))
            busy = (load > 0) & roles.accelerator & (capacity > 0)
            if busy.any():
                ideal = max(ideal, float((load[busy] / capacity[busy]).max()))
        return worst, ideal

    slower = TimeModel(efficiency={"scaleup": 0.6, "leaf": 0.7})
    sharp = collective_traffic(hgx, "allreduce", [hgx.accelerators], S,
                               algorithm="innetwork")
    ring = collective_traffic(superpod, "allreduce", parse_groups(superpod, "all"), S,
                              algorithm="ring")
    for fabric, traffic, switch_ends in ((hgx, sharp, True), (superpod, ring, False)):
        for model in (TimeModel(), slower, TimeModel()):
            rates = timing.link_rates_of(fabric, model)
            for ph in traffic.phases:
                got = (timing._switch_s(ph, rates), timing._ideal_s(fabric, ph,
                                                                    rates.injection))
                assert got == direct(fabric, ph, model)
            assert ("switch_out_Bps" in vars(rates)) == switch_ends
    assert timing._switch_s(sharp.phases[0], timing.link_rates_of(hgx, TimeModel())) > 0


def _nccl_direct_batches(ranks: int, per_node: int, channels: int = 64) -> int:
    """NCCL's p2p schedule played out (src/init.cc ncclP2pSchedule, include/channel.h
    ncclP2pChannelBaseForRound, enqueue.cc ncclAddWorkBatchToPlan), one channel per
    peer: round r of group size g lies in batch r // g, whose channel is the batch
    index with its log2(channels) low bits reversed; the most batches on one channel."""
    group = math.gcd(8, per_node)
    bits = channels.bit_length() - 1

    def reverse(base: int) -> int:
        base %= channels
        return int(format(base, f"0{bits}b")[::-1], 2)

    per_channel: dict[int, int] = {}
    for batch in sorted({r // group for r in range(ranks)}):
        channel = reverse(batch)
        per_channel[channel] = per_channel.get(channel, 0) + 1
    return max(per_channel.values())


@pytest.mark.parametrize(("ranks", "per_node"), [
    (16, 8), (512, 8), (520, 8), (4_096, 8), (24_576, 8), (1_024, 4), (288, 72),
    (8_192, 2)])
def test_direct_rounds_are_the_batches_nccl_runs_in_turn_on_one_channel(ranks, per_node):
    assert direct_rounds(ranks, ranks // per_node) == _nccl_direct_batches(ranks, per_node)


def test_a_direct_all_to_all_latency_grows_with_its_peers_across_nodes():
    from topomodel.analysis.collectives.protocols import NcclShape, latency_s

    def latency(ranks: int) -> float:
        nodes = ranks // 8
        return latency_s("direct", "alltoall", "Simple", NcclShape(ranks, nodes),
                         rounds=direct_rounds(ranks, nodes))

    assert direct_rounds(8, 1) == 1  # inside one node: one round
    assert latency(512) == latency(64)  # 64 batches fit the 64 channels at once
    one_round = latency(1_024) - latency(512)
    assert one_round > 0
    assert latency(98_304) - latency(512) == pytest.approx(191 * one_round)


@pytest.mark.parametrize(("collective", "algorithm", "rounds"), [
    ("allreduce", "rhd", lambda n: 2 * int(math.log2(n))),
    ("allgather", "rhd", lambda n: int(math.log2(n))),
    ("reducescatter", "rhd", lambda n: int(math.log2(n))),
    ("alltoall", "pairwise", lambda n: n - 1)])
@pytest.mark.parametrize("n", [4, 16])
def test_point_to_point_rounds_are_the_phases_the_algorithm_runs(superpod, collective,
                                                                 algorithm, rounds, n):
    # each phase of rhd (a halving or doubling distance) and of pairwise (a shift) is one
    # point-to-point round of one step, so the rounds the latency counts are the phases:
    # an rhd AllReduce's log2 n each way, its AllGather's and ReduceScatter's log2 n (one
    # half each; they counted both), pairwise's n - 1 shifts
    group = superpod.accelerators[:n]
    t = collective_traffic(superpod, collective, [group], S, algorithm=algorithm)
    (shape,) = collective_shapes(superpod, collective, [group], S, algorithm=algorithm)
    assert all(p.steps == 1 for p in t.phases)
    assert shape.rounds == len(t.phases) == rounds(n)


def test_a_phase_without_a_library_model_pays_its_latency_every_step(superpod):
    from topomodel.analysis.collectives.timing import time_traffic
    from topomodel.traffic.phases import Traffic

    # a traffic with no collective shapes is timed per phase: k steps of the same flows
    # take k times one step, bandwidth and latency alike, and a step's latency has one
    # per-message overhead for each message the step sends
    acc = superpod.accelerators
    model = TimeModel(per_message_overhead_s=1e-6)

    def timed(steps, messages=1):
        phase = Phase(acc[:8], acc[8:16], np.full(8, 1e6), np.zeros(8, np.int32), steps,
                      "probe", messages)
        return time_traffic(superpod, Traffic((phase,)), time_model=model)

    one, three = timed(1), timed(3)
    assert one.latency_s > 0
    assert three.latency_s == pytest.approx(3 * one.latency_s)
    assert three.time_s == pytest.approx(3 * one.time_s)
    assert timed(1, messages=4).latency_s == pytest.approx(one.latency_s + 3e-6)
    # and each phase's own time is its steps times (bandwidth + latency) per step: the
    # phases' times add up to the traffic's
    (phase,) = three.phases
    assert phase.time_s == pytest.approx(3 * one.phases[0].time_s)
    assert phase.time_s == pytest.approx(three.time_s)


def test_a_blocks_domains_spanned_are_kept_and_counted_per_group():
    """GroupView.nodes: the most scale-up domains one group spans, counted group by
    group (a rank outside any domain its own), made once per block and read by every
    candidate's shape."""
    pod = example("dgx-h100-superpod.yaml")
    ranks = pod.accelerators[:64]
    rows = np.stack([ranks[:16], ranks[8:24][::-1], ranks[::4][:16], ranks[48:64]])
    blocks = group_blocks(pod, rows)
    view = blocks.block(0)
    domain = pod.node_arrays["domain"]
    want = max(len({int(d) for d in domain[r] if d >= 0}) + int((domain[r] < 0).sum())
               for r in rows)
    assert view.nodes == want == 8  # every 4th rank of 64: two on each of 8 servers
    assert blocks.block(0).cache["nodes"] == want  # kept with the block
    for algorithm in ("ring", "tree"):
        (shape,) = collective_shapes(pod, "allreduce", blocks, S, algorithm=algorithm)
        assert shape.nodes == want


@pytest.mark.parametrize("seed", range(4))
def test_packed_lexsort_is_numpys(seed):
    """The packed sort the channels use gives np.lexsort's permutation (ties in the
    original order), negative keys and keys too wide to pack included."""
    from topomodel.arrays import lexsort_ints

    rng = np.random.default_rng(seed)
    n = 5000
    keys = (np.arange(n), rng.integers(-50, 50, n), rng.integers(0, 7, n))
    assert (lexsort_ints(keys) == np.lexsort(keys)).all()
    wide = (rng.integers(0, 2**40, n), rng.integers(0, 2**40, n))  # falls back
    assert (lexsort_ints(wide) == np.lexsort(wide)).all()
    ties = (rng.integers(0, 3, n),)
    assert (lexsort_ints(ties) == np.lexsort(ties)).all()
