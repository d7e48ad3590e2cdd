"""What a layout's training step is built on, and what steps share on one fabric.

- :func:`shape_of`: the step model's checks of a layout, its batch, its schedule and
  the layers of every model chunk (what :func:`~topomodel.analysis.training.step.step_time` and
  :func:`~topomodel.analysis.training.step.layout_memory` both start from);
- :func:`collective_times`: the step's collective times, kept with the fabric
  (:meth:`~topomodel.fabric.tables.Fabric.derived`) and keyed by everything a time
  depends on, so layouts with the same communicators share them;
- :func:`recent_steps`: the last steps per fabric, for layouts that differ only in
  their rank order (which reaches the step only through the collective times);
- :func:`shared_traffic`: the step's collective traffic, kept with the fabric and its
  copies with failed parts (the goodput's degraded steps) and across time models (the
  sensitivity), which route it again but need not build it again;
- :func:`scaleout_failure_times` and :func:`in_system_failure_times`: the times of
  collectives that stay inside scale-up domains (systems), shared by the fabric's
  copies whose failed parts all sit outside the scale-up tiers (the in-system arcs):
  :func:`failure_times` is the rule;
- :func:`cached_schedule`: pipeline schedules, read-only, built once per process.

Nothing here is kept in a module-global table that holds a fabric: what belongs to a
fabric lives and dies with it.
"""

from __future__ import annotations

import dataclasses
import functools
import weakref
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from topomodel import limits
from topomodel.analysis.assumptions import TimeModel
from topomodel.analysis.training.memory import StageMemory
from topomodel.analysis.training.pipeline import Schedule, chunk_first_layer, chunk_layers, schedule
from topomodel.errors import UsageError
from topomodel.fabric.tables import Fabric, ignores_capacities, ignores_failures
from topomodel.inputs.parts import Accelerator, Model, System
from topomodel.inputs.records import documented
from topomodel.kept import Kept
from topomodel.traffic.algorithms import REGISTRY
from topomodel.traffic.layout import Layout
from topomodel.traffic.phases import AllPairsPhase, Traffic
from topomodel.vocabulary import SCALEUP_TIERS


@dataclass(frozen=True)
class LayoutMemory:
    """Memory of every pipeline stage of a layout, bytes per accelerator, beside what
    the accelerator has."""

    stages: StageMemory
    hbm_bytes: float

    def fits(self, headroom: float = 0.0) -> bool:
        """Whether every stage fits in the HBM less a ``headroom`` share (0-1) of it."""
        return bool((self.stages.total <= self.hbm_bytes * (1.0 - headroom)).all())


@dataclass(frozen=True, eq=False)
class Shape:
    """What a layout's step is built on: its checks passed, the batch, the schedule and
    the layers of every model chunk."""

    accelerator: Accelerator
    seq: int
    global_batch: int
    microbatches: int  # per pipeline
    schedule_name: str  # the schedule's name (the layout's); see :attr:`schedule`
    sizes: np.ndarray  # layers per (stage, chunk)
    moe_sizes: np.ndarray  # MoE layers per (stage, chunk)

    @property
    def schedule(self) -> Schedule:
        """The pipeline schedule (:func:`cached_schedule`), not held by the shape: a
        planner keeps the shapes of every layout it bounds until its search ends, and
        schedules of thousands of microbatches are MBs each (held, they were 2.1 of 3.9
        GB after 130 CPU s of a plan on an 8k cut of the 98k NPU servers); one dropped is
        built again, the same arrays."""
        p, v = self.sizes.shape
        return cached_schedule(self.schedule_name, p, self.microbatches, v)


