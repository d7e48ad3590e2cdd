"""Links under a time model: each link tier's effective share of its line rate and where
it comes from, every link's effective rate (bytes/s per direction), and the system's
launch latency every collective pays (with where it comes from).

Scale-up tiers run at their link's catalog efficiency (NCCL's achievable per-link
figures), the host tier at its host link's, the network tiers at their transport's
packet efficiency (:func:`network_transport`, :mod:`topomodel.inputs.transports`: the
one home of each transport's figures) unless the NIC's catalog entry gives its own
(``efficiency``, as a calibration measures it); a time model's ``efficiency`` overrides
any tier.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from topomodel.analysis.assumptions import TimeModel
from topomodel.fabric.tables import Fabric
from topomodel.inputs.parts import HostLink, Nic, ScaleupLink, Switch, System
from topomodel.inputs.transports import TRANSPORT_OF_PROTOCOL, TRANSPORTS, Transport


def network_transport(fabric: Fabric) -> Transport | None:
    """The transport of the fabric's scale-out network (None without one): TCP/IP
    sockets where the design says ``transport: sockets``, else the NIC's own
    (``transport`` in its catalog entry: EFA), else RDMA over its switch's protocol
    (InfiniBand verbs, RoCEv2); the NIC entry's ``net_latency`` and
    ``low_latency_protocols`` replace the transport's where given."""
    catalog, scaleout = fabric.catalog, fabric.structure.scaleout
    if not scaleout.switch:
        return None
    nic = catalog.get(scaleout.nic, Nic) if scaleout.nic else None
    if fabric.design.scaleout.transport == "sockets":
        return TRANSPORTS["sockets"]
    protocol = catalog.get(scaleout.switch, Switch).protocol
    name = (nic.transport if nic is not None and nic.transport
            else TRANSPORT_OF_PROTOCOL[protocol])
    base = TRANSPORTS[name]
    if nic is None or (nic.net_latency_s is None and nic.low_latency_protocols is None):
        return base
    latency = base.net_latency_s if nic.net_latency_s is None else nic.net_latency_s
    low = (base.low_latency_protocols if nic.low_latency_protocols is None
           else nic.low_latency_protocols)
    return replace(base, net_latency_s=latency, low_latency_protocols=low,
                   source=f"{base.source}; latency and protocols: catalog {nic.id}")


def tier_efficiency(fabric: Fabric, time_model: TimeModel) -> dict[str, float]:
    """Effective / nominal rate per link tier (see :func:`efficiency_sources`)."""
    return {tier: value for tier, (value, _) in efficiency_sources(fabric, time_model).items()}


def effective_link_Bps(fabric: Fabric, time_model: TimeModel) -> np.ndarray:
    """Every link's effective rate under ``model``, bytes/s per direction: its nominal
    capacity times its tier's efficiency (:func:`tier_efficiency`), failed or not (the
    one place a link's rate meets a time model)."""
    links = fabric.link_arrays
    efficiency = tier_efficiency(fabric, time_model)
    tiers = links["tier"]
    eff = np.array([efficiency[t] for t in tiers.categories])[tiers.codes]
    rate: np.ndarray = links["capacity_Bps"] * eff
    return rate


