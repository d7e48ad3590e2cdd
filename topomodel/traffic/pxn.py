"""PXN: cross-rail scale-out traffic sent the way NCCL sends it on rail-optimized fabrics.

NCCL (2.12 and later, ``NCCL_PXN_DISABLE=0``, the default) sends a message to a GPU of
another node through the NIC on the *destination's* rail: if that NIC is not the
sender's own, the data first moves over NVLink to the sender node's GPU on the
destination's rail, whose NIC then sends it (NCCL's ``ncclTopoGetIntermediateRank``;
the blog "Doubling all2all Performance with NVIDIA Collective Communication Library
2.12"). On a rail-optimized fat-tree the scale-out hop then joins two NICs of one rail
and stays on that rail's leaves instead of climbing to the spines; on a rail-only
fabric it is the only way between rails.

:func:`pxn` applies that to any :class:`~topomodel.traffic.phases.Traffic`. As in NCCL,
the GPU in the middle must be a rank of the same communicator (NCCL's topology holds the
communicator's GPUs only): a flow whose group has no rank on the destination's rail in
the sender's system keeps its cross-rail path.

An :class:`~topomodel.traffic.phases.AllPairsPhase` stays unlisted: it gets the
:class:`Relays` as its rewrite (applied if its pairs are ever listed), and the pairs it
moves are counted from the groups (:mod:`topomodel.traffic.allpairs`). The rewritten
all-pairs phase is one object for every copy of a fabric (failed parts) whose relays
for it are the same (:func:`relayed_phases`): a failure that cuts no NIC off its rail
leaves them so, and the router's kept sections, keyed by the phase, are found again.
"""

from __future__ import annotations

import hashlib
import weakref
from dataclasses import dataclass

import numpy as np

from topomodel.arrays import distinct
from topomodel.fabric.tables import Fabric, ignores_capacities, ignores_failures
from topomodel.traffic.allpairs import decompose
from topomodel.traffic.phases import AllPairsPhase, Phase, Traffic
from topomodel.traffic.relaying import Relays, apply_relays, crosses


def pxn(fabric: Fabric, traffic: Traffic) -> Traffic:
    """``traffic`` with every cross-rail scale-out flow split as NCCL's PXN splits it
    (bytes per flow per step unchanged).

    A flow is split when its source and destination are accelerators in different
    scale-up domains, the source is in one, the NICs serving them
    (:attr:`Fabric.injection` ``.nic``) sit on different rails, and the flow's group has a
    rank in the source's system served by a NIC on the destination's rail (the lowest
    numbered if several, and never one whose own links or NIC's links have failed): it
    becomes source -> that rank (scale-up) and that rank ->
    destination (same-rail scale-out), each with the flow's bytes, group and phase. Other
    flows, and every phase's steps, label, messages and efficiency, are kept; a note says
    how many flows moved.

    Parameters
    ----------
    fabric
        The fabric the traffic runs on.
    traffic
        Any traffic (collectives, a training step, concurrent ones).

    Returns
    -------
    Traffic
        The same traffic object where nothing moves: on a fabric whose scale-out network
        is neither rail-optimized nor rail-only (a leaf there serves every rail, so PXN
        would change which NIC sends, not the path) or with no cross-rail flow.

    Examples
    --------
    >>> from topomodel.inputs.design import load_design
    >>> from topomodel.fabric.build import build_fabric
    >>> from topomodel.traffic.collectives import collective_traffic
    >>> pod = build_fabric(*load_design("examples/dgx-h100-superpod.yaml"))
    >>> pair = pod.accelerators[[7, 8]]  # GPU 7 of node 0 -> GPU 0 of node 1
    >>> group = pod.accelerators[[0, 7, 8]]
    >>> moved = pxn(pod, collective_traffic(pod, "sendrecv", [group], 1e6, algorithm="p2p"))
    >>> [(int(s), int(d)) for s, d in zip(moved.phases[0].src, moved.phases[0].dst)]
    [(0, 7), (7, 0), (0, 8)]
    """
    relays = relays_for(fabric, traffic)
    if relays is None:
        return traffic
    phases: list[Phase] = []
    moved = 0
    for p in traffic.phases:
        if isinstance(p, AllPairsPhase) and p.rewrite is None:
            phases.append(_shared_all_pairs(fabric, p, relays))
            moved += phases[-1].flows - p.flows
            continue
        split, via = relays.split(p.src, p.dst, p.group)
        if not len(split):
            phases.append(p)
            continue
        src, dst, nbytes, group = apply_relays(p.src, p.dst, p.bytes, p.group, split, via)
        phases.append(Phase(src, dst, nbytes, group, p.steps, p.label, p.messages_per_step,
                            p.efficiency))
        moved += len(split)
    if not moved:
        return traffic
    note = (f"pxn: {moved} cross-rail flow(s) (counted per phase) sent over scale-up to the"
            " group's GPU on the destination's rail, then on that rail (NCCL's PXN)")
    return Traffic(tuple(phases), traffic.group_names, traffic.algorithm,
                   (*traffic.notes, note), traffic.shapes)


