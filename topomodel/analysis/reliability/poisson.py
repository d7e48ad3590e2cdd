"""The Poisson tail the spare-pool model reads: the chance that the systems in repair
reach a count."""

from __future__ import annotations

import math


def poisson_tail(count: int, mean: float) -> float:
    """P(N >= ``count``) for N Poisson with ``mean``: scipy's ``pdtrc(count - 1, mean)``
    (``scipy.stats.poisson.sf``) to 1e-13 relative up to a hundred spares (1e-12 at
    thousands, 1e-10 at a mean of 100,000: each term's exponent rounds), without
    importing ``scipy.special`` (0.2-0.4 s, on the serial path of the goodput and the
    review). The side away from the mean is summed, outwards from
    ``count`` (each term the one before times k / mean or mean / k, both below 1), until
    the terms no longer count: the terms below ``count`` where it is at most the mean,
    else those from ``count`` on. The work is a few dozen terms plus about the standard
    deviation's worth near the mean, however large ``count`` is.

    >>> round(poisson_tail(3, 2.0), 12)  # 1 - e^-2 (1 + 2 + 2)
    0.323323583817
    >>> poisson_tail(0, 5.0), poisson_tail(1, 0.0), poisson_tail(10**12, 3.0)
    (1.0, 0.0, 0.0)
    """
    if count <= 0 or mean == math.inf:
        return 1.0
    if mean <= 0:
        return 0.0
    below = count <= mean  # sum k = count - 1, count - 2, ..., else count, count + 1, ...
    k = count - 1 if below else count
    terms = [math.exp(k * math.log(mean) - mean - math.lgamma(k + 1))]
    while terms[-1] > 1e-17 * terms[0] and (k > 0 if below else True):
        if below:
            terms.append(terms[-1] * k / mean)
            k -= 1
        else:
            k += 1
            terms.append(terms[-1] * mean / k)
    tail = math.fsum(terms)
    return 1.0 - tail if below else tail
