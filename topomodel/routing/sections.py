"""Sections of the router around failed parts that a failure elsewhere cannot change,
routed once and kept for every copy of the fabric that leaves their tiers intact.

The router of :mod:`topomodel.routing.survivors` routes a phase in sections: the flows
between accelerators and chips of one system (``scaleup``), between the systems of a
supernode over its switch levels (``supernode``), and through the scale-out network
(``scaleout``). A section reads the fabric's wiring (the same on every copy with failed
parts) and whether the link rows of its own tiers (:data:`SECTION_TIERS`) are live,
nothing else. On a copy whose failed rows all lie in other tiers, every row it reads is
live, so it gives the same loads, hops and lost flows on every such copy, bit for bit:
the first copy routes it, the others take what it kept (:func:`kept_section`). A
goodput's degraded steps fail one part per redundant tier, so the supernode section of
the data-parallel all-reduce is routed once for all the scale-out tiers' steps, and the
scale-out section once for all the supernode tiers'.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from topomodel.fabric.tables import Fabric, ignores_failures
from topomodel.inputs.records import documented
from topomodel.traffic.phases import Phase
from topomodel.vocabulary import SCALE_OUT_TIERS, SCALEUP_TIERS

SECTION_TIERS = {"scaleup": ("scaleup",), "supernode": SCALEUP_TIERS,
                 "scaleout": SCALE_OUT_TIERS}
"""The link tiers whose liveness each section of the router reads: in-system arcs
(accelerator - chip, or the full mesh's direct links); those and the supernode's switch
levels; the host links, NIC - leaf, leaf - spine and spine - core arcs."""

KEPT_SECTION_BYTES = documented(
    "sections.KEPT_SECTION_BYTES", 320 * 2**20,
    """Memory each fabric may hold in kept router sections (least recently used dropped
    first). A section is kept dense (8 bytes per link row of the span its loaded rows
    lie in) or as its loaded rows alone (16 bytes each), whichever is smaller: Llama 3
    70B at TP 8 x PP 4 on the 98,304-NPU 4K-supernode example keeps about 127 MB (the
    data-parallel all-reduce's supernode section, 54 MB; the TP collectives' in-system
    sections, 22 MB each; the scale-out sections of the all-reduce and the pipeline
    sends, 3-17 MB), so its ten degraded steps find all of it. A supernode section also
    holds each flow's planes (a bit per flow and plane, packed: a byte per flow, about
    5 MB for some 5 M relayed All-to-All flows over 7 planes of DeepSeek-V3 at EP 64 on
    that example),
    which its patched copies compare with; a scale-out section under hash routing each
    queue pair's plane (a byte each: about 10 MB for the 10 M queue pairs of that
    All-to-All on the 98,304-NPU 8-NPU-server example) and its leaf pairs, which its
    patched copies read (:mod:`topomodel.routing.plane_patch`).""")


@dataclass(frozen=True, eq=False)
class KeptSection:
    """One section's result: its bytes per link row (``values`` on the rows from
    ``first`` on when ``rows`` is None: every row, or a kept section's span, outside
    which every row is +0.0; else on ``rows`` alone) and its other outputs (hops, flows
    handed on), read-only. ``phase`` is held so that its ``id`` in the key stays its
    own."""

    phase: Phase
    rows: np.ndarray | None
    values: np.ndarray
    rest: tuple[np.ndarray, ...]
    kept: bool = True  # False: routed for this call alone, ``values`` free to take over
    span: tuple[int, int] | None = None  # the rows with bytes lie in it (None: unknown)
    first: int = 0  # the link row of ``values[0]`` where ``rows`` is None

    @property
    def size_bytes(self) -> int:
        """Memory held, bytes."""
        held = self.values.nbytes + sum(r.nbytes for r in self.rest)
        return held + (self.rows.nbytes if self.rows is not None else 0)

    def added_to(self, load: np.ndarray | None, n_links: int) -> np.ndarray:
        """``load`` plus this section's bytes per link row (``load`` None: none yet, so
        a new array); ``load`` is updated in place. Adding on the loaded rows alone
        gives the same sums (the others add 0)."""
        if self.rows is None:  # outside the span the values are +0.0: nothing to add
            lo, hi = self.span or (0, n_links)
            values = self.values[lo - self.first:hi - self.first]
            if load is None:
                if not self.kept:
                    return self.values
                load = np.zeros(n_links)
                load[lo:hi] = values
                return load
            np.add(load[lo:hi], values, out=load[lo:hi])
            return load
        if load is None:
            load = np.zeros(n_links)
            load[self.rows] = self.values
        else:
            load[self.rows] += self.values
        return load


@ignores_failures
def kept_sections(fabric: Fabric) -> OrderedDict[tuple[Any, ...], KeptSection]:
    """The sections :func:`kept_section` keeps, shared by the fabric's copies with
    failed parts: each holds only for copies that leave its tiers intact, and is only
    looked up on those."""
    return OrderedDict()


def failed_tiers(fabric: Fabric) -> frozenset[str]:
    """The link tiers with a failed row on ``fabric`` (found once per copy)."""
    return fabric.derived(_failed_tiers)


def _failed_tiers(fabric: Fabric) -> frozenset[str]:
    tier = fabric.link_arrays["tier"]
    codes = tier.codes[fabric.link_arrays["failed"]]
    return frozenset(str(t) for t in np.asarray(tier.categories)[np.unique(codes)])


def failed_rows(fabric: Fabric, alive: np.ndarray, tiers: tuple[str, ...]) -> np.ndarray:
    """The link rows not ``alive`` whose tier is one of ``tiers``, found by the tiers'
    codes (not a name per failed row: 12.6 MB of strings at 32k accelerators for a
    failed plane's 329,728)."""
    tier = fabric.link_arrays["tier"]
    failed = np.flatnonzero(~alive)
    return failed[np.isin(np.asarray(tier.categories), tiers)[tier.codes[failed]]]


@ignores_failures
def _tier_spans(fabric: Fabric) -> dict[str, tuple[int, int]]:
    """Per section, the span of link rows ``(lo, hi)`` of its tiers
    (:data:`SECTION_TIERS`), the only rows it puts bytes on; ``(0, 0)`` for none."""
    tier = fabric.link_arrays["tier"]
    codes = tier.codes
    names = [str(t) for t in tier.categories]
    out = {}
    for section, tiers in SECTION_TIERS.items():
        rows = np.flatnonzero(np.isin(codes, [names.index(t) for t in tiers if t in names]))
        out[section] = (int(rows[0]), int(rows[-1]) + 1) if len(rows) else (0, 0)
    return out


def kept_section(fabric: Fabric, section: str, phase: Phase, flows: np.ndarray,
                 options: tuple[Any, ...],
                 route: Callable[[], tuple[np.ndarray, ...]]) -> KeptSection:
    """``route()`` (the section's bytes per link row, then its other outputs) for the
    ``flows`` (indices into ``phase``) of ``section`` under ``options`` (routing, seed,
    queue pairs), kept and shared by every copy of ``fabric`` whose failed rows miss
    the section's tiers (:data:`SECTION_TIERS`); on other copies routed every time."""
    if failed_tiers(fabric) & set(SECTION_TIERS[section]):
        load, *rest = route()
        return KeptSection(phase, None, load, tuple(rest), kept=False,
                           span=fabric.derived(_tier_spans)[section])
    return intact_section(fabric, section, phase, flows, options, route)


MARKED_FLOWS = 4096
"""From this many flows on, a rising list of flows is hashed as a bit per flow of the
phase (:func:`flows_digest`): at 5.5 M of a phase's 6.2 M flows, 0.8 MB to hash instead
of 44 MB, 0.011 s against 0.053 s on this project's machine."""


def flows_digest(flows: np.ndarray, phase_flows: int) -> bytes:
    """A digest of the indices ``flows`` (each below ``phase_flows``) naming the set and
    order they hold: a strictly rising list (as selections of a phase's flows are) by
    its marks, a bit per flow of the phase, else by its values.

    Examples
    --------
    >>> flows_digest(np.arange(5000), 6000) == flows_digest(np.arange(5000), 6000)
    True
    >>> flows_digest(np.arange(5000), 6000) == flows_digest(np.arange(5000)[::-1], 6000)
    False
    """
    flows = np.ascontiguousarray(flows)
    digest = hashlib.blake2b(digest_size=16)
    if len(flows) >= MARKED_FLOWS and flows[0] >= 0 and flows[-1] < phase_flows and bool(
            (flows[1:] > flows[:-1]).all()):
        marks = np.zeros(phase_flows, bool)
        marks[flows] = True
        digest.update(b"marks")
        digest.update(np.packbits(marks).tobytes())
    else:
        digest.update(b"values")
        digest.update(flows.data)
    return digest.digest()


def intact_section(fabric: Fabric, section: str, phase: Phase, flows: np.ndarray,
                   options: tuple[Any, ...],
                   route: Callable[[], tuple[np.ndarray, ...]]) -> KeptSection:
    """The section as every copy that leaves its tiers intact routes it: the kept one,
    else ``route()``, which must route it so (on such a copy, or with every arc live),
    kept. Up to :data:`KEPT_SECTION_BYTES`."""
    key = _key(section, phase, flows, options)
    kept = fabric.derived(kept_sections)
    hit = kept.get(key)
    if hit is not None and hit.phase is phase:
        kept.move_to_end(key)
        return hit
    load, *outputs = route()
    rest = [_owned(array) for array in outputs]
    rows = np.flatnonzero(load != 0)  # the same rows: through a mask is faster
    span = (int(rows[0]), int(rows[-1]) + 1) if len(rows) else (0, 0)
    sparse = rows.nbytes + 8 * len(rows) < 8 * (span[1] - span[0])
    # dense: the span's rows alone (a supernode section's lie in its tiers' rows)
    values = load[rows] if sparse else load[span[0]:span[1]].copy()
    del load
    entry = KeptSection(phase, rows if sparse else None, values, tuple(rest), span=span,
                        first=span[0])
    for array in (entry.values, *entry.rest, *((rows,) if sparse else ())):
        array.setflags(write=False)
    kept[key] = entry
    total = sum(e.size_bytes for e in kept.values())
    while total > KEPT_SECTION_BYTES and len(kept) > 1:
        _, dropped = kept.popitem(last=False)
        total -= dropped.size_bytes
    return entry


def kept_intact(fabric: Fabric, section: str, phase: Phase, flows: np.ndarray,
                options: tuple[Any, ...]) -> KeptSection | None:
    """The section :func:`intact_section` keeps for these arguments, where a copy has
    routed it already, else None (nothing routed; the order of the kept ones as it
    was)."""
    hit = fabric.derived(kept_sections).get(_key(section, phase, flows, options))
    return hit if hit is not None and hit.phase is phase else None


def _key(section: str, phase: Phase, flows: np.ndarray,
         options: tuple[Any, ...]) -> tuple[Any, ...]:
    """A kept section's key: the section, the phase (by identity), its flows and the
    routing options."""
    return (section, id(phase), len(flows), flows_digest(flows, phase.flows), options)


def _owned(array: np.ndarray) -> np.ndarray:
    """``array`` itself, or a copy where it is a view of a larger array (a router's
    ``flows[:0]`` of no flows cut, say): a kept view holds all of its base, the flows
    of the section (134 MB per kept section for a 98k relayed All-to-All's in-system
    flows), which :attr:`KeptSection.size_bytes` does not count. The same values.

    Examples
    --------
    >>> flows = np.arange(10)
    >>> _owned(flows[:0]).base is None, _owned(flows) is flows
    (True, True)
    """
    base = array
    while isinstance(base.base, np.ndarray):
        base = base.base
    return array.copy() if base is not array and base.nbytes > array.nbytes else array
