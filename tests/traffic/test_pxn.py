"""PXN: cross-rail flows relayed over scale-up to the GPU on the destination's rail."""

from pathlib import Path

import numpy as np
import pytest

from topomodel.fabric.build import build_fabric
from topomodel.inputs.design import load_design
from topomodel.routing import route
from topomodel.traffic.collectives import collective_traffic
from topomodel.traffic.phases import concurrent
from topomodel.traffic.pxn import pxn
from topomodel.traffic.relaying import apply_relays

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
S = 1e6


@pytest.fixture(scope="module")
def superpod():
    return build_fabric(*load_design(EXAMPLES / "dgx-h100-superpod.yaml"))


def rails(fabric):
    """The rail of the NIC serving each node (-1 for nodes that are not accelerators)."""
    nic = np.full(len(fabric.nodes), -1)
    nic[fabric.accelerators] = fabric.injection.nic
    return np.where(nic >= 0, fabric.nodes["rail"].to_numpy()[np.maximum(nic, 0)], -1)


def scaleout(fabric, p):
    """Flows between scale-up domains."""
    domain = fabric.nodes["domain"].to_numpy()
    return domain[p.src] != domain[p.dst]


def spine_bytes(fabric, traffic):
    spine = (fabric.links["tier"] == "spine").to_numpy()
    return sum(float(route(fabric, p).link_bytes[spine].sum()) for p in traffic.phases)


@pytest.fixture(scope="module")
def alltoall(superpod):
    """A direct All-to-All over 4 whole DGX H100 nodes of one scalable unit: 7 of every 8
    flows between nodes cross rails."""
    group = superpod.accelerators[:32]
    return collective_traffic(superpod, "alltoall", [group], 32 * S, algorithm="direct")


def test_rail_crossing_alltoall_leaves_the_spines(superpod, alltoall):
    assert spine_bytes(superpod, alltoall) > 0  # cross-rail: leaf -> spine -> leaf
    moved = pxn(superpod, alltoall)
    assert spine_bytes(superpod, moved) == 0  # every scale-out hop on one rail's leaf
    assert "pxn: 672 cross-rail flow(s)" in moved.notes[-1]  # 32 x 24 x 7/8


def test_every_scale_out_flow_is_same_rail(superpod, alltoall):
    rail = rails(superpod)
    (p,) = pxn(superpod, alltoall).phases
    out = scaleout(superpod, p)
    assert out.sum() == 32 * 24  # as many scale-out flows as before, each on one rail
    assert (rail[p.src[out]] == rail[p.dst[out]]).all()


def test_bytes_are_conserved(superpod, alltoall):
    """Every destination receives what it did from the network, every source node sends
    what it did, each relayed flow appears once on scale-out and once on scale-up."""
    (before,) = alltoall.phases
    (after,) = pxn(superpod, alltoall).phases
    nodes = len(superpod.nodes)
    system = superpod.nodes["system"].to_numpy()
    for p_out in (before, after):
        assert p_out.steps == before.steps and p_out.label == before.label
    out_b, out_a = scaleout(superpod, before), scaleout(superpod, after)
    np.testing.assert_allclose(
        np.bincount(after.dst[out_a], weights=after.bytes[out_a], minlength=nodes),
        np.bincount(before.dst[out_b], weights=before.bytes[out_b], minlength=nodes))
    np.testing.assert_allclose(
        np.bincount(system[after.src[out_a]], weights=after.bytes[out_a]),
        np.bincount(system[before.src[out_b]], weights=before.bytes[out_b]))
    relayed = after.flows - before.flows
    assert relayed == 672
    assert after.total_bytes == pytest.approx(before.total_bytes + relayed * 32 * S / 32)
    # what each rank receives in the end is unchanged once the relays pass it on
    recv = np.bincount(after.dst, weights=after.bytes, minlength=nodes)
    sent = np.bincount(after.src, weights=after.bytes, minlength=nodes)
    recv_before = np.bincount(before.dst, weights=before.bytes, minlength=nodes)
    sent_before = np.bincount(before.src, weights=before.bytes, minlength=nodes)
    np.testing.assert_allclose(recv - sent, recv_before - sent_before)


