"""Inference decode: seconds per decode step and tokens/s, bounded by HBM bandwidth, with
the tensor- and expert-parallel communication of every step routed on the fabric.

One decode step produces one token for each of the ``batch`` sequences a model replica
(``tp`` accelerators) serves, each with ``context`` tokens already in its KV cache. Per
accelerator and step::

    step = max(HBM weights + HBM KV cache, compute) + exposed communication

- **HBM weights**: every weight the step multiplies is read once from HBM (the batch
  shares the read): the layers' attention and MLP weights and the output layer, split
  ``tp`` ways; of an MoE layer's routed experts, those the batch's tokens touch
  (:func:`experts_touched`), split ``tp`` ways over the ``ep`` ranks holding them. The
  input embedding is a lookup of ``batch`` rows (left out, well under 0.1 %).
- **HBM KV cache**: each sequence's keys and values of every layer, ``2 x kv_heads x
  head_dim`` elements per token; a rank holds ``ceil(kv_heads / tp)`` heads (vLLM and
  TensorRT-LLM replicate key/value heads when ``tp`` exceeds them). A latent-attention
  (MLA) model caches its latent and RoPE key instead, whole on every TP rank
  (:mod:`~topomodel.analysis.serving.kvcache`).
- **Rate**: bytes over the accelerator's measured HBM bandwidth (``hbm_achieved``, as
  the training step's memory-bound ops; :func:`~topomodel.analysis.training.compute.device_model`).
- **Compute** is a floor, not a model of kernels: the step's FLOPs (2 per parameter per
  token, plus the attention core 4 x context x heads x head_dim per layer and token) at
  the best efficiency the accelerator's GEMM measurements reach (or one flat
  ``compute_efficiency`` where the catalog has no GEMM sweep). Large batches reach it.
- **Communication**, per layer and step, routed with all groups of a kind at once on the
  real rank grid (:func:`~topomodel.traffic.layout.rank_groups`) and timed by the step's
  algorithm search (:func:`~topomodel.analysis.collectives.collective.fastest`): with ``tp > 1`` an
  all-reduce of the batch's activations after attention and after the MLP (or MoE
  block), and an all-gather of the logits; with ``ep > 1`` an all-to-all dispatch and
  combine per MoE layer, each rank sending ``batch x top_k`` activation vectors. The
  share hidden behind compute is ``comm_overlap``.

The result is an upper bound on tokens/s: kernel launch gaps, attention kernels below
the HBM rate, sampling and scheduling are not modelled (docs/decode.md compares it with
published figures). DeepSeek-V3's latent attention (MLA) weights are held as full
multi-head attention in the catalog, which overstates its attention weights (its KV
cache is MLA's).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from topomodel import limits
from topomodel.analysis.assumptions import TimeModel
from topomodel.analysis.collectives.collective import fastest
from topomodel.analysis.serving.decode_assumptions import DecodeAssumptions
from topomodel.analysis.serving.kvcache import kv_bytes_per_token_per_rank
from topomodel.analysis.training.compute import device_model
from topomodel.analysis.training.memory import layer_parameters, moe_routed_parameters
from topomodel.analysis.training.model import BYTES, attention_dims
from topomodel.errors import ParameterError, UsageError
from topomodel.fabric.tables import Fabric
from topomodel.inputs.parts import Accelerator, Model, System
from topomodel.inputs.records import check_share
from topomodel.traffic.algorithms import auto_candidates
from topomodel.traffic.collectives import collective_traffic
from topomodel.traffic.communicators import group_blocks
from topomodel.traffic.layout import Layout, rank_groups
from topomodel.traffic.phases import Traffic


@dataclass(frozen=True)
class DecodeComm:
    """One collective of a decode step, per accelerator: sizes bytes, times seconds."""

    kind: str  # tp, logits, ep
    collective: str
    algorithm: str
    size_bytes: float  # per call, nccl-tests convention
    calls: int  # per decode step
    time_s: float  # all calls of one step
    spills: bool  # groups leave the scale-up domain
    tier: str = ""  # tier of the link that bounds its slowest phase


@dataclass(frozen=True)
class DecodeResult:
    """A decode step: seconds per step by part, tokens/s, bytes per accelerator.

    ``step_time_s = max(hbm_s, compute_s) + comm_exposed_s`` with ``hbm_s =
    hbm_weights_s + hbm_kv_s``; each step emits one token per sequence of the batch.
    """

    model: str
    accelerator: str
    tp: int
    ep: int
    dp: int
    batch: int
    context: int
    dtype: str
    kv_dtype: str
    weight_bytes_read: float  # per accelerator and step
    kv_bytes_read: float
    hbm_Bps: float
    hbm_weights_s: float
    hbm_kv_s: float
    compute_s: float
    comm_s: float
    comm_exposed_s: float
    step_time_s: float
    accelerators_per_system: int
    comm: tuple[DecodeComm, ...]
    memory_bytes: float  # weights held plus KV cache, per accelerator
    hbm_capacity_bytes: float
    experts_touched: float  # share of a rank's routed experts read per step (MoE)
    comm_overlap: float
    warnings: tuple[str, ...]
    compute_efficiency: float = 1.0  # share of the peak the compute floor runs at
    compute_efficiency_flat: bool = False  # given (--compute-efficiency), not measured

    @property
    def hbm_s(self) -> float:
        """HBM time of one step, seconds."""
        return self.hbm_weights_s + self.hbm_kv_s

    @property
    def tokens_per_s_per_sequence(self) -> float:
        """Tokens/s one user sees."""
        return 1.0 / self.step_time_s

    @property
    def tokens_per_s_per_accelerator(self) -> float:
        """Output tokens/s of all sequences, per accelerator."""
        return self.batch / self.step_time_s / self.tp

    @property
    def tokens_per_s_per_system(self) -> float:
        """Output tokens/s per system (server, node or rack of the design)."""
        return self.tokens_per_s_per_accelerator * self.accelerators_per_system

    @property
    def tokens_per_s_total(self) -> float:
        """Output tokens/s of every replica the decode uses (dp x tp accelerators)."""
        return self.tokens_per_s_per_accelerator * self.tp * self.dp

    @property
    def fits(self) -> bool:
        """Whether weights and KV cache fit the accelerator's HBM."""
        return self.memory_bytes <= self.hbm_capacity_bytes

    @property
    def wall(self) -> str:
        """What binds the step: ``hbm-weights``, ``hbm-kv-cache``, ``compute`` or
        ``communication`` (exposed communication longer than the on-device time)."""
        device = max(self.hbm_s, self.compute_s)
        if self.comm_exposed_s > device:
            return "communication"
        if self.compute_s > self.hbm_s:
            return "compute"
        return "hbm-weights" if self.hbm_weights_s >= self.hbm_kv_s else "hbm-kv-cache"


