"""Training-step model: hand-computable cases, walls that add up, placement."""

import contextlib
from dataclasses import replace

import pytest

from topomodel.analysis.collectives.collective import run_collective
from topomodel.analysis.collectives.timing import TimeModel
from topomodel.analysis.training.model import flops_per_token, parameter_counts
from topomodel.analysis.training.step import StepAssumptions, step_time
from topomodel.inputs.parts import Model
from topomodel.traffic.layout import Layout, rank_groups


def _layout(**fields):
    """A layout with the mechanisms these tests were written against: gradients
    all-reduced (ZeRO 0) and each backward TP collective behind its weight-gradient GEMM;
    the software presets' defaults are tested in tests/inputs/test_software.py."""
    return Layout(**{"zero": 0, "tp_overlap": "backward", **fields})


QUIET = StepAssumptions(jitter_cv=0.0, hot_expert_factor=1.0, grad_dtype="bf16",
                        time=TimeModel(per_message_overhead_s=0.0, hop_latency_s=0.0))


def zero_latency(fabric):
    return fabric.with_frames(nodes=fabric.nodes.assign(latency_s=0.0),
                              links=fabric.links.assign(latency_s=0.0))


def test_parameter_count_by_hand(toy):
    fabric = toy("system: toy-host\nsystems: 8\nscaleout:\n  switch: toy-switch-8\n")
    model = fabric.catalog.get("toy-dense", Model)
    d, f, v = 1024, 4096, 32000
    per_layer = 4 * d * d + 2 * d * f  # attention (no GQA) + non-gated FFN
    counts = parameter_counts(model)
    assert counts["total"] == 4 * per_layer + 2 * v * d
    model_flops, hw = flops_per_token(model, 1024, recompute="full")
    # 4 layers x 16 heads x 64 head size x 1024 tokens: PaLM's 12 L H Q T counts the whole
    # score matrix; the model FLOPs count causal attention, half of it
    attention = 12 * 4 * 16 * 64 * 1024
    assert model_flops == 6 * (4 * per_layer + v * d) + attention / 2
    # FlashAttention computes the causal half and recomputes the scores in its backward
    # (7 L H Q T, not 6); a full recomputation repeats each layer's forward (not the
    # logit layer's) with its causal attention forward (2 L H Q T)
    flash = attention * 7 / 12
    assert hw == pytest.approx(model_flops - attention / 2 + flash + 2 * 4 * per_layer
                               + attention / 6)
    _, selective = flops_per_token(model, 1024, recompute="selective")
    assert selective == pytest.approx(model_flops - attention / 2 + flash + attention / 6)
    assert flops_per_token(model, 1024)[1] == pytest.approx(model_flops - attention / 2
                                                            + flash)
    # without FlashAttention the whole matrix is computed: PaLM's count, as hardware FLOPs
    kept, kept_full = flops_per_token(model, 1024, recompute="full", flash_attention=False)
    assert kept == model_flops
    assert kept_full == pytest.approx(kept + attention / 2 + 2 * 4 * per_layer
                                      + attention / 3)


def _compute_s(model, layout, a, fabric, *, microbatches):
    """Compute of one rank with pp = 1, from the per-op model's parts: every layer's
    forward and backward, the embedding and output layer, and the optimizer step."""
    import numpy as np

    from topomodel.analysis.training.compute import device_model, edge_times, layer_times
    from topomodel.analysis.training.memory import stage_parameters
    from topomodel.inputs.parts import Accelerator, System

    acc = fabric.catalog.get(fabric.catalog.get(fabric.design.system, System).accelerator,
                             Accelerator)
    dev = device_model(acc, "bf16", override=a.compute_efficiency)
    seq = model.sequence
    lt = layer_times(dev, model, layout, seq, moe=False)
    edges = edge_times(dev, model, layout, seq)
    per_micro = model.layers * (lt.forward_s + lt.backward_s) + (
        edges.embed_fwd + edges.embed_bwd + edges.head_fwd + edges.head_bwd + edges.head_wgrad)
    dense, _ = stage_parameters(model, layout, np.array([model.layers]), np.zeros(1))
    return microbatches * per_micro + dev.memory_s(38.0) * float(dense[0])