def relays_for(fabric: Fabric, traffic: Traffic) -> Relays | None:
    """PXN's relays for ``traffic`` (see :func:`pxn`), or ``None`` where PXN moves
    nothing: a fabric neither rail-optimized nor rail-only, one rail, no phases, no
    flow between rails."""
    scaleout = fabric.structure.scaleout
    if not (scaleout.rail_optimized or scaleout.rail_only) or not traffic.phases:
        return None
    rails = fabric.derived(_rails)
    if rails.rails < 2:
        return None
    rail, system, domain = rails.rail, rails.system, rails.domain
    if not any(isinstance(p, AllPairsPhase) or crosses(p.src, p.dst, rail, domain).any()
               for p in traffic.phases):
        return None  # no flow crosses rails (an NVLS-Tree, a ring on one rail)
    table_key, table_node = _members(traffic, fabric.derived(_relays), system, rail,
                                     rails.systems, rails.rails)
    return Relays(rail, system, domain, rails.systems, rails.rails, table_key, table_node)


@dataclass(frozen=True)
class _Rails:
    """Per node: the NIC serving it and that NIC's rail (-1 for none), its system and
    scale-up domain; the counts of systems and rails; which nodes can relay or be
    relayed (an accelerator with a NIC, in a scale-up domain). The same on every copy
    of a fabric with failed parts."""

    nic: np.ndarray
    rail: np.ndarray
    system: np.ndarray
    domain: np.ndarray
    systems: int
    rails: int
    able: np.ndarray


@ignores_capacities
@ignores_failures
def _rails(fabric: Fabric) -> _Rails:
    nodes = fabric.node_arrays
    nic = np.full(len(nodes), -1, np.int64)
    nic[fabric.accelerators] = fabric.injection.nic
    rail = np.where(nic >= 0, nodes["rail"][np.maximum(nic, 0)], -1)
    system = nodes["system"].astype(np.int64)
    domain = nodes["domain"].copy()
    able = (rail >= 0) & (domain >= 0)
    for array in (nic, rail, system, domain, able):
        array.setflags(write=False)  # shared by every copy of the fabric
    return _Rails(nic, rail, system, domain, int(system.max()) + 1, int(rail.max()) + 1,
                  able)


@ignores_capacities
def _relays(fabric: Fabric) -> np.ndarray:
    """Per node: whether it can relay on this fabric, failed parts included (a node
    with a failed link, or whose NIC has one, relays nothing)."""
    rails = fabric.derived(_rails)
    able = rails.able
    links = fabric.link_arrays
    failed = links["failed"]
    if not failed.any():
        return able
    broken = np.zeros(len(able), bool)
    broken[links["src"][failed]] = True
    broken[links["dst"][failed]] = True
    return able & ~broken & ~broken[np.maximum(rails.nic, 0)]


