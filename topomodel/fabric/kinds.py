"""Loading a package of kinds: one module per kind name, each exposing ``KIND``
(:mod:`topomodel.fabric.scaleout`, :mod:`topomodel.fabric.scaleup`)."""

from __future__ import annotations

from collections.abc import Iterable
from importlib import import_module
from typing import Any


def load_kinds(package: str, names: Iterable[str], cls: type) -> dict[str, Any]:
    """The ``KIND`` of module ``package.NAME`` for every name, checked to be a ``cls``
    whose ``name`` is that name.

    Raises
    ------
    TypeError
        For a module whose ``KIND`` is not the ``cls`` of its name.
    """
    out: dict[str, Any] = {}
    for name in names:
        kind = import_module(f"{package}.{name}").KIND
        if not isinstance(kind, cls) or getattr(kind, "name", None) != name:
            raise TypeError(f"{package}.{name}.KIND is not the {cls.__name__} {name!r}")
        out[name] = kind
    return out
