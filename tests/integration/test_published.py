"""Validation against results real systems published (shared/reference/published-figures).

Each test builds the system from its inputs, computes, and compares with a stated
tolerance. Published results are never inputs; where the model misses, the test names
the assumption responsible.
"""

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from topomodel.analysis.collectives.collective import run_collective
from topomodel.analysis.options import step_inputs
from topomodel.analysis.training.model import flops_per_token, parameter_counts
from topomodel.analysis.training.step import StepAssumptions, step_time
from topomodel.fabric.build import build_fabric
from topomodel.inputs.design import load_design, with_overrides
from topomodel.inputs.parts import Accelerator, Model, System
from topomodel.traffic.layout import Layout

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.fixture(scope="module")
def hgx():
    design, catalog = load_design(EXAMPLES / "hgx-h100-server.yaml")
    return build_fabric(design, catalog)


def test_hgx_h100_ring_allreduce_busbw(hgx):
    """nccl-tests all_reduce on 8 x H100: about 370 GB/s busbw with the ring at large
    sizes against the 450 GB/s line rate (NVIDIA/nccl-tests issue #212, maintainer
    reply). The model runs NVLink 4 at NCCL's planned 20.6 GB/s per link (topo.h, the
    catalog's efficiency), Simple protocol: 18 x 20.6 = 370.8 GB/s, within 10 %."""
    run = run_collective(hgx, "allreduce", 8 * 2**30, ["all"], algorithm="ring")
    assert run.timing.protocol == "Simple"
    assert run.busbw_Bps == pytest.approx(370e9, rel=0.10)


def test_hgx_h100_nvls_allreduce_is_an_upper_bound(hgx):
    """With NVLink SHARP (NVLS) the same test reaches about 480 GB/s busbw. The model's
    in-network reduction (every GPU sends and receives S once, pipelined) bounds it from
    above; the gap is switch-side reduction throughput, which the catalog does not give."""
    run = run_collective(hgx, "allreduce", 8 * 2**30, ["all"], algorithm="innetwork")
    assert run.busbw_Bps >= 480e9
    ring = run_collective(hgx, "allreduce", 8 * 2**30, ["all"], algorithm="ring")
    assert run.busbw_Bps > ring.busbw_Bps  # NVLS beats the ring, as published


def test_cloudmatrix384_is_non_blocking_at_392_GBps_per_npu():
    """Zuo et al., arXiv 2506.12708: 112 L2 UB chips, non-blocking, 392 GB/s per NPU per
    direction."""
    design, catalog = load_design(EXAMPLES / "cloudmatrix384.yaml")
    fabric = build_fabric(design, catalog)
    links = fabric.links
    acc = fabric.accelerators
    up = links["src"].isin(acc) & (links["tier"] == "scaleup")
    assert links.loc[up, "capacity_Bps"].sum() / len(acc) == pytest.approx(392e9)
    assert int((fabric.nodes["tier"] == "scaleup_l2").sum()) == 112
    l1_up = links[(links["tier"] == "scaleup_l2")
                  & links["dst"].isin(fabric.nodes.index[fabric.nodes["tier"] == "scaleup_l2"])]
    assert l1_up["capacity_Bps"].sum() == pytest.approx(links.loc[up, "capacity_Bps"].sum())


def test_cloudmatrix384_optical_links_are_the_analysts_6912_modules():
    """6,912 400G optical transceivers in a CloudMatrix384: an analyst figure (secondary;
    hardware-facts.md, CM384 optics, [S23b]), not from the paper. The model wires 5,376
    optical L1-L2 UB links and 768 + 768 optical RDMA links (leaf and spine): 6,912
    optical links, the analyst's count exactly. It puts a transceiver at each end of an
    optical link, so its module count is twice that: the figure matches links, not
    modules (docs/validation.md says which assumption differs)."""
    from topomodel.analysis.bom import bill_of_materials

    design, catalog = load_design(EXAMPLES / "cloudmatrix384.yaml")
    fabric = build_fabric(design, catalog)
    lines = bill_of_materials(fabric)
    fibres = sum(line.count for line in lines if line.category == "fibre")
    modules = sum(line.count for line in lines if line.category == "module")
    assert fibres == 6912
    assert modules == 2 * fibres


