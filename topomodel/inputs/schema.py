"""JSON Schema (draft 2020-12) for design files, generated from the design record classes.

The schema is derived, not written: :func:`design_schema` walks the YAML keys of
:class:`~topomodel.inputs.design.Design` and its nested records and turns each field's reader
into a schema fragment, with the field's ``doc`` as its description. A quantity becomes
a string pattern (a number, then a unit) described by its kind, with an example; a
bandwidth must also end in its direction (``/dir`` or ``bidir``). The loader stays the
authority: the pattern cannot check that the unit is of the right kind, and rules that
span keys are expressed only where JSON Schema can say them (:data:`_RULES`).

Readers are recognised by the factory that made them (``choice``, ``integer``, ``ref``,
``list_of``, ``mapping_of``, ``record``, ``quantity``) and the factory's arguments are
read from the reader's closure, so a new option in :mod:`topomodel.inputs.design` shows up in
the schema without editing this module. A reader this module does not know is an error,
so the schema cannot silently fall behind the loader.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable
from typing import Any

from topomodel.inputs import records
from topomodel.inputs.catalog import ENTRY_TYPES, KIND_NAMES
from topomodel.inputs.design import (
    Design,
    DomainsDesign,
    FailureDesign,
    LayoutDesign,
    ScaleoutDesign,
    ScaleupDesign,
    ratio_reader,
)
from topomodel.inputs.parts import ENTRY_ID_RE, PROVENANCES, curve_points, provenance_map
from topomodel.inputs.prices import SECTION as PRICE_SECTION
from topomodel.inputs.prices import Price, date_text, price_range
from topomodel.inputs.records import Invalid, Reading
from topomodel.inputs.units import KINDS
from topomodel.inputs.yamlsource import Source

DIALECT = "https://json-schema.org/draft/2020-12/schema"
"""The JSON Schema dialect of :func:`design_schema`."""

RECORDS = (Design, ScaleupDesign, ScaleoutDesign, LayoutDesign, FailureDesign,
           DomainsDesign)
"""The record classes a design file is made of; each nested one becomes a ``$defs`` entry."""

# A decimal number as the unit parser reads it; the sign is added per kind.
_NUMBER = r"(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?"
_UNIT = r"[A-Za-zµμ%]"  # a unit starts with a letter (or micro, or %)

# Rules the loader enforces in ``__post_init__`` or in ``design._check``, which no field
# reader carries. Only rules JSON Schema can state are here; the loader checks the rest
# (a ratio's down >= up, ids that exist, counts that divide).
_RULES: dict[type, dict[str, Any]] = {
    Design: {
        # Design.__post_init__: exactly one of the two counts
        "oneOf": [{"required": ["systems"]}, {"required": ["accelerators"]}],
    },
    ScaleoutDesign: {
        # ScaleoutDesign.__post_init__: a fat_tree or rail_only scale-out needs a switch
        "if": {"properties": {"kind": {"const": "none"}}, "required": ["kind"]},
        "else": {"required": ["switch"]},
    },
}
# Descriptions for keys whose field has no ``doc`` yet; a ``doc`` in design.py wins.
_DOCS: dict[tuple[type, str], str] = {
    (Design, "name"): "display name of the design",
    (Design, "description"): "free text about the design",
    (Design, "system"): "the system (server, rack or node) the cluster is made of",
    (Design, "systems"): "how many systems; give this or 'accelerators'",
    (Design, "accelerators"): "how many accelerators, a whole number of systems; give this"
                              " or 'systems'",
    (ScaleupDesign, "kind"): "how accelerators are joined; default the system's own wiring",
    (ScaleupDesign, "link"): "scale-up link; default the system's, else the accelerator's",
    (ScaleupDesign, "wraparound"): "torus: close every ring; default the system's",
    (ScaleoutDesign, "kind"): "scale-out topology",
    (ScaleoutDesign, "switch"): "the scale-out switch, used at every tier",
    (ScaleoutDesign, "nic"): "scale-out NIC; default the system's",
    (ScaleoutDesign, "nics_per_system"): "default the system's nic_count, else one per"
                                         " accelerator",
    (ScaleoutDesign, "rail_optimized"): "NIC i of every system goes to rail i's leaves;"
                                        " false puts whole systems under one leaf",
    (ScaleoutDesign, "planes"): "independent copies of the fabric; each NIC's bandwidth is"
                                " split over them",
    (FailureDesign, "nodes"): "failed nodes, by name (e.g. 'sys003/nic5')",
    (FailureDesign, "links"): "failed links, as 'node -- node'",
}
_FIELD_RULES: dict[tuple[type, str], dict[str, Any]] = {
    (ScaleoutDesign, "tiers"): {"maximum": 3},  # ScaleoutDesign.__post_init__
    (ScaleoutDesign, "oversubscription"): {"maxItems": 3},  # design._check: one per tier
}


def design_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of a design file, as plain JSON-ready types.

    Returns
    -------
    dict
        The schema: the top-level :class:`~topomodel.inputs.design.Design` keys inline, the
        nested records (``scaleup``, ``scaleout``, ``layout``, ``failures``,
        ``domains``) under
        ``$defs``. Every object refuses unknown keys (``additionalProperties: false``).

    Examples
    --------
    >>> schema = design_schema()
    >>> schema["$schema"]
    'https://json-schema.org/draft/2020-12/schema'
    >>> schema["required"], schema["additionalProperties"]
    (['system'], False)
    >>> sorted(schema["$defs"])
    ['DomainsDesign', 'FailureDesign', 'LayoutDesign', 'ScaleoutDesign', 'ScaleupDesign']
    >>> schema["$defs"]["ScaleupDesign"]["properties"]["kind"]["enum"]
    ['switched', 'full_mesh', 'torus', 'supernode', 'none']
    >>> cable = schema["$defs"]["LayoutDesign"]["properties"]["rack_cable"]
    >>> cable["default"], cable["examples"]
    ('2 m', ['500 m'])
    >>> rate = schema["$defs"]["ScaleoutDesign"]["properties"]["port_rate"]
    >>> rate["examples"]
    ['400 Gb/s /dir', '800 Gb/s bidir']
    """
    defs: dict[str, Any] = {}
    top = record_schema(Design, defs)
    return {
        "$schema": DIALECT,
        "title": "topomodel design file",
        **top,
        "$defs": dict(sorted(defs.items())),
    }


