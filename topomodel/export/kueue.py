"""Kueue topology-aware scheduling: a ``Topology`` object and the node labels it reads.

Kueue (https://kueue.sigs.k8s.io/docs/concepts/topology_aware_scheduling/) describes a
cluster's hierarchy as an ordered list of node label keys, broadest first, the host
name (``kubernetes.io/hostname``) only at the bottom (its ``Topology`` API,
``apis/kueue/v1beta2/topology_types.go``: 1 to 16 levels, unique). Each node carries
one value per key; pods asking for ``kueue.x-k8s.io/podset-required-topology: KEY`` are
kept inside one value of it.

The levels come from where each host sits (:func:`~topomodel.export.hosts.host_places`),
finest first (most values first), each kept only where it nests in the one below: the
host; its scale-up domain where a domain holds several hosts (an NVL72 rack, a TPU
pod); its leaf group; its pod. The scale-up domain, the fastest tier, always wins: a
leaf group or pod that cuts across it is dropped (in the GB200 example tray ``h`` of
every rack sits under leaf ``h``, so the racks are kept and the leaf groups are not). A
level with one value for the whole cluster is dropped too.
"""

from __future__ import annotations

import re

import pandas as pd
import yaml

from topomodel.errors import ParameterError
from topomodel.export.hosts import HostNames, host_places
from topomodel.fabric.tables import Fabric

KUEUE_API_VERSION = "kueue.x-k8s.io/v1beta2"
"""API version of the written ``Topology``: Kueue's storage version
(``apis/kueue/v1beta2``); v1beta1 and v1alpha1 have the same ``spec.levels``, so an
older Kueue takes the file with this line changed."""

KUEUE_HOSTNAME_LABEL = "kubernetes.io/hostname"
"""The node label Kubernetes sets to the node's name; Kueue allows it only as the last
level."""

DEFAULT_LABEL_PREFIX = "topology.topomodel.io"
"""Prefix of the label keys written for the other levels (``PREFIX/scaleup-domain``,
``PREFIX/leaf-group``, ``PREFIX/pod``): a DNS subdomain of its own, as Kubernetes asks
of labels set by a tool (``--label-prefix`` sets another, e.g. ``cloud.provider.com``)."""

LEVEL_KEYS = {"domain": "scaleup-domain", "group": "leaf-group", "pod": "pod"}
"""Label key (after the prefix) of each level of :func:`host_places`."""

_PREFIX = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def kueue_levels(places: pd.DataFrame) -> list[str]:
    """The columns of ``places`` kept as levels, broadest first (the host aside)."""
    chain: list[str] = []
    below = pd.Series(range(len(places)), index=places.index)  # the host

    def nests(fine: pd.Series, coarse: pd.Series) -> bool:
        return bool((coarse.groupby(fine.to_numpy()).nunique() <= 1).all())

    usable = [c for c in ("domain", "group", "pod")
              if places[c].nunique() > 1 and (places[c] >= 0).all()]
    for column in sorted(usable, key=lambda c: -places[c].nunique()):
        values = places[column]
        if column != "domain" and "domain" in usable and not (
                nests(places["domain"], values) or nests(values, places["domain"])):
            continue  # it cuts across the scale-up domain, which is kept
        if values.nunique() < below.nunique() and nests(below, values):
            chain.append(column)
            below = values
    return chain[::-1]


def kueue_topology(fabric: Fabric, names: HostNames, *,
                   label_prefix: str = DEFAULT_LABEL_PREFIX) -> tuple[str, pd.DataFrame]:
    """The ``Topology`` object (YAML text) and the node labels (one row per host:
    ``node`` and one column per level's label key).

    Raises
    ------
    ParameterError
        For a ``label_prefix`` that is not a DNS subdomain.
    """
    if not _PREFIX.match(label_prefix) or len(label_prefix) > 253:
        raise ParameterError("label_prefix", f"{label_prefix!r} is not a DNS subdomain"
                             " (lower-case letters, digits, '-' and '.')")
    places = host_places(fabric)
    levels = kueue_levels(places)
    keys = [f"{label_prefix}/{LEVEL_KEYS[level]}" for level in levels]
    label = fabric.design.name or str(fabric.design.file)
    name = re.sub(r"[^a-z0-9]+", "-", label.lower()).strip("-")[:63] or "topomodel"
    document = {"apiVersion": KUEUE_API_VERSION, "kind": "Topology",
                "metadata": {"name": name},
                "spec": {"levels": [{"nodeLabel": key} for key in
                                    [*keys, KUEUE_HOSTNAME_LABEL]]}}
    header = (f"# Kueue Topology written by topomodel from {label}: label each node as"
              " node-labels.csv says\n# (docs/exports.md).\n")
    table = pd.DataFrame({"node": [names.name(n) for n in places.index]})
    for level, key in zip(levels, keys, strict=True):
        table[key] = [f"{LEVEL_KEYS[level]}{v}" for v in places[level]]
    table[KUEUE_HOSTNAME_LABEL] = table["node"]
    return header + yaml.safe_dump(document, sort_keys=False), table
