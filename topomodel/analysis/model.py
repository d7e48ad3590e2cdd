"""A model's parameters, FLOPs per token and memory per accelerator (bytes)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from topomodel.catalog import Model
from topomodel.traffic.layout import Layout

if TYPE_CHECKING:
    from topomodel.analysis.step import StepAssumptions

BYTES = {"fp32": 4, "bf16": 2, "fp16": 2, "fp8": 1, "int8": 1}


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


def flops_per_token(model: Model, seq: int, *, recompute: bool = False) -> tuple[float, float]:
    """Training FLOPs per token: (model FLOPs, hardware FLOPs with recomputation)."""
    counts = parameter_counts(model)
    hd = model.head_dim or model.hidden // model.heads
    attention = 12 * model.layers * model.heads * hd * seq
    model_flops = 6 * counts["active"] + attention
    hardware = model_flops * (4 / 3 if recompute else 1)
    return model_flops, hardware


def _memory(model: Model, layout: Layout, a: StepAssumptions, seq: int,
            counts: dict[str, float]) -> dict[str, float]:
    """Bytes per accelerator: weights, gradients, optimizer state, activations."""
    dense = (counts["total"] - counts["experts"]) / (layout.tp * layout.pp)
    experts = counts["experts"] / (layout.tp * layout.pp * layout.ep)
    params = dense + experts
    weights = params * BYTES[a.compute_dtype]
    grads = params * BYTES[a.grad_dtype]
    zero = layout.dp_mode == "zero"
    replicas = layout.dp * layout.cp  # ranks holding the same dense weights
    optimizer = a.optimizer_bytes_per_param * (
        dense / (replicas if zero else 1) + experts / (replicas // layout.ep if zero else 1))
    layers = -(-model.layers // layout.pp)
    tokens = layout.micro_batch * seq / layout.cp
    d = model.hidden
    if layout.recompute:
        per_layer = 2 * tokens * d  # only each layer's input is kept
    else:  # Korthikanti et al. 2022: s b h (34 + 5 a s / h) bytes, split by TP with SP;
        # the 5 a s / h term is the attention scores, which FlashAttention does not keep
        scores = 0.0 if a.flash_attention else 5 * model.heads * seq / d
        per_layer = tokens * d * (34 + scores) / layout.tp
    in_flight = layout.pp  # 1F1B: the first stage holds pp microbatches
    activations = per_layer * layers * in_flight
    total = weights + grads + optimizer + activations
    return {"weights_bytes": weights, "gradients_bytes": grads, "optimizer_bytes": optimizer,
            "activations_bytes": activations, "total_bytes": total}
