"""Results obey their laws (issue #44 item 5): property tests over small fabrics, built
from the shipped examples and toy designs, that hold for every input and not only the
ones a figure was checked on.

- utilisation: MFU <= HFU <= 1 at a compute efficiency of 1, and the hardware FLOPs are
  the FLOPs the step's operations are timed on (one count);
- bus bandwidth: a collective's busbw is at most the line rate its ranks inject at (the
  links they send on), undelivered flows included: its algbw and busbw count only the
  bytes delivered, and its report says so;
- conservation: every routed collective's phases deliver each flow's bytes from its
  source to its destination across the link loads, failed links carry nothing, and
  every figure of a collective or a step is finite.

Hypothesis runs the suite's profile (conftest.py: 25 examples a test, 150 with
``--run-slow``); every test is ``derandomize``d, so an example repeats from run to run,
and keeps no example database.
"""

from __future__ import annotations

import math
import textwrap

import numpy as np
import pytest
from conftest import TOY_CATALOG, toy_switch
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st

from topomodel.analysis.collectives.collective import run_collective
from topomodel.analysis.collectives.routes import pxn_traffic
from topomodel.analysis.collectives.timing import TimeModel
from topomodel.analysis.training.compute import Device
from topomodel.analysis.training.model import flops_per_token
from topomodel.analysis.training.stagework import COMPUTE
from topomodel.analysis.training.step import StepAssumptions, step_time, step_works
from topomodel.analysis.training.stepshape import shape_of
from topomodel.errors import UsageError
from topomodel.fabric.build import build_fabric
from topomodel.fabric.failures import with_failures
from topomodel.inputs.design import load_design
from topomodel.inputs.parts import Model
from topomodel.report.route import route_report
from topomodel.traffic.collectives import ALGORITHMS as ALL_ALGORITHMS
from topomodel.traffic.groups import parse_groups
from topomodel.traffic.layout import Layout

SEEDED = settings(derandomize=True, database=None, deadline=None,
                  suppress_health_check=[HealthCheck.too_slow])
"""The conftest profile's example count, drawn from a fixed seed."""

TOLERANCE = 1e-9
"""Relative slack for float sums compared with one another."""


@pytest.fixture(scope="module")
def toys(tmp_path_factory):
    """Toy fabrics by name, built once for the module: 16 toy accelerators as four
    switched boxes of 4 (``box``) or sixteen single-accelerator hosts (``hosts``) on a
    radix-16 leaf and spine."""
    root = tmp_path_factory.mktemp("invariants")
    catalog = root / "toy.yaml"
    catalog.write_text(TOY_CATALOG + "".join(toy_switch(k) for k in (4, 8, 16)))
    designs = {"box": "system: toy-box\nsystems: 4\nscaleout:\n  switch: toy-switch-16\n",
               "hosts": "system: toy-host\nsystems: 16\nscaleout:\n  switch: toy-switch-8\n"}
    built = {}
    for name, text in designs.items():
        path = root / f"{name}.yaml"
        path.write_text(textwrap.dedent(text))
        built[name] = build_fabric(*load_design(path, extra_catalogs=[catalog]))
    return built


# --- utilisation -----------------------------------------------------------------------

FLAT = StepAssumptions(compute_efficiency=1.0, jitter_cv=0.0, straggler_share=0.0,
                       hot_expert_factor=1.0)
"""Every matmul at the accelerator's peak, no wait, a balanced router: the assumptions
under which MFU and HFU come nearest 1."""


@st.composite
def toy_layouts(draw):
    """A model of the toy catalog and a layout of it on 16 accelerators: TP, PP, EP and
    CP that divide, sequences short to long (long ones make attention most of the
    work), every recomputation, with and without FlashAttention."""
    model = draw(st.sampled_from(["toy-dense", "toy-moe"]))
    tp = draw(st.sampled_from([1, 2, 4]))
    pp = draw(st.sampled_from([1, 2, 4]))
    cp = draw(st.sampled_from([c for c in (1, 2) if tp * pp * c <= 16]))
    dp = 16 // (tp * pp * cp)
    ep = draw(st.sampled_from([e for e in (1, 2, 4, 8) if dp % e == 0])) \
        if model == "toy-moe" else 1
    seq = draw(st.sampled_from([32768, 8192, 2048]))
    return model, Layout(
        tp=tp, pp=pp, cp=cp, dp=dp, ep=ep, seq=seq,
        global_batch=dp * draw(st.sampled_from([1, 4, 8])),
        sequence_parallel=draw(st.booleans()),
        recompute=draw(st.sampled_from(["none", "selective", "full"])),
        flash_attention=draw(st.booleans()))


