"""Routes kept per fabric and traffic (analysis.routes): what is reused is, bit for bit,
what routing again gives, for every sensitivity variant on several examples and for
every routing option; and a key that drops an option that matters is caught."""

from __future__ import annotations

import dataclasses
import struct
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from topomodel.analysis.collectives import routes
from topomodel.analysis.collectives.routes import PhaseRoute, phase_routes, pxn_traffic, route_key
from topomodel.analysis.collectives.timing import time_traffic
from topomodel.analysis.training.step import StepAssumptions, step_time
from topomodel.analysis.training.studies import VARIATIONS
from topomodel.fabric.build import build_fabric
from topomodel.fabric.tables import Fabric
from topomodel.inputs.design import load_design
from topomodel.inputs.parts import Model
from topomodel.routing.routed import Routed
from topomodel.traffic.collectives import collective_traffic
from topomodel.traffic.layout import Layout
from topomodel.traffic.phases import AllPairsPhase, Phase, Traffic

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

JOBS = {  # example -> (model, layout, base assumptions)
    "dgx-h100-superpod": ("llama3-8b", Layout(tp=8, pp=2, dp=63), StepAssumptions()),
    "cloudmatrix384": ("llama3-8b", Layout(tp=8, pp=2, dp=24),
                       StepAssumptions(compute_efficiency=0.7)),
    "gb200-nvl72-cluster": ("llama3-70b", Layout(tp=8, pp=4, dp=18), StepAssumptions()),
    "small-16x8-a100-100gbe-roce": ("mixtral-8x7b", Layout(tp=2, dp=64, ep=8),
                                    StepAssumptions(compute_efficiency=0.6)),
}
"""A rail-optimized fat-tree (PXN moves flows), a supernode, NVL72 racks and a PCIe
fabric the general router takes, with an MoE layout (a direct All-to-All)."""


def bits(value: Any) -> Any:
    """``value`` as nested tuples in which every float is its 8 bytes and every array its
    dtype, shape and bytes: equal only when bit for bit equal."""
    if isinstance(value, float):
        return struct.pack("<d", value)
    if isinstance(value, np.ndarray):
        return (value.dtype.str, value.shape, np.ascontiguousarray(value).tobytes())
    if isinstance(value, np.generic):
        return bits(value.item())
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return (type(value).__name__,
                *(bits(getattr(value, f.name)) for f in dataclasses.fields(value)))
    if isinstance(value, dict):
        return tuple(sorted((bits(k), bits(v)) for k, v in value.items()))
    if isinstance(value, (list, tuple)):
        return tuple(bits(v) for v in value)
    return value


def fresh(fabric: Fabric) -> Fabric:
    """The same fabric with nothing derived or kept on it yet."""
    return dataclasses.replace(fabric)


@pytest.fixture(scope="module", params=sorted(JOBS))
def job(request: pytest.FixtureRequest) -> tuple[Fabric, Model, Layout, StepAssumptions]:
    design, catalog = load_design(EXAMPLES / f"{request.param}.yaml")
    name, layout, assumptions = JOBS[request.param]
    return build_fabric(design, catalog), catalog.get(name, Model), layout, assumptions


def count_routes(monkeypatch: pytest.MonkeyPatch) -> list[Phase]:
    """A list of every phase routed from now on, except a direct All-to-All's: the step
    keeps only the last few all-pairs traffics
    (:data:`~topomodel.analysis.training.stepshape.ALL_PAIRS_TRAFFICS`), so one may be
    built and routed anew."""
    routed: list[Phase] = []
    real = routes.route

    def counting(fabric: Fabric, phase: Phase, **kwargs: Any) -> Routed:
        if not isinstance(phase, AllPairsPhase):
            routed.append(phase)
        return real(fabric, phase, **kwargs)

    monkeypatch.setattr(routes, "route", counting)
    return routed


def test_every_sensitivity_variant_reused_is_rerouted_bit_for_bit(job, monkeypatch):
    fabric, model, layout, base = job
    warm = fresh(fabric)
    routed = count_routes(monkeypatch)
    step_time(warm, model, layout, base)  # the base step routes, as the sensitivity's does
    for name, low, high, apply in VARIATIONS:
        for value in (low, high):
            moved = apply(base, value)
            before = len(routed)
            reused = step_time(warm, model, layout, moved)
            # a phase routed before is not routed again (one the search had pruned may
            # be routed for the first time: another time model can rank it higher)
            again = {id(p) for p in routed[before:]} & {id(p) for p in routed[:before]}
            assert not again, f"{name} = {value} routed again"
            alone = step_time(fresh(fabric), model, layout, moved)
            assert bits(reused) == bits(alone), f"{name} = {value}"


