"""A direct All-to-All routed from counts equals the same pairs listed and routed one by
one: link by link, in time, ideal and latency, with PXN on and off."""

from pathlib import Path

import numpy as np
import pytest

from topomodel.analysis.collectives.collective import run_collective
from topomodel.analysis.collectives.loads import bisection_traffic
from topomodel.analysis.collectives.timing import TimeModel, lower_bound_s, time_traffic
from topomodel.fabric.build import build_fabric
from topomodel.fabric.failures import with_failures
from topomodel.inputs.design import load_design
from topomodel.routing import route
from topomodel.routing.aggregate import route_all_pairs
from topomodel.traffic.allpairs import decompose
from topomodel.traffic.collectives import collective_traffic
from topomodel.traffic.groups import parse_groups
from topomodel.traffic.phases import (
    AllPairs,
    AllPairsPhase,
    Phase,
    Traffic,
    concurrent,
    listed_node_dtype,
)
from topomodel.traffic.pxn import pxn

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def example(name):
    return build_fabric(*load_design(EXAMPLES / f"{name}.yaml"))


@pytest.fixture(scope="module")
def superpod():
    return example("dgx-h100-superpod")


def listed(traffic):
    """The same traffic with every phase's flows listed (plain phases)."""
    return Traffic(tuple(Phase(p.src.copy(), p.dst.copy(), p.bytes.copy(), p.group.copy(),
                               p.steps, p.label, p.messages_per_step, p.efficiency)
                         for p in traffic.phases),
                   traffic.group_names, traffic.algorithm, traffic.notes, traffic.shapes)


def alltoall(fabric, specs, size=1e6):
    parts = [collective_traffic(fabric, "alltoall", parse_groups(fabric, spec), size,
                                algorithm="direct") for spec in specs]
    return concurrent(parts)


def check_same(fabric, traffic, *, pxn_on, routing="ecmp", counted=True):
    """Counted and listed give the same loads, time, ideal and latency."""
    model = TimeModel(pxn=pxn_on)
    assert all(isinstance(p, AllPairsPhase) for p in traffic.phases)
    pairs = listed(traffic)
    a = time_traffic(fabric, traffic, time_model=model, routing=routing)
    b = time_traffic(fabric, pairs, time_model=model, routing=routing)
    assert np.allclose(a.link_bytes, b.link_bytes, rtol=1e-9, atol=1e-6 * b.link_bytes.max())
    assert a.link_bytes.sum() == pytest.approx(b.link_bytes.sum(), rel=1e-9)
    assert a.time_s == pytest.approx(b.time_s, rel=1e-9)
    assert a.protocol == b.protocol
    assert lower_bound_s(fabric, traffic, model) == pytest.approx(
        lower_bound_s(fabric, pairs, model), rel=1e-9)
    for x, y in zip(a.phases, b.phases, strict=True):
        assert x.ideal_s == pytest.approx(y.ideal_s, rel=1e-9)
        assert x.bandwidth_s == pytest.approx(y.bandwidth_s, rel=1e-9)
        assert (x.routed.inside is not None) == counted
    untimed = listed(traffic)  # path latencies (no NCCL shape) from the path classes
    bare = Traffic(traffic.phases, traffic.group_names, traffic.algorithm)
    c = time_traffic(fabric, bare, time_model=model, routing=routing)
    d = time_traffic(fabric, Traffic(untimed.phases), time_model=model, routing=routing)
    assert c.latency_s == pytest.approx(d.latency_s, rel=1e-12) and c.latency_s > 0
    return a


@pytest.mark.parametrize("pxn_on", [False, True])
@pytest.mark.parametrize("specs", [
    ["all"], ["block:8"], ["rail"], ["block:127"],  # 127 ranks: groups across nodes
    ["0-99"],  # a partial group: 12.5 nodes
    ["stride:2"],  # half of every node in each group: relays missing on half the rails
    ["block:8", "rail"],  # two group sets at once: every rank in two groups
])
def test_superpod_counted_equals_listed(superpod, specs, pxn_on):
    # 127 DGX H100 in 4 scalable units of 32 (the last 31: a partial last leaf), rail
    # optimized, 3 tiers
    check_same(superpod, alltoall(superpod, specs), pxn_on=pxn_on)


