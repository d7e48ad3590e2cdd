"""A model's parameters and FLOPs per token (memory is in
:mod:`~topomodel.analysis.training.memory`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from topomodel.inputs.parts import Model

BYTES = {"fp32": 4, "bf16": 2, "fp16": 2, "fp8": 1, "int8": 1}
"""Bytes per element of each data type."""


def attention_dims(model: Model) -> tuple[int, int]:
    """(head dimension, key/value heads) of ``model``: its catalog figures, or where it
    leaves them out hidden / heads and one key/value head per head (no grouped-query
    attention)."""
    return model.head_dim or model.hidden // model.heads, model.kv_heads or model.heads


def parameter_counts(model: Model) -> dict[str, float]:
    """Parameters: ``total``, ``active``, ``embedding``, ``experts`` (routed), and the
    number of ``moe_layers``.

    ``active`` counts the parameters each token multiplies through (what its FLOPs
    scale with): the input embedding, a lookup, is left out; the output layer is in.
    Norms and biases are ignored (well under 0.1 % of a large model).
    """
    d, (hd, kv) = model.hidden, attention_dims(model)
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


CAUSAL_SHARE = 0.5
"""The share of the full score matrix a causal attention needs: the blocks on and below
the diagonal (a causal FlashAttention kernel skips the others)."""

FLASH_BACKWARD = 2.5
"""FlashAttention's backward FLOPs over its forward's: five products for the forward's
two, since it recomputes the scores instead of storing them (FlashAttention-2, Dao
2023, section 3.1.2)."""


def attention_flops_per_token(model: Model, seq: int, *, flash_attention: bool = True
                              ) -> tuple[float, float]:
    """FLOPs of one layer's attention core (scores and values) per token, forward and
    backward, as the step runs them: the count both its timing
    (:func:`~topomodel.analysis.training.compute.layer_times`) and its HFU read.

    With FlashAttention, a causal kernel: 2 x seq x heads x head size forward (half of
    the two full products Q K^T and P V, 4 x seq x heads x head size) and
    :data:`FLASH_BACKWARD` times that backward. Without it (Megatron-LM 2022), the full
    score matrix, masked afterwards: 4 x seq x heads x head size forward and twice that
    backward.

    Examples
    --------
    >>> from topomodel.inputs.catalog import Model, load_catalog
    >>> llama = load_catalog().get("llama3-70b", Model)
    >>> fwd, bwd = attention_flops_per_token(llama, 8192)
    >>> fwd == 2 * 8192 * 64 * 128, bwd / fwd
    (True, 2.5)
    >>> attention_flops_per_token(llama, 8192, flash_attention=False) == (2 * fwd, 4 * fwd)
    True
    """
    hd, _ = attention_dims(model)
    full = 4.0 * seq * model.heads * hd
    if flash_attention:
        forward = CAUSAL_SHARE * full
        return forward, FLASH_BACKWARD * forward
    return full, 2.0 * full


def flops_per_token(model: Model, seq: int, *, recompute: str = "none",
                    flash_attention: bool = True) -> tuple[float, float]:
    """Training FLOPs per token: (model FLOPs, hardware FLOPs).

    The rule: both count the products the step times, from the same counts
    (:func:`parameter_counts` for the linear layers, :func:`attention_flops_per_token`
    for the attention core), so that at a compute efficiency of 1 neither MFU nor HFU
    can exceed 1.

    - **Model FLOPs** are the work the model needs, however it is run:
      6 N + 6 L H Q T (N the active non-embedding plus output-layer parameters; the
      attention core a causal forward, 2 L H Q T, and a backward of twice its products).
      This is PaLM's 6 N + 12 L H Q T (Chowdhery et al. 2022, appendix B) with causal
      attention counted as causal: PaLM counts the whole score matrix, which a causal
      FlashAttention kernel does not compute, so with PaLM's count the MFU of a
      long-sequence model could pass 1.
    - **Hardware FLOPs** are the work the step does: the linear layers' 6 N, the
      attention core as run (FlashAttention: causal, 7 L H Q T with the scores
      recomputed in its backward; without it: the full matrix, 12 L H Q T), plus what
      recomputation repeats (Korthikanti et al. 2022, appendix A): a full recomputation
      one more forward pass of every transformer layer (2 N', N' the layers'
      parameters: the logit layer is not recomputed, with the attention core's
      forward), a selective one the attention core's forward only.

    Examples
    --------
    >>> from topomodel.inputs.catalog import load_catalog
    >>> from topomodel.inputs.parts import Model
    >>> gpt = load_catalog().get("megatron-gpt-1t", Model)
    >>> model, full = flops_per_token(gpt, 2048, recompute="full", flash_attention=False)
    >>> round(full / model, 4)  # the full score matrix, and a recomputed forward
    1.3417
    >>> flops_per_token(gpt, 2048)[0] == model  # model FLOPs: however it is run
    True
    """
    counts = parameter_counts(model)
    forward, backward = attention_flops_per_token(model, seq,
                                                  flash_attention=flash_attention)
    causal, _ = attention_flops_per_token(model, seq, flash_attention=True)
    model_flops = 6 * counts["active"] + model.layers * 3 * causal
    layers_params = counts["active"] - model.vocab * model.hidden
    hardware = 6 * counts["active"] + model.layers * (forward + backward)
    if recompute == "full":
        hardware += 2 * layers_params + model.layers * forward
    elif recompute == "selective":
        hardware += model.layers * forward
    return model_flops, hardware
