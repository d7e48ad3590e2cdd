"""The hash and its choices in blocks (routing.hashing): a flow's value is its own, so
hashing HASH_BLOCK flows at a time, in place, gives what one flow at a time gives."""

from __future__ import annotations

import numpy as np
import pytest

from topomodel.routing.hashing import HASH_BLOCK, choose, mix, subflows, ticket


def one_at_a_time_mix(seed: int, flow: np.ndarray, node: np.ndarray) -> np.ndarray:
    """The splitmix64 finaliser of the module docstring, written out flow by flow in
    Python integers (mod 2^64): an oracle that shares no numpy code with ``mix``."""
    mask = (1 << 64) - 1
    out = []
    for f, n in zip(flow.tolist(), node.tolist(), strict=True):
        x = ((seed * 0x9E3779B97F4A7C15) ^ ((f & mask) * 0xBF58476D1CE4E5B9)
             ^ ((n & mask) * 0x94D049BB133111EB)) & mask
        x ^= x >> 30
        x = (x * 0xBF58476D1CE4E5B9) & mask
        x ^= x >> 27
        x = (x * 0x94D049BB133111EB) & mask
        x ^= x >> 31
        out.append(x)
    return np.array(out, np.uint64)


def test_the_hash_in_blocks_is_each_flows_own():
    rng = np.random.default_rng(5)
    n = 2 * HASH_BLOCK + 17  # two whole blocks and a part
    flow = rng.integers(-2**40, 2**40, n)
    node = rng.integers(0, 2**31, n).astype(np.int32)
    whole = mix(7, flow, node)
    picks = rng.choice(n, 300, replace=False)
    assert (whole[picks] == one_at_a_time_mix(7, flow[picks], node[picks])).all()
    # the shapes the blocks leave to one pass: a scalar node, a 2-D array
    assert (mix(7, flow[picks], np.int64(3)) == one_at_a_time_mix(
        7, flow[picks], np.full(300, 3))).all()
    assert (mix(7, flow[:6].reshape(2, 3), node[:6].reshape(2, 3)).ravel()
            == whole[:6]).all()
    expected = (whole % np.uint64(12) // np.uint64(4)).astype(np.int64)
    assert (ticket(7, flow, node, 12, 4) == expected).all()


@pytest.mark.filterwarnings("ignore:divide by zero")  # no cables: ticket 0, as ever
def test_a_choice_in_blocks_is_each_flows_own():
    rng = np.random.default_rng(6)
    n = HASH_BLOCK + 999
    flow, node = rng.integers(0, 2**40, n), rng.integers(0, 2**20, n)
    weights = rng.integers(0, 3, (n, 4))
    weights[::97] = 0  # no cables: candidate 0
    chosen = choose("hash", 3, flow, node, node, np.ones(n, np.int64), weights)
    picks = np.r_[rng.choice(n, 200, replace=False), np.arange(0, n, 97)[:50]]
    for k in picks.tolist():
        alone = choose("hash", 3, flow[k:k + 1], node[k:k + 1], node[k:k + 1],
                       np.ones(1, np.int64), weights[k:k + 1])
        assert chosen[k] == alone[0]
    drawn = (one_at_a_time_mix(3, flow[picks], node[picks])
             % weights[picks].sum(axis=1).clip(1).astype(np.uint64)).astype(np.int64)
    running = np.cumsum(weights[picks], axis=1)
    first = (running <= drawn[:, None]).sum(axis=1)
    first[first == weights.shape[1]] = 0
    assert (chosen[picks] == first).all()


def test_queue_pairs_hash_as_flows_times_qps_plus_their_index():
    flows = np.array([3, 5, 2**40], np.int64)
    take, ids = subflows(flows.astype(np.int32)[:2], 3)
    assert take.tolist() == [0, 0, 0, 1, 1, 1] and ids.dtype == np.int64
    assert ids.tolist() == [9, 10, 11, 15, 16, 17]
    assert subflows(flows, 2)[1].tolist() == [6, 7, 10, 11, 2**41, 2**41 + 1]