@pytest.mark.parametrize("name, specs", [
    ("dual-plane-ethernet", ["block:64", "0-300"]),  # two planes, rail optimized
    ("hgx-h100-server", ["all", "2-6"]),  # one server: no scale-out
    ("gb200-nvl72-cluster", ["block:96", "all"]),  # 72-GPU domains of 18 trays
    ("cloudmatrix384", ["block:64"]),  # supernode: pairs across systems of one domain
    ("mi300x-roce", ["all", "3-40"]),  # full-mesh scale-up
])
@pytest.mark.parametrize("pxn_on", [False, True])
def test_examples_counted_equal_listed(name, specs, pxn_on):
    fabric = example(name)
    for spec in specs:
        check_same(fabric, alltoall(fabric, [spec]), pxn_on=pxn_on)


@pytest.mark.parametrize("pxn_on", [False, True])
@pytest.mark.parametrize("text", [
    # not rail optimized, oversubscribed 3:1 at the leaf, a partial last leaf
    "system: toy-box\nsystems: 11\nscaleout:\n  switch: toy-switch-8\n"
    "  rail_optimized: false\n  oversubscription: ['3:1']\n",
    # rail optimized, 3 tiers, oversubscribed at both tiers
    "system: toy-box\nsystems: 24\nscaleout:\n  switch: toy-switch-8\n  tiers: 3\n"
    "  oversubscription: ['2:1', '2:1']\n",
    # two planes, not rail optimized
    "system: toy-box\nsystems: 12\nscaleout:\n  switch: toy-switch-8\n  planes: 2\n"
    "  rail_optimized: false\n",
    # one accelerator a system: no scale-up domain at all
    "system: toy-host\nsystems: 16\nscaleout:\n  switch: toy-switch-4\n",
    # one leaf switch: no tier above it
    "system: toy-host\nsystems: 6\nscaleout:\n  switch: toy-switch-8\n",
])
def test_toy_fabrics_counted_equal_listed(toy, text, pxn_on):
    fabric = toy(text)
    n = len(fabric.accelerators)
    for spec in ("all", f"0-{n - 2}", "stride:2"):
        check_same(fabric, alltoall(fabric, [spec]), pxn_on=pxn_on)


def test_groups_of_different_sizes_and_bytes_merge_into_one_counted_phase(superpod):
    fabric = superpod
    acc = fabric.accelerators
    traffic = collective_traffic(fabric, "alltoall", [acc[:20], acc[20:23], acc[500:900]],
                                 3e6, algorithm="direct")
    assert len(traffic.phases) == 1 and len(traffic.phases[0].blocks) == 3
    check_same(fabric, traffic, pxn_on=True)


def test_pxn_keeps_an_all_pairs_phase_unlisted_with_the_same_flows(superpod):
    traffic = alltoall(superpod, ["block:127", "rail"])
    moved = pxn(superpod, traffic)
    plain = pxn(superpod, listed(traffic))
    a, b = moved.phases[0], plain.phases[0]
    assert isinstance(a, AllPairsPhase) and "_listed" not in a.__dict__
    assert a.flows == b.flows > traffic.phases[0].flows
    assert a.total_bytes == pytest.approx(b.total_bytes, rel=1e-12)
    assert moved.notes == plain.notes
    for field in ("src", "dst", "bytes", "group"):  # listed on demand, in the same order
        assert np.array_equal(getattr(a, field), getattr(b, field))


def test_direct_alltoall_lists_no_pair_when_routed_and_timed(superpod):
    traffic = alltoall(superpod, ["all"])
    run = time_traffic(superpod, traffic)
    assert run.time_s > 0
    assert "_listed" not in traffic.phases[0].__dict__
    crossing = bisection_traffic(superpod, traffic)
    assert "_listed" not in traffic.phases[0].__dict__
    assert crossing is not None
    expected = bisection_traffic(superpod, listed(traffic))
    assert crossing.bytes == pytest.approx(expected.bytes, rel=1e-12)