def test_a_time_model_change_times_the_kept_routes(job, monkeypatch):
    """The efficiency variants miss the step's collective times and so time every
    collective again, from the routes kept (none routed twice), with new times."""
    fabric, model, layout, base = job
    warm = fresh(fabric)
    routed = count_routes(monkeypatch)
    first = step_time(warm, model, layout, base)
    before = len(routed)
    slower = dataclasses.replace(base, time=dataclasses.replace(
        base.time, efficiency={"scaleup": 0.5, "leaf": 0.5}))
    moved = step_time(warm, model, layout, slower)
    assert not {id(p) for p in routed[before:]} & {id(p) for p in routed[:before]}
    assert moved.step_time_s > first.step_time_s  # timed again, not recalled
    assert bits(moved) == bits(step_time(fresh(fabric), model, layout, slower))


@pytest.fixture(scope="module")
def superpod() -> Fabric:
    return build_fabric(*load_design(EXAMPLES / "dgx-h100-superpod.yaml"))


OPTIONS = {  # each routing option, with values that route the traffic differently
    "routing": ("ecmp", "hash"),
    "seed": (0, 1),
    "router": ("structured", "general"),
    "qps": (1, 3),
}
BASE_OPTIONS = {"routing": "hash", "seed": 0, "router": "structured", "qps": 1}


def superpod_traffic(fabric: Fabric):
    """8 all-reduces, each over 2 GPUs (rails g and g + 1) of systems 0, 16, ..., 112:
    the ring's hops between systems cross rails (PXN moves them through the other GPU)
    and climb to the spines (hash routing picks among them)."""
    systems = np.arange(0, 127, 16) * 8
    rail = np.arange(8)[:, None]
    groups = np.stack([systems + rail, systems + (rail + 1) % 8], axis=2).reshape(8, -1)
    return collective_traffic(fabric, "allreduce", fabric.accelerators[groups], 64e6,
                              algorithm="ring")


def check_reuse(fabric: Fabric) -> None:
    """Time one traffic under every option's values one after the other on ``fabric``
    (each from the routes kept, where the key finds them) and assert each equals,
    bit for bit, timing it on a fresh fabric."""
    traffic = superpod_traffic(fabric)
    for option, values in OPTIONS.items():
        for value in values:
            options = {**BASE_OPTIONS, option: value}
            kept = time_traffic(fabric, traffic, **options)
            alone = time_traffic(fresh(fabric), traffic, **options)
            assert bits((kept.link_bytes, kept.link_busy_s, kept.time_s,
                         [p.routed for p in kept.phases])) == bits(
                (alone.link_bytes, alone.link_busy_s, alone.time_s,
                 [p.routed for p in alone.phases])), f"{option} = {value}"


def test_every_routing_option_reused_is_rerouted_bit_for_bit(superpod):
    check_reuse(fresh(superpod))


@pytest.mark.parametrize("dropped", sorted(OPTIONS))
def test_a_key_without_an_option_is_caught(superpod, monkeypatch, dropped):
    """Each option changes the routes of the traffic above: a key that left it out would
    hand one option's routes to another, and :func:`check_reuse` says so."""
    traffic = superpod_traffic(superpod)
    first, second = (time_traffic(fresh(superpod), traffic,
                                  **{**BASE_OPTIONS, dropped: v}).link_bytes
                     for v in OPTIONS[dropped])
    assert bits(first) != bits(second)  # the option matters here

    def without(**options: Any) -> tuple[Any, ...]:
        return tuple(v for k, v in options.items() if k != dropped)

    monkeypatch.setattr(routes, "route_key", without)
    with pytest.raises(AssertionError, match=dropped):
        check_reuse(fresh(superpod))


def test_the_key_names_every_option():
    key = route_key(routing="hash", seed=3, router="general", qps=2)
    assert key == ("hash", 3, "general", 2)


