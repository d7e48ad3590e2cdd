"""Links under a time model: each link tier's effective share of its line rate and where
it comes from, and every link's effective rate (bytes/s per direction).

Scale-up tiers run at their link's catalog efficiency (NCCL's achievable per-link
figures), the host tier at its host link's, the network tiers at their protocol's
packet efficiency (:data:`NETWORK_EFFICIENCY`) or, under TCP/IP sockets,
:data:`SOCKETS_EFFICIENCY`; a time model's ``efficiency`` overrides any tier.
"""

from __future__ import annotations

import numpy as np

from topomodel.analysis.assumptions import TimeModel
from topomodel.fabric.tables import Fabric
from topomodel.inputs.parts import HostLink, ScaleupLink, Switch
from topomodel.inputs.records import documented

SOCKETS_EFFICIENCY = documented(
    "linkrates.SOCKETS_EFFICIENCY", 10 / 12.5,
    """Effective / line rate of the network under NCCL's TCP/IP sockets transport
    (scale-out ``transport: sockets``, as NCCL_IB_DISABLE=1 or a NIC without RDMA):
    NVIDIA's GTC24 session S62129, slide 12, gives nccl-tests AllReduce busbw of
    10 GB/s on 100GbE TCP/IP sockets, 0.80 of the 12.5 GB/s line rate, where 200 Gb
    RDMA reaches 24 of 25 GB/s (0.96, the RDMA packet efficiency); shared reference
    collectives-compute-power.md section 1.1 [R21]. The kernel's copies and TCP/IP
    headers take the rest.""")

NETWORK_EFFICIENCY = {"infiniband": 4096 / (4096 + 26), "ethernet": 4096 / (4096 + 82)}
"""Payload share of the wire for RDMA writes at a 4096-byte MTU (first principles).
InfiniBand: LRH 8 + BTH 12 + ICRC 4 + VCRC 2 = 26 bytes of headers per packet (IBTA
spec vol. 1, ch. 5 and 9); RoCEv2: Ethernet 14 + FCS 4 + preamble and start 8 + the
minimum gap 12, IPv4 20, UDP 8, BTH 12, ICRC 4 = 82 bytes (IEEE 802.3, RoCEv2 annex A17).
FEC and line coding are already out of the line rate (400 Gb/s is the data rate)."""


def tier_efficiency(fabric: Fabric, time_model: TimeModel) -> dict[str, float]:
    """Effective / nominal rate per link tier (see :func:`efficiency_sources`)."""
    return {tier: value for tier, (value, _) in efficiency_sources(fabric, time_model).items()}


def effective_link_Bps(fabric: Fabric, time_model: TimeModel) -> np.ndarray:
    """Every link's effective rate under ``model``, bytes/s per direction: its nominal
    capacity times its tier's efficiency (:func:`tier_efficiency`), failed or not (the
    one place a link's rate meets a time model)."""
    links = fabric.links
    efficiency = tier_efficiency(fabric, time_model)
    tiers = links["tier"]
    eff = np.array([efficiency[t] for t in tiers.cat.categories])[tiers.cat.codes.to_numpy()]
    rate: np.ndarray = links["capacity_Bps"].to_numpy() * eff
    return rate


def efficiency_sources(fabric: Fabric, time_model: TimeModel) -> dict[str, tuple[float, str]]:
    """Effective / nominal rate per link tier present, and where it comes from: the time
    model's override, else scale-up tiers at their link's catalog efficiency, the host
    tier (accelerator to NIC) at its host link's, the network tiers at their
    protocol's packet efficiency (:data:`NETWORK_EFFICIENCY`), else 1 (line rate)."""
    catalog, structure = fabric.catalog, fabric.structure
    link = structure.scaleup.link
    up = (catalog.get(link, ScaleupLink).efficiency, f"catalog {link}") if link else (
        1.0, "no scale-up link")
    host_id = structure.scaleout.host_link
    host = (catalog.get(host_id, HostLink).efficiency, f"catalog {host_id}") if host_id else (
        1.0, "no host link: the NIC's rate")
    switch_id = structure.scaleout.switch
    if switch_id and fabric.design.scaleout.transport == "sockets":
        net = (SOCKETS_EFFICIENCY, "TCP/IP sockets transport (GTC24 S62129)")
    elif switch_id:
        protocol = catalog.get(switch_id, Switch).protocol
        net = (NETWORK_EFFICIENCY[protocol], f"{protocol} packet efficiency")
    else:
        net = (1.0, "no scale-out switch")
    socket_id = structure.scaleup.socket_link
    between = ((catalog.get(socket_id, ScaleupLink).efficiency, f"catalog {socket_id}")
               if socket_id else up)
    out: dict[str, tuple[float, str]] = {}
    for tier in fabric.links["tier"].cat.categories:
        value = (between if tier == "scaleup_l3" else up if tier.startswith("scaleup")
                 else host if tier == "host" else net)
        out[tier] = ((time_model.efficiency[tier], "given (--efficiency)")
                     if tier in time_model.efficiency else value)
    return out
