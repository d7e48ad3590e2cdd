"""Exports of a built fabric for other tools.

- ``graphml`` and ``json`` (networkx node-link data): the graph, one arc per link
  direction, with the node and link attributes of :mod:`topomodel.fabric.tables` (units in their
  names: ``capacity_Bps`` is bytes/s per direction, ``latency_s`` seconds, ``length_m``
  metres); ``docs/exports.md`` lists every attribute with its unit.
- ``csv`` and ``parquet``: ``nodes`` and ``links`` tables in a directory (Parquet needs
  pyarrow).
- ``astra-sim``: an ASTRA-sim analytical network configuration (YAML): per dimension a
  ``topology`` (Ring, FullyConnected, Switch), ``npus_count``, ``bandwidth`` in ASTRA-sim's
  GB/s, which is **2^30 bytes/s**, and ``latency`` in ns.
- ``calculon``: a Calculon system file (JSON): compute and memory from the accelerator's
  catalog entry (HBM in Calculon's ``GiB`` as its own files write it,
  :func:`calculon_memory_gib`), and one network per tier with bandwidth (GB/s = 10^9
  bytes/s), latency (s), size (accelerators) and efficiency; at least two networks
  (:data:`CALCULON_MIN_NETWORKS`).

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
from dataclasses import replace
from pathlib import Path
from typing import IO, Any

import numpy as np
import pandas as pd

from topomodel.analysis.collectives.timing import TimeModel
from topomodel.analysis.levels import NetworkLevel, network_levels
from topomodel.errors import UsageError
from topomodel.fabric.tables import Fabric
from topomodel.files import atomic_bytes, atomic_files, atomic_write, refuse_output_folder
from topomodel.inputs.parts import Accelerator, HostLink, System

EXPORT_FORMATS = ("graphml", "json", "csv", "parquet", "astra-sim", "calculon", "slurm",
                  "slurm-block", "kueue", "infragraph")

DEFAULT_HOSTNAMES = "node{n:04d}"
"""Host name pattern of the scheduler exports (``slurm``, ``slurm-block``, ``kueue``):
``node`` and the host number from 0, zero-padded to 4 digits, so names sort in host
order up to 10,000 hosts (a larger number just grows: ``node12000``). Slurm's own
examples name nodes the same way (``tux0``, ``node[1-32]``); ``--hostnames`` sets
another (:class:`topomodel.export.hosts.HostNames`)."""


ASTRA_GB_BYTES = 2**30
"""Bytes in ASTRA-sim's "GB": its analytical backend converts a bandwidth in GB/s to
bytes/ns as ``GB/s x 2^30 / 10^9`` (``bw_GBps_to_Bpns``), so its GB is a GiB."""


CALCULON_GB_BYTES = 1e9
"""Bytes in Calculon's "GB" (its network and memory code multiply GB/s by 1e9)."""


CALCULON_MIN_NETWORKS = 2
"""Networks a Calculon system file has at least: Calculon's executions (its own example
files, and ``llm-optimal-execution``'s search) put PP and DP on network 1, and its loader
asserts the id exists, so a file with one network crashes Calculon (AssertionError in
``_check_network_assignments``). A fabric with fewer levels gets tiers of size 1 (the
accelerator alone): an execution with nothing on them runs, one that puts PP or DP there
is refused by Calculon's own check ("Network tier1 isn't big enough")."""


def calculon_memory_gib(capacity_bytes: float) -> float:
    """An HBM capacity in the unit of Calculon's ``mem1.GiB``: its loader multiplies by
    2^30, and its own system files write the vendor's figure there (``a100_80g.json``:
    ``"GiB": 80`` for the 80 GB A100). HBM is built of binary-sized stacks (five 16 GiB
    HBM3 stacks on an 80 GB H100), so a vendor's decimal-looking "80 GB" is 80 GiB of
    HBM: a capacity the catalog gives in whole GB is written as that number; one given in
    GiB (TPU v4's 32 GiB) as its GiB. Written as 74.5 (80 x 10^9 / 2^30), Calculon would
    refuse jobs that fit the part.

    Examples
    --------
    >>> calculon_memory_gib(80e9), calculon_memory_gib(32 * 2**30), calculon_memory_gib(141e9)
    (80.0, 32.0, 141.0)
    """
    gib = capacity_bytes / 2**30
    if abs(gib - round(gib)) < 1e-9:
        return float(round(gib))
    gb = capacity_bytes / 1e9
    return float(round(gb)) if abs(gb - round(gb)) < 1e-9 else round(gib, 6)


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


CALCULON_HOST_MEMORY_GIB = 0.0
"""Second-level (offload) memory capacity, GiB: host memory is not in the catalog, so
none is offered (Calculon then cannot offload); edit the file to allow it."""


CALCULON_PROCESSING_MODE = "roofline"
"""Compute and memory time overlap (``roofline``), as topomodel's step model, which
times compute from FLOPs alone, implicitly assumes; Calculon's other mode is
``no_overlap``."""


