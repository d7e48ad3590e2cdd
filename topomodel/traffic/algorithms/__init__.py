"""The collective algorithms: one :class:`~topomodel.traffic.algorithms.record.Algorithm`
record per algorithm, one module per family, and the one list every part of the package
reads (generation, the NCCL time model, ``auto``'s candidates for route, the step, the
review and decode, the traffic the failure what-ifs share, the CLI help).

Adding an algorithm: write its generator and record in a family module (or a new one)
and add the record to :data:`REGISTRY`.

Examples
--------
>>> algorithms_for("allgather")
('ring', 'rhd', 'hierarchical', 'torus')
>>> from topomodel import load_design
>>> from topomodel.fabric.build import build_fabric
>>> server = build_fabric(*load_design("examples/hgx-h100-server.yaml"))
>>> auto_candidates(server, "allreduce", 8)  # NVSwitch reduces; no torus
('ring', 'tree', 'innetwork', 'nvlstree')
>>> auto_candidates(server, "allreduce", 2)  # two ranks: every algorithm is one exchange
('ring',)
>>> algorithm("rhd").why_not_auto
'NCCL does not run it (an MPI algorithm): run by name, to compare'
"""

from __future__ import annotations

from topomodel.fabric.tables import Fabric
from topomodel.traffic.algorithms.alltoall import DIRECT, PAIRWISE
from topomodel.traffic.algorithms.halving import RHD
from topomodel.traffic.algorithms.innetwork import INNETWORK, NVLSTREE
from topomodel.traffic.algorithms.pointtopoint import P2P
from topomodel.traffic.algorithms.record import Algorithm
from topomodel.traffic.algorithms.rings import HIERARCHICAL, RING
from topomodel.traffic.algorithms.torus import TORUS
from topomodel.traffic.algorithms.trees import TREE
from topomodel.traffic.communicators import CollectiveError
from topomodel.vocabulary import COLLECTIVES

__all__ = ["REGISTRY", "SMALL_GROUP_RANKS", "Algorithm", "algorithm", "algorithms_for",
           "auto_candidates", "help_text"]

REGISTRY: dict[str, Algorithm] = {a.name: a for a in (
    RING, TREE, RHD, HIERARCHICAL, INNETWORK, NVLSTREE, TORUS, DIRECT, PAIRWISE, P2P)}
"""Every algorithm by name; for each collective the first that serves it is its default."""

SMALL_GROUP_RANKS = 2
"""Groups of at most this many ranks get the collective's default alone from ``auto``:
between two ranks ring, tree and the torus buckets are the same exchange, and NCCL runs
no NVLS there (``ncclNvlsInit`` in ``src/transport/nvls.cc`` returns at a GPU count of 2
or fewer)."""


def algorithm(name: str) -> Algorithm:
    """The record of ``name``.

    Raises
    ------
    CollectiveError
        For an unknown name.
    """
    try:
        return REGISTRY[name]
    except KeyError:
        raise CollectiveError(f"unknown algorithm {name!r}; choose from"
                              f" {', '.join(REGISTRY)}") from None


def algorithms_for(collective: str) -> tuple[str, ...]:
    """The algorithms that serve ``collective``, its default first."""
    return tuple(a.name for a in REGISTRY.values() if collective in a.collectives)


def auto_candidates(fabric: Fabric, collective: str, ranks: int) -> tuple[str, ...]:
    """What ``auto`` tries on ``fabric`` for groups of ``ranks`` ranks: the algorithms
    NCCL runs (``Algorithm.auto``) that can run on the fabric (``Algorithm.applies``),
    or the collective's default alone for groups of at most :data:`SMALL_GROUP_RANKS`.
    Where one does not apply to the groups themselves, the search skips it."""
    tried = tuple(a.name for a in REGISTRY.values() if a.auto and collective in a.collectives)
    if ranks <= SMALL_GROUP_RANKS:
        return tried[:1]
    return tuple(name for name in tried if REGISTRY[name].applies(fabric))


def help_text() -> str:
    """The algorithms in words, for the CLI's ``--algorithm`` help."""
    return "; ".join(f"{a.name} ({a.help})" for a in REGISTRY.values()) + (
        "; or auto (the fastest of those NCCL runs: "
        + ", ".join(a.name for a in REGISTRY.values() if a.auto) + "; default)")


ALGORITHMS_BY_COLLECTIVE: dict[str, tuple[str, ...]] = {
    c: algorithms_for(c) for c in COLLECTIVES}
"""Algorithms each collective supports; the first is the default."""
