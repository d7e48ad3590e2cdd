"""The kinds of measurement ``calibrate`` reads, one entry each: how a file of that kind
is recognised, how it is read and which fit uses it. A new kind is one more
:class:`InputKind` in :data:`INPUT_KINDS`.

Records of the ``nccl-tests`` and ``trace`` fits are measured curves, fitted together
into link efficiencies and a launch latency (:mod:`.calibration`); the ``system`` fit's
are NCCL topology dumps, each made a catalog system (:mod:`.nccltopo`) in the same
overlay.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from topomodel.errors import InputError, Problem
from topomodel.inputs.measured.kineto import read_traces
from topomodel.inputs.measured.nccljson import read_nccl_json
from topomodel.inputs.measured.nccltests import read_nccl_tests
from topomodel.inputs.measured.ncclxml import read_topology

_HEAD_BYTES = 4096
_FOLDER = "<folder>"  # the head a folder is given: its files are one job's traces


@dataclass(frozen=True)
class InputKind:
    """One kind of measurement file: its name, a test on the file's first bytes, its
    reader, and the name of the fit its records feed (records of one fit are fitted
    together)."""

    name: str
    matches: Callable[[str, str], bool]  # (path, first characters) -> is of this kind
    read: Callable[[str], Any]
    fit: str


def _json_head(path: str, head: str) -> bool:
    return head.lstrip().startswith("{") and ('"results"' in head or path.endswith(".json"))


_TRACE_KEYS = ('"traceEvents"', '"schemaVersion"', '"distributedInfo"',
               '"deviceProperties"')


def _trace_head(path: str, head: str) -> bool:
    """A folder (of one job's traces), a gzip'd file, or JSON with Kineto's top keys."""
    return (head == _FOLDER or path.endswith(".gz") or head.startswith("\x1f")
            or (head.lstrip().startswith("{") and any(k in head for k in _TRACE_KEYS)))


def _topology_head(path: str, head: str) -> bool:
    """NCCL's dump: XML whose first element is ``<system``."""
    text = head.lstrip()
    if text.startswith("<?xml"):
        text = text.split("?>", 1)[-1].lstrip()
    while text.startswith("<!--"):
        text = text.split("-->", 1)[-1].lstrip()
    return text.startswith("<system")


def _read_traces(path: str) -> Any:
    return read_traces([path])


INPUT_KINDS: tuple[InputKind, ...] = (
    InputKind("PyTorch profiler trace", _trace_head, _read_traces, "trace"),
    InputKind("NCCL topology dump", _topology_head, read_topology, "system"),
    InputKind("nccl-tests json", _json_head, read_nccl_json, "nccl-tests"),
    InputKind("nccl-tests text", lambda path, head: not head.lstrip().startswith(("{", "<")),
              read_nccl_tests, "nccl-tests"),
)
"""Every kind ``calibrate`` reads, tried in order: the first whose test matches reads
the file."""


def input_kind(path: str | Path) -> InputKind:
    """The kind of measurement ``path`` holds.

    Raises
    ------
    InputError
        When the file cannot be read or is of no kind listed.
    """
    file = str(path)
    try:
        if Path(path).is_dir():
            head = _FOLDER
        else:
            with open(path, encoding="utf-8", errors="replace") as stream:
                head = stream.read(_HEAD_BYTES)
    except OSError as exc:
        raise InputError([Problem(file, None, "", f"cannot read: {exc.strerror or exc}")]
                         ) from None
    for kind in INPUT_KINDS:
        if kind.matches(file, head):
            return kind
    names = ", ".join(k.name for k in INPUT_KINDS)
    raise InputError([Problem(file, None, "", f"not a measurement calibrate reads ({names})")])


def read_inputs(paths: Sequence[str | Path]) -> dict[str, list[Any]]:
    """Each file read by its kind's reader, grouped by the fit they feed, in the order
    given (a trace, or folder of them, is read as a tuple of rank traces)."""
    out: dict[str, list[Any]] = {}
    for path in paths:
        kind = input_kind(path)
        out.setdefault(kind.fit, []).append(kind.read(str(path)))
    return out
