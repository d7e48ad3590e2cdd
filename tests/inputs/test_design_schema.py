"""The design-file JSON Schema: well formed, complete, and in agreement with the loader.

Validation uses ``jsonschema`` (a test extra) against draft 2020-12.
"""

import dataclasses
import json
import textwrap
from pathlib import Path

import jsonschema
import pytest
import yaml

from topomodel.errors import DesignError
from topomodel.inputs.design import Design, load_design
from topomodel.inputs.records import yaml_keys
from topomodel.inputs.schema import DIALECT, RECORDS, design_schema, reader_schema
from topomodel.inputs.units import parse, parse_bandwidth

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
EXAMPLE_FILES = sorted(EXAMPLES.glob("*.yaml"))

ANNOTATIONS = {"$schema", "$defs", "title", "description", "default", "examples"}
ASSERTIONS = {"type", "properties", "additionalProperties", "required", "pattern", "enum",
              "const", "minimum", "maximum", "exclusiveMinimum", "minItems", "maxItems",
              "minProperties", "items", "$ref", "oneOf", "if", "then", "else"}


@pytest.fixture(scope="module")
def schema():
    return design_schema()


def errors(schema, instance, root=None):
    """Every way ``instance`` fails ``schema`` (a sub-schema of ``root``), as strings."""
    if root is not None:
        schema = {"$defs": root["$defs"], **schema}
    validator = jsonschema.Draft202012Validator(schema)
    return [f"{e.json_path}: {e.message}" for e in validator.iter_errors(instance)]


def keywords(node):
    """Every schema keyword used anywhere in ``node`` (property names excluded)."""
    found = set()
    if isinstance(node, dict):
        for key, value in node.items():
            found.add(key)
            if key in ("properties", "$defs"):
                for sub in value.values():
                    found |= keywords(sub)
            elif key in ("items", "additionalProperties", "if", "then", "else"):
                found |= keywords(value)
            elif key == "oneOf":
                for sub in value:
                    found |= keywords(sub)
    return found


def objects(node):
    """Every object schema in ``node``."""
    if isinstance(node, dict):
        if node.get("type") == "object":
            yield node
        for value in node.values():
            yield from objects(value)
    elif isinstance(node, list):
        for value in node:
            yield from objects(value)


# The schema itself ----------------------------------------------------------------------


def test_schema_is_plain_json_of_draft_2020_12(schema):
    assert schema["$schema"] == DIALECT
    assert json.loads(json.dumps(schema)) == schema
    assert keywords(schema) <= ANNOTATIONS | ASSERTIONS


def test_schema_is_valid_against_the_metaschema(schema):
    jsonschema.Draft202012Validator.check_schema(schema)


def test_every_record_key_is_in_the_schema_with_a_description(schema):
    for cls in RECORDS:
        node = schema if cls is Design else schema["$defs"][cls.__name__]
        assert node["additionalProperties"] is False
        assert list(node["properties"]) == list(yaml_keys(cls)), cls.__name__
        for key, prop in node["properties"].items():
            assert prop.get("description"), f"{cls.__name__}.{key}"
    for node in objects(schema):
        assert node.get("additionalProperties") is False


def test_required_keys_and_cross_key_rules(schema):
    assert schema["required"] == ["system"]
    assert errors(schema, {"system": "x"})  # neither systems nor accelerators
    assert errors(schema, {"system": "x", "systems": 1, "accelerators": 8})
    assert not errors(schema, {"system": "x", "systems": 1})
    assert errors(schema, {"system": "x", "systems": 1, "scaleout": {"kind": "fat_tree"}})
    assert errors(schema, {"system": "x", "systems": 1, "scaleout": {}})
    assert not errors(schema, {"system": "x", "systems": 1, "scaleout": {"kind": "none"}})


def test_defaults_are_what_the_loader_would_read(schema):
    layout = schema["$defs"]["LayoutDesign"]["properties"]
    assert layout["rack_cable"]["default"] == "2 m"
    assert layout["core_cable"]["default"] == "200 m"
    assert schema["$defs"]["ScaleoutDesign"]["properties"]["kind"]["default"] == "fat_tree"
    for cls in RECORDS:
        node = schema if cls is Design else schema["$defs"][cls.__name__]
        fields = yaml_keys(cls)
        for key, prop in node["properties"].items():
            if "default" not in prop:
                continue
            assert not errors(prop, prop["default"], schema), f"{cls.__name__}.{key}"
            f = fields[key]
            if isinstance(f.default, float):
                assert parse(prop["default"], "length") == f.default
            elif f.default is not dataclasses.MISSING:
                assert prop["default"] == f.default