def test_pure_dp_is_compute_plus_the_gradient_reduction_the_backward_cannot_hide(toy):
    fabric = zero_latency(toy("system: toy-host\nsystems: 8\nscaleout:\n"
                              "  switch: toy-switch-8\n"))
    model = fabric.catalog.get("toy-dense", Model)
    layout = _layout(dp=8, micro_batch=1, global_batch=64, dp_overlap=False)
    a = replace(QUIET, dp_bucket_bytes=1e12, compute_efficiency=0.5)  # one bucket
    result = step_time(fabric, model, layout, a)
    assert result.compute_s == pytest.approx(_compute_s(model, layout, a, fabric,
                                                        microbatches=8), rel=1e-9)
    # the flat override times a GEMM as FLOPs / (peak x 0.5): the 6 N FLOPs per token
    # of the linear layers, on 8 x 1024 tokens per rank, bound the compute from below
    counts = parameter_counts(model)
    linear = 6 * counts["active"] * 8 * 1024 / (100e12 * 0.5)
    assert linear < result.compute_s < 1.5 * linear
    grads = counts["total"] * 2  # bf16
    ring = run_collective(fabric, "allreduce", grads, ["all"], time_model=a.time,
                          ).time_s
    # after the backward: all of it exposed, and the step is compute plus the reduction
    assert result.exposed_comm_s == pytest.approx(ring, rel=1e-9)
    assert result.bubble_s == pytest.approx(0, abs=1e-12)
    assert result.step_time_s == pytest.approx(result.compute_s + ring, rel=1e-9)
    # buckets that go out as they fill hide behind the backward still to run; the last
    # bucket fills at the very end, so some is always exposed, and never more than all
    a_buckets = replace(a, dp_bucket_bytes=1e6)
    early = step_time(fabric, model, replace(layout, dp_overlap=True), a_buckets)
    late = step_time(fabric, model, layout, a_buckets)
    dp_early = next(c for c in early.comm if c.kind == "dp")
    dp_late = next(c for c in late.comm if c.kind == "dp")
    assert dp_early.time_s == pytest.approx(dp_late.time_s)
    assert 0 < dp_early.exposed_s < dp_late.exposed_s == pytest.approx(dp_late.time_s)
    assert early.step_time_s < late.step_time_s


def test_pipeline_bubble_and_the_stages_that_carry_the_embedding_and_logits(toy):
    fabric = toy("system: toy-host\nsystems: 8\nscaleout:\n  switch: toy-switch-8\n")
    model = fabric.catalog.get("toy-dense", Model)
    small_vocab = replace(model, vocab=128)
    for pp, m, v in ((4, 8, 1), (2, 16, 2)):
        layout = _layout(pp=pp, dp=8 // pp, micro_batch=1, global_batch=m * (8 // pp),
                        interleave=v, pp_blocking=False)
        result = step_time(fabric, small_vocab, layout, QUIET)
        busy = max(result.stage_busy_s)
        pp_comm = next(c for c in result.comm if c.kind == "pp")
        # nearly equal stages (a tiny vocabulary): the 1F1B bubble, (p - 1) / (v m) of a
        # stage's work, once the sends on the critical path are set apart
        assert result.bubble_s == pytest.approx(busy * (pp - 1) / (v * m), rel=0.05)
        assert result.pipeline_s == pytest.approx(busy + result.bubble_s + pp_comm.exposed_s)
        # a stage that also waits for its own sends (Megatron-LM) takes longer
        held = step_time(fabric, small_vocab, replace(layout, pp_blocking=True), QUIET)
        assert held.pipeline_s > result.pipeline_s
    # a 32,000-word vocabulary: the last stage computes the logits and sets the pace
    result = step_time(fabric, model, _layout(pp=4, dp=2, global_batch=16), QUIET)
    busy = result.stage_busy_s
    assert result.slowest_stage == 3 and busy[3] > busy[1] and busy[0] > busy[1]
    zb = step_time(fabric, model, _layout(pp=4, dp=2, global_batch=16, schedule="zb-h1"),
                   QUIET)
    assert zb.bubble_s < result.bubble_s and zb.step_time_s < result.step_time_s


def test_ep_all_to_all_volume_per_layer(toy):
    fabric = toy("system: toy-box\nsystems: 4\nscaleout:\n  switch: toy-switch-16\n")
    model = fabric.catalog.get("toy-moe", Model)
    layout = _layout(dp=16, ep=8, micro_batch=2, global_batch=64)
    result = step_time(fabric, model, layout, QUIET)
    ep = next(c for c in result.comm if c.kind == "ep")
    m = 64 // (16 * 2)
    assert ep.size_bytes == 2 * 1024 * 2 * 1024 * 2  # tokens x top_k x hidden x bf16
    assert ep.calls == 4 * 4 * m  # dispatch + combine, forward + backward, per MoE layer