def test_relay_is_the_source_nodes_gpu_on_the_destination_rail(superpod):
    acc = superpod.accelerators
    group = acc[[0, 3, 13]]  # 0 and 3 on node 0, 13 = GPU 5 of node 1
    t = collective_traffic(superpod, "alltoall", [group], 3 * S, algorithm="direct")
    (p,) = pxn(superpod, t).phases
    pairs = set(zip(p.src.tolist(), p.dst.tolist(), strict=True))
    # node 0 has no rank on rail 5: its flows to GPU 13 keep their own NICs; GPU 13's
    # flows to GPUs 0 and 3 go through GPU 13's node's rank on rail 0 or 3: none either
    assert pairs == {(0, 3), (3, 0), (0, 13), (3, 13), (13, 0), (13, 3)}
    assert pxn(superpod, t) is t  # nothing moved: the same traffic
    group = acc[[0, 3, 8, 11]]  # rails 0 and 3 on both nodes
    t = collective_traffic(superpod, "alltoall", [group], 4 * S, algorithm="direct")
    (p,) = pxn(superpod, t).phases
    via = {(s, d) for s, d in zip(p.src.tolist(), p.dst.tolist(), strict=True)}
    assert {(0, 3), (3, 11), (3, 0), (0, 8)} <= via  # 0 -> 11 via 3; 3 -> 8 via 0
    assert (0, 11) not in via and (3, 8) not in via


def test_a_failed_gpu_relays_nothing(superpod, alltoall):
    """PXN never relays through an accelerator whose links failed: the flows it cannot
    deliver are those with PXN off (before, flows were relayed through it and lost)."""
    from topomodel.fabric.failures import with_failures

    broken = with_failures(superpod, ["sys000/acc3"])
    moved = pxn(broken, alltoall)
    lost_pxn = sum(len(route(broken, p).unroutable) for p in moved.phases)
    lost_direct = sum(len(route(broken, p).unroutable) for p in alltoall.phases)
    assert lost_pxn == lost_direct > 0
    (p,) = moved.phases
    failed = broken.node_number("sys000/acc3")
    own = (p.src == failed) | (p.dst == failed)
    assert own.sum() == 2 * 31  # its own flows only: nothing is relayed through it


def test_channel_rings_and_same_rail_traffic_are_unchanged(superpod):
    ring = collective_traffic(superpod, "allreduce", [superpod.accelerators[:24]], S,
                              algorithm="ring")
    assert pxn(superpod, ring) is ring  # channel c already runs rail c to rail c
    dp = collective_traffic(superpod, "allreduce", [superpod.accelerators[3::8][:16]], S,
                            algorithm="tree")
    assert pxn(superpod, dp) is dp


def test_groups_stay_apart_in_concurrent_traffic(superpod):
    """Two traffics over the same ranks (a step's groups): each relays through its own
    group's ranks, and the phase structure and shapes are kept."""
    acc = superpod.accelerators
    a = collective_traffic(superpod, "alltoall", [acc[:16]], S, algorithm="direct")
    b = collective_traffic(superpod, "sendrecv", [acc[[7, 8]]], S, algorithm="p2p")
    both = concurrent([a, b])
    moved = pxn(superpod, both)
    assert moved.shapes == both.shapes and moved.group_names == both.group_names
    (p,) = moved.phases
    pair = p.group == 1
    # the sendrecv group holds only GPUs 7 and 8: no rank of it on rail 0 in node 0
    assert sorted(zip(p.src[pair].tolist(), p.dst[pair].tolist(), strict=True)) == [(7, 8)]
    rail = rails(superpod)
    out = scaleout(superpod, p) & (p.group == 0)
    assert (rail[p.src[out]] == rail[p.dst[out]]).all()


def test_fabrics_that_are_not_rail_optimized_are_left_alone():
    fabric = build_fabric(*load_design(EXAMPLES / "llama3-24k-roce.yaml"))
    assert not fabric.structure.scaleout.rail_optimized
    t = collective_traffic(fabric, "alltoall", [fabric.accelerators[:16]], S,
                           algorithm="direct")
    assert pxn(fabric, t) is t


def test_rail_only_fabrics_route_cross_rail_traffic_by_pxn(toy):
    fabric = toy("system: toy-box\nsystems: 4\nscaleout:\n  kind: rail_only\n"
                 "  switch: toy-switch-8\n")
    acc = fabric.accelerators
    t = collective_traffic(fabric, "alltoall", [acc[:8]], S, algorithm="direct")
    moved = pxn(fabric, t)
    (p,) = moved.phases
    rail = rails(fabric)
    out = scaleout(fabric, p)
    assert out.any() and (rail[p.src[out]] == rail[p.dst[out]]).all()
    assert len(route(fabric, p).unroutable) == 0


