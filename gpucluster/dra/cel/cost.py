"""Worst-case cost estimate of a selector, computed as Kubernetes computes it.

Kubernetes estimates every DRA selector with cel-go's ``checker.Cost`` together with
``k8s.io/apiserver/pkg/cel/library.CostEstimator`` and the DRA size estimator of
``dynamic-resource-allocation/cel/compile.go``, and refuses expressions whose worst case exceeds
``resourceapi.CELSelectorExpressionMaxCost`` (1,000,000): ``too complex, exceeds cost limit``.
This module ports those rules (it reproduces the ``expectCost`` figures of ``compile_test.go``):

* identifiers and field selections on maps/objects cost 1, constants 0, ``has()`` its operand
  (the base environment's ``PresenceTestHasCost(false)``); list/map/object literals cost 10/30/40 plus their parts;
* calls cost 1 plus their arguments, except where a size-dependent rule applies: string
  comparisons and ``==``/``!=`` cost ``ceil(0.1 * smaller size)``, string ``+`` ``ceil(0.1 *
  result size)``, ``contains`` the product of both traversals, ``matches``/``find`` the string
  traversal times ``ceil(0.25 * regex length)``, ``in`` over a list its size, and the Kubernetes
  library functions (``split``, ``replace``, ``join``, ``lowerAscii``, ``indexOf``, ``sum`` ...)
  as ``library.CostEstimator`` says;
* macros cost what their cel-go expansion costs: range + accumulator init + result +
  ``size(range) * (loop condition + loop step)`` (``all``: 3 + predicate per element,
  ``exists``: 4 + predicate, ``exists_one``: 2 + predicate, ``map``: 12 + transform);
  ``cel.bind`` costs its empty range (10), its initializer and its body;
* sizes come from literals, from results of sized calls and from the declared maxima of
  ``device`` (driver 63 characters, 32 attribute/capacity domains of at most 63 characters, 32
  names per domain of at most 64, attribute values of at most 64); a size nobody bounds is
  2^64-1 and so is every cost derived from it (saturating, as cel-go's uint64 arithmetic).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Final

from gpucluster.dra.cel import ast
from gpucluster.dra.cel.types import Type

COST_LIMIT: Final = 1_000_000  # resourceapi.CELSelectorExpressionMaxCost
U64: Final = 2**64 - 1
UNBOUNDED: Final = float(2**64)

MAX_ATTRIBUTES_PER_DEVICE: Final = 32  # ResourceSliceMaxAttributesAndCapacitiesPerDevice
MAX_ATTRIBUTE_VALUE_LENGTH: Final = 64  # DeviceAttributeMaxValueLength
MAX_DRIVER_NAME_LENGTH: Final = 63  # DriverNameMaxLength
MAX_DOMAIN_LENGTH: Final = 63  # DeviceMaxDomainLength
MAX_ID_LENGTH: Final = 64  # DeviceMaxIDLength
MAX_ATTRIBUTE_VALUES: Final = 48  # ResourceSliceMaxAttributeValuesPerDevice (DRAListTypeAttributes)

STRING_TRAVERSAL: Final = 0.1  # common.StringTraversalCostFactor
REGEX_LENGTH: Final = 0.25  # common.RegexStringLengthCostFactor
LIST_CREATE: Final = 10
MAP_CREATE: Final = 30
STRUCT_CREATE: Final = 40

Size = tuple[int, int]  # min, max
UNKNOWN: Final[Size] = (0, U64)


def _add(a: int, b: int) -> int:
    return min(a + b, U64)


def _mul(a: int, b: int) -> int:
    return min(a * b, U64)


def _factor(x: int, f: float) -> int:
    """cel-go's multiplyByCostFactor: rounded up, saturating."""
    if x > 0 and f > 0 and x > U64 / f:
        return U64
    c = math.ceil(x * f)
    return U64 if c >= 2**64 else int(c)


def _union(a: Size, b: Size) -> Size:
    return (min(a[0], b[0]), max(a[1], b[1]))


# The declared type of ``device`` as compile.go's size estimator walks it: MaxElements per node.
@dataclass(frozen=True)
class _Decl:
    max: int
    fields: dict[str, _Decl] | None = None
    key: _Decl | None = None
    elem: _Decl | None = None