def shape_of(fabric: Fabric, model: Model, layout: Layout) -> Shape:
    """The :class:`Shape` of ``layout``'s step, after the step model's checks.

    Raises
    ------
    UsageError
        For sizes that do not fit the fabric or the model, or a schedule that cannot
        run them.
    """
    system = fabric.catalog.get(fabric.design.system, System)
    accelerator = fabric.catalog.get(system.accelerator, Accelerator)
    check_layout(layout, model, fabric)
    seq = layout.seq or model.sequence
    m = layout.sequences(seq) // (layout.dp * layout.micro_batch)
    # the sequences that run: whole microbatches on every DP rank, as the CLI requires
    global_batch = m * layout.dp * layout.micro_batch
    p, v = layout.pp, layout.interleave
    cached_schedule(layout.schedule, p, m, v)  # a schedule that cannot run them refused here
    sizes, moe_sizes = partition(model, p, v)
    return Shape(accelerator, seq, global_batch, m, layout.schedule, sizes, moe_sizes)


def partition(model: Model, p: int, v: int) -> tuple[np.ndarray, np.ndarray]:
    """The layers and the MoE layers of every model chunk (p, v) of ``model`` on ``p``
    stages of ``v`` chunks each, read-only, found once per (layers, leading dense
    layers, p, v): a search's layouts on one pipeline share them."""
    leading = model.dense_layers if model.is_moe else model.layers
    return _PARTITIONS.get((model.layers, leading, p, v), (),
                           lambda: _partition(model.layers, leading, p, v))


def _partition(layers: int, leading: int, p: int, v: int) -> tuple[np.ndarray, np.ndarray]:
    """:func:`partition`, found (``leading``: the layers before the first MoE one)."""
    sizes = chunk_layers(layers, p, v)
    first = chunk_first_layer(layers, p, v)
    moe_sizes = np.clip(first + sizes - np.maximum(first, leading), 0, None)
    for found in (sizes, moe_sizes):
        found.setflags(write=False)
    return sizes, moe_sizes


_PARTITIONS: Kept[tuple[np.ndarray, np.ndarray]] = Kept(4096)


def cached_schedule(name: str, p: int, m: int, v: int) -> Schedule:
    """:func:`~topomodel.analysis.training.pipeline.schedule`, built once per process for each
    (name, stages, microbatches, chunks): its arrays are read-only, so layouts that
    share a pipeline share it. One still held anywhere (a planner's shapes hold theirs
    until the search ends) is given again even after the last :data:`RECENT_SCHEDULES`
    dropped it, so no two copies of one schedule are alive: on an 8k cut of the 98k
    NPU servers (DeepSeek-V3) the planner's shapes held 1,777 schedules of 630 kinds,
    0.95 GB, after 60 CPU s (benchmarks/README.md, card43)."""
    key = (name, p, m, v)
    sched = _LIVE_SCHEDULES.get(key)
    if sched is None:
        sched = _LIVE_SCHEDULES[key] = _recent_schedule(name, p, m, v)
    return sched


RECENT_SCHEDULES = 256
"""Schedules kept alive for :func:`cached_schedule` when nothing else holds them (least
recently used dropped): a planner's cell asks the same few again and again."""

_LIVE_SCHEDULES: weakref.WeakValueDictionary[tuple[str, int, int, int], Schedule] = (
    weakref.WeakValueDictionary())


@functools.lru_cache(maxsize=RECENT_SCHEDULES)
def _recent_schedule(name: str, p: int, m: int, v: int) -> Schedule:
    """A new read-only :func:`~topomodel.analysis.training.pipeline.schedule`."""
    sched = schedule(name, p, m, v)
    for rows in (sched.kind, sched.micro, sched.chunk, sched.paired):
        rows.setflags(write=False)
    return sched


