"""Training-step model: hand-computable cases, walls that add up, placement."""

from dataclasses import replace

import pytest

from topomodel.analysis.model import flops_per_token, parameter_counts
from topomodel.analysis.step import StepAssumptions, step_time
from topomodel.analysis.timing import TimeModel
from topomodel.catalog import Model
from topomodel.traffic.layout import Layout, rank_groups

QUIET = StepAssumptions(jitter_cv=0.0, hot_expert_factor=1.0,
                        time=TimeModel(per_message_overhead_s=0.0, hop_latency_s=0.0))


def zero_latency(fabric):
    return replace(fabric, nodes=fabric.nodes.assign(latency_s=0.0),
                   links=fabric.links.assign(latency_s=0.0))


def test_parameter_count_by_hand(toy):
    fabric = toy("system: toy-host\nsystems: 8\nscaleout:\n  switch: toy-switch-8\n")
    model = fabric.catalog.get("toy-dense", Model)
    d, f, v = 1024, 4096, 32000
    per_layer = 4 * d * d + 2 * d * f  # attention (no GQA) + non-gated FFN
    counts = parameter_counts(model)
    assert counts["total"] == 4 * per_layer + 2 * v * d
    model_flops, hw = flops_per_token(model, 1024, recompute=True)
    assert model_flops == 6 * (4 * per_layer + v * d) + 12 * 4 * 16 * 64 * 1024
    assert hw == pytest.approx(model_flops * 4 / 3)


def test_pure_dp_on_one_switch_is_compute_plus_ring_allreduce_less_overlap(toy):
    fabric = zero_latency(toy("system: toy-host\nsystems: 8\nscaleout:\n"
                              "  switch: toy-switch-8\n"))
    model = fabric.catalog.get("toy-dense", Model)
    layout = Layout(dp=8, micro_batch=1, global_batch=64)
    a = replace(QUIET, dp_bucket_bytes=1e12)  # one bucket
    result = step_time(fabric, model, layout, a)
    tokens = 64 * 1024
    model_flops, _ = flops_per_token(model, 1024)
    compute = tokens * model_flops / (8 * 100e12 * a.compute_efficiency)
    grads = parameter_counts(model)["total"] * 2  # bf16
    ring = 2 * 7 / 8 * grads / 12.5e9  # 100 Gb/s NIC ports on a non-blocking switch
    assert result.compute_s == pytest.approx(compute)
    assert result.exposed_comm_s == pytest.approx((1 - a.overlap["dp"]) * ring, rel=1e-9)
    assert result.step_time_s == pytest.approx(compute + (1 - a.overlap["dp"]) * ring)


def test_1f1b_bubble_closed_form(toy):
    fabric = toy("system: toy-host\nsystems: 8\nscaleout:\n  switch: toy-switch-8\n")
    model = fabric.catalog.get("toy-dense", Model)
    for pp, m, v in ((4, 8, 1), (2, 16, 2)):
        layout = Layout(pp=pp, dp=8 // pp, micro_batch=1, global_batch=m * (8 // pp),
                        interleave=v)
        result = step_time(fabric, model, layout, QUIET)
        assert result.bubble_s == pytest.approx(result.compute_s * (pp - 1) / (v * m))


def test_ep_all_to_all_volume_per_layer(toy):
    fabric = toy("system: toy-box\nsystems: 4\nscaleout:\n  switch: toy-switch-16\n")
    model = fabric.catalog.get("toy-moe", Model)
    layout = Layout(dp=16, ep=8, micro_batch=2, global_batch=64)
    result = step_time(fabric, model, layout, QUIET)
    ep = next(c for c in result.comm if c.kind == "ep")
    m = 64 // (16 * 2)
    assert ep.size_bytes == 2 * 1024 * 2 * 1024 * 2  # tokens x top_k x hidden x bf16
    assert ep.calls == 4 * 4 * m  # dispatch + combine, forward + backward, per MoE layer


def test_memory_by_hand(toy):
    fabric = toy("system: toy-host\nsystems: 8\nscaleout:\n  switch: toy-switch-8\n")
    model = fabric.catalog.get("toy-dense", Model)
    params = parameter_counts(model)["total"]
    result = step_time(fabric, model, Layout(dp=8, micro_batch=2, global_batch=16), QUIET)
    mem = result.memory
    assert mem["weights_bytes"] == params * 2 and mem["gradients_bytes"] == params * 2
    assert mem["optimizer_bytes"] == params * 12
    assert mem["activations_bytes"] == 2 * 1024 * 1024 * 34 * 4  # s b h 34, 4 layers
    zero = step_time(fabric, model, Layout(dp=8, micro_batch=2, global_batch=16,
                                           dp_mode="zero"), QUIET)
    assert zero.memory["optimizer_bytes"] == params * 12 / 8


