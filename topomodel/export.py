"""Exports of a built fabric for other tools.

- ``graphml`` and ``json`` (networkx node-link data): the graph, one arc per link
  direction, with the node and link attributes of :mod:`topomodel.fabric` (units in their
  names: ``capacity_Bps`` is bytes/s per direction, ``latency_s`` seconds, ``length_m``
  metres); ``docs/exports.md`` lists every attribute with its unit.
- ``csv`` and ``parquet``: ``nodes`` and ``links`` tables in a directory (Parquet needs
  pyarrow).
- ``astra-sim``: an ASTRA-sim analytical network configuration (YAML): per dimension a
  ``topology`` (Ring, FullyConnected, Switch), ``npus_count``, ``bandwidth`` in ASTRA-sim's
  GB/s, which is **2^30 bytes/s**, and ``latency`` in ns.
- ``calculon``: a Calculon system file (JSON): compute and memory from the accelerator's
  catalog entry, and one network per tier with bandwidth (GB/s = 10^9 bytes/s), latency
  (s), size (accelerators) and efficiency.

Both simulator formats see the fabric as a hierarchy of *levels* (:func:`network_levels`):
the scale-up domain (one Switch, one FullyConnected group, or one Ring per torus
dimension), then the scale-out groups that share a leaf, a pod, and the whole fabric,
each with the per-accelerator bandwidth left after the oversubscription of the tiers
below it. Files are written to a temporary name first and moved into place, so a failed
export leaves nothing half-written.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import IO, Any

import numpy as np
import pandas as pd

from topomodel.catalog import Accelerator, System
from topomodel.errors import UsageError
from topomodel.fabric import Fabric, labels
from topomodel.files import atomic_bytes, atomic_write
from topomodel.timing import TimeModel, tier_efficiency

EXPORT_FORMATS = ("graphml", "json", "csv", "parquet", "astra-sim", "calculon")

ASTRA_GB_BYTES = 2**30
"""Bytes in ASTRA-sim's "GB": its analytical backend converts a bandwidth in GB/s to
bytes/ns as ``GB/s x 2^30 / 10^9`` (``bw_GBps_to_Bpns``), so its GB is a GiB."""

CALCULON_GB_BYTES = 1e9
"""Bytes in Calculon's "GB" (its network and memory code multiply GB/s by 1e9)."""

ASTRA_HOPS = {"Switch": 2, "Ring": 1, "FullyConnected": 1}
"""Links ASTRA-sim's congestion-unaware model counts for one step across a dimension
(NPU to switch to NPU; a ring or mesh neighbour): its per-dimension ``latency`` is per
link, so a level's end-to-end latency is divided by this."""

CALCULON_DTYPES = {"fp8": "float8", "fp16": "float16", "bf16": "bfloat16", "fp32": "float32"}
"""topomodel data types Calculon knows, and its names for them."""

CALCULON_VECTOR_SHARE = 0.125
"""Vector (non-matrix) FLOP/s as a share of the matrix peak (assumed: the catalog has no
vector figure; H100's 134 TFLOP/s FP16 on CUDA cores against 989 TFLOP/s dense on tensor
cores is about 0.135, A100's 78 against 312 is 0.25: the lower end is taken)."""

CALCULON_MEMORY_EFFICIENCY = 0.8
"""Achieved / peak HBM bandwidth, flat over access sizes (assumed: large streaming
copies reach about 80-90 % of the datasheet figure on HBM2e/HBM3 parts)."""

CALCULON_HOST_MEMORY_GIB = 0.0
"""Second-level (offload) memory capacity, GiB: host memory is not in the catalog, so
none is offered (Calculon then cannot offload); edit the file to allow it."""

CALCULON_PROCESSING_MODE = "roofline"
"""Compute and memory time overlap (``roofline``), as topomodel's step model, which
times compute from FLOPs alone, implicitly assumes; Calculon's other mode is
``no_overlap``."""

CALCULON_PROCESSOR_USAGE = 0.0
"""Share of the processor that communication kernels take from compute: topomodel's
step model does not slow compute for them, so neither does the export (Calculon's own
example files use 0.15 for NVLink and 0.02 for InfiniBand)."""