def _counting_device() -> Device:
    """A device whose every matmul runs at a peak of 1 FLOP/s and whose HBM is infinitely
    fast: the seconds it gives are the FLOPs it was asked to do."""
    return Device("count", 1.0, np.zeros(1), np.ones(1), math.inf, None, 2, 1.0)


@SEEDED
@given(drawn=toy_layouts())
def test_hardware_flops_are_the_flops_the_step_is_timed_on(toys, drawn):
    """One count: timed on a device that does one FLOP a second, the compute of every
    operation of one microbatch, summed over the pipeline's stages and the TP and CP
    ranks, is the hardware FLOPs per token of :func:`flops_per_token`; the model FLOPs
    are never more."""
    name, layout = drawn
    fabric = toys["box"]
    model = fabric.catalog.get(name, Model)
    try:
        shape = shape_of(fabric, model, layout)
    except UsageError:
        event("not applicable")
        return
    works = step_works(_counting_device(), model, layout, FLAT, shape.seq, {},
                       shape.sizes - shape.moe_sizes, shape.moe_sizes)
    flops = sum(w.parts[COMPUTE] for kind in works for row in kind for w in row)
    per_token = flops * layout.tp * layout.cp / (layout.micro_batch * shape.seq)
    model_flops, hardware = flops_per_token(model, shape.seq, recompute=layout.recompute,
                                            flash_attention=layout.flash_attention)
    if model.is_moe and not layout.sequence_parallel:
        # without sequence parallelism every TP rank runs the router on all the tokens
        # (forward, input and weight gradients, and the forward again under full
        # recomputation): work the ranks repeat, not the model's
        passes = 4 if layout.recompute == "full" else 3
        router = passes * 2 * model.hidden * model.experts
        hardware += (layout.tp - 1) * router * float(shape.moe_sizes.sum())
    assert per_token == pytest.approx(hardware, rel=TOLERANCE)
    assert model_flops <= hardware * (1 + TOLERANCE)


@SEEDED
@given(drawn=toy_layouts())
def test_mfu_and_hfu_are_at_most_one_at_peak_efficiency(toys, drawn):
    """At a compute efficiency of 1, a step does its FLOPs at the peak at best, so
    MFU <= HFU <= 1, whatever the layout, the model and the sequence length."""
    name, layout = drawn
    fabric = toys["box"]
    model = fabric.catalog.get(name, Model)
    try:
        result = step_time(fabric, model, layout, FLAT)
    except UsageError:
        event("not applicable")
        return
    assert 0 < result.mfu <= result.hfu * (1 + TOLERANCE)
    assert result.hfu <= 1 + TOLERANCE


def test_mixtral_mfu_is_below_one_at_peak_efficiency(example_fabric):
    """The case that found it: Mixtral 8x7B (32k-token sequences: attention is 40 % of
    PaLM's count) on one GB200 NVL72 rack's worth of EP 8, every matmul at the peak. It
    gave MFU 1.023 and, with selective recomputation, HFU 1.085: the MFU counted
    PaLM's 12 L H Q T (the whole score matrix) and the HFU another 4 L H Q T for the
    recomputed core, where the step times causal FlashAttention (7 L H Q T, and 2 for the
    recomputed forward). Then MFU 0.817 and 0.764, HFU 0.851 and 0.861; with the
    mcore-2024 preset's distributed optimizer (the optimizer step sharded) 0.837 and
    0.782, HFU 0.872 and 0.881; with the memory-bound passes counted as NeMo 2 runs them
    (the fused cross-entropy's bytes, the embedding's dense gradient, rotary and the QKV
    split: analysis/training/passes.py) 0.827 and 0.773, HFU 0.861 and 0.87."""
    fabric = example_fabric("gb200-nvl72-cluster")
    model = fabric.catalog.get("mixtral-8x7b", Model)
    for recompute, mfu, hfu in (("none", 0.827, 0.861), ("selective", 0.773, 0.87)):
        result = step_time(fabric, model, Layout(tp=1, dp=576, ep=8,
                                                    recompute=recompute), FLAT)
        assert (round(result.mfu, 3), round(result.hfu, 3)) == (mfu, hfu), recompute