def test_the_time_model_sends_by_pxn_unless_told_not_to(superpod, alltoall):
    from topomodel.analysis.collectives.timing import TimeModel, time_traffic

    spine = (superpod.links["tier"] == "spine").to_numpy()
    on = time_traffic(superpod, alltoall)
    off = time_traffic(superpod, alltoall, time_model=TimeModel(pxn=False))
    assert on.link_bytes[spine].sum() == 0 and off.link_bytes[spine].sum() > 0
    # the same bytes leave each GPU either way; PXN adds the NVLink hop to the relay
    scaleup = (superpod.links["tier"] == "scaleup").to_numpy()
    assert on.link_bytes[scaleup].sum() > off.link_bytes[scaleup].sum()


SMALL_POD = """name: two rail-optimized units of DGX H100
system: dgx-h100
systems: 16
scaleout:
  kind: fat_tree
  switch: qm9700
  unit: 8
  rail_optimized: true
"""
# a spine cuts no NIC off its rail (the relays stay the intact fabric's); a leaf and a
# NIC do (the NICs on them relay nothing)
DEGRADED_PARTS = [("spine0", True), ("leaf0", False), ("sys00/nic0", False)]


@pytest.fixture
def small_pod(tmp_path):
    path = tmp_path / "pod.yaml"
    path.write_text(SMALL_POD)
    return lambda: build_fabric(*load_design(path))


def ep_alltoall(fabric):
    """A direct All-to-All in 4 groups of 32 GPUs (4 nodes each): mostly cross-rail."""
    groups = fabric.accelerators.reshape(4, 32)
    return collective_traffic(fabric, "alltoall", list(groups), 32 * S, algorithm="direct")


def test_copies_with_the_intact_relays_share_the_relayed_all_to_all(small_pod):
    from topomodel.analysis.reliability.goodput import with_part_failed

    fabric = small_pod()
    intact = pxn(fabric, ep_alltoall(fabric)).phases[0]
    for part, same_relays in DEGRADED_PARTS:
        copy = with_part_failed(fabric, part)
        shared = pxn(copy, ep_alltoall(copy)).phases[0]
        assert (shared is intact) == same_relays, part
        # bit for bit what a fresh fabric, with nothing shared, routes
        fresh_fabric = small_pod()
        fresh_copy = with_part_failed(fresh_fabric, part)
        fresh = pxn(fresh_copy, ep_alltoall(fresh_copy)).phases[0]
        assert fresh is not shared
        ours, theirs = route(copy, shared), route(fresh_copy, fresh)
        assert np.array_equal(ours.link_bytes, theirs.link_bytes), part
        assert np.array_equal(ours.hops, theirs.hops), part
        assert np.array_equal(ours.unroutable, theirs.unroutable), part


def test_degraded_steps_that_reuse_the_relayed_all_to_all_equal_fresh_ones(
        small_pod, monkeypatch):
    import topomodel.routing.survivors as survivors
    from topomodel.analysis.reliability.goodput import with_part_failed
    from topomodel.analysis.training.step import step_time
    from topomodel.inputs.parts import Model
    from topomodel.traffic.layout import Layout

    routed = []
    scaleup_paths = survivors.scaleup_paths
    monkeypatch.setattr(survivors, "scaleup_paths",
                        lambda *a, **k: routed.append(1) or scaleup_paths(*a, **k))
    fabric = small_pod()
    model = fabric.catalog.get("deepseek-v3", Model)
    layout = Layout(dp=128, ep=32, global_batch=256, zero=1)
    step_time(fabric, model, layout)
    parts = [*DEGRADED_PARTS, ("spine1", True)]
    counts, steps = [], []
    for part, _ in parts:
        before = len(routed)
        steps.append(step_time(with_part_failed(fabric, part), model, layout))
        counts.append(len(routed) - before)
    # the second spine finds every in-system section the first kept: nothing routed
    assert counts[-1] == 0 and counts[0] > 0
    for (part, _), ours in zip(parts, steps, strict=True):
        fresh_fabric = small_pod()
        theirs = step_time(with_part_failed(fresh_fabric, part), model, layout)
        assert ours.step_time_s == theirs.step_time_s, part
        assert [(c.kind, c.algorithm, c.time_s) for c in ours.comm] == [
            (c.kind, c.algorithm, c.time_s) for c in theirs.comm], part