def check_layout(layout: Layout, model: Model, fabric: Fabric) -> None:
    """Refuse (``UsageError``) a layout whose sizes do not fit the fabric or the model."""
    world, count = layout.world, len(ranks_of(fabric))
    if world > count:
        raise UsageError(f"the layout needs {world} accelerators (tp x pp x dp x cp); the"
                         f" fabric has {count}")
    if fabric.structure.scaleout.kind == "none" and world > 1:
        domains = np.unique(node_domains(fabric)[ranks_of(fabric)[:world]])
        if len(domains) > 1 or domains[0] < 0:
            per_domain = int(np.count_nonzero(node_domains(fabric)[ranks_of(fabric)]
                                              == max(domains[0], 0)))
            raise UsageError(
                f"the layout's {world} accelerators (tp x pp x dp x cp) span"
                f" {len(domains)} scale-up domains, and no network joins them (scale-out:"
                f" none): no collective or pipeline send can cross between them; give a"
                f" layout of at most {per_domain} accelerators (e.g. --dp), or a"
                " scale-out network")
    if layout.dp % layout.ep:
        raise UsageError(f"ep={layout.ep} must divide dp={layout.dp}")
    if layout.pp * layout.interleave > model.layers:
        raise UsageError(f"pp={layout.pp} x interleave={layout.interleave} is more stages"
                         f" than the {model.layers} layers")
    if model.heads % layout.tp:
        raise UsageError(f"tp={layout.tp} must divide the {model.heads} heads")
    if model.is_moe and model.experts % layout.ep:
        raise UsageError(f"ep={layout.ep} must divide the {model.experts} experts")
    if not model.is_moe and layout.ep > 1:
        raise UsageError(f"{model.id} has no experts; ep must be 1")
    if layout.global_batch and layout.global_batch < layout.dp * layout.micro_batch:
        raise UsageError(f"a global batch of {layout.global_batch} sequences is less than"
                         f" one microbatch per DP rank ({layout.dp} x {layout.micro_batch})")
    seq = layout.seq or model.sequence  # sizes against topomodel.limits, before any work
    m = layout.sequences(seq) // (layout.dp * layout.micro_batch)
    for count, name, what in (
            (seq, "MAX_SEQUENCE_TOKENS", "tokens per sequence"),
            (layout.sequences(seq) * seq, "MAX_STEP_TOKENS", "tokens per step"),
            (m, "MAX_MICROBATCHES", "microbatches per pipeline"),
            (layout.pp * layout.interleave * m, "MAX_PIPELINE_CHUNKS", "pipeline chunks")):
        refusal = limits.above(count, name, what, (
            limits.BYTES_PER_PIPELINE_CHUNK if what == "pipeline chunks" else None),
            doing="to schedule")
        if refusal:
            raise UsageError(refusal)


CollectiveKey = tuple[str, tuple[str, ...], float, tuple[Any, ...], str, int, tuple[Any, ...]]
"""What a collective's time depends on besides the fabric: (collective, candidate
algorithms, size in bytes, the communicators' shape and placement, routing, seed, the
time model)."""
CollectiveTime = tuple[str, float, float, float, float, bool, str]
"""A timed collective: (algorithm, time, latency, bandwidth, topology seconds, spills,
the measured curve that timed it or "")."""


def collective_times(fabric: Fabric) -> dict[CollectiveKey, CollectiveTime]:
    """The step's collective times on ``fabric``, filled as steps are modelled and kept
    with the fabric (:meth:`~topomodel.fabric.tables.Fabric.derived`): a layout whose
    communicators, sizes and algorithms another layout already timed on this fabric
    costs arithmetic, not routing. Keyed by :data:`CollectiveKey`; the entries are
    exactly what timing them again gives (routing and timing are deterministic)."""
    return {}


GRID_KEYS = 65_536
"""Communicator keys each fabric remembers for :func:`grid_key` (least recently used
dropped): a key is a few hundred bytes with what it is found by (about 20 MB when
full), the grid it stands for 8 bytes a rank. A plan at 98k walks its layouts best
bound first across some 400 cells x up to 24 rank orders x 4-5 kinds of communicator
(tens of thousands of keys); with 4,096 it found them again and again, each a 98k-rank
grid built and hashed (a quarter of that plan's CPU time, sampled)."""


@ignores_capacities
@ignores_failures
def grid_keys(fabric: Fabric) -> OrderedDict[tuple[Any, ...], tuple[Any, ...]]:
    """The communicator keys found on ``fabric`` (:func:`grid_key`), kept with it."""
    return OrderedDict()


