"""Why one layout beats another: how they differ, and which parts of the step the
difference moves.

Examples
--------
>>> from topomodel.traffic.layout import Layout
>>> layout_difference(Layout(tp=8, pp=2), Layout(tp=4, pp=4))
'TP 8 vs 4, PP 2 vs 4'
"""

from __future__ import annotations

from dataclasses import fields

from topomodel.analysis.training.step import StepResult
from topomodel.traffic.layout import Layout

PARTS = (("compute_s", "compute"), ("imbalance_s", "hot-expert imbalance"),
         ("bubble_s", "pipeline bubble"), ("exposed_comm_s", "exposed communication"),
         ("wait_s", "synchronisation wait"))
"""The parts a step's time is the sum of, with the words for them."""

WALLS = (("bandwidth_s", "bandwidth"), ("latency_s", "latency"),
         ("topology_s", "topology"), ("sync_s", "synchronisation"))

_NAMES = {"tp": "TP", "pp": "PP", "dp": "DP", "ep": "EP", "cp": "CP",
          "micro_batch": "micro-batch", "interleave": "interleave", "schedule": "schedule",
          "recompute": "recompute", "zero": "ZeRO", "sequence_parallel": "SP",
          "order": "order", "global_batch": "global batch"}


def _text(value: object) -> str:
    if isinstance(value, bool):
        return "on" if value else "off"
    return str(value)


def layout_difference(a: Layout, b: Layout) -> str:
    """The fields in which ``a`` differs from ``b``, as ``NAME a vs b``."""
    out = [f"{_NAMES.get(f.name, f.name)} {_text(getattr(a, f.name))} vs"
           f" {_text(getattr(b, f.name))}"
           for f in fields(Layout) if getattr(a, f.name) != getattr(b, f.name)]
    return ", ".join(out) or "nothing"


def why_better(best: StepResult, other: StepResult, *, objective: str,
               best_value: float, other_value: float) -> str:
    """One paragraph: by how much ``best`` beats ``other`` on ``objective``, how their
    layouts differ and the parts of the step (and the walls) that make the gap,
    largest first. Times in the text are seconds per step."""
    if other_value == best_value:
        gap = "ties with"
    else:
        ratio = abs(best_value / other_value - 1) if other_value else float("inf")
        gap = f"beats the runner-up by {ratio:.2%} in {objective}"
    head = (f"The best layout {gap} ({best.step_time_s:.4g} s vs"
            f" {other.step_time_s:.4g} s a step); they differ in"
            f" {layout_difference(best.layout, other.layout)}.")
    moves = sorted(((getattr(other, key) - getattr(best, key), words)
                    for key, words in PARTS), key=lambda m: -abs(m[0]))
    said = [f"{'+' if d > 0 else '-'}{abs(d):.3g} s {words}" for d, words in moves
            if abs(d) > 1e-9 * max(best.step_time_s, other.step_time_s)]
    if not said:
        return head + " Their steps take the same time in every part."
    walls = sorted(((other.walls[key] - best.walls[key], words) for key, words in WALLS),
                   key=lambda m: -abs(m[0]))
    wall_d, wall_words = walls[0]
    wall = (f"; of its exposed communication and wait, the {wall_words} wall moves most"
            f" ({'+' if wall_d > 0 else '-'}{abs(wall_d):.3g} s)") if abs(wall_d) > 0 else ""
    tokens = ""
    if best.global_batch != other.global_batch:
        tokens = (f" The runner-up's step also carries {other.global_batch} sequences,"
                  f" not {best.global_batch}.")
    return (head + " The runner-up's step, part by part: " + ", ".join(said[:3])
            + wall + "." + tokens)