def test_a_copy_with_failed_links_routes_its_own(superpod, monkeypatch):
    """Routes depend on the failed links: a degraded copy keeps its own."""
    healthy = fresh(superpod)
    traffic = superpod_traffic(healthy)
    kept = time_traffic(healthy, traffic)
    failed = healthy.links["tier"].to_numpy() == "leaf"
    failed &= np.cumsum(failed) <= 40  # the first 40 leaf link rows
    degraded = healthy.with_failed(failed)
    routed = count_routes(monkeypatch)
    cut = time_traffic(degraded, traffic)
    assert routed  # routed again on the copy
    assert bits(cut.link_bytes) != bits(kept.link_bytes)
    assert bits(cut.link_bytes) == bits(time_traffic(
        fresh(superpod).with_failed(failed), traffic).link_bytes)
    again = time_traffic(healthy, traffic)  # the healthy fabric's are still its own
    assert bits(again.link_bytes) == bits(kept.link_bytes)


def test_pxn_is_applied_once_per_traffic(superpod):
    fabric = fresh(superpod)
    pair = fabric.accelerators[[7, 8]]  # GPU 7 of system 0 -> GPU 0 of system 1, through
    group = fabric.accelerators[[0, 7, 8]]  # GPU 0 (rail 0): pxn's own example
    traffic = collective_traffic(fabric, "sendrecv", [group], 1e6, algorithm="p2p")
    assert pair[0] in traffic.phases[0].src
    moved = pxn_traffic(fabric, traffic)
    assert moved is not traffic  # cross-rail flows move on this fabric
    assert pxn_traffic(fabric, traffic) is moved
    inside = collective_traffic(fabric, "allreduce", fabric.accelerators[:8][None, :], 1e6,
                                algorithm="ring")
    assert pxn_traffic(fabric, inside) is inside  # nothing moves inside a system


def test_routes_live_as_long_as_their_traffic(superpod):
    import gc

    fabric = fresh(superpod)
    traffic = collective_traffic(fabric, "allreduce", fabric.accelerators[:16][None, :],
                                 1e6, algorithm="ring")
    phase_routes(fabric, traffic, routing="ecmp", seed=0, router="auto", qps=1)
    memo = fabric.derived(routes.kept_routes)
    assert len(memo) == 1
    del traffic
    gc.collect()
    assert len(memo) == 0


def test_the_sparse_form_gives_the_routed_back_bit_for_bit():
    link_bytes = np.array([0.0, 3.5, -0.0, np.nan, 0.0, 1e-300, -2.0])
    routed = Routed(link_bytes, np.array([2, 4]), np.array([1]), "structured", None)
    kept = PhaseRoute.of(routed)
    assert kept.loaded.tolist() == [1, 5]  # the rows with bytes, as the timing reads them
    assert bits(kept.routed()) == bits(routed)


def test_rows_with_bytes_only_are_held_once():
    routed = Routed(np.array([0.0, 2.0, 0.0, 0.0, 5.0]), np.array([2]), np.array([], int),
                    "structured", None)
    kept = PhaseRoute.of(routed)
    assert kept.loaded is kept.rows and kept.loaded_bytes is kept.row_bytes
    assert kept.rows.tolist() == [1, 4] and not kept.rows.flags.writeable
    assert bits(kept.routed()) == bits(routed)


def test_a_span_mostly_loaded_is_held_whole():
    """Where at least half of the span's rows have bytes, the span itself is kept (no
    row numbers); bit for bit the routed it came from, -0.0 included."""
    link_bytes = np.array([0.0, 0.0, 3.5, -0.0, 2.0, 1.0, 0.0, 0.0, 0.0])
    routed = Routed(link_bytes, np.array([2]), np.array([], int), "structured",
                    span=(2, 6))
    kept = PhaseRoute.of(routed)
    assert kept.rows == kept.loaded == slice(2, 6) and kept.has_loaded
    assert kept.row_bytes.tolist() == [3.5, -0.0, 2.0, 1.0]
    assert not kept.row_bytes.flags.writeable and kept.row_bytes.base is None  # a copy
    assert [kept.loaded_row(k) for k in (0, 3)] == [2, 5]
    assert bits(kept.routed()) == bits(dataclasses.replace(routed, span=None))
    sparse = PhaseRoute.of(Routed(np.where(np.arange(9) == 3, -1.0, link_bytes),
                                  np.array([2]), np.array([], int), "structured",
                                  span=(2, 6)))  # a negative row: the sparse form
    assert sparse.loaded.tolist() == [2, 4, 5] and not kept.loads_rows_of(sparse)


