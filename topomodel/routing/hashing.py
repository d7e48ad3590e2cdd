"""Per-flow path choices: a seeded 64-bit hash and d-mod-k, vectorised; a flow's
split into queue pairs for hashing."""

from __future__ import annotations

import numpy as np

from topomodel.errors import RoutingError
from topomodel.inputs.records import documented

QPS = documented(
    "routing.QPS", 2,
    """Queue pairs a flow is split into under hash routing, each hashed on its own:
    NCCL opens NCCL_IB_QPS_PER_CONNECTION = 1 QP per connection (its default, net_ib.cc)
    and NCCL_NCHANNELS_PER_NET_PEER = 2 channels to each network peer (its default,
    graph/paths.cc), so a pair's bytes go over 1 x 2 = 2 independently hashed QPs.""")


HASH_BLOCK = 1 << 16
"""Flows whose hash (and choice) is computed at once: 512 KiB per uint64 array, so the
scratch arrays stay in a core's cache and are reused from the heap, where arrays of
every flow (millions of queue pairs at 100k accelerators) would be fresh memory the
kernel zeroes each time. Each flow's hash is its own, so the block changes no value."""


def mix(seed: int, flow: np.ndarray, node: np.ndarray) -> np.ndarray:
    """A 64-bit hash of (seed, flow, node) (splitmix64 finaliser), vectorised.

    Examples
    --------
    >>> int(mix(1, np.array([5]), np.array([7]))[0]) == int(mix(1, np.array([5]),
    ...                                                         np.array([7]))[0])
    True

    With flow and node 0, seed ``s`` gives the ``s``-th output of the reference
    splitmix64 generator started from state 0 (Vigna's ``splitmix64.c``):

    >>> zero = np.zeros(3, dtype=np.int64)
    >>> [hex(int(mix(s, zero, zero)[0])) for s in (1, 2, 3)]
    ['0xe220a8397b1dcdaf', '0x6e789e6aa1b965f4', '0x6c45d188009454f']
    >>> hex(int(mix(1, np.array([5]), np.array([7]))[0]))
    '0x6093c71b0e98ce2f'

    A different seed, flow or node gives a different value; arrays keep their shape:

    >>> flows = np.arange(6).reshape(2, 3)
    >>> h = mix(1, flows, np.full((2, 3), 7))
    >>> h.shape, h.dtype, len(np.unique(h))
    ((2, 3), dtype('uint64'), 6)
    >>> bool((h != mix(2, flows, np.full((2, 3), 7))).all())
    True
    >>> bool((h != mix(1, flows, np.full((2, 3), 8))).all())
    True
    """
    flow, node = np.asarray(flow), np.asarray(node)
    shape = np.broadcast_shapes(flow.shape, node.shape)
    x = np.empty(shape, np.uint64)
    if not (flow.ndim == 1 and flow.shape == node.shape):
        _mix_into(seed, np.broadcast_to(flow, shape), np.broadcast_to(node, shape), x,
                  np.empty(shape, np.uint64))
        return x
    scratch = np.empty(min(len(x), HASH_BLOCK), np.uint64)
    for start in range(0, len(x), HASH_BLOCK):
        stop = min(start + HASH_BLOCK, len(x))
        _mix_into(seed, flow[start:stop], node[start:stop], x[start:stop],
                  scratch[:stop - start])
    return x


def _mix_into(seed: int, flow: np.ndarray, node: np.ndarray, x: np.ndarray,
              scratch: np.ndarray) -> None:
    """:func:`mix` written into ``x``, with ``scratch`` (the same shape) for the rest:
    in place, where each step of the expression would be a fresh array of the flows'
    size (fresh memory is what the kernel zeroes: the system time of hash routing at
    100k accelerators); the same values, bit for bit."""
    np.copyto(x, flow, casting="unsafe")  # as astype(np.uint64): two's complement
    np.copyto(scratch, node, casting="unsafe")
    with np.errstate(over="ignore"):
        x *= np.uint64(0xBF58476D1CE4E5B9)
        scratch *= np.uint64(0x94D049BB133111EB)
        x ^= scratch
        x ^= np.uint64(seed) * np.uint64(0x9E3779B97F4A7C15)
        for shift, factor in ((30, 0xBF58476D1CE4E5B9), (27, 0x94D049BB133111EB),
                              (31, None)):
            np.right_shift(x, np.uint64(shift), out=scratch)
            x ^= scratch
            if factor is not None:
                x *= np.uint64(factor)


def ticket(seed: int, flow: np.ndarray, node: np.ndarray, modulus: np.ndarray | int,
           cables: int = 1) -> np.ndarray:
    """``mix(seed, flow, node) % modulus // cables`` as int64 (``modulus`` positive, per
    flow or one for all), computed in the hash's own array.

    Examples
    --------
    >>> flows, nodes = np.arange(5), np.full(5, 7)
    >>> expected = (mix(3, flows, nodes) % np.uint64(12) // np.uint64(4)).astype(np.int64)
    >>> bool((ticket(3, flows, nodes, 12, 4) == expected).all())
    True
    """
    x = mix(seed, flow, node)
    np.remainder(x, np.asarray(modulus).astype(np.uint64), out=x)
    if cables != 1:
        np.floor_divide(x, np.uint64(cables), out=x)
    return x.view(np.int64)  # below the modulus: the same values as astype(np.int64)


