import json
import math
import sys
from pathlib import Path

import networkx as nx
import numpy as np
import pandas as pd
import pytest
import yaml

from topomodel.analysis.assumptions import DEFAULT_HOP_LATENCY_S, PER_MESSAGE_OVERHEAD_S, TimeModel
from topomodel.analysis.levels import network_levels
from topomodel.cli import main
from topomodel.export import ASTRA_GB_BYTES, calculon_system, export_fabric
from topomodel.fabric.build import build_fabric
from topomodel.fabric.structure import scaleout_injection_Bps
from topomodel.fabric.tables import PROPAGATION_S_PER_M
from topomodel.inputs.design import load_design


def test_exports_round_trip(capsys, tmp_path):
    design = "examples/hgx-h100-server.yaml"
    assert main(["export", design, "--to", "graphml", "-o", str(tmp_path / "f.graphml")]) == 0
    graph = nx.read_graphml(tmp_path / "f.graphml")
    assert graph.number_of_nodes() == 12 and graph.number_of_edges() == 2 * 32
    edge = next(iter(graph.edges(data=True)))[2]
    assert edge["capacity_Bps"] > 0 and edge["tier"] == "scaleup"
    assert main(["export", design, "--to", "json", "-o", str(tmp_path / "f.json")]) == 0
    data = json.loads((tmp_path / "f.json").read_text())
    assert len(data["nodes"]) == 12 and len(data["links"]) == 64
    assert main(["export", design, "--to", "csv", "-o", str(tmp_path / "tables")]) == 0
    links = pd.read_csv(tmp_path / "tables" / "links.csv")
    assert {"src", "dst", "capacity_Bps", "latency_s", "tier"} <= set(links.columns)
    assert not list(tmp_path.glob(".*"))  # no temporary file left behind
    capsys.readouterr()