def test_copies_list_the_all_to_all_once_and_relay_it_as_listing_afresh(small_pod,
                                                                      monkeypatch):
    """The relayed All-to-All of every copy reads the one listing of its unrelayed
    phase (and the relays' keys of it, kept with it), and lists, bit for bit, what
    relaying pairs listed afresh gives."""
    from topomodel.analysis.reliability.goodput import with_part_failed
    from topomodel.traffic.phases import AllPairs, AllPairsPhase

    fabric = small_pod()
    traffic = ep_alltoall(fabric)
    (base,) = traffic.phases
    listed = []
    flows_into = AllPairs.flows_into
    monkeypatch.setattr(AllPairs, "flows_into",
                        lambda self, *a: listed.append(1) or flows_into(self, *a))
    wanted = []
    relays_type = type(pxn(fabric, traffic).phases[0].rewrite)
    want = relays_type.wanted
    monkeypatch.setattr(relays_type, "wanted",
                        lambda self, *a: wanted.append(1) or want(self, *a))
    for part in ["", *(p for p, _ in DEGRADED_PARTS)]:
        copy = with_part_failed(fabric, part)
        (relayed,) = pxn(copy, traffic).phases
        assert isinstance(relayed, AllPairsPhase) and relayed.listing is base, part
        alone = AllPairsPhase(base.blocks, base.steps, base.label, base.messages_per_step,
                              base.efficiency, rewrite=relayed.rewrite)
        for ours, theirs in zip((relayed.src, relayed.dst, relayed.bytes, relayed.group),
                                (alone.src, alone.dst, alone.bytes, alone.group),
                                strict=True):
            assert ours.dtype == theirs.dtype and np.array_equal(ours, theirs), part
    # the shared listing once, then one afresh per copy (the oracle); likewise the keys
    copies = 1 + len(DEGRADED_PARTS)
    assert len(listed) == 1 + copies and len(wanted) == 1 + copies


def test_a_listing_is_of_the_same_blocks_unrewritten(superpod, alltoall):
    from topomodel.traffic.phases import AllPairsPhase

    (relayed,) = pxn(superpod, alltoall).phases
    (base,) = alltoall.phases
    with pytest.raises(ValueError, match="listing"):
        AllPairsPhase(base.blocks, rewrite=relayed.rewrite, listing=relayed)
    other = AllPairsPhase(base.blocks)
    with pytest.raises(ValueError, match="listing"):
        AllPairsPhase(base.blocks[:0], rewrite=relayed.rewrite, listing=other)


def test_relaying_through_the_listing_s_memo_splits_as_afresh(small_pod):
    """Relaying through the listing's memo looks each distinct key up once and maps it
    back to the flows: the flows split and their relays are the general path's, on
    copies whose relays all exist (a spine) and on copies missing some (a leaf, a
    NIC)."""
    from topomodel.analysis.reliability.goodput import with_part_failed

    fabric = small_pod()
    traffic = ep_alltoall(fabric)  # one traffic on every copy, as a step's
    (base,) = traffic.phases
    splits = {}
    for part in ["", "spine0", "leaf0", "sys00/nic0"]:
        copy = with_part_failed(fabric, part)
        relays = pxn(copy, traffic).phases[0].rewrite
        kept = relays.split(base.src, base.dst, base.group, base._memo)
        fresh = relays.split(base.src, base.dst, base.group)
        for ours, theirs in zip(kept, fresh, strict=True):
            assert ours.dtype == theirs.dtype and np.array_equal(ours, theirs), part
        splits[part] = len(kept[0])
    assert splits["spine0"] == splits[""] > splits["leaf0"] and splits["sys00/nic0"] < splits[""]