# --- bus bandwidth ---------------------------------------------------------------------

SMALL_EXAMPLES = ("small-2x2-a100-1gbe", "hgx-h100-server", "rtx4090-workstation",
                  "small-4x8-l40s-25gbe")
"""Shipped designs of at most 32 accelerators: PCIe through a CPU root, NVSwitch, a
workstation without a network, L40S servers on 25 GbE."""

ALGORITHMS = {"allreduce": ("ring", "tree", "rhd", "hierarchical", "torus"),
              "allgather": ("ring", "rhd", "hierarchical", "torus"),
              "reducescatter": ("ring", "rhd", "hierarchical", "torus"),
              "alltoall": ("direct", "pairwise")}
"""The algorithms whose ranks move every byte themselves: a switch that reduces
(in-network reduction, NVLS) lets an all-reduce's busbw pass the ranks' line rate, as
NCCL's own measurements of NVLS do, so those are left out of the law."""

GROUPS = ("all", "system", "domain", "rail", "block:2", "stride:2")
SIZES = (64e3, 16e6, 1e9)


@st.composite
def collectives(draw, names):
    """A fabric (a toy or a small example, maybe with a NIC or switch failed), a
    collective, an algorithm, a group spec and a size."""
    name = draw(st.sampled_from(names))
    collective = draw(st.sampled_from(sorted(ALGORITHMS)))
    return (name, collective, draw(st.sampled_from(ALGORITHMS[collective])),
            draw(st.sampled_from(GROUPS)), draw(st.sampled_from(SIZES)),
            draw(st.integers(0, 10**6)), draw(st.booleans()))


def _fabric(toys, example_fabric, name, pick, fail):
    """The named fabric; with ``fail``, a copy with one of its NICs or switches failed
    (``pick`` chooses which): flows may lose their only path."""
    fabric = toys[name] if name in toys else example_fabric(name)
    if not fail:
        return fabric
    kinds = fabric.nodes["kind"].astype(str)
    parts = fabric.nodes["name"][kinds.isin(["nic", "switch", "scaleup_switch"])].tolist()
    return with_failures(fabric, [sorted(parts)[pick % len(parts)]]) if parts else fabric


def _run(fabric, collective, algorithm, spec, size):
    try:
        return run_collective(fabric, collective, size, [spec], algorithm=algorithm,
                              time_model=TimeModel())
    except UsageError:  # the algorithm or the groups do not apply to this fabric
        event("not applicable")
        return None


def _injection_Bps(fabric, run, spec):
    """The most any rank of the groups can send per second: the line rate (one
    direction) of its outgoing links that carry bytes, the highest over the ranks."""
    links = fabric.links
    loaded = run.timing.link_bytes > 0
    egress = np.bincount(links["src"].to_numpy()[loaded],
                         weights=links["capacity_Bps"].to_numpy()[loaded],
                         minlength=len(fabric.nodes))
    return float(egress[np.unique(parse_groups(fabric, spec))].max())


