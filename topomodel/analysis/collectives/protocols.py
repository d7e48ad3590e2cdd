"""NCCL's protocols and latency model: LL, LL128 and Simple, as NCCL's tuner times them.

A collective's time under protocol ``p`` is, as in NCCL's ``ncclTopoGetAlgoTime``::

    time = latency(algorithm, p, ranks, nodes) + size x busbw factor / busbw_p
    busbw_p = min(cap_p, factor_p x busbw_simple)

``busbw_simple`` is what the routed fabric gives at the links' effective rates (the
bandwidth and topology parts of :mod:`topomodel.analysis.collectives.timing`); ``factor_p`` and
``cap_p`` are NCCL's per-protocol bandwidth rules; the latency is NCCL's base latency
per algorithm and protocol plus its per-hop latency per link class (NVLink, PCIe,
network) times the hops the algorithm's chunks take; each network hop adds the latency
the transport's net plugin reports (:mod:`topomodel.inputs.transports`: 0 for NCCL's
own InfiniBand, RoCE and socket plugins, 35-75 µs for AWS EFA), twice under Simple.
The protocol NCCL would choose is the fastest (:func:`protocol_times`); NCCL 2.30 has
no static size thresholds.

Every constant is NCCL's default, read from ``src/graph/tuning.cc`` at NVIDIA/nccl
5067397c (NCCL 2.30.7; ``ncclTunerConstantsDefaults``, ``ncclTopoTuneModel``), as
transcribed with its provenance in shared/reference/collectives-compute-power.md part 2
(provenance: vendor source, derived). Where topomodel departs from NCCL it says so here:

- per-channel caps (``perChMaxRingLL128Bws``, ``perChMaxTreeLL128Bws``,
  ``perChMaxTreeBws``) apply across nodes with one channel per NIC of a node (NCCL's
  search on rail-attached NICs; its channel doubling, ``ncclTopoDupChannels``, is not
  modelled); inside one node NCCL's NVLink channel count is not modelled and the caps,
  which do not bind at 16 channels or more, are left out;
- the tree correction table (``treeCorrectionFactor``) is left out;
- NVLS inside one node also pays its kernel's pipeline fill, which the tuner leaves out
  (:mod:`topomodel.analysis.collectives.pipeline`, added by the collective's timing);
- architectures other than NVIDIA's (RCCL, HCCL, TPU ICI) use the Hopper constants: RCCL
  is a fork of NCCL with the same tuner structure; the others publish none (assumed).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

PROTOCOLS = ("LL", "LL128", "Simple")
LINK_CLASSES = ("nvlink", "pci", "net")
ARCHITECTURES = ("volta", "ampere", "hopper", "blackwell")
_P = {name: i for i, name in enumerate(PROTOCOLS)}

BASE_LATENCY_US: dict[str, tuple[float, float, float]] = {
    "tree": (6.8, 14.0, 8.4),
    "ring": (6.6, 14.0, 8.4),
    "collnet_direct": (0.0, 0.0, 0.0),
    "collnet_chain": (0.0, 0.0, 0.0),
    "nvls": (0.0, 0.0, 0.0),
    "nvls_tree": (0.0, 0.0, 0.0),
}
"""NCCL ``baseLat`` per algorithm, µs, (LL, LL128, Simple)."""

HOP_LATENCY_US: dict[tuple[str, str], tuple[float, float, float]] = {
    ("nvlink", "tree"): (0.6, 1.25, 4.0), ("nvlink", "ring"): (0.6, 1.9, 3.4),
    ("nvlink", "collnet_direct"): (math.inf, math.inf, 3.7),
    ("nvlink", "collnet_chain"): (math.inf, math.inf, 2.8),
    ("nvlink", "nvls"): (math.inf, math.inf, 25.0),
    ("nvlink", "nvls_tree"): (math.inf, math.inf, 25.0),
    ("pci", "tree"): (1.0, 1.9, 4.0), ("pci", "ring"): (1.0, 2.5, 5.7),
    ("pci", "collnet_direct"): (math.inf, math.inf, 3.7),
    ("pci", "collnet_chain"): (math.inf, math.inf, 2.8),
    ("pci", "nvls"): (math.inf, math.inf, 0.0), ("pci", "nvls_tree"): (math.inf, math.inf, 0.0),
    ("net", "tree"): (5.0, 8.5, 14.0), ("net", "ring"): (2.7, 4.0, 14.0),
    ("net", "collnet_direct"): (math.inf, math.inf, 31.0),
    ("net", "collnet_chain"): (math.inf, math.inf, 30.0),
    ("net", "nvls"): (math.inf, math.inf, 18.0),
    ("net", "nvls_tree"): (math.inf, math.inf, 20.9),
}
"""NCCL ``hwLat`` per (link class, algorithm), µs per hop, (LL, LL128, Simple); ``inf``
where NCCL does not run that protocol (NVLS and CollNet are Simple only)."""

NET_OVERHEAD_US = 1.0
"""NCCL ``getNetOverhead`` on an Intel x86 host, µs per network post (2.0 on AMD); three
times this for Simple. The host CPU is not in the catalog: the Intel value is used."""

LL_MAX_BUSBW_GBPS: dict[str, tuple[float, float, float]] = {
    "volta": (39.0, 39.0, 20.4), "ampere": (87.7, 22.5, 19.0),
    "hopper": (141.0, 45.0, 35.0), "blackwell": (282.0, 90.0, 70.0),
}
"""NCCL ``llMaxBws``: the LL protocol's busbw cap, GB/s (10^9 B/s), by architecture for
one node, (1 node, 2 nodes, 3+ nodes). On more than one node NCCL reads row 0 (Intel
hosts): 39.0 GB/s on 2 nodes and 20.4 GB/s on 3 or more, whatever the GPU."""

PER_CHANNEL_RING_LL128_GBPS = {"volta": (20.0, 20.0, 20.0), "ampere": (20.0, 20.0, 20.0),
                               "hopper": (36.7, 36.7, 36.7),
                               "blackwell": (40.0, 40.0, 40.0)}
"""NCCL ``perChMaxRingLL128Bws``: the ring LL128 busbw cap per channel, GB/s, by
architecture, (1 node, 2 nodes, 3+ nodes)."""
PER_CHANNEL_TREE_LL128_GBPS = {"volta": (20.0, 20.0, 20.0), "ampere": (20.0, 20.0, 20.0),
                               "hopper": (36.7, 36.7, 29.0),
                               "blackwell": (55.6, 31.67, 20.0)}
"""NCCL ``perChMaxTreeLL128Bws``, GB/s per channel."""
PER_CHANNEL_TREE_GBPS = {"volta": (26.5, 18.5, 10.0), "ampere": (24.0, 23.6, 17.8),
                         "hopper": (38.7, 41.4, 36.0), "blackwell": (70.0, 42.8, 24.0)}
"""NCCL ``perChMaxTreeBws``: the tree Simple busbw cap per channel, GB/s."""

NVLS_EFFICIENCY = {"volta": 0.0, "ampere": 0.0, "hopper": 0.85, "blackwell": 0.74}
"""NCCL ``nvlsEfficiency``: the share of the NVLink bandwidth NVLS reductions reach."""

LL_FACTOR = 0.5
"""LL moves 8 data bytes in each 16-byte line (a flag with every 8 bytes)."""
LL128_FACTOR = 0.92
"""NCCL's LL128 factor on busbw (120 of every 128 bytes are data, less overheads)."""
TREE_SIMPLE_FACTOR = 0.92
"""NCCL's cap on tree AllReduce busbw, Simple."""
TREE_LL_DIVISOR = 3.8
"""NCCL: tree LL busbw = busbw / 3.8."""
RING_PLATEAU_FACTOR = 1.4
"""NCCL: ring Simple AllReduce on several nodes, once each rank's share is at least 64
bytes per channel, has its latency x 1.4 ("plateau effect of ring"; 1.9 before Ampere)."""