def efficiency_sources(fabric: Fabric, time_model: TimeModel) -> dict[str, tuple[float, str]]:
    """Effective / nominal rate per link tier present, and where it comes from: the time
    model's override, else scale-up tiers at their link's catalog efficiency, the host
    tier (accelerator to NIC) at its host link's, the network tiers at their
    transport's packet efficiency (:func:`network_transport`), else 1 (line rate)."""
    catalog, structure = fabric.catalog, fabric.structure
    link = structure.scaleup.link
    up = _catalog_figure(catalog.get(link, ScaleupLink)) if link else (
        1.0, "no scale-up link")
    host_id = structure.scaleout.host_link
    host = _catalog_figure(catalog.get(host_id, HostLink)) if host_id else (
        1.0, "no host link: the NIC's rate")
    transport = network_transport(fabric)
    net = ((transport.efficiency, f"{transport.name} transport's packet efficiency")
           if transport is not None else (1.0, "no scale-out switch"))
    nic = catalog.get(structure.scaleout.nic, Nic) if structure.scaleout.nic else None
    if transport is not None and nic is not None and nic.efficiency is not None:
        net = _catalog_figure(nic)
    socket_id = structure.scaleup.socket_link
    between = _catalog_figure(catalog.get(socket_id, ScaleupLink)) if socket_id else up
    out: dict[str, tuple[float, str]] = {}
    for tier in fabric.link_arrays["tier"].categories:
        value = (between if tier == "scaleup_l3" else up if tier.startswith("scaleup")
                 else host if tier == "host" else net)
        out[tier] = ((time_model.efficiency[tier], "given (--efficiency)")
                     if tier in time_model.efficiency else value)
    return out


def _catalog_figure(entry: ScaleupLink | HostLink | Nic) -> tuple[float, str]:
    """An entry's efficiency and where it comes from: ``as measured (FILE)`` where a
    calibration overlay set it, else the catalog entry."""
    measured = entry.measured_from("efficiency")
    where = f"as measured ({measured})" if measured else f"catalog {entry.id}"
    return float(entry.efficiency or 0.0), where


def launch_latency_s(fabric: Fabric) -> float:
    """The design's system's ``launch_latency`` (0 unset), seconds: added to every
    collective's NCCL latency (:mod:`topomodel.analysis.collectives.timing`)."""
    system = fabric.catalog.entries.get(fabric.design.system)
    return float(system.launch_latency_s or 0.0) if isinstance(system, System) else 0.0


def launch_latency_source(fabric: Fabric) -> tuple[float, str] | None:
    """The system's launch latency, seconds, and where it comes from (``as measured
    (FILE)`` after a calibration, else its catalog entry); None when it has none."""
    system = fabric.catalog.entries.get(fabric.design.system)
    if not isinstance(system, System) or system.launch_latency_s is None:
        return None
    measured = system.measured_from("launch_latency")
    return system.launch_latency_s, (f"as measured ({measured})" if measured
                                     else f"catalog {system.id}")


class FailedLinkRates:
    """Every link row's effective rate (bytes/s) with the failed rows' read as 0, made
    from the rates as if none had failed and the failed mask, both held already by the
    fabric's copies, on reading: not an array of 8 bytes a row per copy (52 MB at 98k,
    beside everything a degraded step holds). Indexing (a slice or rows) gives a new
    array, bit for bit ``np.where(failed, 0.0, rates)[rows]``.

    Examples
    --------
    >>> rates = FailedLinkRates(np.array([1.0, 2.0, 3.0]), np.array([False, True, False]))
    >>> rates[np.array([2, 1, 1])].tolist(), rates[0:2].tolist(), len(rates)
    ([3.0, 0.0, 0.0], [1.0, 0.0], 3)
    """

    def __init__(self, rates: np.ndarray, failed: np.ndarray) -> None:
        if rates.shape != failed.shape:
            raise ValueError("a rate and a failed flag per link row")
        self.rates, self.failed = rates, failed

    def __len__(self) -> int:
        return len(self.rates)

    def __getitem__(self, rows: slice | np.ndarray) -> np.ndarray:
        return np.where(self.failed[rows], 0.0, self.rates[rows])

    def __array__(self, dtype: np.dtype | None = None, copy: bool | None = None
                  ) -> np.ndarray:
        """Every row's rate, as one array (for a reader that wants them all)."""
        whole = self[slice(None)]
        return whole if dtype is None else whole.astype(dtype, copy=False)


LinkRates = np.ndarray | FailedLinkRates
"""Every link row's effective rate, bytes/s: an array, or :class:`FailedLinkRates`
(each read by slices and rows, a new array each time)."""