@pytest.mark.parametrize("routing", ["hash", "dmodk"])
def test_per_flow_routings_list_the_pairs(superpod, routing):
    traffic = alltoall(superpod, ["block:127"])
    assert route_all_pairs(superpod, traffic.phases[0], routing=routing) is None
    check_same(superpod, traffic, pxn_on=True, routing=routing, counted=False)


def test_failed_links_list_the_pairs(superpod):
    names = superpod.nodes["name"].to_numpy()
    links = superpod.links
    spine = np.flatnonzero(links["tier"].astype(str).to_numpy() == "spine")[:2]
    failed = with_failures(superpod, link_names=[
        f"{names[links['src'].iat[r]]} -- {names[links['dst'].iat[r]]}" for r in spine])
    traffic = alltoall(failed, ["block:127"])
    assert route_all_pairs(failed, traffic.phases[0]) is None
    check_same(failed, traffic, pxn_on=True, counted=False)


def test_the_general_router_lists_the_pairs(toy):
    fabric = toy("system: toy-box\nsystems: 6\nscaleout:\n  switch: toy-switch-8\n")
    traffic = alltoall(fabric, ["all"])
    a = time_traffic(fabric, traffic, router="general")
    b = time_traffic(fabric, listed(traffic), router="structured")
    assert np.allclose(a.link_bytes, b.link_bytes, rtol=1e-9)
    assert a.phases[0].routed.inside is None


def test_a_group_index_on_two_rows_is_not_counted(superpod):
    acc = superpod.accelerators
    block = AllPairs(np.stack([acc[:16], acc[16:32]]), np.zeros(2, np.int32),
                     np.array([1e3, 2e3]))
    phase = AllPairsPhase((block,))
    assert decompose(superpod, phase) is None
    routed = route(superpod, phase)  # listed instead
    assert routed.inside is None
    assert routed.link_bytes.sum() > 0


def test_run_collective_counts_the_pairs_of_every_rank(superpod):
    run = run_collective(superpod, "alltoall", 2**30, algorithm="direct")
    phase = run.traffic.phases[0]
    assert phase.flows == 1016 * 1015
    assert "_listed" not in phase.__dict__
    assert run.timing.phases[0].routed.inside is not None
    auto = run_collective(superpod, "alltoall", 2**30)  # the search's bound lists none
    assert "_listed" not in auto.traffic.phases[0].__dict__
    assert auto.time_s == run.time_s


def test_a_relay_s_member_is_found_alike_by_table_and_by_sorting():
    """PXN's relay look-up (row, node) -> member: the table from node to member (each
    node in one row) and the sorted keys (nodes in several rows) give the same members,
    so the weights and every figure after them are the same bit for bit."""
    from topomodel.traffic.allpairs import _members_at

    rng = np.random.default_rng(7)
    node = rng.permutation(400)[:240]  # 240 members, each node once, 8 rows of 30
    row = np.repeat(np.arange(8), 30)
    picks = rng.integers(0, 240, 1000)
    found = _members_at(node, row, row[picks], node[picks])
    assert found is not None and (found == picks).all()  # the table
    # the same members plus one node again in another row: the sorted keys
    twice = _members_at(np.r_[node, node[:1]], np.r_[row, 9], row[picks], node[picks])
    assert twice is not None and (twice == found).all()
    assert _members_at(np.r_[node, node[:1]], np.r_[row, 9], np.array([9]), node[:1]
                       ).tolist() == [240]
    # a node that is not a member of the row asked: no answer either way
    other = (row[picks[0]] + 1) % 8
    for args in ((node, row), (np.r_[node, node[:1]], np.r_[row, 9])):
        assert _members_at(*args, np.array([other]), node[picks[:1]]) is None
        assert _members_at(*args, np.array([0]), np.array([400])) is None


