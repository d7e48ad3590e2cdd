"""Communicator groups: lists of accelerators in rank order, given directly or by layout.

Specs (ranks are positions in the fabric's rank order, 0-based):

================ ===================================================================
``all``          one group of every accelerator
``domain``       every scale-up domain (NVLink server or rack, torus, supernode)
``system``       every system (server, node or rack)
``rail``         one rank per system with the same local index (rail), every rail
``block:N``      consecutive blocks of N ranks, all at once (TP, EP groups)
``stride:K``     every K-th rank: K groups ``{r : r mod K = j}`` (DP groups)
``A-B``          ranks A to B inclusive, one group
``A,B,C``        those ranks, one group (for SendRecv: rank A sends to rank B)
================ ===================================================================
"""

from __future__ import annotations

import numpy as np

from topomodel.errors import UsageError
from topomodel.fabric.tables import Fabric

GROUP_SPECS = ("all", "domain", "system", "rail", "block:N", "stride:K", "A-B", "A,B,C")


def parse_groups(fabric: Fabric, spec: str) -> np.ndarray:
    """The communicators ``spec`` names: a 2-D array of accelerator node numbers, a row
    per group (:data:`~topomodel.traffic.communicators.Groups`). Every spec names groups
    of one size (the builders make domains and systems of one size); groups of several
    sizes are several specs, run at once.

    Raises
    ------
    UsageError
        For a spec that is malformed, names ranks that do not exist, or groups that do
        not fit (a block size that does not divide the accelerators; domains, systems or
        rails of different sizes).

    Examples
    --------
    >>> class F:  # a stand-in with 8 accelerators numbered 10..17
    ...     accelerators = np.arange(10, 18)
    >>> parse_groups(F(), "stride:4")[:2].tolist()
    [[10, 14], [11, 15]]
    """
    acc = fabric.accelerators
    n = len(acc)
    text = spec.strip()
    if text == "all":
        return acc.reshape(1, -1)
    if text in ("domain", "system", "rail"):
        column = {"domain": "domain", "system": "system", "rail": "local"}[text]
        keys = fabric.node_arrays[column][acc]
        if text == "domain" and (keys < 0).any():
            raise UsageError("this fabric has no scale-up domains; use 'system' or 'block:N'")
        order = np.argsort(keys, kind="stable")
        starts = np.flatnonzero(np.r_[True, np.diff(keys[order]) != 0])
        sizes = np.diff(np.r_[starts, n])
        if (sizes != sizes[0]).any():
            raise UsageError(f"group spec {spec!r}: its groups differ in size"
                             f" ({int(sizes.min())} to {int(sizes.max())} ranks); name the"
                             " groups of each size with their own spec")
        return acc[order].reshape(len(starts), -1)
    kind, _, value = text.partition(":")
    if kind in ("block", "stride"):
        size = _positive(value, spec)
        if n % size:
            raise UsageError(f"group spec {spec!r}: {n} accelerators do not divide into"
                             f" {'blocks' if kind == 'block' else 'strides'} of {size}")
        return acc.reshape(-1, size) if kind == "block" else acc.reshape(-1, size).T.copy()
    ranks = _ranks(text, spec, n)
    if ranks.max() >= n:
        raise UsageError(f"group spec {spec!r}: rank {int(ranks.max())} does not exist"
                         f" (ranks 0-{n - 1})")
    if len(np.unique(ranks)) != len(ranks):
        raise UsageError(f"group spec {spec!r}: a rank appears twice")
    return acc[ranks].reshape(1, -1)


def _positive(value: str, spec: str) -> int:
    # ASCII digits only: str.isdigit() also takes superscripts ('²'), which int() refuses
    if not (value.isascii() and value.isdigit()) or int(value) < 1:
        raise UsageError(f"group spec {spec!r}: expected a positive whole number after ':'")
    return int(value)


def _ranks(text: str, spec: str, n: int) -> np.ndarray:
    """The ranks of ``A-B`` or ``A,B,C``; a range is checked against the ``n`` ranks
    before it is made."""
    try:
        if "-" in text and "," not in text:
            first, last = (int(p) for p in text.split("-"))
            if last < first or first < 0:
                raise ValueError
        else:
            ranks = np.array([int(p) for p in text.split(",")])
    except ValueError:
        raise UsageError(f"unknown group spec {spec!r}; use one of"
                         f" {', '.join(GROUP_SPECS)}") from None
    if "-" in text and "," not in text:
        if last >= n:
            raise UsageError(f"group spec {spec!r}: rank {last} does not exist"
                             f" (ranks 0-{n - 1})")
        return np.arange(first, last + 1)
    if (ranks < 0).any() or len(ranks) < 1:
        raise UsageError(f"group spec {spec!r}: ranks are 0 or more")
    return ranks