_ATTRIBUTE = _Decl(MAX_ATTRIBUTE_VALUE_LENGTH)
_QUANTITY = _Decl(0)
_INNER_ATTRIBUTES = _Decl(MAX_ATTRIBUTES_PER_DEVICE, key=_Decl(MAX_ID_LENGTH), elem=_ATTRIBUTE)
_OUTER_ATTRIBUTES = _Decl(MAX_ATTRIBUTES_PER_DEVICE, key=_Decl(MAX_DOMAIN_LENGTH), elem=_INNER_ATTRIBUTES)
_INNER_CAPACITY = _Decl(MAX_ATTRIBUTES_PER_DEVICE, key=_Decl(MAX_ID_LENGTH), elem=_QUANTITY)
_OUTER_CAPACITY = _Decl(MAX_ATTRIBUTES_PER_DEVICE, key=_Decl(MAX_DOMAIN_LENGTH), elem=_INNER_CAPACITY)
_DEVICE = _Decl(
    0,
    fields={
        "driver": _Decl(MAX_DRIVER_NAME_LENGTH),
        "attributes": _OUTER_ATTRIBUTES,
        "capacity": _OUTER_CAPACITY,
        "allowMultipleAllocations": _Decl(1),
    },
)


def _declared_size(path: tuple[str, ...]) -> Size | None:
    """compile.go's sizeEstimator.EstimateSize: the maximum size along a path from ``device``."""
    if not path or path[0] != "device":
        return None
    node = _DEVICE
    for name in path[1:]:
        nxt: _Decl | None
        if name in ("@items", "@values"):
            nxt = node.elem
        elif name == "@keys":
            nxt = node.key
        elif node.fields is not None and name in node.fields:
            nxt = node.fields[name]
        else:
            # Any name in a domain's attribute map has the attribute value bound.
            nxt = _ATTRIBUTE if node.elem is _ATTRIBUTE else None
        if nxt is None:
            return None
        node = nxt
    return (0, node.max)


_SCALARS = frozenset({"bool", "double", "int", "uint", "google.protobuf.Timestamp", "google.protobuf.Duration"})


def _is_scalar(typ: Type | None) -> bool:
    if typ is None:
        return False
    if typ.kind == "optional_type" and typ.params:
        return _is_scalar(typ.params[0])
    return typ.kind in _SCALARS


def _kind(node: ast.Node) -> str:
    return node.type.kind if node.type is not None else "dyn"


@dataclass
class _Entry:
    """Sizes of the keys (or indices) and values of a literal container."""

    container: str  # list | map
    key: Size
    val: Size


@dataclass
class _Var:
    path: tuple[str, ...]
    size: Size | None
    entry: _Entry | None


