"""What routing returns (:class:`Routed`: bytes per link and hops per flow) and the
routing policies. The routers' views of a fabric are kept on it
(:meth:`~topomodel.fabric.tables.Fabric.derived`)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from topomodel.vocabulary import ROUTERS as ROUTERS
from topomodel.vocabulary import ROUTINGS as ROUTINGS


@dataclass(frozen=True, eq=False)
class Routed:
    """Where one step of a phase goes.

    ``link_bytes`` is indexed like ``fabric.links`` (bytes per step); ``hops`` is per
    flow (links on its path; all paths of a flow have the same length); ``unroutable``
    lists flows (indices) with no path, whose bytes are not on any link.

    A phase routed in aggregate (:mod:`topomodel.routing.aggregate`) has no per-flow
    hops: ``hops`` is then per *path class*, with ``inside`` saying whether the class
    stays in one scale-up domain; each class holds at least one flow, and every flow's
    path is as long as its class's. ``inside`` is ``None`` for per-flow hops.

    ``span`` (rows ``lo`` to ``hi``), where a router knows it, holds every row with
    bytes: outside it ``link_bytes`` is +0.0, so what reads the loaded rows need not
    look there (``None``: any row may have bytes).
    """

    link_bytes: np.ndarray
    hops: np.ndarray
    unroutable: np.ndarray
    router: str
    inside: np.ndarray | None = None
    span: tuple[int, int] | None = None
