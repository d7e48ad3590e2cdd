"""The named assumptions of the serving model (:mod:`~topomodel.analysis.serving.serve`):
the prefill and decode pools, where they sit, the request mix, the load and the KV
hand-off, each a field with its default, reader and reason, and rows of the one options
table (:data:`~topomodel.analysis.options.OPTIONS`), so ``topomodel options`` lists them
and the ``serve`` verb's flags are generated from them. Light to import (no numpy).

Examples
--------
>>> a = ServeAssumptions()
>>> a.prefill_tp, a.decode_tp, a.prefill_instances, a.decode_instances, a.transfer
(8, 8, 1, 1, 'layerwise')
>>> ServeAssumptions(placement="anywhere")
Traceback (most recent call last):
...
topomodel.errors.UsageError: ServeAssumptions.placement: expected one of separate, packed, \
aggregated, got a string ('anywhere')
"""

from __future__ import annotations

from dataclasses import dataclass

from topomodel.analysis.serving.decode_assumptions import or_none
from topomodel.errors import UsageError
from topomodel.inputs.records import check_fields, choice, integer, number, spec

PLACEMENTS = ("separate", "packed", "aggregated")
"""Where the pools sit (:attr:`ServeAssumptions.placement`)."""

TRANSFERS = ("layerwise", "after")
"""How the KV cache leaves a prefill instance (:attr:`ServeAssumptions.transfer`)."""


@dataclass(frozen=True)
class ServeAssumptions:
    """Named assumptions of the serving model, each with its default and reason (the
    field's ``doc``); checked on creation."""

    prefill_tp: int = spec(
        integer(1), default=8,
        doc="tensor-parallel degree of a prefill replica; 8, one 8-GPU NVLink server, the"
        " TP vLLM's and SGLang's examples run 70B-class models at")
    prefill_ep: int = spec(
        integer(1), default=1,
        doc="expert-parallel degree of a prefill instance: its replicas (each attending"
        " its own requests, data-parallel attention) whose experts are split between"
        " them; 1 for a dense model")
    prefill_instances: int = spec(
        integer(1), default=1,
        doc="prefill instances (engines of prefill_tp x prefill_ep accelerators); one,"
        " with one decode instance, the 1:1 ratio of the disaggregated examples of"
        " NVIDIA Dynamo and vLLM (1P1D)")
    decode_tp: int = spec(
        integer(1), default=8,
        doc="tensor-parallel degree of a decode replica; 8, as prefill_tp")
    decode_ep: int = spec(
        integer(1), default=1,
        doc="expert-parallel degree of a decode instance (as prefill_ep)")
    decode_instances: int = spec(
        integer(1), default=1,
        doc="decode instances (engines of decode_tp x decode_ep accelerators); one, as"
        " prefill_instances")
    placement: str = spec(
        choice(*PLACEMENTS), default="separate",
        doc="where the pools sit: separate (the prefill pool from the first accelerator,"
        " the decode pool from the next scale-up domain after it, so hand-offs cross the"
        " scale-out network, as pools of separate servers do), packed (the decode pool"
        " right after the prefill pool, sharing a scale-up domain where both fit) or"
        " aggregated (no separate pools: the decode options' instances prefill and decode,"
        " chunked prefill sharing each step with decode as vLLM V1 and SGLang schedule"
        " it; no KV hand-off)")
    input_tokens: int = spec(
        integer(1), default=1000,
        doc="prompt tokens per request; 1,000 in and 1,000 out, a row every serving"
        " benchmark grid holds (TensorRT-LLM's performance overview, 1000/1000)")
    output_tokens: int = spec(
        integer(1), default=1000, doc="generated tokens per request (as input_tokens)")
    rate: float | None = spec(
        or_none(number(0, low_open=True)), default=None,
        doc="request arrival rate, requests/s (default: the rate that keeps the prefill"
        " pool prefill_load busy)")
    prefill_load: float = spec(
        number(0, 1, low_open=True), default=0.5,
        doc="share of time the prefill replicas are busy when no rate is given: 0.5, where"
        " an M/D/1 queue waits half a service time on average")
    concurrency: int | None = spec(
        or_none(integer(1)), default=None,
        doc="sequences each decode replica decodes at once, instead of the batch the rate"
        " gives (the rate is then what that concurrency sustains)")
    transfer: str = spec(
        choice(*TRANSFERS), default="layerwise",
        doc="KV hand-off: layerwise (each layer's cache sent as soon as the layer is"
        " computed, overlapped with the rest of the prefill, as Mooncake's layer-wise"
        " prefill and NVIDIA Dynamo's NIXL transfers do) or after (the whole cache once the"
        " prefill ends)")

    chunk_tokens: int = spec(
        integer(1), default=8192,
        doc="aggregated: tokens one engine step processes, decode tokens first and a"
        " prompt's chunk in the rest (vLLM's max_num_batched_tokens); 8,192, vLLM's"
        " default for vllm serve on GPUs of 70 GiB or more (engine/arg_utils.py; 2,048 on"
        " smaller ones)")

    def __post_init__(self) -> None:
        check_fields(self, UsageError)
