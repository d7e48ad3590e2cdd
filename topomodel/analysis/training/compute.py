"""Compute time of the work of one training step, op by op, in seconds per rank.

Each matrix multiply of a transformer layer (QKV, attention scores and values, output
projection, MLP or router, shared and routed experts, the logits) is timed on the
accelerator's own measured GEMM rates (the catalog's ``gemm`` sweeps), and every
memory-bound op (norms, residual adds, activations, softmax, dropout, the expert
permutes, the cross-entropy, the optimizer step) on its measured HBM bandwidth
(``hbm_achieved``). Nothing uses one flat efficiency unless the caller asks for it
(``override``).

GEMM time, for ``count`` products of M x K by K x N in one (batched or grouped) call::

    t = max(2 M' N' K count / (peak x e(F')),  bytes / HBM)       (a roofline)

- **e(F)**, the size curve: the efficiency (achieved / dense peak) of the measured
  square GEMMs (M = N = K), interpolated linearly in log FLOPs and held flat beyond the
  smallest and largest measured size. A sweep with one shape (a best-shape "maximum
  achievable" figure) gives one efficiency for every size, which is optimistic for
  small GEMMs; the catalog note says so. Small hidden sizes and tensor-parallel splits
  give small GEMMs and land low on the curve; large ones near its top.
- **Tile quantization**: M and N are rounded up to whole tiles of ``TILE`` (M', N'), the
  work a GPU does for a partial tile. 128 is the smallest edge of the large tiles
  cuBLAS uses for 16-bit GEMMs on Ampere and Hopper (256 x 128, 128 x 256, 128 x 128:
  NVIDIA, *Matrix Multiplication Background User's Guide*, DU-09799-001, sections
  "Typical tile dimensions in cuBLAS" and "Tile quantization"). A head size of 96 or an
  expert with few tokens pays for it.
- **Bandwidth**: the operands and the result cross HBM at least once,
  ``bytes = dtype x (M K + K N + M N) x count``; skinny shapes (few tokens, a thin TP
  slice) become bandwidth-bound. Wave quantization (the last partial wave of thread
  blocks) is not modelled; the size curve holds its average effect at the measured
  sizes.

Memory-bound ops move ``bytes`` at the measured HBM rate (STREAM Triad, the kernel whose
two reads and one write are closest to a fused element-wise pass). Each op's bytes are
counted from what it reads and writes (16-bit activations, 1-byte dropout masks, fp32
logits); the counts are in :func:`layer_work` and :func:`optimizer_bytes_per_param`.

Examples
--------
>>> from topomodel.inputs.catalog import load_catalog
>>> from topomodel.inputs.parts import Accelerator
>>> a100 = load_catalog().get("a100-sxm-80gb", Accelerator)
>>> dev = device_model(a100, "bf16")
>>> round(dev.efficiency(2 * 16384.0**3), 3)  # the largest measured square GEMM
0.822
>>> round(dev.efficiency(2 * 4096.0**3), 3)
0.731
"""

from __future__ import annotations

import math
import operator
from dataclasses import dataclass, field

import numpy as np

from topomodel.analysis.training.model import BYTES, attention_dims, attention_flops_per_token
from topomodel.analysis.training.passes import (
    CROSS_ENTROPY_BACKWARD_BYTES,
    CROSS_ENTROPY_FORWARD_BYTES,
    attention_input_bytes,
    embedding_grad_bytes,
)
from topomodel.errors import UsageError
from topomodel.inputs.parts import Accelerator, Model
from topomodel.kept import Kept
from topomodel.traffic.layout import Layout

TILE = 128
"""GEMM tile edge for tile quantization (see the module docstring)."""

DEFAULT_HBM_EFFICIENCY = 0.83
"""Achieved / peak HBM bandwidth of an accelerator with no measurement in the catalog:
the lowest STREAM Triad ratio the catalog holds (A100 80GB, 1.70 of 2.039 TB/s; H100
2.90 of 3.35 and H200 4.15 of 4.8 TB/s are 0.87 and 0.86; Azure AI Benchmarking
Guide)."""

