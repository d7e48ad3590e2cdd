"""Communicator groups as the collective schedules take them: checked, named, and held
as 2-D blocks of one group size each (:class:`GroupBlocks`); no list of small arrays
travels past :func:`group_blocks`."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, TypeAlias

import numpy as np

from topomodel.arrays import rows_sorted
from topomodel.errors import CollectiveError as CollectiveError
from topomodel.errors import NotApplicable as NotApplicable
from topomodel.fabric.tables import Fabric
from topomodel.traffic.channels import Channels, PartLayout, channels, domain_parts
from topomodel.traffic.phases import Phase
from topomodel.vocabulary import COLLECTIVES as COLLECTIVES

Groups: TypeAlias = np.ndarray
"""Communicators of one size, the group type every collective takes: a 2-D int array
of accelerator node numbers, a row per group, ranks in rank order along the row."""

GroupsLike: TypeAlias = np.ndarray | Sequence[np.ndarray]
"""What :func:`group_blocks` accepts: :data:`Groups`, or for groups of different sizes a
sequence of them (each element a 2-D block of one size, or one group as a 1-D array),
numbered row by row in the order given."""


@dataclass(frozen=True, eq=False)
class GroupBlocks:
    """Checked communicators of one group set on one fabric, as 2-D blocks of one group
    size each (sizes in order of first appearance): ``blocks[k][r, i]`` is rank i of
    group ``ids[k][r]``, its index among all ``count`` groups as the caller listed them.

    What is derived from a block (its domain parts, its NCCL channels) is made once and
    kept with it (:meth:`block`), so the candidates of an algorithm search share it.
    """

    fabric: Fabric
    ids: tuple[np.ndarray, ...]  # int32 per block
    blocks: tuple[np.ndarray, ...]  # int64 (groups, ranks) per block
    count: int
    _views: dict[int, dict[str, Any]] = field(default_factory=dict, repr=False)

    @property
    def sizes(self) -> np.ndarray:
        """Ranks per group, by group index."""
        sizes = np.zeros(self.count, np.int64)
        for ids, block in zip(self.ids, self.blocks, strict=True):
            sizes[ids] = block.shape[1]
        return sizes

    def members(self, which: np.ndarray) -> np.ndarray:
        """The ranks of groups ``which`` (ascending group indices), one group after
        another."""
        if len(self.blocks) == 1:
            return self.blocks[0][np.searchsorted(self.ids[0], which)].ravel()
        sizes = self.sizes
        start = np.zeros(self.count + 1, np.int64)
        np.cumsum(sizes, out=start[1:])
        flat = np.empty(int(start[-1]), np.int64)
        for ids, block in zip(self.ids, self.blocks, strict=True):
            flat[(start[ids][:, None] + np.arange(block.shape[1])).ravel()] = block.ravel()
        keep = np.repeat(start[which], sizes[which]) + _within(sizes[which])
        return flat[keep]

    def select(self, which: np.ndarray) -> list[tuple[int, np.ndarray, np.ndarray]]:
        """(block number, group indices, rows) of the groups ``which`` (ascending group
        indices), block by block in order of their first group in ``which``."""
        out = []
        for k, ids in enumerate(self.ids):
            rows = np.flatnonzero(np.isin(ids, which))
            if len(rows):
                out.append((k, ids[rows], rows))
        out.sort(key=lambda part: int(part[1][0]))
        return out

    def block(self, k: int, names: tuple[str, ...] = ()) -> GroupView:
        """Block ``k`` as the generators take it; what they derive from it (domain parts,
        channels) is made once and kept with these groups."""
        return GroupView(self.blocks[k], self.ids[k], names, self.fabric,
                         self._views.setdefault(k, {}))


@dataclass(frozen=True, eq=False)
class GroupView:
    """Groups of one size as a generator takes them: ``ranks[g, i]`` is rank i of
    group ``gid[g]``; ``cache`` keeps what is derived from ``ranks`` (one block's share
    of :meth:`GroupBlocks.derived`)."""

    ranks: np.ndarray  # (groups, n) int64 node numbers
    gid: np.ndarray  # (groups,) int32 index into the caller's groups
    names: tuple[str, ...]
    fabric: Fabric
    cache: dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def n(self) -> int:
        return int(self.ranks.shape[1])

    def _kept(self, key: str, make: Callable[[], Any]) -> Any:
        """``cache[key]``, made by ``make`` the first time."""
        if key not in self.cache:
            self.cache[key] = make()
        return self.cache[key]

    @property
    def layout(self) -> PartLayout:
        """The groups' domain parts (:func:`~topomodel.traffic.channels.domain_parts`),
        made once."""
        layout: PartLayout = self._kept("layout", lambda: domain_parts(self.fabric, self.ranks))
        return layout

    @property
    def nodes(self) -> int:
        """The most scale-up domains one group spans (a rank outside any domain counts
        as its own), made once: every candidate algorithm's shape reads it, and over
        98k-rank groups the sort is most of a shape's cost."""
        made: int = self._kept("nodes", lambda: most_domains(self.fabric, self.ranks))
        return made

    @property
    def channels(self) -> Channels:
        """The groups' NCCL channels (:func:`~topomodel.traffic.channels.channels`),
        made once."""
        made: Channels = self._kept("channels", lambda: channels(self.fabric, self.layout))
        return made

    def phase(self, a: np.ndarray, b: np.ndarray, bytes_per_flow: float | np.ndarray, *,
              steps: int, label: str, messages: int = 1) -> Phase:
        """Flows rank ``a[k]`` -> rank ``b[k]`` (rank positions) in every group."""
        count, flows = len(self.gid), len(a)
        src = self.ranks.take(a, axis=1).ravel()  # take: C order, ~10x faster than [:, a]
        dst = self.ranks.take(b, axis=1).ravel()
        if np.ndim(bytes_per_flow) == 0:
            nbytes = np.full(count * flows, float(bytes_per_flow))
        else:
            nbytes = np.tile(np.asarray(bytes_per_flow, dtype=float), count)
        group = np.repeat(self.gid, flows)
        return Phase(src, dst, nbytes, group, steps, label, messages)


