"""Fat-tree (folded Clos) sizing and wiring with the fewest switches that realise it.

Sizing works on *port slots*: a switch has ``radix`` native ports at ``native_rate``;
a port at another rate (a breakout) uses ``rate / native_rate`` of a slot. A tier's
switches get ``down`` and ``up`` ports with ``down * down_rate / (up * up_rate)`` no
more than the asked oversubscription; the top tier has only down ports. The
oversubscription a tier *realises* is its endpoints' bandwidth over its uplinks' (all
switches of the tier together), which is what the reports show beside the asked one.

Wiring keeps every path the same length: each lower switch spreads its uplinks evenly
over all upper switches of its group (a leaf over the spines of its pod, a spine over
the cores of its index). The upper tier gets the fewest switches that take every
uplink; where the uplink count does not divide evenly over them, a leaf's uplinks are
rounded up to the next multiple of the switch count (when its ports allow) rather than
adding switches: 16 leaves of 7 uplinks on 64-port spines get 8 uplinks on 2 spines,
not 7 spines. A fabric of T tiers serves at most:

- 1 tier: ``radix`` endpoints;
- 2 tiers: ``down_leaf * radix_top`` (non-blocking, radix k: k^2/2);
- 3 tiers: ``down_leaf * down_spine * radix_top`` (non-blocking: k^3/4).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from topomodel.fabric.tables import ClosTier, FabricBuilder, node_names, numbered
from topomodel.inputs.records import documented
from topomodel.vocabulary import FAT_TREE_TIERS

_EPS = 1e-9

MAX_SPINE_SPREAD = documented(
    "clos.MAX_SPINE_SPREAD", 2.0,
    """Most spines, as a multiple of the fewest that take every leaf uplink, on which a
    leaf's exact uplink count is kept (so spine ports stay at least about half used);
    beyond it the uplinks are rounded up to spread over the fewest spines: 16 leaves of
    7 uplinks on 64-port spines get 8 uplinks on 2 spines rather than 7 spines with a
    quarter of their ports used.""")

DEFAULT_SWITCH_LATENCY_S = documented(
    "clos.DEFAULT_SWITCH_LATENCY_S", 500e-9,
    """Switch latency when the catalog has none: an assumed, typical cut-through figure
    for a 51.2T-class Ethernet/IB switch (published claims range from ~150 ns to ~600
    ns).""")

UNIT_SLACK = documented(
    "clos.UNIT_SLACK", 0.05,
    """Spare up-link capacity, as a share, that whole-switch rounding may leave at a tier
    without a default scalable unit counting as off the asked ratio: a unit whose plan is
    at most this much *less* oversubscribed than asked (0.981:1 for 1:1, from whole
    spines) realises the ratio, and among such units the fewest switches decide. Without
    it 131,072 B200 GPUs at 1:1 took 4-system units (0.998:1, half-empty 144-port
    leaves, 7,072 switches) over 64-system ones (0.981:1, 5,056 switches). A unit more
    oversubscribed than asked is never preferred to one that is not.""")


class ClosError(ValueError):
    """A Clos that cannot be realised; the message says which limit was hit."""


@dataclass(frozen=True)
class SwitchPorts:
    """A switch's port budget: native ports and the rate they run at."""

    model: str
    radix: int
    native_rate_Bps: float
    latency_s: float

    def ports_at(self, rate_Bps: float) -> int:
        """Ports available when every port runs at ``rate_Bps``."""
        return math.floor(self.radix * self.native_rate_Bps / rate_Bps + _EPS)

    def split(self, down_rate_Bps: float, up_rate_Bps: float, oversubscription: float, *,
              at_least: int | None = None) -> tuple[int, int]:
        """Down and up ports giving exactly ``oversubscription`` (down/up bandwidth).

        The most down ports that fit, or with ``at_least``, the fewest down ports from
        there on (a tier sized by what it must serve).

        Raises
        ------
        ClosError
            If no whole numbers of ports give the ratio within the radix.

        Examples
        --------
        >>> SwitchPorts("s", 64, 50e9, 0).split(50e9, 50e9, 1.0)
        (32, 32)
        >>> SwitchPorts("s", 64, 50e9, 0).split(50e9, 50e9, 7.0)
        (56, 8)
        >>> SwitchPorts("s", 64, 50e9, 0).split(50e9, 50e9, 7.0, at_least=50)
        (56, 8)
        """
        most = self.ports_at(down_rate_Bps)
        downs = range(most, 0, -1) if at_least is None else range(at_least, most + 1)
        slots_down = down_rate_Bps / self.native_rate_Bps
        slots_up = up_rate_Bps / self.native_rate_Bps
        for down in downs:
            exact = down * down_rate_Bps / (oversubscription * up_rate_Bps)
            up = round(exact)
            if up >= 1 and abs(up - exact) < 1e-6 and (
                    down * slots_down + up * slots_up <= self.radix + _EPS):
                return down, up
        need = f" with at least {at_least} down ports" if at_least else ""
        raise ClosError(f"{self.model} ({self.radix} ports) cannot give a down:up of"
                        f" {oversubscription:g}:1{need}")


