"""A parallel layout (TP, PP, DP, EP, CP) and its communicators: which ranks form
each group of each kind."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from topomodel.errors import UsageError

DIMENSIONS = ("tp", "cp", "dp", "pp")


@dataclass(frozen=True)
class Layout:
    """A parallel layout. ``order`` lists the dimensions innermost first (ranks that
    differ in the innermost dimension are neighbours in rank order); EP groups are the
    innermost ``ep`` ranks of the DP dimension."""

    tp: int = 1
    pp: int = 1
    dp: int = 1
    ep: int = 1
    cp: int = 1
    micro_batch: int = 1  # sequences per microbatch
    global_batch: int = 0  # sequences per step; 0: dp x micro_batch x 4 x pp
    seq: int = 0  # tokens per sequence; 0: the model's
    sequence_parallel: bool = True
    dp_mode: str = "allreduce"  # or "zero" (reduce-scatter + all-gather)
    interleave: int = 1  # virtual pipeline stages per rank
    recompute: bool = False
    order: str = "tp,cp,dp,pp"

    @property
    def world(self) -> int:
        """Accelerators the layout uses."""
        return self.tp * self.pp * self.dp * self.cp


def rank_groups(ranks: np.ndarray, layout: Layout, kind: str) -> list[np.ndarray]:
    """The communicators of one kind: ``tp``, ``cp``, ``dp``, ``pp``, ``ep``, ``edp``
    (the ranks holding the same experts: one of every EP group in a DP group), ``grad``
    (DP x CP: where dense gradients are reduced) and ``expert_grad`` (EDP x CP)."""
    order = [d.strip() for d in layout.order.split(",")]
    if sorted(order) != sorted(DIMENSIONS):
        raise UsageError(f"--order must list {', '.join(DIMENSIONS)} once each, innermost"
                         f" first; got {layout.order!r}")
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
