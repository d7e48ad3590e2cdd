"""The scale-out transports NCCL runs over (InfiniBand verbs, RoCEv2, AWS EFA/SRD through
the aws-ofi-nccl plugin, TCP/IP sockets): each one's payload share of the wire, the
latency its NCCL net plugin reports, and whether NCCL's low-latency protocols (LL,
LL128) may cross it. A NIC names its transport in the catalog (``transport``), or takes
the one its switch's protocol implies; a NIC entry may override the latency and the
protocols for its platform
(:func:`topomodel.analysis.collectives.linkrates.network_transport`).

How NCCL reads the latency: the net plugin's ``ncclNetProperties_t.latency`` (µs)
becomes the graph's ``latencyInter`` (NVIDIA/nccl 5067397c ``src/graph/search.cc``),
which ``ncclTopoTuneModel`` (``src/graph/tuning.cc``) adds to its network hop latency
``hwLat[NET]`` on every network hop, and a second time under Simple ("the flush extra
latency"). NCCL's own plugins report 0 (``src/transport/net_ib/init.cc``,
``src/transport/net_socket.cc``: ``props->latency = 0; // Not set``).
"""

from __future__ import annotations

from dataclasses import dataclass

from topomodel.inputs.records import documented

IB_HEADER_BYTES = 8 + 12 + 4 + 2
"""Bytes of headers per InfiniBand packet: LRH 8, BTH 12, ICRC 4, VCRC 2 (IBTA
specification vol. 1, ch. 5 and 9); RDMA writes carry no extended header past the first
packet. First principles."""

ROCE_HEADER_BYTES = 14 + 4 + 8 + 12 + 20 + 8 + 12 + 4
"""Bytes on the wire per RoCEv2 packet beside its payload: Ethernet header 14, FCS 4,
preamble and start delimiter 8, the minimum inter-frame gap 12 (IEEE 802.3), IPv4 20, UDP
8, BTH 12, ICRC 4 (IBTA RoCEv2 annex A17). First principles."""

MTU_PAYLOAD_BYTES = 4096
"""Payload bytes per packet: the largest InfiniBand and RoCE MTU (4096), at which NCCL's
large transfers go. FEC and line coding are already out of a port's rate (400 Gb/s is
its data rate)."""

SOCKETS_EFFICIENCY = documented(
    "transports.SOCKETS_EFFICIENCY", 10 / 12.5,
    """Effective / line rate of the network under NCCL's TCP/IP sockets transport
    (scale-out ``transport: sockets``, as NCCL_IB_DISABLE=1 or a NIC without RDMA):
    NVIDIA's GTC24 session S62129, slide 12, gives nccl-tests AllReduce busbw of
    10 GB/s on 100GbE TCP/IP sockets, 0.80 of the 12.5 GB/s line rate, where 200 Gb
    RDMA reaches 24 of 25 GB/s (0.96, the RDMA packet efficiency); shared reference
    collectives-compute-power.md section 1.1 [R21]. The kernel's copies and TCP/IP
    headers take the rest.""")

EFA_LATENCY_S = documented(
    "transports.EFA_LATENCY_S", 75e-6,
    """The latency aws-ofi-nccl reports to NCCL for an EFA NIC whose entry gives none,
    seconds: 75 µs, what its platform table (``src/platform-aws.cpp``,
    ``platform_data_map``, aws/aws-ofi-nccl 2daf7d30) sets for p4d, p4de, p5 and p5e
    (35 µs for p5en, p6 and later, 150 µs for p3dn: those NICs' entries give their own).
    Without a platform row the plugin reports its ``OFI_NCCL_NET_LATENCY`` default, 0;
    every EFA platform has a row.""")


@dataclass(frozen=True)
class Transport:
    """One scale-out transport as NCCL sees it: ``efficiency`` (payload / wire rate),
    ``net_latency_s`` (what its net plugin reports, seconds, added to each network hop
    and again under Simple), ``low_latency_protocols`` (whether LL and LL128 may cross
    the network) and where each comes from."""

    name: str
    efficiency: float
    net_latency_s: float
    low_latency_protocols: bool
    source: str


TRANSPORTS: dict[str, Transport] = {
    "infiniband": Transport(
        "infiniband", MTU_PAYLOAD_BYTES / (MTU_PAYLOAD_BYTES + IB_HEADER_BYTES), 0.0, True,
        "InfiniBand verbs: 4096 of 4122 bytes per packet (IB_HEADER_BYTES); NCCL's IB"
        " plugin reports latency 0"),
    "rocev2": Transport(
        "rocev2", MTU_PAYLOAD_BYTES / (MTU_PAYLOAD_BYTES + ROCE_HEADER_BYTES), 0.0, True,
        "RoCEv2: 4096 of 4178 bytes per packet (ROCE_HEADER_BYTES); NCCL runs it through"
        " its IB plugin, which reports latency 0"),
    "efa": Transport(
        "efa", MTU_PAYLOAD_BYTES / (MTU_PAYLOAD_BYTES + ROCE_HEADER_BYTES), EFA_LATENCY_S,
        True,
        "AWS EFA (SRD) through aws-ofi-nccl: latency from the plugin's platform table;"
        " SRD's headers are not published: assumed RoCEv2's (Ethernet, IPv4 and UDP, SRD"
        " rides in UDP for multipath, Shalev et al., IEEE Micro 40(6), 2020)"),
    "sockets": Transport(
        "sockets", SOCKETS_EFFICIENCY, 0.0, True,
        "TCP/IP sockets: SOCKETS_EFFICIENCY (GTC24 S62129); NCCL's socket plugin reports"
        " latency 0"),
}
"""The transports by name (a NIC's ``transport``)."""

TRANSPORT_OF_PROTOCOL = {"infiniband": "infiniband", "ethernet": "rocev2"}
"""A NIC without its own transport runs the RDMA transport of its switch's protocol."""
