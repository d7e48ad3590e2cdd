"""The named assumptions of the decode model (:mod:`~topomodel.analysis.serving.decode`),
each a field with its default, reader and reason: rows of the one options table
(:data:`~topomodel.analysis.options.OPTIONS`), so ``topomodel options`` lists them and
the ``decode`` verb's flags are generated from them. Light to import (no numpy), so the
CLI's help can show them.

Examples
--------
>>> DecodeAssumptions().batch, DecodeAssumptions().dtype, DecodeAssumptions().comm_overlap
(1, 'bf16', 0.0)
>>> DecodeAssumptions(batch=0)
Traceback (most recent call last):
...
topomodel.errors.UsageError: DecodeAssumptions.batch: must be at least 1, got 0
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from topomodel.analysis.training.model import BYTES
from topomodel.errors import UsageError
from topomodel.inputs.records import (
    Reader,
    Reading,
    check_fields,
    choice,
    integer,
    number,
    spec,
)
from topomodel.inputs.yamlsource import KeyPath

DTYPES = "|".join(BYTES)
"""The data types a decode option may name, as its flag's metavar (``fp32|bf16|...``)."""


def or_none(read: Reader) -> Reader:
    """``None`` (the rule the field's doc names applies) or a value ``read`` accepts."""

    def check(reading: Reading, path: KeyPath, value: Any) -> Any:
        return None if value is None else read(reading, path, value)

    return check


@dataclass(frozen=True)
class DecodeAssumptions:
    """Named assumptions of the decode model, each with its default and reason (the
    field's ``doc``); checked on creation."""

    batch: int = spec(
        integer(1), default=1,
        doc="sequences each replica (DP rank) decodes at once; one is the latency case"
        " (every step reads all the weights for one token each), which published batch-1"
        " figures quote")
    context: int | None = spec(
        or_none(integer(1)), default=None,
        doc="tokens already in each sequence's KV cache (default: the model's training"
        " sequence, the longest context it serves without extension)")
    dtype: str = spec(
        choice(*BYTES), default="bf16",
        doc="weight data type; bf16 is the type the catalog's models are released in"
        " (Llama 3, Mixtral), fp8 the common quantised serving type")
    kv_dtype: str | None = spec(
        or_none(choice(*BYTES)), default=None,
        doc="KV cache data type (default: the weights' dtype: deployments that quantise"
        " weights to fp8 usually quantise the KV cache too, TensorRT-LLM's"
        " --fp8_kv_cache)")
    activation_dtype: str = spec(
        choice(*BYTES), default="bf16",
        doc="data type of the activations and logits decode's collectives carry; bf16, as"
        " TensorRT-LLM and vLLM all-reduce in the activation type even when weights and"
        " KV cache are fp8")
    comm_overlap: float = spec(
        number(0, 1), default=0.0,
        doc="share of the decode step's communication hidden behind compute; none, as"
        " each TP all-reduce sits between two dependent matmuls of one batch: only a"
        " batch split in two and interleaved (DeepSeek's two-microbatch overlap) hides"
        " it")

    def __post_init__(self) -> None:
        check_fields(self, UsageError)
