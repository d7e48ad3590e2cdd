"""The layouts a plan searches: every combination of the searched dimensions that
uses the whole fabric, within the space's limits.

A layout is TP x CP x PP x DP = every accelerator (DP fills what the others leave), with
EP inside DP (MoE models), a micro-batch size, an interleave depth, a pipeline schedule,
a recomputation kind, a ZeRO stage, sequence parallelism and a rank placement order.
The step model's own checks (:func:`~topomodel.analysis.training.step.layout_memory`) decide
what is valid; the space only adds the planner's rules, each with its reason:

- the layout uses every accelerator: a plan answers "how to run on this cluster";
- with a global batch given, DP x micro-batch divides it: a step runs whole
  microbatches on every DP rank (the step model would otherwise drop the remainder);
- CP divides the sequence: each CP rank holds a whole share of the tokens.

Dimensions of size 1 have no place in the rank order, so orders that differ only in
where they put them are one layout: the space lists the orders of the dimensions
larger than 1, the others kept where the default order has them.

Examples
--------
>>> from topomodel.inputs.catalog import load_catalog
>>> from topomodel.inputs.parts import Model
>>> gpt = load_catalog().get("llama3-8b", Model)
>>> space = PlanSpace(max_micro_batch=1, fixed={"recompute": "none", "zero": 0,
...                   "schedule": "1f1b", "sequence_parallel": True})
>>> sorted({(c.tp, c.cp, c.pp) for c in cells(gpt, 8, space)})[:4]
[(1, 1, 1), (1, 1, 2), (1, 1, 4), (1, 1, 8)]
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any

from topomodel.errors import ParameterError
from topomodel.plan.defaults import DEFAULT_MAX_CP as DEFAULT_MAX_CP
from topomodel.plan.defaults import DEFAULT_MAX_INTERLEAVE as DEFAULT_MAX_INTERLEAVE
from topomodel.plan.defaults import DEFAULT_MAX_MICRO_BATCH as DEFAULT_MAX_MICRO_BATCH
from topomodel.plan.defaults import OBJECTIVES as OBJECTIVES
from topomodel.plan.defaults import SEARCHED as SEARCHED
from topomodel.traffic.layout import RECOMPUTE, SCHEDULES, Layout

if TYPE_CHECKING:
    from topomodel.inputs.parts import Model

_DEFAULT_ORDER = Layout().order.split(",")


@dataclass(frozen=True)
class Cell:
    """The sizes of a layout's communicators: TP x CP x PP x DP accelerators."""

    tp: int
    cp: int
    pp: int
    dp: int


@dataclass(frozen=True)
class PlanSpace:
    """Limits of the search: the largest degree of each dimension (``None``: as large
    as divisibility allows) and values pinned by ``fixed`` (searched field -> value).

    Raises
    ------
    UsageError
        For a fixed key that is not searched, or a limit below 1.
    """

    max_tp: int | None = None
    max_pp: int | None = None
    max_cp: int | None = DEFAULT_MAX_CP
    max_ep: int | None = None
    max_micro_batch: int = DEFAULT_MAX_MICRO_BATCH
    max_interleave: int = DEFAULT_MAX_INTERLEAVE
    fixed: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name.startswith("max_") and value is not None and (
                    not isinstance(value, int) or value < 1):
                raise ParameterError(f.name, f"must be at least 1, got {value!r}")
        unknown = sorted(set(self.fixed) - set(SEARCHED))
        if unknown:
            raise ParameterError("fixed", f"{unknown[0]} is not a searched dimension;"
                                          f" choose from {', '.join(SEARCHED)}")
        if "order" in self.fixed:  # checked as the step reads it
            Layout(order=str(self.fixed["order"]))

    def choices(self, key: str, values: list[Any]) -> list[Any]:
        """``values`` of ``key`` the space keeps: the fixed value alone, if given and
        among them, else those within the limit."""
        if key in self.fixed:
            return [v for v in values if v == self.fixed[key]]
        limit = getattr(self, f"max_{key}", None)
        return [v for v in values if limit is None or v <= limit]


