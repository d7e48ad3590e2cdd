"""Failed parts: switches, NICs, accelerators and links marked failed on a fabric
(their links carry no traffic)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np
import pandas as pd

from topomodel.design import Design
from topomodel.errors import DesignError, UsageError
from topomodel.fabric.tables import Fabric


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


def failed_links(nodes: Any, links: Any, node_names: Sequence[str],
                 link_names: Sequence[str]) -> tuple[np.ndarray, list[tuple[str, int, str]]]:
    """Link rows touching the named nodes or joining the named ``"a -- b"`` pairs.

    Returns the mask and the problems found: (``"nodes"`` or ``"links"``, index, message).
    """
    index = pd.Series(np.arange(len(nodes)), index=nodes["name"].to_numpy())
    failed = links["failed"].to_numpy().copy()
    src, dst = links["src"].to_numpy(), links["dst"].to_numpy()
    problems = []
    for k, name in enumerate(node_names):
        if name not in index:
            problems.append(("nodes", k, f"no node named {name!r}"))
            continue
        failed |= (src == index[name]) | (dst == index[name])
    for k, text in enumerate(link_names):
        ends = [part.strip() for part in text.split("--")]
        if len(ends) != 2 or any(e not in index for e in ends):
            problems.append(("links", k, f"expected 'node -- node' with known names, got"
                             f" {text!r}"))
            continue
        a, b = index[ends[0]], index[ends[1]]
        pair = ((src == a) & (dst == b)) | ((src == b) & (dst == a))
        if not pair.any():
            problems.append(("links", k, f"no link between {ends[0]} and {ends[1]}"))
        failed |= pair
    return failed, problems


def with_failures(fabric: Fabric, node_names: Sequence[str] = (),
                  link_names: Sequence[str] = ()) -> Fabric:
    """A copy of ``fabric`` with more failed parts (nodes by name, ``"a -- b"`` links).

    Raises
    ------
    UsageError
        Naming every part that is not in the fabric.
    """
    mask, problems = failed_links(fabric.nodes, fabric.links, node_names, link_names)
    if problems:
        raise UsageError("; ".join(message for _, _, message in problems))
    links = fabric.links.copy()
    links["failed"] = mask
    return replace(fabric, links=links)
