"""Scale-up kinds: one module per kind, each implementing
:class:`~topomodel.fabric.scaleup.kind.ScaleupKind`, found by the kind names of designs
and systems.

:data:`REGISTRY` maps every name of :data:`topomodel.inputs.design.SCALEUP_KINDS` and
:data:`topomodel.inputs.parts.SYSTEM_SCALEUP_KINDS` to the ``KIND`` of the module of that
name in this package (``switched``, ``full_mesh``, ``torus``, ``supernode``, ``none``,
``pcie``), so a new kind is its module plus its name (and keys) in the design record:
see the walk-through in ``docs/architecture.md``.

Examples
--------
>>> sorted(REGISTRY)
['full_mesh', 'none', 'pcie', 'supernode', 'switched', 'torus']
>>> REGISTRY["pcie"].nccl_intra, REGISTRY["torus"].structured_routing
('pci', False)
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from topomodel.fabric.kinds import load_kinds
from topomodel.fabric.scaleup.kind import ScaleupKind, ScaleupLevel
from topomodel.fabric.structure import ScaleupStructure, Structure
from topomodel.inputs.design import SCALEUP_KINDS
from topomodel.inputs.parts import SYSTEM_SCALEUP_KINDS

if TYPE_CHECKING:
    import numpy as np

    from topomodel.fabric.tables import FabricBuilder
    from topomodel.inputs.catalog import Catalog
    from topomodel.inputs.design import Design
    from topomodel.inputs.parts import System

__all__ = ["REGISTRY", "ScaleupKind", "ScaleupLevel", "build_scaleup", "scaleup_kind"]

_NAMES = tuple(dict.fromkeys(SCALEUP_KINDS + SYSTEM_SCALEUP_KINDS))


REGISTRY: dict[str, ScaleupKind] = load_kinds(__name__, _NAMES, ScaleupKind)
"""Every scale-up kind by the design's (or the system's) name for it."""


def scaleup_kind(of: Structure | ScaleupStructure | str) -> ScaleupKind:
    """The kind of a built fabric's scale-up (its :class:`Structure` or
    :class:`ScaleupStructure`), or of a name.

    Raises
    ------
    KeyError
        For a name no design or system accepts (both are checked when read).
    """
    if isinstance(of, Structure):
        of = of.scaleup
    return REGISTRY[of if isinstance(of, str) else of.kind]


def build_scaleup(builder: FabricBuilder, design: Design, catalog: Catalog, system: System,
                  acc: np.ndarray) -> tuple[np.ndarray, ScaleupStructure]:
    """Wire the scale-up domains of the design's kind (else its system's); return each
    accelerator's domain number and what was built (see :meth:`ScaleupKind.build`)."""
    kind = scaleup_kind(design.scaleup.kind or system.scaleup.kind)
    return kind.build(builder, design, catalog, system, acc)
