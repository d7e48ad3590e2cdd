import json

import networkx as nx
import pandas as pd

from topomodel.cli import main


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
