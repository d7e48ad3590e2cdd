"""What each pipeline operation does, and how long it takes with the communication its
schedule can hide.

An operation (the F, B or W pass of one microbatch through one model chunk on one
stage) is its layers' compute (:mod:`~topomodel.analysis.training.compute`) plus the
collectives it issues: tensor-parallel gathers and scatters (or all-reduces), the
context-parallel K/V ring, the expert all-to-alls and ZeRO-3 weight gathers. Each
collective is hidden only behind the compute that can run beside it, never behind more
than that compute, and not for free: while it runs, its kernels take ``comm_sm_share``
of the SMs (DeepSeek-V3 gives 20 of the H800's 132 to its communication kernels, arXiv
2412.19437 section 3.2.2; NCCL likewise runs each channel of a ring on one SM), so the
compute beside it runs at 1 - share. Of X seconds of communication behind C seconds of
compute, ``max(X - C, share x X)`` are exposed:

- **TP** (``Layout.tp_overlap``): ``none``, every collective exposed. ``backward``
  (Megatron-LM, as Korthikanti et al. 2022 describe it in sections 4.2.2 and 6.2):
  forward collectives exposed; in the backward pass the reduce-scatter (or all-reduce)
  of a column-parallel layer's input gradient runs behind that layer's weight-gradient
  GEMM, and the extra all-gather of its sequence-parallel input behind its
  input-gradient GEMM; the gradient gathers in front of the row-parallel layers are
  exposed. A zero-bubble schedule moves the weight-gradient GEMMs to W, so they hide
  nothing in B. ``gemm`` (Transformer Engine's comm-GEMM overlap): every collective is
  pipelined with the GEMM it feeds or drains.
- **CP** ring attention: passing K/V forward, and K/V plus their gradients backward,
  runs behind the attention core of the same layer.
- **EP**: dispatch and combine block the experts (exposed), unless
  ``ep_overlap="dualpipe"``: DeepSeek-V3 (arXiv 2412.19437, section 3.2.1) pairs a
  forward and a backward chunk of different microbatches and runs the all-to-alls of
  each beside the other's compute, on ``comm_sm_share`` of the SMs (20 of the H800's
  132, section 3.2.2), which slows that compute by 1 / (1 - share). Only operations the
  schedule pairs (its steady phase) are overlapped; warm-up and cool-down ones are not.
- **ZeRO-3** weight gathers (and gradient scatters) run one layer ahead, behind the
  compute of the layer before, when ``dp_overlap``.

Under ``gemm`` with sequence parallelism, Transformer Engine's userbuffers kernels take
the SMs its defaults give them (``initialize_ub``'s ``get_default_config``,
transformer_engine/pytorch/module/base.py, TransformerEngine d0067d0), not
``comm_sm_share``: the all-gathers in front of QKV and FC1 and the input-gradient
gathers in front of the projection and FC2 are ``ring_exchange`` (copy-engine
point-to-point, 1 SM, :data:`TE_RING_EXCHANGE_SMS`); the forward reduce-scatters
behind the projection and FC2 are ``pipeline`` with ``set_sm_margin``, so the GEMM runs
on the SMs left for its whole length (:data:`TE_PIPELINE_SMS`), which this module adds
to compute; the backward gathers and scatters beside the QKV and FC1 gradient GEMMs
are ``bulk``, 16 SMs while they run (:data:`TE_BULK_SMS`). SM counts are over
:data:`TE_SMS`.

Recomputation repeats work inside B: a full one the whole forward with its
collectives, a selective one the attention core (and its K/V gathers).
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

import numpy as np

from topomodel.analysis.opsums import ChunkMap, chunk_map, chunks_of, op_index, stage_sums
from topomodel.analysis.training.compute import EdgeTimes, LayerTimes
from topomodel.analysis.training.pipeline import B, F, Schedule, W
from topomodel.kept import Kept
from topomodel.traffic.layout import Layout

COMPUTE, IMBALANCE = "compute", "imbalance"

TE_SMS = 132
"""SMs of the H100 SXM (NVIDIA H100 Tensor Core GPU Architecture whitepaper, 132 SMs on
SXM5), the GPU Transformer Engine's userbuffers defaults are counted against; the same
shares are assumed on other accelerators."""

TE_RING_EXCHANGE_SMS = 1
"""SMs of a userbuffers ``ring_exchange`` overlap: TE's default ``num_sm`` 1, the
transfers on copy engines (``use_ce`` True; base.py ``get_default_config``)."""

TE_PIPELINE_SMS = 16
"""SMs of a userbuffers ``pipeline`` reduce-scatter: TE's default ``num_sm`` 16 with
``set_sm_margin`` True, so the GEMM it drains runs on the rest for its whole length
(base.py ``get_default_config``; NeMo's tuned H100 configs give 8 to 24)."""

TE_BULK_SMS = 16
"""SMs of a userbuffers ``bulk`` overlap: TE's default ``num_sm`` 16, no SM margin, so it
competes with the GEMM beside it while it runs (base.py ``get_default_config``; NeMo's
tuned H100 configs give 2 to 24)."""


@dataclass(frozen=True)
class Call:
    """One collective of the step, timed once with every group of its kind at once:
    seconds per call and their split; ``measured`` names the measured curve that timed
    it (empty: the model)."""

    kind: str
    collective: str
    algorithm: str
    size_bytes: float
    time_s: float
    latency_s: float
    bandwidth_s: float
    topology_s: float
    spills: bool
    measured: str = ""

    def timed(self, time_s: float, latency_s: float, bandwidth_s: float,
              topology_s: float) -> Call:
        """This call with other times, seconds: what ``dataclasses.replace`` of those
        four fields gives (a bound makes one per collective of every layout it
        screens), made directly."""
        return Call(self.kind, self.collective, self.algorithm, self.size_bytes, time_s,
                    latency_s, bandwidth_s, topology_s, self.spills, self.measured)


Term = tuple[tuple[str, str], float, float, float, float]
"""How one operation's time grows with a collective's: ``(key, count, behind_s, share,
weight)`` adds ``weight x max(t count - behind_s, share x t count)`` seconds for a call
time of ``t`` seconds (an imbalance that grows with it: behind 0, share 1)."""


class Work:
    """Parts of one operation, seconds: compute, imbalance, and per collective
    ``(kind, collective)`` the time it takes (``issued``) and the part not hidden
    (``exposed``). ``share`` is the SM share a collective running beside compute takes.
    With ``record``, ``terms`` lists each collective issued as a :data:`Term`, with
    the compute it was hidden behind (what a bound reads; the times are unchanged)."""

    def __init__(self, share: float = 0.0, *, record: bool = False) -> None:
        self.share = share
        self.parts: dict[str, float] = defaultdict(float)
        self.issued: dict[tuple[str, str], float] = defaultdict(float)
        self.calls: dict[tuple[str, str], float] = defaultdict(float)
        self.exposed: dict[tuple[str, str], float] = defaultdict(float)
        self.terms: list[Term] | None = [] if record else None

    def compute(self, seconds: float) -> None:
        self.parts[COMPUTE] += seconds

    def imbalance(self, seconds: float) -> None:
        self.parts[IMBALANCE] += seconds

    def comm(self, call: Call | None, behind: float = 0.0, count: float = 1.0, *,
             share: float | None = None) -> float:
        """Issue ``count`` calls hidden behind ``behind`` seconds of compute, their
        kernels taking ``share`` of the SMs (default: this work's); returns the compute
        they leave free to hide another collective."""
        if call is None or count <= 0:
            return behind
        share = self.share if share is None else share
        key = (call.kind, call.collective)
        if self.terms is not None:
            self.terms.append((key, count, behind, share, 1.0))
        total = call.time_s * count
        self.issued[key] += total
        self.calls[key] += count
        if behind <= 0:
            self.exposed[key] += total
            return 0.0
        self.exposed[key] += max(total - behind, share * total)
        return max(0.0, behind - total * (1 - share))

    def comm_with_margin(self, call: Call | None, gemm_s: float, share: float) -> None:
        """Issue ``call`` pipelined with a GEMM of ``gemm_s`` seconds that leaves
        ``share`` of the SMs to it for its whole length (TE's ``set_sm_margin``): the
        GEMM takes gemm_s / (1 - share), the excess added to compute, and the call
        hides behind all of it on SMs of its own."""
        if call is None or gemm_s <= 0:
            self.comm(call)
            return
        slowed = gemm_s / (1 - share)
        self.compute(slowed - gemm_s)
        self.comm(call, slowed, share=0.0)

    def grows(self, call: Call, per_s: float) -> None:
        """Record (with ``record``) that this work's imbalance grows by ``per_s``
        seconds per second of ``call``'s time; the times are unchanged."""
        if self.terms is not None:
            self.terms.append(((call.kind, call.collective), per_s, 0.0, 1.0, 1.0))

    def add(self, other: Work, times: float = 1.0) -> None:
        if self.terms is not None and other.terms:
            self.terms.extend((k, c, b, s, w * times) for k, c, b, s, w in other.terms)
        for key, value in other.parts.items():
            self.parts[key] += value * times
        for store, source in ((self.issued, other.issued), (self.calls, other.calls),
                              (self.exposed, other.exposed)):
            for k, v in source.items():
                store[k] += v * times

    @property
    def duration_s(self) -> float:
        return (self.parts[COMPUTE] + self.parts[IMBALANCE]
                + sum(self.exposed.values()))


def _mlp(g: dict[str, float], first: bool) -> float:
    names = ("fc1", "experts1", "shared1", "router") if first else (
        "fc2", "experts2", "shared2")
    return sum(g.get(n, 0.0) for n in names)


def layer_work(lt: LayerTimes, calls: dict[str, Call], layout: Layout, *, moe: bool,
               hot: float, split_w: bool, share: float, record: bool = False
               ) -> tuple[Work, Work, Work]:
    """The F, B and W work of one layer for one microbatch (``record``: see
    :class:`Work`)."""
    sp = layout.sequence_parallel
    mode = layout.tp_overlap
    f, b, w = (Work(share, record=record) for _ in range(3))
    ep = calls.get("ep")
    ring, pipe = TE_RING_EXCHANGE_SMS / TE_SMS, TE_PIPELINE_SMS / TE_SMS

    def forward(work: Work) -> None:
        work.compute(lt.forward_s)
        gemm = mode == "gemm"
        if sp and gemm:  # Transformer Engine's userbuffers (module docstring)
            work.comm(calls.get("tp_ag"), lt.fwd["qkv"], share=ring)
            work.comm_with_margin(calls.get("tp_rs"), lt.fwd["proj"], pipe)
            work.comm(calls.get("tp_ag"), _mlp(lt.fwd, True), share=ring)
            work.comm_with_margin(calls.get("tp_rs"), _mlp(lt.fwd, False), pipe)
        elif sp:
            for name in ("tp_ag", "tp_rs", "tp_ag", "tp_rs"):
                work.comm(calls.get(name))
        else:
            work.comm(calls.get("tp_ar"), lt.fwd["proj"] if gemm else 0.0)
            work.comm(calls.get("tp_ar"), _mlp(lt.fwd, False) if gemm else 0.0)
        work.comm(calls.get("cp_ag"), lt.core_fwd)
        if moe and ep:
            work.comm(ep, 0.0, 2)
            work.imbalance((hot - 1) * (lt.experts_fwd + 2 * ep.time_s))
            work.grows(ep, (hot - 1) * 2)
        z = calls.get("zero3_ag")
        if z:
            work.comm(z, lt.forward_s if layout.dp_overlap else 0.0)

    forward(f)
    # backward: input gradients in B, weight gradients in B or (zero-bubble) in W
    wgrad = lt.weight_grad_s
    b.compute(lt.backward_s - (wgrad if split_w else 0.0))
    if split_w:
        w.compute(wgrad)
    if layout.recompute == "full":
        forward(b)
    elif layout.recompute == "selective":
        b.compute(lt.core_fwd)
        b.comm(calls.get("cp_ag"), lt.core_fwd)
    _tp_backward(b, lt, calls, layout, {} if split_w else lt.wgrad)
    if calls.get("cp_ag"):
        left = b.comm(calls.get("cp_ag"), lt.core_bwd)
        b.comm(calls.get("cp_rs"), left)
    if moe and ep:
        b.comm(ep, 0.0, 2)
        experts_wgrad = lt.wgrad.get("experts1", 0.0) + lt.wgrad.get("experts2", 0.0)
        b_experts = lt.experts_bwd - (experts_wgrad if split_w else 0.0)
        b.imbalance((hot - 1) * (b_experts + 2 * ep.time_s))
        b.grows(ep, (hot - 1) * 2)
        if split_w:
            w.imbalance((hot - 1) * experts_wgrad)
    if calls.get("zero3_ag"):
        left = b.comm(calls.get("zero3_ag"), lt.backward_s if layout.dp_overlap else 0.0)
        b.comm(calls.get("zero3_rs"), left)
    return f, b, w


def _tp_backward(b: Work, lt: LayerTimes, calls: dict[str, Call], layout: Layout,
                 wg: dict[str, float]) -> None:
    """The TP collectives of one layer's backward pass, hidden as ``tp_overlap`` says
    (``wg``: the weight-gradient GEMMs B runs, none under a zero-bubble schedule)."""
    sp, mode = layout.sequence_parallel, layout.tp_overlap
    ring, bulk = TE_RING_EXCHANGE_SMS / TE_SMS, TE_BULK_SMS / TE_SMS
    if sp:
        gemm = mode == "gemm"
        back = mode == "backward"
        # under TE's overlap, its userbuffers' SMs (module docstring); else the step's
        ring_share = ring if gemm else None
        bulk_share = bulk if gemm else None
        # grad of the output
        b.comm(calls.get("tp_ag"), lt.dgrad["proj"] if gemm else 0.0, share=ring_share)
        b.comm(calls.get("tp_ag"), _mlp(lt.dgrad, False) if gemm else 0.0,
               share=ring_share)
        # the column-parallel layers' input gradients, scattered
        b.comm(calls.get("tp_rs"), lt.dgrad["qkv"] if gemm else (
            wg.get("qkv", 0.0) if back else 0.0), share=bulk_share)
        b.comm(calls.get("tp_rs"), _mlp(lt.dgrad, True) if gemm else (
            _mlp(wg, True) if back else 0.0), share=bulk_share)
        if layout.recompute != "full":  # the sequence-parallel inputs, gathered again
            b.comm(calls.get("tp_ag"), lt.wgrad["qkv"] if gemm else (
                lt.dgrad["qkv"] if back else 0.0), share=bulk_share)
            b.comm(calls.get("tp_ag"), _mlp(lt.wgrad, True) if gemm else (
                _mlp(lt.dgrad, True) if back else 0.0), share=bulk_share)
    else:
        hide = mode in ("backward", "gemm")
        b.comm(calls.get("tp_ar"), wg.get("qkv", 0.0) if hide else 0.0)
        b.comm(calls.get("tp_ar"), _mlp(wg, True) if hide else 0.0)


def edge_work(edges: EdgeTimes, calls: dict[str, Call], layout: Layout, *,
              first: bool, last: bool, split_w: bool, record: bool = False
              ) -> tuple[Work, Work, Work]:
    """The embedding's work (first stage) and the output layer's (last stage)."""
    # their collectives hide behind nothing
    f, b, w = (Work(record=record) for _ in range(3))
    sp = layout.sequence_parallel
    if first:
        f.compute(edges.embed_fwd)
        f.comm(calls.get("tp_rs" if sp else "tp_ar"))  # the vocabulary-parallel lookup
        b.compute(edges.embed_bwd)
        b.comm(calls.get("tp_ag") if sp else None)
    if last:
        f.compute(edges.head_fwd)
        f.comm(calls.get("tp_ag") if sp else None)  # the whole sequence for the logits
        b.compute(edges.head_bwd)
        (w if split_w else b).compute(edges.head_wgrad)
        b.comm(calls.get("tp_rs" if sp else "tp_ar"))
    return f, b, w


@dataclass(frozen=True)
class OpWork:
    """Per operation of a schedule (arrays of shape (p, n)): its duration, and the parts
    it is made of, for the step's breakdown."""

    duration_s: np.ndarray
    compute_s: np.ndarray
    imbalance_s: np.ndarray
    exposed_s: dict[tuple[str, str], np.ndarray]
    issued_s: dict[tuple[str, str], np.ndarray]
    calls: dict[tuple[str, str], np.ndarray]


def op_work(s: Schedule, works: list[list[list[Work]]], *, dualpipe: bool,
            comm_sm_share: float) -> OpWork:
    """Every operation's work from ``works[kind][stage][chunk]``. With ``dualpipe``, the
    F and B of each steady-phase pair overlap their all-to-alls with the pair's compute,
    which runs on 1 - ``comm_sm_share`` of the SMs: the pair takes
    max(compute / (1 - share), all-to-alls), the excess over its plain compute split
    between the two by compute (and counted as exposed EP time)."""
    p, v = s.p, s.v
    keys = sorted({k for kind in works for row in kind for wk in row for k in wk.exposed})

    # every figure of every (kind, stage, chunk) in one pass, then per operation (p, n)
    flat = [wk for kind in works for row in kind for wk in row]
    columns = [[wk.parts[COMPUTE] for wk in flat], [wk.parts[IMBALANCE] for wk in flat]]
    for key in keys:
        columns += [[wk.exposed.get(key, 0.0) for wk in flat],
                    [wk.issued.get(key, 0.0) for wk in flat],
                    [wk.calls.get(key, 0.0) for wk in flat]]
    per_op = np.array(columns, dtype=float).reshape(len(columns), 3, p, v)[
        :, s.kind, np.arange(p)[:, None], s.chunk]
    compute, imbalance = per_op[0], per_op[1]
    exposed = {k: per_op[2 + 3 * i] for i, k in enumerate(keys)}
    issued = {k: per_op[3 + 3 * i] for i, k in enumerate(keys)}
    calls = {k: per_op[4 + 3 * i] for i, k in enumerate(keys)}
    ep_keys = [k for k in keys if k[0] == "ep"]
    if dualpipe and ep_keys:
        # a pair is a steady-phase F and the B right after it on the same stage
        starts = (s.paired[:, :-1] & s.paired[:, 1:] & (s.kind[:, :-1] == F)
                  & (s.kind[:, 1:] == B))
        rows, cols = np.nonzero(starts)
        c_pair = compute[rows, cols] + compute[rows, cols + 1]
        e_pair = sum(issued[k][rows, cols] + issued[k][rows, cols + 1] for k in ep_keys)
        extra = np.maximum(c_pair / (1 - comm_sm_share), e_pair) - c_pair
        share = np.divide(compute[rows, cols], c_pair, out=np.full(len(rows), 0.5),
                          where=c_pair > 0)
        for k in ep_keys:
            weight = np.divide(issued[k][rows, cols] + issued[k][rows, cols + 1], e_pair,
                               out=np.zeros(len(rows)), where=e_pair > 0)
            exposed[k][rows, cols] = extra * share * weight
            exposed[k][rows, cols + 1] = extra * (1 - share) * weight
    duration = compute + imbalance + sum(exposed.values(), np.zeros_like(compute))
    return OpWork(duration, compute, imbalance, exposed, issued, calls)


KEPT_CHUNK_WORKS = 4096
"""Sets of layer and edge works :func:`chunk_work` keeps (all dropped when full), by
what they read: the layer and edge times, the collectives' times, the layout's overlap,
sequence parallelism and recomputation, and the options. A plan asks for the chunk
works of every layout it bounds (the same layer times and calls for every pipeline
depth and ZeRO stage, the same idle calls for every rank order); each set is at most
18 works of a few hundred bytes each, with its chunks' figures about 12 kB, so some
50 MB when full. The 98k plan (Llama 3 70B, default space) asks 150k times for 21k
distinct sets: 40k made at 512, 27k at 4,096 (benchmarks/README.md, plan60)."""


@dataclass
class Chunks:
    """What :func:`chunk_work` keeps for one key (in a :class:`~topomodel.kept.Kept`,
    which holds the times it was made from): the F, B and W work of one layer (dense;
    MoE or None) and of the embedding and output layer by (first, last). The chunks made of
    them are not kept: there are many, each used by few layouts, and kept they cost
    the garbage collector more than they save."""

    per: dict[bool, tuple[Work, Work, Work]]
    edges: dict[tuple[bool, bool], tuple[Work, Work, Work]]
    # per chunk (chunks_of' key): its F, B, W durations, then computes
    rows: dict[tuple[int, int, bool, bool], list[float]] = dataclasses.field(
        default_factory=dict)
    # per partition (ChunkMap.key): its distinct chunks' rows, flattened
    figures: dict[tuple[Any, ...], np.ndarray] = dataclasses.field(default_factory=dict)


_CHUNKS: Kept[Chunks] = Kept(KEPT_CHUNK_WORKS)


def forget_chunk_works() -> None:
    """Drop every chunk work :func:`chunk_work` keeps (the next call makes its works
    afresh)."""
    _CHUNKS.clear()


# PLR0913: keyword-only options of an entry point, as networkx's; a record would hide them
def chunk_work(lt_dense: LayerTimes, lt_moe: LayerTimes | None, edges: EdgeTimes,  # noqa: PLR0913
               calls: dict[str, Call], layout: Layout, dense_layers: np.ndarray,
               moe_layers: np.ndarray, *, hot: float, split_w: bool, share: float,
               record: bool = False) -> list[list[list[Work]]]:
    """``works[kind][stage][chunk]``: the F, B and W work of every model chunk, its
    dense and MoE layers plus the embedding or output layer where it holds them
    (chunks alike share one :class:`Work`: read it, do not add to it; ``record``: see
    :class:`Work`). The works of one layer and of the ends are kept by what they read
    (:data:`KEPT_CHUNK_WORKS`): a later call with the same times, calls and options
    builds its chunks from the same objects."""
    kept = kept_chunks(lt_dense, lt_moe, edges, calls, layout, hot=hot, split_w=split_w,
                       share=share, record=record)
    p = dense_layers.shape[0]
    works: list[list[list[Work]]] = [[[] for _ in range(p)] for _ in range(3)]
    # chunks with the same layers and ends do the same work: made once, shared (read-only)
    made: dict[tuple[int, int, bool, bool], tuple[Work, Work, Work]] = {}
    for st, what in chunks_of(dense_layers, moe_layers):
        chunk = made.get(what)
        if chunk is None:
            ends = chunk_ends(kept, what, edges, calls, layout, split_w=split_w,
                              record=record)
            chunk = made[what] = _chunk(kept.per, ends, what, record=record)
        for kind in (F, B, W):
            works[kind][st].append(chunk[kind])
    return works


def chunk_ends(kept: Chunks, what: tuple[int, int, bool, bool], edges: EdgeTimes,
               calls: dict[str, Call], layout: Layout, *, split_w: bool, record: bool
               ) -> tuple[Work, Work, Work]:
    """The work of a chunk's ends (the embedding's input, the output), kept in ``kept``
    by which of them it holds."""
    ends = kept.edges.get(what[2:])
    if ends is None:
        ends = kept.edges[what[2:]] = edge_work(edges, calls, layout, first=what[2],
                                                last=what[3], split_w=split_w, record=record)
    return ends


# PLR0913: chunk_work's arguments, passed on as they are
def kept_chunks(lt_dense: LayerTimes, lt_moe: LayerTimes | None, edges: EdgeTimes,  # noqa: PLR0913
                calls: dict[str, Call], layout: Layout, *, hot: float, split_w: bool,
                share: float, record: bool) -> Chunks:
    """The layer works :func:`chunk_work` keeps for its arguments, made if not kept."""
    key = (id(lt_dense), id(lt_moe), id(edges),
           tuple((n, c.kind, c.collective, c.time_s) for n, c in calls.items()),
           layout.sequence_parallel, layout.tp_overlap, layout.recompute,
           layout.dp_overlap, hot, split_w, share, record)

    def make() -> Chunks:
        per = {False: layer_work(lt_dense, calls, layout, moe=False, hot=hot,
                                 split_w=split_w, share=share, record=record)}
        if lt_moe is not None:
            per[True] = layer_work(lt_moe, calls, layout, moe=True, hot=hot,
                                   split_w=split_w, share=share, record=record)
        return Chunks(per, {})

    return _CHUNKS.get(key, (lt_dense, lt_moe, edges), make)


# PLR0913: chunk_work's arguments, passed on as they are
def chunk_durations(lt_dense: LayerTimes, lt_moe: LayerTimes | None, edges: EdgeTimes,  # noqa: PLR0913
                    calls: dict[str, Call], layout: Layout, dense_layers: np.ndarray,
                    moe_layers: np.ndarray, *, hot: float, split_w: bool, share: float
                    ) -> tuple[np.ndarray, np.ndarray]:
    """Per kind, stage and chunk (arrays (3, p, v)): the duration and the compute of
    the work :func:`chunk_work` gives with the same arguments, each the same float
    :func:`op_work` reads from it (the same sums in the same order), without making
    the chunks' :class:`Work`. What a bound with few collectives timed reads of a
    layout; not for ``ep_overlap="dualpipe"``, whose pairs :func:`op_work` changes."""
    chunks, figures = _distinct_figures(lt_dense, lt_moe, edges, calls, layout,
                                        dense_layers, moe_layers, hot=hot,
                                        split_w=split_w, share=share)
    p, v = dense_layers.shape
    per_chunk = figures.reshape(-1, 6)[chunks.inverse].reshape(p, v, 6).transpose(2, 0, 1)
    return per_chunk[:3], per_chunk[3:]


# PLR0913: chunk_work's arguments, passed on as they are
def op_durations(lt_dense: LayerTimes, lt_moe: LayerTimes | None, edges: EdgeTimes,  # noqa: PLR0913
                 calls: dict[str, Call], layout: Layout, dense_layers: np.ndarray,
                 moe_layers: np.ndarray, sched: Schedule, *, hot: float, split_w: bool,
                 share: float) -> tuple[np.ndarray, np.ndarray]:
    """Every operation of ``sched`` (arrays (p, n)): :func:`chunk_durations`' duration
    and compute at its kind, stage and chunk, read from the chunks' figures in one step
    (the same floats :func:`op_work` gives it). The distinct chunks of the partition
    (:func:`~topomodel.analysis.opsums.chunk_map`) and where each operation reads its figures
    among theirs (:func:`~topomodel.analysis.opsums.op_index`) are found once, so a layout costs
    its distinct chunks' figures (kept with the layer works) and one gather."""
    chunks, figures = _distinct_figures(lt_dense, lt_moe, edges, calls, layout,
                                        dense_layers, moe_layers, hot=hot,
                                        split_w=split_w, share=share)
    index = op_index(sched, chunks)
    return figures.take(index), figures[3:].take(index)


# PLR0913: chunk_work's arguments, passed on as they are
def op_sums(lt_dense: LayerTimes, lt_moe: LayerTimes | None, edges: EdgeTimes,  # noqa: PLR0913
            calls: dict[str, Call], layout: Layout, dense_layers: np.ndarray,
            moe_layers: np.ndarray, sched: Schedule, *, hot: float, split_w: bool,
            share: float) -> tuple[np.ndarray, np.ndarray]:
    """Per stage (p,), the sums of :func:`op_durations`' duration and compute, bit for
    bit their ``sum(axis=1)``: on a long schedule through the distinct blocks numpy
    sums a row in (:mod:`topomodel.analysis.opsums`, found once per schedule and partition),
    without the (p, n) operations."""
    chunks, figures = _distinct_figures(lt_dense, lt_moe, edges, calls, layout,
                                        dense_layers, moe_layers, hot=hot,
                                        split_w=split_w, share=share)
    return stage_sums(sched, chunks, figures)


# PLR0913: chunk_work's arguments, passed on as they are
def _distinct_figures(lt_dense: LayerTimes, lt_moe: LayerTimes | None,  # noqa: PLR0913
                      edges: EdgeTimes, calls: dict[str, Call], layout: Layout,
                      dense_layers: np.ndarray, moe_layers: np.ndarray, *, hot: float,
                      split_w: bool, share: float) -> tuple[ChunkMap, np.ndarray]:
    """The partition's :class:`ChunkMap` and its distinct chunks' figures, row by row
    (F, B, W durations, then computes; flattened), kept with the layer works."""
    kept = kept_chunks(lt_dense, lt_moe, edges, calls, layout, hot=hot, split_w=split_w,
                       share=share, record=False)
    chunks = chunk_map(dense_layers, moe_layers)
    figures = kept.figures.get(chunks.key)
    if figures is None:
        figures = kept.figures[chunks.key] = np.array(
            [_chunk_row(kept, what, edges, calls, layout, split_w=split_w)
             for what in chunks.whats], dtype=float).ravel()
    return chunks, figures


def _chunk_row(kept: Chunks, what: tuple[int, int, bool, bool], edges: EdgeTimes,
               calls: dict[str, Call], layout: Layout, *, split_w: bool) -> list[float]:
    """The figures (F, B and W durations, then computes; :func:`_chunk_figures`) of the
    chunk ``what``, kept in ``kept.rows``."""
    row = kept.rows.get(what)
    if row is None:
        ends = chunk_ends(kept, what, edges, calls, layout, split_w=split_w, record=False)
        durations, computes = _chunk_figures(kept.per, ends, what)
        row = kept.rows[what] = durations + computes
    return row


def _chunk_figures(per: dict[bool, tuple[Work, Work, Work]], edge: tuple[Work, Work, Work],
                   what: tuple[int, int, bool, bool]) -> tuple[list[float], list[float]]:
    """Per kind, the duration and compute of :func:`_chunk`'s works for ``what``, as
    :func:`op_work` adds them up: each part the chunk's layers then its ends (the
    order of :meth:`Work.add`), the exposed parts in sorted order. A part a work lacks
    adds ``0.0 * times`` (+0.0) to a sum that starts at +0.0, which leaves it as it
    is, so each sum reads every work's part with 0.0 where it has none."""
    durations, computes = [], []
    dense, moe = float(what[0]), float(what[1])
    for kind in (F, B, W):
        used = [(per[False][kind], dense)] if dense else []
        if moe:
            used.append((per[True][kind], moe))
        used.append((edge[kind], 1.0))
        compute = imbalance = 0.0  # each part summed over the works in their order
        exposed_keys: set[tuple[str, str]] = set()
        for wk, times in used:
            parts = wk.parts
            compute += parts.get(COMPUTE, 0.0) * times
            imbalance += parts.get(IMBALANCE, 0.0) * times
            if wk.exposed:
                exposed_keys.update(wk.exposed)
        exposed = 0.0
        for key in sorted(exposed_keys):
            part = 0.0
            for wk, times in used:
                part += wk.exposed.get(key, 0.0) * times
            exposed += part
        durations.append(compute + imbalance + exposed)
        computes.append(compute)
    return durations, computes


def _chunk(per: dict[bool, tuple[Work, Work, Work]], edge: tuple[Work, Work, Work],
           what: tuple[int, int, bool, bool], *, record: bool) -> tuple[Work, Work, Work]:
    """The F, B and W work of one chunk of ``what`` (dense layers, MoE layers, whether
    it holds the embedding, the output layer), from one layer's ``per`` kind and the
    chunk's ``edge`` work (:func:`edge_work`)."""
    chunk = (Work(record=record), Work(record=record), Work(record=record))
    for moe, count in ((False, what[0]), (True, what[1])):
        if count:
            for wk, layer in zip(chunk, per[moe], strict=True):
                wk.add(layer, float(count))
    for wk, part in zip(chunk, edge, strict=True):
        wk.add(part)
    return chunk
