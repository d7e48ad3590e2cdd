"""Shared fixtures: a toy catalog with a radix-k switch, and design helpers."""

import dataclasses
import sys
import textwrap
from pathlib import Path

import pytest

from topomodel.fabric.build import build_fabric
from topomodel.inputs.design import load_design

# the tests mirror the package's folders; a test module may import helpers from another
# one (``from test_routing import EXAMPLES``), so every folder of tests is importable
sys.path[:0] = [str(folder) for folder in sorted(Path(__file__).resolve().parent.iterdir())
                if folder.is_dir() and any(folder.glob("test_*.py"))]

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"

# --doctest-modules imports every .py file under tests/ to look for doctests; the mutation
# script is a tool run by hand (python tests/mutate.py), not a module of the suite
collect_ignore = ["mutate.py"]


def pytest_addoption(parser):
    parser.addoption("--run-slow", action="store_true", default=False,
                     help="also run the tests marked slow (long fuzz runs)")


def pytest_configure(config):
    # one Hypothesis profile: 25 examples a property test by default, 150 with --run-slow;
    # loaded before the test modules are imported, so their settings objects inherit it
    from hypothesis import settings

    examples = 150 if config.getoption("--run-slow") else 25
    settings.register_profile("topomodel", max_examples=examples)
    settings.load_profile("topomodel")


def pytest_collection_modifyitems(config, items):
    if config.getoption("--run-slow"):
        return
    skip = pytest.mark.skip(reason="slow: give --run-slow to run it")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)

TOY_CATALOG = """
accelerators:
  toy-acc:
    peak_flops: {bf16: "100 TFLOP/s"}
    hbm_capacity: "10 GB"
    hbm_bandwidth: "1 TB/s"
    scaleup_link: toy-link
    scaleup_link_count: 4
    gemm:
      - dtype: bf16
        points:
          - {m: 1024, n: 1024, k: 1024, rate: "40 TFLOP/s"}
          - {m: 4096, n: 4096, k: 4096, rate: "80 TFLOP/s"}
        clocks: sustained
        source: test fixture
        provenance: assumed
    hbm_achieved: {rate: "0.8 TB/s", source: test fixture, provenance: assumed}
    source: test fixture
    provenance: assumed
scaleup_links:
  toy-link:
    link_rate: "10 GB/s /dir"
    source: test fixture
    provenance: assumed
scaleup_switches:
  toy-chip:
    ports: 16
    port_rate: "10 GB/s /dir"
    source: test fixture
    provenance: assumed
nics:
  toy-nic:
    ports: 1
    port_rate: "100 Gb/s /dir"
    protocols: [ethernet]
    source: test fixture
    provenance: assumed
optics:
  toy-dac-100g:
    medium: copper
    form: dac
    rate: "100 Gb/s /dir"
    reach: "3 m"
    power: "0.1 W"
    source: test fixture
    provenance: assumed
  toy-dr-100g:
    medium: smf
    form: transceiver
    rate: "100 Gb/s /dir"
    reach: "500 m"
    max_channel_loss: "3.0 dB"
    fibre: os2
    source: "test fixture: a DR-class module without a power figure, never picked unless named"
    provenance: assumed
systems:
  toy-host:
    accelerator: toy-acc
    accelerators: 1
    scaleup: {kind: none}
    nic: toy-nic
    nic_count: 1
    source: test fixture
    provenance: assumed
  toy-box:
    accelerator: toy-acc
    accelerators: 4
    scaleup: {kind: switched, switch: toy-chip, switches: 2, links_per_switch: [2, 2]}
    nic: toy-nic
    nic_count: 4
    source: test fixture
    provenance: assumed
models:
  toy-dense:
    layers: 4
    hidden: 1024
    ffn_hidden: 4096
    heads: 16
    vocab: 32000
    sequence: 1024
    gated_ffn: false
    source: test fixture
    provenance: assumed
  toy-moe:
    layers: 4
    hidden: 1024
    ffn_hidden: 4096
    heads: 16
    vocab: 32000
    sequence: 1024
    experts: 8
    top_k: 2
    expert_ffn_hidden: 1024
    source: test fixture
    provenance: assumed
switches:
"""


def toy_switch(k):
    return textwrap.indent(textwrap.dedent(f"""
        toy-switch-{k}:
          protocol: ethernet
          ports: {k}
          port_rate: "100 Gb/s /dir"
          breakouts: [{{ports: {2 * k}, port_rate: "50 Gb/s /dir"}}]
          power: "100 W"
          source: test fixture
          provenance: assumed
    """), "  ")


DUAL_PLANE = """name: 32 HGX H100, two planes
system: hgx-h100
systems: 32
scaleout:
  kind: fat_tree
  switch: qm9700
  planes: 2
domains:
  racks_per_power_feed: 2
  racks_per_cooling_loop: 4
  sites: 2
"""
"""32 HGX H100 on a two-plane fat-tree, 2 racks per power feed, 4 per cooling loop, 2
sites: the failure-domain tests' design."""


