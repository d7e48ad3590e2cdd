"""The scale-out kinds' registry: every design kind has one, and every call site that
reads a kind's shape asks the kind (a kind whose answers are changed changes them)."""

from __future__ import annotations

import pytest

from topomodel.analysis.bisection import closed_form
from topomodel.analysis.levels import network_levels
from topomodel.analysis.reliability.single_failures import WHAT_IF_KINDS, what_if_lines
from topomodel.draw.layout import DRAWING_ROWS
from topomodel.draw.topology import drawn_texts, topology_figure
from topomodel.fabric.scaleout import REGISTRY, LevelGroup, ScaleoutKind, scaleout_kind
from topomodel.fabric.scaleout.fat_tree import FatTree
from topomodel.inputs.design import SCALEOUT_KINDS
from topomodel.report.build import build_report
from topomodel.routing.structured import structured_supported
from topomodel.vocabulary import FAT_TREE_TIERS, NODE_TIERS, SCALE_OUT_TIERS

TOY_FAT_TREE = "system: toy-box\nsystems: 4\nscaleout:\n  switch: toy-switch-8\n"


def test_every_design_kind_has_its_module_and_nothing_else():
    assert tuple(REGISTRY) == SCALEOUT_KINDS
    for name, kind in REGISTRY.items():
        assert isinstance(kind, ScaleoutKind) and kind.name == name
        assert scaleout_kind(name) is kind
        assert set(kind.what_if_parts) <= {*kind.switch_tiers, "optic", "nic"}
        assert kind.has_network == bool(kind.switch_tiers)


def test_the_fat_tree_kinds_keep_the_tier_order_parts_and_rows_they_had():
    for name in ("fat_tree", "rail_only"):
        kind = REGISTRY[name]
        assert kind.link_tiers == SCALE_OUT_TIERS and kind.switch_tiers == FAT_TREE_TIERS
        assert kind.what_if_parts == WHAT_IF_KINDS == ("spine", "leaf", "optic", "nic")
        assert kind.drawing_rows == ("nic", *FAT_TREE_TIERS)
    assert REGISTRY["none"].drawing_rows == () and not REGISTRY["none"].has_network
    assert DRAWING_ROWS == NODE_TIERS
    assert [k.structured_routing for k in REGISTRY.values()] == [True, False, True]


def test_the_fat_tree_closed_form_is_the_least_tier_times_the_smaller_share():
    capacity = {"scaleup": 9.0, "host": 8.0, "leaf": 4.0, "spine": 4.0}
    value, how = REGISTRY["fat_tree"].bisection(capacity, 3, 7)
    assert value == pytest.approx(4.0 * 3 / 7)
    assert how.startswith("the smaller half's share (3 of 7 accelerators) of the spine tier")
    assert REGISTRY["none"].bisection(capacity, 3, 7) is None


class Marked(FatTree):
    """A fat-tree whose every answer is marked, to see who asks."""

    builds = 0
    what_if_parts = ("leaf",)
    structured_routing = False

    def build(self, *args, **kwargs):
        Marked.builds += 1
        return super().build(*args, **kwargs)

    def bisection(self, capacity_Bps, smaller, total):
        return 123e9, "marked cut"

    def level_groups(self, present):
        return (LevelGroup("marked", "all", ("host", "leaf")),)

    def summary(self, structure):
        return "marked summary"

    def caption(self, structure):
        return "marked caption"


def test_every_call_site_asks_the_kind(monkeypatch, toy):
    monkeypatch.setitem(REGISTRY, "fat_tree", Marked())
    fabric = toy(TOY_FAT_TREE)
    assert Marked.builds == 1
    assert closed_form(fabric) == (123e9, "marked cut")
    scaleout = [lv for lv in network_levels(fabric) if lv.network == "scale-out"]
    assert [lv.name for lv in scaleout] == ["marked"]
    assert structured_supported(fabric) == "scale-out kind fat_tree"
    assert set(what_if_lines(fabric)) <= {"leaf"}
    summary = {row["item"]: row["value"] for row in build_report(fabric).tables[0].rows}
    assert summary["scale-out"] == "marked summary"
    texts = " ".join(t.get_text() for t in drawn_texts(topology_figure(fabric)))
    assert "scale-out: marked caption" in texts
