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
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from topomodel.errors import UsageError
from topomodel.fabric.tables import Fabric

COMPONENT_OF_KIND = {"accelerator": ("xpu", "xpu"), "nic": ("nic", "nic"),
                     "scaleup_switch": ("switch", "switch")}
"""InfraGraph component (name, ``choice``) of each in-system node kind."""

SYSTEM_INSTANCE = "system"
"""Instance name of the systems."""


def _name(text: str) -> str:
    """A name InfraGraph's ``Named.Object`` pattern takes (letters, digits, ``-``,
    ``_``, spaces and brackets: a dot, slash or other mark becomes ``-``)."""
    return re.sub(r"[^\sa-zA-Z0-9\-_()<>\[\]]", "-", text)


def infragraph(fabric: Fabric) -> dict[str, Any]:
    """The InfraGraph ``Infrastructure`` of ``fabric`` (plain types, JSON-ready).

    Raises
    ------
    UsageError
        When the systems are not built alike (their internal links differ).
    """
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
    gbps = live["capacity_Bps"].to_numpy() * 8 / 1e9
    ns = live["latency_s"].to_numpy() * 1e9
    link_tier = live["tier"].astype(str).to_numpy()
    link_names: dict[tuple[str, float, float], str] = {}

    def link_of(i: Any) -> str:
        key = (link_tier[i], round(float(gbps[i]), 6), round(float(ns[i]), 6))
        if key not in link_names:
            link_names[key] = _name(f"{key[0]}-{key[1]:g}Gbps-{key[2]:g}ns")
        return link_names[key]

    def component(node: int) -> str:
        return f"{COMPONENT_OF_KIND[kind[node]][0]}[{local[node]}]"

    internal = inside[src] & inside[dst] & (system[src] == system[dst])
    systems = int(system.max()) + 1
    first = np.flatnonzero(internal & (system[src] == 0))
    if internal.sum() != systems * len(first):
        raise UsageError(f"{fabric.design.name or fabric.design.file}: its systems are"
                         " not built alike; InfraGraph's one system device cannot hold them")
    counts = {COMPONENT_OF_KIND[k]: int(((kind == k) & (system == 0)).sum())
              for k in COMPONENT_OF_KIND}
    system_device: dict[str, Any] = {
        "name": _name(fabric.design.system),
        "description": f"{fabric.design.system} as built by topomodel",
        "components": [{"name": name, "count": count, "choice": choice}
                       for (name, choice), count in counts.items() if count],
        "edges": [{"ep1": {"component": component(src[i])},
                   "ep2": {"component": component(dst[i])},
                   "scheme": "one2one", "link": link_of(i)} for i in first],
    }
    system_device["links"] = _links(link_names, {e["link"] for e in system_device["edges"]})
    instances = [{"name": SYSTEM_INSTANCE, "device": system_device["name"], "count": systems}]
    switch = ~inside & (kind != "accelerator") & (kind != "nic")
    position = np.full(len(nodes), -1)
    instance_of = np.empty(len(nodes), dtype=object)
    devices = [system_device]
    for (t, m) in sorted({(tier[n], model[n]) for n in np.flatnonzero(switch)}):
        members = np.flatnonzero(switch & (tier == t) & (model == m))
        position[members] = np.arange(len(members))
        instance_of[members] = _name(f"{t}-{m}")
        instances.append({"name": _name(f"{t}-{m}"), "device": _name(m),
                          "count": len(members)})
        if _name(m) not in {d["name"] for d in devices}:
            devices.append({"name": _name(m), "description": f"{m} switch",
                            "components": [{"name": "asic", "count": 1, "choice": "switch"}],
                            "links": [], "edges": []})

    def endpoint(node: int) -> dict[str, str]:
        if inside[node]:
            return {"instance": f"{SYSTEM_INSTANCE}[{system[node]}]",
                    "component": component(node)}
        return {"instance": f"{instance_of[node]}[{position[node]}]", "component": "asic[0]"}

    edges: list[dict[str, Any]] = [
        {"ep1": endpoint(src[i]), "ep2": endpoint(dst[i]), "scheme": "one2one",
         "link": link_of(i)} for i in np.flatnonzero(~internal)]
    label = fabric.design.name or str(fabric.design.file)
    return {"name": _name(label), "description": f"{label}, written by topomodel",
            "devices": devices,
            "links": _links(link_names, {e["link"] for e in edges}),
            "instances": instances, "edges": edges}


def _links(names: dict[tuple[str, float, float], str], used: set[str]) -> list[dict[str, Any]]:
    """InfraGraph links of ``used``: bandwidth per direction in Gb/s, latency in ns."""
    return [{"name": name, "description": f"{tier} bundle",
             "physical": {"bandwidth": {"choice": "gigabits_per_second",
                                        "gigabits_per_second": gbps},
                          "latency": {"choice": "ns", "ns": ns}}}
            for (tier, gbps, ns), name in sorted(names.items(), key=lambda kv: kv[1])
            if name in used]
