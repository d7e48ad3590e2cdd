"""The node and link tables as the builder makes them, held to an oracle: the builder as
it was before the tables were made column by column in one pass (per-block broadcasts
concatenated, string columns turned categorical afterwards, cables chosen with a mask
per link tier and rate, the injection summed over every link row). Each example, each
design of the example sweeps and a few variants must give the same tables, column by
column, dtypes, categories and index included, the same reverse rows and injection, and
the same ``topomodel build --format json``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
import yaml

from topomodel.analysis.bisection import bisection
from topomodel.analysis.training.studies import scale_scaleout
from topomodel.errors import UsageError
from topomodel.fabric import cabling
from topomodel.fabric.build import build_fabric, build_scaleout, check_size, structure_dict
from topomodel.fabric.columns import Coded, Columns
from topomodel.fabric.failures import mark_failures
from topomodel.fabric.scaleup import build_scaleup
from topomodel.fabric.structure import Injection, Structure, serving_nics
from topomodel.fabric.tables import (
    LINK_TIERS,
    MEDIA,
    NODE_COLUMNS,
    PROPAGATION_S_PER_M,
    Fabric,
    FabricBuilder,
    categorical,
    node_names,
    numbered,
    weaker_direction_Bps,
)
from topomodel.inputs.design import Design, load_design
from topomodel.inputs.parts import Optic, System
from topomodel.report.build import build_report
from topomodel.report.output import render
from topomodel.sweep.file import load_sweep
from topomodel.sweep.params import apply_overrides, design_overrides

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "examples").glob("*.yaml"))
SWEEPS = sorted((ROOT / "examples" / "sweeps").glob("*.yaml"))


# --- the oracle: the builder's tables as they were made before ---------------------------

class OracleBuilder(FabricBuilder):
    """The blocks broadcast per block and concatenated, strings made categorical after."""

    def add_nodes(self, names: Any, *, kind: str, tier: str, model: str,
                  latency_s: float = 0.0, **address: Any) -> np.ndarray:
        count = len(names)
        numbers = np.arange(self.node_count, self.node_count + count)
        block: dict[str, Any] = {"name": np.asarray(names, dtype=object), "kind": kind,
                                 "tier": tier, "model": model, "latency_s": latency_s}
        for column in ("system", "local", "domain", "unit", "pod", "plane", "rail"):
            value = address.pop(column, -1)
            block[column] = np.broadcast_to(np.asarray(value, dtype=np.int64), (count,))
        assert not address
        self.node_blocks.append(block)
        self.node_count += count
        return numbers

    def add_links(self, src: Any, dst: Any, *, tier: str, rate_Bps: float,
                  cables: Any = 1, medium: Any = "electrical") -> None:
        src = np.asarray(src, dtype=np.int64)
        dst = np.asarray(dst, dtype=np.int64)
        n = len(src)
        cables_arr = np.broadcast_to(np.asarray(cables, dtype=np.int64), (n,))
        if isinstance(medium, str):
            medium_codes = np.full(n, MEDIA.index(medium), np.int8)
        else:
            medium_codes = pd.Categorical(medium, categories=MEDIA).codes.astype(np.int8)
        for a, b in ((src, dst), (dst, src)):
            self.link_blocks.append({
                "src": a, "dst": b, "tier": LINK_TIERS.index(tier), "cables": cables_arr,
                "rate_Bps": float(rate_Bps), "medium": medium_codes, "count": n})

    def finish(self) -> tuple[pd.DataFrame, pd.DataFrame, np.ndarray]:
        nodes = pd.DataFrame({
            column: np.concatenate([np.broadcast_to(np.asarray(b[column]), (len(b["name"]),))
                                    for b in self.node_blocks])
            for column in NODE_COLUMNS
        })
        for column in ("kind", "tier", "model"):
            nodes[column] = nodes[column].astype("category")
        blocks = self.link_blocks

        def joined(key: str, dtype: Any) -> np.ndarray:
            return np.concatenate([np.broadcast_to(np.asarray(b[key], dtype=dtype),
                                                   (b["count"],)) for b in blocks]
                                  ) if blocks else np.empty(0, dtype)

        count = sum(b["count"] for b in blocks)
        cables, rate = joined("cables", np.int64), joined("rate_Bps", float)
        links = pd.DataFrame({
            "src": joined("src", np.int64), "dst": joined("dst", np.int64),
            "tier": categorical(joined("tier", np.int8), LINK_TIERS),
            "cables": cables, "rate_Bps": rate, "capacity_Bps": cables * rate,
            "length_m": np.zeros(count), "latency_s": np.zeros(count),
            "medium": categorical(joined("medium", np.int8), MEDIA),
            "optic": categorical(np.zeros(count, np.int8), [""]),
            "failed": np.zeros(count, bool),
        }, copy=False)
        starts = np.cumsum([0] + [b["count"] for b in blocks])
        reverse = np.concatenate([np.arange(starts[i + 1], starts[i + 2]) if i % 2 == 0
                                  else np.arange(starts[i - 1], starts[i])
                                  for i in range(len(blocks))] or [np.empty(0, np.int64)])
        return nodes, links, reverse


def oracle_assign_cables(links: pd.DataFrame, design: Design, catalog: Any, *,
                         tiers: Any = None, whatif: str | None = None) -> None:
    """Cables chosen with a row mask per link tier and per rate, columns set one by one."""
    system = catalog.entries.get(design.system)
    pcie_box = isinstance(system, System) and (
        design.scaleup.kind or system.scaleup.kind) == "pcie"
    tier_codes = links["tier"].cat.codes.to_numpy()
    medium = links["medium"].cat.codes.to_numpy().copy()
    ocs, electrical_code = MEDIA.index("ocs"), MEDIA.index("electrical")
    optic_ids = list(links["optic"].cat.categories) if whatif else [""]
    optic_codes = (links["optic"].cat.codes.to_numpy().astype(np.int16) if whatif
                   else np.zeros(len(links), np.int16))
    length = links["length_m"].to_numpy().copy()
    rate = links["rate_Bps"].to_numpy()
    tier_names = list(links["tier"].cat.categories)
    electrical = medium == electrical_code
    for code in np.flatnonzero(np.bincount(tier_codes, minlength=len(tier_names))):
        tier = tier_names[code]
        if tier == "host" or (pcie_box and tier.startswith("scaleup")) or (
                tiers is not None and tier not in tiers):
            continue
        in_tier = tier_codes == code
        if tier == "scaleup":
            in_tier &= ~electrical
        for link_rate in np.unique(rate[in_tier]):
            rows = in_tier & (rate == link_rate)
            meters = cabling.tier_length_m(design, tier)
            through_ocs = bool((medium[rows] == ocs).any())
            named = design.layout.cables.get(tier)
            chosen = catalog.get(named, Optic) if named else None
            if chosen is None or (whatif and not cabling._carries(chosen, link_rate, meters)):
                chosen = cabling.choose_optic(catalog, link_rate, meters, design=design,
                                              ocs=through_ocs)
            if chosen is None and whatif:
                chosen = cabling.choose_optic(catalog, link_rate, meters, design=design,
                                              ocs=through_ocs, max_ratio=None)
            if chosen is None:
                raise AssertionError("the oracle is run on designs that cable")
            length[rows] = meters
            if chosen.id not in optic_ids:
                optic_ids.append(chosen.id)
            optic_codes[rows] = optic_ids.index(chosen.id)
            medium[rows & (medium != ocs)] = MEDIA.index(chosen.medium)
    links["length_m"] = length
    links["medium"] = categorical(medium, MEDIA)
    links["optic"] = categorical(optic_codes, optic_ids)
    links["latency_s"] = length * PROPAGATION_S_PER_M


class TierCodes(Coded):
    """``tier == "leaf"`` read from the codes (a string comparison per row would take
    seconds at 6.5 M rows)."""

    def __eq__(self, label: object) -> np.ndarray:  # type: ignore[override]
        return self.equals(str(label))


def oracle_injection(nodes: pd.DataFrame, links: pd.DataFrame, structure: Structure,
                     reverse_rows: np.ndarray) -> Injection:
    """Every sum over all link rows, the rows a sum does not need as zeros."""
    n = len(nodes)
    is_accelerator = Coded(nodes["kind"]).equals("accelerator")
    acc = np.flatnonzero(is_accelerator)
    src = links["src"].to_numpy()
    tier = TierCodes(links["tier"])
    cap = links["capacity_Bps"].to_numpy()
    is_acc = is_accelerator[src]
    up = np.bincount(src, weights=np.where(is_acc & (tier == "scaleup"), cap, 0.0),
                     minlength=n)
    host_rows = np.flatnonzero(is_acc & (tier == "host"))
    nic = links["dst"].to_numpy()[host_rows]
    port = np.bincount(src, weights=np.where(tier == "leaf", cap, 0.0), minlength=n)
    owner = src[host_rows]
    out = np.bincount(owner, weights=np.minimum(cap[host_rows], port[nic]), minlength=n)
    host = np.bincount(owner, weights=cap[host_rows], minlength=n)
    ports = np.bincount(owner, weights=port[nic], minlength=n)
    nic_nodes = np.flatnonzero(Coded(nodes["kind"]).equals("nic"))
    local, system = nodes["local"].to_numpy(), nodes["system"].to_numpy()
    serving = serving_nics(system[acc], local[acc], nic_nodes, system[nic_nodes],
                           local[nic_nodes], per_system=structure.accelerators_per_system,
                           nics_per_system=structure.scaleout.nics_per_system)
    weaker = weaker_direction_Bps(links, reverse_rows)
    scaleout = (min(weaker[tier == "host"].sum(), weaker[tier == "leaf"].sum()) / 2
                if structure.scaleout.kind != "none" else 0.0)
    domain = nodes["domain"].to_numpy()[acc]
    count = max(1, len(acc))
    if len(np.unique(domain[domain >= 0])) >= 2:
        bisection_Bps = float(scaleout / count)
    else:
        bisection_Bps = float((scaleout + cap[is_acc & (tier == "scaleup")].sum()) / count)
    return Injection(serving, up[acc], out[acc], host[acc], ports[acc], bisection_Bps)


def oracle_build(design: Design, catalog: Any) -> Fabric:
    """:func:`build_fabric` as it was: uncabled tables, then each pass on the tables."""
    system = catalog.get(design.system, System)
    n_systems = design.systems if design.systems is not None else (
        (design.accelerators or 0) // system.accelerators)
    per_system = system.accelerators
    check_size(design, system, n_systems)
    builder = OracleBuilder()
    prefixes = [f"{name}/" for name in numbered("sys", n_systems)]
    acc = builder.add_nodes(node_names(prefixes, numbered("acc", per_system)),
                            kind="accelerator", tier="accelerator", model=system.accelerator,
                            system=np.repeat(np.arange(n_systems), per_system),
                            local=np.tile(np.arange(per_system), n_systems))
    domains, scaleup = build_scaleup(builder, design, catalog, system,
                                      acc.reshape(n_systems, per_system))
    clos, scaleout = build_scaleout(builder, design, catalog, system,
                                    acc.reshape(n_systems, per_system), prefixes)
    nodes, links, reverse_rows = builder.finish()
    nodes.loc[nodes["kind"] == "accelerator", "domain"] = domains
    nodes.loc[nodes["kind"] == "nic", "domain"] = np.repeat(
        domains.reshape(n_systems, per_system)[:, 0], scaleout.nics_per_system)
    oracle_assign_cables(links, design, catalog)
    out = design.scaleout
    is_nic = (nodes["kind"] == "nic").to_numpy()
    leaf = (links["tier"] == "leaf").to_numpy()
    for rate, end in ((out.port_rate_up_Bps, "src"), (out.port_rate_down_Bps, "dst")):
        if rate:
            rows = leaf & is_nic[links[end].to_numpy()]
            links.loc[rows, "capacity_Bps"] = links["cables"].to_numpy()[rows] * rate
    node_arrays = Columns.of_frame(nodes)
    link_arrays = mark_failures(node_arrays, Columns.of_frame(links), design)
    links = link_arrays.frame()
    structure = Structure(n_systems, per_system, scaleup, scaleout)
    return Fabric(design, catalog, node_arrays, link_arrays, structure,
                  oracle_injection(nodes, links, structure, reverse_rows), reverse_rows,
                  tuple(clos))


# --- comparisons ----------------------------------------------------------------------

def assert_same_table(new: pd.DataFrame, old: pd.DataFrame) -> None:
    """Equal values, dtypes, categories (same order, same dtype, same code width), index
    and array types, column by column. Categorical columns are compared by their codes
    once their dtypes are equal (pandas compares their labels row by row: seconds at
    millions of rows)."""
    assert list(new.columns) == list(old.columns)
    assert all(new[c].dtype == old[c].dtype for c in old.columns)
    coded = {c: old[c].cat.codes for c in old.columns if old[c].dtype.name == "category"}
    pd.testing.assert_frame_equal(new.assign(**{c: new[c].cat.codes for c in coded}),
                                  old.assign(**coded), check_exact=True,
                                  check_index_type=True, check_column_type=True)
    assert type(new.index) is type(old.index) and new.index.equals(old.index)
    for column in old.columns:
        a, b = new[column], old[column]
        assert a.dtype == b.dtype, column
        assert type(a.array) is type(b.array), column
        if b.dtype.name == "category":
            assert list(a.cat.categories) == list(b.cat.categories), column
            assert a.cat.categories.dtype == b.cat.categories.dtype, column
            assert a.cat.codes.dtype == b.cat.codes.dtype, column


NARROWED_LINK_COLUMNS = {"src": np.int32, "dst": np.int32, "cables": np.int32}
"""The link columns the builder keeps in int32 (4 bytes a row, not 8) where the oracle
writes int64: compared as the oracle's values narrowed, which must fit unchanged."""