def test_memory_by_hand(toy):
    fabric = toy("system: toy-host\nsystems: 8\nscaleout:\n  switch: toy-switch-8\n")
    model = fabric.catalog.get("toy-dense", Model)
    params = parameter_counts(model)["total"]
    result = step_time(fabric, model, _layout(dp=8, micro_batch=2, global_batch=16), QUIET)
    mem = result.memory
    # bf16 weights, fp32 main gradients, Adam's fp32 master weights and moments
    assert mem["weights_bytes"] == params * 2 and mem["gradients_bytes"] == params * 4
    assert mem["optimizer_bytes"] == params * 12
    # per layer, FlashAttention, no dropout, no TP: 32 T h (Korthikanti's 34 less the two
    # masks) plus fp32 softmax statistics, 4 T heads; 4 layers, one microbatch in flight
    tokens, h = 2 * 1024, 1024
    assert mem["activations_bytes"] == 4 * (32 * tokens * h + 4 * tokens * 16)
    # the fp32 logits and the final norm and logit layer inputs
    assert mem["logits_bytes"] == 4 * tokens * 32000 + 4 * tokens * h
    assert mem["total_bytes"] == pytest.approx(sum(
        v for k, v in mem.items() if k != "total_bytes"))
    for stage, parts in ((1, {"optimizer_bytes": params * 12 / 8}),
                         (2, {"optimizer_bytes": params * 12 / 8,
                              "gradients_bytes": params * 4 / 8}),
                         (3, {"optimizer_bytes": params * 12 / 8,
                              "gradients_bytes": params * 4 / 8,
                              "weights_bytes": params * 2 / 8})):
        zero = step_time(fabric, model, _layout(dp=8, micro_batch=2, global_batch=16,
                                               zero=stage), QUIET)
        for key, value in parts.items():
            assert zero.memory[key] == pytest.approx(value), (stage, key)
    full = step_time(fabric, model, _layout(dp=8, micro_batch=2, global_batch=16,
                                           recompute="full"), QUIET)
    # each layer keeps its input; one layer is re-materialised while its backward runs
    assert full.memory["activations_bytes"] == 4 * 2 * tokens * h
    assert full.memory["working_bytes"] == pytest.approx(
        32 * tokens * h + 4 * tokens * 16 - 2 * tokens * h)


def test_default_global_batch_is_four_microbatches_per_stage_per_replica(toy):
    """The default batch grows with DP from 4 microbatches per pipeline stage per
    replica (every row of Megatron-Core's model table), not one large run's 16M tokens:
    a 16-accelerator job steps 64 sequences, not 16,384."""
    fabric = toy("system: toy-box\nsystems: 4\nscaleout:\n  switch: toy-switch-16\n")
    model = fabric.catalog.get("toy-dense", Model)
    for layout in (_layout(dp=16), _layout(pp=2, dp=8), _layout(pp=4, dp=4),
                   _layout(pp=2, dp=8, micro_batch=2)):
        result = step_time(fabric, model, layout, QUIET)
        assert result.microbatches == 4 * layout.pp
        assert result.global_batch == 4 * layout.dp * layout.pp * layout.micro_batch
        assert result.tokens_per_s * result.step_time_s == pytest.approx(
            result.global_batch * 1024)
    # at most 16M tokens: fewer microbatches, never fewer than one per DP rank
    assert _layout(dp=4096, pp=16).sequences(8192) == 4096
    assert _layout(dp=512, pp=16).sequences(8192) == 2**24 // 8192
    assert _layout(dp=512, pp=16, interleave=2).sequences(8192) == 512 * 16


def test_tokens_count_the_sequences_that_run_not_the_batch_asked(toy):
    """A global batch that is not whole microbatches on every DP rank runs fewer
    sequences (the CLI refuses it; sweeps and the API get the sequences that ran)."""
    fabric = toy("system: toy-box\nsystems: 4\nscaleout:\n  switch: toy-switch-16\n")
    model = fabric.catalog.get("toy-dense", Model)
    result = step_time(fabric, model, _layout(dp=16, global_batch=100), QUIET)
    assert result.microbatches == 6 and result.global_batch == 96
    seq = model.sequence
    assert result.tokens_per_s * result.step_time_s == pytest.approx(96 * seq)


def test_walls_add_up_to_exposed_comm_and_wait(toy):
    fabric = toy("system: toy-box\nsystems: 4\nscaleout:\n  switch: toy-switch-16\n")
    model = fabric.catalog.get("toy-moe", Model)
    result = step_time(fabric, model, _layout(tp=2, pp=2, dp=4, ep=2, global_batch=32))
    assert sum(result.walls.values()) == pytest.approx(result.exposed_comm_s + result.wait_s)
    assert result.step_time_s == pytest.approx(result.compute_s + result.bubble_s
                                               + result.exposed_comm_s + result.wait_s
                                               + result.imbalance_s)
    # both sums hold by construction; these depend on the inputs: 32 sequences of 1024
    # tokens, 16 toy accelerators of 100 TFLOP/s, 32 / dp 4 = 8 microbatches, pp 2
    tokens, world, peak, m = 32 * 1024, 2 * 2 * 4, 100e12, 8
    model_flops, _ = flops_per_token(model, 1024)
    assert result.layout.world == world
    assert result.tokens_per_s * result.step_time_s == pytest.approx(tokens, rel=1e-12)
    assert result.microbatches == m
    # the slowest stage's compute: at least its share of the linear layers' FLOPs at the
    # toy's best measured efficiency (80 of 100 TFLOP/s)
    assert result.compute_s > tokens * model_flops / (world * peak * 0.8)
    assert result.mfu == pytest.approx(
        tokens * model_flops / (result.step_time_s * world * peak), rel=1e-12)
    # exposed is never negative and never more than the time a collective takes
    assert all(0 <= c.exposed_s <= c.time_s * (1 + 1e-12) for c in result.comm)
    assert 0 < result.bubble_s < result.compute_s
    # the sync wall is waiting only (jitter here); the hot expert's extra compute is named
    # apart, and vanishes with a perfectly balanced router
    assert result.walls["sync_s"] == result.wait_s > 0
    assert result.imbalance_s > 0
    balanced = step_time(fabric, model, _layout(tp=2, pp=2, dp=4, ep=2, global_batch=32),
                         replace(StepAssumptions(), hot_expert_factor=1.0))
    assert balanced.imbalance_s == 0 and balanced.wait_s == pytest.approx(result.wait_s)
    assert {c.kind for c in result.comm} == {"tp", "ep", "pp", "dp", "edp"}