CALCULON_OPS: dict[str, list[float | None]] = {
    "p2p": [1.0, None],
    "reduce_scatter": [1.0, -1.0],
    "all_gather": [1.0, -1.0],
    "all_reduce": [2.0, -1.0],
}
"""Calculon's per-op ``[scalar, offset]``: bytes sent per accelerator are
``size x scalar + size / n x offset``, so these are the ring (bus-bandwidth) volumes:
AllReduce 2 (n-1)/n, ReduceScatter and AllGather (n-1)/n of the buffer (nccl-tests)."""


def export_fabric(fabric: Fabric, fmt: str, path: str | Path) -> list[Path]:
    """Write ``fabric`` as ``fmt`` to ``path``; return the files written.

    ``graphml``, ``json``, ``astra-sim`` and ``calculon`` write the one file ``path``;
    ``csv`` and ``parquet`` write ``nodes`` and ``links`` tables into the directory
    ``path``.

    Raises
    ------
    UsageError
        For ``parquet`` without pyarrow, and for ``astra-sim`` on a fabric whose levels
        it cannot express (see :func:`astra_sim_network`).
    """
    target = Path(path)
    if fmt in ("csv", "parquet"):
        return _tables(fabric, fmt, target)
    if fmt == "astra-sim":
        atomic_bytes(target, astra_sim_network(fabric).encode())
        return [target]
    if fmt == "calculon":
        system = calculon_system(fabric)
        atomic_bytes(target, (json.dumps(system, indent=2) + "\n").encode())
        return [target]
    import networkx as nx

    graph = fabric.graph
    if fmt == "graphml":
        atomic_write(target, lambda s: nx.write_graphml(graph, s))
    elif fmt == "json":
        data = nx.node_link_data(graph, edges="links")
        atomic_write(target, lambda s: s.write(json.dumps(data, default=str).encode()))
    else:
        raise ValueError(f"unknown export format {fmt!r}; choose from {EXPORT_FORMATS}")
    return [target]


def _tables(fabric: Fabric, fmt: str, target: Path) -> list[Path]:
    """``nodes`` and ``links`` as CSV or Parquet files in the directory ``target``."""
    if fmt == "parquet":
        try:
            import pyarrow  # noqa: F401
        except ImportError:
            raise UsageError("the parquet export needs pyarrow: pip install pyarrow") from None
    written = []
    for name, table in (("nodes", fabric.nodes), ("links", fabric.links)):
        out = target / f"{name}.{fmt}"
        if fmt == "csv":
            atomic_bytes(out, table.to_csv(index_label="id").encode())
        else:
            atomic_write(out, _parquet_writer(table.rename_axis("id")))
        written.append(out)
    return written


def _parquet_writer(frame: pd.DataFrame) -> Callable[[IO[bytes]], object]:
    return lambda stream: frame.to_parquet(stream, engine="pyarrow")


# ------------------------------------------------------------------- network levels


@dataclass(frozen=True)
class NetworkLevel:
    """One level of the fabric's hierarchy, as dimension-based simulators see it.

    A level joins ``npus`` groups of the level below (accelerators for the first):
    accelerators that differ only in this level's coordinate talk through it.
    """

    name: str  # "scale-up", "scale-up x", "leaf", "spine", "core"
    network: str  # "scale-up" or "scale-out"
    topology: str  # ASTRA-sim building block: Switch, Ring or FullyConnected
    npus: int  # members along this dimension
    reach: int  # accelerators that talk within one group of this level
    link_Bps: float  # one link per direction as the building block counts it
    injection_Bps: float  # per accelerator into this level, per direction
    latency_s: float  # one crossing, end to end: switches x latency + propagation
    efficiency: float  # effective / nominal rate of the slowest tier crossed
    tiers: tuple[str, ...]  # link tiers a crossing uses
    oversubscription: float  # down:up product of the tiers below this level's top (1: none)


def network_levels(fabric: Fabric, model: TimeModel | None = None) -> list[NetworkLevel]:
    """The fabric as a hierarchy of levels, innermost first (bytes/s per direction).

    Scale-up: a switched domain is one ``Switch`` level; a full mesh one
    ``FullyConnected`` level; a torus one ``Ring`` per dimension longer than 1; a
    supernode a ``Switch`` per system and one over the supernode (merged when their
    bandwidth is the same). Scale-out: the domains under one leaf, one pod and the whole
    fabric, each a ``Switch`` level whose bandwidth is the per-accelerator injection
    divided by the oversubscription of the tiers below it; a level is kept only where
    every group has the same number of domains (else it merges into the next), and
    neighbouring levels of equal bandwidth merge. Failed links are ignored: this is the
    design as built.
    """
    model = model or TimeModel()
    efficiency = tier_efficiency(fabric, model)
    levels = _scaleup_levels(fabric, model, efficiency)
    levels += _scaleout_levels(fabric, model, efficiency, levels)
    reach = 1
    out = []
    for level in levels:
        reach *= level.npus
        out.append(replace(level, reach=reach))
    return out


