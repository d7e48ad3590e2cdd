"""A time a collective of the step cannot beat on a fabric, seconds, without building or
routing its traffic: the bytes that must reach, and leave, each accelerator and each
scale-up domain, over the effective rate of the links into (out of) it.

Whatever algorithm runs it (ring, tree, hierarchical, in-network reduction, PXN
relays), a collective over groups of ``t`` ranks of ``S`` bytes (nccl-tests sizes) must
deliver at least, to each rank and, from outside it, to each scale-up domain holding
``t_in`` of a group's ranks (fewer than ``t``):

| collective | to a rank | into a domain, per group |
|---|---|---|
| all-gather | (t - 1) / t S | (t - t_in) / t S (every other rank's share, once) |
| reduce-scatter | S / t | t_in S / t (one reduced copy of each share held inside) |
| all-reduce | S | S (one reduced copy of every element) |
| all-to-all | (t - 1) / t S | t_in (t - t_in) / t S (distinct data, nothing merges) |
| send/receive | S | S (each pair that crosses) |

and must send at least, out of each rank and each such domain, what its *dual* must
deliver into it (all-gather and reduce-scatter are each other's dual; all-reduce,
all-to-all and send/receive their own, a pair's sender in the receiver's place):

- all-gather: a rank's own share reaches the others, S / t out of it; the ``t_in``
  shares held in a domain reach the ranks outside, t_in S / t;
- reduce-scatter: every other rank's reduced share depends on each element of this
  rank's contribution to it (for fixed other inputs the sum is a one-to-one function
  of it), so at least that share's S / t bytes leave the rank for each of the t - 1
  others, (t - 1) / t S, whatever is summed on the way (in a switch or a relay); out
  of a domain, the same for each of the t - t_in shares held outside, (t - t_in) / t S;
- all-reduce: every element's result outside depends on the rank's (the domain's)
  contribution: S;
- all-to-all: the rank's data for every other rank, (t - 1) / t S; out of a domain,
  what its t_in ranks send to the t - t_in outside, t_in (t - t_in) / t S;
- send/receive: S out of each sender and out of the sender's domain, per crossing pair.

Every group of a kind runs at once, so a domain's bytes add up over its groups. The
time model takes, per phase, the slowest link's bytes over its effective rate (and
more, with latency and a protocol's wire bytes), so a collective takes at least the
bytes into (out of) a rank or a domain over the sum of the effective rates of the links
into (out of) it: a phase's bytes over a sum of rates is a weighted mean of its links'
times, at most the slowest. Measured on the step's own collectives at 128 GPUs of the
SuperPOD, the bound into ranks and domains alone sat at 6-28 % of a reduce-scatter's
routed time (median 12 % for the gradients' over DP), since a rank receives only its
own reduced share; out of them it is the rank's whole contribution. On a fabric with
failed links a flow may find no route and move no bytes: there the bound is 0 (see
:func:`collective_lower_bound_s`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from topomodel.analysis.assumptions import TimeModel
from topomodel.analysis.collectives.linkrates import effective_link_Bps
from topomodel.analysis.training.stepshape import node_domains, ranks_of
from topomodel.arrays import rows_sorted
from topomodel.fabric.tables import Fabric

DUAL = {"allgather": "reducescatter", "reducescatter": "allgather", "allreduce": "allreduce",
        "alltoall": "alltoall", "sendrecv": "sendrecv"}
"""Each collective's dual: what must leave a rank or a domain in the collective is what
must enter it in its dual (see the module), a send/receive pair's sender in the
receiver's place."""


@dataclass(frozen=True, eq=False)
class IngressRates:
    """Per node, the effective rate of the links into it, and per scale-up domain that
    of the links into it from outside, bytes per second (``*_out_Bps``: of the links out
    of it, to outside); ``intact``: no failed link; ``symmetric``: every rate out equals
    the rate in (then what must leave a rank or domain in a collective is timed as what
    must enter it in its dual, the same arrays read)."""

    node_Bps: np.ndarray
    domain_Bps: np.ndarray
    intact: bool
    node_out_Bps: np.ndarray
    domain_out_Bps: np.ndarray
    symmetric: bool = False


