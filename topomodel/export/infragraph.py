"""The design in Keysight's InfraGraph format (JSON), which ASTRA-sim 3.0 reads.

InfraGraph (https://github.com/Keysight/infragraph, ``schema/*.yaml``) describes an
infrastructure as ``devices`` (each a set of ``components`` with a ``count``, and the
``edges`` inside it), ``instances`` (a device and how many copies), ``links`` (a name
with a ``physical`` bandwidth and latency) and ``edges`` between instance components
(``ep1``/``ep2`` with ``instance: "name[i]"`` and ``component: "name[j]"``, a
``scheme`` and a ``link``).

The export writes:

- one device for the system (``xpu``, ``nic`` and in-system ``switch`` components, the
  system's internal links as device edges, taken from system 0: every system of a design
  is built alike) and one per network switch model (a single ``asic`` component);
- one instance of the system device counted ``systems``, and one per switch tier and
  model (``leaf-qm9700``), switches numbered in the fabric's order;
- one ``one2one`` edge per physical bundle (the fabric's two arcs of it), its link the
  bundle's capacity per direction in Gb/s (``cables x rate``) and its propagation
  latency in ns; failed links are left out, as in the graph export. InfraGraph's link
  has one bandwidth for both directions: a bundle whose two directions differ (the
  asymmetric-sites example) gets the figures of its arc from the lower-numbered node.

The edges are made as arrays (an endpoint's instance and component per node, a link per
bundle) and written as JSON text in blocks (:func:`write_infragraph`): the 4k-supernode
example's 3.3 million edges never exist as Python dicts.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO, Any

import numpy as np
import pandas as pd

from topomodel.errors import UsageError
from topomodel.fabric.tables import Fabric

COMPONENT_OF_KIND = {"accelerator": ("xpu", "xpu"), "nic": ("nic", "nic"),
                     "scaleup_switch": ("switch", "switch")}
"""InfraGraph component (name, ``choice``) of each in-system node kind."""

SYSTEM_INSTANCE = "system"
"""Instance name of the systems."""

EDGES_PER_BLOCK = 1 << 17
"""Edges formatted and written at a time by :func:`write_infragraph`: large enough that
numpy's string operations dominate, small enough that a block's text (about 20 MB) stays
far below the fabric's own tables."""

_TEXT = np.dtypes.StringDType()


def _name(text: str) -> str:
    """A name InfraGraph's ``Named.Object`` pattern takes (letters, digits, ``-``,
    ``_``, spaces and brackets: a dot, slash or other mark becomes ``-``)."""
    return re.sub(r"[^\sa-zA-Z0-9\-_()<>\[\]]", "-", text)


def _cat(*parts: Any) -> np.ndarray:
    """Element-wise concatenation of string arrays, integer arrays and strings."""
    out = np.asarray("", dtype=_TEXT)
    for part in parts:
        part = part if isinstance(part, str) else np.asarray(part).astype(_TEXT)
        out = np.strings.add(out, part)
    return out


@dataclass(frozen=True)
class _Graph:
    """The document without its edges, and the edges as arrays (one row an edge)."""

    head: dict[str, Any]
    ep1: tuple[np.ndarray, np.ndarray]  # (instance, component)
    ep2: tuple[np.ndarray, np.ndarray]
    link: np.ndarray

    def edges(self, start: int = 0, stop: int | None = None) -> Iterator[tuple[str, ...]]:
        """(instance 1, component 1, instance 2, component 2, link) of edges
        ``start:stop``."""
        cut = slice(start, stop)
        return zip(self.ep1[0][cut].tolist(), self.ep1[1][cut].tolist(),
                   self.ep2[0][cut].tolist(), self.ep2[1][cut].tolist(),
                   self.link[cut].tolist(), strict=True)


