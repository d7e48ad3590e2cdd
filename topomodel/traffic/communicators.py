"""Communicator groups as the collective schedules take them: checked, named, and
bucketed by size."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from topomodel.errors import TopomodelError
from topomodel.fabric.tables import Fabric
from topomodel.traffic.phases import Phase
from topomodel.vocabulary import COLLECTIVES as COLLECTIVES


class CollectiveError(TopomodelError, ValueError):
    """A collective that cannot be generated as asked (bad group, algorithm or size)."""


@dataclass(frozen=True)
class _Groups:
    """Groups of one size: ``ranks[g, i]`` is rank i of group ``gid[g]``."""

    ranks: np.ndarray  # (groups, n) int64 node numbers
    gid: np.ndarray  # (groups,) int32 index into the caller's groups
    names: tuple[str, ...]
    fabric: Fabric

    @property
    def n(self) -> int:
        return int(self.ranks.shape[1])

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


def _check_collective(collective: str) -> None:
    if collective not in COLLECTIVES:
        raise CollectiveError(f"unknown collective {collective!r}; choose from"
                              f" {', '.join(COLLECTIVES)}")


def _check_groups(fabric: Fabric, groups: Sequence[np.ndarray]) -> Sequence[np.ndarray]:
    """Groups as int64 arrays (a 2-D array, a row per group, stays one array); refuse
    empty groups, repeats and non-accelerators."""
    rows: Sequence[np.ndarray]
    if isinstance(groups, np.ndarray) and groups.ndim == 2:
        rows = groups.astype(np.int64, copy=False)
        if not rows.shape[1]:
            raise CollectiveError("group 0 has no ranks")
    else:
        rows = [np.asarray(g, dtype=np.int64).ravel() for g in groups]
        lengths = np.fromiter((len(r) for r in rows), np.int64, len(rows))
        if (lengths == 0).any():
            raise CollectiveError(f"group {int(np.argmin(lengths))} has no ranks")
    if not len(rows):
        raise CollectiveError("no groups given")
    is_acc = fabric.kind_mask("accelerator")
    for _, ranks in _buckets(rows):
        bad = (ranks < 0) | (ranks >= len(is_acc))
        if not bad.any():
            bad = ~is_acc[ranks]
        if bad.any():
            raise CollectiveError(f"node {int(ranks[bad][0])} is not an accelerator of the"
                                  " fabric")
        ordered = np.sort(ranks, axis=1)
        repeated = ordered[:, 1:] == ordered[:, :-1]
        if repeated.any():
            raise CollectiveError(f"node {int(ordered[:, 1:][repeated][0])} appears twice in"
                                  " one group")
    return rows


def _group_names(names: Sequence[str] | None, count: int) -> tuple[str, ...]:
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


def _buckets(rows: Sequence[np.ndarray]) -> list[tuple[np.ndarray, np.ndarray]]:
    """(group indices, 2-D ranks) per group size, sizes in order of first appearance."""
    if isinstance(rows, np.ndarray):  # one size already
        return [(np.arange(len(rows), dtype=np.int32), rows)]
    sizes = group_sizes(rows)
    if (sizes == sizes[0]).all():
        return [(np.arange(len(rows), dtype=np.int32), np.stack(rows))]
    out = []
    for size in dict.fromkeys(sizes.tolist()):
        gid = np.flatnonzero(sizes == size).astype(np.int32)
        out.append((gid, np.stack([rows[int(i)] for i in gid])))
    return out


def group_sizes(rows: Sequence[np.ndarray]) -> np.ndarray:
    """Ranks per group (a 2-D array's row length, without a loop over its rows)."""
    if isinstance(rows, np.ndarray):
        return np.full(len(rows), rows.shape[1], np.int64)
    return np.fromiter((len(r) for r in rows), np.int64, len(rows))


def group_members(rows: Sequence[np.ndarray], which: np.ndarray) -> np.ndarray:
    """The ranks of groups ``which``, one after another."""
    if isinstance(rows, np.ndarray):
        return rows[which].ravel()
    return np.concatenate([rows[i] for i in which]) if len(which) else np.zeros(0, np.int64)
