"""Failure classes: what one failed part does to a job is a catalog figure per part."""

import textwrap
from pathlib import Path

import pytest

from topomodel.analysis.reliability.failure_classes import SINGLE_POINT, failure_class, on_failure
from topomodel.analysis.reliability.goodput import (
    SECONDS_PER_DAY,
    component_lines,
    degraded_losses,
    degraded_throughput,
)
from topomodel.cli import main
from topomodel.errors import CatalogError
from topomodel.fabric.build import build_fabric
from topomodel.inputs.catalog import load_catalog
from topomodel.inputs.design import load_design
from topomodel.inputs.reliability import FailureClass

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def fabric_of(example, *extra):
    design, catalog = load_design(EXAMPLES / f"{example}.yaml", extra_catalogs=list(extra))
    return build_fabric(design, catalog)


def by_tier(lines):
    return {(ln.component, ln.tier): ln for ln in lines}


def test_every_built_in_class_has_a_source_and_a_reason():
    classes = load_catalog().of_kind(FailureClass)
    assert {c.component for c in classes} >= {"accelerator", "hbm", "software", "host",
                                              "nic", "scaleup_switch", "switch", "optic"}
    for entry in classes:
        assert entry.source and entry.notes and entry.provenance
        # where nothing is published the entry says so
        assert (entry.provenance == "assumed") == ("assumption" in entry.source)


def test_the_supernodes_scale_up_optics_are_classed_explicitly():
    lines = by_tier(component_lines(fabric_of("cloudmatrix384"), 384))
    optics = lines[("optic", "scaleup_l2 link")]
    assert (optics.on_failure, optics.class_entry) == ("degrades", "optic-ub-degrades")
    assert not optics.interrupts
    l2 = lines[("scaleup_switch", "scaleup_l2")]
    assert (l2.on_failure, l2.class_entry) == ("degrades", "scaleup-switch-ub-l2-degrades")
    l1 = lines[("scaleup_switch", "system")]
    assert (l1.on_failure, l1.class_entry) == ("stops_job", "scaleup-switch-ub-l1-stops")


def test_a_single_point_stops_the_job_whatever_its_class():
    lines = by_tier(component_lines(fabric_of("dgx-h100-superpod"), 1016))
    leaf, spine = lines[("switch", "leaf")], lines[("switch", "spine")]
    assert (leaf.on_failure, leaf.class_entry) == ("stops_job", SINGLE_POINT)
    assert (spine.on_failure, spine.class_entry) == ("degrades", "switch-degrades")
    nvswitch = lines[("scaleup_switch", "system")]
    assert (nvswitch.on_failure, nvswitch.class_entry) == ("stops_job",
                                                           "scaleup-switch-nvlink-stops")
    absorbed = FailureClass(id="x", file="f", line=1, source="s", provenance="assumed",
                            component="switch", on_failure="absorbed")
    assert on_failure(absorbed, True) == "stops_job" and on_failure(absorbed, False) == (
        "absorbed")


def test_the_technology_decides_a_scale_up_link_before_its_optic_form():
    catalog = load_catalog()
    module = ("osfp-400g-dr4", "transceiver")
    assert failure_class(catalog, "optic", module[0], "", module[1]).id == "optic-degrades"
    assert failure_class(catalog, "optic", module[0], "nvlink5", module[1]).id == (
        "optic-nvlink-stops")
    assert failure_class(catalog, "optic", module[0], "ub", module[1]).id == (
        "optic-ub-degrades")


def _classes(tmp_path, on_failure_value):
    path = tmp_path / "classes.yaml"
    path.write_text(textwrap.dedent(f"""
        failure_classes:
          ours:
            component: optic
            applies_to: [ub]
            on_failure: {on_failure_value}
            source: our fleet
            provenance: assumed
    """))
    return path


def test_a_user_class_changes_what_a_failure_does(tmp_path):
    base = component_lines(fabric_of("cloudmatrix384"), 384)
    stops = component_lines(fabric_of("cloudmatrix384", _classes(tmp_path, "stops_job")),
                            384)
    ub = ("optic", "scaleup_l2 link")
    line = by_tier(stops)[ub]
    assert line.interrupts and line.class_entry == "ours"
    added = sum(ln.failures_per_s for ln in stops if ln.interrupts) - sum(
        ln.failures_per_s for ln in base if ln.interrupts)
    assert added == pytest.approx(line.failures_per_s) and added * SECONDS_PER_DAY > 0.1
    # absorbed: neither an interruption nor a loss, however often it fails
    fabric = fabric_of("cloudmatrix384", _classes(tmp_path, "absorbed"))
    absorbed = component_lines(fabric, 384)
    assert by_tier(absorbed)[ub].on_failure == "absorbed"
    losses = degraded_losses(absorbed, None, 1.0, 0.5)
    assert "scaleup_l2 link" not in losses and "spine link" in losses
    _, tiers = degraded_throughput(absorbed, {**losses, "scaleup_l2 link": 0.5}, 3600.0)
    assert "scaleup_l2 link" not in [t.tier for t in tiers]


@pytest.mark.parametrize("body, message", [
    ("component: optic\n    on_failure: stop", "stop.*stops_job"),
    ("component: accelerator\n    on_failure: degrades", "cannot be routed around"),
    ("component: gpu\n    on_failure: stops_job", "component"),
    ("component: optic", "on_failure"),
])
def test_bad_classes_are_one_line_errors(tmp_path, capsys, body, message):
    bad = tmp_path / "bad.yaml"
    bad.write_text(f"failure_classes:\n  x:\n    {body}\n    source: s\n"
                   "    provenance: assumed\n")
    with pytest.raises(CatalogError, match=message):
        load_catalog([bad])
    status = main(["catalog", "list", "--catalog", str(bad)])
    err = capsys.readouterr().err.strip().splitlines()
    assert status == 2 and len(err) == 1 and str(bad) in err[0]


def test_the_catalog_schema_names_the_classes():
    from topomodel.inputs.schema import catalog_schema

    schema = catalog_schema()
    text = str(schema)
    assert "failure_classes" in text and "stops_job" in text and "absorbed" in text
