"""The scale-out section on a copy with a NIC (or a NIC's link) failed, patched from the
intact section (the failed NIC's flows routed again), is bit for bit the section routed
whole on the copy; the patch declines what it cannot do exactly."""

import numpy as np
import pytest
from conftest import patched_and_whole_routes
from test_plane_patch import IN_PLANE, failed, same, two_planes
from test_routing import phase as make_phase

import topomodel.routing.sections as sections
import topomodel.routing.survivors as survivors
from topomodel.routing import route

NIC_OWN = ["sys00/nic0", "sys05/nic3 -- p1/leaf02", "sys01/acc2 -- sys01/nic2",
           ["sys02/nic1 -- p0/leaf01", "sys07/acc6 -- sys07/nic6"]]
"""Failures of a NIC's own rows: a NIC, a NIC - leaf link, a host link, a NIC - leaf
and a host link of two NICs at once (each patched)."""
LEAF_TOO = ["p0/leaf03", "p1/leaf00",
            ["sys00/nic0 -- p0/leaf00", "p0/leaf00 -- p0/pod0/spine00"]]
"""Failures of leaf - spine arcs with a NIC's own rows (two leaves, a NIC's link with a
leaf - spine link): patched with every NIC of the leaf hit."""
OTHERS = [IN_PLANE[0], "plane:1"]
"""Failures inside the planes alone (a spine): the plane patch's, or routed whole; a
plane (every NIC's arcs to it and its leaves' to the spines: every flow hit, more than
``PATCHED_HIT_SHARE``): routed whole."""


@pytest.fixture
def fabric(tmp_path_factory):
    fabric = two_planes(tmp_path_factory.getbasetemp())
    fabric.derived(sections.kept_sections).clear()
    return fabric


def whole_bytes_phase(fabric, flows, seed, qps=8):
    """Flows between random accelerators of whole bytes per queue pair."""
    rng = np.random.default_rng(seed)
    acc = fabric.accelerators
    return make_phase(acc[rng.integers(0, len(acc), flows)],
                      acc[rng.integers(0, len(acc), flows)],
                      qps * rng.integers(1, 2**20, flows).astype(float))


def patched_and_whole(fabric, parts, phase, monkeypatch, qps=8):
    """Each copy's routed phase with the NIC patch, then without it (every section
    cleared before each); and which copies it patched."""
    return patched_and_whole_routes(
        monkeypatch, survivors, "nic_patched", fabric, parts,
        lambda p: route(failed(fabric, p), phase, routing="hash", seed=3, qps=qps))


def test_the_parts_are_the_fabrics(fabric):
    for part in NIC_OWN + LEAF_TOO + OTHERS:
        assert failed(fabric, part).link_arrays["failed"].any(), part


@pytest.mark.parametrize("qps", [1, 8])
def test_a_nics_failure_patched_is_the_whole_section_bit_for_bit(fabric, monkeypatch, qps):
    phase = whole_bytes_phase(fabric, 4000, seed=5, qps=qps)
    parts = NIC_OWN + LEAF_TOO + OTHERS
    patched, whole, applied = patched_and_whole(fabric, parts, phase, monkeypatch, qps)
    for part, a, b in zip(parts, patched, whole, strict=True):
        assert same(a, b), part
    assert applied == [True] * len(NIC_OWN + LEAF_TOO) + [False] * len(OTHERS)
    # some flows lost their NIC, and were routed (relayed) around it
    assert not np.array_equal(patched[0].link_bytes, route(
        fabric, phase, routing="hash", seed=3, qps=qps).link_bytes)


def test_bytes_not_whole_or_ecmp_are_routed_whole(fabric, monkeypatch):
    phase = whole_bytes_phase(fabric, 2000, seed=6)
    halves = make_phase(phase.src, phase.dst, phase.bytes + 0.5)
    patched, whole, applied = patched_and_whole(fabric, NIC_OWN[:1], halves, monkeypatch)
    assert applied == [False] and same(patched[0], whole[0])
    copy = failed(fabric, NIC_OWN[0])
    flows = np.arange(phase.flows)
    view = survivors.survivors_view(copy)
    assert survivors.nic_patched(copy, view, phase, flows, "ecmp", 3, 8) is None
    assert survivors.nic_patched(copy, view, phase, flows, "hash", 3, 8) is not None
