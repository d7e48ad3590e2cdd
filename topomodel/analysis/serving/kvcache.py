"""The KV cache from a model's architecture: bytes per token, what each tensor-parallel
rank holds, and the rank pairs a request's cache moves between when a prefill instance
hands it to a decode instance.

A token's cache is made of *units* that tensor parallelism splits or replicates whole:

- **Grouped-query or multi-head attention**: one unit per key/value head, ``2 x
  head_dim`` elements per layer (its key and its value). With ``tp`` at most the KV
  heads, rank ``r`` holds heads ``r x kv/tp`` to ``(r+1) x kv/tp - 1``; with more ranks
  than heads each head is replicated on ``tp / kv`` ranks (vLLM and TensorRT-LLM
  replicate key/value heads so).
- **Multi-head latent attention (MLA)**: one unit, the compressed latent
  (``kv_lora_rank``) and the decoupled RoPE key (``qk_rope_head_dim``) per layer, which
  every TP rank holds whole: vLLM's MLA backends cache it as one KV head, replicated on
  each TP rank (SGLang's TP attention does the same; its data-parallel attention, TP 1
  per attention replica, holds one copy per replica).

Examples
--------
>>> from topomodel.inputs.catalog import Model, load_catalog
>>> catalog = load_catalog()
>>> kv_bytes_per_token(catalog.get("llama3-70b", Model), 2)  # 80 x 8 x 128 x 2 x 2
327680
>>> kv_bytes_per_token(catalog.get("deepseek-v3", Model), 2)  # 61 x (512 + 64) x 2
70272
"""

from __future__ import annotations

import math

import numpy as np

from topomodel.analysis.training.model import attention_dims
from topomodel.errors import ParameterError
from topomodel.inputs.parts import Model


def is_mla(model: Model) -> bool:
    """Whether ``model`` caches a compressed latent (MLA) instead of keys and values."""
    return model.kv_lora_rank > 0


def kv_units(model: Model) -> tuple[int, int]:
    """(units, elements per unit and token, all layers) of the model's KV cache.

    Examples
    --------
    >>> from topomodel.inputs.catalog import Model, load_catalog
    >>> kv_units(load_catalog().get("llama3-70b", Model))  # 8 heads of 80 x 2 x 128
    (8, 20480)
    """
    if is_mla(model):
        return 1, model.layers * (model.kv_lora_rank + model.qk_rope_head_dim)
    hd, kv = attention_dims(model)
    return kv, model.layers * 2 * hd


def kv_bytes_per_token(model: Model, dtype_bytes: int) -> int:
    """KV cache bytes one token adds, all layers, one copy (no TP replication)."""
    units, elements = kv_units(model)
    return units * elements * dtype_bytes


def kv_bytes_per_token_per_rank(model: Model, tp: int, dtype_bytes: int) -> int:
    """KV cache bytes one token adds on each of ``tp`` ranks (splits and replicas as
    the module docstring says).

    Examples
    --------
    >>> from topomodel.inputs.catalog import Model, load_catalog
    >>> llama = load_catalog().get("llama3-70b", Model)
    >>> kv_bytes_per_token_per_rank(llama, 8, 2), kv_bytes_per_token_per_rank(llama, 16, 2)
    (40960, 40960)
    """
    units, elements = kv_units(model)
    check_tp(model, tp)
    return math.ceil(units / tp) * elements * dtype_bytes


def check_tp(model: Model, tp: int, name: str = "tp") -> None:
    """Refuse a TP degree that splits the cache's units unevenly (neither a divisor nor
    a multiple of them).

    Raises
    ------
    ParameterError
        Naming ``name`` (the flag's key).
    """
    units, _ = kv_units(model)
    if tp < 1 or (units % tp and tp % units):
        raise ParameterError(name, f"{tp} must divide or be a multiple of the {units} KV"
                                   f" heads of {model.id}")


def rank_units(units: int, tp: int) -> np.ndarray:
    """The units each of ``tp`` ranks holds, a ``(tp, max(1, units // tp))`` array.

    Examples
    --------
    >>> rank_units(8, 4).tolist(), rank_units(2, 4).tolist()
    ([[0, 1], [2, 3], [4, 5], [6, 7]], [[0], [0], [1], [1]])
    """
    if tp <= units:
        return np.arange(units).reshape(tp, units // tp)
    return (np.arange(tp) * units // tp).reshape(tp, 1)


def transfer_pairs(model: Model, tp_from: int, tp_to: int
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Rank pairs of one request's KV hand-off from a ``tp_from`` prefill replica to a
    ``tp_to`` decode replica: (source rank, destination rank, units), one row a pair.

    Each destination rank receives every unit it holds from one source rank holding it;
    where several hold it (replicas), destination ``s`` takes the ``s``-th holder in
    turn, so replicated sources share the sending. Bytes of a pair are its units x
    elements per unit (:func:`kv_units`) x tokens x dtype bytes.

    Examples
    --------
    >>> from topomodel.inputs.catalog import Model, load_catalog
    >>> llama = load_catalog().get("llama3-70b", Model)
    >>> [a.tolist() for a in transfer_pairs(llama, 8, 4)]  # two heads from two ranks each
    [[0, 1, 2, 3, 4, 5, 6, 7], [0, 0, 1, 1, 2, 2, 3, 3], [1, 1, 1, 1, 1, 1, 1, 1]]
    """
    units, _ = kv_units(model)
    check_tp(model, tp_from, "prefill_tp")
    check_tp(model, tp_to, "decode_tp")
    held_from, held_to = rank_units(units, tp_from), rank_units(units, tp_to)
    owners = np.repeat(np.arange(tp_from), held_from.shape[1])
    unit_of = held_from.ravel()
    order = np.argsort(unit_of, kind="stable")
    holders = owners[order].reshape(units, -1)  # holders of each unit, in rank order
    dst = np.repeat(np.arange(tp_to), held_to.shape[1])
    unit = held_to.ravel()
    src = holders[unit, dst % holders.shape[1]]
    key = src * tp_to + dst
    pairs, count = np.unique(key, return_counts=True)
    return pairs // tp_to, pairs % tp_to, count
