"""Memory per accelerator, stage by stage, in bytes: weights, gradients, optimizer
state, activations (with the in-flight microbatches of the schedule), logits, MoE
buffers and the recomputation working set.

Activations follow Korthikanti et al., "Reducing Activation Recomputation in Large
Transformer Models" (arXiv 2205.05198), section 4, generalised to grouped-query
attention, gated MLPs and mixture-of-experts layers. Per layer and microbatch, with
T = micro_batch x seq / cp tokens per rank, t = tp, sp = t with sequence parallelism
(else 1), 16-bit activations and 1-byte dropout masks:

- attention: the norm's and QKV's shared input 4 T h / sp (norm input and output), Q,
  K, V and the projection's input 2 T (2 a + 2 k) q / t (a query heads, k key/value
  heads of size q), a dropout mask T h / sp; without FlashAttention also the softmax
  output, its dropout mask and output: 5 x micro_batch x (a / t) x (seq / cp) x seq;
- MLP: its norm's input and output 4 T h / sp (counted with the attention's norm above
  as the two norms), the first matrix's input 2 T h / sp, the activation's input(s)
  2 T f / t (4 T f / t gated) and the second matrix's input 2 T f / t, a mask T h / sp;
- an MoE layer replaces the MLP by the router's input, the dispatched tokens (top_k
  copies of the rank's T / sp tokens, 2 h bytes each, before and after the experts),
  the experts' intermediates as an MLP of width expert_ffn_hidden on those copies, the
  shared experts as an MLP, and fp32 router probabilities; the busiest rank holds
  ``hot_expert_factor`` times the routed copies.

For GPT-3-shaped layers (a q = h, k = a, f = 4 h, with dropout) this is the paper's
sbh(10 + 24 / t + 5 as / (ht)) without sequence parallelism and sbh / t (34 + 5 as / h)
with it (tests/analysis/test_memory.py holds it to both). Selective recomputation drops the
softmax/dropout term (the paper's sbh(10 + 24/t) and 34 sbh / t); full recomputation
keeps only each layer's input, 2 T h / sp, plus one layer's full activations while it is
recomputed. The first stage adds the embedding's dropout mask per in-flight microbatch;
the last stage the final norm's and logit layer's inputs and the fp32 logits, 4 T v / t
(section 4.3).

Parameters, as Megatron-LM's distributed optimizer documents them
(docs/user-guide/features/dist_optimizer.md: 18 bytes per parameter for bf16 weights
with fp32 gradients, 6 + 12/d sharded over d ranks; 20 and 4 + 16/d for 16-bit
gradients): 16-bit weights, the gradient buffer in the main-gradient precision (fp32 by
default: Megatron-LM accumulates and reduces bf16 training's gradients in fp32 unless
``--grad-reduce-in-bf16``) and ``optimizer_bytes_per_param`` of optimizer state (Adam:
fp32 master weights and two moments, 12), plus, where the gradient buffer is 16-bit, the
optimizer step's transient :data:`FP32_GRAD_COPY_BYTES`. 18 bytes per parameter is what
Korthikanti et al.'s Figure 1 shows (45.6 GiB of parameters and optimizer state for 22B
/ 8 ranks). DeepSpeed's ZeRO paper counts 2 + 2 + 12 = 16 (Rajbhandari et al., section
3.1: fp16 gradients, no fp32 gradient copy). ZeRO (Rajbhandari et al., SC'20) shards
over the ranks holding the same weights (DP x CP; for routed experts DP x CP / EP):
stage 1 the optimizer state, 2 also the gradients, 3 also the weights, which are then
gathered a layer at a time (two layers resident: the one computing and the one
prefetched). The first and last stages hold the word embedding and the output layer
(with tied embeddings, a copy on each when pp > 1).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from topomodel.analysis.training.model import attention_dims
from topomodel.inputs.parts import Model
from topomodel.kept import Kept
from topomodel.traffic.layout import Layout

FP32_GRAD_COPY_BYTES = 4.0
"""Bytes per parameter of the optimizer's fp32 copy of its gradient shard when the
gradient buffer is 16-bit (Megatron-LM's table: 4 + 16/d for 16-bit gradients against
6 + 12/d for fp32, the 16 being 12 of Adam state and master weights and 4 of fp32
gradient). The copy is made in the optimizer step (``_copy_model_grads_to_main_grads``:
``shard_main_param.grad = shard_model_grad.float()``) and freed by the next step's
``zero_grad(set_to_none=True)`` (megatron/core/optimizer/distrib_optimizer.py), so it
never coexists with the activations: it counts in ``working`` only where it is larger
than what the forward and backward hold."""


@dataclass(frozen=True)
class StageMemory:
    """Bytes per accelerator of every pipeline stage (arrays of length pp), by part."""

    weights: np.ndarray
    gradients: np.ndarray
    optimizer: np.ndarray
    activations: np.ndarray
    logits: np.ndarray
    moe_buffers: np.ndarray
    working: np.ndarray  # recomputation, ZeRO-3 gathered layers, the step's gradient copy

    @property
    def total(self) -> np.ndarray:
        """All parts, per stage."""
        return (self.weights + self.gradients + self.optimizer + self.activations
                + self.logits + self.moe_buffers + self.working)

    @property
    def worst_stage(self) -> int:
        """The stage that needs the most memory."""
        return int(np.argmax(self.total))

    def as_dict(self) -> dict[str, float]:
        """The worst stage's parts in bytes (``total_bytes`` is what must fit)."""
        s = self.worst_stage
        parts = {"weights_bytes": self.weights[s], "gradients_bytes": self.gradients[s],
                 "optimizer_bytes": self.optimizer[s],
                 "activations_bytes": self.activations[s], "logits_bytes": self.logits[s],
                 "moe_buffers_bytes": self.moe_buffers[s], "working_bytes": self.working[s],
                 "total_bytes": self.total[s]}
        return {k: float(v) for k, v in parts.items()}


