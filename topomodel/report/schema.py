"""``topomodel schema``: the JSON Schema of an input format, bare (``--format json``) or
as a table of its keys (type, default, meaning) for people and spreadsheets."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from topomodel.report.output import Report, Table

SCHEMA_FORMATS = ("design", "catalog", "sweep")
"""The input formats with a published JSON Schema."""


def input_schema(what: str) -> dict[str, Any]:
    """The JSON Schema of ``what`` (one of :data:`SCHEMA_FORMATS`)."""
    if what == "design":
        from topomodel.inputs.schema import design_schema

        return design_schema()
    if what == "catalog":
        from topomodel.inputs.schema import catalog_schema

        return catalog_schema()
    from topomodel.sweep.schema import sweep_schema

    return sweep_schema()


def schema_report(what: str) -> Report:
    """The schema of ``what``: bare as JSON, a key table for the other formats."""
    schema = input_schema(what)
    rows = list(schema_keys(schema))
    people = [{"key": r["key"], "type": r["type"], "required": "yes" if r["required"]
               else "", "default": "" if r["default"] is None else r["default"],
               "meaning": r["description"]} for r in rows]
    return Report("schema", schema, [Table(f"{what} file keys", people, rows, name="keys")],
                  bare_json=True)


def schema_keys(schema: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Every key of a schema's objects, depth first, as ``key`` (a dotted path; ``[]``
    for list items, ``*`` for any name), ``type``, ``required``, ``default`` and
    ``description``.

    Examples
    --------
    >>> s = {"type": "object", "required": ["a"], "properties": {
    ...     "a": {"type": "string", "description": "the a"},
    ...     "b": {"type": "array", "items": {"$ref": "#/$defs/B"}}},
    ...     "$defs": {"B": {"type": "object", "properties": {"c": {"type": "integer",
    ...                                                          "default": 2}}}}}
    >>> [(k["key"], k["type"], k["required"], k["default"]) for k in schema_keys(s)]
    [('a', 'string', True, None), ('b', 'array', False, None), ('b[].c', 'integer', False, 2)]
    """
    defs = schema.get("$defs", {})
    yield from _keys(schema, "", defs, set())


def _resolve(node: dict[str, Any], defs: dict[str, Any]) -> tuple[dict[str, Any], str]:
    ref = node.get("$ref", "")
    if ref.startswith("#/$defs/"):
        name = ref.rsplit("/", 1)[1]
        return defs[name], name
    return node, ""


def _type(node: dict[str, Any]) -> str:
    if "enum" in node:
        return "one of " + ", ".join(map(str, node["enum"]))
    if "oneOf" in node or "anyOf" in node:
        return " or ".join(_type(n) for n in node.get("oneOf", node.get("anyOf", [])))
    kind = node.get("type", "object" if "$ref" in node else "")
    return " or ".join(kind) if isinstance(kind, list) else str(kind)


def _keys(node: dict[str, Any], prefix: str, defs: dict[str, Any],
          seen: set[str]) -> Iterator[dict[str, Any]]:
    node, name = _resolve(node, defs)
    if name in seen:  # a record that refers to itself: listed once
        return
    seen = seen | ({name} if name else set())
    required = set(node.get("required", []))
    properties = dict(node.get("properties", {}))
    extra = node.get("additionalProperties")
    if isinstance(extra, dict):
        properties["*"] = extra
    for key, child in properties.items():
        path = f"{prefix}.{key}" if prefix else key
        target, _ = _resolve(child, defs)
        default = child.get("default", target.get("default"))
        yield {"key": path, "type": _type(target if "$ref" in child else child),
               "required": key in required,
               "default": json.dumps(default) if isinstance(default, dict | list) else default,
               "description": child.get("description", target.get("description", ""))}
        yield from _children(child, path, defs, seen)


def _children(node: dict[str, Any], path: str, defs: dict[str, Any],
              seen: set[str]) -> Iterator[dict[str, Any]]:
    target, _ = _resolve(node, defs)
    if target.get("type") == "array" and isinstance(target.get("items"), dict):
        yield from _keys(target["items"], f"{path}[]", defs, seen)
    elif "properties" in target or isinstance(target.get("additionalProperties"), dict):
        yield from _keys(node, path, defs, seen)
    for alternative in target.get("oneOf", target.get("anyOf", [])):
        inner, _ = _resolve(alternative, defs)
        if "properties" in inner:
            yield from _keys(alternative, path, defs, seen)
