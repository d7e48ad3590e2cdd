"""A parallel layout (TP, PP, DP, EP, CP) and its communicators: which ranks form
each group of each kind."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from topomodel.errors import UsageError
from topomodel.records import (
    Invalid,
    Reading,
    boolean,
    check_fields,
    choice,
    integer,
    spec,
    text,
)
from topomodel.yamlsource import KeyPath

DIMENSIONS = ("tp", "cp", "dp", "pp")
DP_MODES = ("allreduce", "zero")


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
                             " together; 0: dp x micro_batch x 4 x pp")
    seq: int = spec(integer(0), default=0, doc="tokens per sequence; 0: the model's")
    sequence_parallel: bool = spec(boolean, default=True, doc="TP gathers and scatters"
                                   " activations (sequence parallelism) instead of"
                                   " all-reducing them")
    dp_mode: str = spec(choice(*DP_MODES), default="allreduce", doc="gradient all-reduce,"
                        " or ZeRO/FSDP reduce-scatter + all-gather")
    interleave: int = spec(integer(1), default=1, doc="virtual pipeline stages per rank"
                           " (interleaved 1F1B)")
    recompute: bool = spec(boolean, default=False, doc="activation recomputation")
    order: str = spec(_order, default="tp,cp,dp,pp", doc="rank placement, innermost"
                      " dimension first")

    def __post_init__(self) -> None:
        check_fields(self, UsageError)
        if self.dp % self.ep:
            raise UsageError(f"Layout.ep: ep={self.ep} must divide dp={self.dp}")

    @property
    def world(self) -> int:
        """Accelerators the layout uses."""
        return self.tp * self.pp * self.dp * self.cp


def rank_groups(ranks: np.ndarray, layout: Layout, kind: str) -> list[np.ndarray]:
    """The communicators of one kind: ``tp``, ``cp``, ``dp``, ``pp``, ``ep``, ``edp``
    (the ranks holding the same experts: one of every EP group in a DP group), ``grad``
    (DP x CP: where dense gradients are reduced) and ``expert_grad`` (EDP x CP)."""
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
        return list(moved.reshape(-1, size))
    axis = names.index(kind)
    return list(np.moveaxis(grid, axis, -1).reshape(-1, grid.shape[axis]))
