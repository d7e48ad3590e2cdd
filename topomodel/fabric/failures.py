"""Failed parts: switches, NICs, accelerators and links marked failed on a fabric
(their links carry no traffic)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from topomodel.errors import DesignError, UsageError
from topomodel.fabric.arcs import ArcIndex, arc_index, arcs_by_destination, positions
from topomodel.fabric.columns import Columns
from topomodel.fabric.tables import Fabric, ignores_failures
from topomodel.inputs.design import Design


def mark_failures(nodes: Columns, links: Columns, design: Design) -> Columns:
    """``links`` with the design's failed nodes' links and failed links marked failed.

    Raises
    ------
    DesignError
        With a problem for every failed part that is not in the fabric.
    """
    failures = design.failures
    if not failures.nodes and not failures.links:
        return links
    mask, problems = failed_links(nodes, links, failures.nodes, failures.links)
    if problems:
        raise DesignError([design.locate(("failures", kind, index), message)
                           for kind, index, message in problems])
    return links.replaced(failed=mask)


@dataclass(frozen=True, eq=False)
class PartIndex:
    """What naming failed parts looks up on a fabric: node numbers by name, and the
    link rows by their ends (:func:`~topomodel.fabric.arcs.arc_index`) and by their
    other ends (:func:`~topomodel.fabric.arcs.arcs_by_destination`)."""

    number: dict[str, int]
    by_src: ArcIndex
    by_dst: ArcIndex


def node_numbers(nodes: Any) -> dict[str, int]:
    """Node numbers by name, from a node table (columns or a DataFrame)."""
    return {name: number for number, name in enumerate(np.asarray(nodes["name"]).tolist())}


@ignores_failures
def part_index(fabric: Fabric) -> PartIndex:
    """The :class:`PartIndex` of ``fabric`` (read it with
    :meth:`~topomodel.fabric.tables.Fabric.derived`: made once per fabric, shared by
    its copies with failed parts)."""
    return PartIndex(node_numbers(fabric.node_arrays), fabric.derived(arc_index),
                     fabric.derived(arcs_by_destination))


def failed_links(nodes: Any, links: Any, node_names: Sequence[str],
                 link_names: Sequence[str], *, index: PartIndex | None = None
                 ) -> tuple[np.ndarray, list[tuple[str, int, str]]]:
    """Link rows touching the named nodes or joining the named ``"a -- b"`` pairs.

    Returns the mask and the problems found: (``"nodes"`` or ``"links"``, index, message).
    With the tables' ``index`` (:func:`part_index`), the rows are looked up (no pass
    over the links but the mask's copy); without it, a node's rows are found by a pass
    and the named links by one sort of the links, made only when links are named (1 %
    of the spine links of a 131,072-GPU fabric are 1,300 names, looked up at once).
    """
    number = node_numbers(nodes) if index is None else index.number
    failed = np.array(links["failed"], bool)  # a copy
    src, dst = np.asarray(links["src"]), np.asarray(links["dst"])
    problems = []
    dead = np.zeros(len(nodes), bool)
    for k, name in enumerate(node_names):
        if name not in number:
            problems.append(("nodes", k, f"no node named {name!r}"))
            continue
        dead[number[name]] = True
    if index is None:
        failed |= dead[src] | dead[dst]
    elif dead.any():
        gone = np.flatnonzero(dead)
        failed[index.by_src.rows_from(gone)] = True  # out of them
        failed[index.by_dst.rows_from(gone)] = True  # into them
    wanted: list[tuple[int, str, int, int]] = []
    for k, text in enumerate(link_names):
        ends = [part.strip() for part in text.split("--")]
        if len(ends) != 2 or any(e not in number for e in ends):
            problems.append(("links", k, f"expected 'node -- node' with known names, got"
                             f" {text!r}"))
            continue
        wanted.append((k, text, int(number[ends[0]]), int(number[ends[1]])))
    if wanted:
        arcs = ArcIndex.of(src, dst, len(nodes)) if index is None else index.by_src
        a = np.array([w[2] for w in wanted], np.int64)
        b = np.array([w[3] for w in wanted], np.int64)
        # a bundle is its arcs both ways: a -> b and b -> a
        starts, stops = (np.concatenate(both) for both in zip(arcs.spans(a, b),
                                                               arcs.spans(b, a), strict=True))
        none = (starts == stops).reshape(2, -1).all(axis=0)
        for (k, text, _, _), missing in zip(wanted, none, strict=True):
            if missing:
                first, second = (part.strip() for part in text.split("--"))
                problems.append(("links", k, f"no link between {first} and {second}"))
        rows = arcs.order[positions(starts, stops)]
        failed[rows] = True
    problems.sort(key=lambda p: (p[0] != "nodes", p[1]))
    return failed, problems


def with_failures(fabric: Fabric, node_names: Sequence[str] = (),
                  link_names: Sequence[str] = (), *,
                  labels: tuple[str, str] = ("", "")) -> Fabric:
    """A copy of ``fabric`` with more failed parts (nodes by name, ``"a -- b"`` links).

    The copy shares every column but ``failed`` with ``fabric`` and the views that ignore failures
    (:meth:`~topomodel.fabric.tables.Fabric.with_failed`), and the look-up of the names
    is made once per fabric, so the goodput's degraded fabrics cost little more than
    their masks and the views their failures change.

    Raises
    ------
    UsageError
        Naming every part that is not in the fabric, each after its label in ``labels``
        (for the nodes and the links: where the names came from, such as the command
        line's ``--fail`` and ``--fail-link``).
    """
    mask, problems = failed_links(fabric.node_arrays, fabric.link_arrays, node_names,
                                  link_names,
                                  index=fabric.derived(part_index))
    if problems:
        label = dict(zip(("nodes", "links"), labels, strict=True))
        raise UsageError("; ".join(f"{label[kind]}: {message}" if label[kind] else message
                                   for kind, _, message in problems))
    return fabric.with_failed(mask)