def test_hand_kept_docs_and_rules_name_real_keys():
    from topomodel.inputs.schema import _DOCS, _FIELD_RULES

    for cls, key in [*_DOCS, *_FIELD_RULES]:
        assert key in yaml_keys(cls), f"{cls.__name__}.{key} is gone: drop it here"


def test_an_unknown_reader_is_refused():
    def read(_, __, value):
        return value

    with pytest.raises(TypeError, match="no schema for reader"):
        reader_schema(read, {})


# Quantity patterns agree with the unit parser ---------------------------------------------


@pytest.mark.parametrize("text", ["2 m", "2m", "2.5 km", ".5 m", "1e3 m", " 30 m ", "+2 m"])
def test_length_pattern_accepts_what_the_parser_reads(schema, text):
    prop = schema["$defs"]["LayoutDesign"]["properties"]["rack_cable"]
    assert parse(text, "length") > 0
    assert not errors(prop, text, schema)


@pytest.mark.parametrize("value", ["2", "-2 m", 2, "m", "", "two m"])
def test_length_pattern_refuses_bare_numbers_and_signs(schema, value):
    prop = schema["$defs"]["LayoutDesign"]["properties"]["rack_cable"]
    assert errors(prop, value, schema)


@pytest.mark.parametrize("text", ["400 Gb/s /dir", "400Gb/s/dir", "800 Gb/s bidir",
                                  "50 GB/s BIDIR", "400 Gb/s per-direction",
                                  "400 Gb/s Per Direction", "100 GB/s bidirectional"])
def test_bandwidth_pattern_accepts_directions(schema, text):
    prop = schema["$defs"]["ScaleoutDesign"]["properties"]["port_rate"]
    assert parse_bandwidth(text).per_direction_Bps > 0
    assert not errors(prop, text, schema)


@pytest.mark.parametrize("value", ["400 Gb/s", "400 /dir", 400, "400 Gb/s /dirt"])
def test_bandwidth_pattern_requires_a_direction(schema, value):
    prop = schema["$defs"]["ScaleoutDesign"]["properties"]["port_rate"]
    assert errors(prop, value, schema)
    assert "/dir" in prop["description"] and "bidir" in prop["description"]


# Examples and broken designs: the schema and the loader agree ---------------------------


@pytest.mark.parametrize("path", EXAMPLE_FILES, ids=lambda p: p.stem)
def test_every_example_validates(schema, path):
    document = yaml.safe_load(path.read_text())
    assert errors(schema, document) == []


GOOD = """
system: dgx-h100
systems: 64
scaleout:
  switch: qm9700
  oversubscription: ["1:1"]
layout:
  leaf_in_rack: false
  spine_cable: "100 m"
"""

BAD = {
    "unknown top-level key": "sytems: 4\n",
    "unknown nested key": "scaleout:\n  switch: qm9700\n  rails: 8\n",
    "both counts": "accelerators: 512\n",
    "bare number for a length": "layout:\n  rack_cable: 2\n",
    "bandwidth without direction": "scaleout:\n  switch: qm9700\n  port_rate: 400 Gb/s\n",
    "unknown scale-up kind": "scaleup:\n  kind: ring\n",
    "four oversubscriptions": ("scaleout:\n  switch: qm9700\n  oversubscription:"
                               " ['1:1', '1:1', '1:1', '1:1']\n"),
    "fat-tree without switch": "scaleout:\n  kind: fat_tree\n  switch: null\n",
    "tiers above 3": "scaleout:\n  switch: qm9700\n  tiers: 4\n",
    "cable for an unknown tier": "layout:\n  cables: {rack: dac-800g}\n",
}


def merged(extra):
    """GOOD with ``extra`` merged in, one level deep; a nested ``null`` removes the key."""
    document = yaml.safe_load(GOOD)
    for key, value in yaml.safe_load(extra).items():
        if isinstance(value, dict) and isinstance(document.get(key), dict):
            document[key] = {k: v for k, v in {**document[key], **value}.items()
                             if v is not None}
        else:
            document[key] = value
    return document


def test_a_good_design_passes_both(schema, tmp_path):
    assert errors(schema, yaml.safe_load(GOOD)) == []
    path = tmp_path / "good.yaml"
    path.write_text(textwrap.dedent(GOOD))
    load_design(path)


@pytest.mark.parametrize("what", sorted(BAD))
def test_a_broken_design_fails_both(schema, tmp_path, what):
    document = merged(BAD[what])
    assert errors(schema, document), what
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(document))
    with pytest.raises(DesignError):
        load_design(path)


def test_an_unknown_key_is_named(schema):
    problems = errors(schema, merged("scaleout:\n  switch: qm9700\n  rails: 8\n"))
    assert len(problems) == 1
    assert problems[0].startswith("$.scaleout:") and "'rails' was unexpected" in problems[0]