def narrowed(old: pd.DataFrame, columns: dict[str, Any]) -> pd.DataFrame:
    """``old`` with ``columns`` cast to their narrower types, each value checked to fit
    (the int64 values unchanged by the round trip), for :func:`assert_same_table`."""
    cast = old.astype(columns)
    for column in columns:
        assert np.array_equal(cast[column].to_numpy().astype(np.int64),
                              old[column].to_numpy()), column
    return cast


def assert_same_fabric(new: Fabric, old: Fabric) -> None:
    assert_same_table(new.nodes, old.nodes)
    assert_same_table(new.links, narrowed(old.links, NARROWED_LINK_COLUMNS))
    assert new.reverse_rows.dtype == np.int32  # the oracle's int64 rows, narrowed
    assert np.array_equal(new.reverse_rows, old.reverse_rows)
    for name, value in vars(old.injection).items():
        mine = getattr(new.injection, name)
        if isinstance(value, np.ndarray):
            assert mine.dtype == value.dtype and mine.tobytes() == value.tobytes(), name
        else:
            assert type(mine) is type(value) and mine == value, name
    assert structure_dict(new.structure) == structure_dict(old.structure)
    assert repr(new.clos_tiers) == repr(old.clos_tiers)


def build_json(fabric: Fabric) -> str:
    """``topomodel build --format json`` of ``fabric`` (its exact bisection check off)."""
    report = build_report(fabric, bisection_result=bisection(fabric, max_flow_node_limit=0))
    return render(report, "json")


