"""Scale-out kinds: one module per kind, each implementing
:class:`~topomodel.fabric.scaleout.kind.ScaleoutKind`, found by the design's kind names.

:data:`REGISTRY` maps every name of :data:`topomodel.inputs.design.SCALEOUT_KINDS` to the
``KIND`` of the module of that name in this package (``fat_tree``, ``rail_only``,
``none``), so a new kind is its module plus its name (and keys) in the design record:
see the walk-through in ``docs/architecture.md``.

Examples
--------
>>> sorted(REGISTRY)
['fat_tree', 'none', 'rail_only']
>>> REGISTRY["rail_only"].link_tiers
('host', 'leaf', 'spine', 'core')
"""

from __future__ import annotations

from topomodel.fabric.kinds import load_kinds
from topomodel.fabric.scaleout.kind import LevelGroup, ScaleoutKind
from topomodel.fabric.structure import Structure
from topomodel.inputs.design import SCALEOUT_KINDS

__all__ = ["REGISTRY", "LevelGroup", "ScaleoutKind", "scaleout_kind"]


REGISTRY: dict[str, ScaleoutKind] = load_kinds(__name__, SCALEOUT_KINDS, ScaleoutKind)
"""Every scale-out kind by the design's name for it."""


def scaleout_kind(of: Structure | str) -> ScaleoutKind:
    """The kind of a built fabric's scale-out (its :class:`Structure`), or of a name.

    Raises
    ------
    KeyError
        For a name no design accepts (a design is checked against
        :data:`~topomodel.inputs.design.SCALEOUT_KINDS` when it is read).
    """
    return REGISTRY[of if isinstance(of, str) else of.scaleout.kind]