@ignores_capacities
@ignores_failures
def relayed_phases(fabric: Fabric) -> weakref.WeakValueDictionary[bytes, Phase]:
    """The all-pairs phases :func:`pxn` rewrote, shared by the fabric's copies with
    failed parts, weakly (an entry lives while a step, a kept route or a kept router
    section holds its phase), keyed by the contents of the phase and of its
    :class:`Relays` (:func:`_content_key`): all that the rewrite reads besides the
    fabric's wiring (its rails, systems and domains, the same on every copy). A copy
    whose relays are the intact fabric's, or another copy's, then routes the same
    object, and a router section kept for it (keyed by the phase) is found again
    instead of the pairs being listed, relayed and routed again."""
    return weakref.WeakValueDictionary()


def release_listings(fabric: Fabric) -> int:
    """Drop the listed flows of every relayed phase alive for ``fabric`` and its copies
    (:func:`relayed_phases`) and of the phases whose pairs they relay
    (:meth:`~topomodel.traffic.phases.AllPairsPhase.forget_listed`): the kept router
    sections and the intact fabric's PXN traffics hold these phases for their identity,
    and the next step that routes one lists its pairs again, the same arrays bit for
    bit. For the steps of one job on copies of a fabric, run one after another (a
    goodput's degraded steps), once they are done: each relayed All-to-All stays listed
    while something holds its phase, 154 MB a copy (5.5 M flows) on the 98,304-NPU
    8-NPU-server example with DeepSeek-V3 at EP 64, and six of them were held at the
    peak of ``compare`` (``benchmarks/README.md``, "mem") before a step on other relays
    dropped the others' (:func:`_forget_other_relays`). Returns the bytes dropped (some
    may be held elsewhere too)."""
    phases = {id(p): p for p in list(fabric.derived(relayed_phases).values())
              if isinstance(p, AllPairsPhase)}
    return sum(p.forget_listed() for p in phases.values())


def _shared_all_pairs(fabric: Fabric, phase: AllPairsPhase, relays: Relays) -> Phase:
    """:func:`_all_pairs`, the same object for the same phase and relays on every copy
    of ``fabric`` (:func:`relayed_phases`)."""
    key = _content_key(phase, relays)
    shared = fabric.derived(relayed_phases)
    held = shared.get(key)
    if held is None:
        held = _all_pairs(fabric, phase, relays)
        shared[key] = held
    _forget_other_relays(shared, relays)
    return held


def _forget_other_relays(shared: weakref.WeakValueDictionary[bytes, Phase],
                         relays: Relays) -> None:
    """Drop the listed flows of the phases in ``shared`` relayed otherwise than by
    ``relays`` (not those of the pairs they relay, which every relayed version of a
    phase lists alike): a step routes the phases of its own copy's relays alone, so
    those of another copy's relays (the intact fabric's, where a part failed changes
    who relays) are listed again only by a later step with those relays. The listed
    flows of the relays in use stay from one step to the next (the degraded steps of a
    goodput whose failed part relays as the intact fabric does: most of them), with
    never two copies' listed at once, as :func:`release_listings` between steps
    left it."""
    for other in list(shared.values()):
        if (isinstance(other, AllPairsPhase) and isinstance(other.rewrite, Relays)
                and other.is_listed and not _same_relays(other.rewrite, relays)):
            other.forget_listed(with_listing=False)


def _same_relays(a: Relays, b: Relays) -> bool:
    """Whether two :class:`Relays` of copies of one fabric relay alike (their wiring
    arrays are the fabric's; their keys and relays are what the copies' failures
    change)."""
    return a is b or (np.array_equal(a.keys, b.keys) and np.array_equal(a.nodes, b.nodes))