def _divisors(n: int) -> list[int]:
    """The divisors of ``n``, ascending."""
    small = [d for d in range(1, int(n**0.5) + 1) if n % d == 0]
    return sorted({*small, *(n // d for d in small)})


def cells(model: Model, world: int, space: PlanSpace, base: Layout | None = None
          ) -> list[Cell]:
    """Every TP x CP x PP x DP split of ``world`` accelerators the space holds: TP
    divides the heads, CP the sequence (``base.seq`` or the model's), PP is at most the
    layers."""
    seq = (base.seq if base else 0) or model.sequence
    out = []
    for tp in space.choices("tp", [d for d in _divisors(world) if model.heads % d == 0]):
        for cp in space.choices("cp", [d for d in _divisors(world // tp) if seq % d == 0]):
            for pp in space.choices("pp", [d for d in _divisors(world // (tp * cp))
                                           if d <= model.layers]):
                dp = world // (tp * cp * pp)
                if space.choices("dp", [dp]):
                    out.append(Cell(tp, cp, pp, dp))
    return out


def orders(cell: Cell) -> list[str]:
    """The distinct rank orders of a cell: every order of its dimensions larger than 1,
    the others where the default order puts them."""
    size = {"tp": cell.tp, "cp": cell.cp, "dp": cell.dp, "pp": cell.pp}
    real = [d for d in _DEFAULT_ORDER if size[d] > 1]
    slots = [i for i, d in enumerate(_DEFAULT_ORDER) if size[d] > 1]
    out = []
    for perm in itertools.permutations(real):
        order = list(_DEFAULT_ORDER)
        for slot, dim in zip(slots, perm, strict=True):
            order[slot] = dim
        out.append(",".join(order))
    return out


def cell_layouts(model: Model, cell: Cell, base: Layout, space: PlanSpace
                 ) -> Iterator[dict[str, Any]]:
    """The layouts of one cell, as the fields to set on ``base`` (the searched ones):
    each of :func:`cell_families` in every one of :func:`cell_orders`, the order
    innermost (a layout's place in its cell is ``family x orders + order``).

    Combinations that differ in nothing the step model reads are listed once: ZeRO
    stages without data-parallel replicas, sequence parallelism without TP, schedules
    and interleaving without a pipeline.
    """
    layout_orders = cell_orders(cell, space)
    for family in cell_families(model, cell, base, space):
        for order in layout_orders:
            yield {**family, "order": order}


def cell_orders(cell: Cell, space: PlanSpace) -> list[str]:
    """The rank orders the space lists for every layout of ``cell``: the fixed one, or
    :func:`orders`."""
    return [str(space.fixed["order"])] if "order" in space.fixed else orders(cell)


def cell_families(model: Model, cell: Cell, base: Layout, space: PlanSpace
                  ) -> Iterator[dict[str, Any]]:
    """The layouts of one cell without their rank order (every searched field but
    ``order``), in the order :func:`cell_layouts` lists them: the rank order changes
    neither a layout's validity nor its memory, so a search decides those once for all
    the orders of a family. They are the product of :func:`cell_axes`, in its order
    (:meth:`FamilyAxes.family`)."""
    axes = cell_axes(model, cell, base, space)
    if axes is None:
        return
    for ep, mb, pipe, recompute, zero, sp in itertools.product(
            axes.eps, axes.micro, axes.pipes, axes.recomputes, axes.zeros, axes.sps):
        yield axes.family(ep, mb, pipe, (recompute, zero, sp))


@dataclass(frozen=True)
class FamilyAxes:
    """The values a cell's families take in each searched field but the order, in
    listing order (:func:`cell_families` lists their product, the first outermost):
    the EP degrees, micro-batch sizes, (schedule, interleave) pairs, recomputations,
    ZeRO stages and sequence parallelism."""

    cell: Cell
    eps: list[int]
    micro: list[int]
    pipes: list[tuple[str, int]]
    recomputes: list[str]
    zeros: list[int]
    sps: list[bool]

    def family(self, ep: int, mb: int, pipe: tuple[str, int],
               unshaped: tuple[str, int, bool]) -> dict[str, Any]:
        """The fields of one family, as :func:`cell_families` lists them: its EP,
        micro-batch, (schedule, interleave) and (recomputation, ZeRO, sequence
        parallelism)."""
        c = self.cell
        (schedule, interleave), (recompute, zero, sp) = pipe, unshaped
        return {"tp": c.tp, "cp": c.cp, "pp": c.pp, "dp": c.dp, "ep": ep,
                "micro_batch": mb, "interleave": interleave, "schedule": schedule,
                "recompute": recompute, "zero": zero, "sequence_parallel": sp}


def cell_axes(model: Model, cell: Cell, base: Layout, space: PlanSpace
              ) -> FamilyAxes | None:
    """The values of each field of ``cell``'s families (:class:`FamilyAxes`), None
    where the cell has none (CP does not divide the sequence, DP the global batch)."""
    seq = base.seq or model.sequence
    if seq % cell.cp:
        return None
    if base.global_batch:
        if base.global_batch % cell.dp:
            return None
        micro = _divisors(base.global_batch // cell.dp)
    else:
        micro = [2**k for k in range(space.max_micro_batch.bit_length())]
    micro = space.choices("micro_batch", [b for b in micro if b <= space.max_micro_batch])
    experts = model.experts if model.is_moe else 1
    eps = space.choices("ep", [d for d in _divisors(cell.dp) if experts % d == 0]
                        if model.is_moe else [1])
    if cell.pp > 1:
        pipes = [("1f1b", v) for v in range(1, space.max_interleave + 1)
                 if cell.pp * v <= model.layers] + [("zb-h1", 1)]
    else:
        pipes = [(s, 1) for s in SCHEDULES]
    pipes = [(s, v) for s, v in pipes if s in space.choices("schedule", [s])
             and v in space.choices("interleave", [v])]
    zeros = space.choices("zero", [0, 1, 2, 3] if cell.dp * cell.cp > 1 else [0])
    sps = space.choices("sequence_parallel", [True, False] if cell.tp > 1
                        else [base.sequence_parallel])
    recomputes = space.choices("recompute", list(RECOMPUTE))
    return FamilyAxes(cell, eps, micro, pipes, recomputes, zeros, sps)


def count_layouts(model: Model, cell: Cell, base: Layout, space: PlanSpace) -> int:
    """How many layouts :func:`cell_layouts` lists for ``cell``."""
    return (sum(1 for _ in cell_families(model, cell, base, space))
            * len(cell_orders(cell, space)))