def grid_key(fabric: Fabric, layout: Layout, kind: str,
             keys: OrderedDict[tuple[Any, ...], tuple[Any, ...]] | None = None
             ) -> tuple[Any, ...]:
    """A key of the communicators of ``kind`` of ``layout`` (a row
    per group of :func:`~topomodel.traffic.layout.rank_groups`, or ``pp-pairs``: the
    pipeline's adjacent stages, a row per pair), remembered by what decides them (the
    sizes, EP and rank order; for the pipeline pairs, whether the last stage wraps to
    the first), so a layout that shares its communicators with an earlier one finds
    its key at once. The key is :func:`strided_key`'s, made from the layout without
    building or hashing the grid (at 98k ranks, 0.3 ms each, some 7,600 in a plan): it
    names the grid exactly, and equal grids share it (``keys``: the fabric's
    :func:`grid_keys`, when at hand)."""
    if keys is None:
        keys = fabric.derived(grid_keys)
    wraps = kind == "pp-pairs" and layout.interleave > 1
    of = (layout.tp, layout.cp, layout.pp, layout.dp, layout.ep, layout.order, kind, wraps)
    key = keys.get(of)
    if key is None:
        key = keys[of] = pairs_key(layout, wraps) if kind == "pp-pairs" \
            else strided_key(layout, kind)
        while len(keys) > GRID_KEYS:
            keys.popitem(last=False)
    else:
        keys.move_to_end(of)
    return key


def pairs_key(layout: Layout, wraps: bool) -> tuple[Any, ...]:
    """:func:`grid_key` of the pipeline's adjacent stages, a row per pair (each group's
    stages in turn, then with ``wraps`` every group's last and first): made from the
    stages' key; two stages make one pair per group, the stages' own grid, and share
    its key (equal grids, one key)."""
    stages = strided_key(layout, "pp")
    return ("pairs", stages, wraps) if wraps or layout.pp > 2 else stages


