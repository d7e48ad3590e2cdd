"""Memory per stage: Korthikanti et al. 2022's activation formulas, the schedules'
in-flight microbatches, MoE buffers, ZeRO and the stages that hold the embedding."""

import numpy as np
import pytest

from topomodel.analysis.training.memory import (
    layer_activations,
    layer_parameters,
    stage_memory,
    stage_parameters,
)
from topomodel.analysis.training.pipeline import chunk_layers, in_flight, schedule
from topomodel.inputs.parts import Model
from topomodel.traffic.layout import Layout

GPT = Model(id="gpt", file="", line=None, source="test", provenance="assumed", layers=96,
            hidden=12288, ffn_hidden=4 * 12288, heads=96, vocab=51200, sequence=2048,
            gated_ffn=False, tied_embeddings=True)
MOE = Model(id="moe", file="", line=None, source="test", provenance="assumed", layers=4,
            hidden=1024, ffn_hidden=4096, heads=16, vocab=32000, sequence=1024,
            experts=8, top_k=2, expert_ffn_hidden=1024, shared_experts=1)


def korthikanti(layout: Layout) -> float:
    """Table 2 of arXiv 2205.05198, bytes per layer (s b h (...)), t = tp."""
    s, b, h, a, t = 2048, layout.micro_batch, 12288, 96, layout.tp
    sbh = s * b * h
    if layout.recompute == "full":
        return 2 * sbh / (t if layout.sequence_parallel else 1)
    scores = 5 * a * s / (h * t) if layout.recompute == "none" else 0.0
    if layout.sequence_parallel:
        return sbh * (34 / t + scores)
    return sbh * (10 + 24 / t + scores)


@pytest.mark.parametrize("sp", [False, True], ids=["tp", "tp+sp"])
@pytest.mark.parametrize("recompute", ["none", "selective", "full"])
def test_per_layer_activations_are_korthikantis_table_2(sp, recompute):
    """GPT-3 175B's layer with dropout and the score matrix kept (no FlashAttention), as
    the paper's Megatron-LM ran it; the formulas leave out the sb-sized norm statistics,
    which the model leaves out too."""
    layout = Layout(tp=8, micro_batch=1, sequence_parallel=sp, recompute=recompute,
                    dropout=True, flash_attention=False)
    act, buffers = layer_activations(GPT, layout, 2048, moe=False, recompute=recompute)
    assert act == pytest.approx(korthikanti(layout), rel=1e-12)
    assert buffers == 0


def test_flash_attention_keeps_no_scores_and_no_dropout_keeps_no_masks():
    base = Layout(tp=8, sequence_parallel=True, dropout=False, flash_attention=True)
    act, _ = layer_activations(GPT, base, 2048, moe=False, recompute="none")
    s, h, t = 2048, 12288, 8
    # 34 s b h / t less the two masks (2 / t), plus fp32 softmax statistics per head
    assert act == pytest.approx(s * h * 32 / t + 4 * s * 96 / t)