@pytest.mark.parametrize("specs", [["block:127"], ["block:127", "rail"], ["stride:2"]])
def test_pxn_counts_are_the_listed_flows_exactly(superpod, specs):
    """Each member's weighted pairs across domains (what the router and the ideal time
    read) are, as whole numbers, the listed flows under PXN that leave its domain from
    it and that enter its domain to it, counted per group and node: the counts the
    speed-ups of the relay look-up must keep exactly."""
    phase = pxn(superpod, alltoall(superpod, specs)).phases[0]
    counts = decompose(superpod, phase)
    assert counts is not None and counts.moved > 0
    domain = superpod.nodes["domain"].to_numpy()
    src, dst, group = phase.src, phase.dst, phase.group.astype(np.int64)
    cross = (domain[src] != domain[dst]) | (domain[src] < 0)
    gid = np.concatenate([b.group for b in phase.blocks]).astype(np.int64)[counts.row]
    span = int(max(src.max(), dst.max())) + 1
    out = np.bincount(group[cross] * span + src[cross], minlength=(gid.max() + 1) * span)
    into = np.bincount(group[cross] * span + dst[cross], minlength=(gid.max() + 1) * span)
    assert np.array_equal(counts.out_pairs, out[gid * span + counts.node])
    assert np.array_equal(counts.in_pairs, into[gid * span + counts.node])


MEDIUM = """
name: 4,096 HGX B200 (the benchmarks' fabric)
system: hgx-b200
systems: 512
scaleout:
  kind: fat_tree
  nic: connectx-8
  switch: q3400
"""


@pytest.fixture(scope="module")
def medium():
    return build_fabric(*load_design("medium.yaml", text=MEDIUM))


def counted_and_listed(fabric, specs, size, pxn_on):
    """The phase as the router gets it (PXN applied or not), and the same flows listed."""
    traffic = alltoall(fabric, specs, size)
    if pxn_on:
        traffic = pxn(fabric, traffic)
    return traffic, listed(traffic)


@pytest.mark.parametrize("pxn_on", [False, True])
@pytest.mark.parametrize("design, specs, size", [
    ("superpod", ["block:127"], 127 * 2.0**16),  # groups across nodes, 3 tiers
    ("superpod", ["block:8", "rail"], 8 * 127 * 2.0**10),  # every rank in two groups
    ("superpod", ["stride:2"], 508 * 2.0**10),  # relays missing on half the rails
    ("medium", ["block:64"], 2.0**22),  # bench_route.py's All-to-All at 4,096 GPUs
    ("medium", ["block:512", "stride:8"], 2.0**24),
])
def test_counted_loads_and_times_are_the_listed_ones_bit_for_bit(request, design, specs,
                                                                 size, pxn_on):
    """Whole-number pair bytes: every sum of the counted path is exact, so its link
    bytes, time, ideal and latency are the listed pairs' routed by the structured
    router, to the last bit (the flows inside servers counted per node, PXN's relays
    per server cell)."""
    fabric = request.getfixturevalue(design)
    traffic, pairs = counted_and_listed(fabric, specs, size, pxn_on)
    phase = traffic.phases[0]
    counts = decompose(fabric, phase)
    assert counts is not None and np.array_equal(counts.pair_bytes,
                                                 np.round(counts.pair_bytes))
    # PXN moves nothing where no pair crosses rails between servers (block:8 and rail)
    assert counts.has_local and (counts.moved > 0) == (pxn_on and "rail" not in specs)
    counted = route_all_pairs(fabric, phase)
    assert counted is not None
    one_by_one = route(fabric, pairs.phases[0], router="structured")
    assert np.array_equal(counted.link_bytes, one_by_one.link_bytes)
    assert "local" not in counts.__dict__  # inside switched servers: counted, not listed
    model = TimeModel(pxn=pxn_on)
    a = time_traffic(fabric, traffic, time_model=model)
    b = time_traffic(fabric, pairs, time_model=model)
    assert (a.time_s, a.latency_s) == (b.time_s, b.latency_s)
    assert [p.ideal_s for p in a.phases] == [p.ideal_s for p in b.phases]
    assert [p.bandwidth_s for p in a.phases] == [p.bandwidth_s for p in b.phases]