CALCULON_OPS: dict[str, list[float | None]] = {
    "p2p": [1.0, None],
    "reduce_scatter": [1.0, -1.0],
    "all_gather": [1.0, -1.0],
    "all_reduce": [2.0, -1.0],
}
"""Calculon's per-op ``[scalar, offset]``: bytes sent per accelerator are
``size x scalar x (1 + offset / n)``, so these are the ring (bus-bandwidth) volumes:
AllReduce 2 (n-1)/n, ReduceScatter and AllGather (n-1)/n of the buffer (nccl-tests)."""


def export_fabric(fabric: Fabric, fmt: str, path: str | Path, *,
                  compute_efficiency: float | None = None,
                  hostnames: str | None = None,
                  label_prefix: str | None = None) -> list[Path]:
    """Write ``fabric`` as ``fmt`` to ``path``; return the files written.
    ``compute_efficiency`` is Calculon's flat GEMM efficiency for an accelerator without
    a measured GEMM sweep (:func:`calculon_system`); ``hostnames`` the host name pattern
    of the scheduler exports (default :data:`DEFAULT_HOSTNAMES`); ``label_prefix`` the prefix of
    Kueue's label keys (default :data:`topomodel.export.kueue.DEFAULT_LABEL_PREFIX`).

    ``graphml``, ``json``, ``astra-sim``, ``calculon``, ``slurm``, ``slurm-block`` and
    ``infragraph`` write the one file ``path``; ``csv`` and ``parquet`` write ``nodes``
    and ``links`` tables into the directory ``path``, ``kueue`` its ``topology.yaml``
    and ``node-labels.csv``.

    Raises
    ------
    UsageError
        For ``parquet`` without pyarrow, and for ``astra-sim`` on a fabric whose levels
        it cannot express (see :func:`astra_sim_network`).
    """
    target = Path(path)
    if fmt in ("slurm", "slurm-block", "kueue"):
        return _scheduler(fabric, fmt, target, hostnames, label_prefix)
    if fmt == "infragraph":
        from topomodel.export.infragraph import write_infragraph

        atomic_write(target, lambda stream: write_infragraph(fabric, stream))
        return [target]
    if fmt in ("csv", "parquet"):
        return _tables(fabric, fmt, target)
    if fmt == "astra-sim":
        atomic_bytes(target, astra_sim_network(fabric).encode())
        return [target]
    if fmt == "calculon":
        system = calculon_system(fabric, compute_efficiency=compute_efficiency)
        atomic_bytes(target, (json.dumps(system, indent=2) + "\n").encode())
        return [target]
    if fmt in ("graphml", "json"):
        from topomodel.export.graphtext import write_graphml, write_node_link

        write = write_graphml if fmt == "graphml" else write_node_link
        atomic_write(target, lambda stream: write(fabric, stream))
    else:
        raise ValueError(f"unknown export format {fmt!r}; choose from {EXPORT_FORMATS}")
    return [target]


def _scheduler(fabric: Fabric, fmt: str, target: Path, hostnames: str | None,
               label_prefix: str | None) -> list[Path]:
    """A Slurm ``topology.conf`` (file ``target``) or Kueue's topology and node labels
    (folder ``target``)."""
    from topomodel.export.hosts import HostNames
    from topomodel.export.kueue import DEFAULT_LABEL_PREFIX, kueue_topology
    from topomodel.export.slurm import slurm_blocks, slurm_tree

    names = HostNames.parse(hostnames or DEFAULT_HOSTNAMES)
    if fmt == "kueue":
        refuse_output_folder(target)
        topology, labels = kueue_topology(fabric, names,
                                          label_prefix=label_prefix or DEFAULT_LABEL_PREFIX)
        csv = labels.to_csv(index=False).encode()
        return atomic_files(target, [("topology.yaml", lambda s: s.write(topology.encode())),
                                     ("node-labels.csv", lambda s: s.write(csv))])
    text = slurm_tree(fabric, names) if fmt == "slurm" else slurm_blocks(fabric, names)
    atomic_bytes(target, text.encode())
    return [target]


def _tables(fabric: Fabric, fmt: str, target: Path) -> list[Path]:
    """``nodes`` and ``links`` as CSV or Parquet files in the directory ``target``, both
    or neither."""
    refuse_output_folder(target)
    if fmt == "parquet":
        try:
            import pyarrow  # noqa: F401
        except ImportError:
            raise UsageError("the parquet export needs pyarrow: pip install pyarrow") from None

    def writer(table: pd.DataFrame) -> Callable[[IO[bytes]], object]:
        if fmt == "csv":
            return lambda stream: stream.write(table.to_csv(index_label="id").encode())
        return _parquet_writer(table.rename_axis("id"))

    return atomic_files(target, [(f"{name}.{fmt}", writer(table)) for name, table in
                                 (("nodes", fabric.nodes), ("links", fabric.links))])


def _parquet_writer(frame: pd.DataFrame) -> Callable[[IO[bytes]], object]:
    return lambda stream: frame.to_parquet(stream, engine="pyarrow")