def experts_touched(experts: int, top_k: int, tokens: float) -> float:
    """Expected share (0-1) of an MoE layer's routed experts that ``tokens`` tokens
    choose, each picking ``top_k`` distinct experts uniformly: 1 - (1 - k/E)^tokens.

    Uniform routing is what load-balanced MoE training aims for; a skewed router touches
    fewer experts (less weight traffic) but loads the hot ones' ranks more.

    Examples
    --------
    >>> experts_touched(8, 2, 1)
    0.25
    >>> round(experts_touched(256, 8, 64), 3)
    0.869
    """
    if experts <= 0 or top_k <= 0:
        return 0.0
    return 1.0 - (1.0 - top_k / experts) ** tokens


_DEFAULTS = DecodeAssumptions()  # decode_step's defaults: the assumptions' own


# PLR0913: keyword-only options of an entry point, as networkx's; a record would hide them
def decode_step(fabric: Fabric, model: Model, *, tp: int = 1, ep: int = 1,  # noqa: PLR0913
                dp: int | None = None, batch: int = _DEFAULTS.batch,
                context: int | None = None, dtype: str = _DEFAULTS.dtype,
                kv_dtype: str | None = None, compute_efficiency: float | None = None,
                hbm_efficiency: float | None = None, comm_overlap: float = _DEFAULTS.comm_overlap,
                activation_dtype: str = _DEFAULTS.activation_dtype,
                time_model: TimeModel | None = None, routing: str = "ecmp", seed: int = 0,
                ranks: np.ndarray | None = None) -> DecodeResult:
    """One decode step of ``model`` on ``fabric``: seconds by part and tokens/s.

    ``dp`` replicas of ``tp`` accelerators (default: as many as fill the fabric, a
    multiple of ``ep``) each decode ``batch`` sequences of ``context`` tokens (default:
    the model's training sequence); EP groups are ``ep`` replicas whose experts are
    split between them. ``kv_dtype`` defaults to ``dtype``. ``compute_efficiency`` (a
    0-1 share of the peak) replaces the accelerator's measured GEMM curve by one flat
    efficiency, as the step's does, for accelerators without GEMM sweeps in the
    catalog; ``hbm_efficiency`` replaces the measured HBM rate. The defaults and their
    reasons are :class:`~topomodel.analysis.serving.decode_assumptions.DecodeAssumptions`'s.
    ``ranks`` (accelerator node numbers, ``dp x tp`` of them) places the replicas on the
    fabric (default: its first accelerators).

    Raises
    ------
    UsageError
        For sizes that do not divide the model or fit the fabric, an unknown data type,
        or an accelerator without figures for ``dtype``.
    """
    kv_dtype = kv_dtype or dtype
    for name, value in (("--dtype", dtype), ("--kv-dtype", kv_dtype),
                        ("--activation-dtype", activation_dtype)):
        if value not in BYTES:
            raise UsageError(f"{name}: unknown data type {value!r}; choose from"
                             f" {', '.join(BYTES)}")
    if batch < 1:
        raise ParameterError("batch", f"at least 1 sequence, got {batch}")
    check_share(comm_overlap, "comm_overlap")
    context = model.sequence if context is None else context
    if context < 1:
        raise ParameterError("context", f"at least 1 token, got {context}")
    for flag, count, name, what in (
            ("--context", context, "MAX_SEQUENCE_TOKENS", "tokens per sequence"),
            ("--batch x --context", batch * context, "MAX_STEP_TOKENS",
             "tokens in the batch's context")):
        refusal = limits.above(count, name, what)
        if refusal:
            raise UsageError(f"{flag}: {refusal}")
    _check(model, fabric, tp, ep)
    n = fabric.accelerator_count
    if dp is None:
        dp = n // tp // ep * ep
        if dp < 1:
            raise UsageError(f"tp={tp} x ep={ep} needs {tp * ep} accelerators; the fabric"
                             f" has {n}")
    layout = Layout(tp=tp, dp=dp, ep=ep)  # checks dp against ep
    if layout.world > n:
        raise UsageError(f"tp={tp} x dp={dp} needs {layout.world} accelerators; the fabric"
                         f" has {n}")
    if ranks is None:
        ranks = fabric.accelerators[:layout.world]
    elif len(ranks) != layout.world:
        raise UsageError(f"tp={tp} x dp={dp} is {layout.world} ranks; {len(ranks)} given")
    system = fabric.catalog.get(fabric.design.system, System)
    accelerator = fabric.catalog.get(system.accelerator, Accelerator)
    device = device_model(accelerator, dtype, override=compute_efficiency,
                          hbm_efficiency=hbm_efficiency)
    wbytes, kvbytes, abytes = BYTES[dtype], BYTES[kv_dtype], BYTES[activation_dtype]

    attention, dense_mlp, moe_dense = layer_parameters(model)
    moe_layers = model.layers - model.dense_layers if model.is_moe else 0
    dense_layers = model.layers - moe_layers
    expert = moe_routed_parameters(model) / model.experts if model.is_moe else 0.0
    output = model.vocab * model.hidden
    touched = experts_touched(model.experts, model.top_k, batch * ep)
    rank_experts = model.experts / ep
    dense_read = (model.layers * attention + dense_layers * dense_mlp
                  + moe_layers * moe_dense + output) / tp
    experts_read = moe_layers * rank_experts * touched * expert / tp
    weights_read = (dense_read + experts_read) * wbytes
    hd, _ = attention_dims(model)
    kv_read = kv_bytes_per_token_per_rank(model, tp, kvbytes) * batch * context
    held = weights_held_bytes(model, tp, ep, wbytes)

    flops = 2 * batch * (dense_read + moe_layers * model.top_k * expert / tp)
    flops += 4 * batch * context * (model.heads / tp) * hd * model.layers
    best = float(np.max(device.curve_efficiency))
    compute = flops / (device.peak_flops * best)

    comm = serving_collectives(fabric, model, layout, ranks, batch, batch, abytes,
                               time_model or TimeModel(), routing, seed)
    comm_s = sum(c.time_s for c in comm)
    exposed = comm_s * (1 - comm_overlap)
    hbm_w, hbm_kv = device.memory_s(weights_read), device.memory_s(kv_read)
    step = max(hbm_w + hbm_kv, compute) + exposed
    warnings = [f"{c.kind.upper()} groups leave the scale-up domain" for c in comm
                if c.spills and c.kind in ("tp", "ep")]
    warnings = list(dict.fromkeys(warnings)) + list(device.notes)
    memory = held + kv_read
    if memory > accelerator.hbm_bytes:
        warnings.append(f"weights and KV cache need {memory / 1e9:.1f} GB per accelerator;"
                        f" {accelerator.id} has {accelerator.hbm_bytes / 1e9:.0f} GB")
    if model.id == "deepseek-v3":
        warnings.append("deepseek-v3's latent attention (MLA) weights are held as full"
                        " multi-head attention: its attention weights are overstated")
    return DecodeResult(model.id, accelerator.id, tp, ep, dp, batch, context, dtype,
                        kv_dtype, weights_read, kv_read, device.hbm_Bps, hbm_w, hbm_kv,
                        compute, comm_s, exposed, step, system.accelerators, tuple(comm),
                        memory, accelerator.hbm_bytes, touched if model.is_moe else 0.0,
                        comm_overlap, tuple(warnings), best, compute_efficiency is not None)