@pytest.mark.parametrize("pxn_on", [False, True])
def test_counted_loads_are_the_listed_ones_within_rounding(superpod, pxn_on):
    """Pair bytes that are not whole numbers: a count times the bytes and the same
    bytes added one by one may differ in the last bit, never by more than 1e-12 of a
    link's bytes; against the general router (routing/general.py) too."""
    traffic, pairs = counted_and_listed(superpod, ["block:127", "0-99"], 1e6 / 3, pxn_on)
    phase = traffic.phases[0]
    counted = route_all_pairs(superpod, phase)
    assert counted is not None
    for router in ("structured", "general"):
        one_by_one = route(superpod, pairs.phases[0], router=router)
        np.testing.assert_allclose(counted.link_bytes, one_by_one.link_bytes, rtol=1e-12,
                                   atol=0)
    model = TimeModel(pxn=pxn_on)
    a = time_traffic(superpod, traffic, time_model=model)
    b = time_traffic(superpod, pairs, time_model=model)
    assert a.time_s == pytest.approx(b.time_s, rel=1e-12, abs=0)
    assert a.latency_s == b.latency_s


@pytest.mark.parametrize("specs", [["block:127"], ["block:8", "rail"], ["stride:2"]])
def test_flows_inside_domains_counted_per_node_are_the_listed_ones(superpod, specs):
    """What each node sends and receives inside its domain (counted: pairs per row and
    domain, PXN's first hops per server cell) is what the listed flows inside domains
    add up to, exactly; and :attr:`Decomposition.local`, listed when read, carries the
    same bytes between the same ends."""
    traffic, pairs = counted_and_listed(superpod, specs, 8 * 127 * 2.0**10, True)
    counts = decompose(superpod, traffic.phases[0])
    flows = pairs.phases[0]
    domain = superpod.nodes["domain"].to_numpy()
    inside = (domain[flows.src] == domain[flows.dst]) & (domain[flows.src] >= 0)
    n = len(superpod.nodes)
    src, dst, nbytes = flows.src[inside], flows.dst[inside], flows.bytes[inside]
    assert np.array_equal(counts.local_sent, np.bincount(src, weights=nbytes, minlength=n))
    assert np.array_equal(counts.local_received,
                          np.bincount(dst, weights=nbytes, minlength=n))
    local = counts.local
    assert np.array_equal(np.bincount(local.src * n + local.dst, weights=local.bytes,
                                      minlength=n * n),
                          np.bincount(src * n + dst, weights=nbytes, minlength=n * n))
    assert local.bytes.sum() == nbytes.sum()


def test_blocks_list_in_place_as_joined_per_pair_lists():
    """Blocks of different sizes, groups and bytes are listed straight into one set of
    arrays: the pairs, dtypes and order of every block's pairs listed one by one and
    joined."""
    blocks = [AllPairs(np.array([[4, 5, 6], [9, 8, 7]]), np.array([0, 3], np.int32),
                       np.array([2.0, 0.5])),
              AllPairs(np.array([[1, 2]], np.int32), np.array([5], np.int64),
                       np.array([7]))]
    expected: list[list] = [[], [], [], []]
    for b in blocks:
        for row, ranks in enumerate(b.ranks):
            for i, a in enumerate(ranks):
                for j, c in enumerate(ranks):
                    if i != j:
                        for k, v in enumerate((a, c, float(b.bytes[row]), b.group[row])):
                            expected[k].append(v)
    phase = AllPairsPhase(blocks)
    got = (phase.src, phase.dst, phase.bytes, phase.group)
    assert [a.dtype for a in got] == [np.int32, np.int32, np.float64, np.int32]
    assert [a.tolist() for a in got] == expected
    assert [a.tolist() for a in blocks[1].flows()] == [[1, 2], [2, 1], [7.0, 7.0], [5, 5]]
    empty = AllPairsPhase([])
    assert [a.dtype for a in (empty.src, empty.bytes, empty.group)] == [
        np.int64, np.float64, np.int32] and empty.src.size == 0


