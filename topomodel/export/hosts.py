"""Hosts: the servers a scheduler sees, their names, and where each sits in the network.

A scheduler's node is an operating-system host, not an accelerator and not always a
whole system: a GB200 NVL72 rack is 18 hosts (compute trays) of 4 GPUs (the catalog's
``hosts`` of the system). Host ``n`` is host ``n mod hosts`` of system
``n // hosts``; its accelerators and NICs are the system's split evenly over its hosts
in index order (``local x hosts // count``).

Where a host sits (:func:`host_places`):

- its **scale-up domain** (the accelerators' ``domain``);
- its **leaf group**: the hosts whose NICs reach exactly the same scale-out leaf
  switches (every plane). Without rails that is one leaf's hosts; in a rail-optimized
  unit each host has a NIC on every rail leaf of the unit, so the group is the whole
  scalable unit (the DGX SuperPOD's 32 servers); in the GB200 example, where four rails
  share a leaf, tray ``h`` of every rack shares leaf ``h``;
- its **pod** (3-tier fabrics; -1 otherwise): the pod of its leaf group's leaves.

Host names follow a pattern (:class:`HostNames`): a prefix and the host number,
``node{n:04d}`` by default (``topomodel.export.DEFAULT_HOSTNAMES``: ``node0000``,
``node0001``, ...), written in Slurm's bracket notation (``node[0000-0031]``) where a
list of them is asked for.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import pandas as pd

from topomodel.errors import ParameterError, UsageError
from topomodel.fabric.tables import Fabric
from topomodel.inputs.parts import System

_PATTERN = re.compile(r"^([A-Za-z][A-Za-z0-9_-]*)\{n(?::(?:0(\d+))?d)?\}$")


@dataclass(frozen=True)
class HostNames:
    """A host name pattern: ``prefix`` and the host number zero-padded to ``width`` digits
    (0: no padding).

    Examples
    --------
    >>> names = HostNames.parse("gpu{n:03d}")
    >>> names.name(7), names.hostlist([0, 1, 2, 3, 7, 9, 10])
    ('gpu007', 'gpu[000-003,007,009-010]')
    >>> HostNames.parse("n{n}").hostlist([8, 9, 10, 11])
    'n[8-9,10-11]'
    """

    prefix: str
    width: int

    @classmethod
    def parse(cls, pattern: str) -> HostNames:
        """The pattern ``PREFIX{n}`` or ``PREFIX{n:0Wd}`` (a letter first, then letters,
        digits, ``-`` or ``_``; ``n`` the host number from 0).

        Raises
        ------
        ParameterError
            For any other pattern (parameter ``hostnames``).
        """
        match = _PATTERN.match(pattern)
        if not match:
            raise ParameterError("hostnames", f"{pattern!r} is not PREFIX{{n}} or"
                                 " PREFIX{n:0Wd} (a letter, then letters, digits, - or _;"
                                 " the host number last, e.g. node{n:04d})")
        return cls(match.group(1), int(match.group(2) or 0))

    def number(self, n: int) -> str:
        """The digits of host ``n``."""
        return str(n).zfill(self.width)

    def name(self, n: int) -> str:
        """Host ``n``'s name."""
        return self.prefix + self.number(n)

    def hostlist(self, numbers: Iterable[int]) -> str:
        """The hosts ``numbers`` in Slurm's hostlist notation: ``prefix[a-b,c,...]``, a
        range never crossing a change in the number of digits (Slurm takes a range's
        padding from its first number)."""
        return bracket(self.prefix, [self.number(n) for n in sorted(set(numbers))])


def bracket(prefix: str, numbers: list[str]) -> str:
    """``prefix`` and the sorted digit strings ``numbers`` in bracket notation
    (``s[0-2,5]``; a single name plain).

    Examples
    --------
    >>> bracket("leaf", ["0", "1", "2", "5"]), bracket("top", ["0"])
    ('leaf[0-2,5]', 'top0')
    """
    if len(numbers) == 1:
        return prefix + numbers[0]
    ranges: list[str] = []
    start = previous = numbers[0]
    for current in [*numbers[1:], ""]:
        if current and len(current) == len(previous) and int(current) == int(previous) + 1:
            previous = current
            continue
        ranges.append(start if start == previous else f"{start}-{previous}")
        start = previous = current
    return f"{prefix}[{','.join(ranges)}]"


def expand_hostlist(text: str) -> list[str]:
    """Slurm's hostlist notation back into names: ``a[0-2,5],b1`` -> a0, a1, a2, a5, b1.
    A range's padding is the width of its first number, as Slurm reads it.

    Examples
    --------
    >>> expand_hostlist("node[08-10,12],top")
    ['node08', 'node09', 'node10', 'node12', 'top']
    """
    names: list[str] = []
    for part in re.findall(r"[^,\[]+(?:\[[^\]]*\])?", text):
        head, _, body = part.partition("[")
        if not body:
            names.append(head)
            continue
        for item in body.rstrip("]").split(","):
            low, _, high = item.partition("-")
            for value in range(int(low), int(high or low) + 1):
                names.append(head + str(value).zfill(len(low)))
    return names


