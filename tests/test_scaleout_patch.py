"""The scale-out section patched from the intact one is, bit for bit, the section routed
whole on the copy, for every degraded tier of goodput; the rule that picks the pods to
route again is needed."""

import functools
import tempfile
from pathlib import Path

import numpy as np
import pytest
from test_routing import fabric_of, random_phase

import topomodel.routing.scaleout_patch as patch
import topomodel.routing.sections as sections
from topomodel.analysis import goodput
from topomodel.design import load_design
from topomodel.fabric.build import build_fabric
from topomodel.routing import route
from topomodel.traffic.phases import phase

SMALL = ["dgx-h100-superpod", "llama3-24k-roce", "dual-plane-ethernet", "mi300x-roce",
         "three-tier-rails", "three-tier-two-planes"]

# 256 8-NPU servers on a three-tier, two-plane fat-tree of 8 pods a plane: rail-optimised
# or not
DESIGNS = {name: ("system: cloudmatrix384-node\nsystems: 256\nscaleout:\n  kind: fat_tree\n"
                  "  switch: tomahawk5\n  planes: 2\n  port_rate: \"200 Gb/s /dir\"\n"
                  f"  rail_optimized: {rails}\n  tiers: 3\n  unit: 4\n  pod_units: 8\n")
           for name, rails in (("three-tier-rails", "true"),
                               ("three-tier-two-planes", "false"))}


@functools.cache
def built(name):
    if name not in DESIGNS:
        return fabric_of(name)
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / f"{name}.yaml"
        path.write_text(DESIGNS[name])
        return build_fabric(*load_design(path))


def degraded_parts(fabric):
    """The representative failed part of each of goodput's degraded steps."""
    lines = goodput.component_lines(fabric, len(fabric.accelerators))
    return [line.representative for line in goodput.degraded_lines(lines)]


def neighbour_phase(fabric, strides=(8, 64)):
    """Flows from each accelerator to the ones ``strides`` further on (as a ring of
    data-parallel ranks sends): most pods exchange traffic with a few others only."""
    acc = fabric.accelerators
    n = len(acc)
    src = np.concatenate([acc] * len(strides))
    dst = np.concatenate([acc[(np.arange(n) + s) % n] for s in strides])
    return phase(src, dst, np.linspace(1e3, 1e6, len(src)))


def patched_and_whole(fabric, parts, ph, routing, monkeypatch, **options):
    """Each copy's routed phase with the patch, then with the section routed whole;
    and how many scale-out sections were patched."""
    applied = []
    original = patch.patched_scaleout

    def counted(*args, **kwargs):
        out = original(*args, **kwargs)
        applied.append(out is not None)
        return out

    with monkeypatch.context() as m:
        m.setattr(patch, "patched_scaleout", counted)
        patched = [route(goodput.with_part_failed(fabric, p), ph, routing=routing, seed=2,
                         **options) for p in parts]
    with monkeypatch.context() as m:
        m.setattr(patch, "patched_scaleout", lambda *args, **kwargs: None)
        whole = []
        for p in parts:
            fabric.derived(sections.kept_sections).clear()
            whole.append(route(goodput.with_part_failed(fabric, p), ph, routing=routing,
                               seed=2, **options))
    return patched, whole, sum(applied)


def same(a, b):
    return (np.array_equal(a.link_bytes, b.link_bytes) and np.array_equal(a.hops, b.hops)
            and np.array_equal(a.unroutable, b.unroutable))


PATCHED = ("llama3-24k-roce", "three-tier-rails", "three-tier-two-planes")


@pytest.mark.parametrize("name", SMALL)
@pytest.mark.parametrize(("routing", "options"), [("ecmp", {}), ("hash", {}),
                                                  ("dmodk", {}),
                                                  ("hash", {"hash_scaleup": True})])
def test_patched_scaleout_section_is_the_whole_one_bit_for_bit(name, routing, options,
                                                               monkeypatch):
    fabric = built(name)
    parts = degraded_parts(fabric)
    applied_at = []
    for ph in (random_phase(fabric, 3000, seed=4), neighbour_phase(fabric)):
        fabric.derived(sections.kept_sections).clear()
        patched, whole, applied = patched_and_whole(fabric, parts, ph, routing,
                                                    monkeypatch, **options)
        for p, a, b in zip(parts, patched, whole, strict=True):
            assert same(a, b), p
        applied_at.append(applied)
    # the spine, spine link and core link steps of a three-tier fabric patch the
    # neighbours' phase; the random one, and two-tier fabrics (a pod per plane), not
    assert applied_at == ([0, 3] if name in PATCHED else [0, 0])


@pytest.mark.parametrize("name", ["100k-8gpu-3tier", "100k-8npu-servers",
                                  "100k-4k-supernodes"])
def test_patched_at_100k_for_every_degraded_tier(name, monkeypatch):
    fabric = built(name)
    parts = degraded_parts(fabric)
    fabric.derived(sections.kept_sections).clear()
    patched, whole, applied = patched_and_whole(fabric, parts, neighbour_phase(fabric),
                                                "ecmp", monkeypatch)
    for p, a, b in zip(parts, patched, whole, strict=True):
        assert same(a, b), p
    assert applied >= 1


def test_the_pods_joined_to_a_hit_pod_are_routed_again(monkeypatch):
    """Route again the hit pods alone (not the pods they exchange traffic with): a
    failed spine moves shares on the leaves of other pods that send into its pod, so
    the patch then gives other loads than routing the section whole."""
    fabric = built("llama3-24k-roce")
    parts = [p for p in degraded_parts(fabric) if "spine" in p]
    ph = neighbour_phase(fabric)
    fabric.derived(sections.kept_sections).clear()
    patched, whole, applied = patched_and_whole(fabric, parts, ph, "ecmp", monkeypatch)
    assert applied >= 1 and all(same(a, b) for a, b in zip(patched, whole, strict=True))
    monkeypatch.setattr(patch, "routed_again", lambda hit, pod_s, pod_d: hit)
    fabric.derived(sections.kept_sections).clear()
    patched, whole, applied = patched_and_whole(fabric, parts, ph, "ecmp", monkeypatch)
    assert applied >= 1 and not all(same(a, b) for a, b in zip(patched, whole, strict=True))


def test_pod_rows_are_the_pods_arcs():
    fabric = built("llama3-24k-roce")
    pods = fabric.derived(patch._pods)
    tiers = fabric.links["tier"].astype(str).to_numpy()
    assert (pods.row[np.isin(tiers, ["spine", "core"])] >= 0).all()
    assert (pods.row[~np.isin(tiers, ["spine", "core"])] == -1).all()