def test_tp_spilling_out_of_the_server_is_slower(toy):
    fabric = toy("system: toy-box\nsystems: 4\nscaleout:\n  switch: toy-switch-16\n")
    model = fabric.catalog.get("toy-dense", Model)
    inside = step_time(fabric, model, _layout(tp=4, dp=4, global_batch=16))
    spilled = step_time(fabric, model, _layout(tp=4, dp=4, global_batch=16,
                                              order="dp,tp,cp,pp"))
    assert not next(c for c in inside.comm if c.kind == "tp").spills
    assert next(c for c in spilled.comm if c.kind == "tp").spills
    assert spilled.step_time_s > inside.step_time_s
    assert any("TP groups leave" in w for w in spilled.warnings)


def test_rank_groups_follow_the_order(toy):
    fabric = toy("system: toy-box\nsystems: 4\n")
    ranks = fabric.accelerators
    layout = _layout(tp=2, dp=4, pp=2, ep=2)
    tp = rank_groups(ranks, layout, "tp")
    assert [len(g) for g in tp] == [2] * 8 and (tp[0] == ranks[:2]).all()
    dp = rank_groups(ranks, layout, "dp")
    assert (dp[0] == ranks[[0, 2, 4, 6]]).all()
    ep = rank_groups(ranks, layout, "ep")
    assert (ep[0] == ranks[[0, 2]]).all()
    pp = rank_groups(ranks, layout, "pp")
    assert (pp[0] == ranks[[0, 8]]).all()


def test_layouts_that_do_not_fit(toy):
    from topomodel.errors import UsageError

    fabric = toy("system: toy-host\nsystems: 8\nscaleout:\n  switch: toy-switch-8\n")
    model = fabric.catalog.get("toy-dense", Model)
    with pytest.raises(UsageError, match="needs 16 accelerators"):
        step_time(fabric, model, _layout(dp=16))
    with pytest.raises(UsageError, match="pp=8 x interleave=1 is more stages than the 4 layers"):
        step_time(fabric, model, _layout(pp=8))
    with pytest.raises(UsageError, match="has no experts"):
        step_time(fabric, model, _layout(dp=8, ep=2))


def test_expert_gradients_are_reduced_over_expert_data_parallel_groups(toy):
    fabric = toy("system: toy-box\nsystems: 4\nscaleout:\n  switch: toy-switch-16\n")
    model = fabric.catalog.get("toy-moe", Model)
    layout = _layout(dp=16, ep=4, global_batch=32)
    result = step_time(fabric, model, layout, replace(QUIET, dp_bucket_bytes=1e12))
    edp = next(c for c in result.comm if c.kind == "edp")
    experts = parameter_counts(model)["experts"] / 4  # routed experts held per rank
    assert edp.size_bytes == pytest.approx(experts * 2) and edp.calls == 1
    groups = rank_groups(fabric.accelerators, layout, "edp")
    assert len(groups) == 4 and all(len(g) == 4 for g in groups)