def hosts_per_system(fabric: Fabric) -> int:
    """Hosts (operating-system instances) in one system of ``fabric`` (catalog
    ``hosts``: 18 for a GB200 NVL72 rack, 1 for an 8-GPU server)."""
    return fabric.catalog.get(fabric.design.system, System).hosts


def host_places(fabric: Fabric) -> pd.DataFrame:
    """Where each host sits: one row per host (index: host number), columns ``system``,
    ``domain`` (scale-up domain), ``group`` (leaf group, numbered in order of its first
    host; -1 without a scale-out network) and ``pod`` (-1 outside a 3-tier fabric).

    Raises
    ------
    UsageError
        When a host's accelerators span scale-up domains, or a leaf group's leaves lie in
        more than one pod.
    """
    nodes = fabric.nodes
    hosts = hosts_per_system(fabric)
    systems = int(nodes["system"].max()) + 1
    kind = nodes["kind"].astype(str).to_numpy()
    accelerators = nodes[kind == "accelerator"]
    per_system = int((accelerators["system"] == 0).sum())
    host_of_acc = _host_of(accelerators, hosts, per_system)
    domains = pd.Series(accelerators["domain"].to_numpy()).groupby(host_of_acc)
    if (domains.nunique() > 1).any():
        raise UsageError(f"{fabric.design.name or fabric.design.file}: a host's"
                         " accelerators span scale-up domains; hosts cannot be placed")
    places = pd.DataFrame({"system": np.arange(systems * hosts) // hosts,
                           "domain": domains.first().reindex(range(systems * hosts),
                                                             fill_value=-1).to_numpy()})
    places["group"], places["pod"] = -1, -1
    links = fabric.links
    live = links[~links["failed"].to_numpy()]
    src, dst = live["src"].to_numpy(), live["dst"].to_numpy()
    tier = nodes["tier"].astype(str).to_numpy()
    up = (kind[src] == "nic") & (tier[dst] == "leaf")
    if not up.any():
        return places
    nics = nodes.loc[src[up]]
    nic_count = int(((nodes["kind"] == "nic") & (nodes["system"] == 0)).sum())
    pairs = pd.DataFrame({"host": _host_of(nics, hosts, nic_count), "leaf": dst[up]})
    leaf_sets = pairs.drop_duplicates().sort_values(["host", "leaf"]).groupby("host")["leaf"] \
        .agg(tuple)
    codes, _ = pd.factorize(leaf_sets)  # numbered in order of first host
    places.loc[leaf_sets.index, "group"] = codes
    pods = nodes["pod"].to_numpy()
    pod_of = pd.Series(pods[pairs["leaf"].to_numpy()]).groupby(
        places["group"].to_numpy()[pairs["host"].to_numpy()])
    if (pod_of.nunique() > 1).any():
        raise UsageError(f"{fabric.design.name or fabric.design.file}: a leaf group's"
                         " leaves lie in several pods; the hierarchy is not a tree")
    places.loc[leaf_sets.index, "pod"] = pod_of.first().reindex(codes).to_numpy()
    return places


def group_leaves(fabric: Fabric, places: pd.DataFrame) -> dict[int, list[str]]:
    """The names of the leaf switches of each leaf group of ``places``."""
    nodes = fabric.nodes
    kind = nodes["kind"].astype(str).to_numpy()
    links = fabric.links
    live = links[~links["failed"].to_numpy()]
    src, dst = live["src"].to_numpy(), live["dst"].to_numpy()
    up = (kind[src] == "nic") & (nodes["tier"].astype(str).to_numpy()[dst] == "leaf")
    nics = nodes.loc[src[up]]
    hosts = hosts_per_system(fabric)
    nic_count = int(((nodes["kind"] == "nic") & (nodes["system"] == 0)).sum())
    groups = places["group"].to_numpy()[_host_of(nics, hosts, nic_count)]
    names = nodes["name"].to_numpy()
    frame = pd.DataFrame({"group": groups, "leaf": dst[up]}).drop_duplicates()
    return {int(g): sorted(names[part["leaf"].to_numpy()])
            for g, part in frame.groupby("group")}


def _host_of(devices: pd.DataFrame, hosts: int, per_system: int) -> np.ndarray:
    """Host number of each device row (accelerators or NICs, ``per_system`` of them in
    each system), split evenly over the system's hosts in index order."""
    local = devices["local"].to_numpy()
    system = devices["system"].to_numpy()
    return system * hosts + local * hosts // max(per_system, 1)
