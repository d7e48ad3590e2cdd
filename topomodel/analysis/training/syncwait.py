"""The synchronisation wait of a step: every rank waits for the slowest, so the wait grows
with the number of ranks.

Two terms, each a share of the slowest stage's compute time:

- **Jitter**: each rank's compute time varies with coefficient of variation ``cv``
  (:data:`~topomodel.analysis.assumptions.JITTER_CV`, from measured per-GPU variation of
  identical GPUs); a synchronous step takes the longest of ``N`` ranks, whose expected
  excess over the mean is ``cv`` times the expected maximum of ``N`` standard normals
  (:func:`expected_max_normal`; about ``sqrt(2 ln N)`` for large ``N``).
- **Stragglers**: with a share ``p`` of slow accelerators, each ``s`` slower, a step
  waits ``s`` whenever one of its ``N`` ranks is slow: ``s (1 - (1 - p)^N)``.
"""

from __future__ import annotations

from dataclasses import dataclass
from statistics import NormalDist

from topomodel.analysis.assumptions import StepAssumptions


def expected_max_normal(n: int) -> float:
    """Expected maximum of ``n`` independent standard normal draws (Blom's approximation,
    ``Phi^-1((n - 0.375) / (n + 0.25))``: 5 % high at ``n = 2``, within 1 % from 8 to
    10^5; the ``sqrt(2 ln n)`` asymptote overstates it by 10-25 % at 10^3-10^5); 0 for
    one draw.

    Examples
    --------
    >>> expected_max_normal(1)
    0.0
    >>> round(expected_max_normal(2), 2)  # exact: 1/sqrt(pi) = 0.56
    0.59
    >>> round(expected_max_normal(1000), 2)  # exact: 3.24
    3.23
    """
    if n <= 1:
        return 0.0
    return NormalDist().inv_cdf((n - 0.375) / (n + 0.25))


@dataclass(frozen=True)
class SyncWait:
    """The wait of a step as shares of its compute time, with what it assumed."""

    ranks: int
    jitter_cv: float
    jitter_share: float  # cv x expected maximum of ``ranks`` standard normals
    straggler_share: float  # share of accelerators that run slow
    straggler_slowdown: float
    straggler_wait_share: float  # slowdown x P(any of ``ranks`` is slow)

    @property
    def share(self) -> float:
        """The whole wait as a share of compute."""
        return self.jitter_share + self.straggler_wait_share

    @property
    def text(self) -> str:
        """One line: what the wait assumed and what it came to.

        Examples
        --------
        >>> sync_wait(StepAssumptions(jitter_cv=0.02), 1000).text
        'jitter CV 2.0 % over 1,000 ranks: the slowest 6.5 % of compute; no stragglers'
        """
        jitter = (f"jitter CV {self.jitter_cv:.1%} over {self.ranks:,} ranks: the slowest"
                  f" {self.jitter_share:.1%} of compute").replace("%", " %")
        if self.straggler_share and self.straggler_slowdown:
            return jitter + (f"; stragglers {self.straggler_share:.2%} of accelerators"
                             f" {self.straggler_slowdown:.0%} slower:"
                             f" {self.straggler_wait_share:.1%} of compute"
                             ).replace("%", " %")
        return jitter + "; no stragglers"


def sync_wait(assumptions: StepAssumptions, ranks: int) -> SyncWait:
    """The synchronisation wait of a step over ``ranks`` accelerators (module docstring)."""
    a = assumptions
    jitter = a.jitter_cv * expected_max_normal(ranks)
    stragglers = a.straggler_slowdown * (1 - (1 - a.straggler_share) ** ranks)
    return SyncWait(ranks, a.jitter_cv, jitter, a.straggler_share, a.straggler_slowdown,
                    stragglers)
