"""What routing returns (:class:`Routed`: bytes per link and hops per flow), the
routing policies, and the per-fabric cache the routers share."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

import numpy as np

from topomodel.fabric.tables import Fabric
from topomodel.vocabulary import ROUTERS as ROUTERS
from topomodel.vocabulary import ROUTINGS as ROUTINGS

T = TypeVar("T")




@dataclass(frozen=True, eq=False)
class Routed:
    """Where one step of a phase goes.

    ``link_bytes`` is indexed like ``fabric.links`` (bytes per step); ``hops`` is per
    flow (links on its path; all paths of a flow have the same length); ``unroutable``
    lists flows (indices) with no path, whose bytes are not on any link.
    """

    link_bytes: np.ndarray
    hops: np.ndarray
    unroutable: np.ndarray
    router: str


def _cached(fabric: Fabric, make: Callable[[Fabric], T]) -> T:
    """The router's view ``make(fabric)``, built once and kept on the fabric."""
    return fabric.derived(make)
