"""Writing files atomically: a temporary file in the target's folder, moved into place.

A failed or interrupted write leaves nothing half-written. The file gets the mode an
ordinary ``open`` would give it (0666 less the umask), not ``mkstemp``'s 0600.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import IO


def atomic_write(path: str | Path, write: Callable[[IO[bytes]], object]) -> Path:
    """Create ``path`` (and its folders) through ``write(stream)``; return the path."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.")
    try:
        os.fchmod(handle, 0o666 & ~umask())
        with os.fdopen(handle, "wb") as stream:
            write(stream)
        os.replace(temporary, target)
    except BaseException:
        os.unlink(temporary)
        raise
    return target


def atomic_bytes(path: str | Path, data: bytes) -> Path:
    """Write ``data`` to ``path`` atomically."""
    return atomic_write(path, lambda stream: stream.write(data))


def umask() -> int:
    """The process umask (read by setting and restoring it)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask
