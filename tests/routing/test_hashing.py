"""The hash of routing.hashing against the plain splitmix64 expression it computes in
place (every value, broadcast shapes and dtypes), and the choice it feeds."""

import numpy as np
import pytest

from topomodel.routing.hashing import HASH_BLOCK, choose, mix, subflows, ticket


def _plain_mix(seed, flow, node):
    """splitmix64 of (seed, flow, node) as one expression, a new array per step."""
    with np.errstate(over="ignore"):
        x = (np.uint64(seed) * np.uint64(0x9E3779B97F4A7C15)
             ^ flow.astype(np.uint64) * np.uint64(0xBF58476D1CE4E5B9)
             ^ node.astype(np.uint64) * np.uint64(0x94D049BB133111EB))
        x ^= x >> np.uint64(30)
        x *= np.uint64(0xBF58476D1CE4E5B9)
        x ^= x >> np.uint64(27)
        x *= np.uint64(0x94D049BB133111EB)
        x ^= x >> np.uint64(31)
    return x


@pytest.mark.parametrize("seed", [0, 1, 7, 2**40 + 3])
def test_mix_in_place_is_the_plain_expression(seed):
    rng = np.random.default_rng(seed % 97)
    flow = rng.integers(0, 2**40, 5000)
    node = rng.integers(0, 2**31, 5000).astype(np.int32)
    assert np.array_equal(mix(seed, flow, node), _plain_mix(seed, flow, node))
    column, grid = rng.integers(0, 2**40, (60, 1)), rng.integers(0, 10**6, (60, 7))
    for a, b in ((column, grid), (grid, column)):
        got = mix(seed, a, b)
        assert got.shape == (60, 7) and got.dtype == np.uint64
        assert np.array_equal(got, _plain_mix(seed, a, b))


def test_hash_choice_is_the_plain_ticket():
    """Each flow's pick is the first candidate whose running cables pass its ticket,
    the plain hash modulo its cables (0 where it has none)."""
    rng = np.random.default_rng(3)
    flows, candidates = 4000, 5
    weights = rng.integers(0, 4, (flows, candidates))
    weights[:7] = 0
    flow, node = np.arange(flows), rng.integers(0, 10**5, flows)
    dst, stride = rng.integers(0, 10**5, flows), np.ones(flows, np.int64)
    total = weights.sum(axis=1)
    with np.errstate(divide="ignore"):  # no cables: a ticket of 0, as numpy gives it
        got = choose("hash", 5, flow, node, dst, stride, weights)
        ticket = (_plain_mix(5, flow, node) % total.astype(np.uint64)).astype(np.int64)
    running = np.cumsum(weights, axis=1)
    want = (running <= ticket[:, None]).sum(axis=1)
    want[want == candidates] = 0
    assert np.array_equal(got, want)
    assert (got[:7] == 0).all()


@pytest.mark.parametrize("dtype", [np.int64, np.int32, np.uint32, np.uint64])
@pytest.mark.parametrize("qps", [1, 2, 3])
def test_subflows_in_place_are_the_plain_ids(dtype, qps):
    flows = np.random.default_rng(qps).integers(0, 2**31, 999).astype(dtype)
    take, ids = subflows(flows, qps)
    assert ids.dtype == np.int64
    assert np.array_equal(ids, (flows.astype(np.int64)[:, None] * qps
                                + np.arange(qps)).ravel())
    assert np.array_equal(take, np.repeat(np.arange(999), qps))
    assert subflows(flows[:0], qps)[1].shape == (0,)


@pytest.mark.parametrize(("width", "cables"), [(2, 1), (8, 1), (16, 2), (7, 3)])
def test_structured_pick_in_place_is_the_plain_ticket(width, cables):
    """The structured router's candidate pick, in the hash's own array, against the
    plain expression (a new array per step)."""
    from topomodel.routing import structured

    rng = np.random.default_rng(width)
    flows, node = rng.integers(0, 2**40, 3000), rng.integers(0, 10**6, 3000)
    got = structured._pick("hash", 9, flows, node, node, np.ones(3000, np.int64), width,
                           cables)
    plain = ((_plain_mix(9, flows, node) % np.uint64(width * cables))
             // np.uint64(cables)).astype(np.int64)
    assert got.dtype == np.int64 and np.array_equal(got, plain)


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


@pytest.mark.parametrize("dtype", [np.int8, np.int32, np.uint32, np.int64, np.uint64, bool,
                                   np.float64])
def test_row_sums_column_by_column_are_numpys_row_sums(dtype):
    """The hash's moduli, summed a column at a time, are ``sum(axis=1)``'s: the same
    values and type (integers exact in any order; other types left to ``sum``)."""
    from topomodel.routing.hashing import row_sums

    weights = np.random.default_rng(8).integers(0, 4, (777, 5)).astype(dtype)
    for rows in (weights, weights[:, :1], weights[:0], np.broadcast_to(weights[:1], (50, 5))):
        got, want = row_sums(rows), rows.sum(axis=1)
        assert got.dtype == want.dtype and got.tobytes() == want.tobytes()


@pytest.mark.parametrize("dtype", [np.int8, np.int64])
def test_a_choice_over_one_broadcast_row_is_the_choice_over_its_copies(dtype):
    """Where every flow has the same cables (a read-only broadcast of one row: one
    modulus for all), each pick is the one over the rows written out, and the plain
    ticket's, in blocks and across them."""
    rng = np.random.default_rng(9)
    n = HASH_BLOCK + 321
    flow, node = rng.integers(0, 2**40, n), rng.integers(0, 2**20, n)
    for row in ([1, 1], [2, 0, 3], [0, 0]):
        one = np.array([row], dtype)
        shared = np.broadcast_to(one, (n, len(row)))
        with np.errstate(divide="ignore"):  # no cables: a ticket of 0, as numpy gives it
            got = choose("hash", 4, flow, node, node, np.ones(n, np.int64), shared)
            want = choose("hash", 4, flow, node, node, np.ones(n, np.int64), shared.copy())
            drawn = (_plain_mix(4, flow, node) % np.uint64(sum(row))).astype(np.int64)
        assert np.array_equal(got, want)
        first = (np.cumsum(shared, axis=1) <= drawn[:, None]).sum(axis=1)
        first[first == len(row)] = 0
        assert np.array_equal(got, first)