@SEEDED
@given(drawn=collectives(("box", "hosts", *SMALL_EXAMPLES)))
# the case that found it: the first server's NIC failed (part 2 of leaf0, sys0/cpu0,
# sys0/nic0, ...), so a third of an all-to-all's bytes move, over 31.5 GB/s PCIe
@example(drawn=("small-2x2-a100-1gbe", "alltoall", "direct", "all", 1e9, 2, True))
def test_busbw_is_at_most_the_line_rate_the_ranks_inject_at(toys, example_fabric, drawn):
    """busbw x time is at least the bytes the average rank sends (nccl-tests defines its
    factor so), and a rank sends no faster than the line rate of its links that carry
    them: busbw <= the highest such rate of the group's ranks. With flows that have no
    path the law holds of the delivered part, which is all algbw and busbw count."""
    name, collective, algorithm, spec, size, pick, fail = drawn
    fabric = _fabric(toys, example_fabric, name, pick, fail)
    run = _run(fabric, collective, algorithm, spec, size)
    if run is None or not run.timing.link_bytes.any():
        return
    assert 0 <= run.delivered_share <= 1
    assert run.busbw_Bps <= _injection_Bps(fabric, run, spec) * (1 + TOLERANCE), (
        f"{run.busbw_Bps / 1e9:.3f} GB/s busbw,"
        f" {run.timing.unroutable_flows} flows not delivered")


def test_a_pcie_path_with_a_lost_nic_reports_the_delivered_bytes(example_fabric):
    """Two servers of two A100 PCIe, the first server's only NIC failed: half of an
    all-to-all's flows (2 of its 3 GB) have no path. The time covers the third that
    moves inside the servers, over 31.5 GB/s PCIe links; dividing the whole 1 GB by it
    gave 95.8 GB/s algbw and 71.9 GB/s busbw. Over the delivered bytes: 31.9 and 24.0,
    and the headline and the warning say that the collective does not complete."""
    fabric = with_failures(example_fabric("small-2x2-a100-1gbe"), ["sys0/nic0"])
    run = run_collective(fabric, "alltoall", 1e9, ["all"], algorithm="direct")
    assert run.timing.unroutable_flows == 8
    assert run.delivered_share == pytest.approx(1 / 3)
    assert run.busbw_Bps == pytest.approx(23.95e9, rel=1e-3)
    assert run.busbw_Bps <= 31.5e9
    report = route_report(fabric, run, routing="ecmp")
    assert report.data["delivered_share"] == pytest.approx(1 / 3)
    assert report.data["busbw_Bps"] == run.busbw_Bps
    (row,) = [r for r in report.tables[0].rows if r["item"].startswith("algbw / busbw")]
    assert "delivered" in row["item"] and "does not complete" in row["value"]
    assert "33.3% of its bytes delivered" in row["value"]
    assert any("NOT delivered" in w and "count only the 33.3% of the bytes" in w
               for w in report.warnings)
    intact = example_fabric("small-2x2-a100-1gbe")
    whole = run_collective(intact, "alltoall", 1e9, ["all"], algorithm="direct")
    assert whole.delivered_share == 1
    assert whole.algbw_Bps == pytest.approx(1e9 / whole.time_s, rel=1e-12)
    rows = route_report(intact, whole, routing="ecmp").tables[0].rows
    assert [r["item"] for r in rows if r["item"].startswith("algbw")] == ["algbw / busbw"]


# --- conservation and finiteness -------------------------------------------------------

EVERY_ALGORITHM = {c: ALL_ALGORITHMS[c] for c in ("allreduce", "allgather", "reducescatter",
                                                  "alltoall", "broadcast", "reduce")}


@st.composite
def any_collectives(draw, names):
    """As :func:`collectives`, with every algorithm of every collective but sendrecv
    (in-network reduction and NVLS included: they send to and from switches)."""
    name = draw(st.sampled_from(names))
    collective = draw(st.sampled_from(sorted(EVERY_ALGORITHM)))
    return (name, collective, draw(st.sampled_from(EVERY_ALGORITHM[collective])),
            draw(st.sampled_from(GROUPS)), draw(st.sampled_from(SIZES)),
            draw(st.integers(0, 10**6)), draw(st.booleans()))