# Megatron-LM on Selene ------------------------------------------------------------------
#
# Narayanan et al., "Efficient Large-Scale Language Model Training on GPU Clusters Using
# Megatron-LM", SC'21 (arXiv 2104.04473), Table 1, last row: a 1008.0B-parameter GPT
# (128 layers, hidden 25,600, 160 heads, vocabulary 51,200, sequence 2048) on 3072 A100
# GPUs (384 DGX A100 nodes of Selene), TP 8 x PP 64 (so DP 6), batch 3072: 163 TFLOP/s
# per GPU, 52 % of the 312 TFLOP/s 16-bit peak, 502 PFLOP/s aggregate. The paper's FLOP
# count (its equation 3) includes the extra forward pass of activation recomputation, so
# it compares with the step model's HFU, not its MFU. The layout beyond Table 1 is from
# NVIDIA's reproduction script, github.com/NVIDIA/Megatron-LM examples/sc21/
# run_table_1.sh (MODEL_SIZE=1T: micro-batch 1, --recompute-method uniform, and no
# --num-layers-per-virtual-pipeline-stage, i.e. the non-interleaved 1F1B schedule).
#
# How the run was done is an input, read from Megatron-LM's history (NVIDIA/Megatron-LM
# at the commits named): the 2021 code all-reduced TP activations (sequence parallelism
# came in March 2022, 02bb1f5c), with no overlap of the backward all-reduce (the
# asynchronous TP all-reduce came in September 2021, 16c90445, off by default until
# February 2022), added each weight gradient into its main gradient in a separate pass
# (gradient accumulation fusion came in February 2022, 83b1e42f), scattered pipeline
# sends over the TP group (on by default since February 2021, 72e4230b), waited on its
# batched pipeline sends and receives (megatron/p2p_communication.py), did not overlap
# the DP all-reduce with the backward (Korthikanti et al. 2022, section 6.3: "we do not
# use any overlapping of gradient all-reduces") and kept the GPT recipe's dropout with
# the attention scores in memory (no FlashAttention in 2021-22).

MEGATRON_1T_PARAMS = 1008.0e9  # Table 1
SELENE_TFLOPS_PER_GPU = 163e12  # Table 1, achieved FLOP/s per GPU, recomputation included
SELENE_PFLOPS = 502.0e15  # Table 1, achieved aggregate FLOP/s
A100_16BIT_PEAK = 312e12  # section 5: "peak device throughput ... 16-bit precision"
SELENE_TOLERANCE = 0.05
"""The issue's tolerance for this row (#14 item 6), for both readings of the schedule."""
def preset(software: str, **fields) -> tuple[Layout, StepAssumptions]:
    """The layout and assumptions of ``fields`` under a software preset, as the CLI's
    ``--software`` gives them."""
    inputs = step_inputs({**fields, "software": software}, require_model=False)
    return inputs.layout, inputs.assumptions


def megatron_1t_layout(interleave: int) -> tuple[Layout, StepAssumptions]:
    """The 1T row's layout as the 2021 code ran it (the ``megatron-2021`` preset: no
    sequence parallelism, TP collectives not overlapped, no gradient-accumulation fusion,
    gradients all-reduced after the backward, dropout, unfused attention, fp16); rank
    order tp,cp,dp,pp (TP innermost, PP outermost) is Megatron-LM's."""
    return preset("megatron-2021", tp=8, pp=64, dp=6, micro_batch=1, global_batch=3072,
                  recompute="full", interleave=interleave)