def _tier_stats(fabric: Fabric) -> tuple[dict[str, float], dict[str, float]]:
    """Per link tier: capacity of all links one way (bytes/s) and the longest delay (s)."""
    links = fabric.links
    grouped = links.groupby("tier", observed=True)
    capacity = {str(k): float(v) / 2 for k, v in grouped["capacity_Bps"].sum().items()}
    delay = {str(k): float(v) for k, v in grouped["latency_s"].max().items()}
    return capacity, delay


def _switch_latency(fabric: Fabric, tiers: Sequence[str], model: TimeModel) -> float:
    """The slowest switch of these node tiers, seconds (the time model's default if none
    has a catalog figure)."""
    nodes = fabric.nodes
    mask = nodes["tier"].isin(list(tiers)).to_numpy() & nodes["kind"].isin(
        ["switch", "scaleup_switch"]).to_numpy()
    slowest = float(nodes.loc[mask, "latency_s"].max()) if mask.any() else 0.0
    return slowest or model.hop_latency_s


def _domain_size(fabric: Fabric) -> int:
    domain = fabric.nodes["domain"].to_numpy()[fabric.accelerators]
    if (domain < 0).any():
        return 1
    sizes = np.bincount(domain)
    sizes = sizes[sizes > 0]
    return int(sizes.max()) if len(sizes) else 1


def _scaleup_levels(fabric: Fabric, model: TimeModel,
                    efficiency: dict[str, float]) -> list[NetworkLevel]:
    s = fabric.structure
    kind = s["scaleup"]
    if kind == "none":
        return []
    capacity, delay = _tier_stats(fabric)
    n = max(1, fabric.accelerator_count)
    links = fabric.links
    kinds = labels(fabric.nodes["kind"])
    from_acc = (kinds[links["src"].to_numpy()] == "accelerator") & (
        links["tier"] == "scaleup").to_numpy()
    injection = float(links.loc[from_acc, "capacity_Bps"].sum()) / n
    per_domain = _domain_size(fabric)
    propagation = delay.get("scaleup", 0.0)

    def level(name: str, topology: str, npus: int, link_Bps: float, inject_Bps: float,
              latency_s: float, tiers: tuple[str, ...] = ("scaleup",),
              over: float = 1.0) -> NetworkLevel:
        return NetworkLevel(name, "scale-up", topology, npus, npus, link_Bps, inject_Bps,
                            latency_s, min(efficiency.get(t, 1.0) for t in tiers), tiers,
                            over)

    if kind == "full_mesh":
        link = s["mesh_links_per_pair"] * s["scaleup_link_Bps"]
        return [level("scale-up", "FullyConnected", per_domain, link, injection,
                      propagation)]
    if kind == "torus":
        out = []
        for axis, length in zip("xyzwuv", s["torus_shape"], strict=False):
            if length < 2:
                continue
            cables = s["links_per_neighbor"] * (2 if s["wraparound"] and length == 2 else 1)
            link = cables * s["scaleup_link_Bps"]
            out.append(level(f"scale-up {axis}", "Ring", length, link,
                             link * (2 if length > 2 else 1), propagation))
        return out
    chip = _switch_latency(fabric, ("scaleup",), model)
    if kind == "switched":
        return [level("scale-up", "Switch", per_domain, injection, injection,
                      chip + 2 * propagation)]
    # supernode: the in-system chips, then the levels above them
    per_system = int(s["accelerators_per_system"])
    upper = [t for t in ("scaleup_l2", "scaleup_l3") if t in capacity]
    bandwidth = min([injection, *(capacity[t] / n for t in upper)])
    switches = 2 * len(upper) + 1
    upper_latency = _switch_latency(fabric, ("scaleup", *upper), model)
    hops = 2 * len(upper) + 2
    first = level("scale-up", "Switch", per_system, injection, injection,
                  chip + 2 * propagation)
    second = level("scale-up supernode", "Switch", per_domain // per_system, bandwidth,
                   bandwidth, switches * upper_latency + hops * max(
                       [propagation, *(delay[t] for t in upper)]),
                   ("scaleup", *upper), injection / bandwidth)
    return _merged([first, second] if per_domain > per_system else [first])


