"""Failed parts: switches, NICs, accelerators and links marked failed on a fabric
(their links carry no traffic)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from topomodel.design import Design
from topomodel.errors import DesignError, UsageError
from topomodel.fabric.tables import Fabric, ignores_failures


def _mark_failures(nodes: Any, links: Any, design: Design) -> None:
    """Mark the design's failed nodes' links and failed links as failed.

    Raises
    ------
    DesignError
        With a problem for every failed part that is not in the fabric.
    """
    failures = design.failures
    if not failures.nodes and not failures.links:
        return
    mask, problems = failed_links(nodes, links, failures.nodes, failures.links)
    if problems:
        raise DesignError([design.locate(("failures", kind, index), message)
                           for kind, index, message in problems])
    links["failed"] = mask


@dataclass(frozen=True, eq=False)
class PartIndex:
    """What naming failed parts looks up: node numbers by name, and the link rows in
    the order of their unordered pair of ends (``min * nodes + max``)."""

    number: pd.Series
    pair_keys: np.ndarray  # sorted
    pair_rows: np.ndarray  # the link row of each sorted key
    nodes: int


def part_index(nodes: Any, links: Any) -> PartIndex:
    """The :class:`PartIndex` of a node and a link table (one sort of the links)."""
    n = len(nodes)
    src, dst = links["src"].to_numpy(), links["dst"].to_numpy()
    keys = np.minimum(src, dst).astype(np.int64) * n + np.maximum(src, dst)
    order = np.argsort(keys, kind="stable")
    return PartIndex(pd.Series(np.arange(n), index=nodes["name"].to_numpy()), keys[order],
                     order, n)


@ignores_failures
def _fabric_part_index(fabric: Fabric) -> PartIndex:
    return part_index(fabric.nodes, fabric.links)


def failed_links(nodes: Any, links: Any, node_names: Sequence[str],
                 link_names: Sequence[str], *, index: PartIndex | None = None
                 ) -> tuple[np.ndarray, list[tuple[str, int, str]]]:
    """Link rows touching the named nodes or joining the named ``"a -- b"`` pairs.

    Returns the mask and the problems found: (``"nodes"`` or ``"links"``, index, message).
    Work is one sort of the link table however many parts are named (1 % of the spine
    links of a 131,072-GPU fabric are 1,300 names), none with the ``index`` of these
    tables (:func:`part_index`) given.
    """
    parts = index or part_index(nodes, links)
    number = parts.number
    failed = links["failed"].to_numpy().copy()
    src, dst = links["src"].to_numpy(), links["dst"].to_numpy()
    problems = []
    dead = np.zeros(len(nodes), bool)
    for k, name in enumerate(node_names):
        if name not in number:
            problems.append(("nodes", k, f"no node named {name!r}"))
            continue
        dead[number[name]] = True
    failed |= dead[src] | dead[dst]
    wanted: list[tuple[int, str, int, int]] = []
    for k, text in enumerate(link_names):
        ends = [part.strip() for part in text.split("--")]
        if len(ends) != 2 or any(e not in number for e in ends):
            problems.append(("links", k, f"expected 'node -- node' with known names, got"
                             f" {text!r}"))
            continue
        wanted.append((k, text, int(number[ends[0]]), int(number[ends[1]])))
    if wanted:
        n = parts.nodes
        a = np.array([w[2] for w in wanted], np.int64)
        b = np.array([w[3] for w in wanted], np.int64)
        pair = np.minimum(a, b) * n + np.maximum(a, b)
        lo = np.searchsorted(parts.pair_keys, pair, "left")
        hi = np.searchsorted(parts.pair_keys, pair, "right")
        for (k, text, _, _), start, stop in zip(wanted, lo, hi, strict=True):
            if start == stop:
                first, second = (part.strip() for part in text.split("--"))
                problems.append(("links", k, f"no link between {first} and {second}"))
        rows = parts.pair_rows[np.concatenate([np.arange(x, y)
                                               for x, y in zip(lo, hi, strict=True)])]
        failed[rows] = True
    problems.sort(key=lambda p: (p[0] != "nodes", p[1]))
    return failed, problems


def with_failures(fabric: Fabric, node_names: Sequence[str] = (),
                  link_names: Sequence[str] = ()) -> Fabric:
    """A copy of ``fabric`` with more failed parts (nodes by name, ``"a -- b"`` links).

    The copy shares every column but ``failed`` with ``fabric`` (pandas copy-on-write:
    changing one changes neither) and the views that ignore failures
    (:meth:`~topomodel.fabric.tables.Fabric.with_failed`), and the look-up of the names
    is made once per fabric, so the goodput's degraded fabrics cost little more than
    their masks and the views their failures change.

    Raises
    ------
    UsageError
        Naming every part that is not in the fabric.
    """
    mask, problems = failed_links(fabric.nodes, fabric.links, node_names, link_names,
                                  index=fabric.derived(_fabric_part_index))
    if problems:
        raise UsageError("; ".join(message for _, _, message in problems))
    return fabric.with_failed(mask)
