"""Slurm ``topology.conf`` for the tree and block plugins (``slurm.conf``'s
``TopologyPlugin=topology/tree`` or ``topology/block``).

The format is Slurm's (``topology.conf(5)``, https://slurm.schedmd.com/topology.conf.html,
and the topology guide https://slurm.schedmd.com/topology.html): one line per switch,
``SwitchName=NAME Switches=CHILDREN`` or ``SwitchName=NAME Nodes=HOSTS``, names in
Slurm's hostlist notation (``node[0000-0031]``); for the block plugin one
``BlockName=NAME Nodes=HOSTS`` per block and a ``BlockSizes=`` line.

The tree is the one the topology guide recommends ("the leaf switches with their nodes
plus one top level switch"), not every physical switch: a Slurm leaf per leaf group of
:func:`~topomodel.export.hosts.host_places` (the hosts whose NICs reach the same leaf
switches: one leaf, or a rail-optimized unit's rail leaves together), a switch per pod
over its leaf groups in a 3-tier fabric, and one top switch over the rest. Every host
is under exactly one leaf, every switch is reachable from the single top, and each
line's comment names the physical switches it stands for.
"""

from __future__ import annotations

import pandas as pd

from topomodel.errors import UsageError
from topomodel.export.hosts import HostNames, bracket, group_leaves, host_places
from topomodel.fabric.tables import Fabric

SLURM_LEAF, SLURM_POD, SLURM_TOP = "leaf", "pod", "top"
"""Prefixes of the Slurm switch names: ``leaf0`` (a leaf group), ``pod0`` (a pod of a
3-tier fabric), ``top`` (the one root). Slurm treats names as labels ("internal to
Slurm and arbitrary", at most 64 characters); a dot would break
``SLURM_TOPOLOGY_ADDR``, which joins the names with dots, so none has one."""

SLURM_BLOCK = "block"
"""Prefix of a block's name (``block0`` is scale-up domain 0)."""


def slurm_tree(fabric: Fabric, names: HostNames) -> str:
    """The ``topology/tree`` file for ``fabric``'s hosts, named by ``names``.

    Raises
    ------
    UsageError
        When the fabric has no scale-out network (no leaf to put a host under).
    """
    places = host_places(fabric)
    label = fabric.design.name or str(fabric.design.file)
    if (places["group"] < 0).any():
        raise UsageError(f"{label}: no scale-out network joins its hosts, so Slurm's tree"
                         " plugin has no switch to put them under (--to slurm-block"
                         " describes its scale-up domains)")
    leaves = group_leaves(fabric, places)
    lines = [f"# Slurm topology.conf (topology/tree) written by topomodel from {label}:",
             f"# {len(places)} hosts named {names.name(0)}...; one Slurm leaf per group of"
             " hosts reaching the same leaf switches,",
             "# a switch per pod (3-tier fabrics) and one top switch (docs/exports.md)."]
    for group, hosts in places.groupby("group").groups.items():
        physical = leaves[int(group)]
        lines.append(f"# {SLURM_LEAF}{group}: {len(physical)} leaf switch(es)"
                     f" {physical[0]}{' ... ' + physical[-1] if len(physical) > 1 else ''}")
        lines.append(f"SwitchName={SLURM_LEAF}{group} Nodes={names.hostlist(hosts)}")
    parents = _parents(places)
    for name, children in parents:
        lines.append(f"SwitchName={name} Switches={children}")
    return "\n".join(lines) + "\n"


def _parents(places: pd.DataFrame) -> list[tuple[str, str]]:
    """(name, children in hostlist notation) of the switches above the leaf groups:
    one per pod where there are several pods, then the top where more than one switch
    is left."""
    groups = places.drop_duplicates("group")[["group", "pod"]]
    level = [(SLURM_LEAF, str(g)) for g in groups["group"]]
    out: list[tuple[str, str]] = []
    if groups["pod"].nunique() > 1:
        for pod, part in groups.groupby("pod"):
            out.append((f"{SLURM_POD}{pod}",
                        bracket(SLURM_LEAF, [str(g) for g in sorted(part["group"])])))
        level = [(SLURM_POD, str(p)) for p in sorted(groups["pod"].unique())]
    if len(level) > 1:
        prefix = level[0][0]
        out.append((SLURM_TOP, bracket(prefix, [number for _, number in level])))
    return out


def slurm_blocks(fabric: Fabric, names: HostNames) -> str:
    """The ``topology/block`` file: one block per scale-up domain (an NVL72 rack's 18
    trays) and ``BlockSizes`` the smallest domain's host count.

    Only the base block size is written: the scale-up domain is the unit of locality the
    design defines; higher levels (pairs of blocks, ...) would make Slurm keep a job of
    several blocks inside an aligned power-of-two group, which a fat-tree joining every
    rack at the same rate does not call for. Add them by hand where the floor plan does.

    Raises
    ------
    UsageError
        When every scale-up domain is one host (nothing for a block to group).
    """
    places = host_places(fabric)
    label = fabric.design.name or str(fabric.design.file)
    sizes = places.groupby("domain").size()
    if sizes.max() < 2:
        raise UsageError(f"{label}: every scale-up domain is a single host, so Slurm's"
                         " block plugin has nothing to group (--to slurm writes the tree)")
    counts = f"{sizes.min()}" if sizes.min() == sizes.max() else \
        f"{sizes.min()} to {sizes.max()}"
    lines = [f"# Slurm topology.conf (topology/block) written by topomodel from {label}:",
             f"# one block per scale-up domain ({counts} hosts, named {names.name(0)}...).",
             *(f"BlockName={SLURM_BLOCK}{domain} Nodes={names.hostlist(hosts)}"
               for domain, hosts in places.groupby("domain").groups.items()),
             f"BlockSizes={sizes.min()}"]
    return "\n".join(lines) + "\n"