def test_both_forms_time_every_row_alike():
    """Seconds per row: bytes over rate at an efficiency; in the span form a failed row
    (rate 0) with no bytes takes no time and one with bytes takes forever, as in the
    sparse form, where only the rows with bytes are timed."""
    link_bytes = np.array([0.0, 0.0, 3.0, 0.0, 2.0, 1.0, 0.0, 0.0, 0.0])
    rate_Bps = np.array([1.0, 1.0, 2.0, 0.0, 0.0, 4.0, 1.0, 1.0, 1.0])
    span = PhaseRoute.of(Routed(link_bytes, np.array([2]), np.array([], int),
                                "structured", span=(2, 6)))
    sparse = PhaseRoute.of(Routed(link_bytes, np.array([2]), np.array([], int),
                                  "structured"))
    assert isinstance(span.loaded, slice) and isinstance(sparse.loaded, np.ndarray)
    assert span.loaded_time_s(rate_Bps, 0.5).tolist() == [3.0, 0.0, np.inf, 0.5]
    every = []
    for kept in (span, sparse):
        busy = np.zeros(len(link_bytes))
        busy[kept.loaded] = kept.loaded_time_s(rate_Bps, 0.5)
        every.append(busy.tolist())
    assert every[0] == every[1]


@pytest.mark.parametrize("span", [(1, 9), None])  # the span form, the sparse form
def test_the_slowest_row_is_found_block_by_block_as_one_argmax(monkeypatch, span):
    """Blocks of 2 rows: the first of equal times (across blocks too) and an infinite
    one (bytes on a failed row) found as one argmax over every row's time finds them."""
    monkeypatch.setattr(routes, "TIME_BLOCK_ROWS", 2)
    link_bytes = np.zeros(20)  # the sparse form where no span narrows it
    link_bytes[:10] = [0.0, 1.0, 2.0, 2.0, 4.0, 1.0, 8.0, 1.0, 0.0, 0.0]
    rate_Bps = np.ones(20)
    rate_Bps[:10] = [1.0, 1.0, 2.0, 1.0, 2.0, 1.0, 4.0, 1.0, 1.0, 1.0]
    kept = PhaseRoute.of(Routed(link_bytes, np.array([2]), np.array([], int), "structured",
                                span=span))
    assert isinstance(kept.loaded, slice) == (span is not None)
    for rates in (rate_Bps, np.where(np.arange(20) == 7, 0.0, rate_Bps)):
        times = kept.loaded_time_s(rates, 0.5)
        k = int(np.argmax(times))
        assert kept.slowest(rates, 0.5) == (k, float(times[k]))
        assert kept.loaded_row(k) == (3 if rates is rate_Bps else 7)
    empty = PhaseRoute.of(Routed(np.zeros(4), np.array([0]), np.array([], int),
                                 "structured"))
    assert empty.slowest(rate_Bps, 1.0) == (-1, 0.0) and not empty.has_loaded


def test_a_span_gives_the_rows_a_whole_scan_finds():
    link_bytes = np.array([0.0, 0.0, 3.5, -0.0, 0.0, 1.0, 0.0, 0.0, 0.0])
    whole = PhaseRoute.of(Routed(link_bytes, np.array([2]), np.array([], int), "structured"))
    spanned = PhaseRoute.of(Routed(link_bytes, np.array([2]), np.array([], int),
                                   "structured", span=(2, 7)))
    assert spanned.rows.tolist() == whole.rows.tolist() == [2, 3, 5]
    assert spanned.loaded.tolist() == [2, 5]
    assert bits(spanned.routed()) == bits(whole.routed())


