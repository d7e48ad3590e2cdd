"""Per-flow path choices: a seeded 64-bit hash and d-mod-k, vectorised."""

from __future__ import annotations

import numpy as np


def mix(seed: int, flow: np.ndarray, node: np.ndarray) -> np.ndarray:
    """A 64-bit hash of (seed, flow, node) (splitmix64 finaliser), vectorised.

    Examples
    --------
    >>> int(mix(1, np.array([5]), np.array([7]))[0]) == int(mix(1, np.array([5]),
    ...                                                         np.array([7]))[0])
    True
    """
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


def choose(routing: str, seed: int, flow: np.ndarray, node: np.ndarray, dst: np.ndarray,
           stride: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Index of the chosen candidate for each flow (hash or dmodk); ``weights`` is
    (flows, candidates) cables, zero for absent candidates (candidates are sorted by
    node number)."""
    total = weights.sum(axis=1)
    if routing == "hash":
        ticket = (mix(seed, flow, node) % total.astype(np.uint64)).astype(np.int64)
        picked: np.ndarray = np.argmax(np.cumsum(weights, axis=1) > ticket[:, None], axis=1)
        return picked
    count = (weights > 0).sum(axis=1)
    rank = (dst // stride) % count  # the rank-th present candidate
    present = np.cumsum(weights > 0, axis=1) - 1
    chosen: np.ndarray = np.argmax((present == rank[:, None]) & (weights > 0), axis=1)
    return chosen