def _check_conservation(fabric, ph, routed):
    """Every delivered flow's bytes leave its source and reach its destination across
    the link loads (at each node, bytes out - bytes in = bytes it sends - bytes it
    receives), the loads sum to bytes x hops, and a failed link carries nothing."""
    links = fabric.links
    load = routed.link_bytes
    assert np.isfinite(load).all() and (load >= 0).all()
    ok = np.ones(ph.flows, bool)
    ok[routed.unroutable] = False
    src, dst, nbytes = ph.src[ok], ph.dst[ok], ph.bytes[ok]
    if len(routed.hops) == ph.flows:  # an all-pairs phase routed from counts holds hops
        assert load.sum() == pytest.approx(  # per class of pair, not per flow
            float((nbytes * routed.hops[ok]).sum()), rel=1e-9)
    n = len(fabric.nodes)
    out = np.bincount(links["src"].to_numpy(), weights=load, minlength=n)
    into = np.bincount(links["dst"].to_numpy(), weights=load, minlength=n)
    sent = np.bincount(src, weights=nbytes, minlength=n)
    received = np.bincount(dst, weights=nbytes, minlength=n)
    scale = max(1.0, float(nbytes.sum()))
    assert np.allclose(out - into, sent - received, rtol=0, atol=1e-9 * scale)
    assert not load[links["failed"].to_numpy()].any()


@SEEDED
@given(drawn=any_collectives(("box", "hosts", *SMALL_EXAMPLES)))
def test_routed_collectives_conserve_bytes_and_are_finite(toys, example_fabric, drawn):
    """Every phase of a routed collective conserves its delivered flows' bytes, puts
    none on a failed link, and the run's figures are finite and not negative."""
    name, collective, algorithm, spec, size, pick, fail = drawn
    fabric = _fabric(toys, example_fabric, name, pick, fail)
    run = _run(fabric, collective, algorithm, spec, size)
    if run is None:
        return
    # the flows as timed: PXN relays a cross-rail flow through a peer on the NIC's rail
    timed = pxn_traffic(fabric, run.traffic) if TimeModel().pxn else run.traffic
    phases = timed.phases
    assert len(phases) == len(run.timing.phases)
    for ph, timed in zip(phases, run.timing.phases, strict=True):
        _check_conservation(fabric, ph, timed.routed)
    timing = run.timing
    figures = (timing.time_s, timing.latency_s, timing.bandwidth_s, timing.topology_s,
               timing.unroutable_bytes, run.delivered_share)
    assert all(math.isfinite(x) and x >= 0 for x in figures), figures
    assert timing.time_s == pytest.approx(timing.latency_s + timing.bandwidth_s
                                          + timing.topology_s, rel=1e-9)
    if timing.time_s > 0:
        assert math.isfinite(run.algbw_Bps) and math.isfinite(run.busbw_Bps)
        assert all(math.isfinite(b) for b in run.busbw_per_set_Bps)
    assert not timing.link_bytes[fabric.links["failed"].to_numpy()].any()


@SEEDED
@given(drawn=toy_layouts(), failed=st.sampled_from([None, "sys1/sw0", "sys2/nic1", "leaf0"]))
def test_steps_are_finite(toys, drawn, failed):
    """Every number of a step is finite and none negative, whatever the layout and with
    a switch or NIC failed; its parts add up to the step."""
    name, layout = drawn
    fabric = toys["box"]
    if failed is not None:
        fabric = with_failures(fabric, [failed])
    model = fabric.catalog.get(name, Model)
    try:
        result = step_time(fabric, model, layout)
    except UsageError as exc:
        event(f"not applicable: {str(exc)[:40]}")
        return
    numbers = [result.step_time_s, result.compute_s, result.bubble_s, result.exposed_comm_s,
               result.wait_s, result.imbalance_s, result.mfu, result.hfu,
               result.tokens_per_s, result.pipeline_s, *result.walls.values(),
               *result.memory.values(), *result.stage_memory_bytes, *result.stage_busy_s]
    for c in result.comm:
        numbers += [c.size_bytes, c.time_s, c.latency_s, c.bandwidth_s, c.topology_s,
                    c.exposed_s]
        assert c.exposed_s <= c.time_s * (1 + TOLERANCE)
    assert all(math.isfinite(x) and x >= 0 for x in numbers), result
    assert result.step_time_s == pytest.approx(
        result.compute_s + result.imbalance_s + result.bubble_s + result.exposed_comm_s
        + result.wait_s, rel=1e-9)