SUSTAINED_VS_BURST = 680.0 / 794.5
"""Sustained / burst rate of a GEMM sweep timed as a burst (``clocks: burst``: S.
Bekman's MAMF, 50 warm-up and 100 timed iterations of one shape, before the clocks
settle under the power limit), 0.856. AMD defines Max-Achievable FLOPs as the best
shape timed at the median clock of a thermally settled run, and estimates it for H100
SXM at about 680 TFLOP/s (ROCm blog, B. Sander, "Understanding Peak, Max-Achievable &
Delivered FLOPs, Part 1", 2025-02-14, Figure 1; a preliminary estimate, read off the
chart to +-20 TFLOP/s, so 0.83-0.88), against MAMF's 794.5 TFLOP/s burst at its best
shape. Measured on H100 only; applied to every burst sweep (H200, B200, GB200, B300,
MI355X: an assumption, no sustained figure is published for them). Cross-check, not an
input: SemiAnalysis measured about 720 TFLOP/s bf16 on H100 and H200 at Llama-70B TP-8
training shapes, itself a burst (do_bench, 200 ms per shape, with pauses "to reduce power
throttling"; "MI300X vs H100 vs H200 Benchmark Part 1: Training", 2024-12-22)."""

ADAM_STEP_BYTES = 38.0
"""HBM bytes the optimizer step moves per parameter it updates: Adam reads the fp32
main gradient, master weight and both moments (16) and writes the master weight and
moments (12) and the 16-bit model weight (2); the gradient-norm pass for clipping reads
the gradient again (4) and the next step's accumulation starts from a zeroed gradient
(4). Kingma and Ba's update with Megatron-LM's mixed-precision layout (fp32 main grads
and master weights), counted, not measured."""


@dataclass(frozen=True)
class Gemm:
    """``count`` products of an M x K by a K x N matrix in one call."""

    m: float
    n: float
    k: float
    count: float = 1.0

    @property
    def flops(self) -> float:
        """2 M N K count."""
        return 2.0 * self.m * self.n * self.k * self.count

    def dgrad(self) -> Gemm:
        """The input gradient's product: M x N by N x K."""
        return Gemm(self.m, self.k, self.n, self.count)

    def wgrad(self) -> Gemm:
        """The weight gradient's product: K x M by M x N."""
        return Gemm(self.k, self.n, self.m, self.count)