class _Coster:
    def __init__(self) -> None:
        # Keyed by id() of AST nodes: one _Coster lives for one estimate_cost call, during which
        # the caller holds the whole tree, so no id can be reused while these maps exist.
        self.paths: dict[int, tuple[str, ...]] = {}
        self.sizes: dict[int, Size] = {}
        self.entries: dict[int, _Entry] = {}
        self.scopes: dict[str, list[_Var]] = {}

    # -- bookkeeping (cel-go's exprPaths, computedSizes, computedEntrySizes, localVars) --------

    def push(self, name: str, var: _Var) -> None:
        self.scopes.setdefault(name, []).append(var)

    def pop(self, name: str) -> None:
        self.scopes[name].pop()

    def peek(self, name: str) -> _Var | None:
        stack = self.scopes.get(name)
        return stack[-1] if stack else None

    def path(self, node: ast.Node) -> tuple[str, ...]:
        if isinstance(node, ast.Ident):
            var = self.peek(node.name)
            if var is not None:
                return var.path
        return self.paths.get(id(node), ())

    def entry(self, node: ast.Node) -> _Entry | None:
        found = self.entries.get(id(node))
        if found is not None:
            return found
        if isinstance(node, ast.Ident):
            var = self.peek(node.name)
            if var is not None:
                return var.entry
        return None

    def size(self, node: ast.Node | None) -> Size | None:
        """cel-go's computeSize: computed, literal, declared, scalar, then local variable sizes."""
        if node is None:
            return None
        found = self.sizes.get(id(node))
        if found is not None:
            return found
        if isinstance(node, ast.Const):
            v = node.value
            if isinstance(v, str):
                return (len(v), len(v))
            if isinstance(v, bytes):
                return (len(v), len(v))
            return (1, 1)
        if isinstance(node, ast.ListLit):
            return (len(node.elements), len(node.elements))
        if isinstance(node, ast.MapLit):
            return (len(node.entries), len(node.entries))
        declared = _declared_size(self.path(node))
        if declared is not None:
            self.sizes[id(node)] = declared
            return declared
        if _is_scalar(node.type):
            return (1, 1)
        if isinstance(node, ast.Ident):
            var = self.peek(node.name)
            if var is not None and var.size is not None:
                return var.size
        return None

    def sz(self, node: ast.Node | None) -> Size:
        found = self.size(node)
        return found if found is not None else UNKNOWN

    def element_size(self, target: ast.Node) -> Size:
        """library.CostEstimator.listElementNode's size: the declared size of ``target[*]``."""
        path = self.path(target)
        declared = _declared_size((*path, "@items")) if path else None
        return declared if declared is not None else UNKNOWN

    def element_kind(self, target: ast.Node) -> str | None:
        typ = target.type
        if typ is None or not typ.params:
            return None
        return typ.params[0].kind

    # -- expressions -----------------------------------------------------------------------------

    def cost(self, node: ast.Node) -> int:
        method = getattr(self, "_" + type(node).__name__)
        result: int = method(node)
        return result

    def _Const(self, node: ast.Const) -> int:
        return 0

    def _Ident(self, node: ast.Ident) -> int:
        var = self.peek(node.name)
        self.paths[id(node)] = var.path if var is not None else (node.name,)
        return 1

    def _Select(self, node: ast.Select) -> int:
        cost = self.cost(node.operand)
        if node.optional:  # x.?f is the call _?._(x, "f")
            return _add(cost, 1)
        operand = node.operand.type
        if operand is None or operand.kind in ("map", "kubernetes.DRADevice") or operand.is_param:
            cost = _add(cost, 1)
        self.paths[id(node)] = (*self.path(node.operand), node.field)
        return cost

    def _Has(self, node: ast.Has) -> int:
        # Kubernetes' base environment keeps has() free (PresenceTestHasCost(false)): only the
        # operand counts, the tested field does not.
        return self.cost(node.operand)

    def _Index(self, node: ast.Index) -> int:
        cost = _add(_add(self.cost(node.operand), self.cost(node.index)), 1)
        if node.optional:
            return cost
        is_list = _kind(node.operand) == "list"
        entry = self.entry(node.operand)
        if entry is not None:
            self.sizes[id(node)] = entry.val
        self.paths[id(node)] = (*self.path(node.operand), "@items" if is_list else "@values")
        return cost

    def _ListLit(self, node: ast.ListLit) -> int:
        cost = LIST_CREATE
        item: Size = (0, 0) if not node.elements else (U64, 0)
        for e in node.elements:
            cost = _add(cost, self.cost(e))
            item = _union(item, self.sz(e))
        self.entries[id(node)] = _Entry("list", (1, 1), item)
        return cost

    def _MapLit(self, node: ast.MapLit) -> int:
        cost = MAP_CREATE
        key: Size = (0, 0) if not node.entries else (U64, 0)
        val = key
        for k, v, _ in node.entries:
            cost = _add(_add(cost, self.cost(k)), self.cost(v))
            key = _union(key, self.sz(k))
            val = _union(val, self.sz(v))
        self.entries[id(node)] = _Entry("map", key, val)
        return cost

    def _StructLit(self, node: ast.StructLit) -> int:
        cost = STRUCT_CREATE
        for _, v in node.fields:
            cost = _add(cost, self.cost(v))
        return cost

    def _local(self, init: ast.Node) -> _Var:
        return _Var(self.path(init), self.size(init), self.entry(init))

    def _Bind(self, node: ast.Bind) -> int:
        # Binds are lazily initialized: the cost of the empty iteration range stays.
        cost = _add(LIST_CREATE, self.cost(node.init))
        self.push(node.var, self._local(node.init))
        cost = _add(cost, self.cost(node.body))
        self.pop(node.var)
        body_size = self.size(node.body)
        if body_size is not None:
            self.sizes[id(node)] = body_size
        entry = self.entry(node.body)
        if entry is not None:
            self.entries[id(node)] = entry
        return cost

    def _iter_vars(self, node: ast.Comprehension) -> None:
        rng = node.iter_range
        entry = self.entry(rng)
        container = entry.container if entry is not None else ("list" if _kind(rng) == "list" else "map")
        path = self.path(rng)
        if node.var2 is not None:
            self.push(
                node.var,
                _Var((*path, "@indices" if container == "list" else "@keys"), entry.key if entry else None, None),
            )
            self.push(
                node.var2,
                _Var((*path, "@items" if container == "list" else "@values"), entry.val if entry else None, None),
            )
        elif container == "list":
            self.push(node.var, _Var((*path, "@items"), entry.val if entry else None, None))
        else:
            self.push(node.var, _Var((*path, "@keys"), entry.key if entry else None, None))

    def _Comprehension(self, node: ast.Comprehension) -> int:
        if node.macro in ("optMap", "optFlatMap"):
            return self._optional_map(node)
        cost = self.cost(node.iter_range)
        self._iter_vars(node)
        body = self.cost(node.body)
        flt = self.cost(node.filter) if node.filter is not None else 0
        self.pop(node.var)
        if node.var2 is not None:
            self.pop(node.var2)
        # The per-element cost of cel-go's expansion (loop condition + loop step) and the
        # cost of its accumulator initializer and result (accu: 1 per reference).
        macro = node.macro
        if macro == "all":  # init true; cond @not_strictly_false(accu); step accu && p; result accu
            init, result, per = 0, 1, _add(3, body)
        elif macro == "exists":  # cond @not_strictly_false(!accu); step accu || p
            init, result, per = 0, 1, _add(4, body)
        elif macro == "exists_one":  # init 0; cond true; step p ? accu + 1 : accu; result accu == 1
            init, result, per = 0, 2, _add(2, body)
        elif macro == "filter":  # init []; step p ? accu + [x] : accu
            init, result, per = LIST_CREATE, 1, _add(13, body)
        elif macro == "transformMap":  # init {}; step cel.@mapInsert(accu, k, e)
            init, result, per = MAP_CREATE, 1, _add(_add(3, body), flt)
        else:  # map, transformList: init []; step accu + [e] (behind the filter, if any)
            init, result, per = LIST_CREATE, 1, _add(_add(12, body), flt)
        cost = _add(_add(_add(cost, init), result), _mul(self.sz(node.iter_range)[1], per))
        if macro in ("all", "exists", "exists_one"):
            self.sizes[id(node)] = (1, 1)
        else:
            self.sizes[id(node)] = self.sz(node.iter_range)
        return cost

    def _optional_map(self, node: ast.Comprehension) -> int:
        # cel.bind(v, x.value(), x.hasValue() ? optional.of(e) : optional.none())
        target = self.cost(node.iter_range)
        self.push(node.var, _Var((), None, None))
        body = self.cost(node.body)
        self.pop(node.var)
        branch = _add(body, 1) if node.macro == "optMap" else max(body, 1)
        return _add(_add(LIST_CREATE, _mul(2, _add(target, 1))), branch)

    # -- calls -----------------------------------------------------------------------------------

    def _Call(self, node: ast.Call) -> int:
        name = node.function
        args = node.args
        if name == "dyn" and len(args) == 1 and node.target is None:
            cost = _add(1, self.cost(args[0]))
            size = self.size(args[0])
            if size is not None:
                self.sizes[id(node)] = size
            entry = self.entry(args[0])
            if entry is not None:
                self.entries[id(node)] = entry
            return cost
        arg_costs = [self.cost(a) for a in args]
        target_cost = self.cost(node.target) if node.target is not None else 0
        arg_sum = 0
        for c in arg_costs:
            arg_sum = _add(arg_sum, c)
        fn, size = self._function(node, arg_costs)
        if size is not None:
            self.sizes[id(node)] = size
        return _add(target_cost, _add(fn, arg_sum) if name not in ("_&&_", "_||_", "_?_:_") else fn)

    def _function(self, node: ast.Call, arg_costs: list[int]) -> tuple[int, Size | None]:
        """The call's own cost (cel-go adds the arguments') and its result size, if known."""
        name, target, args = node.function, node.target, node.args
        library = self._library(node)
        if library is not None:
            return library
        if name in ("_&&_", "_||_"):  # the parser keeps a chain of && (||) as one call
            total = 0
            for c in arg_costs:
                total = _add(total, c)
            return total, None
        if name == "_?_:_":
            size = _union(self.sz(args[1]), self.sz(args[2]))
            e1, e2 = self.entry(args[1]), self.entry(args[2])
            if e1 is not None and e2 is not None:
                self.entries[id(node)] = _Entry(e1.container, _union(e1.key, e2.key), _union(e1.val, e2.val))
            return _add(arg_costs[0], max(arg_costs[1], arg_costs[2])), size
        if name == "format" and target is not None and args:
            t, a = self.sz(target), self.sz(args[0])
            return _factor(t[1], STRING_TRAVERSAL), (_add(t[0], a[0]), _add(t[1], a[1]))
        if name == "bytes" and target is None and len(args) == 1 and _kind(args[0]) == "string":
            s = self.sz(args[0])
            return _factor(s[1], STRING_TRAVERSAL), (s[0], _mul(s[1], 4))
        if name == "string" and target is None and len(args) == 1 and _kind(args[0]) == "bytes":
            s = self.sz(args[0])
            return _factor(s[1], STRING_TRAVERSAL), (s[0] // 4, s[1])
        if name == "strings.quote" and len(args) == 1:
            s = self.sz(args[0])
            return _factor(s[1], STRING_TRAVERSAL), (s[0] + 2, _add(_mul(s[1], 2), 2))
        if name in ("startsWith", "endsWith") and target is not None and len(args) == 1:
            return _factor(self.sz(args[0])[1], STRING_TRAVERSAL), None
        if name == "@in" and len(args) == 2:
            if "in_list" in node.overloads or _kind(args[1]) == "list":
                return self.sz(args[1])[1], None
            return 1, None
        if name == "matches" and target is not None and len(args) == 1:
            s = self.sz(target)
            string = _factor(_add(s[1], 1), STRING_TRAVERSAL)
            return _mul(string, _factor(self.sz(args[0])[1], REGEX_LENGTH)), None
        if name == "contains" and target is not None and len(args) == 1 and _kind(target) in ("string", "dyn", "any"):
            string = _factor(self.sz(target)[1], STRING_TRAVERSAL)
            return _mul(string, _factor(self.sz(args[0])[1], STRING_TRAVERSAL)), None
        if name == "includes" and "dra_includes_dyn_dyn" in node.overloads:
            # draCostEstimator: linear in the target, at most ResourceSliceMaxAttributeValuesPerDevice.
            return MAX_ATTRIBUTE_VALUES, None
        if name == "_+_" and len(args) == 2:
            return self._add_call(node)
        if name in ("_==_", "_!=_"):
            return _factor(min(self.sz(args[0])[1], self.sz(args[1])[1]), STRING_TRAVERSAL), None
        if name in ("_<_", "_<=_", "_>_", "_>=_") and self._maybe_sequence(args):
            cost = _factor(min(self.sz(args[0])[1], self.sz(args[1])[1]), STRING_TRAVERSAL)
            # dyn against dyn may also be a numeric comparison (cost 1): the estimate covers both.
            return (cost if self._has_sequence(args) else max(cost, 1)), None
        return 1, None

    def _maybe_sequence(self, args: list[ast.Node]) -> bool:
        return len(args) == 2 and all(_kind(a) in ("string", "bytes", "dyn", "any") for a in args)

    def _has_sequence(self, args: list[ast.Node]) -> bool:
        return any(_kind(a) in ("string", "bytes") for a in args)

    def _add_call(self, node: ast.Call) -> tuple[int, Size | None]:
        lhs, rhs = node.args
        kinds = {_kind(lhs), _kind(rhs)}
        ls, rs = self.sz(lhs), self.sz(rhs)
        size = (_add(ls[0], rs[0]), _add(ls[1], rs[1]))
        e1, e2 = self.entry(lhs), self.entry(rhs)
        if e1 is not None and e2 is not None:
            self.entries[id(node)] = _Entry(e1.container, _union(e1.key, e2.key), _union(e1.val, e2.val))
        if kinds & {"string", "bytes"}:
            return _factor(size[1], STRING_TRAVERSAL), size
        if "list" in kinds:
            return 1, size
        if kinds <= {"dyn", "any"}:
            # Every overload may apply: the estimate covers the most expensive (string concatenation).
            return max(1, _factor(size[1], STRING_TRAVERSAL)), size
        return 1, None

    def _library(self, node: ast.Call) -> tuple[int, Size | None] | None:
        """library.CostEstimator.EstimateCallCost: Kubernetes' own rules, looked at first."""
        name, target, args = node.function, node.target, node.args
        if name == "_==_" and len(args) == 2:
            # Quantities and semantic versions compare in constant time (only ==, not !=).
            lhs, rhs = args[0].type, args[1].type
            if lhs is not None and lhs == rhs and lhs.kind in ("kubernetes.Quantity", "kubernetes.Semver"):
                return 1, None
            return None
        if target is None:
            if name in ("quantity", "isQuantity", "semver", "isSemver") and args:
                # Parsing traverses the string: ceil(0.1 * its size), 0 for "".
                return _factor(self.sz(args[0])[1], STRING_TRAVERSAL), None
            return None
        if name in ("isSorted", "sum", "max", "min", "indexOf", "lastIndexOf"):
            t = self.sz(target)
            elem = self.element_kind(target)
            if elem is not None:
                per = 1
                if elem in ("string", "bytes"):
                    per = _add(per, _factor(self.element_size(target)[1], STRING_TRAVERSAL))
                return _mul(t[1], per), None
            return _factor(t[1], STRING_TRAVERSAL), None
        if name in ("lowerAscii", "upperAscii", "substring", "trim"):
            t = self.sz(target)
            return _factor(t[1], STRING_TRAVERSAL), t
        if name == "replace" and len(args) >= 2:
            return self._replace(target, args)
        if name == "split":
            t = self.sz(target)
            most = t[1]
            if len(args) > 1 and isinstance(args[1], ast.Const) and isinstance(args[1].value, int):
                most = args[1].value % 2**64  # ConvertToType(uint)
            return _factor(t[1], 2 * STRING_TRAVERSAL), (0, most)
        if name == "join":
            listed = self.sz(target)
            size: Size = (0, 0)
            if self.element_kind(target) is not None:
                item = self.element_size(target)
                size = (_mul(listed[0], item[0]), _mul(listed[1], item[1]))
            if args:
                sep = self.sz(args[0])
                lo, hi = max(listed[0] - 1, 0), max(listed[1] - 1, 0)
                size = (_add(size[0], _mul(sep[0], lo)), _add(size[1], _mul(sep[1], hi)))
            return _factor(size[1], STRING_TRAVERSAL), size
        if name in ("find", "findAll") and args:
            t = self.sz(target)
            string = _factor(_add(t[1], 1), STRING_TRAVERSAL)
            return _mul(string, _factor(self.sz(args[0])[1], REGEX_LENGTH)), (0, t[1])
        if name in ("sign", "asInteger", "isInteger", "asApproximateFloat", "isGreaterThan", "isLessThan"):
            return 1, None
        if name in ("compareTo", "add", "sub"):
            return 1, None
        return None

    def _replace(self, target: ast.Node, args: list[ast.Node]) -> tuple[int, Size | None]:
        s, old, new = self.sz(target), self.sz(args[0]), self.sz(args[1])
        if old[0] == 0:
            count_max, kept_max = (s[1] + 1 if s[1] < U64 else s[1]), s[1]
        elif new[1] <= old[0]:
            count_max, kept_max = 0, s[1]
        else:
            count_max, kept_max = math.ceil(s[1] / old[0]), 0
        if old[1] == 0:
            count_min, kept_min = (s[0] + 1 if s[0] < U64 else s[0]), s[0]
        elif old[1] <= new[0]:
            count_min, kept_min = 0, s[0]
        else:
            count_min, kept_min = math.ceil(s[0] / old[1]), 0
        size = (_add(_mul(count_min, new[0]), kept_min), _add(_mul(count_max, new[1]), kept_max))
        return _factor(s[1], 2 * STRING_TRAVERSAL), size


def estimate_cost(root: ast.Node) -> float:
    """The worst-case cost of evaluating a checked expression (``UNBOUNDED`` past 2^64-1)."""
    cost = _Coster().cost(root)
    return UNBOUNDED if cost >= U64 else float(cost)


def is_unbounded(cost: float) -> bool:
    return cost >= UNBOUNDED or not math.isfinite(cost)