def _graph(fabric: Fabric) -> _Graph:
    """The InfraGraph of ``fabric`` (see :func:`infragraph`), edges as arrays."""
    nodes, links = fabric.nodes, fabric.links
    live = links[~links["failed"].to_numpy()]
    src, dst = live["src"].to_numpy(), live["dst"].to_numpy()
    keep = src < dst  # one record per bundle: its two arcs carry the same figures
    src, dst, live = src[keep], dst[keep], live[keep]
    kind = nodes["kind"].astype(str).to_numpy()
    tier = nodes["tier"].astype(str).to_numpy()
    model = nodes["model"].astype(str).to_numpy()
    system = nodes["system"].to_numpy()
    local = nodes["local"].to_numpy()
    inside = np.isin(kind, list(COMPONENT_OF_KIND)) & (system >= 0)
    # one link per (tier, bandwidth, latency): bundles as codes into the unique keys
    gbps = np.round(live["capacity_Bps"].to_numpy() * 8 / 1e9, 6)
    ns = np.round(live["latency_s"].to_numpy() * 1e9, 6)
    codes, keys = pd.MultiIndex.from_arrays(
        [live["tier"].astype(str).to_numpy(), gbps, ns]).factorize()
    keys = [(str(t), float(g), float(n)) for t, g, n in keys]
    names = np.array([_name(f"{t}-{g:g}Gbps-{n:g}ns") for t, g, n in keys] or [""],
                     dtype=_TEXT)
    link = names[codes]

    internal = inside[src] & inside[dst] & (system[src] == system[dst])
    systems = int(system.max()) + 1
    first = np.flatnonzero(internal & (system[src] == 0))
    if internal.sum() != systems * len(first):
        raise UsageError(f"{fabric.design.name or fabric.design.file}: its systems are"
                         " not built alike; InfraGraph's one system device cannot hold them")
    prefix = np.array([COMPONENT_OF_KIND.get(k, ("asic",))[0] for k in COMPONENT_OF_KIND]
                      + ["asic"], dtype=_TEXT)
    kind_code = np.full(len(nodes), len(COMPONENT_OF_KIND))
    for i, k in enumerate(COMPONENT_OF_KIND):
        kind_code[inside & (kind == k)] = i
    component = _cat(prefix[kind_code], "[", np.where(inside, local, 0), "]")
    counts = {COMPONENT_OF_KIND[k]: int(((kind == k) & (system == 0)).sum())
              for k in COMPONENT_OF_KIND}
    used = {str(n) for n in np.unique(link[first])}
    system_device: dict[str, Any] = {
        "name": _name(fabric.design.system),
        "description": f"{fabric.design.system} as built by topomodel",
        "components": [{"name": name, "count": count, "choice": choice}
                       for (name, choice), count in counts.items() if count],
        "edges": [{"ep1": {"component": a}, "ep2": {"component": b}, "scheme": "one2one",
                   "link": n} for a, b, n in zip(component[src[first]].tolist(),
                                                 component[dst[first]].tolist(),
                                                 link[first].tolist(), strict=True)],
        "links": _links(keys, names, used),
    }
    instances = [{"name": SYSTEM_INSTANCE, "device": system_device["name"], "count": systems}]
    switch = ~inside & (kind != "accelerator") & (kind != "nic")
    position = np.where(inside, system, 0)
    label = np.full(len(nodes), SYSTEM_INSTANCE, dtype=_TEXT)
    devices = [system_device]
    for (t, m) in sorted({(tier[n], model[n]) for n in np.flatnonzero(switch)}):
        members = np.flatnonzero(switch & (tier == t) & (model == m))
        position[members] = np.arange(len(members))
        label[members] = _name(f"{t}-{m}")
        instances.append({"name": _name(f"{t}-{m}"), "device": _name(m),
                          "count": len(members)})
        if _name(m) not in {d["name"] for d in devices}:
            devices.append({"name": _name(m), "description": f"{m} switch",
                            "components": [{"name": "asic", "count": 1, "choice": "switch"}],
                            "links": [], "edges": []})
    instance = _cat(label, "[", position, "]")
    outer = np.flatnonzero(~internal)
    a, b = src[outer], dst[outer]
    name = fabric.design.name or str(fabric.design.file)
    head = {"name": _name(name), "description": f"{name}, written by topomodel",
            "devices": devices,
            "links": _links(keys, names, {str(n) for n in np.unique(link[outer])}),
            "instances": instances}
    return _Graph(head, (instance[a], component[a]), (instance[b], component[b]),
                  link[outer])


def infragraph(fabric: Fabric) -> dict[str, Any]:
    """The InfraGraph ``Infrastructure`` of ``fabric`` (plain types, JSON-ready).

    Raises
    ------
    UsageError
        When the systems are not built alike (their internal links differ).
    """
    graph = _graph(fabric)
    edges = [{"ep1": {"instance": i1, "component": c1},
              "ep2": {"instance": i2, "component": c2}, "scheme": "one2one", "link": n}
             for i1, c1, i2, c2, n in graph.edges()]
    return {**graph.head, "edges": edges}


def write_infragraph(fabric: Fabric, stream: IO[bytes]) -> None:
    """Write :func:`infragraph`'s document to ``stream`` as compact JSON (the same text
    ``json.dumps(..., separators=(",", ":"))`` gives), its edges formatted as arrays
    :data:`EDGES_PER_BLOCK` at a time. Names need no JSON escaping: :func:`_name`
    keeps them to letters, digits, ``-``, ``_``, spaces and brackets.

    Raises
    ------
    UsageError
        As :func:`infragraph`.
    """
    graph = _graph(fabric)
    head = json.dumps(graph.head, separators=(",", ":"))
    stream.write((head[:-1] + ',"edges":[').encode())
    total = len(graph.link)
    for start in range(0, total, EDGES_PER_BLOCK):
        cut = slice(start, start + EDGES_PER_BLOCK)
        text = _cat('{"ep1":{"instance":"', graph.ep1[0][cut], '","component":"',
                    graph.ep1[1][cut], '"},"ep2":{"instance":"', graph.ep2[0][cut],
                    '","component":"', graph.ep2[1][cut], '"},"scheme":"one2one","link":"',
                    graph.link[cut], '"}')
        stream.write((("," if start else "") + ",".join(text.tolist())).encode())
    stream.write(b"]}")


def _links(keys: list[tuple[str, float, float]], names: np.ndarray,
           used: set[str]) -> list[dict[str, Any]]:
    """InfraGraph links of ``used``: bandwidth per direction in Gb/s, latency in ns."""
    return [{"name": name, "description": f"{tier} bundle",
             "physical": {"bandwidth": {"choice": "gigabits_per_second",
                                        "gigabits_per_second": gbps},
                          "latency": {"choice": "ns", "ns": ns}}}
            for (tier, gbps, ns), name in sorted(zip(keys, names.tolist(), strict=False),
                                                 key=lambda kv: kv[1])
            if name in used]
