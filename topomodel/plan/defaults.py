"""What a plan ranks by and searches, and the limits of its default space: plain names
and numbers, kept apart from :mod:`topomodel.plan.space` so the command line's parser,
which is built for every verb, reads them without importing the space (its layouts and
dataclasses: about 2.4 ms of CPU per process, ``benchmarks/README.md``)."""

from __future__ import annotations

OBJECTIVES: dict[str, tuple[str, str]] = {
    "tokens_per_s": ("max", "tokens per second"),
    "mfu": ("max", "model FLOPs utilisation"),
    "step_time_s": ("min", "step time, seconds"),
    "tokens_per_J": ("max", "tokens per joule of the whole fabric's power"),
    "cost_per_token": ("min", "US dollars per million tokens: the whole fabric's capex,"
                       " facility and energy per hour (docs/cost.md) over tokens/s"),
}
"""What a plan ranks by: (better when larger or smaller, meaning)."""


SEARCHED = ("tp", "cp", "pp", "dp", "ep", "micro_batch", "interleave", "schedule",
            "recompute", "zero", "sequence_parallel", "order")
"""The layout fields a plan searches (the others come from the base layout)."""

DEFAULT_MAX_CP = 16
"""Largest CP searched unless ``max_cp`` says otherwise: Llama 3 405B's 128k-token
stage used CP 16 (Llama Team, arXiv 2407.21783, section 3.3.2); beyond it every extra
CP degree is another set of communicators to route for layouts that rarely win."""

DEFAULT_MAX_MICRO_BATCH = 8
"""Largest micro-batch searched unless ``max_micro_batch`` says otherwise (sequences):
Megatron-LM's large-model recipes use 1-4; 8 leaves room above them."""

DEFAULT_MAX_INTERLEAVE = 8
"""Largest interleave depth (model chunks per stage) searched unless ``max_interleave``
says otherwise: deeper interleaving only adds pipeline sends once the bubble is small."""