def test_gradients_reduce_over_dp_and_cp_and_recompute_repeats_tp(toy):
    fabric = toy("system: toy-box\nsystems: 4\nscaleout:\n  switch: toy-switch-16\n")
    model = fabric.catalog.get("toy-dense", Model)
    layout = _layout(tp=2, cp=2, dp=4, global_batch=8, recompute="full")
    result = step_time(fabric, model, layout, QUIET)
    groups = rank_groups(fabric.accelerators, layout, "grad")
    assert len(groups) == 2 and all(len(g) == 8 for g in groups)
    m = 8 // 4
    tp = [c for c in result.comm if c.kind == "tp"]
    # a gather and a scatter per call site, each timed on its own (not as one phase)
    assert [c.collective for c in tp] == ["allgather", "reducescatter"]
    # per layer: 2 forward, 2 backward and 2 for the recomputed forward, of each; the
    # embedding and the logits add one of each per microbatch
    assert all(c.calls == (6 * 4 + 2) * m for c in tp)
    # ring attention: K/V gathered forward, again backward, and once more for the
    # recomputed forward; the K/V gradients reduce-scattered backward
    cp = {c.collective: c for c in result.comm if c.kind == "cp"}
    assert cp["allgather"].calls == 3 * 4 * m and cp["reducescatter"].calls == 4 * m
    plain = step_time(fabric, model, replace(layout, recompute="none"), QUIET)
    cp = {c.collective: c for c in plain.comm if c.kind == "cp"}
    assert cp["allgather"].calls == 2 * 4 * m and cp["reducescatter"].calls == 4 * m
    kv = 2 * 1024 * 16 * 64 * 2 // 2  # K and V of a microbatch, bf16, split by TP
    assert cp["allgather"].size_bytes == cp["reducescatter"].size_bytes == kv
    # each CP rank holds 1024 / 2 of the sequence's tokens: the sequence-parallel TP
    # gathers and scatters move that share's activations (hidden 1024, bf16)
    assert all(c.size_bytes == 1024 // 2 * 1024 * 2 for c in tp)


def test_gather_and_scatter_are_timed_one_after_the_other(toy):
    fabric = toy("system: toy-box\nsystems: 4\nscaleout:\n  switch: toy-switch-16\n")
    model = fabric.catalog.get("toy-dense", Model)
    layout = _layout(tp=4, dp=4, global_batch=16)
    result = step_time(fabric, model, layout, QUIET)
    tp = {c.collective: c for c in result.comm if c.kind == "tp"}
    size = 1024 * 1024 * 2  # one microbatch's activations, bf16
    for name in ("allgather", "reducescatter"):
        alone = run_collective(fabric, name, size, ["system"], time_model=QUIET.time)
        assert tp[name].time_s == pytest.approx(alone.time_s * tp[name].calls, rel=1e-9)


def test_expert_all_to_alls_repeat_under_full_recomputation(toy):
    fabric = toy("system: toy-box\nsystems: 4\nscaleout:\n  switch: toy-switch-16\n")
    model = fabric.catalog.get("toy-moe", Model)
    layout = _layout(dp=16, ep=8, micro_batch=2, global_batch=64, recompute="full")
    ep = next(c for c in step_time(fabric, model, layout, QUIET).comm if c.kind == "ep")
    assert ep.calls == 6 * 4 * (64 // 32)  # + the recomputed dispatch and combine


def test_global_batch_smaller_than_one_microbatch_per_rank(toy):
    from topomodel.errors import UsageError

    fabric = toy("system: toy-host\nsystems: 8\nscaleout:\n  switch: toy-switch-8\n")
    model = fabric.catalog.get("toy-dense", Model)
    with pytest.raises(UsageError, match="less than one microbatch per DP rank"):
        step_time(fabric, model, _layout(dp=8, global_batch=4))


def test_interleaved_pipeline_wraps_around(toy):
    fabric = toy("system: toy-host\nsystems: 8\nscaleout:\n  switch: toy-switch-8\n")
    # a vocabulary of 320 rather than 32,000: at 32,000 the last stage's logits and loss
    # weigh as much as the toy's two small layers (its stage is busy twice as long as the
    # first), and the schedule halves the bubble of balanced stages only
    model = replace(fabric.catalog.get("toy-dense", Model), vocab=320)
    plain = step_time(fabric, model, _layout(pp=2, dp=4, global_batch=16), QUIET)
    looped = step_time(fabric, model, _layout(pp=2, dp=4, global_batch=16, interleave=2),
                       QUIET)
    pp_plain = next(c for c in plain.comm if c.kind == "pp")
    pp_looped = next(c for c in looped.comm if c.kind == "pp")
    assert pp_looped.calls == 2 * pp_plain.calls
    # two chunks per stage halve the bubble (the stages differ a little: the edges)
    assert looped.bubble_s == pytest.approx(plain.bubble_s / 2, rel=0.02)


def _exposed(result, kind):
    return sum(c.exposed_s for c in result.comm if c.kind == kind)


def _issued(result, kind):
    return sum(c.time_s for c in result.comm if c.kind == kind)


def test_tp_overlap_hides_only_behind_the_gemms_the_schedule_runs_beside_it(toy):
    fabric = toy("system: toy-box\nsystems: 4\nscaleout:\n  switch: toy-switch-16\n")
    model = fabric.catalog.get("toy-dense", Model)
    runs = {mode: step_time(fabric, model, _layout(tp=4, dp=4, global_batch=16,
                                                  tp_overlap=mode), QUIET)
            for mode in ("none", "backward", "gemm")}
    issued = _issued(runs["none"], "tp")
    assert _exposed(runs["none"], "tp") == pytest.approx(issued)
    assert all(_issued(r, "tp") == pytest.approx(issued) for r in runs.values())
    assert issued > _exposed(runs["backward"], "tp") > _exposed(runs["gemm"], "tp") > 0
    # what Megatron-LM's backward overlap hides is bounded by the weight-gradient GEMMs of
    # the QKV and first MLP layers (4 layers, 4 microbatches) and the input-gradient
    # GEMMs the extra sequence-parallel gathers run behind
    from topomodel.analysis.training.compute import device_model, layer_times
    from topomodel.inputs.parts import Accelerator

    dev = device_model(fabric.catalog.get("toy-acc", Accelerator), "bf16")
    lt = layer_times(dev, model, _layout(tp=4), 1024, moe=False)
    behind = 4 * 4 * (lt.wgrad["qkv"] + lt.wgrad["fc1"] + lt.dgrad["qkv"] + lt.dgrad["fc1"])
    hidden = issued - _exposed(runs["backward"], "tp")
    assert hidden <= behind * (1 + 1e-9)
    # a zero-bubble schedule moves the weight gradients out of B: they hide nothing there
    zb = step_time(fabric, model, _layout(tp=4, dp=4, global_batch=16, schedule="zb-h1"),
                   QUIET)
    assert _exposed(zb, "tp") > _exposed(runs["backward"], "tp")


def test_dualpipe_hides_expert_all_to_alls_behind_the_paired_chunk_on_fewer_sms(toy):
    fabric = toy("system: toy-host\nsystems: 16\nscaleout:\n  switch: toy-switch-16\n")
    model = fabric.catalog.get("toy-moe", Model)
    layout = _layout(pp=2, dp=8, ep=8, global_batch=64)
    plain = step_time(fabric, model, layout, QUIET)
    paired = step_time(fabric, model, replace(layout, ep_overlap="dualpipe"), QUIET)
    assert _issued(paired, "ep") == pytest.approx(_issued(plain, "ep"))
    assert _exposed(plain, "ep") == pytest.approx(_issued(plain, "ep"))
    assert 0 < _exposed(paired, "ep") < _exposed(plain, "ep")
    assert paired.step_time_s < plain.step_time_s
    # the SMs the all-to-alls take slow the paired compute: free SMs would hide more
    spare = step_time(fabric, model, replace(layout, ep_overlap="dualpipe"),
                      replace(QUIET, comm_sm_share=0.0))
    assert 0 <= _exposed(spare, "ep") < _exposed(paired, "ep")


def test_communication_behind_compute_exposes_at_least_its_sm_share():
    """stagework's rule: of X seconds of communication behind C seconds of compute,
    max(X - C, share x X) are exposed, and the compute beside it runs at 1 - share."""
    from topomodel.analysis.training.stagework import Call, Work

    call = Call("tp", "allgather", "ring", 1.0, 2.0, 0.0, 2.0, 0.0, False)
    work = Work(share=0.25)
    free = work.comm(call, behind=10.0)  # fully hidden: the SMs it takes still cost
    assert work.exposed["tp", "allgather"] == pytest.approx(0.25 * 2.0)
    assert free == pytest.approx(10.0 - 2.0 * (1 - 0.25))
    short = Work(share=0.25)
    short.comm(call, behind=1.0)  # partly hidden: the rest is exposed
    assert short.exposed["tp", "allgather"] == pytest.approx(2.0 - 1.0)
    spare = Work(share=0.0)
    spare.comm(call, behind=10.0)  # free SMs hide it all
    assert spare.exposed["tp", "allgather"] == 0.0


def test_zero_gathers_hide_only_behind_the_first_forward(toy):
    fabric = toy("system: toy-host\nsystems: 8\nscaleout:\n  switch: toy-switch-8\n")
    model = fabric.catalog.get("toy-dense", Model)
    layout = _layout(dp=8, global_batch=64, zero=1)
    hidden = step_time(fabric, model, layout, QUIET)
    waited = step_time(fabric, model, replace(layout, dp_overlap=False), QUIET)
    gather = [c for c in waited.comm if c.kind == "dp" and c.collective == "allgather"]
    assert gather and gather[0].exposed_s == pytest.approx(gather[0].time_s)
    hid = next(c for c in hidden.comm if c.kind == "dp" and c.collective == "allgather")
    assert hid.exposed_s < hid.time_s
    scatter = next(c for c in hidden.comm if c.collective == "reducescatter")
    assert scatter.kind == "dp" and 0 <= scatter.exposed_s <= scatter.time_s
    zero3 = step_time(fabric, model, replace(layout, zero=3), QUIET)
    kinds = {(c.kind, c.collective) for c in zero3.comm}
    assert kinds == {("zero3", "allgather"), ("zero3", "reducescatter")}
    # a weight gather per layer forward and backward, a gradient scatter per layer
    m = 64 // 8
    ag = next(c for c in zero3.comm if c.collective == "allgather")
    rs = next(c for c in zero3.comm if c.collective == "reducescatter")
    assert ag.calls == 2 * 4 * m and rs.calls == 4 * m


def test_1f1b_exchanges_with_one_neighbour_interleaving_with_both(toy):
    """Megatron-LM's 1F1B alternates send_forward_recv_backward and
    send_backward_recv_forward: each exchange is one pair of stages in both directions,
    so a full-duplex NIC carries one message each way. The interleaved schedule's
    send_forward_backward_recv_forward_backward (and ZB-H1) send to both neighbours at
    once: two messages out of every middle stage's NIC, twice the bandwidth time."""
    fabric = zero_latency(toy("system: toy-host\nsystems: 8\nscaleout:\n"
                              "  switch: toy-switch-8\n"))
    model = replace(fabric.catalog.get("toy-dense", Model), layers=8)

    def per_call(**kw):
        result = step_time(fabric, model, _layout(pp=4, dp=2, global_batch=16, **kw), QUIET)
        pp = next(c for c in result.comm if (c.kind, c.collective) == ("pp", "sendrecv"))
        # per call: the whole time, and its bandwidth and topology parts
        return pp.size_bytes, pp.time_s / pp.calls, (pp.bandwidth_s + pp.topology_s) / pp.calls

    size, plain, plain_bw = per_call()
    pair = run_collective(fabric, "sendrecv", size, ["0,2"], algorithm="p2p",
                          time_model=QUIET.time)
    assert plain == pytest.approx(pair.timing.time_s, rel=1e-6)
    # one 100 Gb/s Ethernet NIC each way, at RoCEv2's packet efficiency (0.980)
    assert plain_bw == pytest.approx(size / (12.5e9 * 0.980), rel=1e-3)
    for both in (per_call(interleave=2), per_call(schedule="zb-h1")):
        assert both[2] == pytest.approx(2 * plain_bw, rel=1e-6)


def _toy_job(toy):
    text = "system: toy-box\nsystems: 8\nscaleout:\n  switch: toy-switch-8\n"
    return toy(text), toy(text), _layout(tp=2, pp=2, dp=4, global_batch=16)


def _counted(monkeypatch):
    import topomodel.analysis.training.stepcalls as step_module

    built = []
    original = step_module.collective_traffic

    def counted(*args, **kwargs):
        built.append(kwargs["algorithm"])
        return original(*args, **kwargs)

    monkeypatch.setattr(step_module, "collective_traffic", counted)
    return built


def test_failed_copies_and_other_time_models_route_the_steps_traffic_unbuilt(toy,
                                                                            monkeypatch):
    """A step's traffic is built once per fabric: its copies with failed parts (the
    goodput's degraded steps) and other time models (the sensitivity) route it again,
    with the results of a fresh fabric's, bit for bit."""
    from topomodel.fabric.failures import with_failures

    warm, fresh, layout = _toy_job(toy)
    model = warm.catalog.get("toy-dense", Model)
    healthy = step_time(warm, model, layout, QUIET)
    built = _counted(monkeypatch)
    slower = replace(QUIET, time=replace(QUIET.time, efficiency={"leaf": 0.5}))
    shared = step_time(with_failures(warm, ["spine0"]), model, layout, QUIET)
    assert built == []  # the healthy step built it all
    alone = step_time(with_failures(fresh, ["spine0"]), model, layout, QUIET)
    assert shared == alone and shared.step_time_s >= healthy.step_time_s
    once = list(built)  # one step's traffic, built on the fresh fabric's first copy
    assert "ring" in once and set(once) <= {"ring", "tree", "hierarchical", "p2p"}
    for part in ("spine1", "leaf0"):  # a leaf cut off: relayed detours
        assert step_time(with_failures(warm, [part]), model, layout, QUIET) == step_time(
            with_failures(fresh, [part]), model, layout, QUIET)
    assert step_time(warm, model, layout, slower) == step_time(fresh, model, layout, slower)
    assert built == once


def test_in_network_traffic_is_never_kept_and_all_pairs_apart(toy):
    from topomodel.analysis.training.stepshape import (
        ALL_PAIRS_TRAFFICS,
        all_pairs_traffic,
        shared_traffic,
        step_traffic,
    )
    from topomodel.traffic.collectives import collective_traffic

    fabric, _, _ = _toy_job(toy)
    acc = fabric.accelerators
    calls = []

    def make(algorithm):
        def build():
            calls.append(algorithm)
            return collective_traffic(fabric, "alltoall" if algorithm == "direct"
                                      else "allreduce", [acc[:8]], 2**20,
                                      algorithm=algorithm)
        return build

    for _ in range(2):
        for algorithm in ("innetwork", "direct", "ring"):
            with contextlib.suppress(ValueError):  # no switch here reduces in-network
                shared_traffic(fabric, ("x",), algorithm, make(algorithm))
    assert calls == ["innetwork", "direct", "ring", "innetwork"]
    assert list(fabric.derived(step_traffic)) == [("ring", "x")]
    assert list(fabric.derived(all_pairs_traffic)) == [("direct", "x")]
    for key in range(ALL_PAIRS_TRAFFICS + 1):  # the last ones alone
        shared_traffic(fabric, (key,), "direct", make("direct"))
    assert list(fabric.derived(all_pairs_traffic)) == [
        ("direct", key) for key in range(1, ALL_PAIRS_TRAFFICS + 1)]


def test_kept_traffic_is_bounded_by_its_flows(toy, monkeypatch):
    import topomodel.analysis.training.stepshape as stepshape

    fabric, _, layout = _toy_job(toy)
    model = fabric.catalog.get("toy-dense", Model)
    monkeypatch.setattr(stepshape, "SHARED_TRAFFIC_FLOWS", 40)
    step_time(fabric, model, layout, QUIET)
    kept = fabric.derived(stepshape.step_traffic)
    flows = [sum(ph.flows for ph in t.phases) for t in kept.values()]
    assert kept and (sum(flows) <= 40 or len(flows) == 1)


def test_te_comm_gemm_overlap_takes_the_sms_its_userbuffers_defaults_give():
    """Transformer Engine's defaults (stagework.TE_*): the forward gathers on 1 SM,
    the forward reduce-scatters slow their GEMM by a 16-SM margin for its whole length,
    the backward bulk gathers and scatters take 16 SMs while they run; not the step's
    comm_sm_share."""
    from topomodel.analysis.training.compute import LayerTimes
    from topomodel.analysis.training.stagework import (
        TE_BULK_SMS,
        TE_PIPELINE_SMS,
        TE_RING_EXCHANGE_SMS,
        TE_SMS,
        Call,
        layer_work,
    )

    gemms = {"qkv": 4.0, "proj": 3.0, "fc1": 8.0, "fc2": 6.0}
    lt = LayerTimes(fwd=dict(gemms), dgrad=dict(gemms), wgrad=dict(gemms))
    calls = {"tp_ag": Call("tp", "allgather", "ring", 1.0, 1.0, 0.0, 1.0, 0.0, False),
             "tp_rs": Call("tp", "reducescatter", "ring", 1.0, 1.0, 0.0, 1.0, 0.0, False)}
    layout = Layout(tp=4, sequence_parallel=True, tp_overlap="gemm")
    f, b, _ = layer_work(lt, calls, layout, moe=False, hot=1.0, split_w=False,
                         share=0.5)
    ring, pipe, bulk = (n / TE_SMS for n in (TE_RING_EXCHANGE_SMS, TE_PIPELINE_SMS,
                                             TE_BULK_SMS))
    assert f.exposed["tp", "allgather"] == pytest.approx(2 * ring)
    assert f.exposed["tp", "reducescatter"] == 0.0
    margin = (gemms["proj"] + gemms["fc2"]) * pipe / (1 - pipe)
    assert f.parts["compute"] == pytest.approx(lt.forward_s + margin)
    # backward: two ring-exchange gathers, two bulk gathers and two bulk scatters
    assert b.exposed["tp", "allgather"] == pytest.approx(2 * ring + 2 * bulk)
    assert b.exposed["tp", "reducescatter"] == pytest.approx(2 * bulk)
    # without TE's overlap the step's share still applies to what hides
    back = replace(layout, tp_overlap="backward")
    _, b_meg, _ = layer_work(lt, calls, back, moe=False, hot=1.0, split_w=False,
                             share=0.5)
    assert b_meg.exposed["tp", "reducescatter"] == pytest.approx(2 * 0.5)


def test_the_step_report_prints_a_residue_of_the_step_as_zero(toy):
    from topomodel.report.step import step_report

    fabric = toy("system: toy-host\nsystems: 8\nscaleout:\n  switch: toy-switch-8\n")
    model = fabric.catalog.get("toy-dense", Model)
    result = replace(step_time(fabric, model, _layout(dp=8, global_batch=64), QUIET),
                     bubble_s=1.776e-15)  # floating-point residue of a schedule
    (summary, *_) = step_report(result, QUIET, design_name="toy").tables
    rows = {r["item"].strip(): r["value"] for r in summary.rows}
    assert rows["pipeline bubble"] == "0 s"


def test_gradient_buckets_grow_with_the_ranks_that_reduce_them(example_fabric):
    """Megatron-Core's default bucket, max(40M, 1M x DP) parameters: 127 replicas of
    Llama 3 70B reduce fp32 gradients in 127M-parameter buckets (508 MB), not 40 MB;
    without overlap, the whole stage in one."""
    fabric = example_fabric("dgx-h100-superpod")
    model = fabric.catalog.get("llama3-70b", Model)
    layout = Layout(tp=8, dp=127, global_batch=127)
    result = step_time(fabric, model, layout)
    (dp,) = [c for c in result.comm if c.kind == "dp" and c.collective == "reducescatter"]
    assert dp.size_bytes == pytest.approx(127e6 * 4)
    given = step_time(fabric, model, layout, StepAssumptions(dp_bucket_bytes=40e6))
    (dp,) = [c for c in given.comm if c.kind == "dp" and c.collective == "reducescatter"]
    assert dp.size_bytes == pytest.approx(40e6)
    one = step_time(fabric, model, replace(layout, dp_overlap=False))
    (dp,) = [c for c in one.comm if c.kind == "dp" and c.collective == "reducescatter"]
    assert dp.calls == 1 and dp.size_bytes > 1e10