def wide(traffic):
    """The same traffic with every phase's flows listed, ends in int64 (the listing's
    type before it was narrowed)."""
    return Traffic(tuple(Phase(p.src.astype(np.int64), p.dst.astype(np.int64),
                               p.bytes.copy(), p.group.copy(), p.steps, p.label,
                               p.messages_per_step, p.efficiency)
                         for p in traffic.phases),
                   traffic.group_names, traffic.algorithm, traffic.notes, traffic.shapes)


@pytest.mark.parametrize("routing", ["ecmp", "hash", "dmodk"])
@pytest.mark.parametrize("pxn_on", [False, True])
@pytest.mark.parametrize("failed_spines", [0, 2])
def test_pairs_listed_in_int32_route_and_time_as_int64_ones_bit_for_bit(
        superpod, routing, pxn_on, failed_spines):
    """The listed pairs' int32 ends (the router, PXN's relays, the time model and the
    lost flows read them) give every figure of the same pairs with int64 ends, to the
    bit: per-flow routings and failed links list the pairs."""
    fabric = superpod
    if failed_spines:
        names = superpod.nodes["name"].to_numpy()
        links = superpod.links
        spine = np.flatnonzero(links["tier"].astype(str).to_numpy() == "spine")
        fabric = with_failures(superpod, link_names=[
            f"{names[links['src'].iat[r]]} -- {names[links['dst'].iat[r]]}"
            for r in spine[:failed_spines]])
    traffic = alltoall(fabric, ["block:127", "block:8"])
    model = TimeModel(pxn=pxn_on)
    ref = time_traffic(fabric, wide(traffic), time_model=model, routing=routing)
    runs = [time_traffic(fabric, listed(traffic), time_model=model, routing=routing)]
    assert traffic.phases[0].src.dtype == np.int32
    if routing != "ecmp" or failed_spines:  # the router lists the pairs: int32 ends
        traffic = alltoall(fabric, ["block:127", "block:8"])
        runs.append(time_traffic(fabric, traffic, time_model=model, routing=routing))
        assert traffic.phases[0].is_listed or pxn_on  # PXN's phase lists it
    for run in runs:
        assert np.array_equal(run.link_bytes, ref.link_bytes)
        assert (run.time_s, run.protocol, run.unroutable_flows, run.unroutable_bytes) == (
            ref.time_s, ref.protocol, ref.unroutable_flows, ref.unroutable_bytes)
        for a, b in zip(run.phases, ref.phases, strict=True):
            assert (a.bandwidth_s, a.latency_s, a.bottleneck) == (
                b.bandwidth_s, b.latency_s, b.bottleneck)
    # the ideal time of a listed phase reads its ends (an all-pairs one, its groups)
    assert [p.ideal_s for p in runs[0].phases] == [p.ideal_s for p in ref.phases]


def test_listed_ends_are_narrowed_only_where_every_node_number_fits():
    """int32 ends for node numbers below 2**31 - 1 (the bound asserted), the joined
    type otherwise; a block whose ranks do not fit the listing's type is refused, not
    wrapped."""
    group, size = np.array([0], np.int32), np.array([1.0])
    small = AllPairs(np.array([[0, 2**31 - 2]]), group, size)
    large = AllPairs(np.array([[0, 2**31 - 1]]), group, size)
    negative = AllPairs(np.array([[-1, 3]]), group, size)
    assert listed_node_dtype([small]) == np.int32
    assert listed_node_dtype([small, large]) == np.int64
    assert listed_node_dtype([negative]) == np.int64
    assert listed_node_dtype([AllPairs(np.array([[0, 1]], np.int16), group, size)]) == np.int16
    assert AllPairsPhase([small, large]).dst.tolist() == [2**31 - 2, 0, 2**31 - 1, 0]
    flows = (np.empty(2, np.int32), np.empty(2, np.int32), np.empty(2), np.empty(2, np.int32))
    with pytest.raises(ValueError, match="do not fit int32"):
        AllPairs(np.array([[0, 2**31]]), group, size).flows_into(flows, 0)

