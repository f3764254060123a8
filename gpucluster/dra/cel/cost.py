"""Worst-case cost estimate of a selector, to reject what Kubernetes rejects as too expensive.

Kubernetes estimates every DRA selector with cel-go's ``checker.CostEstimator`` and refuses
expressions whose worst case exceeds ``resourceapi.CELSelectorExpressionMaxCost`` (1,000,000):
``too complex, exceeds cost limit`` (``pkg/apis/resource/validation``). This is a smaller model
of that estimator with the same structure: one unit per variable, field selection, index and
call, list/map literals at their creation cost, string functions proportional to string sizes
(factor 0.1), and comprehensions costing ``range + size(range) * (predicate + 2)``. Sizes come
from the declared bounds of the ``device`` variable (``compile.go``: 32 domains, 32 names per
domain, attribute values of at most 64 characters, driver names of at most 63) and from
literals; a comprehension over a value of unknown size has an unbounded cost, as in cel-go.
The numbers differ from cel-go's in detail; what matters is that bounded selectors stay far
below the limit and nested comprehensions over large ranges exceed it. Runtime costs are not
tracked: an expression that passes the estimate cannot run away.
"""

from __future__ import annotations

import math
from typing import Final

from gpucluster.dra.cel import ast

COST_LIMIT: Final = 1_000_000
UNBOUNDED: Final = float(2**64)

MAX_ATTRIBUTES_PER_DEVICE: Final = 32  # ResourceSliceMaxAttributesAndCapacitiesPerDevice
MAX_ATTRIBUTE_VALUE_LENGTH: Final = 64  # DeviceAttributeMaxValueLength
MAX_DRIVER_NAME_LENGTH: Final = 63  # DriverNameMaxLength
MAX_DOMAIN_LENGTH: Final = 63  # DeviceMaxDomainLength
MAX_ID_LENGTH: Final = 64  # DeviceMaxIDLength
MAX_SCANNED_STRING: Final = 10 * 1024  # CELSelectorExpressionMaxLength

_STRING_SCAN = frozenset(
    {
        "contains",
        "startsWith",
        "endsWith",
        "matches",
        "find",
        "findAll",
        "split",
        "replace",
        "lowerAscii",
        "upperAscii",
        "trim",
        "substring",
        "charAt",
        "indexOf",
        "lastIndexOf",
        "join",
        "format",
        "strings.quote",
        "_+_",
        "_==_",
        "_!=_",
        "_<_",
        "_<=_",
        "_>_",
        "_>=_",
    }
)
_SIZE_PRESERVING = frozenset(
    {"lowerAscii", "upperAscii", "trim", "substring", "slice", "distinct", "reverse", "sort", "strings.quote"}
)


class Estimate:
    """Cost and maximum size (elements of a list/map, characters of a string) of a value."""

    __slots__ = ("cost", "size")

    def __init__(self, cost: float, size: float) -> None:
        self.cost = cost
        self.size = size


def _add(*costs: float) -> float:
    return min(sum(costs), UNBOUNDED)


def _mul(a: float, b: float) -> float:
    return min(a * b, UNBOUNDED)


