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
from operator import is_
from typing import Any, Generic, TypeVar

T = TypeVar("T")


class Kept(Generic[T]):
    """At most ``limit`` values, each under its key with the objects it was made from;
    with ``size``, values whose sizes (``size(value)``) add up to at most ``limit``.

    Examples
    --------
    >>> kept: Kept[int] = Kept(limit=2)
    >>> owner = object()
    >>> kept.get((id(owner), 3), (owner,), lambda: 3 * 3)
    9
    >>> kept.get((id(owner), 3), (owner,), lambda: 0)  # kept: not made again
    9
    >>> kept.get((id(owner), 3), (object(),), lambda: 4)  # another owner: made again
    4
    >>> kept.get((id(owner), 3), (owner, owner), lambda: 5)  # other owners: made again
    5
    >>> kept.clear()
    >>> kept.get((id(owner), 3), (owner,), lambda: 0)
    0
    >>> sized: Kept[list[int]] = Kept(limit=3, size=len)
    >>> sized.get("a", (), lambda: [1, 2]), sized.get("b", (), lambda: [3, 4])  # 4 > 3
    ([1, 2], [3, 4])
    >>> sized.get("a", (), lambda: [0])  # dropped when "b" came: made again
    [0]
    """

    def __init__(self, limit: int, size: Callable[[T], int] | None = None) -> None:
        self.limit = limit
        self._size = size
        self._held: dict[Hashable, tuple[tuple[Any, ...], T, int]] = {}
        self._filled = 0  # entries, or the sum of their sizes

    def get(self, key: Hashable, owners: tuple[Any, ...], make: Callable[[], T]) -> T:
        """The value under ``key``, made by ``make`` where none is kept or where one of
        the objects it was made from is not ``owners``' (an id taken again)."""
        held = self._held.get(key)
        # a hit's owners compared one by one in C (``map``), not in a generator: the
        # planner asks a million times
        if held is not None and (held[0] is owners or (
                len(held[0]) == len(owners) and all(map(is_, held[0], owners)))):
            return held[1]
        if held is not None:  # an id taken again: its value goes
            self._filled -= held[2]
            del self._held[key]
        made = make()
        size = 1 if self._size is None else self._size(made)
        if self._filled + size > self.limit:
            self.clear()
        self._held[key] = (owners, made, size)
        self._filled += size
        return made

    def clear(self) -> None:
        """Drop every value kept."""
        self._held.clear()
        self._filled = 0
