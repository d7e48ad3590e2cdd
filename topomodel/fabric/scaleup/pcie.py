"""The PCIe-tree scale-up kind (a system's ``scaleup.kind: pcie``): no GPU-to-GPU links.

Each GPU has one PCIe link to a PCIe switch (or, with no switches, to a root port of its
CPU), each switch one uplink of the same PCIe link to the root complex of its socket
(tier ``scaleup_l2``), and two sockets are joined by their inter-socket link (UPI, xGMI;
tier ``scaleup_l3``), so traffic between GPUs under different switches crosses the host,
as on the board. NCCL times such paths with its PCI latencies."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np

from topomodel.fabric.scaleup.kind import ScaleupKind, per_system_domains
from topomodel.fabric.scaleup.switched import system_chips
from topomodel.fabric.structure import ScaleupStructure
from topomodel.inputs.parts import ScaleupLink, ScaleupSwitch

if TYPE_CHECKING:
    from topomodel.fabric.tables import FabricBuilder
    from topomodel.inputs.catalog import Catalog
    from topomodel.inputs.design import Design
    from topomodel.inputs.parts import System


class PcieTree(ScaleupKind):
    """GPUs under PCIe switches (or root ports) under each socket's root complex; one
    domain per system. Levels: one ``Switch`` at the GPU's PCIe rate."""

    name = "pcie"
    nccl_intra = "pci"
    board_only = True

    def wire(self, builder: FabricBuilder, design: Design, catalog: Catalog,
             system: System, acc: np.ndarray, link: ScaleupLink, base: ScaleupStructure
             ) -> tuple[np.ndarray, ScaleupStructure]:
        """The PCIe switches (if any) and root complexes, the sockets joined."""
        n_systems, per_system = acc.shape
        wiring = system.scaleup
        sockets, switches = wiring.sockets, wiring.switches
        root = catalog.get(wiring.root or "", ScaleupSwitch)
        cpus = system_chips(builder, n_systems, "cpu", sockets, "scaleup_l2", root)
        gpu_slot = np.arange(per_system)
        if switches:
            chip = catalog.get(wiring.switch or "", ScaleupSwitch)
            chips = system_chips(builder, n_systems, "pcisw", switches, "scaleup", chip)
            builder.add_links(acc.ravel(), chips[:, gpu_slot * switches // per_system].ravel(),
                              tier="scaleup", rate_Bps=link.link_rate_Bps, medium="pcie")
            up = np.arange(switches) * sockets // switches
            builder.add_links(chips.ravel(), cpus[:, up].ravel(), tier="scaleup_l2",
                              rate_Bps=link.link_rate_Bps, medium="pcie")
        else:
            builder.add_links(acc.ravel(), cpus[:, gpu_slot * sockets // per_system].ravel(),
                              tier="scaleup", rate_Bps=link.link_rate_Bps, medium="pcie")
        socket_link = ""
        if sockets > 1:
            between = catalog.get(wiring.socket_link or "", ScaleupLink)
            socket_link = between.id
            ring = np.arange(sockets)
            pairs = ring[:-1] if sockets == 2 else ring
            builder.add_links(cpus[:, pairs].ravel(), cpus[:, (pairs + 1) % sockets].ravel(),
                              tier="scaleup_l3", rate_Bps=between.link_rate_Bps,
                              medium="electrical")
        return per_system_domains(acc), replace(
            base, switches_per_system=switches, sockets=sockets, socket_link=socket_link)

    def json_keys(self, up: ScaleupStructure) -> dict[str, Any]:
        """The link, the PCIe switches and sockets per system and the socket link."""
        return {**super().json_keys(up), "pcie_switches_per_system": up.switches_per_system,
                "sockets_per_system": up.sockets, "socket_link": up.socket_link}


KIND = PcieTree()