def both(path: Path | str, *, text: str | None = None) -> tuple[Fabric, Fabric]:
    design, catalog = load_design(path, text=text)
    return build_fabric(design, catalog), oracle_build(design, catalog)


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_example_tables_equal_the_oracle(path):
    new, old = both(path)
    assert_same_fabric(new, old)


@pytest.mark.parametrize("path", SWEEPS, ids=lambda p: p.stem)
def test_sweep_designs_tables_equal_the_oracle(path):
    sweep = load_sweep(path)
    designs = {json.dumps(design_overrides(p), sort_keys=True) for p in sweep.points}
    for overrides in sorted(designs):
        data = apply_overrides(sweep.design_data, json.loads(overrides))
        design, _ = load_design(sweep.design_file, text=yaml.safe_dump(data),
                                catalog=sweep.catalog)
        assert_same_fabric(build_fabric(design, sweep.catalog),
                           oracle_build(design, sweep.catalog))


def variant(path: str, changes: dict[str, Any]) -> str:
    """The YAML of example ``path`` with the ``design.KEY.PATH`` settings of ``changes``."""
    data = yaml.safe_load((ROOT / "examples" / path).read_text())
    return yaml.safe_dump(apply_overrides(data, {f"design.{k}": v for k, v in changes.items()}))