def ingress_rates_of(fabric: Fabric, time_model: TimeModel) -> IngressRates:
    """:func:`ingress_rates` under ``time_model``'s tier efficiencies, kept per fabric
    (its ``intact`` says whether a floor may read them: no failed link)."""
    return fabric.derived(ingress_rates, tuple(sorted(time_model.efficiency.items())))


def ingress_rates(fabric: Fabric, efficiency_items: tuple[tuple[str, float], ...]
                  ) -> IngressRates:
    """:class:`IngressRates` under the tier efficiencies ``efficiency_items`` (what a
    :class:`~topomodel.analysis.assumptions.TimeModel` gives), for
    :meth:`~topomodel.fabric.tables.Fabric.derived`."""
    links = fabric.links
    failed = links["failed"].to_numpy()
    rate = np.where(failed, 0.0, effective_link_Bps(
        fabric, TimeModel(efficiency=dict(efficiency_items))))
    src, dst = links["src"].to_numpy(), links["dst"].to_numpy()
    domains = _switch_domains(fabric, src, dst)
    nodes = len(fabric.node_arrays)
    count = int(domains.max()) + 1 if len(domains) else 0
    across = domains[src] != domains[dst]

    def rates(to: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        crossing = (domains[to] >= 0) & across
        return (np.bincount(to, weights=rate, minlength=nodes),
                np.bincount(domains[to[crossing]], weights=rate[crossing], minlength=count))

    node, domain = rates(dst)
    node_out, domain_out = rates(src)
    symmetric = bool(np.array_equal(node, node_out) and np.array_equal(domain, domain_out))
    return IngressRates(node, domain, not bool(failed.any()), node_out, domain_out, symmetric)


def _switch_domains(fabric: Fabric, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    """Every node's domain, with each switch (domain -1 in the node table) that links to
    one domain only taken into it, again and again until none is left that does: a
    scale-up switch over one domain's accelerators, then the levels of a scale-up Clos
    above it (a supernode's L2 and L3 chips), then scale-out switches that serve one
    domain alone. The links between such switches and the domain are then inside it,
    not into it: the domain's way in is the links into the whole set, a cut that
    every byte from another domain's accelerators crosses, whatever set it is (so a
    bound with any such set is a bound). A switch that links to several domains, or
    to none, stays outside, and its links count as ways in.

    Without the higher levels a supernode's way in counted its own Clos's uplinks
    (441 GB/s an NPU on the 4K supernodes, not the 50 GB/s of its RDMA planes), so a
    collective whose groups leave the supernode was bounded ~9x below its bandwidth
    term (benchmarks/README, card98b)."""
    domains = fabric.derived(node_domains).copy()
    open_ = domains < 0
    ends = np.concatenate([src, dst]), np.concatenate([dst, src])
    while True:
        a, b = ends
        near = open_[a] & (domains[b] >= 0)
        lo = np.full(len(domains), np.iinfo(np.int64).max)
        hi = np.full(len(domains), -1)
        np.minimum.at(lo, a[near], domains[b[near]])
        np.maximum.at(hi, a[near], domains[b[near]])
        one = open_ & (hi >= 0) & (lo == hi)
        if not one.any():
            return domains
        domains[one] = hi[one]
        open_ &= ~one
        # links whose both ends are settled are read no more
        keep = open_[a] | open_[b]
        ends = a[keep], b[keep]


def collective_lower_bound_s(fabric: Fabric, collective: str, groups: np.ndarray,
                             size_bytes: float, time_model: TimeModel, *,
                             runs: Callable[[], DomainRuns] | None = None,
                             delivered: dict[tuple[str, bool, float], float] | None = None
                             ) -> float:
    """Seconds the collective over every row of ``groups`` at once cannot beat (``pairs``
    for ``sendrecv``: each row a sender and a receiver), under the time model's tier
    efficiencies: the bytes into each rank and domain over the rate into it, and those
    out of it (its :data:`DUAL`'s into it) over the rate out; 0 on a fabric with a
    failed link. ``runs``, where given, gives the groups' :func:`domain_runs`, and
    ``delivered`` keeps each way's seconds (by collective, whether out, size), for a
    caller that bounds several collectives over the same groups under one time model:
    on a fabric whose rates out equal those in, the all-gather's way out is the
    reduce-scatter's way in, found once for both."""
    rates = ingress_rates_of(fabric, time_model)
    if not rates.intact or size_bytes <= 0 or groups.size == 0:
        return 0.0
    domains = fabric.derived(node_domains)
    found: list[DomainRuns] = []  # the groups' runs, found once for both ways (a
    # send/receive's pairs read none: they are read pair by pair)
    # a send/receive's pairs are read each way: its seconds are kept for no caller
    memo = {} if delivered is None or collective == "sendrecv" else delivered

    def way(kind: str, out: bool) -> float:
        if out and rates.symmetric and collective != "sendrecv":
            out = False  # the same arrays as the way in: the same seconds
        key = (kind, out, size_bytes)
        if key not in memo:
            if not found:
                found.append(None if collective == "sendrecv" else (
                    runs() if runs is not None else domain_runs(fabric, groups)))
            memo[key] = _delivered_s(
                kind, groups[:, ::-1] if out and collective == "sendrecv" else groups,
                size_bytes, rates.node_out_Bps if out else rates.node_Bps,
                rates.domain_out_Bps if out else rates.domain_Bps, domains, found[0])
        return memo[key]

    return max(way(collective, False), way(DUAL[collective], True))


DomainRuns = tuple[np.ndarray, np.ndarray] | None
"""Per (group, domain) pair holding any of a group's ranks, group by group in the order
of the domains: the domain and how many of the group's ranks it holds; None where a
rank has no domain (then only the ranks' bound counts)."""


def domain_runs(fabric: Fabric, groups: np.ndarray) -> DomainRuns:
    """:data:`DomainRuns` of ``groups`` (a row per group of at least two ranks): each
    row's domains sorted (no sort of every pair), then cut where the domain changes or
    a row starts. What :func:`collective_lower_bound_s` reads of the groups' domains,
    the same for every collective over them."""
    domains = fabric.derived(node_domains)[groups]
    if (domains < 0).any():
        return None
    t = domains.shape[1]
    pair = _rows_sorted(domains).ravel()
    apart = pair[1:] != pair[:-1]
    apart[t - 1::t] = True  # a row's first rank starts its group's first domain
    starts = np.flatnonzero(np.r_[True, apart])
    return pair[starts], np.diff(np.r_[starts, len(pair)])


def _delivered_s(collective: str, groups: np.ndarray, size_bytes: float,
                 node_Bps: np.ndarray, domain_Bps: np.ndarray, node_domain: np.ndarray,
                 runs: DomainRuns) -> float:
    """Seconds to deliver what ``collective`` must deliver into each rank and each
    domain (the module's table) over ``node_Bps`` and ``domain_Bps`` (``runs``: the
    groups' :func:`_domain_runs`, unread for ``sendrecv``)."""
    t = groups.shape[1]
    per_rank = {"allgather": (t - 1) / t, "reducescatter": 1 / t, "allreduce": 1.0,
                "alltoall": (t - 1) / t, "sendrecv": 1.0}[collective] * size_bytes
    # over the ranks that receive only (the others get nothing: 0 s)
    if collective == "sendrecv":  # a rank may receive from several pairs at once
        receivers = groups[:, 1]
        got = np.bincount(receivers)[receivers] * per_rank
        rate = node_Bps[receivers]
        with np.errstate(divide="ignore", invalid="ignore"):
            rank_s = float(np.where((got > 0) & (rate > 0), got / rate, 0.0).max())
    else:  # the rows of a kind hold each rank once, each getting per_rank: the
        # slowest is the one with the least rate (a quotient only falls as it grows)
        rate = node_Bps[groups.ravel()]
        rate = rate[rate > 0]
        rank_s = per_rank / float(rate.min()) if per_rank > 0 and len(rate) else 0.0
    if not len(domain_Bps):
        return rank_s
    if collective == "sendrecv":
        domains = node_domain[groups]
        if (domains < 0).any():
            return rank_s
        crossing = domains[:, 0] != domains[:, 1]
        into = np.bincount(domains[crossing, 1], minlength=len(domain_Bps)) * size_bytes
    else:
        if runs is None:
            return rank_s
        # ranks of each group in each domain: (group, domain) pairs counted
        domain_of, inside = runs
        need = _domain_need(collective, inside, t) * (inside < t)
        into = np.bincount(domain_of, weights=need, minlength=len(domain_Bps)) * size_bytes
    with np.errstate(divide="ignore", invalid="ignore"):
        domain_s = np.where((into > 0) & (domain_Bps > 0), into / domain_Bps, 0.0)
    return max(rank_s, float(domain_s.max()))


def _domain_need(collective: str, inside: np.ndarray, t: int) -> np.ndarray:
    """Per (group, domain) pair holding ``inside`` of a group's ``t`` ranks, the share
    of the size the collective must deliver into the domain (the module's table), only
    the collective's own computed."""
    if collective == "allgather":
        return (t - inside) / t
    if collective == "reducescatter":
        return inside / t
    if collective == "allreduce":
        return np.ones(len(inside))
    return inside * (t - inside) / t  # all-to-all

def _rows_sorted(values: np.ndarray) -> np.ndarray:
    """Each row of ``values`` (2-d) in ascending order: a pair's by its least and most,
    a wider row's as :func:`~topomodel.arrays.rows_sorted` gives it (as sorting
    ``row * span + value`` over the whole array puts them, far cheaper)."""
    if values.shape[1] == 2:
        return np.stack([values.min(axis=1), values.max(axis=1)], axis=1)
    return rows_sorted(values)


@dataclass(frozen=True, eq=False)
class JobRates:
    """What :func:`unplaced_lower_bound_s` reads of the first ``world`` accelerators (a
    job's, whatever its rank order), one way (into them, or out of them): the least and
    the most effective rate of one of them, and per scale-up domain holding any, how
    many and the rate of the domain from (to) outside, bytes per second
    (``domain_ranks`` empty when one has no domain); ``intact``: no failed link."""

    least_Bps: float
    most_Bps: float
    domain_ranks: np.ndarray
    domain_Bps: np.ndarray
    intact: bool


def job_rates(fabric: Fabric, efficiency_items: tuple[tuple[str, float], ...], world: int,
              out: bool = False) -> JobRates:
    """:class:`JobRates` of the fabric's first ``world`` accelerators under the tier
    efficiencies ``efficiency_items``, into them (``out``: out of them), for
    :meth:`~topomodel.fabric.tables.Fabric.derived`."""
    rates = fabric.derived(ingress_rates, efficiency_items)
    node_Bps, domain_Bps = ((rates.node_out_Bps, rates.domain_out_Bps) if out
                            else (rates.node_Bps, rates.domain_Bps))
    ranks = ranks_of(fabric)[:world]
    node = node_Bps[ranks]
    positive = node[node > 0]
    domains = fabric.derived(node_domains)[ranks]
    if (domains < 0).any() or not len(domain_Bps):
        held, into = np.zeros(0), np.zeros(0)
    else:
        count = np.bincount(domains, minlength=len(domain_Bps))
        used = np.flatnonzero(count)
        held, into = count[used].astype(float), domain_Bps[used]
    return JobRates(float(positive.min()) if len(positive) else 0.0,
                    float(positive.max()) if len(positive) else 0.0, held, into,
                    rates.intact)


def unplaced_lower_bound_s(fabric: Fabric, collective: str, ranks_per_group: int,
                           world: int, size_bytes: float, time_model: TimeModel) -> float:
    """Seconds a collective over groups of ``ranks_per_group`` of the first ``world``
    accelerators (every one in a group, as a layout's communicators of one kind hold
    them) cannot beat in any rank order: never above :func:`collective_lower_bound_s`
    for any placement of the groups on those accelerators (``sendrecv``: pairs, some
    pair at least). 0 on a fabric with a failed link.

    Each rank receives the table's bytes whatever the order, so the slowest rank takes
    at least its bytes over the least rate into one (a pair's receiver, for
    ``sendrecv``, at least its bytes over the most). A domain holding ``r`` of the
    ranks, fewer than a group's ``t``, holds no whole group, so the groups in it
    number ``k >= 1`` with ``t_in`` each (``sum t_in = r``, each ``t_in <= r``); the
    module's table, summed over them, is at least: all-reduce ``k S >= S``; all-gather
    ``(k - r / t) S >= (1 - r / t) S``; reduce-scatter ``r S / t``; all-to-all
    ``sum t_in (t - t_in) / t S >= r (t - r) / t S``. A domain holding ``t`` or more
    may hold whole groups: nothing. Send/receive: nothing (a pair may stay inside).
    The same holds out of the ranks and domains for the collective's :data:`DUAL`
    over the rates out of them (a pair's sender in its receiver's place)."""
    items = tuple(sorted(time_model.efficiency.items()))
    t = ranks_per_group
    if size_bytes <= 0 or t < 2:
        return 0.0
    known = fabric.derived(unplaced_bounds)
    key = (collective, t, world, size_bytes, items)
    found = known.get(key)
    if found is None:
        into = fabric.derived(job_rates, items, world)
        found = 0.0
        if into.intact:
            out = fabric.derived(job_rates, items, world, True)
            found = max(_unplaced_s(collective, t, size_bytes, into),
                        _unplaced_s(DUAL[collective], t, size_bytes, out))
        known[key] = found
    return found


def unplaced_bounds(fabric: Fabric) -> dict[tuple[Any, ...], float]:
    """The bounds :func:`unplaced_lower_bound_s` found on ``fabric``, by everything
    they read besides it (the collective, the group's ranks, the job's accelerators,
    the size and the tier efficiencies), kept with the fabric
    (:meth:`~topomodel.fabric.tables.Fabric.derived`): a search asks the same few of
    every layout whose rank orders it bounds."""
    return {}


def _unplaced_s(collective: str, t: int, size_bytes: float, rates: JobRates) -> float:
    """Seconds to deliver what :func:`unplaced_lower_bound_s` finds ``collective`` must
    deliver into some rank and domain whatever the order, over ``rates``."""
    if collective == "sendrecv":
        return size_bytes / rates.most_Bps if rates.most_Bps > 0 else 0.0
    share = {"allgather": (t - 1) / t, "reducescatter": 1 / t, "allreduce": 1.0,
             "alltoall": (t - 1) / t}[collective]
    rank_s = share * size_bytes / rates.least_Bps if rates.least_Bps > 0 else 0.0
    r = rates.domain_ranks
    if not len(r):
        return rank_s
    need = {"allgather": 1 - r / t, "reducescatter": r / t, "allreduce": np.ones(len(r)),
            "alltoall": r * (t - r) / t}[collective] * (r < t) * size_bytes
    with np.errstate(divide="ignore", invalid="ignore"):
        domain_s = np.where((need > 0) & (rates.domain_Bps > 0), need / rates.domain_Bps,
                            0.0)
    return max(rank_s, float(domain_s.max()))