@dataclass(frozen=True)
class Device:
    """An accelerator's compute model for one data type: peak, size curve, HBM."""

    name: str
    peak_flops: float
    curve_log_flops: np.ndarray
    curve_efficiency: np.ndarray
    hbm_Bps: float
    attention_efficiency: float | None  # measured fused attention / peak, forward
    dtype_bytes: int
    override: float | None = None
    notes: tuple[str, ...] = ()
    attention_backward_efficiency: float | None = None  # backward; None: the forward's
    attention_kernel: str = ""  # the catalog kernel the attention rates are of
    # (sequence, forward, backward efficiency) by measured length; () or one: no curve
    attention_by_seq: tuple[tuple[float, float, float], ...] = ()

    def efficiency(self, flops: float | np.ndarray) -> float | np.ndarray:
        """Achieved / peak of a GEMM call of ``flops`` FLOPs (the size curve)."""
        if self.override is not None:
            return np.full_like(np.asarray(flops, dtype=float), self.override) if np.ndim(
                flops) else self.override
        out = np.interp(np.log(np.maximum(flops, 1.0)), self.curve_log_flops,
                        self.curve_efficiency)
        return out if np.ndim(flops) else float(out)

    def gemm_s(self, g: Gemm, *, out_bytes_per_element: float | None = None) -> float:
        """Seconds for one GEMM call (a roofline on the size curve, tiles rounded up).

        With an ``override`` efficiency the time is FLOPs / (peak x override), the flat
        model; ``out_bytes_per_element`` is the result's bytes per element when it is not
        the compute type (an fp32 gradient accumulated in place reads and writes 8).
        The bytes beyond the 16-bit store every measured rate already includes add to
        the time rather than hide under the math: the epilogue runs after a tile's main
        loop, and AMD counts "some or all of the final epilogue and store to memory is
        exposed and cannot be overlapped" among the reasons a GEMM in an application
        runs below Max-Achievable FLOPs (ROCm blog, "Understanding Peak, Max-Achievable
        & Delivered FLOPs, Part 1", 2025-02-14, section "Delivered FLOPs").
        """
        if g.m <= 0 or g.n <= 0 or g.k <= 0 or g.count <= 0:
            return 0.0
        if self.override is not None:
            return g.flops / (self.peak_flops * self.override)
        padded = 2.0 * _tiles(g.m) * _tiles(g.n) * g.k * g.count
        compute = padded / (self.peak_flops * float(self.efficiency(padded)))
        out = self.dtype_bytes if out_bytes_per_element is None else out_bytes_per_element
        moved = (self.dtype_bytes * (g.m * g.k + g.k * g.n) + out * g.m * g.n) * g.count
        roofline = max(compute, moved / self.hbm_Bps)
        extra = max(0.0, out - self.dtype_bytes) * g.m * g.n * g.count
        return roofline + extra / self.hbm_Bps

    def memory_s(self, nbytes: float) -> float:
        """Seconds to move ``nbytes`` through HBM at the achieved rate."""
        return nbytes / self.hbm_Bps

    def attention_s(self, flops: float, *, backward: bool = False,
                    seq: float | None = None) -> float:
        """Seconds of fused attention doing ``flops`` FLOPs in its forward (or
        ``backward``) pass over sequences of ``seq`` tokens: at the measured rate of that
        pass (interpolated in log sequence length between the lengths measured, held
        flat beyond them), else at the GEMM size curve (optimistic: fused attention runs
        below large GEMMs where both are measured)."""
        if flops <= 0:
            return 0.0
        if self.override is not None:
            return flops / (self.peak_flops * self.override)
        eff = self.attention_efficiency
        if backward and self.attention_backward_efficiency is not None:
            eff = self.attention_backward_efficiency
        if seq is not None and len(self.attention_by_seq) > 1:
            lengths, forward, back = (np.log([p[0] for p in self.attention_by_seq]),
                                      [p[1] for p in self.attention_by_seq],
                                      [p[2] for p in self.attention_by_seq])
            eff = float(np.interp(math.log(seq), lengths, back if backward else forward))
        eff = eff or float(self.efficiency(flops))
        return flops / (self.peak_flops * eff)


def _tiles(x: float) -> float:
    return math.ceil(x / TILE) * TILE


def attention_rates(accelerator: Accelerator, dtype: str, seq: int | None = None
                    ) -> tuple[str, float | None, float | None]:
    """The fused-attention kernel a step runs on ``accelerator`` and its forward and
    backward rates in ``dtype``, FLOP/s (``None``: not measured), measured at ``seq``
    tokens (``None``: the first rate the catalog lists for the pass).

    The kernel is the one Transformer Engine (Megatron-Core's attention) picks:
    cuDNN's fused attention where the catalog has a cuDNN rate (TE prefers it on Hopper
    and newer, the GPUs cuDNN rates are catalogued for: "Disabling FlashAttention to
    give FusedAttention preference on Hopper+", TE
    ``dot_product_attention/utils.py``), else the first kernel the catalog lists
    (FlashAttention, which TE prefers before Hopper). Rates of a causal mask are taken
    before those of an unstated one and a non-causal one is never taken (the step's
    models are causal decoders). A pass without its own rate takes the kernel's
    ``forward+backward`` rate, whose FLOPs over time is exact for the two together.
    """
    records = [p for p in accelerator.flash_attention if p.dtype == dtype
               and p.causal is not False]
    if not records:
        return "", None, None
    kernels = [p.kernel for p in records]
    kernel = "cudnn" if "cudnn" in kernels else kernels[0]
    mine = sorted((p for p in records if p.kernel == kernel),
                  key=lambda p: p.causal is not True)

    def rate(pass_name: str) -> float | None:
        at = [p for p in mine if seq is None or p.seq == seq]
        return next((p.rate_flops for p in at if p.pass_name == pass_name), next(
            (p.rate_flops for p in at if p.pass_name == "forward+backward"), None))

    return kernel, rate("forward"), rate("backward")