VARIANTS = {
    "rail-only": ("dgx-h100-superpod.yaml", {"scaleout.kind": "rail_only"}),
    "two-tier-2to1": ("dgx-h100-superpod.yaml", {"scaleout.oversubscription": ["2:1"]}),
    "port-directions": ("dgx-h100-superpod.yaml",
                        {"scaleout.port_rate_up": "300 Gb/s /dir",
                         "scaleout.port_rate_down": "200 Gb/s /dir"}),
    "failures": ("dgx-h100-superpod.yaml",
                 {"failures.nodes": ["spine03", "sys005/nic2"],
                  "failures.links": ["sys000/nic0 -- leaf00"]}),
    "torus-no-ocs": ("tpu-v4-pod.yaml", {"scaleup.ocs": False}),
    "partial-unit": ("dgx-h100-superpod.yaml", {"systems": 120, "scaleout.unit": 32,
                                               "scaleout.partial_unit": True}),
    "full-mesh-scaleup": ("mi300x-roce.yaml", {"systems": 40}),
}


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_design_variants_equal_the_oracle(name):
    path, changes = VARIANTS[name]
    new, old = both(ROOT / "examples" / path, text=variant(path, changes))
    assert_same_fabric(new, old)
    if name == "failures":
        assert new.links["failed"].any()
    if name == "port-directions":
        assert (new.links["capacity_Bps"] != new.links["cables"] * new.links["rate_Bps"]).any()