def catalog_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of a catalog file, from the catalog record classes.

    A catalog file maps entry kinds (``switches``, ``nics``, ...) to entries by id; each
    entry's keys are those of its record class (:data:`~topomodel.inputs.catalog.ENTRY_TYPES`).
    The loader also checks what JSON Schema cannot: references between entries, a
    bandwidth's unit kind, figures that must agree (ports x port rate and capacity).

    Examples
    --------
    >>> schema = catalog_schema()
    >>> schema["title"], schema["additionalProperties"]
    ('topomodel catalog file', False)
    >>> switch = schema["$defs"]["Switch"]
    >>> sorted(set(switch["required"]) - {"source", "provenance"})
    ['port_rate', 'ports', 'protocol']
    >>> schema["properties"]["switches"]["additionalProperties"]
    {'$ref': '#/$defs/Switch'}
    """
    defs: dict[str, Any] = {}
    sections: dict[str, Any] = {}
    for section, cls in ENTRY_TYPES.items():
        name = cls.__name__
        if name not in defs:
            defs[name] = {}
            defs[name] = record_schema(cls, defs)
        sections[section] = {
            "description": f"{section.replace('_', ' ')}: a mapping from an id (lower case"
                           " letters, digits, '.', '-' or '_') to its entry.",
            "type": "object",
            "propertyNames": {"pattern": ENTRY_ID_RE.pattern},
            "additionalProperties": {"$ref": f"#/$defs/{name}"},
        }
    defs["Price"] = record_schema(Price, defs)
    sections[PRICE_SECTION] = {
        "description": "prices: a mapping from a part's id to its price per item"
                       " (replacing an earlier file's price of that part).",
        "type": "object",
        "propertyNames": {"pattern": ENTRY_ID_RE.pattern},
        "additionalProperties": {"$ref": "#/$defs/Price"},
    }
    return {
        "$schema": DIALECT,
        "title": "topomodel catalog file",
        "description": "A topomodel hardware catalog: entries by kind and id, every figure"
                       " a string with a unit and a direction, with its source and"
                       " provenance (see docs/catalog-format.md).",
        "type": "object",
        "properties": sections,
        "additionalProperties": False,
        "$defs": dict(sorted(defs.items())),
    }


def record_schema(cls: type, defs: dict[str, Any]) -> dict[str, Any]:
    """The object schema of record class ``cls``; nested records are added to ``defs``.

    Raises
    ------
    TypeError
        If a field's reader is not one this module knows how to describe.
    """
    properties: dict[str, Any] = {}
    required: list[str] = []
    for key, f in records.yaml_keys(cls).items():
        reader = f.metadata["read"]
        try:
            schema = reader_schema(reader, defs)
        except TypeError as exc:
            raise TypeError(f"{cls.__name__}.{f.name}: {exc}") from None
        schema.update(_FIELD_RULES.get((cls, key), {}))
        description = _describe_field(cls, key, f, reader, schema)
        if description:
            schema = {"description": description, **schema}
        required_key = (f.default is dataclasses.MISSING
                        and f.default_factory is dataclasses.MISSING)
        if required_key:
            required.append(key)
        else:
            default = _default(f, reader)
            if default is not None:
                schema["default"] = default
        schema.pop("_hint", None)
        properties[key] = schema
    out: dict[str, Any] = {}
    summary = _summary(cls)
    if summary:
        out["description"] = summary
    out["type"] = "object"
    out["properties"] = properties
    if required:
        out["required"] = required
    out["additionalProperties"] = False
    out.update(_RULES.get(cls, {}))
    return out


def reader_schema(reader: Callable[..., Any], defs: dict[str, Any]) -> dict[str, Any]:
    """The schema fragment for values read by ``reader`` (a :mod:`topomodel.inputs.records` reader).

    The fragment may carry a private ``_hint`` (a sentence for the description), which
    :func:`record_schema` removes.

    Examples
    --------
    >>> from topomodel.inputs.records import choice, integer, list_of
    >>> reader_schema(list_of(integer(2)), {})
    {'type': 'array', 'items': {'type': 'integer', 'minimum': 2}, 'minItems': 1}
    >>> reader_schema(choice("a", "b"), {})["enum"]
    ['a', 'b']
    """
    simple = _SIMPLE.get(reader)
    if simple is not None:
        return simple()
    factory = reader.__qualname__.split(".<locals>.", 1)[0]
    describe = _FACTORIES.get(factory)
    if describe is None or reader.__module__ != records.__name__:
        raise TypeError(f"no schema for reader {reader.__module__}.{reader.__qualname__};"
                        " teach topomodel.inputs.schema about it")
    return describe(reader, defs)


# Readers made by a factory: their arguments come from the closure -----------------------


def _closure(reader: Callable[..., Any], *names: str) -> list[Any]:
    """Values of the free variables ``names`` of ``reader``."""
    cells = dict(zip(reader.__code__.co_freevars, reader.__closure__ or (), strict=True))
    missing = [name for name in names if name not in cells]
    if missing:
        raise TypeError(f"reader {reader.__qualname__} has no closure variable(s) {missing}")
    return [cells[name].cell_contents for name in names]


def _choice(reader: Callable[..., Any], _: dict[str, Any]) -> dict[str, Any]:
    (options,) = _closure(reader, "options")
    return {"type": "string", "enum": list(options)}


def _integer(reader: Callable[..., Any], _: dict[str, Any]) -> dict[str, Any]:
    (minimum,) = _closure(reader, "minimum")
    return {"type": "integer", "minimum": minimum}


def _quantity(reader: Callable[..., Any], _: dict[str, Any]) -> dict[str, Any]:
    (kind_name,) = _closure(reader, "kind")
    kind = KINDS[kind_name]
    sign = "[+-]?" if kind.sign == "any" else r"\+?"
    what = kind_name.replace("_", " ")
    return {
        "type": "string",
        "pattern": rf"^\s*{sign}{_NUMBER}\s*{_UNIT}.*$",
        "examples": [kind.example],
        "_hint": f"A {what}: a string with a unit, e.g. '{kind.example}' (stored in"
                 f" {kind.canonical}).",
    }


def _ref(reader: Callable[..., Any], _: dict[str, Any]) -> dict[str, Any]:
    (kind,) = _closure(reader, "kind")
    section = KIND_NAMES.get(kind, kind)
    return {"type": "string", "pattern": r"\S",
            "_hint": f"The id of a catalog '{section}' entry."}


def _list_of(reader: Callable[..., Any], defs: dict[str, Any]) -> dict[str, Any]:
    item, min_len = _closure(reader, "item", "min_len")
    items = reader_schema(item, defs)
    hint = items.pop("_hint", None)
    out: dict[str, Any] = {"type": "array", "items": items, "minItems": min_len}
    if hint:
        out["_hint"] = f"A list; each item: {hint[0].lower()}{hint[1:]}"
    return out


def _mapping_of(reader: Callable[..., Any], defs: dict[str, Any]) -> dict[str, Any]:
    keys, value = _closure(reader, "keys", "value")
    values = reader_schema(value, defs)
    hint = values.pop("_hint", None)
    out: dict[str, Any] = {"type": "object",
                           "properties": {key: dict(values) for key in keys},
                           "additionalProperties": False, "minProperties": 1}
    out["_hint"] = f"A mapping from one of {', '.join(keys)}" + (
        f" to a value; each value: {hint[0].lower()}{hint[1:]}" if hint else ".")
    return out


def _record(reader: Callable[..., Any], defs: dict[str, Any]) -> dict[str, Any]:
    (cls,) = _closure(reader, "cls")
    name = cls.__name__
    if name not in defs:
        defs[name] = {}  # reserve the name first: a record that refers to itself ends here
        defs[name] = record_schema(cls, defs)
    return {"$ref": f"#/$defs/{name}"}


_FACTORIES: dict[str, Callable[[Callable[..., Any], dict[str, Any]], dict[str, Any]]] = {
    "choice": _choice,
    "integer": _integer,
    "quantity": _quantity,
    "ref": _ref,
    "list_of": _list_of,
    "mapping_of": _mapping_of,
    "record": _record,
}


# Readers that are plain functions ---------------------------------------------------------


def _ci(word: str) -> str:
    """A case-insensitive regular expression for ``word`` (ECMA-262 has no ``(?i)``)."""
    return "".join(f"[{c.lower()}{c.upper()}]" if c.isalpha() else c for c in word)


_DIRECTION = "(?:{}|{}[ -]{}|{})".format(
    "/" + _ci("dir"), _ci("per"), _ci("direction"), _ci("bidir") + "(?:" + _ci("ectional") + ")?")


def _bandwidth() -> dict[str, Any]:
    return {
        "type": "string",
        "pattern": rf"^\s*\+?{_NUMBER}\s*{_UNIT}.*?\s*{_DIRECTION}\s*$",
        "examples": ["400 Gb/s /dir", "800 Gb/s bidir"],
        "_hint": "A bandwidth with a unit and its direction: '/dir' (per direction) or"
                 " 'bidir' (both directions added), e.g. '400 Gb/s /dir'.",
    }


def _oversubscription() -> dict[str, Any]:
    return {
        "type": "string",
        "pattern": rf"^\s*{_NUMBER}\s*:\s*{_NUMBER}\s*$",
        "examples": ["1:1", "3:1"],
        "_hint": "An oversubscription 'down:up' of bandwidth, down >= up, e.g. '3:1'"
                 " ('1:1' is non-blocking).",
    }


def _figure_provenance() -> dict[str, Any]:
    return {"type": "object", "additionalProperties": {"type": "string",
                                                       "enum": list(PROVENANCES)},
            "minProperties": 1,
            "_hint": "A mapping from a key of this entry to its provenance, where it"
                     " differs from the entry's."}


def _curve() -> dict[str, Any]:
    size, busbw = (reader_schema(records.quantity(kind), {}) for kind in ("size", "rate"))
    for part in (size, busbw):
        part.pop("_hint")
    return {"type": "array", "minItems": 2,
            "items": {"type": "array", "prefixItems": [size, busbw], "items": False,
                      "minItems": 2},
            "_hint": "A list of [size, busbw] pairs, sizes strictly increasing: the"
                     " size as nccl-tests counts it and busbw as it defines it, e.g."
                     " ['64 MiB', '166.63 GB/s']."}


def _price_range() -> dict[str, Any]:
    price = reader_schema(records.quantity("price"), {})
    price.pop("_hint")
    return {"type": "array", "prefixItems": [price, price], "items": False,
            "minItems": 2, "_hint": "[low, high] per item, e.g. ['20000 USD', '40000 USD']."}


_SIMPLE: dict[Any, Callable[[], dict[str, Any]]] = {
    records.text: lambda: {"type": "string", "pattern": r"\S"},
    provenance_map: _figure_provenance,
    records.boolean: lambda: {"type": "boolean"},
    records.fraction: lambda: {"type": "number", "exclusiveMinimum": 0, "maximum": 1},
    records.bandwidth: _bandwidth,
    ratio_reader: _oversubscription,
    curve_points: _curve,
    price_range: lambda: _price_range(),
    date_text: lambda: {"type": "string", "pattern": r"^[0-9]{4}(-[0-9]{2})?$"},
}


# Descriptions and defaults ----------------------------------------------------------------


def _summary(cls: type) -> str:
    """The first line of a class docstring, without reST markup."""
    if cls is Design:
        return ("A topomodel design file: one cluster, made of systems from the hardware"
                " catalog (see docs/design-files.md).")
    doc = inspect.getdoc(cls) or ""
    return doc.splitlines()[0].strip().replace("``", "") if doc else ""


def _describe_field(cls: type, key: str, f: dataclasses.Field[Any],
                    reader: Callable[..., Any], schema: dict[str, Any]) -> str:
    parts = []
    doc = f.metadata.get("doc") or _DOCS.get((cls, key), "")
    if doc:
        parts.append(doc[0].upper() + doc[1:] + ("" if doc.endswith(".") else "."))
    elif "$ref" in schema:
        cls = _closure(reader, "cls")[0]
        parts.append(_summary(cls))
    hint = schema.get("_hint")
    if hint:
        parts.append(hint)
    return " ".join(parts)


def _default(f: dataclasses.Field[Any], reader: Callable[..., Any]) -> Any:
    """The field's default as a design file would write it, or None if it has none.

    A default is given only when reading it back gives the field's default: ``None``,
    empty lists and nested records have no written form.
    """
    value = f.default if f.default is not dataclasses.MISSING else (
        f.default_factory() if f.default_factory is not dataclasses.MISSING else None)
    if value is None or (isinstance(value, tuple | list | dict) and not value):
        return None
    if dataclasses.is_dataclass(value):
        return None
    written: Any = value
    kind = getattr(reader, "kind", None)
    if isinstance(value, float) and kind in KINDS:
        written = f"{value:g} {KINDS[kind].canonical}"
    elif isinstance(value, tuple):
        written = list(value)
    try:
        back = reader(Reading(Source("<default>", None)), (), written)
    except Invalid:
        return None
    return written if back == value else None
