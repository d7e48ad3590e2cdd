"""Strict YAML loading that remembers where every key came from.

PyYAML alone keeps the last of two duplicate keys, reads ``on``/``yes`` as booleans and
would build objects from tags with an unsafe loader. This module composes the document
with the safe loader, refuses duplicate keys, reads only ``true``/``false`` as booleans,
and records the line of every key path so errors can point at it.

The work a document can ask for is bounded before it is done
(:mod:`topomodel.limits`): its length, how deep it nests and how many nodes it expands
to, with each alias counted every time it repeats a node (a "billion laughs" of nested
aliases stops at the limit); an alias inside its own anchor is refused.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from topomodel.errors import InputError, Problem
from topomodel.files import read_input_text
from topomodel.limits import MAX_YAML_CHARACTERS, MAX_YAML_DEPTH, MAX_YAML_NODES

KeyPath = tuple[str | int, ...]
_PLAIN_KEY = re.compile(r"^[A-Za-z0-9_-]+$")


class _StrictLoader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]
    """Safe loader with YAML 1.2 booleans (``yes``/``on`` stay strings)."""


_StrictLoader.yaml_implicit_resolvers = {
    first: [
        (tag, regexp)
        for tag, regexp in resolvers
        if tag != "tag:yaml.org,2002:bool"
    ]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_StrictLoader.add_implicit_resolver(
    "tag:yaml.org,2002:bool",
    re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"),
    list("tTfF"),
)


def format_path(path: KeyPath) -> str:
    """``("a", 0, "b")`` as ``a[0].b``.

    Examples
    --------
    >>> format_path(("switches", "qm9700", "breakouts", 0, "ports"))
    'switches.qm9700.breakouts[0].ports'
    """
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        elif not _PLAIN_KEY.match(part):
            out += f"[{part!r}]"  # a key with spaces, newlines or dots stays readable
        else:
            out += f".{part}" if out else part
    return out


@dataclass
class Source:
    """A loaded YAML document, the line of each key path, and problems found so far."""

    file: str
    data: Any
    lines: dict[KeyPath, int] = field(default_factory=dict)
    problems: list[Problem] = field(default_factory=list)

    def line(self, path: KeyPath) -> int | None:
        """Line of ``path``, or of its nearest recorded ancestor."""
        while path:
            if path in self.lines:
                return self.lines[path]
            path = path[:-1]
        return self.lines.get((), None)

    def problem(self, path: KeyPath, message: str) -> None:
        """Record a problem at ``path``."""
        self.problems.append(Problem(self.file, self.line(path), format_path(path), message))

    def raise_if_problems(self, error: type[InputError] = InputError) -> None:
        """Raise ``error`` with every recorded problem, if there are any."""
        if self.problems:
            raise error(self.problems)


def load_yaml(path: str | Path, *, text: str | None = None,
              error: type[InputError] = InputError) -> Source:
    """Load one YAML file strictly.

    Parameters
    ----------
    path
        The file; also the name used in messages when ``text`` is given.
    text
        The document itself, if it is not to be read from ``path``.
    error
        The :class:`InputError` subclass raised for problems.

    Raises
    ------
    InputError
        For an unreadable file, a YAML syntax error, a tag that is not plain data, a
        scalar its tag cannot read (``!!int abc``), a duplicate key (every duplicate is
        reported), a recursive alias, or a document above the limits of
        :mod:`topomodel.limits` (characters, nesting depth, nodes after aliases).

    Examples
    --------
    >>> src = load_yaml("x.yaml", text="a:\\n  b: 1\\n  c: on\\n")
    >>> src.data, src.lines[("a", "c")]
    ({'a': {'b': 1, 'c': 'on'}}, 3)
    >>> load_yaml("x.yaml", text="a: 1\\na: 2\\n")
    Traceback (most recent call last):
    ...
    topomodel.errors.InputError: x.yaml:2: a: duplicate key (first at line 1)
    """
    name = str(path)
    if text is None:
        try:
            text = read_input_text(path)  # a regular file, of a bounded size
        except (OSError, UnicodeDecodeError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            raise error([Problem(name, None, "", f"cannot read the file: {reason}")]) from None
        except ValueError:  # a NUL byte in the name
            raise error([Problem(name.replace("\0", "\\0"), None, "",
                                 "cannot read the file: its name holds a NUL byte")]) from None
    if len(text) > MAX_YAML_CHARACTERS:
        raise error([Problem(name, None, "", f"the document is {len(text):,} characters,"
                             f" more than the limit of {MAX_YAML_CHARACTERS:,}"
                             " (topomodel.limits.MAX_YAML_CHARACTERS)")])
    try:
        loader = _StrictLoader(text)
        try:
            root = loader.get_single_node()
            source = Source(name, None)
            if root is not None:
                source.lines[()] = root.start_mark.line + 1
                source.data = _to_python(root, (), loader, source, _Walk())
        finally:
            loader.dispose()
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else None
        what = exc.problem or exc.context or "invalid YAML"
        raise error([Problem(name, line, "", f"invalid YAML: {what}")]) from None
    except yaml.YAMLError as exc:
        reason = str(exc).splitlines()[0]
        raise error([Problem(name, None, "", f"invalid YAML: {reason}")]) from None
    except (ValueError, TypeError, AttributeError):
        # PyYAML's constructors fail so on a scalar they cannot hold: an integer of over
        # 4,300 digits, an explicit tag on a value it does not fit (!!timestamp null)
        raise error([Problem(name, None, "", "invalid YAML: a value that cannot be read"
                             " (an integer of thousands of digits, or a tag that does not"
                             " fit its value)")]) from None
    source.raise_if_problems(error)
    return source


_PLAIN_TAGS = ("tag:yaml.org,2002:map", "tag:yaml.org,2002:seq")


@dataclass
class _Walk:
    """What the conversion has done so far: nodes made, and the collections open above
    the current node (by id: an alias is the same node object as its anchor)."""

    nodes: int = 0
    open: set[int] = field(default_factory=set)


def _refuse(node: yaml.Node, message: str) -> yaml.MarkedYAMLError:
    return yaml.constructor.ConstructorError(None, None, message, node.start_mark)


def _to_python(node: yaml.Node, path: KeyPath, loader: _StrictLoader, source: Source,
               walk: _Walk) -> Any:
    walk.nodes += 1
    if walk.nodes > MAX_YAML_NODES:
        raise _refuse(node, f"the document expands to more than {MAX_YAML_NODES:,} nodes"
                      " (topomodel.limits.MAX_YAML_NODES; an alias counts each time it"
                      " repeats its anchor)")
    if isinstance(node, yaml.CollectionNode):
        if node.tag not in _PLAIN_TAGS:
            raise _refuse(node, f"could not determine a constructor for the tag {node.tag!r}")
        if id(node) in walk.open:
            raise _refuse(node, "a recursive alias: an anchor used inside itself")
        if len(walk.open) >= MAX_YAML_DEPTH:
            raise _refuse(node, f"nested more than {MAX_YAML_DEPTH} levels deep"
                          " (topomodel.limits.MAX_YAML_DEPTH)")
        walk.open.add(id(node))
        try:
            return _collection(node, path, loader, source, walk)
        finally:
            walk.open.discard(id(node))
    try:
        return loader.construct_object(node, deep=True)
    except (ValueError, TypeError, KeyError, AttributeError, OverflowError):
        # an explicit tag its constructor cannot read: !!int abc, !!float x, 0x_
        source.problem(path, f"cannot read {node.value!r} as {node.tag.rsplit(':', 1)[-1]}")
        return None


def _collection(node: yaml.CollectionNode, path: KeyPath, loader: _StrictLoader,
                source: Source, walk: _Walk) -> Any:
    if isinstance(node, yaml.MappingNode):
        result: dict[Any, Any] = {}
        for key_node, value_node in node.value:
            line = key_node.start_mark.line + 1
            key = None if isinstance(key_node, yaml.CollectionNode) else _to_python(
                key_node, path, loader, source, walk)
            if not isinstance(key, str | int | float | bool) or key_node.tag.endswith(":merge"):
                source.problems.append(Problem(source.file, line, format_path(path),
                                               f"unsupported key {_key_text(key_node)}"))
                continue
            key = str(key)
            key_path = (*path, key)
            if key in result:
                source.problems.append(Problem(
                    source.file, line, format_path(key_path),
                    f"duplicate key (first at line {source.lines[key_path]})"))
                continue
            source.lines[key_path] = line
            result[key] = _to_python(value_node, key_path, loader, source, walk)
        return result
    items = []
    for index, item in enumerate(node.value):
        source.lines.setdefault((*path, index), item.start_mark.line + 1)
        items.append(_to_python(item, (*path, index), loader, source, walk))
    return items


def _key_text(node: yaml.Node) -> str:
    """A refused key as the file writes it, cut short."""
    if isinstance(node, yaml.ScalarNode):
        text = repr(node.value)
    else:
        text = "a mapping" if isinstance(node, yaml.MappingNode) else "a list"
    return text if len(text) <= 40 else text[:37] + "..."
