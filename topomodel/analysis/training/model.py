"""A model's parameters and FLOPs per token (memory is in
:mod:`~topomodel.analysis.training.memory`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from topomodel.parts import Model

BYTES = {"fp32": 4, "bf16": 2, "fp16": 2, "fp8": 1, "int8": 1}
"""Bytes per element of each data type."""


def parameter_counts(model: Model) -> dict[str, float]:
    """Parameters: ``total``, ``active``, ``embedding``, ``experts`` (routed), and the
    number of ``moe_layers``.

    ``active`` counts the parameters each token multiplies through (what its FLOPs
    scale with): the input embedding, a lookup, is left out; the output layer is in.
    Norms and biases are ignored (well under 0.1 % of a large model).
    """
    d, hd = model.hidden, model.head_dim or model.hidden // model.heads
    kv = model.kv_heads or model.heads
    attention = d * model.heads * hd * 2 + 2 * d * kv * hd
    mats = 3 if model.gated_ffn else 2
    dense_ffn = mats * d * model.ffn_hidden
    moe_layers = model.layers - model.dense_layers if model.is_moe else 0
    dense_layers = model.layers - moe_layers
    expert = mats * d * model.expert_ffn_hidden
    routed = moe_layers * model.experts * expert
    shared = moe_layers * (model.shared_experts * expert + d * model.experts)
    embedding = model.vocab * d * (1 if model.tied_embeddings else 2)
    body = model.layers * attention + dense_layers * dense_ffn + shared
    return {"total": body + routed + embedding,
            "active": body + moe_layers * model.top_k * expert + model.vocab * d,
            "embedding": embedding, "experts": routed, "moe_layers": moe_layers}


def flops_per_token(model: Model, seq: int, *, recompute: str = "none"
                    ) -> tuple[float, float]:
    """Training FLOPs per token: (model FLOPs, hardware FLOPs with recomputation).

    Model FLOPs are 6 N + 12 L H Q T (PaLM's accounting, Chowdhery et al. 2022,
    appendix B; N the active non-embedding plus output-layer parameters). Hardware
    FLOPs add what recomputation repeats (Korthikanti et al. 2022, appendix A): a full
    recomputation one more forward pass of every transformer layer (2 N' + 4 L H Q T,
    N' the layers' parameters: the logit layer is not recomputed), a selective one the
    attention core only (4 L H Q T).

    Examples
    --------
    >>> from topomodel.catalog import load_catalog
    >>> from topomodel.parts import Model
    >>> gpt = load_catalog().get("megatron-gpt-1t", Model)
    >>> model, full = flops_per_token(gpt, 2048, recompute="full")
    >>> round(full / model, 4)  # 4/3 less the logit layer's share
    1.3329
    """
    counts = parameter_counts(model)
    hd = model.head_dim or model.hidden // model.heads
    attention = 12 * model.layers * model.heads * hd * seq
    model_flops = 6 * counts["active"] + attention
    layers_params = counts["active"] - model.vocab * model.hidden
    if recompute == "full":
        extra = 2 * layers_params + attention / 3
    elif recompute == "selective":
        extra = attention / 3
    else:
        extra = 0.0
    return model_flops, model_flops + extra
