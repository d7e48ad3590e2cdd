"""A fabric's arcs in order of their ends: the link rows stably sorted by (src, dst),
made once per fabric (:func:`arc_index`) and shared by its copies with failed parts.

What looks an arc up by its ends (the structured router's failure view, failed links
named ``"a -- b"``) and what walks the arcs by source or by destination (the general
router's CSR views) read this one index instead of each sorting the 6.5 M link rows of
a 100k-accelerator fabric again.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from topomodel.fabric.tables import Fabric, ignores_failures, index_dtype


@dataclass(frozen=True, eq=False)
class ArcIndex:
    """The link rows in the order of their key ``src * nodes + dst``, ties (parallel
    arcs: two rows joining the same ends the same way) in link-row order.

    ``order`` holds the link rows in that order (``np.argsort(keys, kind="stable")``,
    in :func:`~topomodel.fabric.tables.index_dtype` of the row count),
    ``keys`` their keys, sorted; ``nodes`` is the fabric's node count and ``parallel``
    whether any two rows share a key. The arrays are read-only: the index is shared.
    """

    order: np.ndarray
    keys: np.ndarray
    nodes: int
    parallel: bool

    @classmethod
    def of(cls, src: np.ndarray, dst: np.ndarray, nodes: int) -> ArcIndex:
        """The index of the arcs ``src[i] -> dst[i]`` among ``nodes`` nodes (one sort).

        Examples
        --------
        >>> index = ArcIndex.of(np.array([2, 0, 1, 0]), np.array([0, 1, 0, 1]), 3)
        >>> index.order.tolist(), index.parallel
        ([1, 3, 2, 0], True)
        """
        keys = np.asarray(src).astype(np.int64) * nodes + np.asarray(dst, np.int64)
        order = np.argsort(keys, kind="stable").astype(index_dtype(len(keys)), copy=False)
        sorted_keys = keys[order]
        order.setflags(write=False)
        sorted_keys.setflags(write=False)
        return cls(order, sorted_keys, nodes,
                   bool(len(keys) > 1 and (sorted_keys[1:] == sorted_keys[:-1]).any()))

    def _wanted(self, src: np.ndarray | int, dst: np.ndarray | int) -> np.ndarray:
        return np.asarray(src, np.int64) * self.nodes + np.asarray(dst, np.int64)

    def row(self, src: np.ndarray | int, dst: np.ndarray | int) -> np.ndarray:
        """The link row of the arc ``src -> dst`` (failed or not), -1 where there is
        none; of parallel arcs, the lowest row. Arrays broadcast.

        Examples
        --------
        >>> index = ArcIndex.of(np.array([2, 0, 1, 0]), np.array([0, 1, 0, 1]), 3)
        >>> index.row(np.array([0, 1, 1]), np.array([1, 0, 2])).tolist()
        [1, 2, -1]
        """
        wanted = self._wanted(src, dst)
        if not len(self.keys):
            return np.full(wanted.shape, -1)
        pos = np.clip(np.searchsorted(self.keys, wanted), 0, len(self.keys) - 1)
        return np.where(self.keys[pos] == wanted, self.order[pos], -1)

    def spans(self, src: np.ndarray | int, dst: np.ndarray | int
              ) -> tuple[np.ndarray, np.ndarray]:
        """Where the arcs ``src -> dst`` lie in :attr:`order`: ``order[start:stop]``
        are their link rows (every parallel one, in row order; empty where there is
        none). Arrays broadcast."""
        wanted = self._wanted(src, dst)
        return (np.searchsorted(self.keys, wanted, "left"),
                np.searchsorted(self.keys, wanted, "right"))

    def rows_from(self, ends: np.ndarray) -> np.ndarray:
        """The link rows whose key starts at one of the nodes ``ends`` (their arcs out
        of those nodes; for :func:`arcs_by_destination`, into them), node by node.

        Examples
        --------
        >>> index = ArcIndex.of(np.array([2, 0, 1, 0]), np.array([0, 1, 0, 2]), 3)
        >>> index.rows_from(np.array([0, 2])).tolist()
        [1, 3, 0]
        """
        first = np.asarray(ends, np.int64) * self.nodes
        return self.order[positions(np.searchsorted(self.keys, first),
                                    np.searchsorted(self.keys, first + self.nodes))]


def positions(starts: np.ndarray, stops: np.ndarray) -> np.ndarray:
    """Every position of the spans ``starts[i]:stops[i]``, span by span.

    Examples
    --------
    >>> positions(np.array([4, 0, 2]), np.array([6, 0, 3])).tolist()
    [4, 5, 2]
    """
    counts = np.asarray(stops, np.int64) - starts
    ahead = np.cumsum(counts) - counts  # positions before each span's first
    return (np.arange(int(counts.sum()), dtype=np.int64)
            + np.repeat(np.asarray(starts, np.int64) - ahead, counts))


@ignores_failures
def arc_index(fabric: Fabric) -> ArcIndex:
    """The :class:`ArcIndex` of ``fabric``'s link rows, failed or not: read it with
    :meth:`~topomodel.fabric.tables.Fabric.derived` (``fabric.derived(arc_index)``), so
    that it is sorted once per fabric and shared by the copies with failed parts."""
    links = fabric.link_arrays
    return ArcIndex.of(links["src"], links["dst"], len(fabric.node_arrays))


@ignores_failures
def arcs_by_destination(fabric: Fabric) -> ArcIndex:
    """The :func:`reversed_index` of ``fabric``'s :func:`arc_index`: its arcs in a
    stable order by (dst, src). Read it with
    :meth:`~topomodel.fabric.tables.Fabric.derived`, as :func:`arc_index`."""
    links = fabric.link_arrays
    return reversed_index(fabric.derived(arc_index), links["src"],
                          links["dst"], fabric.reverse_rows)


def reversed_index(index: ArcIndex, src: np.ndarray, dst: np.ndarray,
                   reverse_rows: np.ndarray | None) -> ArcIndex:
    """The index of the arcs ``src -> dst`` (``index``) by their other end: the link
    rows in the order of ``dst * nodes + src``, bit for bit
    ``np.argsort(dst * nodes + src, kind="stable")``, and those keys sorted.

    Without parallel arcs, and where ``reverse_rows`` maps each row to the row joining
    the same ends the other way, this is ``reverse_rows[index.order]`` with
    ``index.keys`` (no sort: the reverse of the ``i``-th arc by (src, dst) is the
    ``i``-th by (dst, src), and the keys are distinct, so the stable order is the only
    one); otherwise it is sorted.

    Examples
    --------
    >>> src, dst = np.array([0, 1, 1, 2]), np.array([1, 0, 2, 1])
    >>> index = ArcIndex.of(src, dst, 3)
    >>> reversed_index(index, src, dst, np.array([1, 0, 3, 2])).order.tolist()
    [1, 0, 3, 2]
    """
    if (not index.parallel and reverse_rows is not None and len(reverse_rows) == len(src)
            and np.array_equal(src[reverse_rows], dst)
            and np.array_equal(dst[reverse_rows], src)):
        order = np.asarray(reverse_rows)[index.order]
        order.setflags(write=False)
        return ArcIndex(order, index.keys, index.nodes, index.parallel)
    return ArcIndex.of(dst, src, index.nodes)