def test_released_listings_are_listed_again_bit_for_bit(small_pod):
    """:func:`release_listings` drops the listed pairs of every relayed phase alive
    (and of the phase they relay); reading them again lists the same arrays."""
    from topomodel.analysis.reliability.goodput import with_part_failed
    from topomodel.traffic.pxn import release_listings

    fabric = small_pod()
    traffic = ep_alltoall(fabric)
    (base,) = traffic.phases
    relayed = [pxn(copy, traffic).phases[0] for copy in
               (with_part_failed(fabric, part) for part in ["", "leaf0"])]
    before = [(p.src.copy(), p.dst.copy(), p.bytes.copy(), p.group.copy())
              for p in relayed]
    assert base.is_listed and all(p.is_listed for p in relayed)
    assert release_listings(fabric) > 0
    assert not base.is_listed and not any(p.is_listed for p in relayed)
    assert release_listings(fabric) == 0  # nothing listed is left
    for p, arrays in zip(relayed, before, strict=True):
        for ours, theirs in zip((p.src, p.dst, p.bytes, p.group), arrays, strict=True):
            assert ours.dtype == theirs.dtype and np.array_equal(ours, theirs)


def test_a_phase_on_other_relays_drops_the_listed_pairs_of_the_relays_before(small_pod):
    """The listed pairs of a relayed phase stay while copies relay alike (a failed
    spine relays as the intact fabric does: the same phase, still listed); a copy that
    relays otherwise (a failed leaf) drops them when it takes its own phase, but not
    the pairs they relay, which every version lists alike."""
    from topomodel.analysis.reliability.goodput import with_part_failed

    fabric = small_pod()
    traffic = ep_alltoall(fabric)
    (base,) = traffic.phases
    intact = pxn(fabric, traffic).phases[0]
    listed = intact.src.copy()
    assert pxn(with_part_failed(fabric, "spine0"), traffic).phases[0] is intact
    assert intact.is_listed
    other = pxn(with_part_failed(fabric, "leaf0"), traffic).phases[0]
    assert other is not intact and not intact.is_listed and base.is_listed
    assert np.array_equal(intact.src, listed)  # listed again, the same pairs
    assert not other.is_listed  # the relays of the phase read last dropped the others'


def test_degraded_steps_with_listings_released_between_equal_fresh_ones(small_pod):
    """A goodput's serial degraded steps release the listings between steps: each step
    (its relayed All-to-All listed again where its kept section is found) equals a
    step on a fresh fabric."""
    from topomodel.analysis.reliability.goodput import with_part_failed
    from topomodel.analysis.training.step import step_time
    from topomodel.inputs.parts import Model
    from topomodel.traffic.layout import Layout
    from topomodel.traffic.pxn import release_listings

    fabric = small_pod()
    model = fabric.catalog.get("deepseek-v3", Model)
    layout = Layout(dp=128, ep=32, global_batch=256, zero=1)
    step_time(fabric, model, layout)
    released = []
    for part in [p for p, _ in DEGRADED_PARTS] + ["spine1"]:
        released.append(release_listings(fabric))
        ours = step_time(with_part_failed(fabric, part), model, layout)
        theirs = step_time(with_part_failed(small_pod(), part), model, layout)
        assert ours.step_time_s == theirs.step_time_s, part
        assert [(c.kind, c.algorithm, c.time_s) for c in ours.comm] == [
            (c.kind, c.algorithm, c.time_s) for c in theirs.comm], part
    # each degraded step left its relayed All-to-All listed (the intact step routes it
    # from its groups here, unlisted)
    assert all(released[1:]), released


@pytest.mark.parametrize("ends", [np.int32, np.int64])
def test_relayed_ends_keep_their_type_where_the_relays_fit(ends):
    """The relayed flows are the concatenation they replace, value for value: int32 ends
    (a listed All-to-All's) stay int32 where every relay fits, int64 ones stay int64;
    a relay past int32 widens the ends, never wraps."""
    src, dst = np.array([0, 4, 9, 2], ends), np.array([5, 1, 3, 7], ends)
    nbytes, group = np.array([1.0, 2.0, 3.0, 4.0]), np.array([0, 0, 1, 1], np.int32)
    split = np.array([1, 3])
    for via, wide in ((np.array([11, 12]), False), (np.array([11, 2**31]), True)):
        got = apply_relays(src, dst, nbytes, group, split, via)
        first = dst.astype(np.int64)
        first[split] = via
        want = (np.concatenate([src.astype(np.int64), via]),
                np.concatenate([first, dst[split]]),
                np.concatenate([nbytes, nbytes[split]]),
                np.concatenate([group, group[split]]))
        assert [a.tolist() for a in got] == [a.tolist() for a in want]
        assert got[0].dtype == got[1].dtype == (np.int64 if wide else ends)
        assert got[2].dtype == np.float64 and got[3].dtype == np.int32