def b200_rail_design(name, spine_cable):
    """64 HGX B200 (512 NICs), rail-optimized: 8 leaves of 64 NIC links down and 64 up, 4
    spines of 128 links; the spine tier cabled with ``spine_cable`` (the optics what-if
    tests' design)."""
    return f"""name: {name}
system: hgx-b200
systems: 64
scaleout:
  kind: fat_tree
  switch: q3400
  nic: connectx-8
  rail_optimized: true
  unit: 32
layout:
  cables: {{spine: {spine_cable}}}
"""


MESH_CATALOG = """
accelerators:
  toy-acc6:
    peak_flops: {bf16: "100 TFLOP/s"}
    hbm_capacity: "10 GB"
    hbm_bandwidth: "1 TB/s"
    scaleup_link: toy-link
    scaleup_link_count: 6
    source: test fixture
    provenance: assumed
systems:
  toy-mesh3:
    accelerator: toy-acc
    accelerators: 3
    scaleup: {kind: full_mesh, link: toy-link}
    nic: toy-nic
    nic_count: 3
    source: test fixture
    provenance: assumed
  toy-mesh5:
    accelerator: toy-acc
    accelerators: 5
    scaleup: {kind: full_mesh, link: toy-link}
    nic: toy-nic
    nic_count: 5
    source: test fixture
    provenance: assumed
  toy-mesh4:
    accelerator: toy-acc6
    accelerators: 4
    scaleup: {kind: full_mesh, link: toy-link}
    nic: toy-nic
    nic_count: 4
    source: test fixture
    provenance: assumed
"""
"""Full-mesh toy systems of 3, 4 and 5 accelerators (and the 6-link accelerator of the
4), a catalog to add with ``toy(text, extra=MESH_CATALOG)``."""


@pytest.fixture
def toy(tmp_path):
    """Build a design (YAML text) against the built-in plus the toy catalog."""
    catalog = tmp_path / "toy.yaml"
    catalog.write_text(TOY_CATALOG + "".join(toy_switch(k) for k in (4, 6, 8, 12, 16)))

    def build(text, extra=None):
        """``extra``: catalog YAML to load after the toy catalog."""
        path = tmp_path / "design.yaml"
        path.write_text(textwrap.dedent(text))
        catalogs = [catalog]
        if extra is not None:
            catalogs.append(tmp_path / "extra.yaml")
            catalogs[-1].write_text(extra)
        design, cat = load_design(path, extra_catalogs=catalogs)
        return build_fabric(design, cat)

    build.catalog_path = catalog
    build.tmp_path = tmp_path
    return build


def with_sharp(fabric):
    """``fabric`` as its design would be with ``scaleout.in_network_reduction: true``
    (SHARP where the scale-out switches can; off by default, as in stock NCCL)."""
    scaleout = dataclasses.replace(fabric.design.scaleout, in_network_reduction=True)
    return dataclasses.replace(fabric, design=dataclasses.replace(fabric.design,
                                                                   scaleout=scaleout))


@pytest.fixture(scope="session")
def example_fabric():
    """``example_fabric(name)``: the fabric of ``examples/NAME.yaml``, built once for the
    whole run and shared by every test that asks for it (the 98k-accelerator examples
    take seconds to build).

    Fabrics are frozen records and a test given one only reads it: ``assign``,
    ``with_failed`` and the failure helpers make copies, and the views kept with it
    (:meth:`Fabric.derived`) are caches that give what a fresh fabric computes. A test
    that needs a fabric with nothing derived yet, or changes one, builds its own.
    """
    built = {}

    def get(name):
        if name not in built:
            built[name] = build_fabric(*load_design(EXAMPLES / f"{name}.yaml"))
        return built[name]

    return get


def patched_and_whole_routes(monkeypatch, module, name, fabric, copies, route_copy):
    """Each of ``copies`` routed (``route_copy(copy)``) with the patch ``module.name``
    (a function that returns None where it declines) counted, then with it declining
    everywhere and ``fabric``'s kept sections cleared before each copy, so that every
    section is routed whole: (patched routes, whole routes, whether each call patched)."""
    from topomodel.routing import sections

    applied = []
    original = getattr(module, name)

    def counted(*args, **kwargs):
        out = original(*args, **kwargs)
        applied.append(out is not None)
        return out

    with monkeypatch.context() as m:
        m.setattr(module, name, counted)
        patched = [route_copy(copy) for copy in copies]
    whole = []
    with monkeypatch.context() as m:
        m.setattr(module, name, lambda *args, **kwargs: None)
        for copy in copies:
            fabric.derived(sections.kept_sections).clear()
            whole.append(route_copy(copy))
    return patched, whole, applied