def _attention_by_seq(accelerator: Accelerator, dtype: str, kernel: str, peak: float
                      ) -> tuple[tuple[float, float, float], ...]:
    """(sequence, forward, backward efficiency) at each length both passes of the
    kernel were measured at, shortest first."""
    lengths = sorted({p.seq for p in accelerator.flash_attention
                      if p.kernel == kernel and p.dtype == dtype})
    out = []
    for seq in lengths:
        _, forward, backward = attention_rates(accelerator, dtype, seq)
        if forward is not None and backward is not None:
            out.append((float(seq), forward / peak, backward / peak))
    return tuple(out)


def device_model(accelerator: Accelerator, dtype: str, *, override: float | None = None,
                 hbm_efficiency: float | None = None,
                 sustained_vs_burst: float = SUSTAINED_VS_BURST) -> Device:
    """The compute model of ``accelerator`` for matmuls in ``dtype``.

    The size curve comes from the accelerator's GEMM sweep of ``dtype`` with the most
    square shapes, a sustained sweep before a burst one of as many; failing that, from a
    sweep of another 16-bit type with the same dense peak (A100: fp16 stands for bf16).
    A burst sweep's rates are multiplied by ``sustained_vs_burst``
    (:data:`SUSTAINED_VS_BURST`), the rate a training run sustains for hours under the
    power limit, and the notes say so. ``override`` replaces the curve by one flat
    efficiency (the old model, for what-ifs); ``hbm_efficiency`` replaces the measured
    HBM rate by a share of the peak.

    Raises
    ------
    UsageError
        When the catalog has no peak for ``dtype``, or no GEMM measurement that applies
        and no ``override`` is given.
    """
    peak = accelerator.peak_flops.get(dtype)
    if peak is None:
        raise UsageError(f"{accelerator.id} has no {dtype} peak in the catalog;"
                         f" it has {', '.join(accelerator.peak_flops)}")
    notes: list[str] = []
    if hbm_efficiency is not None:
        hbm = accelerator.hbm_Bps * hbm_efficiency
    elif accelerator.hbm_achieved is not None:
        hbm = accelerator.hbm_achieved.rate_Bps
    else:
        hbm = accelerator.hbm_Bps * DEFAULT_HBM_EFFICIENCY
        notes.append(f"{accelerator.id}: no measured HBM bandwidth in the catalog;"
                     f" {DEFAULT_HBM_EFFICIENCY:.0%} of peak assumed")
    kernel, forward_rate, backward_rate = attention_rates(accelerator, dtype)
    attention = None if forward_rate is None else forward_rate / peak
    attention_b = None if backward_rate is None else backward_rate / peak
    by_seq = _attention_by_seq(accelerator, dtype, kernel, peak)
    nbytes = BYTES.get(dtype, 2)
    if override is not None:
        return Device(accelerator.id, peak, np.zeros(1), np.full(1, override), hbm,
                      attention, nbytes, override, tuple(notes), attention_b, kernel,
                      by_seq)
    candidates = [s for s in accelerator.gemm if s.dtype == dtype] or [
        s for s in accelerator.gemm
        if BYTES.get(s.dtype) == nbytes and (s.peak_flops or accelerator.peak_flops.get(
            s.dtype)) == peak]
    if not candidates:
        raise UsageError(f"{accelerator.id} has no measured {dtype} GEMM rates in the"
                         " catalog (its 'gemm' sweeps); give --compute-efficiency F for a"
                         " flat efficiency, or add a sweep")
    sweep = max(candidates, key=lambda s: (sum(p.m == p.n == p.k for p in s.points),
                                           s.clocks == "sustained"))
    sweep_peak = sweep.peak_flops or accelerator.peak_flops[sweep.dtype]
    square = [p for p in sweep.points if p.m == p.n == p.k] or list(sweep.points)
    square.sort(key=lambda p: p.flops)
    log_f = np.log([p.flops for p in square])
    eff = np.array([p.rate_flops / sweep_peak for p in square])
    if sweep.clocks == "burst":
        eff = eff * sustained_vs_burst
        notes.append(f"{accelerator.id}: {sweep.dtype} GEMM rates measured as a burst;"
                     f" slowed to sustained clocks under the power limit"
                     f" (x {sustained_vs_burst:.3f}, SUSTAINED_VS_BURST)")
    if len(square) == 1:
        notes.append(f"{accelerator.id}: one measured {sweep.dtype} GEMM shape; its"
                     f" {eff[0]:.0%} of peak holds at every size")
    return Device(accelerator.id, peak, log_f, eff, hbm, attention, nbytes, None,
                  tuple(notes), attention_b, kernel, by_seq)


