"""The default routing follows the scale-out switches: even split with adaptive routing,
ECMP by hash without it; a design or --routing overrides it."""

import numpy as np
import pytest

from topomodel.analysis.options import OPTIONS, step_inputs
from topomodel.analysis.training.step import StepAssumptions, step_time
from topomodel.inputs.parts import Model, Switch
from topomodel.routing import route
from topomodel.routing.policy import fabric_routing, resolve_routing
from topomodel.traffic.layout import Layout
from topomodel.traffic.phases import phase

TOY = "system: toy-host\nsystems: 32\nscaleout:\n  switch: toy-switch-8\n"


def test_catalog_says_which_switches_route_adaptively(example_fabric):
    catalog = example_fabric("dgx-h100-superpod").catalog
    adaptive = {s.id for s in catalog.of_kind(Switch) if s.adaptive_routing}
    assert {"qm8700", "qm9700", "q3400", "sn5600"} <= adaptive
    assert not {"tomahawk4", "tomahawk5", "tomahawk6", "sn2700"} & adaptive


@pytest.mark.parametrize(("name", "routing"), [
    ("dgx-h100-superpod", "ecmp"),  # Quantum-2: adaptive routing
    ("llama3-24k-roce", "hash"),  # Ethernet chassis hashing flows (E-ECMP in the paper)
    ("mi300x-roce", "hash"), ("small-16x8-a100-100gbe-roce", "hash"),
    ("hgx-h100-server", "ecmp"),  # no scale-out network
])
def test_auto_routing_follows_the_fabric(example_fabric, name, routing):
    choice = fabric_routing(example_fabric(name))
    assert choice.routing == routing
    assert ("hash" in choice.text) == (routing == "hash")


def test_routing_defaults_to_auto_and_keeps_the_override():
    assert OPTIONS["routing"].default == "auto"
    assert step_inputs({"model": "llama3-8b"}).routing == "auto"
    assert step_inputs({"model": "llama3-8b", "routing": "ecmp"}).routing == "ecmp"
    assert resolve_routing(None, "ecmp").reason == "given (--routing ecmp)"


def test_auto_hashes_a_plain_ethernet_fabric_and_collides(toy):
    fabric = toy(TOY)  # toy switches say nothing of adaptive routing: they hash
    acc = fabric.accelerators
    ph = phase(acc, np.roll(acc, 16), 1e6)  # every flow crosses the spine
    auto = route(fabric, ph, routing="auto", seed=3)
    hashed = route(fabric, ph, routing="hash", seed=3)
    even = route(fabric, ph, routing="ecmp")
    assert np.array_equal(auto.link_bytes, hashed.link_bytes)
    assert auto.link_bytes.max() > even.link_bytes.max()


def test_design_key_turns_adaptive_routing_on(toy):
    fabric = toy(TOY + "  adaptive_routing: true\n")
    choice = fabric_routing(fabric)
    assert choice.routing == "ecmp" and "scaleout.adaptive_routing" in choice.reason
    off = toy(TOY + "  adaptive_routing: false\n")
    assert fabric_routing(off).routing == "hash"


def test_default_step_on_plain_ethernet_is_not_faster_than_the_even_split(toy):
    fabric = toy(TOY)
    model = fabric.catalog.get("toy-dense", Model)
    # DP groups strided over the leaves: their rings cross the spines, where flows hash
    layout = Layout(pp=2, dp=16, micro_batch=1, global_batch=32, dp_overlap=False,
                    order="tp,cp,pp,dp")
    quiet = StepAssumptions(jitter_cv=0.0, dp_bucket_bytes=1e12)
    auto = step_time(fabric, model, layout, quiet, routing="auto")
    even = step_time(fabric, model, layout, quiet, routing="ecmp")
    assert auto.exposed_comm_s > even.exposed_comm_s
    assert auto.walls["topology_s"] > even.walls["topology_s"]