@pytest.mark.parametrize("failed", [(), ("leaf00",), ("spine00", "leaf01")])
def test_a_phase_inside_the_systems_spans_the_scaleup_rows_alone(superpod, failed):
    """The structured router (intact, and around failures elsewhere) says where a
    phase's bytes lie; the loaded rows found there are those of a scan of every row."""
    from topomodel.analysis.reliability.goodput import with_part_failed
    from topomodel.routing import route

    fabric = superpod
    for part in failed:
        fabric = with_part_failed(fabric, part)
    acc = fabric.accelerators[:64].reshape(-1, 8)  # 8 systems: each GPU to the next
    ph = Phase(acc.ravel(), np.roll(acc, -1, axis=1).ravel(), np.full(64, 1e6),
               np.zeros(64, np.int64), 1, "tp")
    routed = route(fabric, ph, router="structured")
    assert routed.span is not None
    lo, hi = routed.span
    assert hi - lo < len(fabric.links) // 2  # the in-system rows, not the whole table
    whole = PhaseRoute.of(dataclasses.replace(routed, span=None))
    spanned = PhaseRoute.of(routed)
    assert isinstance(whole.rows, np.ndarray) and len(whole.rows)
    assert np.arange(len(routed.link_bytes))[spanned.rows].tolist() == whole.rows.tolist()
    assert bits(spanned.routed()) == bits(whole.routed())


def test_a_traffic_with_the_same_flows_takes_the_kept_routes(superpod, monkeypatch):
    """A ring all-gather and the reduce-scatter on its groups send the same flows: the
    second is timed from the first's routes, bit for bit what routing it gives."""
    fabric = fresh(superpod)
    groups = fabric.accelerators[:64].reshape(8, 8).T  # rails across 8 systems
    gather, scatter = (collective_traffic(fabric, c, groups, 64e6, algorithm="ring")
                       for c in ("allgather", "reducescatter"))
    assert routes.same_flows(gather, scatter) and routes.same_flows(scatter, gather)
    first = time_traffic(fabric, gather)
    routed = count_routes(monkeypatch)
    second = time_traffic(fabric, scatter)
    assert not routed and [p.route for p in second.phases] == [
        p.route for p in first.phases]
    alone = time_traffic(fresh(superpod), scatter)
    assert bits((second.link_bytes, second.time_s, [p.routed for p in second.phases])) == (
        bits((alone.link_bytes, alone.time_s, [p.routed for p in alone.phases])))


@pytest.mark.parametrize("change", ["a flow's bytes", "a zero's sign", "a flow's end"])
def test_flows_that_differ_anywhere_are_routed_on_their_own(superpod, monkeypatch, change):
    fabric = fresh(superpod)
    groups = fabric.accelerators[:64].reshape(8, 8).T
    gather = collective_traffic(fabric, "allgather", groups, 64e6, algorithm="ring")
    p = gather.phases[0]
    src, dst, nbytes, base_bytes = p.src.copy(), p.dst.copy(), p.bytes.copy(), p.bytes.copy()
    if change == "a flow's bytes":
        nbytes[5] *= 1 + 2**-52
    elif change == "a zero's sign":
        base_bytes[5], nbytes[5] = 0.0, -0.0
    else:  # another accelerator of the same groups
        dst[5] = next(d for d in dst if d not in (dst[5], src[5]))
    base = dataclasses.replace(gather, phases=(dataclasses.replace(p, bytes=base_bytes),))
    other = dataclasses.replace(gather, phases=(dataclasses.replace(
        p, src=src, dst=dst, bytes=nbytes),))
    assert not routes.same_flows(base, other)
    time_traffic(fabric, base)
    routed = count_routes(monkeypatch)
    time_traffic(fabric, other)
    assert routed  # routed on its own


@pytest.mark.parametrize(("collective", "algorithm"), [
    ("allreduce", "ring"), ("allreduce", "tree"), ("alltoall", "direct")])