def weights_held_bytes(model: Model, tp: int, ep: int, dtype_bytes: int) -> float:
    """Weight bytes each rank of a ``tp`` x ``ep`` replica group holds: the dense layers,
    the embedding and the output layer split ``tp`` ways, each MoE layer's routed experts
    split over ``ep`` ranks and ``tp`` ways (one matrix when the embeddings are tied)."""
    attention, dense_mlp, moe_dense = layer_parameters(model)
    moe_layers = model.layers - model.dense_layers if model.is_moe else 0
    dense_layers = model.layers - moe_layers
    expert = moe_routed_parameters(model) / model.experts if model.is_moe else 0.0
    ends = 1 if model.tied_embeddings else 2
    dense = (model.layers * attention + dense_layers * dense_mlp + moe_layers * moe_dense
             + ends * model.vocab * model.hidden) / tp
    return (dense + moe_layers * model.experts / ep * expert / tp) * dtype_bytes


def _check(model: Model, fabric: Fabric, tp: int, ep: int) -> None:
    if tp < 1 or ep < 1:
        raise UsageError(f"--tp and --ep are at least 1, got tp={tp}, ep={ep}")
    if model.heads % tp:
        raise ParameterError("tp", f"{tp} must divide the {model.heads} heads of {model.id}")
    if ep > 1 and not model.is_moe:
        raise UsageError(f"{model.id} has no experts; --ep must be 1")
    if model.is_moe and model.experts % ep:
        raise ParameterError("ep", f"{ep} must divide the {model.experts} experts of"
                                   f" {model.id}")