def test_walls_add_up_to_exposed_comm_and_wait(toy):
    fabric = toy("system: toy-box\nsystems: 4\nscaleout:\n  switch: toy-switch-16\n")
    model = fabric.catalog.get("toy-moe", Model)
    result = step_time(fabric, model, Layout(tp=2, pp=2, dp=4, ep=2, global_batch=32))
    assert sum(result.walls.values()) == pytest.approx(result.exposed_comm_s + result.wait_s)
    assert result.step_time_s == pytest.approx(result.compute_s + result.bubble_s
                                               + result.exposed_comm_s + result.wait_s)
    # both sums hold by construction; these depend on the inputs: 32 sequences of 1024
    # tokens, 16 toy accelerators of 100 TFLOP/s, 32 / dp 4 = 8 microbatches, pp 2
    tokens, world, peak, m = 32 * 1024, 2 * 2 * 4, 100e12, 8
    model_flops, _ = flops_per_token(model, 1024)
    assert result.layout.world == world
    assert result.tokens_per_s * result.step_time_s == pytest.approx(tokens, rel=1e-12)
    assert result.compute_s == pytest.approx(
        tokens * model_flops / (world * peak * StepAssumptions().compute_efficiency))
    assert result.mfu == pytest.approx(
        tokens * model_flops / (result.step_time_s * world * peak), rel=1e-12)
    assert result.bubble_s == pytest.approx(result.compute_s * (2 - 1) / m)
    assert result.walls["sync_s"] == result.wait_s > 0  # jitter and hot experts
    assert {c.kind for c in result.comm} == {"tp", "ep", "pp", "dp", "edp"}


def test_tp_spilling_out_of_the_server_is_slower(toy):
    fabric = toy("system: toy-box\nsystems: 4\nscaleout:\n  switch: toy-switch-16\n")
    model = fabric.catalog.get("toy-dense", Model)
    inside = step_time(fabric, model, Layout(tp=4, dp=4, global_batch=16))
    spilled = step_time(fabric, model, Layout(tp=4, dp=4, global_batch=16,
                                              order="dp,tp,cp,pp"))
    assert not next(c for c in inside.comm if c.kind == "tp").spills
    assert next(c for c in spilled.comm if c.kind == "tp").spills
    assert spilled.step_time_s > inside.step_time_s
    assert any("TP groups leave" in w for w in spilled.warnings)


def test_rank_groups_follow_the_order(toy):
    fabric = toy("system: toy-box\nsystems: 4\n")
    ranks = fabric.accelerators
    layout = Layout(tp=2, dp=4, pp=2, ep=2)
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
        step_time(fabric, model, Layout(dp=16))
    with pytest.raises(UsageError, match="pp=8 is more stages than the 4 layers"):
        step_time(fabric, model, Layout(pp=8))
    with pytest.raises(UsageError, match="has no experts"):
        step_time(fabric, model, Layout(dp=8, ep=2))


def test_expert_gradients_are_reduced_over_expert_data_parallel_groups(toy):
    fabric = toy("system: toy-box\nsystems: 4\nscaleout:\n  switch: toy-switch-16\n")
    model = fabric.catalog.get("toy-moe", Model)
    layout = Layout(dp=16, ep=4, global_batch=32)
    result = step_time(fabric, model, layout, replace(QUIET, dp_bucket_bytes=1e12))
    edp = next(c for c in result.comm if c.kind == "edp")
    experts = parameter_counts(model)["experts"] / 4  # routed experts held per rank
    assert edp.size_bytes == pytest.approx(experts * 2) and edp.calls == 1
    groups = rank_groups(fabric.accelerators, layout, "edp")
    assert len(groups) == 4 and all(len(g) == 4 for g in groups)


def test_gradients_reduce_over_dp_and_cp_and_recompute_repeats_tp(toy):
    fabric = toy("system: toy-box\nsystems: 4\nscaleout:\n  switch: toy-switch-16\n")
    model = fabric.catalog.get("toy-dense", Model)
    layout = Layout(tp=2, cp=2, dp=4, global_batch=8, recompute=True)
    result = step_time(fabric, model, layout, QUIET)
    groups = rank_groups(fabric.accelerators, layout, "grad")
    assert len(groups) == 2 and all(len(g) == 8 for g in groups)
    tp = next(c for c in result.comm if c.kind == "tp")
    assert tp.calls == 6 * 4 * (8 // 4)  # 6 per layer per microbatch when recomputing


def test_global_batch_smaller_than_one_microbatch_per_rank(toy):
    from topomodel.errors import UsageError

    fabric = toy("system: toy-host\nsystems: 8\nscaleout:\n  switch: toy-switch-8\n")
    model = fabric.catalog.get("toy-dense", Model)
    with pytest.raises(UsageError, match="less than one microbatch per DP rank"):
        step_time(fabric, model, Layout(dp=8, global_batch=4))


def test_interleaved_pipeline_wraps_around(toy):
    fabric = toy("system: toy-host\nsystems: 8\nscaleout:\n  switch: toy-switch-8\n")
    model = fabric.catalog.get("toy-dense", Model)
    plain = step_time(fabric, model, Layout(pp=4, dp=2, global_batch=16), QUIET)
    looped = step_time(fabric, model, Layout(pp=4, dp=2, global_batch=16, interleave=2),
                       QUIET)
    pp_plain = next(c for c in plain.comm if c.kind == "pp")
    pp_looped = next(c for c in looped.comm if c.kind == "pp")
    assert pp_looped.calls == 2 * pp_plain.calls
    assert looped.bubble_s == pytest.approx(plain.bubble_s / 2)
