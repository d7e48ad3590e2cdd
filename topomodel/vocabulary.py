"""The words of a fabric: node kinds, node and link tiers, media, defined once.

Every builder, router, analysis and drawing uses these constants; a module that needs a
subset or another order derives it from them. The tuples are in order from the
accelerators outwards, and :data:`MEDIA` and :data:`LINK_TIERS` are also the category
order of the link table's ``medium`` and ``tier`` columns.

Node kinds (``fabric.nodes['kind']``):

================== ===============================================================
``accelerator``    a GPU, TPU or NPU: where traffic starts and ends
``nic``            a scale-out network interface of a system
``scaleup_switch`` a scale-up switch chip (NVSwitch, supernode upper-level chips)
``switch``         a scale-out network switch (leaf, spine, core)
================== ===============================================================

Link tiers (``fabric.links['tier']``), scale-out ones named after their upper end:

============== ====================================================================
``scaleup``    accelerator to accelerator, or to its in-system switch chips
``scaleup_l2`` in-system switch chip to a supernode's second switch level
``scaleup_l3`` second to third supernode switch level
``host``       accelerator to NIC (PCIe or the host link)
``leaf``       NIC to leaf switch
``spine``      leaf to spine
``core``       spine to core
============== ====================================================================

Examples
--------
>>> LINK_TIERS
('scaleup', 'scaleup_l2', 'scaleup_l3', 'host', 'leaf', 'spine', 'core')
>>> TIER_KIND["scaleup_l2"], TIER_KIND["spine"]
('scaleup_switch', 'switch')
"""

from __future__ import annotations

COLLECTIVES = ("allreduce", "allgather", "reducescatter", "alltoall", "broadcast", "reduce",
               "sendrecv")
"""The collectives the traffic model builds (nccl-tests' names)."""

NODE_KINDS = ("accelerator", "nic", "scaleup_switch", "switch")
"""What a node is (``fabric.nodes['kind']``)."""

SWITCH_KINDS = ("scaleup_switch", "switch")
"""The node kinds that forward traffic."""

SCALEUP_TIERS = ("scaleup", "scaleup_l2", "scaleup_l3")
"""Scale-up levels from the accelerators up: both node tiers of scale-up switch chips
and the link tiers that reach them."""

FAT_TREE_TIERS = ("leaf", "spine", "core")
"""Scale-out switch tiers from the NICs up: node tiers of switches and the link tiers
whose upper end they are."""

SWITCH_TIERS = SCALEUP_TIERS + FAT_TREE_TIERS
"""Node tiers of every switch, scale-up first."""

SCALE_OUT_TIERS = ("host", *FAT_TREE_TIERS)
"""Link tiers of the scale-out network, from the accelerator's host link up."""

LINK_TIERS = SCALEUP_TIERS + SCALE_OUT_TIERS
"""Every link tier, from the accelerators outwards (the ``tier`` column's categories)."""

NODE_TIERS = ("accelerator", *SCALEUP_TIERS, "nic", *FAT_TREE_TIERS)
"""Every node tier (``fabric.nodes['tier']``), bottom up: accelerators, their scale-up
switch levels, NICs, then the fat-tree."""

TIER_KIND = {"accelerator": "accelerator", "nic": "nic",
             **dict.fromkeys(SCALEUP_TIERS, "scaleup_switch"),
             **dict.fromkeys(FAT_TREE_TIERS, "switch")}
"""The node kind of each node tier."""

MEDIA = ("electrical", "pcie", "copper", "mmf", "smf", "ocs", "optical")
"""Link media (the ``medium`` column's categories): board or backplane traces, PCIe,
copper cable, multimode and single-mode optics, optics through an optical circuit
switch, and optics whose type no cable choice has set yet."""

CABLE_MEDIA = ("copper", "mmf", "smf")
"""Media of a catalog cable or module (``optics.yaml``'s ``medium``)."""

LINK_TIER_LABELS = {"scaleup": "scale-up", "scaleup_l2": "scale-up L1–L2",
                    "scaleup_l3": "scale-up L2–L3", "host": "accelerator–NIC",
                    "leaf": "NIC–leaf", "spine": "leaf–spine", "core": "spine–core"}
"""A human label for each link tier, naming both ends (the tiers are named after the
upper end)."""

ROUTINGS = ("ecmp", "hash", "dmodk")
"""Routing policies: even ECMP, ECMP by seeded hash, d-mod-k (see
:func:`topomodel.routing.route`)."""

AUTO_ROUTING = "auto"
"""The routing that follows the fabric's scale-out switches
(:func:`topomodel.routing.policy.fabric_routing`)."""

ROUTING_CHOICES = (AUTO_ROUTING, *ROUTINGS)
"""What ``--routing`` accepts: ``auto`` (the default) or a policy by name."""

ROUTERS = ("auto", "general", "structured")
"""Router implementations: the structured one where it applies (``auto``), or either."""

SCORECARD_PARTS = ("step", "scaling", "collectives", "levels", "strategies", "imbalance",
                   "failures")
"""The scorecard's parts, in order (:mod:`topomodel.report.review.scorecard`; its
``--only`` flag's choices)."""
