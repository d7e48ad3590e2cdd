"""Writing files: atomically (a temporary file in the target's folder, moved into
place), and values as plain JSON types (:func:`plain_json`).

A failed or interrupted write leaves nothing half-written. The file gets the mode an
ordinary ``open`` would give it (0666 less the umask), not ``mkstemp``'s 0600.
"""

from __future__ import annotations

import math
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any


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


def plain_json(value: Any) -> Any:
    """``value`` in plain JSON types: tuples to lists, numpy scalars to Python, NaN and
    infinities to None (JSON has none), keys to text.

    Examples
    --------
    >>> plain_json({"a": (1, float("nan")), 2: [0.5]})
    {'a': [1, None], '2': [0.5]}
    """
    if isinstance(value, dict):
        return {str(k): plain_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain_json(v) for v in value]
    if hasattr(value, "item") and not isinstance(value, str | bytes):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value
