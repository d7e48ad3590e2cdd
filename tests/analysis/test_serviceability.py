"""Serviceability of optics: a failed CPO takes its switch out, a pluggable its link."""

import pytest
from conftest import b200_rail_design

from topomodel.analysis.bom import bill_of_materials
from topomodel.analysis.cost import optics_swaps
from topomodel.analysis.reliability.serviceability import (
    SECONDS_PER_YEAR,
    links_per_part_failure,
    optics_service,
)
from topomodel.fabric.build import build_fabric
from topomodel.inputs.design import load_design

# 64 HGX B200 (512 NICs), rail-optimized: 8 leaves of 64 NIC links down and 64 up, 4
# spines of 128 links; the spine tier cabled with 1.6T pluggables, which the what-if
# swaps for NVIDIA's 1.6T CPO
CPO_DESIGN = b200_rail_design("cpo test", "pluggable-1.6t")


@pytest.fixture(scope="module")
def fabric():
    return build_fabric(*load_design("cpo.yaml", text=CPO_DESIGN))


def test_a_failed_cpo_takes_its_switch_a_pluggable_its_link(fabric):
    (swap,) = optics_swaps(bill_of_materials(fabric), fabric.catalog)
    assert (swap.tier, swap.form, swap.modules) == ("spine", "cpo", 1024)
    service = optics_service(fabric, swap, repair_s=4 * 3600.0)
    # 512 leaf-spine cables, two module ends each; every end is on a switch of 128 links
    assert service.links == 512
    assert links_per_part_failure(fabric, "spine") == 128
    assert service.before_links_per_failure == 1 and service.after_links_per_failure == 128
    rates = fabric.catalog.entries
    pluggable = rates["optic-pluggable-default"].rate_per_s
    cpo = rates["optic-cpo"].rate_per_s
    assert service.before_failures_per_year == pytest.approx(1024 * pluggable * SECONDS_PER_YEAR)
    assert service.after_failures_per_year == pytest.approx(1024 * cpo * SECONDS_PER_YEAR)
    # ten times fewer failures, each taking 128 links: 12.8 times the links down
    assert service.before_links_down == pytest.approx(1024 * pluggable * 4 * 3600)
    assert service.after_links_down == pytest.approx(1024 * cpo * 128 * 4 * 3600)
    assert service.after_links_down / service.before_links_down == pytest.approx(12.8)


def test_links_per_part_failure_of_the_nic_tier(fabric):
    # a leaf link's ends: a NIC with one link and a leaf with 128: 64.5 on average
    assert links_per_part_failure(fabric, "leaf") == pytest.approx((1 + 128) / 2)
    assert links_per_part_failure(fabric, "core") == 0.0
