"""Where PXN relays a flow: the :class:`Relays` table of one fabric and traffic, and how
it splits a flow that would cross rails into a scale-up hop to a relay on the
destination's rail and a scale-out hop from it (:mod:`topomodel.traffic.pxn` builds
the table; an :class:`~topomodel.traffic.phases.AllPairsPhase` applies it to its pairs)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

import numpy as np

from topomodel.arrays import search_sorted, sorted_distinct
from topomodel.traffic.phases import FlowArrays


@dataclass(frozen=True, eq=False)
class Relays:
    """Where PXN relays on one fabric for one traffic: per node the rail of the NIC
    serving it (-1 for none), its system and scale-up domain, and the sorted keys
    (group, system, rail) of the ranks that can relay with the relay of each.

    Called on listed flows, it splits them as :func:`pxn` does (an
    :class:`~topomodel.traffic.phases.AllPairsPhase` applies it to its pairs)."""

    rail: np.ndarray
    system: np.ndarray
    domain: np.ndarray
    systems: int
    rails: int
    keys: np.ndarray
    nodes: np.ndarray

    def find(self, want: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """For keys (group, system, rail) as numbers: whether each has a relay, and it
        (where it has one)."""
        if not len(self.keys) or not len(want):
            return np.zeros(len(want), bool), np.zeros(len(want), np.int64)
        pos = np.minimum(search_sorted(self.keys, want), len(self.keys) - 1)
        return self.keys[pos] == want, self.nodes[pos]

    def split(self, src: np.ndarray, dst: np.ndarray, group: np.ndarray,
              memo: dict[object, object] | None = None) -> tuple[np.ndarray, np.ndarray]:
        """The flows (indices) PXN sends through a relay, and the relay of each.
        ``memo`` (kept with the flows, :class:`~topomodel.traffic.phases.Rewrite`): the
        flows that cross rails and the distinct keys they want (:meth:`wanted`) kept
        there for every :class:`Relays` of the same wiring, which only looks up those
        keys (about one in 50 of the flows' at 98k) and maps them back to the flows."""
        if memo is None:
            cross, want = self.wanted(src, dst, group)
            found, via = self.find(want)
            return cross[found], via[found]
        cross, distinct, inverse = self._wanted_kept(src, dst, group, memo)
        found, via = self.find(distinct)
        if found.all():  # every key has a relay: every crossing flow is split
            return cross, via[inverse]
        picked = found[inverse]
        return cross[picked], via[inverse[picked]]

    def wanted(self, src: np.ndarray, dst: np.ndarray, group: np.ndarray
               ) -> tuple[np.ndarray, np.ndarray]:
        """The flows (indices) that cross rails between scale-up domains and the key
        (group, system of the source, rail of the destination) each would be relayed by:
        read off the wiring alone (rails, systems, domains), the same on every copy of a
        fabric, whichever ranks can relay."""
        cross = np.flatnonzero(crosses(src, dst, self.rail, self.domain))
        want = (group[cross].astype(np.int64) * self.systems
                + self.system[src[cross]]) * self.rails
        want += self.rail[dst[cross]]
        return cross, want

    def _wanted_kept(self, src: np.ndarray, dst: np.ndarray, group: np.ndarray,
                     memo: dict[object, object]
                     ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """:meth:`wanted` as (crossing flows, their distinct keys sorted, each flow's
        place among them), kept in ``memo`` by the wiring it reads: the very arrays
        (held in the entry, so their ids stay theirs; a fabric's copies share them) and
        the counts."""
        wiring = (self.rail, self.system, self.domain)
        key = ("pxn-wanted", *map(id, wiring), self.systems, self.rails)
        held = cast("tuple[object, tuple[np.ndarray, np.ndarray, np.ndarray]] | None",
                    memo.get(key))
        if held is None:
            cross, want = self.wanted(src, dst, group)
            distinct, inverse = _distinct(want)
            cross.setflags(write=False)  # handed out as the split flows of every copy
            held = (wiring, (cross, distinct, inverse))
            memo[key] = held
        return held[1]

    def __call__(self, src: np.ndarray, dst: np.ndarray, nbytes: np.ndarray,
                 group: np.ndarray, memo: dict[object, object] | None = None
                 ) -> FlowArrays:
        split, via = self.split(src, dst, group, memo)
        return apply_relays(src, dst, nbytes, group, split, via)


def crosses(src: np.ndarray, dst: np.ndarray, rail: np.ndarray, domain: np.ndarray
             ) -> np.ndarray:
    """Per flow: whether it joins NICs of two rails between scale-up domains."""
    rail_src, rail_dst, domain_src = rail[src], rail[dst], domain[src]
    return ((domain_src >= 0) & (rail_src >= 0) & (rail_dst >= 0) & (rail_src != rail_dst)
            & (domain_src != domain[dst]))


def apply_relays(src: np.ndarray, dst: np.ndarray, nbytes: np.ndarray, group: np.ndarray,
           split: np.ndarray, via: np.ndarray) -> FlowArrays:
    """Flows ``split`` sent to ``via`` first, then on from it."""
    if not len(split):
        return src, dst, nbytes, group
    # a split flow's first hop ends at the relay, and a second hop goes on from it
    return (_sources(src, via), _first_hops(dst, split, via), _appended(nbytes, split),
            _appended(group, split))


def _ends_type(ends: np.ndarray, via: np.ndarray) -> np.dtype:
    """The type of flow ends once relays join them: that of ``ends`` where every relay
    (a node number) fits it, as it does int32 ends below 2**31 (a listed All-to-All's):
    4 bytes an end kept, not widened to the relays' int64; else both types joined."""
    bounds = np.iinfo(ends.dtype)
    if bounds.min <= int(via.min()) and int(via.max()) <= bounds.max:
        return ends.dtype
    return np.result_type(ends, via)


def _sources(src: np.ndarray, via: np.ndarray) -> np.ndarray:
    """``np.concatenate([src, via])`` (not empty ``via``), in :func:`_ends_type`."""
    out = np.empty(len(src) + len(via), _ends_type(src, via))
    out[:len(src)] = src
    out[len(src):] = via
    return out


def _distinct(want: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct values of ``want``, sorted, and each entry's index among them
    (:func:`~topomodel.arrays.sorted_distinct`; the index int32 where it fits, as it is
    kept with the flows), both read-only."""
    distinct, inverse = sorted_distinct(want)
    inverse = inverse.astype(np.int32 if len(want) < 2**31 else np.int64, copy=False)
    for array in (distinct, inverse):
        array.setflags(write=False)
    return distinct, inverse


def _appended(values: np.ndarray, split: np.ndarray) -> np.ndarray:
    """``np.concatenate([values, values[split]])``, without the array in between."""
    out = np.empty(len(values) + len(split), values.dtype)
    out[:len(values)] = values
    np.take(values, split, out=out[len(values):])
    return out


def _first_hops(dst: np.ndarray, split: np.ndarray, via: np.ndarray) -> np.ndarray:
    """Each flow's end, a split flow's at its relay, then the split flows' ends (the
    second hops'): :func:`apply_relays`'s destinations."""
    out = np.empty(len(dst) + len(split), _ends_type(dst, via))
    out[:len(dst)] = dst
    out[split] = via
    if out.dtype == dst.dtype:
        np.take(dst, split, out=out[len(dst):])
    else:  # widened for a relay: take writes its own type only
        out[len(dst):] = dst[split]
    return out
