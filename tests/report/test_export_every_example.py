"""Every export on every example, read back with the format's own reader, and every
export written all or nothing when the disk fills partway through."""

import json
import math
import resource
import signal
from contextlib import contextmanager
from xml.etree import ElementTree

import networkx as nx
import pandas as pd
import pytest
import yaml
from conftest import EXAMPLES

from topomodel.errors import UsageError
from topomodel.export import EXPORT_FORMATS, export_fabric
from topomodel.inputs.parts import Model

ALL = sorted(path.stem for path in EXAMPLES.glob("*.yaml"))

FABRIC_FORMATS = ("graphml", "json", "csv", "parquet", "astra-sim", "calculon")
"""The formats tested here on every example; ``slurm``, ``slurm-block``, ``kueue`` and
``infragraph`` have their own tests on every example (test_export_schedulers.py), and
``chakra`` a step's (test_export_chakra.py)."""

LARGE = {name for name in ALL if name.startswith("100k-")}
"""The ~100k-accelerator examples: run with --run-slow; their graphs (1.4 to 6.6
million arcs, 0.3 to 2.4 GB of text) are not read back in a test at all (parsing them
takes GBs of memory); the graph writers are held byte for byte to networkx's on the
smaller examples (test_export.py) and measured at 98k (benchmarks/bench_exports.py)."""

GRAPHS = ("graphml", "json")


def test_every_format_is_tested_on_every_example():
    assert {*FABRIC_FORMATS, "slurm", "slurm-block", "kueue", "infragraph"} == set(
        EXPORT_FORMATS)


def read_back(fabric, fmt, path):
    """Read an export with the format's own reader and hold it to the fabric."""
    live = int((~fabric.links["failed"]).sum())
    if fmt == "graphml":  # XML's own parser (networkx reads it in test_export.py)
        counts, keys, capacity = {"node": 0, "edge": 0}, {}, 0.0
        for _, element in ElementTree.iterparse(path):
            tag = element.tag.rsplit("}", 1)[-1]
            if tag == "key":
                keys[element.get("attr.name") + element.get("for")] = element.get("id")
            elif tag in counts:
                counts[tag] += 1
                element.clear()
            elif tag == "data" and element.get("key") == keys["capacity_Bpsedge"]:
                capacity += float(element.text)
        assert (counts["node"], counts["edge"]) == (len(fabric.nodes), live)
        live_capacity = fabric.links.loc[~fabric.links["failed"], "capacity_Bps"].sum()
        assert capacity == pytest.approx(live_capacity)
    elif fmt == "json":
        graph = nx.node_link_graph(json.loads(path.read_text()), edges="links")
        assert (graph.number_of_nodes(), graph.number_of_edges()) == (len(fabric.nodes), live)
    elif fmt in ("csv", "parquet"):
        if fmt == "csv":
            nodes = pd.read_csv(path / "nodes.csv", keep_default_na=False)
            links = pd.read_csv(path / "links.csv", keep_default_na=False, low_memory=False)
        else:
            nodes, links = pd.read_parquet(path / "nodes.parquet"), pd.read_parquet(
                path / "links.parquet")
        assert (len(nodes), len(links)) == (len(fabric.nodes), len(fabric.links))
        assert links["capacity_Bps"].sum() == pytest.approx(fabric.links["capacity_Bps"].sum())
    elif fmt == "astra-sim":
        network = yaml.safe_load(path.read_text())
        assert math.prod(network["npus_count"]) == fabric.accelerator_count
        assert len({len(v) for v in network.values()}) == 1  # one entry per dimension
    else:
        system = json.loads(path.read_text())
        sizes = [n["size"] for n in system["networks"]]
        assert max(sizes) == fabric.accelerator_count or sizes[-1] == 1


@pytest.mark.parametrize("fmt", FABRIC_FORMATS)
@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n in LARGE
                                  else n for n in ALL])
def test_every_export_reads_back(name, fmt, example_fabric, tmp_path):
    if name in LARGE and fmt in GRAPHS:
        pytest.skip("a graph of millions of arcs parsed back: GBs of memory")
    fabric = example_fabric(name)
    target = tmp_path / "out"
    try:
        files = export_fabric(fabric, fmt, target, compute_efficiency=0.5)
    except UsageError as refusal:  # a design the format cannot express: one line, no file
        assert fmt in ("astra-sim", "calculon") and "\n" not in str(refusal)
        assert not target.exists() and not list(tmp_path.iterdir())
        return
    assert all(f.exists() for f in files)
    read_back(fabric, fmt, target)
    assert not list(tmp_path.rglob(".*"))  # no temporary file left


@contextmanager
def small_disk():
    """A process file-size limit of 128 bytes, less than any export writes
    (RLIMIT_FSIZE; SIGXFSZ ignored, so a write past it fails with EFBIG as on a full
    disk), lifted afterwards. Held only around the export itself: pytest's own output
    (a log file, its capture files) must not meet the limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    previous = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (128, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, previous)


@pytest.mark.parametrize("fmt", [*EXPORT_FORMATS, "chakra"])
def test_an_export_cut_short_leaves_nothing(fmt, example_fabric, tmp_path):
    name = "gb200-nvl72-cluster" if fmt == "slurm-block" else "dgx-h100-superpod"
    fabric = example_fabric(name)
    target = tmp_path / "out" / "x"
    if fmt == "chakra":
        from topomodel.export.chakra import chakra_trace, write_chakra
        from topomodel.traffic.layout import Layout

        pytest.importorskip("google.protobuf")
        model = fabric.catalog.get("llama3-8b", Model)
        trace = chakra_trace(fabric, model, Layout(tp=8, pp=4, dp=4))
    with pytest.raises((OSError, UsageError)), small_disk():
        if fmt == "chakra":
            write_chakra(trace, target)
        else:
            export_fabric(fabric, fmt, target, compute_efficiency=0.5)
    assert not list(tmp_path.rglob("*")), fmt  # no file, no folder, no temporary file