def strided_key(layout: Layout, kind: str) -> tuple[Any, ...]:
    """The communicators of ``kind`` (:func:`~topomodel.traffic.layout.rank_groups`)
    described by where each sits in the rank order, without making them: the grid's
    (rows, columns), and the positions its elements take, row by row, as nested loops
    of (count, stride) over the rank positions, outermost first. ``rank_groups``
    reshapes the ranks to the layout's axes (strides of a C-order array), moves the
    communicator's axes last and flattens the rest, so element ``i`` of the grid read
    row by row is the rank at position ``sum(digit_j(i) * stride_j)`` over those loops:
    the loops and the shape determine the grid (over the fabric's ranks, the same in
    its copies). Loops of one step are dropped and a loop that continues the one inside
    it (``stride == count * stride`` of the inner) is merged into it, so every grid has
    one description: equal grids share one key."""
    order = [d.strip() for d in layout.order.split(",")]
    sizes = {"tp": layout.tp, "cp": layout.cp, "dp": layout.dp, "pp": layout.pp}
    axes: list[tuple[str, int]] = []  # outermost first, as rank_groups splits dp
    for dim in reversed(order):
        if dim == "dp":
            axes += [("edp", layout.dp // layout.ep), ("ep", layout.ep)]
        else:
            axes.append((dim, sizes[dim]))
    strides: dict[str, tuple[int, int]] = {}
    stride = 1
    for name, size in reversed(axes):
        strides[name] = (size, stride)
        stride *= size
    keep = {"dp": ["edp", "ep"], "grad": ["cp", "edp", "ep"],
            "expert_grad": ["cp", "edp"]}.get(kind, [kind])
    loops = [strides[name] for name, _ in axes if name not in keep] + [
        strides[name] for name in keep]
    columns = 1
    for name in keep:
        columns *= strides[name][0]
    merged: list[tuple[int, int]] = []
    for size, step in loops:
        if size == 1:
            continue
        if merged and merged[-1][1] == size * step:
            merged[-1] = (merged[-1][0] * size, step)
        else:
            merged.append((size, step))
    return ("strided", (stride // columns, columns), tuple(merged))


def time_key(time_model: TimeModel) -> tuple[Any, ...]:
    """The time model as a hashable key (its tier efficiencies are a mapping), found
    once per time model object (a search asks it of every order it bounds)."""
    return _TIME_KEYS.get(id(time_model), (time_model,), lambda: _time_key(time_model))


_TIME_KEYS: Kept[tuple[Any, ...]] = Kept(64)


def _time_key(time_model: TimeModel) -> tuple[Any, ...]:
    """:func:`time_key`, made."""
    return tuple(tuple(sorted(time_model.efficiency.items())) if f.name == "efficiency"
                 else getattr(time_model, f.name) for f in dataclasses.fields(time_model))


def ranks_of(fabric: Fabric) -> np.ndarray:
    """The accelerators in rank order, found once per fabric."""
    return fabric.derived(_accelerator_ranks)


@ignores_capacities
@ignores_failures
def node_domains(fabric: Fabric) -> np.ndarray:
    """Every node's scale-up domain (-1: none), read-only, found once per fabric (with
    :meth:`~topomodel.fabric.tables.Fabric.derived`)."""
    domains = fabric.node_arrays["domain"].copy()
    domains.setflags(write=False)
    return domains


@ignores_capacities
@ignores_failures
def _accelerator_ranks(fabric: Fabric) -> np.ndarray:
    ranks = fabric.accelerators
    ranks.setflags(write=False)
    return ranks


RECENT_STEPS = 256
"""Steps each fabric remembers for :func:`recent_steps` (least recently used dropped):
enough for every rank order of the layouts a search lists one after the other."""

UNORDERED = tuple(f.name for f in dataclasses.fields(Layout) if f.name != "order")


def recent_steps(fabric: Fabric) -> OrderedDict[tuple[Any, ...], tuple[Any, Any, Any]]:
    """The last steps modelled on ``fabric``, by (model, assumptions, every layout
    field but the order, collective times), kept with the fabric
    (:meth:`~topomodel.fabric.tables.Fabric.derived`); each entry holds the model, the
    assumptions and the :class:`~topomodel.analysis.training.step.StepResult`."""
    return OrderedDict()


def recall_step(fabric: Fabric, model: Model, assumptions: Any, key: tuple[Any, ...]
                ) -> Any:
    """The step :func:`remember_step` kept for ``key`` with this model and these
    assumptions (the same objects), or None."""
    steps = fabric.derived(recent_steps)
    hit = steps.get((id(model), id(assumptions), *key))
    if hit is None or hit[0] is not model or hit[1] is not assumptions:
        return None
    steps.move_to_end((id(model), id(assumptions), *key))
    return hit[2]


def remember_step(fabric: Fabric, model: Model, assumptions: Any, key: tuple[Any, ...],
                  result: Any) -> None:
    """Keep ``result`` among the fabric's :data:`RECENT_STEPS` last steps; the entry
    holds the model and the assumptions, so their ids in the key stay theirs."""
    steps = fabric.derived(recent_steps)
    steps[(id(model), id(assumptions), *key)] = (model, assumptions, result)
    while len(steps) > RECENT_STEPS:
        steps.popitem(last=False)


SHARED_TRAFFIC_FLOWS = documented(
    "stepshape.SHARED_TRAFFIC_FLOWS", 4_000_000,
    """Flows of step traffic each fabric keeps for :func:`shared_traffic` (least recently
    used dropped first): about 28 bytes a flow, so at most about 110 MB. Llama 3 70B at
    TP 8 x PP 4 on the 98,304-accelerator examples builds 1.1-1.2 M flows (every
    candidate of its 6 collectives), so its degraded steps and its sensitivity find all
    of it.""")

UNSHARED_ALGORITHMS = tuple(a.name for a in REGISTRY.values() if a.reads_switch_state)
"""Algorithms whose traffic depends on the failed parts (the in-network plan avoids
failed switches and links; ``Algorithm.reads_switch_state``): never shared between a
fabric and its failed copies."""


@ignores_capacities
@ignores_failures
def step_traffic(fabric: Fabric) -> OrderedDict[tuple[Any, ...], Traffic]:
    """The traffic :func:`shared_traffic` keeps, shared by the fabric's copies with
    failed parts: the algorithms it holds build the same flows on any of them."""
    return OrderedDict()


@ignores_capacities
def own_step_traffic(fabric: Fabric) -> OrderedDict[tuple[Any, ...], Traffic]:
    """The traffic :func:`shared_traffic` keeps for this fabric alone: the
    :data:`UNSHARED_ALGORITHMS`, whose flows depend on its failed parts."""
    return OrderedDict()


ALL_PAIRS_TRAFFICS = 2
"""All-pairs traffics (a direct All-to-All: the EP dispatch) each fabric keeps for
:func:`shared_traffic`, least recently used dropped: one holds its listed pairs once
routed pair by pair (28 bytes a flow: 170 MB for the 6.2 M flows of EP 64 at 98,304
NPUs) and, through them, its routes, so few are kept; two hold the full-size step's and
one more, which is what a claim search's steps share (one layout, other rates)."""


@ignores_capacities
@ignores_failures
def all_pairs_traffic(fabric: Fabric) -> OrderedDict[tuple[Any, ...], Traffic]:
    """The all-pairs traffics :func:`shared_traffic` keeps (:data:`ALL_PAIRS_TRAFFICS`),
    shared by the fabric's copies with other failed parts or rates: the pairs are the
    groups', whatever failed and whatever the links carry."""
    return OrderedDict()


def shared_traffic(fabric: Fabric, key: tuple[Any, ...], algorithm: str,
                   build: Callable[[], Traffic]) -> Traffic:
    """``build()``, the traffic of ``algorithm`` that ``key`` names (the collective, its
    size and communicators), built once per fabric, its copies with other failed parts
    and every time model: routing and timing only read a traffic, and the algorithms
    kept read nothing a failure changes (:data:`UNSHARED_ALGORITHMS` are kept with this
    fabric alone, shared by its time models, not by its copies). Kept up to
    :data:`SHARED_TRAFFIC_FLOWS` in each of the two stores; a traffic of all-pairs
    phases (counted, not listed, until routed pair by pair) in a store of its own, the
    last :data:`ALL_PAIRS_TRAFFICS` of them (:func:`all_pairs_traffic`), shared with
    the copies with other rates too."""
    kept = fabric.derived(own_step_traffic if algorithm in UNSHARED_ALGORITHMS
                          else step_traffic)
    full = (algorithm, *key)
    pairs = fabric.derived(all_pairs_traffic)
    for store in (kept, pairs):
        hit = store.get(full)
        if hit is not None:
            store.move_to_end(full)
            return hit
    traffic = build()
    if any(isinstance(ph, AllPairsPhase) for ph in traffic.phases):
        if algorithm not in UNSHARED_ALGORITHMS:
            pairs[full] = traffic
            while len(pairs) > ALL_PAIRS_TRAFFICS:
                pairs.popitem(last=False)
        return traffic
    kept[full] = traffic
    total = sum(ph.flows for t in kept.values() for ph in t.phases)
    while total > SHARED_TRAFFIC_FLOWS and len(kept) > 1:
        _, dropped = kept.popitem(last=False)
        total -= sum(ph.flows for ph in dropped.phases)
    return traffic


@ignores_failures
def scaleout_failure_times(fabric: Fabric) -> dict[CollectiveKey, CollectiveTime]:
    """The times of collectives whose every group lies in one scale-up domain (and
    some group spans systems), as routed on a copy of ``fabric`` whose failed links are
    all scale-out links (host, leaf, spine, core), shared by every such copy
    (:func:`failure_times` is the rule): a degraded step re-routes them once for all
    the scale-out tiers' failures, not once per tier. Keyed like
    :func:`collective_times`."""
    return {}


@ignores_failures
def in_system_failure_times(fabric: Fabric) -> dict[CollectiveKey, CollectiveTime]:
    """The times of collectives whose every group lies in one system, as routed on a
    copy of ``fabric`` whose failed links include none between an accelerator and its
    system's chips, shared by every such copy (:func:`failure_times`): a TP collective
    is timed once for the failures of the scale-out tiers and of a supernode's upper
    switch levels alike. Keyed like :func:`collective_times`."""
    return {}


def failure_times(fabric: Fabric, candidates: tuple[str, ...], groups: np.ndarray
                  ) -> dict[CollectiveKey, CollectiveTime]:
    """Where a collective of ``candidates`` on ``groups`` (rows of node numbers) finds
    and leaves its time on ``fabric``, a copy with failed parts: the times it shares
    with the other copies on which it provably has the same time, or a dict of its own
    (empty) where there are none.

    The structured router must cover the copy (it routes around failures; the general
    router would sum in another order), and no candidate be an in-network plan
    (:data:`UNSHARED_ALGORITHMS`, which avoids failed switches). Then a collective whose
    every group lies in one system (:func:`in_system_failure_times`) sends every flow
    between accelerators and chips of one system, and the router reads the liveness of
    those arcs alone; one whose every group lies in one scale-up domain
    (:func:`scaleout_failure_times`), of the scale-up tiers' arcs alone. On every copy
    where none of those arcs failed, no flow is cut off or moved: the loads (on those
    links only), their rates (as if none failed), the hops and the timing (PXN moves no
    flow within a domain; the switch bound is off on every copy with failures) are the
    same."""
    maker = _shared_times(fabric, candidates, groups)
    return {} if maker is None else fabric.derived(maker)


def untouched_by_failures(fabric: Fabric, candidates: tuple[str, ...],
                          groups: np.ndarray) -> bool:
    """Whether a collective of ``candidates`` on ``groups`` shares its time on
    ``fabric`` with other copies of it with failed parts (:func:`failure_times`)."""
    return _shared_times(fabric, candidates, groups) is not None


def _shared_times(fabric: Fabric, candidates: tuple[str, ...], groups: np.ndarray
                  ) -> Callable[[Fabric], dict[CollectiveKey, CollectiveTime]] | None:
    """The maker of the times :func:`failure_times` shares, None for none."""
    failed = _failed_tiers(fabric)
    members = groups.reshape(len(groups), -1)
    if failed is None or not len(members) or any(
            alg in UNSHARED_ALGORITHMS for alg in candidates):
        return None
    if "scaleup" not in failed and _each_in_one(fabric.derived(node_systems)[members]):
        return in_system_failure_times
    if not failed & set(SCALEUP_TIERS) and _each_in_one(
            fabric.derived(node_domains)[members]):
        return scaleout_failure_times
    return None


def _each_in_one(places: np.ndarray) -> bool:
    """Whether every row of ``places`` (a system or domain per member) is one place."""
    return bool(((places == places[:, :1]) & (places >= 0)).all())


@ignores_capacities
@ignores_failures
def node_systems(fabric: Fabric) -> np.ndarray:
    """Every node's system (-1: none), read-only, found once per fabric."""
    systems = fabric.node_arrays["system"].copy()
    systems.setflags(write=False)
    return systems


def _failed_tiers(fabric: Fabric) -> frozenset[str] | None:
    """The link tiers with a failed row on ``fabric``; None when nothing failed or the
    structured router does not cover it with its failures."""
    from topomodel.routing.sections import failed_tiers
    from topomodel.routing.structured import structured_supported

    if not fabric.derived(_any_failed) or structured_supported(fabric) is not None:
        return None
    return failed_tiers(fabric)


def _any_failed(fabric: Fabric) -> bool:
    return bool(fabric.link_arrays["failed"].any())