@pytest.fixture(scope="module")
def selene():
    design, catalog = load_design(EXAMPLES / "selene-dgx-a100.yaml")
    return build_fabric(design, catalog), catalog.get("megatron-gpt-1t", Model)


def test_megatron_1t_size_and_flop_count_follow_the_paper(selene):
    """The catalog model reproduces Table 1's 1008.0B parameters, and the step model's
    FLOPs per token with recomputation match the paper's equation (3),
    F = 96 B s l h^2 (1 + s / 6h + V / 16 l h), so its HFU counts what Table 1 counts."""
    _, model = selene
    assert parameter_counts(model)["total"] == pytest.approx(MEGATRON_1T_PARAMS, rel=1e-3)
    layers, h, s, v = model.layers, model.hidden, model.sequence, model.vocab
    paper_per_token = 96 * layers * h**2 * (1 + s / (6 * h) + v / (16 * layers * h))
    # the 2021 code computed the whole score matrix (no FlashAttention), as the paper counts
    _, hardware = flops_per_token(model, s, recompute="full", flash_attention=False)
    assert hardware == pytest.approx(paper_per_token, rel=1e-3)


def test_selene_is_a_three_tier_hdr_fat_tree_with_nvlink3_nodes(selene):
    """Section 5: 8 x 80-GB A100 per node on NVLink/NVSwitch, eight 200 Gb/s HDR HCAs
    per node, a three-level (leaf, spine, core) fat-tree. 40-port switches reach only
    40^2 / 2 = 800 endpoints in two tiers, so 3072 need three."""
    fabric, _ = selene
    assert fabric.accelerator_count == 3072
    assert fabric.structure.scaleout.fat_tree_tiers == 3
    links, acc = fabric.links, fabric.accelerators
    nvlink = links[links["src"].isin(acc) & (links["tier"] == "scaleup")]
    assert np.allclose(nvlink.groupby("src")["capacity_Bps"].sum(), 12 * 25e9)  # 300 GB/s
    leaf = links[(links["tier"] == "leaf") & (links["src"].map(fabric.nodes["kind"]) == "nic")]
    assert int(leaf["cables"].sum()) == 3072 and (leaf["rate_Bps"] == 200e9 / 8).all()


@pytest.mark.parametrize("interleave", [1, 2], ids=["script-1f1b", "text-interleaved"])
def test_megatron_1t_on_selene_reaches_163_tflops_per_gpu(selene, interleave):
    """Achieved FLOP/s per GPU with recomputation = HFU x peak, against 163 TFLOP/s,
    within 5 %, with default assumptions.

    NVIDIA's script runs this row without interleaving; the paper's section 5.1 says Table 1
    used the interleaved schedule, which with 2 layers per stage can only be 2 chunks of 1
    layer. The model gives about 165 TFLOP/s non-interleaved (+1.4 %) and 169.5 interleaved
    (+4.0 %): GEMMs at the A100's measured curve (81-82 % of peak at these sizes), a 12 %
    bubble (63 / 512 of a stage's work, plus the blocking sends on the critical path), the
    2021 code's unhidden TP all-reduces (about 7 %, timed from the DGX A100's measured
    nccl-tests curve) and its separate gradient-accumulation pass over 2 x 10^9 fp16 weights
    every microbatch, and a jitter wait over its 3,072 ranks. Without those two 2021 traits
    (the megatron-2022 preset, full recomputation) it gives 168.2 TFLOP/s: the same work
    took 94.4 s in Korthikanti et al.'s 2022 Table 5 against the 102.6 s that 163 TFLOP/s
    implies here, and the two code changes account for about 2 s of those 8 s
    (docs/validation.md, "Megatron-LM 1T GPT on Selene").
    """
    fabric, model = selene
    result = step_time(fabric, model, *megatron_1t_layout(interleave))
    system = fabric.catalog.get(fabric.design.system, System)
    peak = fabric.catalog.get(system.accelerator, Accelerator).peak_flops["bf16"]
    assert peak == A100_16BIT_PEAK
    per_gpu = result.hfu * peak
    assert per_gpu == pytest.approx(SELENE_TFLOPS_PER_GPU, rel=SELENE_TOLERANCE), (
        f"{per_gpu / 1e12:.1f} TFLOP/s per GPU vs 163 published")
    assert per_gpu * 3072 == pytest.approx(SELENE_PFLOPS, rel=SELENE_TOLERANCE)