# PLR0913: one computation's arrays and options passed on as they are
def serving_collectives(fabric: Fabric, model: Model, layout: Layout,  # noqa: PLR0913
                        ranks: np.ndarray, tokens: float, logit_tokens: float, abytes: int,
                        time_model: TimeModel, routing: str, seed: int
                        ) -> list[DecodeComm]:
    """The collectives of one forward pass of ``tokens`` tokens per replica (a decode
    step: the batch; a prefill: the prompt) on replicas placed on ``ranks`` (``layout.
    world`` accelerator node numbers), each timed per call with every group of its kind
    at once (all replicas run together): per layer two TP all-reduces of the tokens'
    activations, one all-gather of ``logit_tokens`` tokens' logits, and per MoE layer an
    EP all-to-all dispatch and combine of ``top_k`` copies of each token."""
    domain = fabric.node_arrays["domain"]
    tiers = fabric.links["tier"].to_numpy()
    moe_layers = model.layers - model.dense_layers if model.is_moe else 0
    out: list[DecodeComm] = []

    def add(kind: str, collective: str, groups: np.ndarray, size: float, calls: int) -> None:
        if calls <= 0 or groups.shape[1] < 2:
            return
        rows = group_blocks(fabric, groups)  # checked once, shared by the candidates

        def build(alg: str) -> Traffic:
            return collective_traffic(fabric, collective, rows, size, algorithm=alg)

        candidates = auto_candidates(fabric, collective, int(groups.shape[1]))
        alg, _, timing, _ = fastest(fabric, build, candidates, routing=routing, seed=seed,
                                    time_model=time_model)
        doms = domain[groups]
        spills = bool(((doms != doms[:, :1]) | (doms < 0)).any())
        slowest = max(timing.phases, key=lambda p: p.steps * p.bandwidth_s, default=None)
        tier = str(tiers[slowest.bottleneck]) if slowest and slowest.bottleneck >= 0 else ""
        out.append(DecodeComm(kind, collective, alg, size, calls, calls * timing.time_s,
                              spills, tier))

    if layout.tp > 1:
        groups = rank_groups(ranks, layout, "tp")
        add("tp", "allreduce", groups, tokens * model.hidden * abytes, 2 * model.layers)
        add("logits", "allgather", groups, logit_tokens * model.vocab * abytes, 1)
    if layout.ep > 1 and moe_layers:
        per_rank = tokens * model.top_k * model.hidden * abytes
        add("ep", "alltoall", rank_groups(ranks, layout, "ep"), per_rank, 2 * moe_layers)
    return out
