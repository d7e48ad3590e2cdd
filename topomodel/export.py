"""Exports of a built fabric for other tools: GraphML, node-link JSON, CSV tables.

Node and link attributes are the ones documented in :mod:`topomodel.fabric` (units in
their names: ``capacity_Bps`` is bytes/s per direction, ``latency_s`` seconds,
``length_m`` metres). Files are written to a temporary name first and moved into
place, so a failed export leaves nothing half-written.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import IO

from topomodel.fabric import Fabric

EXPORT_FORMATS = ("graphml", "json", "csv")


def _atomic(path: Path, write: Callable[[IO[bytes]], object]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(handle, "wb") as stream:
            write(stream)
        os.replace(temporary, path)
    except BaseException:
        os.unlink(temporary)
        raise


def _writer(data: bytes) -> Callable[[IO[bytes]], object]:
    return lambda stream: stream.write(data)


def export_fabric(fabric: Fabric, fmt: str, path: str | Path) -> list[Path]:
    """Write ``fabric`` as ``fmt`` to ``path``; return the files written.

    ``graphml`` and ``json`` (networkx node-link data) write one file, one arc per
    link direction; ``csv`` writes ``nodes.csv`` and ``links.csv`` into the directory
    ``path``.
    """
    target = Path(path)
    if fmt == "csv":
        written = []
        for name, table in (("nodes.csv", fabric.nodes), ("links.csv", fabric.links)):
            out = target / name
            _atomic(out, _writer(table.to_csv(index_label="id").encode()))
            written.append(out)
        return written
    import networkx as nx

    graph = fabric.graph
    if fmt == "graphml":
        _atomic(target, lambda s: nx.write_graphml(graph, s))
    elif fmt == "json":
        data = nx.node_link_data(graph, edges="links")
        _atomic(target, lambda s: s.write(json.dumps(data, default=str).encode()))
    else:
        raise ValueError(f"unknown export format {fmt!r}; choose from {EXPORT_FORMATS}")
    return [target]
