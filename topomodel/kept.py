"""Values kept by what they were made from, for the searches that ask the same again.

A planner asks for the same stage parameters, bound frames, layer times and chunk works
of thousands of layouts. Each is kept under a key that names the objects it read by
their ``id`` (models, assumptions, time models: not hashable, or costly to hash) beside
the plain values it read. :class:`Kept` holds those objects with the value, so an id in
a key stays theirs while the value is kept, and a key whose id an object freed and a new
one took again is made afresh. When full it drops everything: the searches that fill it
move on from what they asked before.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any, Generic, TypeVar

T = TypeVar("T")


class Kept(Generic[T]):
    """At most ``limit`` values, each under its key with the objects it was made from.

    Examples
    --------
    >>> kept: Kept[int] = Kept(limit=2)
    >>> owner = object()
    >>> kept.get((id(owner), 3), (owner,), lambda: 3 * 3)
    9
    >>> kept.get((id(owner), 3), (owner,), lambda: 0)  # kept: not made again
    9
    >>> kept.clear()
    >>> kept.get((id(owner), 3), (owner,), lambda: 0)
    0
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._held: dict[Hashable, tuple[tuple[Any, ...], T]] = {}

    def get(self, key: Hashable, owners: tuple[Any, ...], make: Callable[[], T]) -> T:
        """The value under ``key``, made by ``make`` where none is kept or where one of
        the objects it was made from is not ``owners``' (an id taken again)."""
        held = self._held.get(key)
        if held is None or any(a is not b for a, b in zip(held[0], owners, strict=True)):
            if len(self._held) >= self.limit:
                self._held.clear()
            held = self._held[key] = (owners, make())
        return held[1]

    def clear(self) -> None:
        """Drop every value kept."""
        self._held.clear()
