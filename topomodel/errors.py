"""Errors: one root, each concrete error also a builtin, messages built in ``__str__``.

Input problems carry where they were found (file, line, key path) so the CLI can print
``FILE:LINE: key.path: what is wrong`` for each, all at once.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass


class TopomodelError(Exception):
    """Root of every error topomodel raises on purpose."""


@dataclass(frozen=True)
class Problem:
    """One thing wrong with an input, and where.

    Examples
    --------
    >>> str(Problem("d.yaml", 3, "scaleout.switch", "unknown id 'qm97'"))
    "d.yaml:3: scaleout.switch: unknown id 'qm97'"
    """

    file: str
    line: int | None
    key_path: str
    message: str

    def __str__(self) -> str:
        where = self.file if self.line is None else f"{self.file}:{self.line}"
        return f"{where}: {self.key_path}: {self.message}" if self.key_path else (
            f"{where}: {self.message}"
        )


class InputError(TopomodelError, ValueError):
    """One or more problems found in an input file.

    Raises
    ------
    TypeError
        When made without a problem: an input error that says nothing is a bug.

    Examples
    --------
    >>> InputError([])
    Traceback (most recent call last):
    ...
    TypeError: InputError needs at least one Problem
    """

    def __init__(self, problems: Iterable[Problem]) -> None:
        self.problems = tuple(problems)
        if not self.problems:
            raise TypeError(f"{type(self).__name__} needs at least one Problem")
        super().__init__(str(self))

    def __str__(self) -> str:
        return "\n".join(str(p) for p in self.problems)

    def __reduce__(self) -> tuple[type[InputError], tuple[tuple[Problem, ...]]]:
        # rebuilt from its problems (the default would pass the message as problems),
        # so the error a worker process raises reaches the CLI as it was
        return type(self), (self.problems,)


class CatalogError(InputError):
    """A hardware catalog file is malformed or inconsistent."""


class DesignError(InputError):
    """A design file is malformed, or asks for a fabric that cannot be built."""


class UnitError(TopomodelError, ValueError):
    """A quantity string that cannot be read as the quantity expected."""

    def __init__(self, text: object, reason: str) -> None:
        self.text = text  # as given: a string, or the bare value that should have been one
        self.reason = reason
        super().__init__(str(self))

    def __str__(self) -> str:
        shown = repr(self.text) if isinstance(self.text, str) else str(self.text)
        return f"{shown}: {self.reason}"

    def __reduce__(self) -> tuple[type[UnitError], tuple[object, str]]:
        return type(self), (self.text, self.reason)  # picklable, as InputError


class UsageError(TopomodelError, ValueError):
    """A command-line request that cannot be met (unknown id, bad option value)."""


class ParameterError(UsageError):
    """A function's argument it cannot take: names the parameter (``threshold: a share
    in (0, 1), got 1.5``); the CLI shows the flag that sets it instead
    (:func:`topomodel.cli.shared.flag_of`), so the library says no flag."""

    def __init__(self, parameter: str, message: str) -> None:
        self.parameter, self.message = parameter, message
        super().__init__(f"{parameter}: {message}")


class RoutingError(TopomodelError, ValueError):
    """Traffic a router cannot route as asked: an unknown routing policy or router, a
    fabric the structured router does not cover, or more work than the general router's
    limit."""


class RouterLimit(RoutingError):
    """Traffic beyond the general router's work limit: the fastest-algorithm search skips
    that candidate (another algorithm's phases may fit)."""


class FlowLimit(RoutingError):
    """Flows a router would have to list beyond ``topomodel.limits.MAX_FLOWS`` (a direct
    All-to-All whose pairs cannot be counted): refused before they are listed. The
    planner skips and counts a layout refused so (:mod:`topomodel.plan.tally`); anything
    else reports it."""


class CollectiveError(TopomodelError, ValueError):
    """A collective that cannot be generated as asked (bad group, algorithm or size)."""


class NotApplicable(CollectiveError):
    """An algorithm that does not apply to these groups or this fabric (a group size it
    cannot split, switches that do not reduce, no torus): the one error the fastest-
    algorithm search skips a candidate for."""


LONG_WORD_CHARS = 200
"""The longest run of characters without a space an error line prints whole (a path
is shorter); a longer one, an over-long value echoed, is cut by :func:`short`."""


def short(text: str, limit: int = 60) -> str:
    """``text``, or its first ``limit`` - 3 characters and ``...`` when it is longer
    than ``limit``: a value echoed in an error stays readable.

    Examples
    --------
    >>> short("x" * 100, 10), short("abc", 10)
    ('xxxxxxx...', 'abc')
    """
    return text if len(text) <= limit else text[:limit - 3] + "..."


def short_words(message: str, limit: int = LONG_WORD_CHARS) -> str:
    """``message`` with every run of more than ``limit`` characters without a space
    cut by :func:`short`: an error line that echoes a 3,000-digit ``--tp`` stays a line.

    Examples
    --------
    >>> short_words("--tp: not a count: " + "9" * 300, 12)
    '--tp: not a count: 999999999...'
    """
    return re.sub(rf"\S{{{limit + 1},}}", lambda word: short(word.group(), limit), message)