@dataclass(frozen=True)
class NcclShape:
    """What NCCL's latency model needs of a collective: ranks, nodes (scale-up domains
    the group spans), ranks per node and the intra-node link class; across nodes, one
    NCCL channel per NIC and the latency the transport's net plugin reports
    (:mod:`topomodel.inputs.transports`)."""

    ranks: int
    nodes: int
    intra: str = "nvlink"  # nvlink or pci
    channels: int = 0  # across nodes: one per NIC of a node; 0: not modelled (no caps)
    net_latency_us: float = 0.0  # what the net plugin reports (NCCL's latencyInter), µs

    @property
    def per_node(self) -> int:
        """Ranks per node (``ppn``)."""
        return max(1, self.ranks // max(1, self.nodes))


_ARCHITECTURE_OF_LINK = {"nvlink2": "volta", "nvlink3": "ampere", "nvlink4": "hopper",
                         "nvlink5": "blackwell"}


def nccl_architecture(scaleup_link: str) -> str:
    """NCCL's architecture row for a scale-up link kind: by NVLink generation; other
    scale-up links (Infinity Fabric, ICI, UB) are ``other``, timed with the Hopper row
    (an assumption, see above), and systems without scale-up links (PCIe servers, an
    empty link) Hopper's too, their protocol rules following their PCIe paths."""
    return _ARCHITECTURE_OF_LINK.get(scaleup_link, "other" if scaleup_link else "hopper")


def ll128_enabled(shape: NcclShape, architecture: str) -> bool:
    """Whether NCCL's tuner may pick LL128 for a collective of ``shape`` (``NCCL_PROTO``
    forcing it overrides this, as in NCCL): NCCL 2.30's
    ``ncclTopoTuneModel`` (``src/graph/tuning.cc``) leaves LL128 on only where the
    ring's or tree's path inside a node is NVLink (``typeIntra <= PATH_NVB``) on Volta or
    later, so never between GPUs that reach each other over PCIe (a PCIe-only server,
    an RTX or L40S workstation). Across nodes it also needs the NIC behind the GPU's
    PCIe switch (``typeInter <= PATH_PXB``, PXN on Hopper and later), which the catalog
    does not record: NVLink systems are assumed to have it (DGX and HGX boards put each
    NIC on its GPU's PCIe switch). Other scale-up links (``architecture`` ``other``:
    RCCL's Infinity Fabric, TPU ICI, UB) run LL128 inside a node, as NVLink, but not
    across nodes: RCCL gates it behind ``RCCL_LL128_FORCE_ENABLE`` (default 0), which
    AMD's own multi-node runs set (ROCm/rccl PR #2078, reference [R25]).

    Examples
    --------
    >>> ll128_enabled(NcclShape(8, 1, "pci"), "ampere")
    False
    >>> ll128_enabled(NcclShape(16, 2), "hopper"), ll128_enabled(NcclShape(16, 2), "other")
    (True, False)
    """
    if shape.intra == "pci":
        return False
    return architecture != "other" or shape.nodes <= 1


def nccl_algorithm(algorithm: str, shape: NcclShape) -> str:
    """NCCL's algorithm for one of topomodel's: ring and tree as named, the hierarchical
    ring as a ring over the same hops, in-network reduction as NVLS inside one node and
    CollNet (SHARP) across nodes, NVLS-Tree as named, everything else (direct, pairwise,
    p2p, rhd) as point-to-point rounds timed with the ring's per-hop latencies."""
    from topomodel.traffic.algorithms import REGISTRY  # not at import: the CLI's options

    return REGISTRY[algorithm].nccl_name(shape.nodes)


def latency_s(algorithm: str, collective: str, protocol: str, shape: NcclShape, *,
              rounds: int = 1) -> float:
    """NCCL's latency of one collective, seconds.

    ``rounds`` is the number of point-to-point rounds of algorithms NCCL does not tune
    (direct: one per batch a p2p channel runs in turn,
    :func:`~topomodel.traffic.algorithms.alltoall.direct_rounds`; pairwise: n - 1; rhd: log2 n
    each way); ring, tree and in-network use NCCL's own step counts.

    Examples
    --------
    >>> one_node = NcclShape(8, 1)
    >>> round(latency_s("ring", "allreduce", "LL", one_node) * 1e6, 1)  # 6.6 + 14 x 0.6
    15.0
    >>> round(latency_s("tree", "allreduce", "Simple", NcclShape(16, 2)) * 1e6, 1)
    92.4
    >>> efa = NcclShape(16, 2, net_latency_us=75.0)  # p5: 2 x 75 µs more on each hop
    >>> round(latency_s("tree", "allreduce", "Simple", efa) * 1e6, 1)
    392.4
    """
    p = _P[protocol]
    nccl = nccl_algorithm(algorithm, shape)
    n, nodes, ppn = shape.ranks, max(1, shape.nodes), shape.per_node
    intra = HOP_LATENCY_US[(shape.intra, nccl)][p]
    inter = HOP_LATENCY_US[("net", nccl if nccl != "ring" or ppn > 1 else "tree")][p]
    # the net plugin's latency on every network hop, again under Simple (the flush)
    inter += shape.net_latency_us * (2 if protocol == "Simple" else 1)
    if not math.isfinite(intra) or not math.isfinite(inter):
        return math.inf
    base = BASE_LATENCY_US[nccl][p]
    if nccl == "nvls":
        return (intra + (inter if nodes > 1 else 0.0)) * 1e-6
    if nccl == "nvls_tree":
        return (intra + 2 * math.log2(nodes) * inter) * 1e-6
    if nccl == "collnet_direct":
        return (2 * (min(1, ppn - 1) * intra + (ppn - 1) * 0.4) + inter) * 1e-6
    if nccl == "tree":
        return (base + 2 * ((ppn - 1) * intra + math.log2(nodes) * inter)) * 1e-6
    # ring, and the point-to-point rounds of algorithms NCCL does not tune
    if nodes > 1:
        intra = max(intra, NET_OVERHEAD_US * (3 if protocol == "Simple" else 1))
    from topomodel.traffic.algorithms import REGISTRY

    if REGISTRY[algorithm].ring_steps:
        steps = {"allreduce": 2 * (n - 1), "allgather": n - 1, "reducescatter": n - 1}.get(
            collective, n)
        inter_steps = 0 if nodes == 1 else (2 * (nodes - 1) if collective == "allreduce"
                                            else nodes - 1)
        return (base + (steps - inter_steps) * intra + inter_steps * inter) * 1e-6
    return (base + rounds * (inter if nodes > 1 else intra)) * 1e-6


def protocol_busbw_Bps(protocol: str, algorithm: str, busbw_simple_Bps: float,
                       shape: NcclShape, architecture: str) -> float:
    """NCCL's busbw of ``protocol`` from the Simple protocol's, bytes/s (``architecture``
    one of :data:`ARCHITECTURES`, or ``other``: not NVIDIA's, Hopper's figures).

    Examples
    --------
    >>> round(protocol_busbw_Bps("LL", "ring", 370e9, NcclShape(8, 1), "hopper") / 1e9)
    141
    >>> round(protocol_busbw_Bps("LL128", "ring", 370e9, NcclShape(8, 1), "hopper") / 1e9)
    340
    """
    nccl = nccl_algorithm(algorithm, shape)
    if nccl in ("nvls", "nvls_tree", "collnet_direct", "collnet_chain"):
        return busbw_simple_Bps if protocol == "Simple" else 0.0
    column = min(max(1, shape.nodes), 3) - 1
    row = architecture if shape.nodes <= 1 else "volta"  # multi-node: row 0 (Intel)
    ll_cap = LL_MAX_BUSBW_GBPS.get(row, LL_MAX_BUSBW_GBPS["hopper"])[column] * 1e9
    arch = architecture if architecture in PER_CHANNEL_TREE_GBPS else "hopper"

    def capped(value: float, per_channel: dict[str, tuple[float, float, float]]) -> float:
        if not shape.channels:
            return value
        return min(value, shape.channels * per_channel[arch][column] * 1e9)

    if nccl == "tree":
        if protocol == "LL":
            return min(busbw_simple_Bps / TREE_LL_DIVISOR, ll_cap)
        if protocol == "LL128":
            return capped(busbw_simple_Bps * (7 / 9 if shape.nodes <= 1 else 120 / 128),
                          PER_CHANNEL_TREE_LL128_GBPS)
        return capped(busbw_simple_Bps * TREE_SIMPLE_FACTOR, PER_CHANNEL_TREE_GBPS)
    if protocol == "LL":
        return min(ll_cap, LL_FACTOR * busbw_simple_Bps)
    if protocol == "LL128":
        return capped(LL128_FACTOR * busbw_simple_Bps, PER_CHANNEL_RING_LL128_GBPS)
    return busbw_simple_Bps