def test_export_to_an_unwritable_place_is_a_clean_error(capsys, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    status = main(["export", "examples/hgx-h100-server.yaml", "--to", "graphml", "-o",
                   str(blocker / "sub" / "f.graphml")])
    err = capsys.readouterr().err
    assert status == 2 and err.startswith("topomodel: error: ") and "cannot write" in err


# --- formats for other tools ------------------------------------------------------


GiB = 2**30


def _fabric(path):
    design, catalog = load_design(path)
    return build_fabric(design, catalog)


@pytest.fixture(scope="module")
def superpod():
    return _fabric("examples/dgx-h100-superpod.yaml")


def test_graph_exports_read_back_with_the_fabrics_counts(tmp_path):
    design = tmp_path / "four.yaml"
    design.write_text("name: four DGX\nsystem: dgx-h100\nsystems: 4\n"
                      "scaleout: {kind: fat_tree, switch: qm9700, tiers: 2}\n")
    fabric = _fabric(design)
    export_fabric(fabric, "graphml", tmp_path / "f.graphml")
    graph = nx.read_graphml(tmp_path / "f.graphml")
    assert graph.number_of_nodes() == len(fabric.nodes)
    assert graph.number_of_edges() == len(fabric.links)
    total = sum(d["capacity_Bps"] for _, _, d in graph.edges(data=True))
    assert math.isclose(total, fabric.links["capacity_Bps"].sum())
    tiers = {d["tier"] for _, d in graph.nodes(data=True)}
    assert tiers == {"accelerator", "scaleup", "nic", "leaf", "spine"}
    export_fabric(fabric, "json", tmp_path / "f.json")
    back = nx.node_link_graph(json.loads((tmp_path / "f.json").read_text()), edges="links")
    assert back.number_of_nodes() == len(fabric.nodes)
    assert back.number_of_edges() == len(fabric.links)
    leaf_links = [d for _, _, d in back.edges(data=True) if d["tier"] == "leaf"]
    assert len(leaf_links) == 2 * 32 and all(d["length_m"] == 30.0 for d in leaf_links)


def test_parquet_tables_round_trip_with_pandas(capsys, tmp_path):
    fabric = _fabric("examples/hgx-h100-server.yaml")
    assert main(["export", "examples/hgx-h100-server.yaml", "--to", "parquet", "-o",
                 str(tmp_path / "t")]) == 0
    for name, table in (("nodes", fabric.nodes), ("links", fabric.links)):
        back = pd.read_parquet(tmp_path / "t" / f"{name}.parquet")
        pd.testing.assert_frame_equal(back, table.rename_axis("id"))
    assert "nodes.parquet" in capsys.readouterr().out


def test_parquet_without_pyarrow_is_one_clear_line(capsys, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "pyarrow", None)  # import fails
    status = main(["export", "examples/hgx-h100-server.yaml", "--to", "parquet", "-o",
                   str(tmp_path / "t")])
    err = capsys.readouterr().err
    assert status == 2 and err.count("\n") == 1 and "pip install pyarrow" in err
    assert not (tmp_path / "t").exists()


def _astra(path, tmp_path):
    out = tmp_path / "network.yml"
    assert main(["export", path, "--to", "astra-sim", "-o", str(out)]) == 0
    text = out.read_text()
    assert "2^30" in text  # the unit is said in the file
    return yaml.safe_load(text)


def test_astra_sim_superpod_closed_form(capsys, tmp_path, superpod):
    network = _astra("examples/dgx-h100-superpod.yaml", tmp_path)
    assert set(network) == {"topology", "npus_count", "bandwidth", "latency"}
    assert network["topology"] == ["Switch", "Switch"]
    assert network["npus_count"] == [8, 127]
    # NVLink4: 18 links x 25 GB/s = 450 GB/s per direction; ConnectX-7: 400 Gb/s = 50 GB/s
    assert network["bandwidth"] == pytest.approx([450e9 / GiB, 50e9 / GiB], rel=1e-6)
    assert network["bandwidth"][0] == pytest.approx(419.095, abs=1e-3)
    # NVSwitch has no latency figure: the time model's default, over 2 links
    # leaf-spine-leaf: 3 switches, 30 m leaf and 50 m spine cables each way, over 2 links
    switch_s = float(superpod.nodes.loc[superpod.nodes["tier"] == "leaf", "latency_s"].max())
    crossing_s = 3 * switch_s + 2 * (30 + 50) * PROPAGATION_S_PER_M
    assert network["latency"] == pytest.approx([DEFAULT_HOP_LATENCY_S / 2 * 1e9,
                                                crossing_s / 2 * 1e9], rel=1e-6)
    capsys.readouterr()


def test_astra_sim_torus_has_one_ring_per_dimension(capsys, tmp_path):
    network = _astra("examples/tpu-v4-pod.yaml", tmp_path)
    assert network["topology"] == ["Ring", "Ring", "Ring"]
    assert network["npus_count"] == [16, 16, 16]
    # ICI 400 Gb/s = 50 GB/s per link and direction
    assert network["bandwidth"] == pytest.approx([50e9 / GiB] * 3, rel=1e-6)
    # cube-to-cube links through the OCS: 50 m of fibre, one link per ring step
    assert network["latency"] == pytest.approx([50 * PROPAGATION_S_PER_M * 1e9] * 3)
    capsys.readouterr()


def test_astra_sim_oversubscribed_tier_is_its_own_dimension():
    fabric = _fabric("examples/llama3-24k-roce.yaml")
    levels = network_levels(fabric)
    assert [lv.npus for lv in levels] == [8, 384, 8]  # server, pod of 384, 8 pods
    spine = next(t for t in fabric.clos_tiers if t.name == "spine")
    assert levels[2].oversubscription == pytest.approx(spine.oversubscription)
    assert levels[2].link_Bps == pytest.approx(50e9 / spine.oversubscription)
    assert levels[1].link_Bps == pytest.approx(50e9)
    assert math.prod(lv.npus for lv in levels) == fabric.accelerator_count == 24576


def test_astra_sim_refuses_unjoined_domains(capsys, tmp_path):
    design = tmp_path / "two.yaml"
    design.write_text("name: two servers\nsystem: hgx-h100\nsystems: 2\n"
                      "scaleout:\n  kind: none\n")
    status = main(["export", str(design), "--to", "astra-sim", "-o",
                   str(tmp_path / "n.yml")])
    err = capsys.readouterr().err
    assert status == 2 and "not joined by a scale-out network" in err
    assert not (tmp_path / "n.yml").exists()


def test_calculon_superpod_closed_form(capsys, tmp_path):
    out = tmp_path / "system.json"
    assert main(["export", "examples/dgx-h100-superpod.yaml", "--to", "calculon", "-o",
                 str(out)]) == 0
    system = json.loads(out.read_text())
    assert set(system) == {"matrix", "vector", "mem1", "mem2", "processing_mode",
                           "networks"}
    assert system["matrix"]["bfloat16"]["tflops"] == pytest.approx(989.4)
    assert system["matrix"]["float8"]["tflops"] == pytest.approx(1978.9)
    assert system["matrix"]["float16"]["tflops"] == pytest.approx(989.4)
    # Calculon's GiB as its own a100_80g.json writes an 80 GB part: 80, not 74.5
    assert system["mem1"]["GiB"] == 80.0
    assert system["mem1"]["GBps"] == pytest.approx(3350)
    nvlink, ib = system["networks"]
    keys = {"bandwidth", "efficiency", "size", "latency", "ops", "must_be_filled",
            "processor_usage"}
    assert set(nvlink) == set(ib) == keys
    assert (nvlink["size"], nvlink["bandwidth"]) == (8, pytest.approx(450.0))
    assert (ib["size"], ib["bandwidth"]) == (1016, pytest.approx(50.0))
    assert nvlink["latency"] == pytest.approx(DEFAULT_HOP_LATENCY_S + PER_MESSAGE_OVERHEAD_S)
    assert set(nvlink["ops"]) == {"p2p", "reduce_scatter", "all_gather", "all_reduce"}
    assert nvlink["ops"]["all_reduce"] == [2.0, -1.0] and nvlink["ops"]["p2p"][1] is None
    assert 0 < nvlink["efficiency"] <= 1 and 0 <= ib["processor_usage"] < 1
    capsys.readouterr()


def test_calculon_torus_is_one_tier_with_every_link_and_the_tier_efficiency():
    from topomodel.errors import UsageError

    fabric = _fabric("examples/tpu-v4-pod.yaml")
    # no measured GEMM rates for TPU v4 in the catalog: the export needs a stated one
    with pytest.raises(UsageError, match="no measured bf16 GEMM rates"):
        calculon_system(fabric)
    system = calculon_system(fabric, TimeModel(efficiency={"scaleup": 0.9}),
                             compute_efficiency=0.5)
    assert system["matrix"]["bfloat16"]["gflops_efficiency"] == [[0, 0.5]]
    tier, alone = system["networks"]
    assert alone == {**tier, "size": 1}  # Calculon's executions name network 1
    assert system["mem1"]["GiB"] == 32.0  # the catalog's 32 GiB
    assert tier["size"] == 4096
    assert tier["bandwidth"] == pytest.approx(6 * 50.0)  # 6 neighbours x 50 GB/s
    assert tier["efficiency"] == 0.9
    assert tier["latency"] == pytest.approx(3 * 250e-9 + PER_MESSAGE_OVERHEAD_S)
    assert GiB == ASTRA_GB_BYTES


def test_levels_without_scale_up_are_one_switch_of_the_whole_fat_tree(toy):
    from topomodel.fabric.clos import DEFAULT_SWITCH_LATENCY_S

    fabric = toy("""
        name: toy three tiers
        system: toy-host
        systems: 16
        scaleout: {kind: fat_tree, switch: toy-switch-4, tiers: 3}
        """)
    (level,) = network_levels(fabric)  # a non-blocking k=4 fat-tree: k^3/4 = 16 hosts
    assert (level.topology, level.npus, level.link_Bps) == ("Switch", 16, 12.5e9)
    # leaf-spine-core-spine-leaf: 5 switches; 30 m, 50 m and 200 m cables each way
    crossing_s = 5 * DEFAULT_SWITCH_LATENCY_S + 2 * (30 + 50 + 200) * PROPAGATION_S_PER_M
    assert level.latency_s == pytest.approx(crossing_s)


def test_levels_of_an_oversubscribed_leaf_tier(toy):
    fabric = toy("""
        name: toy boxes, 2:1 leaves
        system: toy-box
        systems: 4
        scaleout: {kind: fat_tree, switch: toy-switch-12, tiers: 2,
                   oversubscription: ["2:1"], rail_optimized: false}
        """)
    levels = network_levels(fabric)
    # 4 accelerators per box; 2 boxes per leaf; 2 leaves behind 2:1 uplinks
    assert [lv.npus for lv in levels] == [4, 2, 2]
    assert [lv.link_Bps for lv in levels] == [4 * 10e9, 12.5e9, 12.5e9 / 2]
    assert [lv.oversubscription for lv in levels] == [1.0, 1.0, 2.0]
    # the scale-out levels start from the one scale-out injection per accelerator
    assert levels[1].injection_Bps == scaleout_injection_Bps(fabric.injection)
    system = calculon_system(fabric)
    assert [n["size"] for n in system["networks"]] == [4, 8, 16]
    assert [n["bandwidth"] for n in system["networks"]] == [40.0, 12.5, 6.25]


def _calculon_accepts(system, tp, pp, dp, nets=(0, 1, 1)):
    """Calculon's checks of a system and an execution, as its documentation and loader
    state them (calculon-ai/calculon: network.py, system.py, llm.py
    _check_network_assignments): every network has the seven keys, bandwidth > 0,
    0 < efficiency <= 1, size >= 0; the execution's network ids exist (else Calculon
    fails an assert: it crashes); a network used by TP, PP or DP is at least their
    product in size (else Calculon refuses the job with an error). Returns None when
    accepted, else the refusal."""
    networks = system["networks"]
    for n in networks:
        assert set(n) == {"bandwidth", "efficiency", "size", "latency", "ops",
                          "must_be_filled", "processor_usage"}
        assert n["bandwidth"] > 0 and 0 < n["efficiency"] <= 1 and n["size"] >= 0
    assert all(i < len(networks) for i in nets), "Calculon crashes: no such network"
    size = [1] * len(networks)
    for par, net in zip((tp, pp, dp), nets, strict=True):
        if par > 1:
            size[net] *= par
    for i, n in enumerate(networks):
        if size[i] > 1 and size[i] > n["size"]:
            return f"Network tier{i} isn't big enough"
    return None


def test_calculon_single_node_export_runs_calculon_s_stock_executions(capsys, tmp_path):
    out = tmp_path / "node.json"
    assert main(["export", "examples/hgx-h100-server.yaml", "--to", "calculon", "-o",
                 str(out)]) == 0
    capsys.readouterr()
    system = json.loads(out.read_text())
    nvlink, alone = system["networks"]
    assert (nvlink["size"], alone["size"]) == (8, 1)
    # Calculon's example executions put TP on network 0 and PP, DP on network 1
    assert _calculon_accepts(system, tp=8, pp=1, dp=1) is None
    assert _calculon_accepts(system, tp=4, pp=2, dp=1) == "Network tier1 isn't big enough"
    assert _calculon_accepts(system, tp=2, pp=2, dp=2, nets=(0, 0, 0)) is None
    assert system["mem1"]["GiB"] == 80.0
    # host memory at the host link's rate (PCIe Gen5 x16), not the HBM's, with no NIC
    assert system["mem2"]["GBps"] == pytest.approx(63.0)


# --- GraphML written from the tables ----------------------------------------------

EXAMPLE_NAMES = sorted(p.stem for p in Path(__file__).resolve().parents[2].glob(
    "examples/*.yaml"))
GRAPHML_NX_ROWS = 60_000
"""Largest example (link rows) held to networkx's own GraphML in a test: networkx takes
about 4 CPU s at this size (24 s for the 344k rows of llama3-24k-roce)."""


@pytest.mark.parametrize("name", EXAMPLE_NAMES)
def test_graph_files_are_networkx_s_byte_for_byte(name, example_fabric):
    import io

    from topomodel.export.graphtext import write_graphml, write_node_link

    if name.startswith("100k-"):
        pytest.skip("networkx needs 79 CPU s and 8 GB for the 100k examples")
    fabric = example_fabric(name)
    if len(fabric.links) > GRAPHML_NX_ROWS:
        pytest.skip(f"{len(fabric.links)} link rows: networkx is too slow for a test")
    ours, theirs = io.BytesIO(), io.BytesIO()
    write_graphml(fabric, ours)
    nx.write_graphml(fabric.graph, theirs)
    assert ours.getvalue() == theirs.getvalue()
    ours = io.BytesIO()
    write_node_link(fabric, ours)
    assert ours.getvalue() == json.dumps(nx.node_link_data(fabric.graph, edges="links"),
                                         default=str).encode()


def test_graph_files_leave_failed_links_out_as_networkx_does(example_fabric, tmp_path):
    from topomodel.export.graphtext import write_graphml

    fabric = example_fabric("dgx-h100-superpod")
    failed = np.zeros(len(fabric.links), dtype=bool)
    failed[[5, 700, 9000]] = True
    broken = fabric.with_failed(failed)
    export_fabric(broken, "graphml", tmp_path / "f.graphml")
    with open(tmp_path / "nx.graphml", "wb") as stream:
        nx.write_graphml(broken.graph, stream)
    assert (tmp_path / "f.graphml").read_bytes() == (tmp_path / "nx.graphml").read_bytes()
    export_fabric(broken, "json", tmp_path / "f.json")
    assert (tmp_path / "f.json").read_bytes() == json.dumps(
        nx.node_link_data(broken.graph, edges="links"), default=str).encode()
    back = nx.read_graphml(tmp_path / "f.graphml")
    assert back.number_of_edges() == len(fabric.links) - 3
    with open(tmp_path / "g.graphml", "wb") as stream:
        write_graphml(fabric, stream)
    assert nx.read_graphml(tmp_path / "g.graphml").number_of_edges() == len(fabric.links)