def choose(routing: str, seed: int, flow: np.ndarray, node: np.ndarray, dst: np.ndarray,
           stride: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Index of the chosen candidate for each flow (hash or dmodk); ``weights`` is
    (flows, candidates) cables, zero for absent candidates (candidates are sorted by
    node number)."""
    if routing == "hash":
        if np.ndim(flow) != 1 or np.ndim(node) != 1:
            return _first_passing(ticket(seed, flow, node, weights.sum(axis=1)), weights)
        # each flow's choice is its own: HASH_BLOCK flows at a time, so the tickets and
        # running sums are a block's, not fresh arrays of every flow
        passed = np.empty(len(weights), np.int64)
        # one row for all (a read-only broadcast, as the scale-out NIC arcs all live
        # give): one modulus, the same value as every row's sum
        one = _one_row(weights)
        for start in range(0, len(weights), HASH_BLOCK):
            block = slice(start, start + HASH_BLOCK)
            w = weights[block]
            passed[block] = _first_passing(ticket(seed, flow[block], node[block],
                                                  one if one is not None else
                                                  row_sums(w)), w)
        return passed
    count = (weights > 0).sum(axis=1)
    rank = (dst // stride) % count  # the rank-th present candidate
    present = np.cumsum(weights > 0, axis=1) - 1
    chosen: np.ndarray = np.argmax((present == rank[:, None]) & (weights > 0), axis=1)
    return chosen


def row_sums(weights: np.ndarray) -> np.ndarray:
    """``weights.sum(axis=1)``, the same values and type, a column at a time: numpy
    reduces a short last axis (a handful of planes or chips) element by element,
    several times slower than adding whole columns. Exact for integer cables (their
    sums do not depend on the order); other types are summed by ``sum`` itself.

    Examples
    --------
    >>> w = np.array([[1, 2, 0], [3, 0, 4]], np.int32)
    >>> bool(np.array_equal(row_sums(w), w.sum(axis=1))), row_sums(w).dtype == w.sum(axis=1).dtype
    (True, True)
    """
    out_type = np.sum(weights[:0], axis=1).dtype
    if weights.ndim != 2 or weights.dtype.kind not in "biu" or out_type.kind not in "iu":
        return np.asarray(weights.sum(axis=1))
    out = np.zeros(len(weights), out_type)
    for column in weights.T:
        np.add(out, column, out=out, casting="unsafe")
    return out


def _one_row(weights: np.ndarray) -> int | None:
    """The sum of every row of ``weights`` where they are one row broadcast (a zero
    row stride) of integer cables, with a row; else None."""
    if (weights.ndim != 2 or weights.strides[0] != 0 or not len(weights)
            or weights.dtype.kind not in "biu"):
        return None
    total = row_sums(weights[:1])
    return int(total[0]) if total.dtype.kind in "iu" else None


def _first_passing(drawn: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Per flow, the first candidate whose running cables pass its ticket ``drawn``: as
    many as stay at or under it (the running sum never falls), 0 where none passes (no
    cables), one column at a time (a handful of candidates, millions of flows)."""
    passed = np.zeros(len(drawn), np.int64)
    running = np.zeros(len(drawn), weights.dtype)
    under = np.empty(len(drawn), bool)
    for column in weights.T:
        running += column
        passed += np.less_equal(running, drawn, out=under)
    passed[passed == weights.shape[1]] = 0
    return passed


def subflows(flows: np.ndarray, qps: int) -> tuple[np.ndarray, np.ndarray]:
    """Split flows into ``qps`` queue pairs each: (index into ``flows``, hash id) per QP.

    QP ``j`` of flow ``f`` hashes as flow ``f * qps + j``, so one QP per flow hashes
    exactly as the flow itself did. Each QP carries ``1 / qps`` of its flow's bytes.

    Examples
    --------
    >>> take, ids = subflows(np.array([3, 5]), 2)
    >>> take.tolist(), ids.tolist()
    ([0, 0, 1, 1], [6, 7, 10, 11])
    >>> [a.tolist() for a in subflows(np.array([3, 5]), 1)]
    [[0, 1], [3, 5]]
    """
    return np.repeat(np.arange(len(flows)), qps), subflow_ids(flows, qps)


def subflow_ids(flows: np.ndarray, qps: int) -> np.ndarray:
    """:func:`subflows`' hash ids alone (``flow * qps + j`` for QP ``j``), as int64.

    Examples
    --------
    >>> subflow_ids(np.array([3, 5], np.int32), 2).tolist()
    [6, 7, 10, 11]
    """
    ids = np.empty((len(flows), qps), np.int64)
    np.copyto(ids, flows[:, None], casting="unsafe")  # as astype(np.int64)
    ids *= qps
    ids += np.arange(qps)
    return ids.ravel()


def check_qps(qps: int) -> None:
    """Refuse a QP count below 1.

    Raises
    ------
    RoutingError
        If ``qps`` is not a positive integer.
    """
    if isinstance(qps, bool) or not isinstance(qps, (int, np.integer)) or qps < 1:
        raise RoutingError(f"qps must be a positive integer, not {qps!r}")


def queue_pairs(routing: str, flows: np.ndarray,
                 qps: int) -> tuple[np.ndarray, np.ndarray, int]:
    """(index into ``flows``, hash id, split) per queue pair: ``qps`` per flow under
    hash routing, the flow itself under d-mod-k (its choice depends on the destination
    alone, so more QPs would all take the same path)."""
    if routing != "hash":
        return np.arange(len(flows)), flows, 1
    take, ids = subflows(flows, qps)
    return take, ids, qps