@dataclass(frozen=True)
class ClosPlan:
    """The sizes of one Clos: per tier switch counts and ports, and pod layout."""

    tiers: int
    leaf_down: int
    leaf_up: int
    leaves_per_group: np.ndarray  # leaves of each endpoint group
    spines: int  # total spine switches (2 or 3 tiers)
    spine_down: int
    spine_up: int
    leaves_per_pod: int  # 3 tiers
    pods: int
    cores_per_group: int  # 3 tiers: cores per spine index
    oversubscription: tuple[float, ...]  # realised, per tier with uplinks


# PLR0913: keyword-only options of an entry point, as networkx's; a record would hide them
def plan_clos(group_sizes: np.ndarray, group_units: np.ndarray, *, ports: SwitchPorts,  # noqa: PLR0913
              down_rate_Bps: float, up_rate_Bps: float, tiers: int | None,
              oversubscription: tuple[float, ...], pod_units: int | None,
              whole_systems: int = 1, planned_sizes: np.ndarray | None = None) -> ClosPlan:
    """Size a Clos over endpoint groups (a leaf never spans two groups).

    Parameters
    ----------
    group_sizes
        Endpoint ports in each group, in wiring order.
    group_units
        Scalable unit of each group (pods are made of whole units).
    whole_systems
        Keep this many consecutive endpoints on one leaf (NICs of one system, ToR style).
    planned_sizes
        Ports each group is sized for, when more than it has (a fabric smaller than its
        declared unit): leaves get the down and up ports, and the spines the count, of
        the full groups; only the present endpoints are wired.

    Raises
    ------
    ClosError
        When the switch cannot realise the asked tiers or oversubscription.

    Examples
    --------
    Two units of 32 ports at 5:1 on 64-port switches: 7 uplinks would need 7 spines,
    so each leaf gets 8 over 2 spines (4:1 realised, the closest that many spines give):

    >>> plan = plan_clos(np.array([32] * 16), np.repeat([0, 1], 8),
    ...                  ports=SwitchPorts("s", 64, 50e9, 0), down_rate_Bps=50e9,
    ...                  up_rate_Bps=50e9, tiers=None, oversubscription=(5.0,),
    ...                  pod_units=None)
    >>> plan.leaf_down, plan.leaf_up, plan.spines, plan.oversubscription
    (32, 8, 2, (4.0,))
    """
    over = tuple(oversubscription) + (1.0,) * (3 - len(oversubscription))
    planned = group_sizes if planned_sizes is None else np.maximum(planned_sizes, group_sizes)
    endpoints = int(group_sizes.sum())
    top_down_leaf = ports.ports_at(down_rate_Bps)
    if tiers == 1 or (tiers is None and int(planned.sum()) <= top_down_leaf):
        if endpoints > top_down_leaf:
            raise ClosError(f"{endpoints} endpoint ports do not fit one {ports.model}"
                            f" ({top_down_leaf} ports at this rate); use more tiers")
        return ClosPlan(1, endpoints, 0, np.ones(1, np.int64), 0, 0, 0, 0, 0, 0, ())
    leaf_down_max, _ = ports.split(down_rate_Bps, up_rate_Bps, over[0])
    leaf_down_max -= leaf_down_max % whole_systems
    if leaf_down_max < 1:
        raise ClosError(f"{ports.model} cannot take the {whole_systems} ports of one system"
                        f" on a leaf at {over[0]:g}:1")
    biggest = int(planned.max())
    per_group = math.ceil(biggest / leaf_down_max)
    leaf_down = math.ceil(biggest / per_group)
    leaf_down += -leaf_down % whole_systems
    leaves_per_group = -(-group_sizes // leaf_down)
    planned_leaves = int((-(-planned // leaf_down)).sum())
    slots_down = leaf_down * down_rate_Bps / ports.native_rate_Bps
    slots_up = up_rate_Bps / ports.native_rate_Bps
    least_up = max(1, math.ceil(leaf_down * down_rate_Bps / (over[0] * up_rate_Bps) - 1e-6))
    most_up = math.floor((ports.radix - slots_down) / slots_up + _EPS)
    if least_up > most_up:
        raise ClosError(f"{ports.model} ({ports.radix} ports) cannot give {leaf_down} down"
                        f" ports a down:up of {over[0]:g}:1")
    upper = plan_upper(planned_leaves, least_up,
                       _leaves_per_unit(-(-planned // leaf_down), group_units), ports=ports,
                       rate_Bps=up_rate_Bps, tiers=None if tiers is None else tiers - 1,
                       oversubscription=over[1], pod_units=pod_units, leaf_up_max=most_up,
                       present_leaves=int(leaves_per_group.sum()))
    leaf_up = upper.leaf_up
    leaf_over = endpoints * down_rate_Bps / (int(leaves_per_group.sum()) * leaf_up
                                             * up_rate_Bps)
    return ClosPlan(upper.tiers + 1, leaf_down, leaf_up, leaves_per_group, upper.spines,
                    upper.spine_down, upper.spine_up, upper.leaves_per_pod, upper.pods,
                    upper.cores_per_group, (leaf_over, *upper.oversubscription))


def uplinks_and_spines(leaves: int, least_up: int, most_up: int, spine_ports: int
                       ) -> tuple[int, int] | None:
    """Uplinks per leaf and spines for ``leaves`` leaves, each cabled evenly to every
    spine (``None`` if no count of spines fits).

    The exact uplink count ``least_up`` is kept on the fewest spines it divides over,
    unless that is more than :data:`MAX_SPINE_SPREAD` times the fewest spines that take
    the uplinks at all (a prime count would make as many spines as uplinks); then a
    leaf's uplinks are rounded up to a multiple of the fewest spines, where its ports
    (``most_up``) allow.

    Examples
    --------
    >>> uplinks_and_spines(16, 7, 32, 64)  # 8 uplinks on 2 spines, not 7 spines
    (8, 2)
    >>> uplinks_and_spines(24, 42, 44, 128)  # 14 spines keep the 42 exact: 8 needed
    (42, 14)
    >>> uplinks_and_spines(24, 32, 32, 64)  # 12 spines do not divide 32
    (32, 16)
    """
    fewest = max(1, math.ceil(leaves * least_up / spine_ports))
    options = [(up, spines) for spines in range(fewest, least_up + 1)
               if (up := -(-least_up // spines) * spines) <= most_up
               and leaves * (up // spines) <= spine_ports]
    exact = [(up, spines) for up, spines in options if up == least_up]
    if exact and exact[0][1] <= MAX_SPINE_SPREAD * fewest:
        return exact[0]
    return options[0] if options else None


# PLR0913: keyword-only options of an entry point, as networkx's; a record would hide them
def plan_upper(leaves: int, leaf_up: int, leaves_per_unit: int, *, ports: SwitchPorts,  # noqa: PLR0913
               rate_Bps: float, tiers: int | None, oversubscription: float,
               pod_units: int | None, leaf_up_max: int | None = None,
               present_leaves: int | None = None) -> ClosPlan:
    """Size the tiers above ``leaves`` switches that have ``leaf_up`` uplinks each.

    One tier (spines) when the leaves fit under spines of ``ports``; else two (spines in
    pods, then cores). ``tiers`` forces the count. With ``leaf_up_max``, a leaf's
    uplinks may grow to that many so that they spread evenly over fewer spines (the
    returned plan's ``leaf_up``). ``present_leaves`` are wired of the ``leaves`` sized
    for (default all).
    """
    top_down = ports.ports_at(rate_Bps)
    present = leaves if present_leaves is None else present_leaves
    two = uplinks_and_spines(leaves, leaf_up, leaf_up_max or leaf_up, top_down)
    if tiers == 1 or (tiers is None and two is not None):
        if two is None:
            raise ClosError(f"{leaves} leaves with {leaf_up} uplinks each need more than"
                            f" {top_down}-port spines; use 3 tiers")
        up, spines = two
        return ClosPlan(1, 0, up, np.ones(0, np.int64), spines,
                        present * up // spines, 0, leaves, 1, 0, ())
    if tiers is not None and tiers > 2:
        raise ClosError("at most 3 switch tiers")
    spine_down_max, _ = ports.split(rate_Bps, rate_Bps, oversubscription)
    if pod_units is not None:
        leaves_per_pod = pod_units * leaves_per_unit
    elif leaves_per_unit <= spine_down_max:
        leaves_per_pod = (spine_down_max // leaves_per_unit) * leaves_per_unit
    else:
        leaves_per_pod = spine_down_max
    if leaves_per_pod > spine_down_max:
        raise ClosError(f"a pod of {leaves_per_pod} leaves needs spines with"
                        f" {leaves_per_pod} down ports; {ports.model} has {spine_down_max}"
                        f" at {oversubscription:g}:1")
    least_up = max(1, math.ceil(leaves_per_pod / oversubscription - 1e-6))
    pods = math.ceil(leaves / leaves_per_pod)
    cores = uplinks_and_spines(pods, least_up, top_down - leaves_per_pod, top_down)
    if cores is None:
        raise ClosError(f"{pods} pods need more than {top_down}-port core switches: too large"
                        " for 3 tiers of this switch")
    spine_up, cores_per_group = cores
    present_pods = math.ceil(present / leaves_per_pod)
    return ClosPlan(2, 0, leaf_up, np.ones(0, np.int64), present_pods * leaf_up,
                    leaves_per_pod, spine_up, leaves_per_pod, present_pods, cores_per_group,
                    (present / (present_pods * spine_up),))


def _leaves_per_unit(leaves_per_group: np.ndarray, group_units: np.ndarray) -> int:
    totals = np.bincount(group_units, weights=leaves_per_group)
    return int(totals.max())


# PLR0913: keyword-only options of an entry point, as networkx's; a record would hide them
def wire_clos(builder: FabricBuilder, plan: ClosPlan, endpoints: np.ndarray,  # noqa: PLR0913
              endpoint_groups: np.ndarray, group_units: np.ndarray, *, ports: SwitchPorts,
              down_rate_Bps: float, up_rate_Bps: float, prefix: str, plane: int,
              group: str, asked: tuple[float, ...], access_tier: str = "leaf",
              tier_names: tuple[str, str, str] = FAT_TREE_TIERS,
              leaves: np.ndarray | None = None) -> list[ClosTier]:
    """Add the switches and links of ``plan``; endpoints are node numbers in wiring order.

    With ``leaves`` given, those existing switches are the first tier (supernode L1
    chips) and ``endpoints`` are ignored.
    """
    leaf_name, spine_name, core_name = tier_names
    stem = {name: name + ("_" if name[-1].isdigit() else "") for name in tier_names}
    asked = tuple(asked) + (1.0,) * (3 - len(asked))
    out: list[ClosTier] = []
    n_leaves = int(plan.leaves_per_group.sum())
    if leaves is None:
        leaf_group = np.repeat(np.arange(len(plan.leaves_per_group)), plan.leaves_per_group)
        leaf_unit = group_units[leaf_group] if plan.tiers > 1 else np.zeros(1, np.int64)
        names = numbered(f"{prefix}{stem[leaf_name]}", n_leaves)
        pod_of_leaf = (np.arange(n_leaves) // plan.leaves_per_pod if plan.tiers == 3
                       else np.full(n_leaves, -1))
        leaves = builder.add_nodes(names, kind="switch", tier=leaf_name, model=ports.model,
                                   latency_s=ports.latency_s, unit=leaf_unit, pod=pod_of_leaf,
                                   plane=plane)
        # endpoint k of group g goes to leaf first[g] + position // leaf_down
        first = np.concatenate([[0], np.cumsum(plan.leaves_per_group)[:-1]])
        starts = np.concatenate([[0], np.flatnonzero(np.diff(endpoint_groups)) + 1])
        position = np.arange(len(endpoints)) - np.repeat(starts, np.diff(
            np.append(starts, len(endpoints))))
        leaf_of = (leaves[first[endpoint_groups] + position // plan.leaf_down]
                   if plan.tiers > 1 else np.full(len(endpoints), leaves[0]))
        builder.add_links(endpoints, leaf_of, tier=access_tier, rate_Bps=down_rate_Bps)
        out.append(ClosTier(leaf_name, ports.model, n_leaves, plan.leaf_down, plan.leaf_up,
                            down_rate_Bps, up_rate_Bps,
                            plan.oversubscription[0] if plan.oversubscription else 0.0,
                            asked[0] if plan.tiers > 1 else 0.0, plane, group))
    if plan.tiers == 1:
        return out
    if plan.tiers == 2:
        spines = builder.add_nodes(node_names([prefix], numbered(stem[spine_name],
                                                                 plan.spines)), kind="switch",
                                   tier=spine_name, model=ports.model,
                                   latency_s=ports.latency_s, plane=plane)
        builder.add_links(np.repeat(leaves, plan.spines), np.tile(spines, n_leaves),
                          tier=spine_name, rate_Bps=up_rate_Bps,
                          cables=plan.leaf_up // plan.spines)
        out.append(ClosTier(spine_name, ports.model, plan.spines, plan.spine_down, 0,
                            up_rate_Bps, 0.0, 0.0, 0.0, plane, group))
        return out
    per_pod = plan.leaf_up  # spines per pod: one cable from every leaf of the pod to each
    pod_of_spine = np.repeat(np.arange(plan.pods), per_pod)
    index_in_pod = np.tile(np.arange(per_pod), plan.pods)
    spines = builder.add_nodes(  # pod-major: prefix/pod3/spine07
        node_names([f"{prefix}{pod}/" for pod in numbered("pod", plan.pods)],
                   numbered(stem[spine_name], per_pod)),
        kind="switch", tier=spine_name, model=ports.model, latency_s=ports.latency_s,
        pod=pod_of_spine, plane=plane)
    leaf_pod = np.arange(n_leaves) // plan.leaves_per_pod
    src = np.repeat(leaves, per_pod)
    dst = spines[np.repeat(leaf_pod, per_pod) * per_pod + np.tile(np.arange(per_pod), n_leaves)]
    builder.add_links(src, dst, tier=spine_name, rate_Bps=up_rate_Bps)
    cores_total = per_pod * plan.cores_per_group
    cores = builder.add_nodes(node_names([prefix], numbered(stem[core_name], cores_total)),
                              kind="switch", tier=core_name, model=ports.model,
                              latency_s=ports.latency_s, plane=plane)
    # spine s of every pod connects to the cores of group s
    core_of = (index_in_pod[:, None] * plan.cores_per_group
               + np.arange(plan.cores_per_group)[None, :])
    builder.add_links(np.repeat(spines, plan.cores_per_group), cores[core_of.ravel()],
                      tier=core_name, rate_Bps=up_rate_Bps,
                      cables=plan.spine_up // plan.cores_per_group)
    out.append(ClosTier(spine_name, ports.model, len(spines), plan.spine_down, plan.spine_up,
                        up_rate_Bps, up_rate_Bps, plan.oversubscription[1], asked[1], plane,
                        group))
    used_down = plan.pods * (plan.spine_up // plan.cores_per_group)
    out.append(ClosTier(core_name, ports.model, cores_total, used_down, 0, up_rate_Bps, 0.0,
                        0.0, 0.0, plane, group))
    return out


def unit_groups(systems: int, unit: int, nics: int, *, mode: str, leaf_down_max: int,
                planned_unit: int | None = None) -> tuple[np.ndarray, np.ndarray, int]:
    """Endpoint ports per leaf group, each group's unit, and rails per leaf, for
    ``systems`` systems in units of ``unit`` (the last may be short).

    ``mode`` is ``rail`` (one rail of a unit per leaf group; rails share a group when a
    unit is small), ``tor`` (whole systems of a unit) or ``rail_only`` (one rail's
    fabric). ``planned_unit`` sizes rail sharing for a unit larger than the fabric.

    Examples
    --------
    >>> sizes, units, rails = unit_groups(16, 8, 8, mode="rail", leaf_down_max=32)
    >>> sizes.tolist(), units.tolist(), rails
    ([32, 32, 32, 32], [0, 0, 1, 1], 4)
    """
    counts = np.full(systems // unit, unit, np.int64)
    if systems % unit:
        counts = np.append(counts, systems % unit)
    if mode == "rail_only":
        return counts, np.arange(len(counts)), 1
    if mode == "tor":
        return counts * nics, np.arange(len(counts)), 1
    rails = max(1, min(nics, leaf_down_max // (planned_unit or min(unit, systems))))
    shares = np.full(-(-nics // rails), rails, np.int64)
    shares[-1] = nics - rails * (len(shares) - 1)
    return (np.outer(counts, shares).ravel(), np.repeat(np.arange(len(counts)), len(shares)),
            rails)


@dataclass(frozen=True)
class UnitChoice:
    """The default scalable unit and what it realises."""

    unit: int  # systems
    plan: ClosPlan
    exact: bool  # every tier realises the asked oversubscription


# PLR0913: keyword-only options of an entry point, as networkx's; a record would hide them
def default_unit(systems: int, nics: int, *, mode: str, ports: SwitchPorts,  # noqa: PLR0913
                 down_rate_Bps: float, up_rate_Bps: float, tiers: int | None,
                 oversubscription: tuple[float, ...], pod_units: int | None) -> UnitChoice:
    """The scalable unit (systems) chosen when a design gives none.

    Candidates are the whole divisors of ``systems`` up to what one leaf serves at the
    asked leaf ratio (its down ports, per rail, or over the NICs of a system top-of-rack
    style), so every unit is full. The choice is the one whose plan realises the asked
    oversubscription at every tier; else the closest to it; then the fewest switches;
    then the largest unit.

    Examples
    --------
    2,048 H200 (256 systems x 8 rails) on 128 x 400G at 2:1: units of 84 systems (what
    one leaf holds) would leave a short unit and realise 1.52:1; 64 realises 2:1.

    >>> choice = default_unit(256, 8, mode="rail", ports=SwitchPorts("th5", 64, 100e9, 0),
    ...                       down_rate_Bps=50e9, up_rate_Bps=50e9, tiers=None,
    ...                       oversubscription=(2.0,), pod_units=None)
    >>> choice.unit, choice.exact, choice.plan.oversubscription
    (64, True, (2.0,))
    """
    asked = tuple(oversubscription) + (1.0,) * (3 - len(oversubscription))
    leaf_down_max, _ = ports.split(down_rate_Bps, up_rate_Bps, asked[0])
    most = max(1, leaf_down_max if mode != "tor" else leaf_down_max // nics)
    whole = nics if mode == "tor" else 1
    best: tuple[tuple[Any, ...], UnitChoice] | None = None
    failure: ClosError | None = None
    for unit in (u for u in range(1, min(most, systems) + 1) if systems % u == 0):
        sizes, units, _ = unit_groups(systems, unit, nics, mode=mode,
                                      leaf_down_max=leaf_down_max)
        try:
            plan = plan_clos(sizes, units, ports=ports, down_rate_Bps=down_rate_Bps,
                             up_rate_Bps=up_rate_Bps, tiers=tiers,
                             oversubscription=oversubscription, pod_units=pod_units,
                             whole_systems=whole)
        except ClosError as exc:
            failure = failure or exc
            continue
        realised = plan.oversubscription
        pairs = list(zip(realised, asked, strict=False))
        worse = sum(max(0.0, math.log(r / a)) for r, a in pairs)  # more oversubscribed
        spare = sum(max(0.0, math.log(a / r)) for r, a in pairs if r > 0)  # less
        exact = worse < 1e-6 and spare < 1e-6
        switches = (int(plan.leaves_per_group.sum()) + plan.spines
                    + plan.leaf_up * plan.cores_per_group)
        within = worse < 1e-6 and spare <= math.log(1 / (1 - UNIT_SLACK))
        key = (not within, round(worse, 9), round(0.0 if within else spare, 9), switches,
               not exact, -unit)
        if best is None or key < best[0]:
            best = (key, UnitChoice(unit, plan, exact))
    if best is None:
        raise failure or ClosError(f"no scalable unit of {systems} systems fits {ports.model}")
    return best[1]
