"""The CEL abstract syntax tree produced by :mod:`gpucluster.dra.cel.parser`.

Macros are expanded into dedicated nodes (``Has``, ``Comprehension``, ``Bind``) instead of
cel-go's generic fold so that the code generator can emit straight-line Python for them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gpucluster.dra.cel.types import Type


@dataclass(eq=False)
class Node:
    line: int
    column: int
    # Filled in by the checker.
    type: Type | None = field(default=None, init=False, repr=False)


@dataclass(eq=False)
class Const(Node):
    value: Any


@dataclass(eq=False)
class Ident(Node):
    name: str


@dataclass(eq=False)
class Select(Node):
    operand: Node
    field: str
    optional: bool = False  # x.?field


@dataclass(eq=False)
class Has(Node):
    operand: Node
    field: str


@dataclass(eq=False)
class Index(Node):
    operand: Node
    index: Node
    optional: bool = False  # x[?key]


@dataclass(eq=False)
class Call(Node):
    function: str
    target: Node | None
    args: list[Node]
    # Filled in by the checker: the overload ids that may apply.
    overloads: tuple[str, ...] = field(default=(), init=False, repr=False)


@dataclass(eq=False)
class ListLit(Node):
    elements: list[Node]
    optional_indices: frozenset[int] = frozenset()


@dataclass(eq=False)
class MapLit(Node):
    entries: list[tuple[Node, Node, bool]]  # key, value, optional entry


@dataclass(eq=False)
class StructLit(Node):
    name: str
    fields: list[tuple[str, Node]]


@dataclass(eq=False)
class Comprehension(Node):
    """A macro over a list or map: all, exists, exists_one, map, filter (one or two variables)."""

    macro: str  # all | exists | exists_one | map | filter | transformList | transformMap
    iter_range: Node
    var: str
    var2: str | None
    body: Node  # predicate or transform
    filter: Node | None = None  # map(x, filter, transform) / transformList(i, v, filter, transform)


@dataclass(eq=False)
class Bind(Node):
    """cel.bind(var, init, body)."""

    var: str
    init: Node
    body: Node


def children(node: Node) -> list[Node]:
    """Direct sub-expressions of a node, in evaluation order."""
    if isinstance(node, (Select, Has)):
        return [node.operand]
    if isinstance(node, Index):
        return [node.operand, node.index]
    if isinstance(node, Call):
        return ([node.target] if node.target is not None else []) + list(node.args)
    if isinstance(node, ListLit):
        return list(node.elements)
    if isinstance(node, MapLit):
        out: list[Node] = []
        for k, v, _ in node.entries:
            out += [k, v]
        return out
    if isinstance(node, StructLit):
        return [v for _, v in node.fields]
    if isinstance(node, Comprehension):
        return [node.iter_range, node.body] + ([node.filter] if node.filter is not None else [])
    if isinstance(node, Bind):
        return [node.init, node.body]
    return []
