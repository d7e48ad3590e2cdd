"""A catalog system from an NCCL topology dump: the node as NCCL saw it.

:func:`system_from_dump` turns a read dump (:mod:`topomodel.inputs.measured.ncclxml`)
into a ``systems`` entry of a catalog overlay, provenance ``measured`` and the dump named
as its source, reusing the catalog's parts where the dump identifies them:

- the accelerator by its PCI device id (:data:`GPU_DEVICE_IDS`), else by SM and NVLink
  count (:data:`GPU_BY_SM_AND_NVLINKS`);
- the scale-up wiring from the NVLinks: to NVSwitch chips (``switched``: one chip per
  distinct target, its links per GPU from the counts; the chip by SM,
  :data:`NVSWITCH_BY_SM`), GPU to GPU (``full_mesh``), or none (``pcie``: the PCIe
  switches above the GPUs, the CPU sockets, the link by PCIe generation);
- the NIC by its PCI ids (:data:`NIC_DEVICE_IDS`), else by its speed; the ports NCCL
  uses at the dump's highest speed are the NICs (slower ones, storage or management, are
  left out and named); a port speed other than the catalog NIC's gives a NIC entry of
  its own at the measured speed;
- the host link by the NIC's PCIe generation and width.

What it cannot identify is said in the result (and the entry's notes); what it cannot
do without (the accelerator) raises a one-line error asking for ``--accelerator``.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from topomodel.errors import InputError, Problem, UsageError
from topomodel.inputs.catalog import Catalog
from topomodel.inputs.measured.ncclxml import INVISIBLE_TARGET, Gpu, NcclTopology, Net
from topomodel.inputs.parts import ENTRY_ID_RE, Accelerator, HostLink, Nic, ScaleupSwitch, System

GPU_DEVICE_IDS = {"0x20b0": "a100-sxm-40gb", "0x20b2": "a100-sxm-80gb",
                  "0x20b5": "a100-pcie-80gb", "0x2330": "h100-sxm", "0x2335": "h200-sxm",
                  "0x2901": "b200", "0x26b9": "l40s", "0x2684": "rtx-4090"}
"""Catalog accelerator by NVIDIA PCI device id (vendor ``0x10de``), as the PCI ID
Repository (pci-ids.ucw.cz, ``10de``) names them: 20b0 A100 SXM4 40GB, 20b2 A100 SXM4
80GB, 20b5 A100 PCIe 80GB, 2330 H100 SXM5 80GB, 2335 H200 SXM 141GB, 2901 B200, 26b9
L40S, 2684 GeForce RTX 4090."""

GPU_BY_SM_AND_NVLINKS = {(80, 12): "a100-sxm-80gb", (90, 18): "h100-sxm", (100, 18): "b200"}
"""Catalog accelerator by (``sm``, NVLinks per GPU) when the device id is not in
:data:`GPU_DEVICE_IDS`: the SXM part of each generation (A100: 12 NVLink3, H100: 18
NVLink4, B200: 18 NVLink5; hardware-facts A.2). Ambiguous by nature (an H200 has the SM
and links of an H100), so the result says it was identified this way."""

NVSWITCH_BY_SM = {80: "nvswitch2", 90: "nvswitch3", 100: "nvswitch4"}
"""The NVSwitch chip of each GPU generation's baseboard (A100: NVSwitch gen2, H100/H200:
gen3, B200: the NVLink5 switch chip; hardware-facts A.3). The dump gives a chip's bus id,
not its model."""

HIDDEN_NVSWITCH_WIRING = {90: (4, (5, 5, 4, 4)), 100: (2, (9, 9))}
"""Chips and links per chip assumed, by ``sm``, when the dump cannot see the NVSwitch
chips (a VM: every NVLink's target is :data:`~.ncclxml.INVISIBLE_TARGET`): the catalog's
HGX H100 (4 chips, 5+5+4+4, hardware-facts A.3) and HGX B200 (2 chips, 9+9) wiring."""

NIC_DEVICE_IDS = {("0x15b3", "0x1015"): "connectx-4-lx", ("0x15b3", "0x101b"): "connectx-6",
                  ("0x15b3", "0x101d"): "connectx-6-dx", ("0x15b3", "0x1021"): "connectx-7",
                  ("0x15b3", "0x1023"): "connectx-8", ("0x15b3", "0xa2dc"): "bluefield-3"}
"""Catalog NIC by PCI (vendor, device) id, as the PCI ID Repository names them (vendor
15b3 Mellanox: 1015 ConnectX-4 Lx, 101b ConnectX-6, 101d ConnectX-6 Dx, 1021
ConnectX-7, 1023 ConnectX-8, a2dc BlueField-3)."""

PCIE_P2P_LINKS = {4: "pcie4-p2p", 5: "pcie5-p2p"}
"""A GPU's PCIe peer link by PCIe generation (catalogs/smallcluster.yaml)."""

PCIE_SWITCH_CHIPS = {4: "pex88096", 5: "pex89144"}
"""The PCIe switch chip assumed by generation: the catalog's Broadcom Gen4 and Gen5
switches (the dump gives the switch's vendor and device ids, not a catalog part)."""

CPU_ROOTS = {4: "cpu-root-gen4", 5: "cpu-root-gen5"}
"""A socket's root complex by the PCIe generation of the GPUs' links."""

SOCKET_LINKS = {"GenuineIntel": "intel-upi-nccl", "AuthenticAMD": "amd-xgmi-nccl"}
"""The link between two sockets by the ``vendor`` NCCL writes of a ``cpu`` (NCCL's own
figures, ``src/graph/topo.h``)."""

MBPS_TO_BPS = 1e6 / 8
"""Bytes/s per Mb/s (NCCL's ``speed`` unit: 10^6 bit/s)."""


@dataclass(frozen=True)
class TopologyImport:
    """A dump turned into a catalog system: the overlay (``overlay``, ready for YAML),
    the new system's id, how each figure was found, and what could not be."""

    system_id: str
    overlay: dict[str, Any]
    found: tuple[tuple[str, str], ...]
    not_identified: tuple[str, ...]
    matches: tuple[str, ...] = field(default=())


@dataclass
class _Draft:
    found: list[tuple[str, str]] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    figure_provenance: dict[str, str] = field(default_factory=dict)
    extra: dict[str, dict[str, Any]] = field(default_factory=dict)


def default_id(dump: NcclTopology) -> str:
    """``nccl-`` and the dump file's name, lower case, as a catalog id.

    Examples
    --------
    >>> from topomodel.inputs.measured.ncclxml import NcclTopology
    >>> default_id(NcclTopology("/tmp/DGX H100.xml", 1, (), (), (), ()))
    'nccl-dgx-h100'
    """
    stem = re.sub(r"[^a-z0-9._-]+", "-", Path(dump.file).stem.lower()).strip("-._")
    return f"nccl-{stem or 'node'}"


def system_from_dump(dump: NcclTopology, catalog: Catalog, *, ident: str | None = None,
                     accelerator: str | None = None) -> TopologyImport:
    """The catalog system an NCCL topology dump describes, as an overlay with one
    ``systems`` entry (and a ``nics`` entry when the ports run at a speed no catalog NIC
    has).

    Parameters
    ----------
    dump
        The read dump.
    catalog
        The catalog whose parts the system names.
    ident
        The new system's id (default :func:`default_id`).
    accelerator
        A catalog accelerator id to use instead of identifying the GPUs.

    Raises
    ------
    UsageError
        For an ``ident`` that is not a catalog id, or an unknown ``accelerator``.
    InputError
        Naming the dump, for GPUs of different kinds or wirings, or GPUs it cannot
        identify without ``accelerator``.
    """
    ident = ident or default_id(dump)
    if not ENTRY_ID_RE.match(ident):
        raise UsageError(f"--id {ident!r}: a catalog id is lower case letters, digits,"
                         " '.', '_' and '-', starting with a letter or digit")
    draft = _Draft()
    acc = _accelerator(dump, catalog, accelerator, draft)
    entry: dict[str, Any] = {
        "name": f"{len(dump.gpus)} x {acc.title} node (NCCL topology dump"
                f" {Path(dump.file).name})",
        "accelerator": acc.id, "accelerators": len(dump.gpus), "form": "server",
        "scaleup": _scaleup(dump, catalog, acc, draft)}
    entry.update(_nics(dump, catalog, draft))
    entry["source"] = (f"NCCL topology dump {dump.file} (NCCL_TOPO_DUMP_FILE, version"
                       f" {dump.version}), read by topomodel catalog import-nccl-topo")
    entry["provenance"] = "measured"
    if draft.figure_provenance:
        entry["figure_provenance"] = dict(draft.figure_provenance)
    draft.missing.append("power: not in the dump (the system has no power figure)")
    entry["notes"] = " ".join([f"{what}: {how}." for what, how in draft.found]
                              + [f"Not identified: {m}." for m in draft.missing])
    overlay: dict[str, Any] = {}
    if draft.extra:
        overlay["nics"] = draft.extra
    overlay["systems"] = {ident: entry}
    return TopologyImport(ident, overlay, tuple(draft.found), tuple(draft.missing),
                          _matches(entry, catalog))


def overlay_yaml(result: TopologyImport) -> str:
    """The overlay as the text of a catalog file, with a comment saying where it came
    from."""
    header = (f"# Catalog overlay: system {result.system_id}, from an NCCL topology dump"
              " (topomodel catalog import-nccl-topo).\n# Use it with --catalog FILE and"
              f" 'system: {result.system_id}' in a design.\n")
    return header + yaml.safe_dump(result.overlay, sort_keys=False, width=88)


def _dump_error(dump: NcclTopology, gpu: Gpu | None, message: str) -> InputError:
    where = "" if gpu is None else f"<gpu dev={gpu.dev}>"
    return InputError([Problem(dump.file, None if gpu is None else gpu.line, where, message)])


def _accelerator(dump: NcclTopology, catalog: Catalog, given: str | None,
                 draft: _Draft) -> Accelerator:
    first = dump.gpus[0]
    for gpu in dump.gpus[1:]:
        if (gpu.sm, gpu.pci.device) != (first.sm, first.pci.device):
            raise _dump_error(dump, gpu, f"sm {gpu.sm}, device {gpu.pci.device}, but GPU"
                              f" {first.dev} is sm {first.sm}, device {first.pci.device}:"
                              " a catalog system holds one kind of accelerator")
    described = (f"sm {first.sm} ({first.generation or 'unknown generation'}), PCI device"
                 f" {first.pci.vendor}:{first.pci.device}, {first.nvlink_count} NVLinks")
    if given is not None:
        draft.found.append(("accelerator", f"{given}, as given (the dump: {described})"))
        draft.figure_provenance["accelerator"] = "assumed"
        return catalog.get(given, Accelerator)
    by_id = GPU_DEVICE_IDS.get(first.pci.device) if first.pci.vendor == "0x10de" else None
    by_shape = GPU_BY_SM_AND_NVLINKS.get((first.sm, first.nvlink_count))
    ident = next((i for i in (by_id, by_shape) if i and i in catalog), None)
    if ident is None:
        raise _dump_error(dump, first, f"cannot identify the GPU ({described}) with a"
                          " catalog accelerator; give one with --accelerator ID")
    how = "by PCI device id" if ident == by_id else (
        "by SM and NVLink count only (the device id is not in the table; another part"
        " of this generation may share both)")
    draft.found.append(("accelerator", f"{ident} {how} ({described})"))
    return catalog.get(ident, Accelerator)


def _scaleup(dump: NcclTopology, catalog: Catalog, acc: Accelerator,
             draft: _Draft) -> dict[str, Any]:
    kinds = {link.kind for gpu in dump.gpus for link in gpu.nvlinks}
    if not kinds:
        return _pcie(dump, catalog, draft)
    if kinds == {"nvswitch"}:
        return _switched(dump, catalog, acc, draft)
    if kinds == {"gpu"}:
        peers = {gpu.dev: {link.target for link in gpu.nvlinks} for gpu in dump.gpus}
        if all(len(p) == len(dump.gpus) - 1 for p in peers.values()):
            draft.found.append(("scaleup", "full mesh: every GPU has NVLinks to every"
                                " other"))
            return {"kind": "full_mesh"}
    raise _dump_error(dump, None, f"NVLinks to {', '.join(sorted(kinds))} in a pattern a"
                      " catalog system cannot describe (all to NVSwitch chips, or a full"
                      " GPU mesh)")


def _switched(dump: NcclTopology, catalog: Catalog, acc: Accelerator,
              draft: _Draft) -> dict[str, Any]:
    first = dump.gpus[0]
    per_gpu = {gpu.dev: sorted((link.count for link in gpu.nvlinks), reverse=True)
               for gpu in dump.gpus}
    for gpu in dump.gpus:
        if per_gpu[gpu.dev] != per_gpu[first.dev]:
            raise _dump_error(dump, gpu, f"NVLinks per switch {per_gpu[gpu.dev]}, but GPU"
                              f" {first.dev} has {per_gpu[first.dev]}: a catalog system"
                              " wires every GPU alike (a link down?)")
    chip = NVSWITCH_BY_SM.get(first.sm)
    if chip is None or chip not in catalog:
        raise _dump_error(dump, first, f"NVLinks to NVSwitch chips, but no catalog"
                          f" NVSwitch is known for sm {first.sm}")
    links = per_gpu[first.dev]
    hidden = all(link.target == INVISIBLE_TARGET for gpu in dump.gpus for link in gpu.nvlinks)
    if hidden:
        assumed = HIDDEN_NVSWITCH_WIRING.get(first.sm)
        if assumed is None or sum(assumed[1]) != sum(links):
            raise _dump_error(dump, first, "the NVSwitch chips are hidden (target"
                              f" {INVISIBLE_TARGET}) and no wiring is known for sm"
                              f" {first.sm} with {sum(links)} links")
        links = list(assumed[1])
        draft.figure_provenance["scaleup"] = "assumed"
        draft.missing.append("which NVSwitch chip each NVLink reaches (hidden from the"
                             f" dump): {len(links)} chips with {links} links assumed")
    if acc.scaleup_link_count and sum(links) != acc.scaleup_link_count:
        raise _dump_error(dump, first, f"{sum(links)} NVLinks per GPU, but {acc.id} has"
                          f" {acc.scaleup_link_count}: links down, or another accelerator"
                          " (give --accelerator)")
    catalog.get(chip, ScaleupSwitch)
    draft.found.append(("scaleup", f"{len(links)} NVSwitch chips ({chip}, by SM"
                        f" {first.sm}), {'+'.join(map(str, links))} NVLinks per GPU"))
    return {"kind": "switched", "switch": chip, "switches": len(links),
            "links_per_switch": links}


def _pcie(dump: NcclTopology, catalog: Catalog, draft: _Draft) -> dict[str, Any]:
    first = dump.gpus[0]
    gen = first.pci.pcie_gen
    if gen not in PCIE_P2P_LINKS or gen not in CPU_ROOTS:
        raise _dump_error(dump, first, f"no NVLink and a PCIe link of {first.pci.link_speed!r}:"
                          " no catalog PCIe peer link for it (Gen4 and Gen5 are known)")
    switches = sorted({gpu.pci.switches[-1] for gpu in dump.gpus if gpu.pci.switches})
    sockets = sorted({gpu.pci.numa_id for gpu in dump.gpus}, key=lambda n: n or 0)
    wiring: dict[str, Any] = {"kind": "pcie", "link": PCIE_P2P_LINKS[gen],
                              "root": CPU_ROOTS[gen]}
    if switches:
        wiring.update(switch=PCIE_SWITCH_CHIPS[gen], switches=len(switches))
        draft.missing.append(f"the PCIe switch model: {PCIE_SWITCH_CHIPS[gen]} assumed for"
                             f" Gen{gen}")
        draft.figure_provenance["scaleup"] = "assumed"
    if len(sockets) > 1:
        vendors = {c.vendor for c in dump.cpus}
        link = SOCKET_LINKS.get(vendors.pop()) if len(vendors) == 1 else None
        if link is None:
            raise _dump_error(dump, None, f"GPUs on {len(sockets)} sockets of CPU vendor(s)"
                              f" {sorted(c.vendor for c in dump.cpus)}: no socket link known")
        wiring.update(sockets=len(sockets), socket_link=link)
    draft.found.append(("scaleup", f"PCIe Gen{gen}, {len(switches)} PCIe switches above the"
                        f" GPUs, GPUs on {len(sockets)} NUMA node(s)"))
    return wiring


def _compute_nets(dump: NcclTopology, draft: _Draft) -> list[Net]:
    nets = [net for net in dump.nets if net.speed_Mbps]
    if not nets:
        draft.missing.append("NICs: no network device with a speed in the dump")
        return []
    top = max(net.speed_Mbps or 0 for net in nets)
    slow = sorted(net.name for net in dump.nets if (net.speed_Mbps or 0) < top)
    if slow:
        draft.missing.append(f"slower network devices left out ({', '.join(slow)}): only"
                             f" the {top} Mb/s ones are taken as the compute fabric")
    return [net for net in nets if net.speed_Mbps == top]


def _nics(dump: NcclTopology, catalog: Catalog, draft: _Draft) -> dict[str, Any]:
    nets = _compute_nets(dump, draft)
    if not nets:
        return {}
    speed = nets[0].speed_Mbps or 0
    rate_Bps = speed * MBPS_TO_BPS
    owner = next(nic for nic in dump.nics if nets[0] in nic.nets)
    pci = owner.pci
    models = {(nic.pci.vendor, nic.pci.device) if nic.pci else None for nic in dump.nics
              if any(net in nets for net in nic.nets)}
    if len(models) > 1:
        draft.missing.append(f"one NIC model: the compute ports are on {len(models)}"
                             " kinds of NIC; the first one's is taken")
    by_id = NIC_DEVICE_IDS.get((pci.vendor, pci.device)) if pci else None
    candidates = [n for n in catalog.of_kind(Nic) if abs(n.port_rate_Bps - rate_Bps) < 1]
    nic_id = by_id if by_id in catalog else (candidates[0].id if candidates else None)
    fields: dict[str, Any] = {}
    if nic_id is None:
        draft.missing.append(f"the NIC model ({speed} Mb/s, PCI"
                             f" {pci.vendor if pci else '-'}:{pci.device if pci else '-'})")
        return fields
    nic = catalog.get(nic_id, Nic)
    how = "by PCI id" if nic_id == by_id else f"by speed only, the first of {len(candidates)}"
    if abs(nic.port_rate_Bps - rate_Bps) >= 1 or nic.ports != 1:
        nic_id = f"{nic.id}-at-{speed // 1000}g"
        draft.extra[nic_id] = _measured_nic(nic, speed, dump)
        how += f"; its ports run at {speed} Mb/s, so a NIC entry {nic_id} at that speed"
    draft.found.append(("nic", f"{len(nets)} x {nic.id} {how} ({speed} Mb/s each,"
                        f" {', '.join(n.name for n in nets)})"))
    fields.update(nic=nic_id, nic_count=len(nets))
    if pci and pci.pcie_gen and pci.link_width:
        link = f"pcie{pci.pcie_gen}-x{pci.link_width}"
        if link in catalog and isinstance(catalog.entries[link], HostLink):
            fields["host_link"] = link
        else:
            draft.missing.append(f"the host link (PCIe Gen{pci.pcie_gen} x{pci.link_width}"
                                 " is not a catalog host link)")
    _placement(dump, draft)
    return fields


def _measured_nic(nic: Nic, speed_Mbps: int, dump: NcclTopology) -> dict[str, Any]:
    entry: dict[str, Any] = {"name": f"{nic.title}, one port at {speed_Mbps} Mb/s",
                             "vendor": nic.vendor, "ports": 1,
                             "port_rate": f"{speed_Mbps} Mb/s /dir",
                             "protocols": list(nic.protocols)}
    if nic.host_link:
        entry["host_link"] = nic.host_link
    entry.update(source=f"NCCL topology dump {dump.file} (the net speed); the rest as"
                 f" catalog NIC {nic.id}", provenance="measured",
                 figure_provenance={"protocols": nic.provenance})
    return entry


def _placement(dump: NcclTopology, draft: _Draft) -> None:
    pairs = Counter(len(dump.beside(nic)) for nic in dump.nics if nic.nets)
    if pairs:
        shares = ", ".join(f"{count} NIC(s) beside {gpus} GPU(s)"
                           for gpus, count in sorted(pairs.items()))
        draft.found.append(("placement", f"under a shared PCIe switch: {shares}"))


def _matches(entry: dict[str, Any], catalog: Catalog) -> tuple[str, ...]:
    """Catalog systems with the same accelerator, count, wiring and NICs."""
    wiring = entry["scaleup"]

    def same(system: System) -> bool:
        up = system.scaleup
        return (system.accelerator == entry["accelerator"]
                and system.accelerators == entry["accelerators"]
                and up.kind == wiring["kind"] and up.switch == wiring.get("switch")
                and up.switches == wiring.get("switches", 0)
                and sorted(up.links_per_switch) == sorted(wiring.get("links_per_switch", []))
                and up.sockets == wiring.get("sockets", 1)
                and (up.link, up.root, up.socket_link) == (
                    wiring.get("link"), wiring.get("root"), wiring.get("socket_link"))
                and system.nic == entry.get("nic")
                and system.nic_count == entry.get("nic_count", 0))

    return tuple(s.id for s in catalog.of_kind(System) if same(s))