TOYS = {
    "two-tier": "system: toy-host\nsystems: 8\nscaleout:\n  switch: toy-switch-4\n",
    "three-tier": "system: toy-host\nsystems: 16\nscaleout:\n  switch: toy-switch-4\n"
                  "  tiers: 3\n",
    "no-scaleout": "system: toy-host\nsystems: 4\nscaleout:\n  kind: none\n",
}


@pytest.mark.parametrize("name", sorted(TOYS))
def test_toy_designs_equal_the_oracle(toy, name):
    """Designs without scale-up links (the toy host), or without a scale-out network."""
    new = toy(TOYS[name])
    assert_same_fabric(new, oracle_build(new.design, new.catalog))


@pytest.mark.parametrize("factor", [4.0, 0.5, 3.3])
def test_whatif_recabling_equals_the_oracle(factor):
    fabric = build_fabric(*load_design(ROOT / "examples" / "dgx-h100-superpod.yaml"))
    scaled = scale_scaleout(fabric, factor, recable=False).links
    new, old = scaled.copy(), scaled.copy()
    whatif = f"--scaleout-factor {factor:g}"
    try:
        cabling.assign_cables(new, fabric.design, fabric.catalog,
                              tiers=("leaf", "spine", "core"), whatif=whatif)
    except UsageError:
        with pytest.raises(AssertionError):
            oracle_assign_cables(old, fabric.design, fabric.catalog,
                                 tiers=("leaf", "spine", "core"), whatif=whatif)
        return
    oracle_assign_cables(old, fabric.design, fabric.catalog,
                         tiers=("leaf", "spine", "core"), whatif=whatif)
    assert_same_table(new, old)
    assert_same_fabric(scale_scaleout(fabric, factor),
                       scale_scaleout(oracle_build(fabric.design, fabric.catalog), factor))


@pytest.mark.parametrize("path", ["small-2x2-a100-1gbe.yaml", "dgx-h100-superpod.yaml",
                                  "tpu-v4-pod.yaml", "cloudmatrix384.yaml",
                                  "rtx4090-workstation.yaml", "asymmetric-sites.yaml"])
def test_build_json_equals_the_oracle(path):
    new, old = both(ROOT / "examples" / path)
    assert build_json(new) == build_json(old)


def test_failed_copy_shares_columns_and_keeps_the_intact_table():
    fabric = build_fabric(*load_design(ROOT / "examples" / "dgx-h100-superpod.yaml"))
    before = fabric.links.copy()
    mask = np.zeros(len(fabric.links), bool)
    mask[:10] = True
    failed = fabric.with_failed(mask)
    assert failed.links["failed"].sum() == 10 and not fabric.links["failed"].any()
    assert np.shares_memory(failed.links["src"].to_numpy(), fabric.links["src"].to_numpy())
    assert_same_table(fabric.links, before)


def test_spine_and_core_names_follow_pods_and_indices():
    fabric = build_fabric(*load_design(ROOT / "examples" / "b200-superpod.yaml"))
    nodes = fabric.nodes
    spines = nodes[nodes["tier"] == "spine"]
    assert len(spines) and (spines["pod"] >= 0).all()
    pods = int(spines["pod"].max()) + 1
    per_pod = len(spines) // pods
    pw, sw = len(str(max(pods - 1, 1))), len(str(max(per_pod - 1, 1)))
    expected = [f"pod{p:0{pw}d}/spine{s:0{sw}d}" for p in range(pods) for s in range(per_pod)]
    assert [name.split("/", 1)[-1] if name.count("/") > 1 else name
            for name in spines["name"]] == expected
    cores = nodes.loc[nodes["tier"] == "core", "name"].tolist()
    cw = len(str(max(len(cores) - 1, 1)))
    assert [c.rsplit("/", 1)[-1] for c in cores] == [f"core{i:0{cw}d}"
                                                     for i in range(len(cores))]


def test_builder_refuses_an_address_of_the_wrong_length():
    builder = FabricBuilder()
    with pytest.raises(ValueError):
        builder.add_nodes(["a", "b", "c"], kind="switch", tier="leaf", model="m",
                          unit=np.array([0, 1]))
    with pytest.raises(TypeError, match="unknown node attributes"):
        builder.add_nodes(["a"], kind="switch", tier="leaf", model="m", colour=1)
