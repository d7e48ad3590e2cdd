"""Per-direction link rates: the design's port_rate_up/port_rate_down in the link table,
the timing that respects each direction, the per-direction summaries, and the errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from topomodel.analysis.bisection import closed_form
from topomodel.analysis.collectives.collective import run_collective
from topomodel.analysis.tiers import tier_summaries
from topomodel.errors import DesignError
from topomodel.fabric.build import build_fabric
from topomodel.fabric.tables import weaker_direction_Bps
from topomodel.inputs.design import load_design, with_overrides

SITES = "examples/asymmetric-sites.yaml"
UP, DOWN = 50e6 / 8, 1e9 / 8  # bytes/s


@pytest.fixture(scope="module")
def sites():
    design, catalog = load_design(SITES)
    return build_fabric(design, catalog)


def _nic_rows(fabric):
    links, nodes = fabric.links, fabric.nodes
    is_nic = (nodes["kind"] == "nic").to_numpy()
    leaf = (links["tier"] == "leaf").to_numpy()
    return (leaf & is_nic[links["src"].to_numpy()],
            leaf & is_nic[links["dst"].to_numpy()])


def test_link_rows_carry_each_direction(sites):
    up, down = _nic_rows(sites)
    links = sites.links
    assert up.sum() == down.sum() == 8
    assert (links.loc[up, "capacity_Bps"] == UP).all()
    assert (links.loc[down, "capacity_Bps"] == DOWN).all()
    # the cable and its optics are chosen for the port's line rate, both directions alike
    assert (links.loc[up | down, "rate_Bps"] == 1e9 / 8).all()
    assert links.loc[up, "optic"].tolist() == links.loc[down, "optic"].tolist()
    assert (weaker_direction_Bps(links, sites.reverse_rows)[up | down] == UP).all()


def test_sending_is_bound_by_the_uplink_and_receiving_is_not(sites):
    # one rank per site all-gathers: every site sends and receives the same bytes, and
    # the 50 Mb/s uplink, not the 1 Gb/s downlink, sets the time
    run = run_collective(sites, "allgather", 16e6, ["stride:2"])
    timing = run.timing
    up, down = _nic_rows(sites)
    sent = timing.link_bytes[up]
    received = timing.link_bytes[down]
    assert sent.sum() == pytest.approx(received.sum())
    eff = 0.8  # TCP/IP sockets (transports.SOCKETS_EFFICIENCY)
    assert run.time_s == pytest.approx(sent.max() / (UP * eff), rel=0.01)
    # the same sites with a symmetric 1 GbE port are DOWN / UP = 20x faster
    fast_design, catalog = load_design(SITES)
    fast = build_fabric(with_overrides(fast_design, scaleout=_scaleout(
        fast_design, up=None)), catalog)
    fast_run = run_collective(fast, "allgather", 16e6, ["stride:2"])
    assert run.time_s / fast_run.time_s == pytest.approx(DOWN / UP, rel=0.05)


def _scaleout(design, *, up):
    from dataclasses import replace

    return replace(design.scaleout, port_rate_up_Bps=up)


def test_summaries_count_the_weaker_direction(sites):
    leaf = next(t for t in tier_summaries(sites) if t.name == "leaf")
    assert leaf.capacity_Bps == pytest.approx(8 * UP)
    assert leaf.ports_used == 8  # ports at the 1 GbE line rate, not 50 Mb/s ones
    value, _ = closed_form(sites)
    assert value == pytest.approx(4 * UP)  # half the sites' uplinks
    # what one accelerator can send out of its site: the NIC port's uplink
    assert sites.injection.scaleout_Bps.max() == pytest.approx(UP)


def test_a_direction_faster_than_the_port_is_refused(tmp_path):
    text = Path(SITES).read_text().replace('port_rate_down: "1 Gb/s /dir"',
                                      'port_rate_down: "10 Gb/s /dir"')
    path = tmp_path / "fast.yaml"
    path.write_text(text)
    with pytest.raises(DesignError, match=r"port_rate_down.*exceeds the port's 1000 Mb/s"):
        load_design(path)


def test_a_direction_needs_its_unit_and_direction(tmp_path):
    text = Path(SITES).read_text().replace('port_rate_up: "50 Mb/s /dir"',
                                      'port_rate_up: "50 Mb/s"')
    path = tmp_path / "bare.yaml"
    path.write_text(text)
    with pytest.raises(DesignError, match="port_rate_up"):
        load_design(path)