def _scaleout_levels(fabric: Fabric, model: TimeModel, efficiency: dict[str, float],
                     inner: list[NetworkLevel]) -> list[NetworkLevel]:
    s = fabric.structure
    if s["scaleout"] == "none":
        return []
    capacity, delay = _tier_stats(fabric)
    n = max(1, fabric.accelerator_count)
    injection = min(capacity.get("host", math.inf), capacity.get("leaf", math.inf)) / n
    over = dict.fromkeys(("leaf", "spine", "core"), 1.0)
    for t in fabric.clos_tiers:
        if t.name in over and t.oversubscription > over[t.name]:
            over[t.name] = t.oversubscription
    switch_latency = _switch_latency(fabric, ("leaf", "spine", "core"), model)
    domains = _domain_of_accelerators(fabric)
    n_domains = int(domains.max()) + 1
    leaf_key, pod_key = _domain_keys(fabric, domains, n_domains)
    tiers_present = [t for t in ("leaf", "spine", "core") if t in capacity]
    top = tiers_present[-1]
    candidates: list[tuple[str, np.ndarray | None, tuple[str, ...]]] = [
        ("leaf", leaf_key, ("host", "leaf"))]
    if "core" in capacity:
        candidates.append(("spine", pod_key, ("host", "leaf", "spine")))
    candidates.append((top, None, ("host", *tiers_present)))
    out: list[NetworkLevel] = []
    below = 1  # domains per group of the level below
    for name, key, tiers in candidates:
        size = n_domains if key is None else _uniform_group_size(key)
        if size is None or size <= below or n_domains % size or size % below:
            continue  # groups of unequal size, or nothing new: merge into the next
        crossed = tiers[1:-1]  # the uplinks of every tier below this level's top
        factor = math.prod((over[t] for t in crossed), start=1.0)
        switches = 2 * len(tiers) - 3  # leaf: 1; spine: 3; core: 5
        latency = switches * switch_latency + 2 * sum(delay.get(t, 0.0) for t in tiers)
        out.append(NetworkLevel(name, "scale-out", "Switch", size // below, 0,
                                injection / factor, injection / factor, latency,
                                min(efficiency.get(t, 1.0) for t in tiers), tiers, factor))
        below = size
    if inner and out and math.prod(level.npus for level in inner) * below != n:
        raise UsageError("the scale-up domains and the scale-out groups do not nest: the"
                         " fabric has no level structure to export")
    return _merged(out)


def _domain_of_accelerators(fabric: Fabric) -> np.ndarray:
    """Each accelerator's scale-up domain, numbered 0.. (its own when it has none)."""
    domain = fabric.nodes["domain"].to_numpy()[fabric.accelerators]
    if (domain < 0).any():
        return np.arange(len(domain))
    _, numbered = np.unique(domain, return_inverse=True)
    return numbered


def _domain_keys(fabric: Fabric, domains: np.ndarray,
                 n_domains: int) -> tuple[np.ndarray, np.ndarray]:
    """Per domain: a group key for 'under the same leaves' and 'in the same pods'.

    Two domains share a key when their NICs reach exactly the same set of leaves (or of
    pods): the same rails of the same scalable unit.
    """
    nodes, links = fabric.nodes, fabric.links
    src, dst = links["src"].to_numpy(), links["dst"].to_numpy()
    kind = labels(nodes["kind"])
    acc_domain = np.full(len(nodes), -1)
    acc_domain[fabric.accelerators] = domains
    # NIC -> owning accelerator's domain (host links), NIC -> leaf (leaf links)
    host = (links["tier"] == "host").to_numpy() & (kind[src] == "accelerator")
    nic_domain = np.full(len(nodes), -1)
    nic_domain[dst[host]] = acc_domain[src[host]]
    up = (links["tier"] == "leaf").to_numpy() & (kind[src] == "nic")
    pairs_domain = nic_domain[src[up]]
    leaf = dst[up]
    pod = nodes["pod"].to_numpy()[leaf]
    keys = []
    for values in (leaf, pod):
        pairs = np.unique(np.stack([pairs_domain, values], axis=1), axis=0)
        pairs = pairs[pairs[:, 0] >= 0]
        split = np.flatnonzero(np.diff(pairs[:, 0])) + 1
        signatures = [tuple(part[:, 1]) for part in np.split(pairs, split)]
        owners = pairs[np.r_[0, split], 0] if len(pairs) else np.empty(0, np.int64)
        codes = {sig: i for i, sig in enumerate(dict.fromkeys(signatures))}
        key = np.arange(n_domains) + len(codes)  # domains without NICs stand alone
        key[owners] = [codes[sig] for sig in signatures]
        keys.append(key)
    return keys[0], keys[1]


