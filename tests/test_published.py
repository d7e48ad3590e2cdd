"""Validation against results real systems published (shared/reference/published-figures).

Each test builds the system from its inputs, computes, and compares with a stated
tolerance. Published results are never inputs; where the model misses, the test names
the assumption responsible.
"""

from pathlib import Path

import numpy as np
import pytest

from topomodel.analysis.collective import run_collective
from topomodel.analysis.model import flops_per_token, parameter_counts
from topomodel.analysis.step import step_time
from topomodel.catalog import Accelerator, Model, System
from topomodel.design import load_design
from topomodel.fabric.build import build_fabric
from topomodel.traffic.layout import Layout

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


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

MEGATRON_1T_PARAMS = 1008.0e9  # Table 1
SELENE_TFLOPS_PER_GPU = 163e12  # Table 1, achieved FLOP/s per GPU, recomputation included
SELENE_PFLOPS = 502.0e15  # Table 1, achieved aggregate FLOP/s
A100_16BIT_PEAK = 312e12  # section 5: "peak device throughput ... 16-bit precision"
SELENE_TOLERANCE = 0.10
"""Relative tolerance on the achieved FLOP/s. The model's compute efficiency (0.6 of
peak on every FLOP) is an assumed default, not an A100 measurement; the same paper's
Table 1 spans 44-52 % of peak on the same machine as the GEMMs grow, i.e. about +-8 %
around its mean. The schedule is ambiguous between the paper's text (interleaved) and
NVIDIA's script for this row (not interleaved), which moves the model by 5 %. 10 %
covers those two; a miss beyond it would mean a wrong bubble, communication or FLOP
account, which is what this test is for."""


def megatron_1t_layout(interleave: int) -> Layout:
    """The 1T row's layout. ``sequence_parallel`` stands for the paper's scatter/gather
    optimisation (section 4.1), enabled for Table 1: each pipeline send crosses
    InfiniBand as 1/8 of the boundary tensor per GPU, which is how the step model sizes
    PP sends under sequence parallelism; its TP reduce-scatter + all-gather pair moves
    the same bytes as the TP all-reduce Megatron-LM used in 2021. Rank order
    tp,cp,dp,pp (TP innermost, PP outermost) is Megatron-LM's."""
    return Layout(tp=8, pp=64, dp=6, micro_batch=1, global_batch=3072, recompute="full",
                  interleave=interleave, sequence_parallel=True)


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
    _, hardware = flops_per_token(model, s, recompute="full")
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
    """Achieved FLOP/s per GPU with recomputation = HFU x peak, against 163 TFLOP/s.

    NVIDIA's script runs this row without interleaving (the reading the model is held
    to first); the paper's section 5.1 says Table 1 used the interleaved schedule, which
    with 2 layers per stage can only be 2 chunks of 1 layer. With the defaults the model
    gives about 154 TFLOP/s non-interleaved (5 % low: a 12.3 % bubble, 63 / 512 of
    compute, plus 4 % exposed TP traffic and 3 % jitter wait) and about 161 TFLOP/s
    interleaved. The paper does not give the GEMM efficiency; the non-interleaved
    reading would need about 0.64 of peak instead of the assumed 0.6 to close the gap.
    """
    fabric, model = selene
    result = step_time(fabric, model, megatron_1t_layout(interleave))
    system = fabric.catalog.get(fabric.design.system, System)
    peak = fabric.catalog.get(system.accelerator, Accelerator).peak_flops["bf16"]
    assert peak == A100_16BIT_PEAK
    per_gpu = result.hfu * peak
    assert per_gpu == pytest.approx(SELENE_TFLOPS_PER_GPU, rel=SELENE_TOLERANCE), (
        f"{per_gpu / 1e12:.1f} TFLOP/s per GPU vs 163 published")
    assert per_gpu * 3072 == pytest.approx(SELENE_PFLOPS, rel=SELENE_TOLERANCE)


def test_megatron_1t_fits_an_80_gb_a100_with_tp_inside_the_node(selene):
    """The paper ran this layout, so it must fit 80 GB. The model needs about 45 GB:
    16 bytes per parameter of 1008B / 512 model-parallel ranks (31.5 GB) plus 64 in-flight
    microbatches x 2 layers x one 2048 x 25,600 bf16 layer input kept for recomputation
    (13.4 GB). TP groups stay on NVLink; PP and DP cross InfiniBand."""
    fabric, model = selene
    result = step_time(fabric, model, megatron_1t_layout(1))
    assert result.fits and result.memory["total_bytes"] < 80e9
    assert not result.warnings
    spills = {c.kind: c.spills for c in result.comm}
    assert spills == {"tp": False, "pp": True, "dp": True}
