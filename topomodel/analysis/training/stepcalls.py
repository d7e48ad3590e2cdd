"""The collectives of a training step (:func:`~topomodel.analysis.training.step.step_time`)
and their times on a fabric, in two halves:

- :func:`issued_calls`: what the step issues, the same in every rank order of a layout
  (names, kinds, sizes, communicator kinds, candidate algorithms);
- :func:`placed_calls`: those collectives in one rank order, each keyed by its
  communicators (:func:`~topomodel.analysis.training.stepshape.grid_key`) and timed
  with all groups of its kind at once, from the fabric's table of times when it has
  them (:func:`~topomodel.analysis.training.stepshape.collective_times`), else routed
  (or, for a bound, given what stands in for them).

:func:`step_calls` is the two in turn; a search that bounds many rank orders of one
layout makes the first half once (:mod:`topomodel.plan.orderbounds`).
"""

from __future__ import annotations

import functools
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np

from topomodel.analysis.assumptions import StepAssumptions, gradient_bucket_bytes
from topomodel.analysis.collectives.collective import fastest
from topomodel.analysis.collectives.timing import time_traffic
from topomodel.analysis.training.memory import stage_parameters
from topomodel.analysis.training.model import BYTES, attention_dims
from topomodel.analysis.training.stagework import Call
from topomodel.analysis.training.stepshape import (
    CollectiveKey,
    CollectiveTime,
    Shape,
    collective_times,
    failure_times,
    grid_key,
    grid_keys,
    node_domains,
    ranks_of,
    shape_of,
    shared_traffic,
    time_key,
)
from topomodel.fabric.tables import Fabric
from topomodel.inputs.parts import Model
from topomodel.traffic.algorithms import auto_candidates
from topomodel.traffic.collectives import collective_traffic
from topomodel.traffic.communicators import GroupBlocks, group_blocks, most_domains
from topomodel.traffic.layout import Layout, rank_groups
from topomodel.traffic.phases import Traffic, concurrent

Unrouted = Callable[[str, Callable[[], np.ndarray], float, tuple[Any, ...]], float]
"""What stands in for a collective not timed yet: (collective, a function giving its
groups, size in bytes, its key in :func:`collective_times`) -> seconds (``sendrecv``:
a row per sender and receiver, both directions)."""


# PLR0913: keyword-only options of an entry point, as networkx's; a record would hide them
def step_calls(fabric: Fabric, model: Model, layout: Layout,  # noqa: PLR0913
               assumptions: StepAssumptions | None = None, *, routing: str = "ecmp",
               seed: int = 0, unrouted: Unrouted | None = None, shape: Shape | None = None,
               issued: tuple[Issued, ...] | None = None) -> tuple[dict[str, Call], int]:
    """The collectives :func:`~topomodel.analysis.training.step.step_time` issues for
    ``layout``, each timed as the step times it when the fabric's table
    (:func:`collective_times`) has it; with
    ``unrouted``, the others are not routed but given ``unrouted``'s seconds (a bound,
    say) and left out of the table. Returns the calls and how many were not in it
    (``shape``: the layout's :func:`shape_of`, when known; ``issued``: its
    :func:`issued_calls`, when known: the same for every rank order)."""
    a = assumptions or StepAssumptions()
    shape = shape or shape_of(fabric, model, layout)
    if issued is None:
        issued = issued_calls(fabric, model, layout, a, shape.seq, shape.sizes,
                              shape.moe_sizes)
    missed: list[str] = []
    calls = placed_calls(fabric, layout, a, ranks_of(fabric)[:layout.world], issued,
                         routing=routing, seed=seed, unrouted=unrouted, missed=missed)
    return calls, len(missed)


@dataclass(frozen=True)
class Issued:
    """One collective the step issues, as every rank order of its layout issues it:
    its name in the step's calls, kind and collective (``sendrecv`` for the pipeline's
    exchange), the communicators it runs on (a :func:`~topomodel.traffic.layout.
    rank_groups` kind, or ``pp-pairs``), its size per call in bytes, the algorithms to
    try and its collective as the table of times names it (:data:`~topomodel.analysis.
    training.stepshape.CollectiveKey`: the pipeline's ``pp-exchange`` or
    ``pp-sendrecv``)."""

    name: str
    kind: str
    collective: str
    grid: str
    size_bytes: float
    candidates: tuple[str, ...]
    keyed: str