def most_domains(fabric: Fabric, ranks: np.ndarray) -> int:
    """The most scale-up domains one row of ``ranks`` spans (a rank outside any domain
    counts as its own)."""
    domain = rows_sorted(fabric.node_arrays["domain"][ranks])
    alone = (domain < 0).sum(axis=1)
    distinct = (np.diff(domain, axis=1) != 0).sum(axis=1) + 1
    return int(np.where(alone > 0, alone + distinct - 1, distinct).max())


def _within(counts: np.ndarray) -> np.ndarray:
    """0 .. c-1 for each count c, one run after another."""
    total = int(counts.sum())
    return np.arange(total) - np.repeat(np.cumsum(counts) - counts, counts)


def check_collective(collective: str) -> None:
    if collective not in COLLECTIVES:
        raise CollectiveError(f"unknown collective {collective!r}; choose from"
                              f" {', '.join(COLLECTIVES)}")


def group_blocks(fabric: Fabric, groups: GroupsLike | GroupBlocks, *,
                 checked: bool = False) -> GroupBlocks:
    """``groups`` checked against ``fabric`` and held as 2-D blocks of one size each
    (given :class:`GroupBlocks` of this fabric are returned as they are); with
    ``checked``, groups known to pass the checks on this fabric (the same ones were
    checked before): held as blocks, not checked again.

    Raises
    ------
    CollectiveError
        For no groups, an empty group, a repeated node or a node that is not an
        accelerator of the fabric.
    """
    if isinstance(groups, GroupBlocks):  # another fabric's are checked on this one
        return groups if groups.fabric is fabric else _verified(
            GroupBlocks(fabric, groups.ids, groups.blocks, groups.count))
    if isinstance(groups, np.ndarray) and groups.ndim == 2:
        parts = [groups]
    elif isinstance(groups, np.ndarray) and groups.ndim == 1 and groups.dtype != object:
        parts = [groups.reshape(-1, 1)]  # as a sequence of scalars: groups of one rank
    else:
        parts = [np.asarray(g, dtype=np.int64) for g in groups]
        parts = [p.reshape(1, -1) if p.ndim < 2 else p for p in parts]
    parts = [p.astype(np.int64, copy=False).reshape(len(p), -1) for p in parts]
    rows = [len(p) for p in parts]
    if not sum(rows):
        raise CollectiveError("no groups given")
    empty = [i for i, p in enumerate(parts) if p.shape[1] == 0 and len(p)]
    if empty:
        raise CollectiveError(f"group {sum(rows[:empty[0]])} has no ranks")
    first = np.cumsum([0, *rows])
    ids: list[np.ndarray] = []
    blocks: list[np.ndarray] = []
    for size in dict.fromkeys(p.shape[1] for p in parts if len(p)):
        same = [i for i, p in enumerate(parts) if len(p) and p.shape[1] == size]
        ids.append(np.concatenate([np.arange(first[i], first[i + 1]) for i in same]
                                  ).astype(np.int32))
        blocks.append(parts[same[0]] if len(same) == 1 else np.concatenate(
            [parts[i] for i in same]))
    made = GroupBlocks(fabric, tuple(ids), tuple(blocks), int(first[-1]))
    return made if checked else _verified(made)


def _verified(groups: GroupBlocks) -> GroupBlocks:
    """``groups``, once every rank is an accelerator of its fabric and no group repeats
    a node."""
    is_acc = groups.fabric.kind_mask("accelerator")
    for ranks in groups.blocks:
        bad = (ranks < 0) | (ranks >= len(is_acc))
        if not bad.any():
            bad = ~is_acc[ranks]
        if bad.any():
            raise CollectiveError(f"node {int(ranks[bad][0])} is not an accelerator of the"
                                  " fabric")
        if np.bincount(ranks.ravel(), minlength=1).max() <= 1:
            continue  # no node twice in the block, so none twice in a group: no sort
        if ranks.shape[1] == 2:  # pairs (a pipeline's): twice only as both ends
            same = np.flatnonzero(ranks[:, 0] == ranks[:, 1])
            twice = int(ranks[same[0], 0]) if len(same) else None
        else:
            ordered = rows_sorted(ranks)
            repeated = ordered[:, 1:] == ordered[:, :-1]
            twice = int(ordered[:, 1:][repeated][0]) if repeated.any() else None
        if twice is not None:
            raise CollectiveError(f"node {twice} appears twice in one group")
    return groups


def group_names_of(names: Sequence[str] | None, count: int) -> tuple[str, ...]:
    if names is None:
        return _default_names(count)
    if len(names) != count:
        raise CollectiveError(f"{len(names)} group names for {count} groups")
    return tuple(str(n) for n in names)


@lru_cache(maxsize=8)
def _default_names(count: int) -> tuple[str, ...]:
    """``g0`` .. ``g{count-1}``, made once per count (a step names 262k groups nine
    times)."""
    return tuple(f"g{i}" for i in range(count))