@dataclass(frozen=True)
class LayerTimes:
    """One transformer layer, one microbatch, one rank: seconds.

    ``fwd``, ``dgrad`` and ``wgrad`` hold each linear layer's GEMM time by name
    (``qkv``, ``proj``, ``fc1``, ``fc2``, ``router``, ``experts1``, ``experts2``,
    ``shared1``, ``shared2``); ``core_fwd`` and ``core_bwd`` the attention core
    (scores, softmax, dropout, values: the part selective recomputation repeats);
    ``mem_fwd`` and ``mem_bwd`` the other memory-bound passes; ``experts_fwd`` and
    ``experts_bwd`` the routed-expert share of all that (what a hot expert multiplies);
    ``accumulate`` the separate pass that adds each weight gradient into its main
    gradient when that is not fused into the GEMM.
    """

    fwd: dict[str, float] = field(default_factory=dict)
    dgrad: dict[str, float] = field(default_factory=dict)
    wgrad: dict[str, float] = field(default_factory=dict)
    core_fwd: float = 0.0
    core_bwd: float = 0.0
    mem_fwd: float = 0.0
    mem_bwd: float = 0.0
    experts_fwd: float = 0.0
    experts_bwd: float = 0.0
    accumulate: float = 0.0

    @property
    def forward_s(self) -> float:
        """The whole forward pass of the layer."""
        return sum(self.fwd.values()) + self.core_fwd + self.mem_fwd

    @property
    def backward_s(self) -> float:
        """The whole backward pass (input and weight gradients)."""
        return (sum(self.dgrad.values()) + self.weight_grad_s + self.core_bwd
                + self.mem_bwd)

    @property
    def weight_grad_s(self) -> float:
        """The weight-gradient work alone (a zero-bubble schedule's W pass)."""
        return sum(self.wgrad.values()) + self.accumulate