def test_megatron_1t_fits_an_80_gb_a100_with_tp_inside_the_node(selene):
    """The paper ran this layout, so it must fit 80 GB on every stage. The model needs
    56.1 GB on the first stage: 18 bytes per parameter (16-bit weights, fp32 main
    gradients, Adam's fp32 master weights and moments) of the 2.13 x 10^9 parameters the
    rank holds with the embedding (38.3 GB), 64 in-flight microbatches x 2 layers x one
    2048 x 25,600 16-bit layer input kept for full recomputation (13.4 GB) with the
    embedding's dropout mask for each (3.4 GB), and one layer re-materialised while its
    backward runs (1.0 GB). TP groups stay on NVLink; PP and DP cross InfiniBand."""
    fabric, model = selene
    result = step_time(fabric, model, *megatron_1t_layout(1))
    assert result.fits and max(result.stage_memory_bytes) < 80e9
    assert not result.warnings
    spills = {(c.kind, c.collective): c.spills for c in result.comm}
    assert spills == {("tp", "allreduce"): False, ("pp", "sendrecv"): True,
                      ("pp", "allgather"): False, ("dp", "allreduce"): True}


# Korthikanti et al. 2022, Tables 4 and 5 -----------------------------------------------
#
# "Reducing Activation Recomputation in Large Transformer Models", arXiv 2205.05198: four
# GPT models on DGX A100 80 GB nodes of Selene (the Selene example with fewer systems:
# with_overrides(design, systems=GPUs / 8)), TP 8, no data parallelism, sequence 2048,
# vocabulary 51,200; "full" is full recomputation with TP all-reduces, "seq+sel" sequence
# parallelism with selective recomputation. The 2022 Megatron-LM that ran them had
# sequence parallelism (March 2022), the asynchronous TP all-reduce and gradient
# accumulation fusion on by default (February 2022), blocking pipeline sends, dropout
# and no FlashAttention: the ``megatron-2022`` preset.

TABLE5 = [  # model, layers, hidden, heads, GPUs, PP, interleave, micro, global, full, seq+sel
    ("22B", 48, 6144, 64, 8, 1, 1, 4, 4, 1.42, 1.10),
    ("175B", 96, 12288, 96, 64, 8, 3, 1, 64, 18.13, 13.75),
    ("530B", 105, 20480, 128, 280, 35, 3, 1, 280, 49.05, 37.83),
    ("1T", 128, 25600, 160, 512, 64, 1, 1, 512, 94.42, 71.49),
]
TABLE5_ROW_TOLERANCE, TABLE5_MEAN_TOLERANCE = 0.10, 0.05
TABLE5_REMAINING_MISS = (
    "the model is within -7.1 to +4.9 % of every row (mean |error| 3.6 %) with the TP"
    " collectives timed"
    " from the DGX A100's measured nccl-tests curve (Azure ND A100 v4, [R30]; the"
    " catalog's measured_collectives). What is left is the backward pass: Korthikanti's"
    " Table 4 puts a 22B layer's backward 6-12 % above the model, which the GEMM sweep"
    " (cuBLASLt 12.5, 2024) and STREAM-rate element-wise passes do not explain"
    " (docs/validation.md)."
)