def astra_sim_network(fabric: Fabric, time_model: TimeModel | None = None) -> str:
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
    levels = network_levels(fabric, time_model)
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


def calculon_system(fabric: Fabric, time_model: TimeModel | None = None, *,
                    compute_efficiency: float | None = None) -> dict[str, Any]:
    """A Calculon system description (plain types, Calculon's own keys and units).

    ``matrix`` holds the catalog's dense peak per data type (TFLOP/s) with the step
    model's GEMM size curve as Calculon's efficiency table (``compute_efficiency``: one
    flat value instead); ``vector`` is :data:`CALCULON_VECTOR_SHARE` of it; ``mem1`` is
    the HBM (GiB, GB/s) at the step model's achieved share; ``processor_usage`` the
    SM share communication kernels take (``StepAssumptions.comm_sm_share``);
    ``networks`` has one tier per level of :func:`network_levels` (the dimensions of a
    torus joined into one), with ``size`` the accelerators it reaches, ``bandwidth`` per
    accelerator per direction in GB/s (10^9 bytes/s), ``latency`` in seconds (one
    crossing plus the time model's per-message overhead) and ``efficiency`` the
    effective/nominal rate of its slowest link tier.
    """
    from topomodel.analysis.training.compute import DEFAULT_HBM_EFFICIENCY, device_model
    from topomodel.analysis.training.step import StepAssumptions

    time_model = time_model or TimeModel()
    catalog = fabric.catalog
    system = catalog.get(fabric.design.system, System)
    accelerator = catalog.get(system.accelerator, Accelerator)
    if compute_efficiency is not None:
        table: list[list[float]] = [[0, compute_efficiency]]
    else:  # Calculon takes the first row whose GFLOPs an operation reaches
        device = device_model(accelerator, StepAssumptions().compute_dtype)
        sizes = np.exp(device.curve_log_flops) / 1e9
        table = [[round(float(g), 6), round(float(e), 6)] for g, e in
                 zip(sizes[::-1], device.curve_efficiency[::-1], strict=True)]
        table[-1][0] = 0
    hbm_share = (accelerator.hbm_achieved.rate_Bps / accelerator.hbm_Bps
                 if accelerator.hbm_achieved else DEFAULT_HBM_EFFICIENCY)
    peaks = {CALCULON_DTYPES[k]: v for k, v in accelerator.peak_flops.items()
             if k in CALCULON_DTYPES}
    if "bfloat16" in peaks and "float16" not in peaks:
        peaks["float16"] = peaks["bfloat16"]  # the same tensor-core rate on these parts
    if not peaks:
        raise UsageError(f"{accelerator.id} has no peak for a data type Calculon knows"
                         f" ({', '.join(CALCULON_DTYPES)})")

    def engine(share: float) -> dict[str, Any]:
        return {dtype: {"tflops": round(flops * share / 1e12, 6),
                        "gflops_efficiency": table}
                for dtype, flops in sorted(peaks.items())}

    host_Bps = _host_link_Bps(fabric)
    networks = []
    tiers = _calculon_tiers(network_levels(fabric, time_model))
    if not tiers:
        raise UsageError(f"{fabric.design.name or fabric.design.file}: no network joins"
                         " its accelerators, so Calculon has no network to put TP, PP or"
                         " DP on")
    for tier in tiers:
        networks.append({
            "bandwidth": round(tier.injection_Bps / CALCULON_GB_BYTES, 6),
            "efficiency": tier.efficiency,
            "size": tier.reach,
            "latency": tier.latency_s + time_model.per_message_overhead_s,
            "ops": {k: list(v) for k, v in CALCULON_OPS.items()},
            "must_be_filled": False,
            "processor_usage": StepAssumptions().comm_sm_share,
        })
    while len(networks) < CALCULON_MIN_NETWORKS:  # a single node: no network beyond it
        networks.append({**networks[-1], "size": 1})
    return {
        "matrix": engine(1.0),
        "vector": engine(CALCULON_VECTOR_SHARE),
        "mem1": {"GiB": calculon_memory_gib(accelerator.hbm_bytes),
                 "GBps": round(accelerator.hbm_Bps / CALCULON_GB_BYTES, 6),
                 "MB_efficiency": [[0, round(hbm_share, 6)]]},
        "mem2": {"GiB": CALCULON_HOST_MEMORY_GIB,
                 "GBps": round(host_Bps / CALCULON_GB_BYTES, 6),
                 "MB_efficiency": [[0, 1.0]]},
        "processing_mode": CALCULON_PROCESSING_MODE,
        "networks": networks,
    }


def _host_link_Bps(fabric: Fabric) -> float:
    """The accelerator's host link, bytes/s per direction (the scale-out's, else the
    system's catalog entry); 0 where the catalog names none (Calculon's ``mem2`` is then
    unreachable, as its 0 GiB makes it anyway)."""
    if rate := fabric.structure.scaleout.host_link_rate_Bps:
        return rate
    system = fabric.catalog.get(fabric.design.system, System)
    if not system.host_link:
        return 0.0
    return fabric.catalog.get(system.host_link, HostLink).rate_Bps


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