class _Estimator:
    def __init__(self) -> None:
        self.scope: dict[str, float] = {}
        self.aliases: dict[str, ast.Node] = {}

    def est(self, node: ast.Node) -> Estimate:
        method = getattr(self, "_" + type(node).__name__)
        result: Estimate = method(node)
        return result

    def _Const(self, node: ast.Const) -> Estimate:
        size = len(node.value) if isinstance(node.value, (str, bytes)) else 0
        return Estimate(0, size)

    def _Ident(self, node: ast.Ident) -> Estimate:
        return Estimate(1, self.scope.get(node.name, UNBOUNDED if node.name != "device" else 0))

    def _device_size(self, node: ast.Node) -> float | None:
        """Declared sizes below ``device`` (compile.go's sizeEstimator)."""
        path: list[str] = []
        cur = node
        while True:
            if isinstance(cur, ast.Select):
                path.append("." + cur.field)
                cur = cur.operand
            elif isinstance(cur, ast.Index):
                path.append("[]")
                cur = cur.operand
            elif isinstance(cur, ast.Ident) and cur.name in self.aliases:
                cur = self.aliases[cur.name]
            else:
                break
        if not (isinstance(cur, ast.Ident) and cur.name == "device" and "device" not in self.scope):
            return None
        path.reverse()
        if not path:
            return 0
        if path[0] == ".driver":
            return MAX_DRIVER_NAME_LENGTH
        if path[0] in (".attributes", ".capacity"):
            depth = len(path) - 1
            if depth <= 1:
                return MAX_ATTRIBUTES_PER_DEVICE
            return MAX_ATTRIBUTE_VALUE_LENGTH
        return 1

    def _Select(self, node: ast.Select) -> Estimate:
        operand = self.est(node.operand)
        size = self._device_size(node)
        return Estimate(_add(operand.cost, 1), size if size is not None else UNBOUNDED)

    def _Has(self, node: ast.Has) -> Estimate:
        return Estimate(_add(self.est(node.operand).cost, 1), 0)

    def _Index(self, node: ast.Index) -> Estimate:
        operand = self.est(node.operand)
        index = self.est(node.index)
        size = self._device_size(node)
        return Estimate(_add(operand.cost, index.cost, 1), size if size is not None else UNBOUNDED)

    def _ListLit(self, node: ast.ListLit) -> Estimate:
        elems = [self.est(e) for e in node.elements]
        return Estimate(_add(10, *(e.cost for e in elems)), len(elems))

    def _MapLit(self, node: ast.MapLit) -> Estimate:
        cost: float = 30
        for k, v, _ in node.entries:
            cost = _add(cost, self.est(k).cost, self.est(v).cost)
        return Estimate(cost, len(node.entries))

    def _StructLit(self, node: ast.StructLit) -> Estimate:
        return Estimate(40, 0)

    def _Bind(self, node: ast.Bind) -> Estimate:
        init = self.est(node.init)
        saved = dict(self.scope)
        saved_aliases = dict(self.aliases)
        self.scope[node.var] = init.size
        self.aliases[node.var] = node.init
        body = self.est(node.body)
        self.scope = saved
        self.aliases = saved_aliases
        return Estimate(_add(init.cost, body.cost, 1), body.size)

    def _Comprehension(self, node: ast.Comprehension) -> Estimate:
        rng = self.est(node.iter_range)
        saved = dict(self.scope)
        saved_aliases = dict(self.aliases)
        self.aliases.pop(node.var, None)
        if node.var2 is not None:
            self.aliases.pop(node.var2, None)
        # Elements of the range: strings of an attribute-sized bound when the range is a device
        # map, otherwise unknown.
        elem_size = MAX_ATTRIBUTE_VALUE_LENGTH if self._device_size(node.iter_range) is not None else UNBOUNDED
        if isinstance(node.iter_range, ast.ListLit):
            sizes = [self.est(e).size for e in node.iter_range.elements]
            elem_size = max(sizes, default=0)
        self.scope[node.var] = elem_size
        if node.var2 is not None:
            self.scope[node.var2] = elem_size
        body = self.est(node.body)
        flt = self.est(node.filter) if node.filter is not None else Estimate(0, 0)
        self.scope = saved
        self.aliases = saved_aliases
        if node.macro in ("optMap", "optFlatMap"):
            return Estimate(_add(rng.cost, body.cost, 1), body.size)
        per_item = _add(body.cost, flt.cost, 2)
        iterations = rng.size if node.iter_range.type is None or node.iter_range.type.kind != "optional_type" else 1
        cost = _add(rng.cost, 1, _mul(iterations, per_item))
        size = rng.size if node.macro in ("map", "filter", "transformList", "transformMap") else 0
        return Estimate(cost, size)

    def _Call(self, node: ast.Call) -> Estimate:
        args = [self.est(a) for a in ([node.target] if node.target is not None else []) + node.args]
        cost = _add(1, *(a.cost for a in args))
        name = node.function
        sizes = [a.size for a in args]
        if (
            name in _STRING_SCAN
            and node.args
            and all(
                a.type is None or a.type.kind in ("string", "bytes", "any", "dyn")
                for a in ([node.target] if node.target is not None else []) + node.args
            )
        ):
            # Strings of unknown size are bounded by what an expression can build in practice.
            cost = _add(cost, math.ceil(min(max(sizes, default=0), MAX_SCANNED_STRING) * 0.1))
        size: float = 0
        if name in ("_+_",):
            size = _add(*sizes)
        elif name in ("split", "findAll"):
            size = _add(sizes[0], 1)
        elif name == "replace":
            size = _mul(_add(sizes[0], 1), max(sizes[2], 1))
        elif name in _SIZE_PRESERVING:
            size = sizes[0]
        elif name == "join":
            size = _mul(sizes[0], _add(MAX_ATTRIBUTE_VALUE_LENGTH, sizes[1] if len(sizes) > 1 else 0))
        elif name == "flatten":
            size = _mul(sizes[0], MAX_ATTRIBUTE_VALUE_LENGTH)
        elif name == "lists.range":
            arg = node.args[0]
            size = float(arg.value) if isinstance(arg, ast.Const) and type(arg.value) is int else UNBOUNDED
            cost = _add(cost, size)
        elif name in ("_?_:_",):
            size = max(sizes[1], sizes[2])
        elif name in ("format", "string", "strings.quote"):
            size = UNBOUNDED if name == "format" else _add(sizes[0], 32)
        elif name in ("@in", "sets.contains", "sets.equivalent", "sets.intersects", "indexOf", "lastIndexOf"):
            if node.args and node.args[-1].type is not None and node.args[-1].type.kind in ("list",):
                cost = _add(cost, sizes[-1])
            if name.startswith("sets."):
                cost = _add(cost, _mul(sizes[0], sizes[1]))
        elif name in ("isSorted", "sum", "min", "max", "distinct", "sort"):
            cost = _add(cost, sizes[0] if name != "distinct" else _mul(sizes[0], sizes[0]))
        if name in ("_==_", "_!=_") and any(a.type is not None and a.type.kind in ("list", "map") for a in node.args):
            cost = _add(cost, max(sizes))
        return Estimate(cost, size)


def estimate_cost(root: ast.Node) -> float:
    """The worst-case cost of evaluating a checked expression (may be ``UNBOUNDED``)."""
    return _Estimator().est(root).cost


def is_unbounded(cost: float) -> bool:
    return cost >= UNBOUNDED or not math.isfinite(cost)