@pytest.mark.parametrize("routing", ["ecmp", "hash"])
@pytest.mark.parametrize("across", ["rails", "systems"])
def test_a_collective_at_a_power_of_two_size_takes_the_kept_routes_scaled(
        superpod, monkeypatch, collective, algorithm, routing, across):
    """The same collective at 64x and 1024x the size (the scorecard's 1 MiB, 64 MiB and
    1 GiB) is timed from the first size's routes with their bytes scaled, bit for bit
    what routing it gives; 3x the size (not a power of two) is routed on its own. Groups
    along rails, or of two whole systems (whose cross-rail pairs PXN moves)."""
    fabric = fresh(superpod)
    groups = (fabric.accelerators[:64].reshape(8, 8).T if across == "rails"
              else fabric.accelerators[:64].reshape(4, 16))
    if across == "systems" and collective == "alltoall":
        assert pxn_traffic(fabric, collective_traffic(
            fabric, collective, groups, 2.0**20, algorithm=algorithm)).phases[0].rewrite
    small, mid, large, odd = (
        collective_traffic(fabric, collective, groups, size, algorithm=algorithm)
        for size in (2.0**20, 2.0**26, 2.0**30, 3 * 2.0**20))
    assert routes.flows_scale(small, mid) == (64.0,) * len(small.phases)
    assert routes.flows_scale(odd, small) is None
    time_traffic(fabric, small, routing=routing)
    routed = count_routes(monkeypatch)
    scaled: list[float] = []
    real = PhaseRoute.scaled
    monkeypatch.setattr(PhaseRoute, "scaled",
                        lambda self, f: scaled.append(f) or real(self, f))
    kept = [time_traffic(fabric, t, routing=routing) for t in (mid, large)]
    assert not routed
    if routing == "hash":  # PXN's rewritten all-to-all too: listed, so compared listed
        assert {64.0, 1024.0} <= set(scaled)
    time_traffic(fabric, odd, routing=routing)
    assert routed or collective == "alltoall"  # (count_routes leaves all-pairs out)
    for traffic, timed in zip((mid, large), kept, strict=True):
        alone = time_traffic(fresh(superpod), traffic, routing=routing)
        assert bits((timed.link_bytes, timed.time_s, [p.routed for p in timed.phases])) == (
            bits((alone.link_bytes, alone.time_s, [p.routed for p in alone.phases])))


def test_bytes_are_scaled_only_by_a_power_of_two_in_range():
    def scale(a, b):
        one = Traffic((Phase(np.array([0, 1, 2, 3]), np.array([1, 2, 3, 0]), np.array(a),
                             np.zeros(4, np.int32)),))
        other = Traffic((dataclasses.replace(one.phases[0], bytes=np.array(b)),))
        found = routes.flows_scale(one, other)
        return None if found is None else found[0]

    a = np.array([1.0, 0.0, 3.5, -0.0])
    assert scale(a, a * 4) == 4.0
    assert scale(a, a * 0.25) == 0.25
    assert scale(a, a * 3) is None
    assert scale(a, [4.0, -0.0, 14.0, -0.0]) is None  # a zero's sign
    assert scale(a * 2.0**-600, a) is None  # out of the range where scaling is exact
    assert scale(np.zeros(4), np.zeros(4)) == 1.0


@pytest.mark.parametrize(("collective", "algorithm"), [
    ("allreduce", "ring"), ("allreduce", "tree"), ("allgather", "ring"),
    ("reducescatter", "ring"), ("alltoall", "direct"), ("alltoall", "pairwise")])
def test_traffics_the_flows_match_have_one_print(superpod, collective, algorithm):
    """:func:`routes.flows_print` filters the kept traffics :func:`phase_routes`
    compares: every pair of traffics :func:`routes.flows_scale` matches (PXN's rewrites
    too) has the same print, so the filter drops no match; and the first match of the
    filtered traffics is the first of all of them (the kept routes are those the full
    scan took)."""
    fabric = fresh(superpod)
    rails = fabric.accelerators[:64].reshape(8, 8).T
    systems = fabric.accelerators[:64].reshape(4, 16)
    made = [collective_traffic(fabric, c, groups, size, algorithm=algorithm)
            for groups in (rails, systems) for size in (2.0**20, 2.0**26, 3 * 2.0**20)
            for c in dict.fromkeys((collective, "allgather" if collective
                                    == "reducescatter" else collective))]
    made += [pxn_traffic(fabric, t) for t in made]
    matched = 0
    for a in made:
        for b in made:
            if routes.flows_scale(a, b) is not None:
                matched += 1
                assert routes.flows_print(a) == routes.flows_print(b)
    assert matched > len(made)  # not only each with itself
    for t in made:
        phase_routes(fabric, t, routing="ecmp", seed=0, router="auto", qps=1)
    memo = fabric.derived(routes.kept_routes)
    for t in made:  # the scan over every kept traffic, as before the filter
        full = next(o for o in memo if routes.flows_scale(o, t) is not None)
        alike = fabric.derived(routes.kept_by_flows)[routes.flows_print(t)]
        kept = [r() for r in alike if r() is not None and r() in memo]
        assert kept == [o for o in memo if routes.flows_print(o) == routes.flows_print(t)]
        assert next(o for o in kept if routes.flows_scale(o, t) is not None) is full
