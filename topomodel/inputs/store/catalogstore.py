"""Parsed catalogs kept on disk, keyed by everything the parse depends on.

Parsing the built-in catalog (162 entries, every figure through the unit reader and
every cross-reference checked) is 0.03-0.05 CPU s of each command's start-up; reading
it back from a pickle is under 0.001 s. The command line turns the store on
(:func:`enable`); a library caller parses every time.

The key (:func:`key_of`) is a SHA-256 of

- each catalog file's path and bytes (an entry records its file, so the path counts);
- the package's parsing code: every file of ``topomodel/inputs`` (the records, parts,
  units and their definitions, the YAML reader) and the modules directly in
  ``topomodel/`` that it imports (errors, files, limits, vocabulary). A released version
  differs from the last in its code, and a checkout's code changes between versions
  too, so this stands for the package version as far as the parse can tell;
- the unit store's key (:func:`topomodel.inputs.units.keep_unit_answers`: the unit
  definitions, the kinds and the installed pint);
- the Python version and the pickle protocol.

A change to any of them reads another file, so a stale catalog is never returned. A file
that is missing, truncated, corrupt or not a catalog is parsed afresh; a folder that
cannot be written leaves the parse in this process only. Either way nothing is said:
the store only ever saves time. Files are written whole (:func:`topomodel.files.atomic_bytes`),
and only the newest :data:`KEPT_CATALOGS` are kept.
"""

from __future__ import annotations

import contextlib
import hashlib
import pickle
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from topomodel.errors import TopomodelError
from topomodel.files import atomic_bytes

_folder: Path | None = None
_base = b""

_PACKAGE = Path(__file__).resolve().parents[2]


def parsing_code() -> list[Path]:
    """The files the key covers as the parsing code: everything under
    ``topomodel/inputs`` and the modules directly in ``topomodel/``, sorted."""
    inputs = (p for p in (_PACKAGE / "inputs").rglob("*")
              if p.suffix in (".py", ".txt", ".yaml") and p.is_file())
    return sorted([*_PACKAGE.glob("*.py"), *inputs])


def enable(folder: Path, salt: str) -> None:
    """Keep parsed catalogs in ``folder``; ``salt`` is the unit store's key (what the
    figures' units depend on)."""
    global _folder, _base
    digest = hashlib.sha256()
    for path in parsing_code():
        digest.update(path.relative_to(_PACKAGE).as_posix().encode() + b"\0")
        digest.update(path.read_bytes())
    digest.update(f"\0{salt}\0{sys.version}\0{pickle.HIGHEST_PROTOCOL}".encode())
    _folder, _base = folder, digest.digest()


def disable() -> None:
    """Stop keeping catalogs (every load parses)."""
    global _folder, _base
    _folder, _base = None, b""


def enabled() -> bool:
    """Whether parsed catalogs are kept."""
    return _folder is not None


def key_of(files: Sequence[Path]) -> str | None:
    """The store's key for a catalog read from ``files`` in this order, or ``None`` when
    the store is off or a file cannot be read (the parse then reports it)."""
    if _folder is None:
        return None
    digest = hashlib.sha256(_base)
    try:
        for path in files:
            data = Path(path).read_bytes()
            digest.update(f"\0{path}\0{len(data)}\0".encode())
            digest.update(data)
    except OSError:
        return None
    return digest.hexdigest()[:32]


def _path(key: str) -> Path | None:
    return None if _folder is None else _folder / f"catalog-{key}.pickle"


def load(key: str | None) -> Any:
    """The object kept under ``key``, or ``None`` (no store, no file, or a file that
    does not unpickle: any error at all means "parse it")."""
    path = None if key is None else _path(key)
    if path is None:
        return None
    try:
        with open(path, "rb") as stream:
            return pickle.load(stream)
    except Exception:  # any error: a corrupt store is parsed afresh, silently
        return None


KEPT_CATALOGS = 16
"""How many parsed catalogs the store keeps, the most recently written: each edit of a
user's catalog file makes a new key (about 0.2 MB each with the built-in catalog), so
older ones are removed; 16 covers a few designs with catalogs of their own, and a
removed one is only parsed again."""


def save(key: str | None, catalog: Any) -> None:
    """Keep ``catalog`` under ``key`` (nothing when the store is off or the folder cannot
    be written), and remove all but the :data:`KEPT_CATALOGS` newest."""
    path = None if key is None else _path(key)
    if path is None:
        return
    with contextlib.suppress(OSError, TopomodelError):
        atomic_bytes(path, pickle.dumps(catalog, protocol=pickle.HIGHEST_PROTOCOL))
        kept = sorted(path.parent.glob("catalog-*.pickle"), key=lambda p: p.stat().st_mtime_ns)
        for old in kept[:-KEPT_CATALOGS]:
            old.unlink(missing_ok=True)
