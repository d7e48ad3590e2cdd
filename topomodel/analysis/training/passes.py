"""HBM bytes of the memory-bound passes around attention's inputs, the loss and the
embedding's gradient, per microbatch and rank, counted from the kernels Megatron-Core and
Transformer Engine run. :mod:`~topomodel.analysis.training.compute` times them at the
measured HBM rate, beside the norms, residual adds and activations it counts itself.

Each count is what a kernel reads plus what it writes (16-bit activations and weights,
fp32 logits), nothing measured and nothing fitted:

- **Attention's inputs** (:func:`attention_input_bytes`). Megatron-Core's
  ``SelfAttention.get_query_key_value_tensors`` views the QKV GEMM's output as
  ``[s, b, groups, (heads / groups + 2) x head_dim]``, splits it and reshapes the query to
  ``[s, b, heads, head_dim]``; with grouped-query attention (fewer key/value heads than
  heads) those strides cannot be merged, so the reshape copies the query
  (:data:`QUERY_COPY_BYTES`). Rotary embeddings (``apply_rope_fusion``, on in NeMo 2's
  Llama 3 and Nemotron configs) run Transformer Engine's fused RoPE kernel on the query
  and the key, forward and backward (:data:`ROTARY_BYTES`). When the query, key and
  value reach attention as separate buffers (a copied query, a rotated key), their
  gradients are separate too, and the split's backward (Transformer Engine's
  ``SplitAlongDim``, a no-op only when the three gradients are adjacent views of one
  buffer) concatenates them into the QKV gradient (:data:`SPLIT_GRAD_CONCAT_BYTES`).
- **The loss** (:data:`CROSS_ENTROPY_FORWARD_BYTES`, :data:`CROSS_ENTROPY_BACKWARD_BYTES`).
- **The embedding's gradient** (:func:`embedding_grad_bytes`).

Examples
--------
>>> from topomodel.inputs.catalog import load_catalog
>>> from topomodel.inputs.parts import Model
>>> from topomodel.traffic.layout import Layout
>>> llama = load_catalog().get("llama3-8b", Model)
>>> f, b = attention_input_bytes(llama, Layout(micro_batch=1), 8192)
>>> round(f / 1e6), round(b / 1e6)  # MB per layer: 32 query and 8 key/value heads
(302, 369)
"""

from __future__ import annotations

from topomodel.analysis.training.model import attention_dims
from topomodel.inputs.parts import Model
from topomodel.traffic.layout import Layout

QUERY_COPY_BYTES = 4.0
"""HBM bytes per query element of the reshape's copy under grouped-query attention (read
2, write 2), forward only: the backward's reshape of a contiguous gradient is a view."""

ROTARY_BYTES = 4.0
"""HBM bytes per query or key element of one pass of the fused rotary-embedding kernel
(Transformer Engine ``fused_rope``: reads the 16-bit tensor, writes the rotated one, the
angles' table negligible beside it), forward and again backward. The whole head is
written even under partial rotary embeddings (Nemotron-4 rotates half of it), since the
kernel's output is a new tensor."""

SPLIT_GRAD_CONCAT_BYTES = 4.0
"""HBM bytes per query, key and value element of the split's backward concatenation of
their separate gradients into the QKV gradient (read 2, write 2)."""

CROSS_ENTROPY_FORWARD_BYTES = 26.0
"""HBM bytes per logit of the vocabulary-parallel cross-entropy's forward, Megatron-Core's
fused version (``megatron/core/fusions/fused_cross_entropy.py``, the default in NeMo 2's
configs, ``cross_entropy_loss_fusion``): the 16-bit logits cast to fp32 with the row
maximum in the same compiled kernel (read 2, write 4), exp(logit - max) in place (read 4,
write 4), the row sum (read 4), and the softmax kept for the backward, divided in place
by the all-reduced sum (read 4, write 4). A lower bound: the maintainers' note in that
file says older compiled graphs copied a logits-sized buffer once more where a reduction
and an in-place update shared a graph; the unfused version (Megatron-LM 2022) subtracts
the maximum in a pass of its own and casts in another: 38."""

CROSS_ENTROPY_BACKWARD_BYTES = 14.0
"""HBM bytes per logit of the cross-entropy's backward: the saved fp32 softmax, minus one
at each target, scaled by the incoming gradient in place (read 4, write 4), then cast to
the 16-bit gradient the output layer's GEMMs read (read 4, write 2)."""


def attention_input_bytes(model: Model, layout: Layout, seq: int) -> tuple[float, float]:
    """Forward and backward HBM bytes, one layer and one microbatch on one rank, of the
    passes between the QKV GEMM and fused attention (module docstring): the query's copy
    under grouped-query attention, rotary embeddings, and the backward's concatenation
    of separate query, key and value gradients."""
    hd, kv_heads = attention_dims(model)
    tokens = layout.micro_batch * seq / layout.cp
    q = tokens * model.heads / layout.tp * hd
    kv = tokens * kv_heads / layout.tp * hd
    grouped = kv_heads < model.heads
    forward = QUERY_COPY_BYTES * q if grouped else 0.0
    backward = 0.0
    if model.rotary:
        forward += ROTARY_BYTES * (q + kv)
        backward += ROTARY_BYTES * (q + kv)
    if grouped or model.rotary:
        backward += SPLIT_GRAD_CONCAT_BYTES * (q + 2 * kv)
    return forward, backward


def embedding_grad_bytes(model: Model, layout: Layout, *, dtype_bytes: float,
                         main_grad_bytes: float) -> float:
    """HBM bytes, per microbatch on a first-stage rank, of the input embedding's weight
    gradient beyond its looked-up rows.

    The lookup's backward (PyTorch ``embedding_dense_backward``) returns a dense gradient
    of the rank's whole vocabulary slice, allocated as zeros (a write of ``dtype_bytes``
    per weight) before the rows are added; it is not a linear layer, so no GEMM
    accumulates it into the main gradient, and Megatron-Core's backward hook on the
    weight does (``DistributedDataParallel._make_backward_post_hook``:
    ``param.main_grad.add_(param.grad.data)``: read it, read and write the main
    gradient of ``main_grad_bytes`` per weight), every microbatch.
    """
    weights = model.vocab / layout.tp * model.hidden
    return weights * (2 * dtype_bytes + 2 * main_grad_bytes)