def _uniform_group_size(key: np.ndarray) -> int | None:
    """Domains per group when every group is the same size, else None."""
    sizes = np.unique(np.unique(key, return_counts=True)[1])
    return int(sizes[0]) if len(sizes) == 1 else None


def _merged(levels: list[NetworkLevel]) -> list[NetworkLevel]:
    """Neighbouring Switch levels of the same bandwidth as one (the outer latency)."""
    out: list[NetworkLevel] = []
    for level in levels:
        last = out[-1] if out else None
        if (last is not None and last.topology == level.topology == "Switch"
                and math.isclose(last.link_Bps, level.link_Bps, rel_tol=1e-9)):
            out[-1] = replace(level, npus=last.npus * level.npus,
                              efficiency=min(last.efficiency, level.efficiency))
        else:
            out.append(level)
    return out


# ------------------------------------------------------------------------ ASTRA-sim


def astra_sim_network(fabric: Fabric, model: TimeModel | None = None) -> str:
    """ASTRA-sim analytical network configuration (YAML text) for ``fabric``.

    Keys ``topology``, ``npus_count``, ``bandwidth`` (ASTRA-sim GB/s = 2^30 bytes/s,
    nominal line rate per link and direction) and ``latency`` (ns per link), one entry
    per level of :func:`network_levels`; ASTRA-sim numbers NPUs with the first
    dimension fastest.

    Raises
    ------
    UsageError
        If the fabric has several scale-up domains and no scale-out network (ASTRA-sim
        needs one connected network) or a single accelerator.
    """
    levels = network_levels(fabric, model)
    if math.prod(level.npus for level in levels) != fabric.accelerator_count or not levels:
        raise UsageError("ASTRA-sim needs one network joining every accelerator; this"
                         " fabric's scale-up domains are not joined by a scale-out network")
    design = fabric.design
    rows = []
    for index, level in enumerate(levels, 1):
        tiers = ", ".join(level.tiers)
        over = (f", {level.oversubscription:.3g}:1 oversubscribed below"
                if level.oversubscription > 1 else "")
        rows.append(f"#   dim {index}: {level.name} ({level.network}; link tiers {tiers}):"
                    f" {level.npus} x {level.topology}, {level.link_Bps / 1e9:.6g} GB/s"
                    f" (10^9 B/s) per link{over}; efficiency {level.efficiency:g}"
                    " (not applied)")

    def flow(values: Sequence[Any]) -> str:
        return "[ " + ", ".join(str(v) for v in values) + " ]"

    bandwidth = [f"{level.link_Bps / ASTRA_GB_BYTES:.6f}".rstrip("0").rstrip(".")
                 for level in levels]
    latency = [f"{level.latency_s / ASTRA_HOPS[level.topology] * 1e9:.3f}".rstrip("0")
               .rstrip(".") for level in levels]
    lines = [
        "# ASTRA-sim analytical network configuration, written by topomodel from",
        f"# {design.name or design.file} ({fabric.accelerator_count} accelerators).",
        "# One dimension per level of the fabric, innermost first:",
        *rows,
        "# bandwidth: ASTRA-sim GB/s, i.e. 2^30 bytes/s (a GiB/s), nominal line rate per",
        "#   link and direction; ASTRA-sim has no efficiency term: scale it to model one.",
        "# latency: ns per link, the level's end-to-end latency (switches x switch latency",
        "#   + propagation) over the links ASTRA-sim counts (Switch 2, Ring and",
        "#   FullyConnected 1). See topomodel docs/exports.md for what this leaves out.",
        f"topology: {flow([level.topology for level in levels])}",
        f"npus_count: {flow([level.npus for level in levels])}",
        f"bandwidth: {flow(bandwidth)}  # GB/s (2^30 B/s)",
        f"latency: {flow(latency)}  # ns",
    ]
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------- Calculon


