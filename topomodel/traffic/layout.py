"""A parallel layout (TP, PP, DP, EP, CP) and its communicators: which ranks form
each group of each kind."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from topomodel.errors import UsageError
from topomodel.inputs.records import (
    Invalid,
    Reading,
    boolean,
    check_fields,
    check_values,
    choice,
    integer,
    spec,
    text,
)
from topomodel.inputs.software import DEFAULT_SOFTWARE, PRESETS
from topomodel.inputs.yamlsource import KeyPath

if TYPE_CHECKING:
    import numpy as np

DIMENSIONS = ("tp", "cp", "dp", "pp")
RECOMPUTE = ("none", "selective", "full")
SCHEDULES = ("1f1b", "zb-h1")
TP_OVERLAPS = ("none", "backward", "gemm")
EP_OVERLAPS = ("none", "dualpipe")
DEFAULT_BATCH_CAP_TOKENS = 2**24
"""Most tokens a default step carries: 16M, the batch Llama 3 405B trained most of its
tokens with ("We double the batch size again to 16M after pre-training on 2.87T
tokens", Llama Team, arXiv 2407.21783, section 3.4.1), the largest published dense
batch; a larger one adds no published evidence of converging."""

MICROBATCHES_PER_STAGE = 4
"""Microbatches per pipeline stage on every DP replica in a default batch: every row of
Megatron-Core's published model table (NVIDIA/Megatron-LM README, "Performance
Benchmarking", r0.8.0: 1.7B to 462B, PP 1 to 16, DP 48, micro-batch 1) runs a global
batch of 4 x PP x DP sequences (192 at PP 1, 384 at PP 2, ..., 3,072 at PP 16), the
configuration of the default software preset (``mcore-2024``); at 4 x PP the 1F1B
bubble is (PP - 1) / (5 PP - 1), under 20 %."""

BATCH_RULE = "4 microbatches per pipeline stage per DP replica, at most 16M tokens"
"""The default global batch in words (:meth:`Layout.sequences`), as outputs state it."""


def _zero_stage(_: Reading, __: KeyPath, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 3:
        raise Invalid(f"a ZeRO stage is 0, 1, 2 or 3, got {value!r}")
    return int(value)


def _order(reading: Reading, path: KeyPath, value: Any) -> str:
    """A placement order: the four dimensions once each, innermost first."""
    order = text(reading, path, value)
    if sorted(p.strip() for p in order.split(",")) != sorted(DIMENSIONS):
        raise Invalid(f"expected {', '.join(DIMENSIONS)} once each, innermost first;"
                      f" got {order!r}")
    return order


@dataclass(frozen=True)
class Layout:
    """A parallel layout. ``order`` lists the dimensions innermost first (ranks that
    differ in the innermost dimension are neighbours in rank order); EP groups are the
    innermost ``ep`` ranks of the DP dimension. Every field is checked on creation.

    Examples
    --------
    >>> Layout(tp=8, pp=4, dp=2).world
    64
    >>> Layout(tp=0)
    Traceback (most recent call last):
    ...
    topomodel.errors.UsageError: Layout.tp: must be at least 1, got 0
    """

    tp: int = spec(integer(1), default=1, doc="tensor-parallel degree")
    pp: int = spec(integer(1), default=1, doc="pipeline-parallel degree (stages)")
    dp: int = spec(integer(1), default=1, doc="data-parallel degree")
    ep: int = spec(integer(1), default=1, doc="expert-parallel degree (divides dp)")
    cp: int = spec(integer(1), default=1, doc="context-parallel degree")
    micro_batch: int = spec(integer(1), default=1, doc="sequences per microbatch")
    global_batch: int = spec(integer(0), default=0, doc="sequences per step, all DP ranks"
                             " together; 0: " + BATCH_RULE + " (Layout.sequences)")
    seq: int = spec(integer(0), default=0, doc="tokens per sequence; 0: the model's")
    software: str = spec(choice(*PRESETS), default=DEFAULT_SOFTWARE, doc="software preset:"
                         " the framework release whose switches (sequence parallelism,"
                         " fused attention, overlaps, distributed optimizer, gradient"
                         " precision, dropout) the step runs with; a switch given on its own"
                         " wins (" + ", ".join(PRESETS) + ")")
    sequence_parallel: bool = spec(boolean, default=True, doc="TP gathers and scatters"
                                   " activations (sequence parallelism, Korthikanti et al."
                                   " 2022) instead of all-reducing them")
    zero: int = spec(_zero_stage, default=1,
                     doc="ZeRO stage over the DP ranks: 0 gradient all-reduce; 1 optimizer"
                     " state sharded (gradients reduce-scattered, weights all-gathered after"
                     " the step); 2 also gradients; 3 also weights (gathered per layer)")
    interleave: int = spec(integer(1), default=1, doc="virtual pipeline stages per rank"
                           " (interleaved 1F1B, Narayanan et al. 2021)")
    schedule: str = spec(choice(*SCHEDULES), default="1f1b", doc="pipeline schedule: 1f1b"
                         " (PipeDream-Flush; interleaved with interleave > 1) or zb-h1"
                         " (zero-bubble H1, Qi et al. 2023: weight gradients deferred into"
                         " the bubble)")
    recompute: str = spec(choice(*RECOMPUTE), default="none", doc="activation"
                          " recomputation: none, selective (attention core only) or full"
                          " (each layer from its input)")
    flash_attention: bool = spec(boolean, default=True, doc="attention in one fused kernel"
                                 " (FlashAttention): scores are not stored or written")
    pp_scatter_gather: bool = spec(boolean, default=True, doc="a pipeline send crosses the"
                                   " network as 1/tp of the tensor per rank and is"
                                   " all-gathered over the scale-up domain (Narayanan et al."
                                   " 2021, section 4.1)")
    tp_overlap: str = spec(choice(*TP_OVERLAPS), default="gemm", doc="TP collectives"
                           " hidden behind compute: none; backward (each backward collective"
                           " behind the weight-gradient GEMM of its layer, Megatron-LM);"
                           " gemm (every collective pipelined with the GEMM it feeds,"
                           " Transformer Engine comm-GEMM overlap)")
    ep_overlap: str = spec(choice(*EP_OVERLAPS), default="none", doc="EP all-to-alls hidden"
                           " behind compute: none, or dualpipe (DeepSeek-V3: the all-to-alls"
                           " of one microbatch run behind the compute of the forward or"
                           " backward chunk it is paired with, on SMs taken from compute)")
    dropout: bool = spec(boolean, default=False, doc="dropout on the attention"
                         " probabilities and after attention and MLP (GPT-3 and Megatron-LM"
                         " recipes: masks stored, extra memory-bound passes); Llama 3 and"
                         " DeepSeek-V3 train without")
    pp_blocking: bool = spec(boolean, default=True, doc="a stage waits for its own pipeline"
                             " sends to finish before it computes again (Megatron-LM's"
                             " batched send/receive waits on both; off: sends run beside"
                             " the next operation)")
    grad_accumulation_fusion: bool = spec(boolean, default=True, doc="weight gradients"
                                          " accumulate into the fp32 main gradients inside"
                                          " the GEMM (Megatron-LM since 2022-02); off: a"
                                          " separate pass over every weight each"
                                          " microbatch")
    dp_overlap: bool = spec(boolean, default=True, doc="bucketed DP gradient reduction starts"
                            " as buckets fill, behind the backward compute still to run"
                            " (Megatron-Core overlap-grad-reduce); off: after the backward")
    order: str = spec(_order, default="tp,cp,dp,pp", doc="rank placement, innermost"
                      " dimension first")

    def __post_init__(self) -> None:
        check_fields(self, UsageError)
        _check_rules(self)

    @property
    def world(self) -> int:
        """Accelerators the layout uses."""
        return self.tp * self.pp * self.dp * self.cp

    def sequences(self, seq: int) -> int:
        """Sequences per step: ``global_batch``, or the default rule
        (:data:`BATCH_RULE`): every DP replica runs :data:`MICROBATCHES_PER_STAGE` x
        ``pp`` microbatches of ``micro_batch`` sequences of ``seq`` tokens, so the batch
        grows with DP and the pipeline's bubble stays small; fewer (not below one per DP
        rank, and a multiple of ``pp`` under an interleaved schedule, which needs one)
        keep it within :data:`DEFAULT_BATCH_CAP_TOKENS`. At Llama 3 405B's scale (DP 128,
        PP 16, 8,192 tokens) the cap gives 16 sequences per replica, what it ran (Llama
        Team, arXiv 2407.21783, Table 4). A job that wants a batch of its own (a recipe's,
        reached by gradient accumulation) gives it.

        Examples
        --------
        >>> Layout(dp=8).sequences(2048), Layout(dp=48, pp=2).sequences(4096)
        (32, 384)
        >>> Layout(dp=128, pp=16).sequences(8192)  # 16M tokens at most: 16 per replica
        2048
        """
        if self.global_batch:
            return self.global_batch
        per_step = self.dp * self.micro_batch
        fits = DEFAULT_BATCH_CAP_TOKENS // (per_step * max(1, seq))
        m = max(1, min(MICROBATCHES_PER_STAGE * self.pp, fits))
        if self.interleave > 1:
            m = self.pp * max(1, m // self.pp)
        return m * per_step


def _check_rules(layout: Layout) -> None:
    """The rules of a :class:`Layout` across its fields (each field alone is checked by
    its reader)."""
    if layout.dp % layout.ep:
        raise UsageError(f"Layout.ep: ep={layout.ep} must divide dp={layout.dp}")
    if layout.schedule == "zb-h1" and layout.interleave > 1:
        raise UsageError("Layout.schedule: zb-h1 has no virtual stages; interleave must"
                         " be 1")


_FIELDS = frozenset(f.name for f in dataclasses.fields(Layout))


def evolve(layout: Layout, **changes: Any) -> Layout:
    """``dataclasses.replace(layout, **changes)``: an equal layout, or the same
    ``UsageError``, checking only the fields ``changes`` sets (and the rules across
    fields): the others passed their readers when ``layout`` was made. A search makes
    hundreds of thousands of layouts from a few, each differing in a field or two, and
    checking every field of each took a tenth of a plan at 98k.

    Examples
    --------
    >>> evolve(Layout(tp=8), pp=4).world
    32
    >>> evolve(Layout(dp=4), ep=3)
    Traceback (most recent call last):
    ...
    topomodel.errors.UsageError: Layout.ep: ep=3 must divide dp=4
    """
    unknown = changes.keys() - _FIELDS
    if unknown:  # as replace() refuses them
        raise TypeError(f"Layout has no field {sorted(unknown)[0]!r}")
    check_values(Layout, changes, UsageError)
    made = object.__new__(Layout)
    made.__dict__.update(layout.__dict__)
    made.__dict__.update(changes)
    _check_rules(made)
    return made


def rank_groups(ranks: np.ndarray, layout: Layout, kind: str) -> np.ndarray:
    """The communicators of one kind, a row per group (the collectives' group type,
    :data:`~topomodel.traffic.communicators.Groups`): ``tp``, ``cp``, ``dp``, ``pp``,
    ``ep``, ``edp`` (the ranks holding the same experts: one of every EP group in a DP
    group), ``grad`` (DP x CP: where dense gradients are reduced) and ``expert_grad``
    (EDP x CP)."""
    import numpy as np  # not at import: the CLI's option table reads this module

    order = [d.strip() for d in layout.order.split(",")]
    sizes = {"tp": layout.tp, "cp": layout.cp, "dp": layout.dp, "pp": layout.pp}
    # outermost first; dp split into (dp / ep, ep) so EP groups are its innermost ranks
    axes: list[tuple[str, int]] = []
    for dim in reversed(order):
        if dim == "dp":
            axes += [("edp", layout.dp // layout.ep), ("ep", layout.ep)]
        else:
            axes.append((dim, sizes[dim]))
    grid = ranks.reshape([size for _, size in axes])
    names = [name for name, _ in axes]
    if kind in ("dp", "grad", "expert_grad"):
        # gradients are reduced over DP and CP together (CP ranks hold the same weights);
        # expert gradients only over the ranks holding the same experts
        keep = {"dp": ["edp", "ep"], "grad": ["cp", "edp", "ep"],
                "expert_grad": ["cp", "edp"]}[kind]
        moved = np.moveaxis(grid, [names.index(k) for k in keep],
                            list(range(-len(keep), 0)))
        size = math.prod(grid.shape[names.index(k)] for k in keep)
        return moved.reshape(-1, size)
    axis = names.index(kind)
    return np.moveaxis(grid, axis, -1).reshape(-1, grid.shape[axis])