def layer_parameters(model: Model) -> tuple[float, float, float]:
    """Parameters of one layer: (attention, dense-layer MLP, MoE-layer dense part),
    and the routed experts of one MoE layer are ``moe_routed_parameters``."""
    d, (hd, kv) = model.hidden, attention_dims(model)
    attention = d * model.heads * hd * 2 + 2 * d * kv * hd
    mats = 3 if model.gated_ffn else 2
    dense = mats * d * model.ffn_hidden
    expert = mats * d * model.expert_ffn_hidden
    moe_dense = model.shared_experts * expert + d * model.experts
    return attention, dense, moe_dense


def moe_routed_parameters(model: Model) -> float:
    """Routed-expert parameters of one MoE layer."""
    mats = 3 if model.gated_ffn else 2
    return model.experts * mats * model.hidden * model.expert_ffn_hidden


def stage_parameters(model: Model, layout: Layout, layers: np.ndarray,
                     moe_layers: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per stage, the parameters one rank holds: (dense, routed experts), read-only.
    ``layers`` and ``moe_layers`` count each stage's layers and MoE layers. Kept by what
    they read (the model, TP, PP, EP and the counts): a search asks them of every
    layout and rank order it bounds, for a few pipelines."""
    key = (id(model), layout.tp, layout.pp, layout.ep, layers.dtype.str, layers.tobytes(),
           moe_layers.dtype.str, moe_layers.tobytes())
    return _PARAMETERS.get(key, (model,), lambda: _read_only(
        _stage_parameters(model, layout, layers, moe_layers)))


def _read_only(arrays: tuple[np.ndarray, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """``arrays``, made read-only (they are kept and shared)."""
    for a in arrays:
        a.setflags(write=False)
    return arrays


KEPT_PARAMETERS = 4096
"""Stage parameter sets :func:`stage_parameters` keeps (all dropped when full)."""

_PARAMETERS: Kept[tuple[np.ndarray, np.ndarray]] = Kept(KEPT_PARAMETERS)


def forget_stage_parameters() -> None:
    """Drop every parameter set :func:`stage_parameters` keeps."""
    _PARAMETERS.clear()


def _stage_parameters(model: Model, layout: Layout, layers: np.ndarray,
                      moe_layers: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """:func:`stage_parameters`, found."""
    attention, dense_mlp, moe_dense = layer_parameters(model)
    dense_layers = layers - moe_layers
    dense = (layers * attention + dense_layers * dense_mlp + moe_layers * moe_dense) / layout.tp
    embed = model.vocab * model.hidden / layout.tp
    dense = dense.astype(float)
    dense[0] += embed
    if layout.pp > 1 or not model.tied_embeddings:
        dense[-1] += embed  # the output layer (a copy of the tied embedding when pp > 1)
    experts = moe_layers * moe_routed_parameters(model) / (layout.tp * layout.ep)
    return dense, experts.astype(float)


def layer_activations(model: Model, layout: Layout, seq: int, *, moe: bool,
                      recompute: str, hot_expert_factor: float = 1.0) -> tuple[float, float]:
    """Bytes one layer keeps for backward per microbatch on one rank: (activations,
    MoE buffers), under ``recompute`` (``none``, ``selective``, ``full``)."""
    d, t = model.hidden, layout.tp
    sp = t if layout.sequence_parallel else 1
    tokens = layout.micro_batch * seq / layout.cp
    if recompute == "full":
        return 2 * tokens * d / sp, 0.0
    hd, kv = attention_dims(model)
    mask = 1.0 if layout.dropout else 0.0
    gates = 2 if model.gated_ffn else 1
    act = (4 * tokens * d / sp + 2 * tokens * (2 * model.heads + 2 * kv) * hd / t
           + mask * tokens * d / sp)
    if not layout.flash_attention and recompute == "none":
        act += (2 + 3 * mask) * layout.micro_batch * model.heads / t * seq / layout.cp * seq
    elif layout.flash_attention:  # softmax statistics, fp32, per query and head
        act += 4 * tokens * model.heads / t
    act += 4 * tokens * d / sp + mask * tokens * d / sp  # the MLP's norm; its dropout mask
    buffers = 0.0
    if moe:
        copies = tokens / sp * model.top_k * hot_expert_factor
        width = model.expert_ffn_hidden / (t // sp)
        buffers = 2 * 2 * copies * d + (2 * gates + 2) * copies * width
        buffers += 4 * tokens / sp * model.experts  # router probabilities, fp32
        if model.shared_experts:
            shared = model.shared_experts * model.expert_ffn_hidden / t
            act += (2 * gates + 2) * tokens * shared
    else:
        act += (2 * gates + 2) * tokens * model.ffn_hidden / t
    return act, buffers


# PLR0913: keyword-only options of an entry point, as networkx's; a record would hide them
def stage_memory(model: Model, layout: Layout, seq: int, *, layers: np.ndarray,  # noqa: PLR0913
                 moe_layers: np.ndarray, in_flight: np.ndarray, in_flight_micro: np.ndarray,
                 weight_bytes: float, optimizer_bytes_per_param: float,
                 main_grad_bytes: float, hot_expert_factor: float) -> StageMemory:
    """Memory of every stage.

    ``layers``/``moe_layers`` per stage; ``in_flight`` the most layers' worth of
    microbatches a stage holds (from the schedule, :func:`~topomodel.analysis.training.pipeline.
    in_flight`), ``in_flight_micro`` the most microbatches (for the embedding's mask).
    """
    dense, experts = stage_parameters(model, layout, layers, moe_layers)
    replicas = layout.dp * layout.cp
    expert_replicas = max(1, replicas // layout.ep)
    shard = 1.0 / replicas if layout.zero >= 3 else 1.0
    eshard = 1.0 / expert_replicas if layout.zero >= 3 else 1.0
    weights = (dense * shard + experts * eshard) * weight_bytes
    gshard, egshard = ((1.0 / replicas, 1.0 / expert_replicas) if layout.zero >= 2
                       else (1.0, 1.0))
    gradients = (dense * gshard + experts * egshard) * main_grad_bytes
    oshard, eoshard = ((1.0 / replicas, 1.0 / expert_replicas) if layout.zero >= 1
                       else (1.0, 1.0))
    optimizer = (dense * oshard + experts * eoshard) * optimizer_bytes_per_param
    grad_copy = (dense * oshard + experts * eoshard) * (
        FP32_GRAD_COPY_BYTES if main_grad_bytes < 4 else 0.0)
    key = (id(model), seq, hot_expert_factor,
           *(getattr(layout, f) for f in _HELD_FIELDS),
           *(x.dtype.str for x in (layers, moe_layers, in_flight, in_flight_micro)),
           layers.tobytes(), moe_layers.tobytes(), in_flight.tobytes(),
           in_flight_micro.tobytes())
    activations, logits, moe_buffers, working = _HELD.get(key, (model,), lambda: _held(
        model, layout, seq, layers=layers, moe_layers=moe_layers, in_flight=in_flight,
        in_flight_micro=in_flight_micro, hot_expert_factor=hot_expert_factor))
    if layout.zero >= 3:
        per_layer_params = (dense + experts) / np.maximum(layers, 1)
        working = working + 2 * per_layer_params * weight_bytes
    working = np.maximum(working, 0.0)
    held_in_step = activations + logits + moe_buffers + working
    working += np.maximum(grad_copy - held_in_step, 0.0)  # the peak is the larger of the two
    return StageMemory(weights, gradients, optimizer, activations.copy(), logits.copy(),
                       moe_buffers.copy(), working)


KEPT_HELD = 64
"""Sets of a layout's activations, logits, MoE buffers and recomputation memory
:func:`stage_memory` keeps (all dropped when full), by what they read: every layout
field but ZeRO and the rank order, the sequence, the hot-expert factor and the
stages' layers and in-flight microbatches. A search checks the memory of a layout's
ZeRO stages one after the other; they differ only in the weights, gradients and
optimizer states and ZeRO 3's gathered layers."""

_HELD: Kept[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = Kept(KEPT_HELD)
_HELD_FIELDS = tuple(f for f in Layout.__dataclass_fields__ if f not in ("zero", "order"))


def forget_held() -> None:
    """Drop every set :func:`stage_memory` keeps (the next call finds its set afresh)."""
    _HELD.clear()


def _held(model: Model, layout: Layout, seq: int, *, layers: np.ndarray,
          moe_layers: np.ndarray, in_flight: np.ndarray, in_flight_micro: np.ndarray,
          hot_expert_factor: float) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """What :func:`stage_memory` holds per stage whatever the ZeRO stage (read-only):
    activations, logits, MoE buffers and the recomputed layer's working memory."""
    recompute = layout.recompute
    dense_act, _ = layer_activations(model, layout, seq, moe=False, recompute=recompute)
    moe_act, moe_buf = layer_activations(model, layout, seq, moe=True, recompute=recompute,
                                         hot_expert_factor=hot_expert_factor)
    share_moe = np.divide(moe_layers, layers, out=np.zeros(len(layers)), where=layers > 0)
    per_layer = dense_act * (1 - share_moe) + moe_act * share_moe
    activations = per_layer * in_flight
    moe_buffers = moe_buf * share_moe * in_flight
    t = layout.tp
    sp = t if layout.sequence_parallel else 1
    tokens = layout.micro_batch * seq / layout.cp
    if layout.dropout:
        activations[0] += tokens * model.hidden / sp * in_flight_micro[0]
    logits = np.zeros(len(layers))
    logits[-1] = 4 * tokens * model.hidden / sp + 4 * tokens * model.vocab / t
    working = np.zeros(len(layers))
    if recompute != "none":  # one layer re-materialised while its backward runs
        full_dense, _ = layer_activations(model, layout, seq, moe=False, recompute="none")
        full_moe, full_buf = layer_activations(model, layout, seq, moe=True,
                                               recompute="none",
                                               hot_expert_factor=hot_expert_factor)
        working += np.where(moe_layers > 0, full_moe + full_buf, full_dense) - np.where(
            moe_layers > 0, moe_act + moe_buf, dense_act)
    out = (activations, logits, moe_buffers, working)
    for x in out:
        x.setflags(write=False)
    return out

