"""The memory-bound passes around attention's inputs, the loss and the embedding's
gradient: closed-form byte counts, and the step's compute timing them at the HBM rate."""

from dataclasses import replace

import pytest

from topomodel.analysis.training.compute import (
    Gemm,
    device_model,
    edge_times,
    layer_times,
)
from topomodel.analysis.training.passes import (
    CROSS_ENTROPY_BACKWARD_BYTES,
    CROSS_ENTROPY_FORWARD_BYTES,
    attention_input_bytes,
    embedding_grad_bytes,
)
from topomodel.inputs.catalog import load_catalog
from topomodel.inputs.parts import Accelerator, Model
from topomodel.traffic.layout import Layout

CATALOG = load_catalog()
H100 = device_model(CATALOG.get("h100-sxm", Accelerator), "bf16")


def _model(**figures) -> Model:
    base = {"layers": 1, "hidden": 4096, "ffn_hidden": 16384, "heads": 32,
            "vocab": 32000, "sequence": 4096}
    return Model(id="m", file="", line=None, source="test", provenance="assumed",
                 **{**base, **figures})


def test_learned_positions_and_one_key_per_head_add_no_pass():
    """GPT-3's attention: no rotation, and the split's views reach attention as they
    are (no copy, no concatenation of separate gradients)."""
    assert attention_input_bytes(_model(rotary=False), Layout(), 4096) == (0.0, 0.0)


@pytest.mark.parametrize(("kv_heads", "rotary"), [(8, True), (8, False), (32, True)])
def test_attention_inputs_count_each_pass_read_and_written(kv_heads, rotary):
    """Per element of the rank's queries q and keys or values kv (16-bit, read and
    written, 4 bytes): the grouped query's copy (forward), the rotation of q and k (each
    pass), the concatenation of the three gradients (backward)."""
    model = _model(kv_heads=kv_heads, rotary=rotary)
    layout = Layout(tp=4, cp=2, micro_batch=2)
    tokens = 2 * 4096 / 2
    q, kv = tokens * 32 / 4 * 128, tokens * kv_heads / 4 * 128
    grouped = kv_heads < 32
    forward = 4 * q * grouped + 4 * (q + kv) * rotary
    backward = 4 * (q + kv) * rotary + 4 * (q + 2 * kv)
    assert attention_input_bytes(model, layout, 4096) == (
        pytest.approx(forward), pytest.approx(backward))


def test_the_layer_times_those_passes_at_the_hbm_rate():
    plain = _model(kv_heads=32, rotary=False)
    llama = _model(kv_heads=8)
    layout = Layout(tp=2)
    before = layer_times(H100, plain, layout, 4096, moe=False)
    after = layer_times(H100, replace(plain, rotary=True), layout, 4096, moe=False)
    forward, backward = attention_input_bytes(replace(plain, rotary=True), layout, 4096)
    assert after.mem_fwd - before.mem_fwd == pytest.approx(H100.memory_s(forward))
    assert after.mem_bwd - before.mem_bwd == pytest.approx(H100.memory_s(backward))
    # grouped-query attention copies the query, and its smaller keys rotate faster
    grouped = layer_times(H100, llama, layout, 4096, moe=False)
    assert grouped.mem_fwd != after.mem_fwd and grouped.mem_fwd > before.mem_fwd


def test_the_loss_and_the_embeddings_gradient_are_counted_per_logit_and_weight():
    """Megatron-Core's fused cross-entropy: 26 bytes per logit forward (cast and max,
    exp in place, sum, divide in place), 14 backward (scale in place, cast to 16 bits);
    the embedding's dense gradient: zeros written, then added to the main gradient."""
    assert (CROSS_ENTROPY_FORWARD_BYTES, CROSS_ENTROPY_BACKWARD_BYTES) == (26.0, 14.0)
    model, layout = _model(), Layout(tp=4)
    assert embedding_grad_bytes(model, layout, dtype_bytes=2.0, main_grad_bytes=4.0) == (
        pytest.approx(32000 / 4 * 4096 * (2 + 2 + 4 + 4)))
    small = edge_times(H100, replace(model, vocab=16000), layout, 4096)
    large = edge_times(H100, model, layout, 4096)
    logits = 4096 * 16000 / 4  # the rank's extra logits, one microbatch
    gemm = (H100.gemm_s(_logits(model, layout)) - H100.gemm_s(_logits(replace(
        model, vocab=16000), layout)))
    assert large.head_fwd - small.head_fwd == pytest.approx(
        gemm + H100.memory_s(26 * logits))
    extra = embedding_grad_bytes(model, layout, dtype_bytes=2.0, main_grad_bytes=4.0) / 2
    assert large.embed_bwd - small.embed_bwd == pytest.approx(H100.memory_s(extra))


def _logits(model: Model, layout: Layout) -> Gemm:
    return Gemm(4096, model.vocab / layout.tp, model.hidden)


def test_the_catalog_says_which_models_rotate():
    assert not CATALOG.get("gpt3-175b", Model).rotary
    assert not CATALOG.get("megatron-gpt-1t", Model).rotary
    assert CATALOG.get("llama3-70b", Model).rotary
    assert CATALOG.get("nemotron4-15b", Model).rotary