def table5_model(name: str):
    layers, hidden, heads = next((r[1], r[2], r[3]) for r in TABLE5 if r[0] == name)
    base = load_design(EXAMPLES / "selene-dgx-a100.yaml")[1].get("megatron-gpt-1t", Model)
    return replace(base, id=f"gpt-{name}", layers=layers, hidden=hidden, heads=heads,
                   ffn_hidden=4 * hidden, head_dim=hidden // heads)


def table5_layout(row: tuple, mode: str) -> tuple[Layout, StepAssumptions]:
    _, _, _, _, _gpus, pp, interleave, micro, batch, _, _ = row
    common = {"tp": 8, "pp": pp, "dp": 1, "micro_batch": micro, "global_batch": batch,
                  "interleave": interleave}
    if mode == "full":
        return preset("megatron-2022", recompute="full", sequence_parallel=False, **common)
    return preset("megatron-2022", recompute="selective", **common)


@pytest.fixture(scope="module")
def table5():
    """Model step time of every row and mode, seconds."""
    design, catalog = load_design(EXAMPLES / "selene-dgx-a100.yaml")
    out = {}
    for row in TABLE5:
        fabric = build_fabric(with_overrides(design, systems=row[4] // 8), catalog)
        for mode, measured in (("full", row[9]), ("seq+sel", row[10])):
            result = step_time(fabric, table5_model(row[0]), *table5_layout(row, mode))
            out[row[0], mode] = (result, measured)
    return out


@pytest.mark.parametrize("mode", ["full", "seq+sel"])
@pytest.mark.parametrize("name", [r[0] for r in TABLE5])
def test_table5_iteration_time_within_10_percent(table5, name, mode, request):
    """Each of the eight measured iteration times within 10 %, the megatron-2022 preset
    (the row furthest off, 22B seq+sel at -7.1 %, has no pipeline: per-layer compute and TP
    communication are the whole step; see TABLE5_REMAINING_MISS)."""
    result, measured = table5[name, mode]
    assert result.fits, f"{name} {mode} must fit 80 GB: the paper ran it"
    assert result.step_time_s == pytest.approx(measured, rel=TABLE5_ROW_TOLERANCE), (
        f"{name} {mode}: {result.step_time_s:.2f} s vs {measured} s")


def test_table5_mean_error_within_5_percent(table5):
    """Mean |error| of the eight rows within 5 % (3.6 %), the megatron-2022 preset."""
    errors = [abs(r.step_time_s / measured - 1) for r, measured in table5.values()]
    assert np.mean(errors) <= TABLE5_MEAN_TOLERANCE, f"mean {np.mean(errors):.1%}"


def test_table5_small_models_miss_most_and_the_schedule_saves_what_was_measured(table5):
    """What the model gets right beside the tolerance: the 22B rows, with no pipeline
    (per-layer compute and TP communication are the whole step), are the fastest (-4.2
    and -7.1 %, the backward of TABLE5_REMAINING_MISS); the larger models, whose
    weight-gradient GEMMs now pay the fp32 main-gradient epilogue, land within +0.1 to
    +4.9 %; selective recomputation with sequence parallelism saves what the paper
    measured (24-25 % of the full-recompute time, published 22-24 %)."""
    errors = {k: r.step_time_s / measured - 1 for k, (r, measured) in table5.items()}
    assert all(-0.10 < e < 0.10 for e in errors.values()), errors
    for mode in ("full", "seq+sel"):
        assert errors["22B", mode] < errors["1T", mode]
    for row in TABLE5:
        full, seqsel = table5[row[0], "full"][0], table5[row[0], "seq+sel"][0]
        saved = 1 - seqsel.step_time_s / full.step_time_s
        assert saved == pytest.approx(1 - row[10] / row[9], abs=0.03), row[0]


TABLE4 = {  # Korthikanti Table 4: one 22B layer, forward and backward ms
    "baseline": ({"sequence_parallel": False, "recompute": "none"}, 7.7, 11.9),
    "sequence parallel": ({"sequence_parallel": True, "recompute": "none"}, 7.2, 11.8),
    "full recompute": ({"sequence_parallel": False, "recompute": "full"}, 7.7, 19.5),
    "selective recompute": ({"sequence_parallel": False, "recompute": "selective"}, 7.7, 13.2),
    "selective + sequence": ({"sequence_parallel": True, "recompute": "selective"}, 7.2, 13.1),
}


@pytest.mark.parametrize("run", list(TABLE4))
def test_table4_one_22b_layer_forward_within_10_and_backward_within_15_percent(run):
    """The per-layer times localise the Table 5 miss. The model's forward of a 22B layer
    (4 x 2048 tokens on 8 A100s, TP collectives from the measured curve) is within 1 %
    of the measurement; its backward 6-12 % below: the backward is the weaker half (see
    TABLE5_REMAINING_MISS). The tolerances say so: 10 % forward, 15 % backward."""
    from topomodel.analysis.training.compute import device_model, layer_times
    from topomodel.analysis.training.stagework import layer_work
    from topomodel.analysis.training.stepcalls import issued_calls, placed_calls

    design, catalog = load_design(EXAMPLES / "selene-dgx-a100.yaml")
    fabric = build_fabric(with_overrides(design, systems=1), catalog)
    model = table5_model("22B")
    settings, forward_ms, backward_ms = TABLE4[run]
    layout, a = preset("megatron-2022", tp=8, micro_batch=4, global_batch=4, **settings)
    sizes = np.array([[model.layers]])
    issued = issued_calls(fabric, model, layout, a, 2048, sizes, np.zeros_like(sizes))
    calls = placed_calls(fabric, layout, a, fabric.accelerators[:8], issued, routing="ecmp",
                         seed=0)
    device = device_model(catalog.get("a100-sxm-80gb", Accelerator), "bf16")
    lt = layer_times(device, model, layout, 2048, moe=False)
    f, b, _ = layer_work(lt, calls, layout, moe=False, hot=1.0, split_w=False,
                         share=a.comm_sm_share)
    assert f.duration_s * 1e3 == pytest.approx(forward_ms, rel=0.10)
    assert b.duration_s * 1e3 == pytest.approx(backward_ms, rel=0.15)
    assert b.duration_s * 1e3 < backward_ms  # the known direction of the miss


# Serving (issue #38 item 5) -----------------------------------------------------------

TRTLLM_AGGREGATED = {  # (model, TP): output tokens/s of one instance at 1000 in / 1000 out
    ("llama3-8b", 1): 15_220,  # Llama 3.1 8B FP8, H100 TP1
    ("llama3-70b", 2): 4_205,  # Llama 3.3 70B FP8, H100 TP2
}
"""TensorRT-LLM's performance overview (docs/source/performance/perf-overview.md, the
PyTorch-backend tables, trtllm-bench throughput: an offline maximum-load run of
in-flight batching, prefill and decode on the same GPUs), H100 SXM 80GB, FP8 weights
(ModelOpt), ISL/OSL 1000/1000. Llama 3.1 8B and 3.3 70B have Llama 3's architecture.
The page does not say the KV cache's dtype."""


def _max_rate_serve(fabric, model, tp, kv_dtype):
    """The aggregated instance at the highest arrival rate it sustains (bisection on the
    rate, 22 halvings of a 0.01-200 requests/s bracket): an offline maximum-load run is
    the steady state at that rate."""
    from topomodel.analysis.serving.decode_assumptions import DecodeAssumptions
    from topomodel.analysis.serving.serve import serve
    from topomodel.analysis.serving.serve_assumptions import ServeAssumptions
    from topomodel.errors import UsageError

    low, high, best = 0.01, 200.0, None
    for _ in range(22):
        rate = (low * high) ** 0.5
        try:
            best = serve(fabric, model, serving=ServeAssumptions(
                placement="aggregated", decode_tp=tp, rate=rate),
                decode=DecodeAssumptions(dtype="fp8", kv_dtype=kv_dtype))
            low = rate
        except UsageError:
            high = rate
    assert best is not None
    return best


@pytest.mark.parametrize(("model_id", "tp"), list(TRTLLM_AGGREGATED))
def test_aggregated_max_throughput_lies_between_bf16_and_fp8_kv_caches(hgx, model_id, tp):
    """Aggregated serving against TensorRT-LLM's maximum-throughput runs. The page does
    not give the KV cache's dtype, so the model runs both: the published figure must lie
    between the bf16-KV and fp8-KV capacities (both bounded by memory: the batch whose
    caches at the longest context fill the HBM), and within 20 % of the bf16 one. The
    model holds every sequence at its longest context (paged engines hold what each
    has; more sequences) and uses all the HBM (trtllm-bench leaves 5-10 %; fewer)."""
    model = hgx.catalog.get(model_id, Model)
    published = TRTLLM_AGGREGATED[(model_id, tp)]
    bf16 = _max_rate_serve(hgx, model, tp, "bf16")
    fp8 = _max_rate_serve(hgx, model, tp, "fp8")
    assert bf16.aggregated and bf16.accelerators == tp
    assert bf16.output_tokens_per_s < published < fp8.output_tokens_per_s
    assert bf16.output_tokens_per_s == pytest.approx(published, rel=0.20)


LMSYS_PREFILL_TOKENS_PER_S_PER_NODE = 52_300
"""LMSYS (SGLang team), "Deploying DeepSeek with PD Disaggregation and Large-scale Expert
Parallelism on 96 H100 GPUs" (2025-05-05): prefill-decode disaggregation on 12 nodes of
8 H100 (400G NDR per GPU), the prefill pool 4 nodes with data-parallel attention and EP
32 (DeepSeek-V3, FP8 GEMMs, 2,000-token prompts): 52.3k input tokens/s per prefill node.
Its decode pool (9 nodes, EP 72 over 288 experts with redundant copies) is not a layout
the model can express (EP must divide the 256 experts), so only the prefill side is
checked."""


def test_disaggregated_prefill_of_deepseek_on_96_h100_lies_between_its_overlap_bounds():
    """The prefill pool of LMSYS's disaggregated deployment: TP 1, EP 32 on 4 DGX H100 of
    the SuperPOD example, fp8 weights, bf16 KV cache, 2,000-token prompts. The model's
    prefill capacity, replicas / prefill time x prompt tokens per node, with the EP
    all-to-alls exposed (comm_overlap 0, the default) and hidden (1): SGLang overlaps
    them with two-batch overlap (the blog credits it with 27-35 % of prefill throughput),
    so the measurement must lie between the two bounds; the exposed bound is the miss
    docs/validation.md explains (about half)."""
    from topomodel.analysis.serving.decode_assumptions import DecodeAssumptions
    from topomodel.analysis.serving.serve import serve
    from topomodel.analysis.serving.serve_assumptions import ServeAssumptions

    design, catalog = load_design(EXAMPLES / "dgx-h100-superpod.yaml")
    pod = build_fabric(design, catalog)
    ds = catalog.get("deepseek-v3", Model)
    job = ServeAssumptions(prefill_tp=1, prefill_ep=32, decode_tp=1, decode_ep=32,
                           input_tokens=2000, output_tokens=100, rate=1.0)

    def per_node(overlap):
        r = serve(pod, ds, serving=job, decode=DecodeAssumptions(
            dtype="fp8", kv_dtype="bf16", comm_overlap=overlap))
        assert r.prefill_pool.size == 32 and r.prefill_comm[0].spills  # EP over 4 nodes
        return r.prefill_pool.replicas / r.prefill_s * 2000 / 4

    exposed, hidden = per_node(0.0), per_node(1.0)
    assert exposed < LMSYS_PREFILL_TOKENS_PER_S_PER_NODE < hidden
    assert exposed / LMSYS_PREFILL_TOKENS_PER_S_PER_NODE == pytest.approx(0.5, abs=0.1)