def _content_key(phase: AllPairsPhase, relays: Relays) -> bytes:
    """A digest of everything :func:`_all_pairs` reads of ``phase`` and ``relays``: the
    blocks' ranks, groups and bytes (with their shapes and types), the phase's steps,
    label, messages and efficiency, and the relays' keys and nodes (their rail, system
    and domain arrays are the fabric's, the same on its copies)."""
    digest = hashlib.blake2b(digest_size=20)
    head = (phase.steps, phase.label, phase.messages_per_step, phase.efficiency,
            relays.systems, relays.rails, len(phase.blocks))
    digest.update(repr(head).encode())
    arrays = [a for b in phase.blocks for a in (b.ranks, b.group, b.bytes)]
    for array in (*arrays, relays.keys, relays.nodes):
        digest.update(f"{array.dtype.str}{array.shape}".encode())
        digest.update(np.ascontiguousarray(array).tobytes())
    return digest.digest()


def _all_pairs(fabric: Fabric, phase: AllPairsPhase, relays: Relays) -> Phase:
    """An all-pairs phase under PXN, still unlisted: the pairs it moves counted. Its
    pairs, when listed, are ``phase``'s (``listing``): the phases of every copy of the
    fabric list them once, and the relays' work on them that reads the wiring alone
    (:meth:`~topomodel.traffic.relaying.Relays.wanted`) is done once too."""
    moved = AllPairsPhase(phase.blocks, phase.steps, phase.label, phase.messages_per_step,
                          phase.efficiency, rewrite=relays, listing=phase)
    counts = decompose(fabric, moved)
    if counts is None:  # not countable: list the pairs and split them
        split, via = relays.split(phase.src, phase.dst, phase.group)
        if not len(split):
            return phase
        src, dst, nbytes, group = apply_relays(phase.src, phase.dst, phase.bytes, phase.group,
                                         split, via)
        return Phase(src, dst, nbytes, group, phase.steps, phase.label,
                     phase.messages_per_step, phase.efficiency)
    if not counts.moved:
        return phase
    counted = AllPairsPhase(phase.blocks, phase.steps, phase.label, phase.messages_per_step,
                            phase.efficiency, rewrite=relays, moved=counts.moved,
                            moved_bytes=counts.moved_bytes, listing=phase)
    decompose(fabric, counted, like=moved)  # the same counts: not made twice
    return counted


def _members(traffic: Traffic, able: np.ndarray, system: np.ndarray, rail: np.ndarray,
             systems: int, rails: int) -> tuple[np.ndarray, np.ndarray]:
    """Sorted keys (group, system, rail) of the ranks that can relay, and for each key
    the lowest-numbered such rank. A group's ranks are the accelerators its flows touch.

    Where every such accelerator belongs to one group only (one collective's groups), its
    group is read off an array over nodes, so an 8 M-flow All-to-All sorts nothing."""
    count = len(able)
    ends = []
    for p in traffic.phases:
        if isinstance(p, AllPairsPhase) and p.rewrite is None:  # every rank is an end
            pairs = [(b.ranks.ravel(), np.repeat(b.group, b.ranks.shape[1]))
                     for b in p.blocks]
        else:
            pairs = [(p.src, p.group), (p.dst, p.group)]
        for end, group in pairs:
            ok = able[end]
            ends.append((end, group) if ok.all() else (end[ok], group[ok]))
    owner = np.full(count, -1, np.int64)
    for end, group in ends:
        owner[end] = group
    if all((owner[end] == group).all() for end, group in ends):
        node = np.flatnonzero(owner >= 0)
        group_of = owner[node]
    else:  # an accelerator in several groups: (group, node) pairs, sorted
        member = distinct(np.concatenate([group.astype(np.int64) * count + end
                                           for end, group in ends]))
        group_of, node = np.divmod(member, count)
    key = (group_of * systems + system[node]) * rails + rail[node]
    order = np.lexsort((node, key))
    key, node = key[order], node[order]
    first = np.r_[True, key[1:] != key[:-1]] if len(key) else np.zeros(0, bool)
    return key[first], node[first]