def layer_gemms(model: Model, layout: Layout, seq: int, *, moe: bool) -> dict[str, Gemm]:
    """The linear layers of one layer for one microbatch on one rank, by name.

    Tokens per rank T = micro_batch x seq / cp; under tensor parallelism the QKV and
    first MLP matrices are split by columns and the projection and second MLP matrix by
    rows (Megatron-LM), so every GEMM sees all T tokens and 1/tp of a weight. Routed
    experts are one grouped call over the rank's experts, each receiving its share of
    the routed tokens (top_k copies of the rank's tokens, spread evenly); with sequence
    parallelism each TP rank routes its own 1/tp of the tokens through whole experts,
    without it the experts are split by TP like the dense MLP.
    """
    d, tp = model.hidden, layout.tp
    hd, kv = attention_dims(model)
    tokens = layout.micro_batch * seq / layout.cp
    gated = 2 if model.gated_ffn else 1
    out = {"qkv": Gemm(tokens, (model.heads + 2 * kv) * hd / tp, d),
           "proj": Gemm(tokens, d, model.heads * hd / tp)}
    if not moe:
        out["fc1"] = Gemm(tokens, gated * model.ffn_hidden / tp, d)
        out["fc2"] = Gemm(tokens, d, model.ffn_hidden / tp)
        return out
    sp = tp if layout.sequence_parallel else 1
    local = model.experts / layout.ep
    rows = tokens / sp * model.top_k / local  # tokens per local expert
    width = model.expert_ffn_hidden / (tp // sp)
    out["router"] = Gemm(tokens / sp, model.experts, d)
    out["experts1"] = Gemm(rows, gated * width, d, local)
    out["experts2"] = Gemm(rows, d, width, local)
    if model.shared_experts:
        shared = model.shared_experts * model.expert_ffn_hidden / tp
        out["shared1"] = Gemm(tokens, gated * shared, d)
        out["shared2"] = Gemm(tokens, d, shared)
    return out


def attention_core(model: Model, layout: Layout, seq: int) -> tuple[list[Gemm], list[Gemm],
                                                                     float]:
    """Scores and values of one layer on one rank: forward GEMMs, backward GEMMs and the
    score elements (micro_batch x local heads x seq / cp queries x seq keys)."""
    hd, _ = attention_dims(model)
    heads = model.heads / layout.tp
    q, k = seq / layout.cp, seq
    count = layout.micro_batch * heads
    fwd = [Gemm(q, k, hd, count), Gemm(q, hd, k, count)]  # Q K^T, P V
    bwd = [Gemm(q, k, hd, count), Gemm(k, hd, q, count),  # dP = dO V^T, dV = P^T dO
           Gemm(q, hd, k, count), Gemm(k, hd, q, count)]  # dQ = dS K, dK = dS^T Q
    return fwd, bwd, count * q * k


def layer_times(device: Device, model: Model, layout: Layout, seq: int, *,
                moe: bool, main_grad_bytes: float = 4.0) -> LayerTimes:
    """Seconds of one layer's forward and backward work (one microbatch, one rank).

    Memory-bound bytes per element touched (16-bit activations, 1-byte masks):
    forward norm 4 (read, write); residual add 6 (read both, write; +1 with a dropout
    mask); activation 4 (GeLU) or 6 (SwiGLU: two inputs); softmax 4 and attention
    dropout 5 per score; expert permute 4 and unpermute-and-combine 2 top_k + 2 per
    token and hidden unit. Backward: norm 6, residual 6 (+1), activation 6 or 10,
    softmax 6 and dropout 5 per score, permutes as forward. Norms and residuals act on
    the rank's 1/tp of the tokens under sequence parallelism. Between the QKV GEMM and
    attention: the query's copy, rotary embeddings and the gradients' concatenation
    (:func:`~topomodel.analysis.training.passes.attention_input_bytes`).

    Weight gradients accumulate into main gradients of ``main_grad_bytes`` (fp32: 4):
    fused into the GEMM, which then reads and writes them (Megatron-LM's gradient
    accumulation fusion, added in February 2022); otherwise the GEMM writes a 16-bit
    gradient and a separate pass reads it and reads and writes the main gradient, for
    every weight, every microbatch.
    """
    d, tp = model.hidden, layout.tp
    sp = tp if layout.sequence_parallel else 1
    tokens = layout.micro_batch * seq / layout.cp
    drop = 1.0 if layout.dropout else 0.0
    gated = model.gated_ffn
    gemms = layer_gemms(model, layout, seq, moe=moe)
    fwd = {name: device.gemm_s(g) for name, g in gemms.items()}
    dgrad = {name: device.gemm_s(g.dgrad()) for name, g in gemms.items()}
    fused = layout.grad_accumulation_fusion
    wgrad = {name: device.gemm_s(g.wgrad(), out_bytes_per_element=(
        2 * main_grad_bytes if fused else None)) for name, g in gemms.items()}
    weights = sum(g.k * g.n * g.count for g in gemms.values())
    accumulate = 0.0 if fused else device.memory_s(
        weights * (device.dtype_bytes + 2 * main_grad_bytes))
    residual = tokens * d / sp
    mem_f = (2 * 4 + 2 * (6 + drop)) * residual
    mem_b = (2 * 6 + 2 * (6 + drop)) * residual
    act_f, act_b = (6.0, 10.0) if gated else (4.0, 6.0)
    experts_f = experts_b = 0.0
    if moe:
        routed = tokens / sp * model.top_k * model.expert_ffn_hidden / (tp // sp)
        permute = (4 + 2 * model.top_k + 2) * tokens / sp * d
        router = 8.0 * tokens / sp * model.experts  # fp32 logits and probabilities
        experts_f = (fwd["experts1"] + fwd["experts2"]
                     + device.memory_s(act_f * routed))
        experts_b = (dgrad["experts1"] + dgrad["experts2"] + wgrad["experts1"]
                     + wgrad["experts2"] + device.memory_s(act_b * routed))
        mem_f += act_f * routed + permute + router
        mem_b += act_b * routed + permute + router
        if model.shared_experts:
            shared = tokens * model.shared_experts * model.expert_ffn_hidden / tp
            mem_f += act_f * shared
            mem_b += act_b * shared
    else:
        mem_f += act_f * tokens * model.ffn_hidden / tp
        mem_b += act_b * tokens * model.ffn_hidden / tp
    qkv_f, qkv_b = attention_input_bytes(model, layout, seq)
    mem_f += qkv_f
    mem_b += qkv_b
    core_f, core_b = _attention_times(device, model, layout, seq)
    return LayerTimes(fwd, dgrad, wgrad, core_f, core_b, device.memory_s(mem_f),
                      device.memory_s(mem_b), experts_f, experts_b, accumulate)


def _attention_times(device: Device, model: Model, layout: Layout, seq: int
                     ) -> tuple[float, float]:
    """Forward and backward seconds of the attention core of one layer.

    FlashAttention: one fused kernel doing the FLOPs
    :func:`~topomodel.analysis.training.model.attention_flops_per_token` counts (the
    count the HFU reads): causal attention skips the blocks above the diagonal, half of
    the full 4 x score-elements x head-size FLOPs, and its backward does 5 products for
    the forward's 2 (it recomputes the scores). Without it (Megatron-LM 2022), the full
    score matrix is computed (the GEMMs of :func:`attention_core`, the same count),
    written, soft-maxed and dropped out in HBM.
    """
    if layout.flash_attention:
        forward, backward = attention_flops_per_token(model, seq, flash_attention=True)
        # the rank's tokens through its 1/tp of the heads; a kernel call sees seq / cp
        # queries (and as many keys per step of the context-parallel ring)
        tokens = layout.micro_batch * seq / layout.cp / layout.tp
        length = seq / layout.cp
        return (device.attention_s(forward * tokens, seq=length),
                device.attention_s(backward * tokens, backward=True, seq=length))
    fwd, bwd, scores = attention_core(model, layout, seq)
    drop = 5.0 if layout.dropout else 0.0
    f = sum(device.gemm_s(g) for g in fwd) + device.memory_s((4 + drop) * scores)
    b = sum(device.gemm_s(g) for g in bwd) + device.memory_s((6 + drop) * scores)
    return f, b


@dataclass(frozen=True)
class EdgeTimes:
    """The work only the first and last pipeline stages do, per microbatch, seconds:
    the embedding (first stage) and the final norm, logits and loss (last stage)."""

    embed_fwd: float
    embed_bwd: float
    head_fwd: float
    head_bwd: float
    head_wgrad: float


def edge_times(device: Device, model: Model, layout: Layout, seq: int, *,
               main_grad_bytes: float = 4.0) -> EdgeTimes:
    """Embedding lookup and its gradient scatter-add (memory-bound), and the output
    layer: final norm, logits GEMM (vocabulary split by TP), and the vocabulary-parallel
    cross-entropy on fp32 logits (Korthikanti et al. 2022, section 4.3), its bytes per
    logit counted from Megatron-Core's fused kernels
    (:data:`~topomodel.analysis.training.passes.CROSS_ENTROPY_FORWARD_BYTES`, 26, and
    ``CROSS_ENTROPY_BACKWARD_BYTES``, 14). The embedding's backward also writes a dense
    gradient of the rank's vocabulary slice and adds it to the main gradient, every
    microbatch (:func:`~topomodel.analysis.training.passes.embedding_grad_bytes`)."""
    d, tp = model.hidden, layout.tp
    sp = tp if layout.sequence_parallel else 1
    tokens = layout.micro_batch * seq / layout.cp
    drop = 5.0 if layout.dropout else 0.0
    embed_f = device.memory_s(2 * tokens * d + (2 + drop) * tokens * d / sp)
    embed_b = device.memory_s(2 * tokens * d + 8 * tokens * d + embedding_grad_bytes(
        model, layout, dtype_bytes=2.0, main_grad_bytes=main_grad_bytes))  # 16-bit weights
    logits = Gemm(tokens, model.vocab / tp, d)
    elements = tokens * model.vocab / tp
    head_f = (device.memory_s(4 * tokens * d / sp) + device.gemm_s(logits)
              + device.memory_s(CROSS_ENTROPY_FORWARD_BYTES * elements))
    head_b = (device.memory_s(6 * tokens * d / sp) + device.gemm_s(logits.dgrad())
              + device.memory_s(CROSS_ENTROPY_BACKWARD_BYTES * elements))
    fused = layout.grad_accumulation_fusion
    head_w = device.gemm_s(logits.wgrad(), out_bytes_per_element=(
        2 * main_grad_bytes if fused else None))
    if not fused:
        head_w += device.memory_s(d * model.vocab / tp
                                  * (device.dtype_bytes + 2 * main_grad_bytes))
    return EdgeTimes(embed_f, embed_b, head_f, head_b, head_w)


def optimizer_bytes_per_param() -> float:
    """HBM bytes per updated parameter of the optimizer step (:data:`ADAM_STEP_BYTES`)."""
    return ADAM_STEP_BYTES


LAYER_TIME_FIELDS = ("tp", "cp", "ep", "micro_batch", "sequence_parallel", "dropout",
                     "flash_attention", "grad_accumulation_fusion")
"""The layout fields :func:`layer_times` and :func:`edge_times` read (a search's
layouts that agree on them share those times)."""

_layer_time_fields = operator.attrgetter(*LAYER_TIME_FIELDS)  # as getattr reads them

_KEPT_TIMES = 512
_TIMES: Kept[tuple[LayerTimes, LayerTimes | None, EdgeTimes]] = Kept(_KEPT_TIMES)
_DEVICES: Kept[Device] = Kept(_KEPT_TIMES)


def shared_device_model(accelerator: Accelerator, dtype: str, *,
                        override: float | None = None,
                        hbm_efficiency: float | None = None) -> Device:
    """:func:`device_model`, made once per accelerator entry and options in a process
    (a search asks it of every layout; its curves are read, never written)."""
    key = (id(accelerator), dtype, override, hbm_efficiency)
    return _DEVICES.get(key, (accelerator,), lambda: device_model(
        accelerator, dtype, override=override, hbm_efficiency=hbm_efficiency))


def shared_layer_times(device: Device, model: Model, layout: Layout, seq: int, *,
                       main_grad_bytes: float) -> tuple[LayerTimes, LayerTimes | None,
                                                        EdgeTimes]:
    """(:func:`layer_times` of a dense layer, of an MoE layer or None for a dense model,
    :func:`edge_times`), kept by what they read (:data:`LAYER_TIME_FIELDS`, the device,
    the model, the sequence and the gradient bytes): the layouts of one search that
    differ only in their pipeline, DP, ZeRO or order share them."""
    key = (id(device), id(model), seq, main_grad_bytes,
           *_layer_time_fields(layout))
    return _TIMES.get(key, (device, model), lambda: (
        layer_times(device, model, layout, seq, moe=False, main_grad_bytes=main_grad_bytes),
        layer_times(device, model, layout, seq, moe=True,
                    main_grad_bytes=main_grad_bytes) if model.is_moe else None,
        edge_times(device, model, layout, seq, main_grad_bytes=main_grad_bytes)))