def issued_calls(fabric: Fabric, model: Model, layout: Layout, a: StepAssumptions,
                 seq: int, sizes: np.ndarray, moe_sizes: np.ndarray) -> tuple[Issued, ...]:
    """Every collective of the step in the order it runs them, as any rank order of
    ``layout`` issues them (nothing here reads the order): what :func:`placed_calls`
    places and times for one order."""
    act = BYTES[a.activation_dtype]
    tp = layout.tp
    tokens_mb = layout.micro_batch * seq // layout.cp  # tokens per microbatch per CP rank
    hidden_bytes = tokens_mb * model.hidden * act  # one activation tensor of a TP group
    out: list[Issued] = []
    ranks_of_grid = {"tp": tp, "cp": layout.cp, "ep": layout.ep,
                     "grad": layout.dp * layout.cp,
                     "expert_grad": layout.dp * layout.cp // layout.ep}

    def add(name: str, kind: str, collective: str, grid: str, size: float,
            algorithm: str = "auto") -> None:
        ranks_per_group = ranks_of_grid[grid]
        if size <= 0 or ranks_per_group < 2:
            return
        out.append(Issued(name, kind, collective, grid, size,
                          _candidates(fabric, collective, algorithm, ranks_per_group),
                          collective))

    if tp > 1:
        if layout.sequence_parallel:
            add("tp_ag", "tp", "allgather", "tp", hidden_bytes)
            add("tp_rs", "tp", "reducescatter", "tp", hidden_bytes)
        else:
            add("tp_ar", "tp", "allreduce", "tp", hidden_bytes)
            if layout.pp > 1 and layout.pp_scatter_gather:
                # the receiver of a scattered pipeline send gathers it over the TP group
                add("pp_sg", "pp", "allgather", "tp", hidden_bytes)
    if layout.cp > 1:
        hd, kv = attention_dims(model)
        kv_bytes = layout.micro_batch * seq * 2 * kv * hd * act // tp  # K and V, all ranks
        add("cp_ag", "cp", "allgather", "cp", kv_bytes)
        add("cp_rs", "cp", "reducescatter", "cp", kv_bytes)
    if layout.ep > 1 and model.is_moe:
        sp = tp if layout.sequence_parallel else 1
        per_rank = tokens_mb // sp * model.top_k * model.hidden * act
        add("ep", "ep", "alltoall", "ep", per_rank, "direct")
    if layout.pp > 1:
        scattered = layout.sequence_parallel or layout.pp_scatter_gather
        size = hidden_bytes / tp if scattered else hidden_bytes
        out.append(Issued("pp", "pp", "sendrecv", "pp-pairs", size, ("p2p",),
                          "pp-exchange" if _one_neighbour(layout) else "pp-sendrecv"))
    layers, moe_layers = sizes.sum(axis=1), moe_sizes.sum(axis=1)
    dense, experts = stage_parameters(model, layout, layers, moe_layers)
    grad = BYTES[a.grad_dtype]
    if layout.dp * layout.cp > 1:
        if layout.zero >= 3:
            per_layer = float(((dense + experts) / np.maximum(layers, 1)).max())
            add("zero3_ag", "zero3", "allgather", "grad", per_layer * BYTES[a.compute_dtype])
            add("zero3_rs", "zero3", "reducescatter", "grad", per_layer * grad)
        else:
            bucket = min(gradient_bucket_bytes(a, layout.dp * layout.cp, grad,
                                               overlapped=layout.dp_overlap),
                         float(dense.max()) * grad)
            add("dp", "dp", "reducescatter" if layout.zero else "allreduce", "grad", bucket)
            if layout.zero:
                add("dp_ag", "dp", "allgather", "grad", bucket)
    if layout.dp * layout.cp // layout.ep > 1 and model.is_moe and layout.zero < 3:
        # each expert's gradients are reduced over the ranks holding the same experts
        bucket = min(gradient_bucket_bytes(a, layout.dp * layout.cp // layout.ep, grad,
                                           overlapped=layout.dp_overlap),
                     float(experts.max()) * grad)
        add("edp", "edp", "reducescatter" if layout.zero else "allreduce", "expert_grad",
            bucket)
        if layout.zero:
            add("edp_ag", "edp", "allgather", "expert_grad", bucket)
    return tuple(out)


def _one_neighbour(layout: Layout) -> bool:
    """Whether the pipeline exchanges with one neighbour per call. Megatron-LM's 1F1B
    does (its steady phase alternates send_forward_recv_backward and
    send_backward_recv_forward), so an exchange is one pair in both directions, and two
    boundaries that share a stage never exchange at once; the interleaved schedule
    (send_forward_backward_recv_forward_backward) and ZB-H1 send to both neighbours at
    once."""
    return layout.interleave == 1 and layout.schedule == "1f1b"


# PLR0913: one computation's arrays and options passed on as they are
def placed_calls(fabric: Fabric, layout: Layout, a: StepAssumptions, ranks: np.ndarray,  # noqa: PLR0913
                 issued: tuple[Issued, ...], *, routing: str, seed: int,
                 unrouted: Unrouted | None = None, missed: list[str] | None = None
                 ) -> dict[str, Call]:
    """The collectives ``issued`` in ``layout``'s rank order, each timed per call with
    all groups of its kind at once (see :func:`step_calls` for ``unrouted``; the names
    it stood in for go to ``missed``)."""
    out: dict[str, Call] = {}
    cache = fabric.derived(collective_times)
    timing = time_key(a.time)
    keys = fabric.derived(grid_keys)
    placements: dict[str, tuple[Any, ...]] = {}  # by grid: several calls share one
    for call in issued:
        grid, size = call.grid, call.size_bytes
        placed = placements.get(grid)
        if placed is None:
            placed = placements[grid] = grid_key(fabric, layout, grid, keys)
        key = (call.keyed, call.candidates, size, placed, routing, seed, timing)
        found = cache.get(key)
        if found is not None:
            hit = found
        elif grid == "pp-pairs":
            hit = _pipeline_time(fabric, layout, a, ranks, key, unrouted, missed, cache)
        else:
            hit = _not_in_table(fabric, layout, a, ranks, call, key, unrouted, missed,
                                cache)
        out[call.name] = Call(call.kind, call.collective, hit[0], size, *hit[1:])
    return out


# PLR0913: placed_calls' state for one collective, passed on as it is
def _not_in_table(fabric: Fabric, layout: Layout, a: StepAssumptions,  # noqa: PLR0913
                  ranks: np.ndarray, call: Issued, key: CollectiveKey,
                  unrouted: Unrouted | None, missed: list[str] | None,
                  cache: dict[CollectiveKey, CollectiveTime]) -> CollectiveTime:
    """:func:`placed_calls`' time of ``call`` (not a pipeline exchange) where the
    fabric's table (``cache``) does not hold its ``key``: ``unrouted``'s stand-in (its
    name noted in ``missed``), or its fastest candidate routed and kept in the table."""
    name, collective, grid, size, candidates = (call.name, call.collective, call.grid,
                                                call.size_bytes, call.candidates)
    placed, routing, seed = key[3], key[4], key[5]

    def groups() -> np.ndarray:
        return rank_groups(ranks, layout, grid)

    if unrouted is not None:
        if missed is not None:
            missed.append(name)
        t_s = unrouted(collective, groups, size, key)
        return ("unrouted", t_s, 0.0, t_s, 0.0, False, "")
    grid_rows = groups()
    # a copy whose failures cannot reach this collective shares its time with the
    # copies that another failure of the same kind left it untouched on
    shared = failure_times(fabric, candidates, grid_rows)
    hit = shared.get(key)
    if hit is None:
        # checked once per grid, for every collective and size over it
        rows = checked_groups(fabric, ("grid", placed), grid_rows)

        def build(alg: str) -> Traffic:
            return shared_traffic(fabric, (collective, size, placed), alg, lambda: (
                collective_traffic(fabric, collective, rows, size, algorithm=alg)))

        alg, _, t, _ = fastest(fabric, build, candidates, routing=routing, seed=seed,
                               time_model=a.time)
        doms = fabric.derived(node_domains)[grid_rows]
        spills = bool(((doms != doms[:, :1]) | (doms < 0)).any())
        hit = shared[key] = (alg, t.time_s, t.latency_s, t.bandwidth_s, t.topology_s,
                             spills, t.measured)
    cache[key] = hit
    return hit


CHECKED_RANKS = 1 << 20
"""Ranks of the communicators :func:`checked_groups` keeps on a fabric while a search
keeps them (:func:`keeping_groups`; least recently used dropped first), a dozen grids
of 98k ranks. A plan comes back to a grid for each collective, size and ZeRO stage over
it, close together (the layouts of one cell)."""

_keeping_lock = threading.Lock()  # searches may run in threads (a dask cluster's)


def _searches(_: Fabric) -> list[int]:
    """How many searches keep the fabric's checked communicators now
    (:func:`keeping_groups`): a count per fabric, not a flag for the process, so a
    search that ends while another (another thread's) runs neither stops the other's
    keeping nor leaves keeping on after both."""
    return [0]


@contextmanager
def keeping_groups(fabric: Fabric) -> Iterator[None]:
    """Keep the communicators :func:`checked_groups` checks on ``fabric`` while the
    block runs (a plan's search), and drop them after. Outside it nothing is kept: the
    blocks carry what routing derives from them, which at 98k ranks held some 2 GB
    past a ``compare``'s steps (benchmarks/README.md, the session of 2026-12-05)."""
    searches = fabric.derived(_searches)
    with _keeping_lock:
        searches[0] += 1
    try:
        yield
    finally:
        with _keeping_lock:
            searches[0] -= 1
            if not searches[0]:
                fabric.derived(kept_groups).clear()
                fabric.derived(dropped_groups).clear()


def kept_groups(_: Fabric) -> OrderedDict[tuple[Any, ...], GroupBlocks]:
    """The communicators :func:`checked_groups` keeps on a fabric, by what names them:
    the fabric's own (not its copies': the blocks hold the fabric they were checked
    on, and their channels read its NICs)."""
    return OrderedDict()


def checked_groups(fabric: Fabric, named: tuple[Any, ...],
                   rows: np.ndarray | Callable[[], np.ndarray]) -> GroupBlocks:
    """:func:`~topomodel.traffic.communicators.group_blocks` of the communicators
    ``rows`` (a row per group, or a function giving them), which ``named`` names
    exactly (a :func:`~topomodel.analysis.training.stepshape.grid_key`, tagged),
    checked once per fabric and kept (:data:`CHECKED_RANKS`, within
    :func:`keeping_groups`) with what their blocks
    derive, none of which reads a size or a collective: their domain parts, the
    domains a group spans and their NCCL channels, found once for every collective,
    size and candidate over them (at 98k ranks, 20-30 ms a grid), for the step's
    routing and the bounds' latency floors alike."""
    if not fabric.derived(_searches)[0]:
        return group_blocks(fabric, rows if isinstance(rows, np.ndarray) else rows())
    kept = fabric.derived(kept_groups)
    found = kept.get(named)
    if found is not None:
        kept.move_to_end(named)
        return found
    # communicators dropped before are not checked again, nor the domains their
    # groups span found again (what ``nodes`` derives: a few ms a grid at 98k ranks)
    dropped_before = fabric.derived(dropped_groups)
    spans = dropped_before.get(named)
    found = kept[named] = group_blocks(fabric, rows if isinstance(rows, np.ndarray)
                                       else rows(), checked=spans is not None)
    for k, nodes in (spans or {}).items():
        found.block(k).cache["nodes"] = nodes
    span = fabric.derived(grid_spans).get(named[1]) if named[0] == "grid" else None
    if span is not None and len(found.blocks) == 1:  # the domains its groups span
        found.block(0).cache.setdefault("nodes", span[1])
    held = sum(int(block.size) for blocks in kept.values() for block in blocks.blocks)
    while held > CHECKED_RANKS and len(kept) > 1:
        name, dropped = kept.popitem(last=False)
        held -= sum(int(block.size) for block in dropped.blocks)
        views = [dropped.block(k).cache for k in range(len(dropped.blocks))]
        dropped_before[name] = {k: v["nodes"] for k, v in enumerate(views) if "nodes" in v}
    return found


def grid_spans(_: Fabric) -> dict[tuple[Any, ...], tuple[int, int]]:
    """Per communicators' key (:func:`~topomodel.analysis.training.stepshape.grid_key`)
    on a fabric: the ranks of a group and the most scale-up domains one spans."""
    return {}


def grid_span(fabric: Fabric, key: tuple[Any, ...], rows: Callable[[], np.ndarray]
              ) -> tuple[int, int]:
    """The ranks of a group of the communicators ``rows()`` (a row per group, all of one
    size), which ``key`` names, and the most scale-up domains one spans (a rank outside
    any domain counts as its own, as a collective's shape counts them:
    ``GroupView.nodes``), found once per fabric (a few integers each) and read from, or
    given to, the communicators :func:`checked_groups` keeps under that key."""
    kept = fabric.derived(grid_spans)
    found = kept.get(key)
    if found is None:
        checked = fabric.derived(kept_groups).get(("grid", key))
        if checked is not None and len(checked.blocks) == 1:
            cache, groups = checked.block(0).cache, checked.blocks[0]
        else:
            cache, groups = {}, rows()
        if "nodes" not in cache:
            cache["nodes"] = most_domains(fabric, groups)
        found = kept[key] = (int(groups.shape[1]), int(cache["nodes"]))
    return found


def dropped_groups(_: Fabric) -> dict[tuple[Any, ...], dict[int, int]]:
    """Of the communicators :func:`checked_groups` dropped from a fabric's
    :func:`kept_groups` (checked, so not checked again when asked again), by what names
    them: per block the most scale-up domains a group spans (``GroupView.nodes``),
    where it was found. A few integers each."""
    return {}


def _pipeline_time(fabric: Fabric, layout: Layout, a: StepAssumptions,
                   ranks: np.ndarray, key: CollectiveKey, unrouted: Unrouted | None,
                   missed: list[str] | None, cache: dict[CollectiveKey, CollectiveTime]
                   ) -> CollectiveTime:
    """The pipeline's exchange in ``layout``'s rank order, as :data:`~topomodel.
    analysis.training.stepshape.CollectiveTime`, where the fabric's table (``cache``)
    does not hold its ``key`` (:func:`placed_calls` looks first: a timed exchange
    makes nothing of its pairs)."""
    size, routing, seed = key[2], key[4], key[5]
    one_neighbour = _one_neighbour(layout)

    def adjacent_stages() -> np.ndarray:  # (groups, p - 1, 2)
        stages = rank_groups(ranks, layout, "pp")
        return np.stack([stages[:, :-1], stages[:, 1:]], axis=2)

    def pipeline_pairs() -> np.ndarray:
        pairs = adjacent_stages().reshape(-1, 2)
        if layout.interleave > 1:  # the last stage hands the next chunk to the first
            stages = rank_groups(ranks, layout, "pp")
            pairs = np.concatenate([pairs, stages[:, [-1, 0]]])
        return pairs

    def exchanges() -> list[np.ndarray]:
        if not one_neighbour:
            return [pipeline_pairs()]
        adjacent = adjacent_stages()
        return [adjacent[:, parity::2].reshape(-1, 2) for parity in (0, 1)
                if adjacent.shape[1] > parity]

    if unrouted is not None:
        if missed is not None:
            missed.append("pp")
        # the slowest exchange, each one both ways at once, as the step times them;
        # the pairs are made only for a bound not found yet
        def both_ways(i: int) -> np.ndarray:
            x = exchanges()[i]
            return np.concatenate([x, x[:, ::-1]])

        t_s = unrouted("sendrecv", functools.partial(both_ways, 0), size, (*key, 0))
        if one_neighbour and layout.pp > 2:  # the other parity's exchange: the larger
            t_s = max(t_s, unrouted("sendrecv", functools.partial(both_ways, 1), size,
                                    (*key, 1)))
        return ("unrouted", t_s, 0.0, t_s, 0.0, False, "")
    pairs = pipeline_pairs()
    shared = failure_times(fabric, ("p2p",), pairs)
    hit = shared.get(key)
    if hit is None:
        times = [time_traffic(fabric, shared_traffic(
            fabric, (*key[:4], i), "p2p", functools.partial(
                _both_ways, fabric, x, size)), routing=routing, seed=seed,
            time_model=a.time) for i, x in enumerate(exchanges())]
        t = max(times, key=lambda r: r.time_s)
        doms = fabric.derived(node_domains)[pairs]
        hit = shared[key] = ("p2p", t.time_s, t.latency_s, t.bandwidth_s,
                             t.topology_s, bool((doms[:, 0] != doms[:, 1]).any()),
                             t.measured)
    cache[key] = hit
    return hit


def _both_ways(fabric: Fabric, pairs: np.ndarray, size: float) -> Traffic:
    """One pipeline exchange: ``size`` bytes each way between every pair at once."""
    return concurrent([collective_traffic(fabric, "sendrecv", x, size, algorithm="p2p")
                       for x in (pairs, pairs[:, ::-1])])


def _candidates(fabric: Fabric, collective: str, requested: str, ranks: int
                ) -> tuple[str, ...]:
    """Algorithms to try for a collective of the step (the fastest is kept): ``auto``'s,
    as route's (:func:`~topomodel.traffic.algorithms.auto_candidates`), found once per
    fabric, collective and group size."""
    if requested != "auto":
        return (requested,)
    return fabric.derived(auto_candidates, collective, ranks)