def test_first_stage_holds_l_layers_in_1f1b_and_more_when_interleaved():
    """Section 4.2.3: the first 1F1B stage holds p microbatches of L/p layers (L layers'
    worth); interleaving with m chunks multiplies that by 1 + (p - 1) / (p m)."""
    p, layers, micro = 8, 96, 64
    flat = in_flight(schedule("1f1b", p, micro), chunk_layers(layers, p))
    assert flat[0] == layers and list(flat) == [layers // p * (p - s) for s in range(p)]
    for v in (2, 3, 4):
        looped = in_flight(schedule("1f1b", p, micro, v), chunk_layers(layers, p, v))
        assert looped[0] == pytest.approx(layers * (1 + (p - 1) / (p * v)))
    zb = in_flight(schedule("zb-h1", p, micro), chunk_layers(layers, p))
    assert zb.max() == flat.max()  # ZB-H1's peak is 1F1B's (Qi et al. 2023)


def _memory(model, layout, *, hot=1.0, micro=8, main_grad_bytes=4):
    sizes = chunk_layers(model.layers, layout.pp, layout.interleave)
    sched = schedule(layout.schedule, layout.pp, micro, layout.interleave)
    layers = sizes.sum(axis=1)
    moe_layers = layers if model.is_moe else np.zeros_like(layers)
    return stage_memory(model, layout, model.sequence, layers=layers, moe_layers=moe_layers,
                        in_flight=in_flight(sched, sizes).astype(float),
                        in_flight_micro=in_flight(sched, np.ones_like(sizes)).astype(float),
                        weight_bytes=2, optimizer_bytes_per_param=12,
                        main_grad_bytes=main_grad_bytes,
                        hot_expert_factor=hot)


def test_stage_parameters_add_up_to_the_published_model_sizes():
    """Multi-head attention has 4 h^2 weights a layer (Q, K and V, the output); with
    grouped-query attention K and V shrink to the KV heads: Llama 3 70B (64 heads, 8 KV
    heads of 128) has 2 h^2 + 2 h (8 x 128). Its stages then hold the released
    checkpoint's 70.6B (0.2 %: norms are left out, as in test_models_catalog.py)."""
    from topomodel.inputs.catalog import load_catalog

    assert layer_parameters(GPT)[0] == 4 * 12288**2
    llama = load_catalog().get("llama3-70b", Model)
    assert layer_parameters(llama)[0] == 2 * 8192**2 + 2 * 8192 * 8 * 128
    dense, experts = stage_parameters(llama, Layout(pp=4), np.full(4, 20), np.zeros(4))
    assert not experts.any()
    assert dense.sum() == pytest.approx(70.6e9, rel=0.002)


def test_embedding_on_the_first_stage_output_layer_and_logits_on_the_last():
    layout = Layout(tp=8, pp=4, dp=1)
    dense, experts = stage_parameters(GPT, layout, np.full(4, 24), np.zeros(4))
    embed = 51200 * 12288 / 8
    assert dense[0] - dense[1] == pytest.approx(embed)
    assert dense[3] - dense[1] == pytest.approx(embed)  # the tied copy when pp > 1
    assert not experts.any()
    mem = _memory(GPT, layout)
    assert mem.logits[:3].sum() == 0
    tokens = 2048
    assert mem.logits[3] == 4 * tokens * 51200 / 8 + 4 * tokens * 12288 / 8
    one = stage_parameters(GPT, Layout(tp=8), np.full(1, 96), np.zeros(1))[0]
    assert one[0] == pytest.approx(dense.sum() - embed)  # one copy without a pipeline


def test_moe_buffers_grow_with_top_k_and_the_hot_expert():
    layout = Layout(dp=4, ep=4, micro_batch=1)
    cold = _memory(MOE, layout).moe_buffers[0]
    hot = _memory(MOE, layout, hot=1.5).moe_buffers[0]
    tokens, d = 1024, 1024
    copies = tokens * 2  # top_k copies of the rank's tokens
    # dispatched and combined copies (2 x 2 h bytes), the gated experts' two activation
    # inputs and the second matrix's input (6 bytes per unit of width), fp32 router
    # probabilities
    per_layer = 2 * 2 * copies * d + 6 * copies * 1024 + 4 * tokens * 8
    assert cold == pytest.approx(4 * per_layer)  # 4 layers, one microbatch in flight
    assert hot - cold == pytest.approx(4 * 0.5 * (2 * 2 * copies * d + 6 * copies * 1024))


def test_zero_stages_shard_optimizer_then_gradients_then_weights():
    base = _memory(GPT, Layout(tp=8, pp=8, dp=16, zero=0))
    for stage in (1, 2, 3):
        mem = _memory(GPT, Layout(tp=8, pp=8, dp=16, zero=stage))
        assert mem.optimizer[1] == pytest.approx(base.optimizer[1] / 16)
        assert mem.gradients[1] == pytest.approx(base.gradients[1] / (16 if stage >= 2 else 1))
        assert mem.weights[1] == pytest.approx(base.weights[1] / (16 if stage >= 3 else 1))
    zero3 = _memory(GPT, Layout(tp=8, pp=8, dp=16, zero=3))
    per_layer = base.weights[1] / 12  # two gathered layers resident
    assert zero3.working[1] == pytest.approx(2 * per_layer)


@pytest.mark.parametrize(("grad_bytes", "whole", "fixed", "sharded"),
                         [(4, 18, 6, 12), (2, 20, 4, 16)])
def test_bytes_per_parameter_follow_megatrons_distributed_optimizer_table(
        grad_bytes, whole, fixed, sharded):
    """docs/user-guide/features/dist_optimizer.md: bf16 weights with fp32 gradients 18
    and 6 + 12/d; with 16-bit gradients 20 and 4 + 16/d, the extra 4 the optimizer
    step's fp32 gradient copy, which never meets the activations (none held here)."""
    d = 16
    sizes, moe = _stage_layers(GPT, 8)
    params = stage_parameters(GPT, Layout(tp=8, pp=8), sizes, moe)[0][1]
    for zero, per_param in ((0, whole), (1, fixed + sharded / d)):
        mem = stage_memory(GPT, Layout(tp=8, pp=8, dp=d, zero=zero), GPT.sequence,
                           layers=sizes, moe_layers=moe, in_flight=np.zeros(8),
                           in_flight_micro=np.zeros(8), weight_bytes=2,
                           optimizer_bytes_per_param=12, main_grad_bytes=grad_bytes,
                           hot_expert_factor=1.0)
        held = mem.weights[1] + mem.gradients[1] + mem.optimizer[1] + mem.working[1]
        assert held == pytest.approx(per_param * params)


def test_the_fp32_gradient_copy_is_not_held_beside_the_activations():
    layout = Layout(tp=8, pp=8, dp=2, zero=1)
    fp32, bf16 = (_memory(GPT, layout, main_grad_bytes=b) for b in (4, 2))
    assert (bf16.optimizer == fp32.optimizer).all()
    assert bf16.working[0] == 0  # the first stage holds pp microbatches: more than the copy
    assert bf16.working[-1] > 0  # the last holds one: there the step's copy is the peak
    assert (bf16.total < fp32.total).all()  # half the gradient buffer, no copy on top


def _stage_layers(model, pp):
    sizes = chunk_layers(model.layers, pp, 1).sum(axis=1)
    return sizes, np.zeros_like(sizes)


@pytest.mark.parametrize("name", ["llama3-8b", "mixtral-8x7b"])
def test_the_memory_kept_across_zero_stages_is_the_memory_found_afresh(name):
    """:func:`stage_memory` keeps what a layout holds whatever its ZeRO stage: every
    part of every stage, for every ZeRO stage, recomputation and dropout, bit for bit
    what it finds with nothing kept; what it returned before is not written."""
    from dataclasses import asdict, replace

    from topomodel.analysis.training.memory import forget_held
    from topomodel.inputs.catalog import load_catalog

    model = load_catalog().get(name, Model)
    sched = schedule("1f1b", 4, 8, 2)
    sizes = chunk_layers(model.layers, 4, 2)
    moe = sizes.copy() if model.is_moe else 0 * sizes
    args = {"layers": sizes.sum(axis=1), "moe_layers": moe.sum(axis=1),
            "in_flight": in_flight(sched, sizes).astype(float),
            "in_flight_micro": in_flight(sched, np.ones_like(sizes)).astype(float),
            "weight_bytes": 2.0, "optimizer_bytes_per_param": 12.0,
            "main_grad_bytes": 2.0, "hot_expert_factor": 1.2}
    base = Layout(tp=2, pp=4, dp=8, ep=2 if model.is_moe else 1, micro_batch=2)
    for recompute in ("none", "selective", "full"):
        for dropout in (False, True):
            kept = []
            for zero in range(4):
                layout = replace(base, zero=zero, recompute=recompute, dropout=dropout)
                kept.append(stage_memory(model, layout, 4096, **args))
                kept[-1].activations[0] += 1.0  # a caller's write stays its own
            for zero in range(4):
                layout = replace(base, zero=zero, recompute=recompute, dropout=dropout)
                forget_held()
                fresh = asdict(stage_memory(model, layout, 4096, **args))
                fresh["activations"][0] += 1.0
                for part, value in asdict(kept[zero]).items():
                    assert np.array_equal(value, fresh[part]), (zero, recompute, part)
