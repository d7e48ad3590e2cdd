"""The gradient buckets of a training step: which pass fills each stage's buckets, and
when their reduction over the data-parallel ranks ends.

A chunk's gradients become final during its last backward (B, or W in a zero-bubble
schedule), layer by layer, so a chunk's k-th of n buckets is ready (k + 1) / n of the
way through that pass; buckets go out one after the other on the network. With
``dp_overlap`` a bucket starts once ready (behind the backward still to run), else
after the stage's last operation. ZeRO-3 reduces per layer inside the operations.
"""

from __future__ import annotations

import math

import numpy as np

from topomodel import limits
from topomodel.analysis.assumptions import StepAssumptions
from topomodel.analysis.training.model import BYTES
from topomodel.analysis.training.pipeline import B, Schedule, Timeline, W, last_passes
from topomodel.analysis.training.stagework import Call
from topomodel.errors import UsageError
from topomodel.traffic.layout import Layout

Buckets = list[list[tuple[str, int, int]]]
"""Per stage, its bucket runs in issue order: (``dp`` or ``edp``, how many buckets,
place of the pass that fills them in the stage's order)."""


def stage_buckets(s: Schedule, calls: dict[str, Call], layout: Layout,
                  a: StepAssumptions, dense: np.ndarray, experts: np.ndarray,
                  sizes: np.ndarray, moe_sizes: np.ndarray) -> Buckets:
    """Each stage's gradient buckets (:data:`Buckets`) for ``dense`` and ``experts``
    parameters per stage, the bucket sizes of ``calls`` and the layers per chunk
    (``sizes``, ``moe_sizes``); none under ZeRO-3."""
    out: Buckets = [[] for _ in range(s.p)]
    if layout.zero >= 3:
        return out
    final_kind = W if layout.schedule == "zb-h1" else B
    last_pass = last_passes(s, final_kind)
    grad_bytes = BYTES[a.grad_dtype]
    for st in range(s.p):
        for key, params, share in (("dp", dense, sizes), ("edp", experts, moe_sizes)):
            call = calls.get(key)
            total = float(params[st]) * grad_bytes
            if call is None or total <= 0 or share[st].sum() == 0:
                continue
            for c in range(s.v):
                part = total * share[st, c] / share[st].sum()
                if part <= 0:
                    continue
                out[st].append((key, max(1, math.ceil(part / call.size_bytes)),
                                last_pass[st][c]))
        count = sum(run[1] for run in out[st])
        refusal = limits.above(count, "MAX_GRADIENT_BUCKETS",
                               "gradient buckets in one pipeline stage",
                               limits.BYTES_PER_GRADIENT_BUCKET, doing="to time")
        if refusal:
            raise UsageError(refusal + "; give a larger --bucket")
    return out


def ready_times_s(tl: Timeline, st: int, count: int, pos: int) -> np.ndarray:
    """When each of ``count`` buckets filled by stage ``st``'s pass at ``pos`` is ready,
    seconds on the timeline ``tl``."""
    begin, end = tl.start_s[st, pos], tl.end_s[st, pos]
    return begin + (np.arange(count) + 1) / count * (end - begin)


def gradient_tail(tl: Timeline, calls: dict[str, Call], layout: Layout,
                  buckets: Buckets) -> tuple[np.ndarray, list[dict[str, float]]]:
    """Per stage, when its gradient reduction ends (at least its last operation), and
    the seconds each bucket kind issues, for the stages' ``buckets``
    (:func:`stage_buckets`) on the timeline ``tl``."""
    finish = tl.stage_end_s.copy()
    issued: list[dict[str, float]] = [{} for _ in range(tl.schedule.p)]
    for st, runs in enumerate(buckets):
        if not runs:
            continue
        ready: list[np.ndarray] = []
        cost: list[np.ndarray] = []
        for key, count, pos in runs:
            call = calls[key]
            ready.append(ready_times_s(tl, st, count, pos))
            cost.append(np.full(count, call.time_s))
            issued[st][key] = issued[st].get(key, 0.0) + count * call.time_s
        r_all, c_all = np.concatenate(ready), np.concatenate(cost)
        if not layout.dp_overlap:
            r_all = np.full(len(r_all), tl.stage_end_s[st])
        order = np.argsort(r_all, kind="stable")
        r_all, c_all = r_all[order], c_all[order]
        after = np.cumsum(c_all[::-1])[::-1]  # a bucket and every one behind it
        finish[st] = max(finish[st], float((r_all + after).max()))
    return finish, issued
