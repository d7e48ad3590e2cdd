"""The scheduler exports: Slurm's topology.conf (tree and block plugins) and Kueue's
Topology with its node labels, read back on every example and held to the fabric."""

import re
from collections import Counter

import pandas as pd
import pytest
import yaml
from conftest import EXAMPLES

from topomodel.cli import main
from topomodel.errors import ParameterError
from topomodel.export import export_fabric
from topomodel.export.hosts import HostNames, expand_hostlist, host_places, hosts_per_system
from topomodel.export.kueue import (
    DEFAULT_LABEL_PREFIX,
    KUEUE_HOSTNAME_LABEL,
    LEVEL_KEYS,
    kueue_levels,
)
from topomodel.fabric.build import build_fabric
from topomodel.inputs.design import load_design
from topomodel.inputs.parts import System

ALL = sorted(path.stem for path in EXAMPLES.glob("*.yaml"))

#: Kueue's pattern for a level's nodeLabel (apis/kueue/v1beta2/topology_types.go).
KUEUE_LABEL = re.compile(r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
                         r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$")


def read_topology_conf(text):
    """A topology.conf as {switch: {"Switches": [...], "Nodes": [...]}} and the blocks
    (an independent reader: key=value pairs, Slurm's case-insensitive keys)."""
    switches, blocks, sizes = {}, {}, None
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        pairs = dict(item.split("=", 1) for item in line.split())
        keys = {k.lower(): v for k, v in pairs.items()}
        if "switchname" in keys:
            name = keys["switchname"]
            assert name not in switches and len(name) <= 64 and "." not in name
            switches[name] = {"Switches": expand_hostlist(keys.get("switches", "")),
                              "Nodes": expand_hostlist(keys.get("nodes", ""))}
            assert bool(switches[name]["Switches"]) != bool(switches[name]["Nodes"])
        elif "blockname" in keys:
            blocks[keys["blockname"]] = expand_hostlist(keys["nodes"])
        else:
            sizes = [int(v) for v in keys["blocksizes"].split(",")]
    return switches, blocks, sizes


def host_count(fabric):
    return (int(fabric.nodes["system"].max()) + 1) * \
        fabric.catalog.get(fabric.design.system, System).hosts


def has_scaleout(fabric):
    return (fabric.nodes["tier"].astype(str) == "leaf").any()


@pytest.mark.parametrize("name", ALL)
def test_slurm_tree_reads_back_as_a_tree_over_every_host(name, example_fabric, tmp_path):
    fabric = example_fabric(name)
    target = tmp_path / "topology.conf"
    if not has_scaleout(fabric):
        with pytest.raises(ValueError, match="no scale-out network"):
            export_fabric(fabric, "slurm", target)
        assert not target.exists()
        return
    export_fabric(fabric, "slurm", target)
    switches, _, _ = read_topology_conf(target.read_text())
    leaves = {s: v["Nodes"] for s, v in switches.items() if v["Nodes"]}
    under = Counter(host for hosts in leaves.values() for host in hosts)
    names = HostNames.parse("node{n:04d}")
    assert set(under) == {names.name(n) for n in range(host_count(fabric))}
    assert set(under.values()) == {1}  # every host under exactly one leaf
    children = [c for v in switches.values() for c in v["Switches"]]
    assert set(children) <= set(switches) and len(children) == len(set(children))
    roots = set(switches) - set(children)
    assert len(roots) == 1  # one top, and every switch reachable from it (a tree)
    seen, todo = set(), list(roots)
    while todo:
        current = todo.pop()
        seen.add(current)
        todo.extend(switches[current]["Switches"])
    assert seen == set(switches)
    # switch and link counts: a leaf per leaf group, a switch per pod, one top
    places = host_places(fabric)
    groups, pods = places["group"].nunique(), places["pod"].nunique()
    expected = groups + (pods if pods > 1 else 0) + (1 if groups > 1 else 0)
    assert len(switches) == expected and len(children) == expected - 1


@pytest.mark.parametrize(("name", "leaves", "pods", "hosts_per_leaf"), [
    ("dgx-h100-superpod", 4, 0, {32, 31}),      # 4 rail-optimized SUs, the last 31 nodes
    ("gb200-nvl72-cluster", 18, 0, {8}),        # tray h of each of 8 racks under leaf h
    ("b200-superpod", 16, 4, {32}),             # 16 SUs in 4 pods
    ("small-16x8-a100-100gbe-roce", 1, 0, {16}),  # one switch: the top itself
])
def test_slurm_tree_has_the_designs_closed_form_counts(name, leaves, pods, hosts_per_leaf,
                                                       example_fabric, tmp_path):
    export_fabric(example_fabric(name), "slurm", tmp_path / "t.conf")
    switches, _, _ = read_topology_conf((tmp_path / "t.conf").read_text())
    leaf = [s for s, v in switches.items() if v["Nodes"]]
    assert len(leaf) == leaves
    assert len([s for s in switches if s.startswith("pod")]) == pods
    assert len(switches) == leaves + pods + (leaves > 1)
    assert {len(switches[s]["Nodes"]) for s in leaf} == hosts_per_leaf


@pytest.mark.parametrize("name", ALL)
def test_slurm_blocks_are_the_scaleup_domains(name, example_fabric, tmp_path):
    fabric = example_fabric(name)
    target = tmp_path / "blocks.conf"
    places = host_places(fabric)
    per_domain = places.groupby("domain").size()
    if per_domain.max() < 2:
        with pytest.raises(ValueError, match="single host"):
            export_fabric(fabric, "slurm-block", target)
        return
    export_fabric(fabric, "slurm-block", target)
    _, blocks, sizes = read_topology_conf(target.read_text())
    assert len(blocks) == len(per_domain)
    hosts = [h for members in blocks.values() for h in members]
    assert len(hosts) == len(set(hosts)) == host_count(fabric)
    assert sizes == [min(len(m) for m in blocks.values())]
    assert all(len(m) >= sizes[0] for m in blocks.values())


def test_an_nvl72_rack_is_one_block_of_its_18_trays(example_fabric, capsys, tmp_path):
    target = tmp_path / "b.conf"
    assert main(["export", str(EXAMPLES / "gb200-nvl72-cluster.yaml"), "--to", "slurm-block",
                 "-o", str(target), "--hostnames", "gb{n:03d}"]) == 0
    _, blocks, sizes = read_topology_conf(target.read_text())
    assert sizes == [18] and len(blocks) == 8
    assert blocks["block1"] == [f"gb{n:03d}" for n in range(18, 36)]
    assert "BlockName=block0 Nodes=gb[000-017]" in target.read_text()
    capsys.readouterr()


@pytest.mark.parametrize("name", ALL)
def test_kueue_levels_nest_and_label_every_host(name, example_fabric, tmp_path):
    fabric = example_fabric(name)
    files = export_fabric(fabric, "kueue", tmp_path / "kueue")
    assert [f.name for f in files] == ["topology.yaml", "node-labels.csv"]
    document = yaml.safe_load(files[0].read_text())
    assert document["kind"] == "Topology" and document["apiVersion"].startswith("kueue.x-k8s.io/")
    keys = [level["nodeLabel"] for level in document["spec"]["levels"]]
    levels = kueue_levels(host_places(fabric))
    assert keys == [f"{DEFAULT_LABEL_PREFIX}/{LEVEL_KEYS[level]}" for level in levels] + [
        KUEUE_HOSTNAME_LABEL]
    assert keys[-1] == KUEUE_HOSTNAME_LABEL and all(KUEUE_LABEL.match(k) for k in keys)
    labels = pd.read_csv(files[1], dtype=str)
    assert list(labels.columns) == ["node", *keys]
    assert len(labels) == host_count(fabric) and labels["node"].is_unique
    for value in labels[keys].to_numpy().ravel():
        assert len(value) <= 63 and re.match(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$", value)
    for fine, coarse in zip(keys[1:], keys, strict=False):  # each level inside the one above
        assert (labels.groupby(fine)[coarse].nunique() == 1).all()
        assert labels[fine].nunique() > labels[coarse].nunique()  # and finer than it


def test_kueue_keeps_the_nvl72_rack_over_leaves_that_cut_across_it(example_fabric):
    assert kueue_levels(host_places(example_fabric("gb200-nvl72-cluster"))) == ["domain"]
    assert kueue_levels(host_places(example_fabric("b200-superpod"))) == ["pod", "group"]
    assert kueue_levels(host_places(example_fabric("hgx-h100-server"))) == []


def test_hosts_split_a_rack_into_its_trays(example_fabric):
    fabric = example_fabric("gb200-nvl72-cluster")
    places = host_places(fabric)
    assert hosts_per_system(fabric) == 18 and len(places) == 8 * 18
    assert places["domain"].tolist() == [n // 18 for n in range(144)]


@pytest.mark.parametrize("pattern", ["node", "{n}", "node{n:4d}", "node{n}x", "no de{n}", "n{m}"])
def test_a_bad_host_name_pattern_is_refused(pattern):
    with pytest.raises(ParameterError, match="hostnames"):
        HostNames.parse(pattern)


def test_bad_scheduler_options_are_one_line_errors(capsys, tmp_path):
    design = str(EXAMPLES / "gb200-nvl72-cluster.yaml")
    assert main(["export", design, "--to", "slurm", "-o", str(tmp_path / "t"),
                 "--hostnames", "gb{x}"]) == 2
    assert "--hostnames" in capsys.readouterr().err
    assert main(["export", design, "--to", "kueue", "-o", str(tmp_path / "k"),
                 "--label-prefix", "Bad_Prefix"]) == 2
    err = capsys.readouterr().err
    assert "--label-prefix" in err and len(err.strip().splitlines()) == 1
    assert not list(tmp_path.iterdir())


def test_hostlists_round_trip():
    names = HostNames.parse("n{n:02d}")
    numbers = [0, 1, 2, 5, 9, 10, 11, 99, 100, 101]
    assert expand_hostlist(names.hostlist(numbers)) == [names.name(n) for n in numbers]


#: Examples whose InfraGraph is written only with --run-slow (one edge per bundle: the
#: 100k-accelerator examples write 0.2 to 3.3 million edges, 37 to 450 MB, seconds to
#: tens of seconds; the few-thousand-GPU test below checks the same at that structure).
INFRAGRAPH_BUNDLES_LIMIT = 200_000


def infragraph_edge_count(document):
    """Edges of an InfraGraph document, each device's own edges counted once per
    instance of it (an independent reader of the format's slices: ``name[i]``)."""
    per_device = {d["name"]: len(d["edges"]) for d in document["devices"]}
    counts = {i["name"]: i["count"] for i in document["instances"]}
    for edge in document["edges"]:
        for end in (edge["ep1"], edge["ep2"]):
            name, index = re.fullmatch(r"(.+)\[(\d+)\]", end["instance"]).groups()
            assert int(index) < counts[name]
    return len(document["edges"]) + sum(per_device[i["device"]] * i["count"]
                                        for i in document["instances"])


def check_infragraph(fabric, path):
    """Write ``fabric`` as InfraGraph to ``path``, read it back and hold it to the
    fabric: bundles (edges), their tiers and bandwidth, switches (instances)."""
    import json

    live = fabric.links[~fabric.links["failed"].to_numpy()]
    export_fabric(fabric, "infragraph", path)
    document = json.loads(path.read_text())
    assert set(document) == {"name", "description", "devices", "links", "instances", "edges"}
    assert infragraph_edge_count(document) == len(live) // 2
    links = {link["name"]: link for d in [document, *document["devices"]]
             for link in d["links"]}
    names = [e["link"] for e in document["edges"]] + [
        e["link"] for d in document["devices"] for _ in range(next(
            i["count"] for i in document["instances"] if i["device"] == d["name"]))
        for e in d["edges"]]
    gbps = sum(links[n]["physical"]["bandwidth"]["gigabits_per_second"] for n in names)
    forward = live[live["src"].to_numpy() < live["dst"].to_numpy()]  # one arc a bundle
    assert gbps == pytest.approx(forward["capacity_Bps"].sum() * 8 / 1e9, rel=1e-6)
    # bundles per link tier (a link's description names its tier)
    tiers = Counter(links[n]["description"].removesuffix(" bundle") for n in names)
    assert tiers == Counter(forward["tier"].astype(str))
    # switches: every network switch is one slice of a switch instance
    kind = fabric.nodes["kind"].astype(str)
    switches = int((kind == "switch").sum())
    system_device = document["instances"][0]["device"]
    assert sum(i["count"] for i in document["instances"]
               if i["device"] != system_device) == switches
    ends = {(e[k]["instance"]) for e in document["edges"] for k in ("ep1", "ep2")}
    assert len({x for x in ends if not x.startswith("system[")}) == switches
    pattern = re.compile(r"^[\sa-zA-Z0-9\-_()<>\[\]]+$")  # InfraGraph's Named.Object
    for item in [document, *document["devices"], *document["instances"], *links.values()]:
        assert pattern.match(item if isinstance(item, str) else item["name"])
    return document


LARGE = {name for name in ALL if name.startswith("100k-")}
"""The examples above :data:`INFRAGRAPH_BUNDLES_LIMIT` bundles (the ~100k-accelerator
ones), known by name so that collecting the tests builds nothing;
``test_every_other_example_is_under_the_limit`` holds the rest to the limit."""


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n in LARGE
                                  else n for n in ALL])
def test_infragraph_reads_back_with_the_fabrics_bundles(name, example_fabric, tmp_path):
    check_infragraph(example_fabric(name), tmp_path / "g.json")


def test_every_other_example_is_under_the_limit(example_fabric):
    for name in ALL:
        if name in LARGE:
            continue  # built only by the slow test
        live = example_fabric(name).links["failed"].to_numpy()
        assert (~live).sum() // 2 <= INFRAGRAPH_BUNDLES_LIMIT, name


def test_infragraph_of_a_4096_gpu_3_tier_fabric(tmp_path):
    """The 98k example's structure (rail-optimized units of 64 servers, pods, a core
    tier of Q3400s) at 4,096 GPUs: every bundle, tier and switch read back."""
    design = tmp_path / "4k.yaml"
    design.write_text((EXAMPLES / "100k-8gpu-3tier.yaml").read_text()
                      .replace("systems: 12288", "systems: 512")
                      .replace("pod_units: 8", "pod_units: 4\n  tiers: 3"))
    loaded, catalog = load_design(design)
    fabric = build_fabric(loaded, catalog)
    assert fabric.accelerator_count == 4096
    document = check_infragraph(fabric, tmp_path / "g.json")
    tiers = {i["name"].split("-")[0] for i in document["instances"][1:]}
    assert tiers == {"leaf", "spine", "core"}