def calculon_system(fabric: Fabric, model: TimeModel | None = None, *,
                    compute_efficiency: float | None = None) -> dict[str, Any]:
    """A Calculon system description (plain types, Calculon's own keys and units).

    ``matrix`` holds the catalog's dense peak per data type (TFLOP/s) at a flat
    ``compute_efficiency`` (default: :class:`~topomodel.step.StepAssumptions`'s);
    ``vector`` is :data:`CALCULON_VECTOR_SHARE` of it; ``mem1`` is the HBM (GiB, GB/s);
    ``networks`` has one tier per level of :func:`network_levels` (the dimensions of a
    torus joined into one), with ``size`` the accelerators it reaches, ``bandwidth`` per
    accelerator per direction in GB/s (10^9 bytes/s), ``latency`` in seconds (one
    crossing plus the time model's per-message overhead) and ``efficiency`` the
    effective/nominal rate of its slowest link tier.
    """
    from topomodel.step import StepAssumptions

    model = model or TimeModel()
    catalog = fabric.catalog
    system = catalog.get(fabric.design.system, System)
    accelerator = catalog.get(system.accelerator, Accelerator)
    efficiency = (compute_efficiency if compute_efficiency is not None
                  else StepAssumptions().compute_efficiency)
    peaks = {CALCULON_DTYPES[k]: v for k, v in accelerator.peak_flops.items()
             if k in CALCULON_DTYPES}
    if "bfloat16" in peaks and "float16" not in peaks:
        peaks["float16"] = peaks["bfloat16"]  # the same tensor-core rate on these parts
    if not peaks:
        raise UsageError(f"{accelerator.id} has no peak for a data type Calculon knows"
                         f" ({', '.join(CALCULON_DTYPES)})")

    def engine(share: float) -> dict[str, Any]:
        return {dtype: {"tflops": round(flops * share / 1e12, 6),
                        "gflops_efficiency": [[0, efficiency]]}
                for dtype, flops in sorted(peaks.items())}

    host_Bps = float(fabric.structure.get("host_link_Bps", 0.0)) or accelerator.hbm_Bps
    networks = []
    for tier in _calculon_tiers(network_levels(fabric, model)):
        networks.append({
            "bandwidth": round(tier.injection_Bps / CALCULON_GB_BYTES, 6),
            "efficiency": tier.efficiency,
            "size": tier.reach,
            "latency": tier.latency_s + model.per_message_overhead_s,
            "ops": {k: list(v) for k, v in CALCULON_OPS.items()},
            "must_be_filled": False,
            "processor_usage": CALCULON_PROCESSOR_USAGE,
        })
    return {
        "matrix": engine(1.0),
        "vector": engine(CALCULON_VECTOR_SHARE),
        "mem1": {"GiB": round(accelerator.hbm_bytes / 2**30, 6),
                 "GBps": round(accelerator.hbm_Bps / CALCULON_GB_BYTES, 6),
                 "MB_efficiency": [[0, CALCULON_MEMORY_EFFICIENCY]]},
        "mem2": {"GiB": CALCULON_HOST_MEMORY_GIB,
                 "GBps": round(host_Bps / CALCULON_GB_BYTES, 6),
                 "MB_efficiency": [[0, 1.0]]},
        "processing_mode": CALCULON_PROCESSING_MODE,
        "networks": networks,
    }


def _calculon_tiers(levels: list[NetworkLevel]) -> list[NetworkLevel]:
    """Levels as Calculon's network tiers: the rings of a torus join into one tier that
    reaches the whole torus with every link of the accelerator."""
    out: list[NetworkLevel] = []
    for level in levels:
        last = out[-1] if out else None
        if last is not None and last.topology == level.topology == "Ring":
            out[-1] = replace(level, name="scale-up", injection_Bps=last.injection_Bps
                              + level.injection_Bps,
                              latency_s=last.latency_s + level.latency_s,
                              efficiency=min(last.efficiency, level.efficiency))
        else:
            out.append(level)
    return out
