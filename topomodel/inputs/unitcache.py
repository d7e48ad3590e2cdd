"""What pint said about each unit, kept on disk between processes.

Reading a unit with pint costs its import and registry (0.15-0.2 s of a command's
start-up) though a catalog and a design use only ~25 units. The command line keeps
pint's answers (a unit's factor to its kind's canonical unit, a kind's bounds, a unit's
name) in one small JSON file per key: the key is a hash of everything the answers
depend on (the unit definitions, the kinds, the installed pint), so a changed
definition or pint reads afresh. The values are pint's own floats, written with
``repr`` precision (JSON round-trips a float exactly), so a figure read through the
store is the same to the bit as one read by pint.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

CACHE_ENV = "TOPOMODEL_CACHE_DIR"
"""The environment variable naming the folder of the store; unset, it is
``$XDG_CACHE_HOME/topomodel`` or ``~/.cache/topomodel`` (the XDG base directory
specification's place for a user's non-essential cached data)."""

_path: Path | None = None
_answers: dict[str, Any] = {}


def cache_folder() -> Path:
    """The folder of the store (:data:`CACHE_ENV`, else the XDG cache folder)."""
    named = os.environ.get(CACHE_ENV)
    if named:
        return Path(named)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "topomodel"


def enable(key: str, folder: Path | None = None) -> None:
    """Keep answers in ``folder`` (default :func:`cache_folder`) under ``key``; load the
    answers kept there before (an unreadable or malformed file is ignored)."""
    global _path, _answers
    _path = (folder or cache_folder()) / f"units-{key}.json"
    try:
        loaded = json.loads(_path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        loaded = {}
    _answers = loaded if isinstance(loaded, dict) else {}


def disable() -> None:
    """Stop keeping answers (the process asks pint again)."""
    global _path, _answers
    _path, _answers = None, {}


def enabled() -> bool:
    """Whether answers are kept."""
    return _path is not None


def get(name: str) -> tuple[bool, Any]:
    """(True, the answer kept under ``name``) or (False, None)."""
    if _path is None or name not in _answers:
        return False, None
    return True, _answers[name]


def put(name: str, answer: Any) -> None:
    """Keep ``answer`` (JSON: a float, a list of floats, a string or None) under ``name``;
    the file is replaced whole, so a reader never sees half of it. A folder that cannot
    be written leaves the answer in this process only."""
    if _path is None:
        return
    _answers[name] = answer
    try:
        _path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile("w", dir=_path.parent, delete=False,
                                         suffix=".tmp", encoding="utf-8") as out:
            json.dump(_answers, out)
        os.replace(out.name, _path)
    except OSError:
        if "out" in locals():
            Path(out.name).unlink(missing_ok=True)
