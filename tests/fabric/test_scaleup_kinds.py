"""The scale-up kinds' registry: every kind a design or a system names has one, and
every call site that reads a kind's shape asks the kind (a kind whose answers are
changed changes them)."""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from topomodel.analysis.bisection import closed_form, halves, max_flow_bisection
from topomodel.analysis.collectives.collective import run_collective
from topomodel.analysis.levels import network_levels
from topomodel.draw.topology import drawn_texts, topology_figure
from topomodel.fabric.build import structure_dict
from topomodel.fabric.scaleup import REGISTRY, ScaleupKind, ScaleupLevel, scaleup_kind
from topomodel.fabric.scaleup.switched import Switched
from topomodel.inputs.design import SCALEUP_KINDS
from topomodel.inputs.parts import SYSTEM_SCALEUP_KINDS
from topomodel.report.build import build_report
from topomodel.routing.structured import structured_supported

ONE_BOX = "system: toy-box\nsystems: 1\nscaleout: {kind: none}\n"
TWO_BOXES = "system: toy-box\nsystems: 2\nscaleout:\n  switch: toy-switch-8\n"


def test_every_kind_a_design_or_system_names_has_its_module_and_nothing_else():
    assert tuple(REGISTRY) == tuple(dict.fromkeys(SCALEUP_KINDS + SYSTEM_SCALEUP_KINDS))
    for name, kind in REGISTRY.items():
        assert isinstance(kind, ScaleupKind) and kind.name == name
        assert scaleup_kind(name) is kind
        assert kind.nccl_intra in ("nvlink", "pci")


def test_the_kinds_keep_the_answers_the_call_sites_had():
    routed = {name for name, kind in REGISTRY.items() if kind.structured_routing}
    assert routed == {"switched", "full_mesh", "supernode", "none"}
    assert {n for n, k in REGISTRY.items() if k.nccl_intra == "pci"} == {"none", "pcie"}
    assert {n for n, k in REGISTRY.items() if k.board_only} == {"pcie"}
    assert {n for n, k in REGISTRY.items() if not k.has_links} == {"none"}


def test_a_switched_domain_s_closed_forms():
    kind = REGISTRY["switched"]
    assert kind.domain_bisection(None, {"scaleup": 8.0}, 4, 2) == (
        2.0, "half the accelerators' scale-up links")
    assert kind.split_lower_bound(None, {"scaleup": 8.0}, 4, 2) == 4.0
    assert REGISTRY["torus"].split_lower_bound(None, {"scaleup": 8.0}, 4, 2) == 0.0
    assert REGISTRY["pcie"].domain_bisection(None, {}, 4, 1) == (
        None, "no closed form for scale-up kind pcie")


class Marked(Switched):
    """A switched kind whose every answer is marked, to see who asks."""

    asked: ClassVar[set[str]] = set()

    def build(self, *args, **kwargs):
        Marked.asked.add("build")
        return super().build(*args, **kwargs)

    def links_per_system(self, system):
        Marked.asked.add("links_per_system")
        return super().links_per_system(system)

    def domain_bisection(self, structure, capacity_Bps, per_domain, domains):
        return 123e9, "marked cut"

    def split_lower_bound(self, structure, capacity_Bps, per_domain, domains):
        Marked.asked.add("split_lower_bound")
        return 0.0

    def single_domain_side(self, structure):
        return np.array([True, False, True, False])

    def levels(self, structure, per_domain, capacity_Bps, injection_Bps):
        return (ScaleupLevel("marked", "Ring", per_domain, 1e9, 2e9),)

    def json_keys(self, up):
        return {"marked": 1}

    def summary(self, up):
        return "marked summary"

    def caption(self, up):
        return "marked caption"

    @property
    def structured_routing(self):
        return False

    @property
    def nccl_intra(self):
        Marked.asked.add("nccl_intra")
        return "nvlink"

    @property
    def board_only(self):
        Marked.asked.add("board_only")
        return False


def test_every_call_site_asks_the_kind(monkeypatch, toy):
    monkeypatch.setitem(REGISTRY, "switched", Marked())
    Marked.asked = set()
    fabric = toy(ONE_BOX)
    assert {"build", "links_per_system", "board_only"} <= Marked.asked
    assert closed_form(fabric) == (123e9, "marked cut")
    assert halves(fabric)[0].tolist() == fabric.accelerators[[0, 2]].tolist()
    assert [(lv.name, lv.topology, lv.npus) for lv in network_levels(fabric)] == [
        ("marked", "Ring", 4)]
    assert structured_supported(fabric) == "scale-up kind switched"
    report = build_report(fabric)
    assert report.data["structure"]["marked"] == 1
    assert structure_dict(fabric.structure)["marked"] == 1
    summary = {row["item"]: row["value"] for row in report.tables[0].rows}
    assert summary["scale-up"] == "marked summary"
    texts = " ".join(t.get_text() for t in drawn_texts(topology_figure(fabric)))
    assert "scale-up: marked caption" in texts
    run_collective(fabric, "allreduce", 1e6, algorithm="ring")
    assert "nccl_intra" in Marked.asked
    two = toy(TWO_BOXES)  # a cut through both domains is bounded by the kind's bound
    max_flow_bisection(two)
    assert "split_lower_bound" in Marked.asked

