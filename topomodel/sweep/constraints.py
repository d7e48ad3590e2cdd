"""Sweep constraints: safe expressions over a point's metrics and parameters.

A constraint such as ``comm_share <= 0.2 and fits`` is parsed with :mod:`ast` and
compiled node by node into plain functions: names (dotted ones too), numbers, text,
comparisons, ``+ - * /``, ``and``, ``or``, ``not``. Nothing else (calls, attributes of
values, indexing) is accepted, and nothing is ever passed to ``eval``. Its length and
nesting are limited (:mod:`topomodel.limits`), so a hostile expression cannot exhaust
the parser's stack.
"""

from __future__ import annotations

import ast
import operator
from collections.abc import Callable, Collection, Mapping
from functools import lru_cache
from typing import Any

from topomodel.errors import UnitError, short
from topomodel.inputs.records import Invalid, did_you_mean
from topomodel.limits import MAX_CONSTRAINT_CHARACTERS, MAX_CONSTRAINT_DEPTH
from topomodel.sweep.params import METRIC_BY_NAME

Constraint = Callable[[Mapping[str, Any]], Any]
"""A compiled constraint: the point's values (metrics and parameters by name) to its
value; raises ``KeyError`` or ``TypeError`` for a missing value."""

_OPERATORS: dict[type[ast.AST], Callable[..., Any]] = {
    ast.Lt: operator.lt, ast.LtE: operator.le, ast.Gt: operator.gt, ast.GtE: operator.ge,
    ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Add: operator.add,
    ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
    ast.Not: operator.not_, ast.USub: operator.neg, ast.UAdd: operator.pos}


def _dotted(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        inner = _dotted(node.value)
        return None if inner is None else f"{inner}.{node.attr}"
    return None


def _refused(node: ast.AST) -> Invalid:
    return Invalid(f"{type(node).__name__.lower()} is not allowed in a constraint;"
                   " use names, numbers, comparisons, + - * /, and, or, not")


def _op(node: ast.AST) -> Callable[..., Any]:
    if type(node) not in _OPERATORS:
        raise _refused(node)
    return _OPERATORS[type(node)]


def _value(values: Mapping[str, Any], name: str) -> Any:
    value = values[name]
    if value is None:
        raise TypeError(f"{name} has no value")
    return value


def _depth(node: ast.AST) -> int:
    """How deep ``node`` nests, counted without recursion."""
    deepest, stack = 0, [(node, 1)]
    while stack:
        current, depth = stack.pop()
        deepest = max(deepest, depth)
        if depth <= MAX_CONSTRAINT_DEPTH:
            stack.extend((child, depth + 1) for child in ast.iter_child_nodes(current))
    return deepest


def _compile(node: ast.expr, names: Collection[str] | None) -> Constraint:
    """``node`` checked and turned into a function of the point's values."""
    if isinstance(node, ast.Constant):
        if not isinstance(node.value, int | float | str) or node.value is None:
            raise Invalid(f"{node.value!r} is not a number or text")
        constant = node.value
        return lambda _: constant
    if isinstance(node, ast.Name | ast.Attribute):
        name = _dotted(node)
        if name is None:
            raise Invalid("only dotted parameter names (efficiency.leaf, design.X.Y) may use '.'")
        if names is not None and name not in names:
            raise Invalid(f"unknown name {name!r}: a metric or a parameter of this sweep"
                          + did_you_mean(name, names))
        return lambda v: _value(v, name)
    if isinstance(node, ast.BoolOp):
        parts = [_compile(p, names) for p in node.values]
        combine = all if isinstance(node.op, ast.And) else any
        return lambda v: combine(p(v) for p in parts)
    if isinstance(node, ast.UnaryOp):
        unary, operand = _op(node.op), _compile(node.operand, names)
        return lambda v: unary(operand(v))
    if isinstance(node, ast.BinOp):
        left, binary, right = _compile(node.left, names), _op(node.op), _compile(
            node.right, names)
        return lambda v: binary(left(v), right(v))
    if isinstance(node, ast.Compare):
        return _comparison(node, names)
    raise _refused(node)


def _comparison(node: ast.Compare, names: Collection[str] | None) -> Constraint:
    """A comparison chain; text next to a metric with a unit is read as a quantity of
    that unit's kind (``memory_bytes < "70 GB"``)."""
    operands = [node.left, *node.comparators]
    first, ops = _compile(node.left, names), [_op(o) for o in node.ops]
    parts = [first, *(_compile(o, names) for o in node.comparators)]
    metrics = (METRIC_BY_NAME.get(_dotted(o) or "") for o in operands)
    kind = next((m.kind for m in metrics if m is not None and m.kind), None)
    for i, o in enumerate(operands):
        if kind is not None and isinstance(o, ast.Constant) and isinstance(o.value, str):
            from topomodel.inputs.units import parse

            try:
                parts[i] = _compile(ast.Constant(parse(o.value, kind)), names)
            except UnitError as exc:
                raise Invalid(str(exc)) from None

    def holds(values: Mapping[str, Any]) -> bool:
        left = parts[0](values)
        for op, part in zip(ops, parts[1:], strict=True):
            right = part(values)
            if not op(left, right):
                return False
            left = right
        return True

    return holds


def compile_constraint(text: Any, names: Collection[str] | None = None) -> Constraint:
    """Parse and check a constraint such as ``comm_share <= 0.2 and fits``.

    ``names`` are the metrics and parameters it may use (default: any).

    Raises
    ------
    Invalid
        For text that is not such an expression, or names not in ``names``.

    Examples
    --------
    >>> holds = compile_constraint('memory_bytes <= "80 GB" and tp >= 2',
    ...                            {"memory_bytes", "tp"})
    >>> constraint_holds(holds, {"memory_bytes": 7e10, "tp": 4})
    True
    """
    if not isinstance(text, str) or not text.strip():
        raise Invalid("expected an expression such as 'comm_share <= 0.2'")
    if len(text) > MAX_CONSTRAINT_CHARACTERS:
        raise Invalid(f"a constraint of {len(text):,} characters is longer than the limit"
                      f" of {MAX_CONSTRAINT_CHARACTERS:,}")
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError as exc:
        raise Invalid(f"not an expression: {exc.msg} in {short(text.strip())!r}") from None
    except (RecursionError, MemoryError):
        tree = None
    if tree is None or _depth(tree) > MAX_CONSTRAINT_DEPTH:
        raise Invalid(f"the expression nests more than {MAX_CONSTRAINT_DEPTH} levels deep")
    return _compile(tree.body, names)


@lru_cache(maxsize=256)
def compiled(text: str) -> Constraint:
    """:func:`compile_constraint` of a constraint already checked, cached."""
    return compile_constraint(text)


def constraint_holds(constraint: Constraint, values: Mapping[str, Any]) -> bool:
    """Whether a compiled constraint holds; missing or NaN values make it false."""
    try:
        return bool(constraint(values))
    except (KeyError, TypeError, ZeroDivisionError):
        return False
