"""Type checker for the Kubernetes DRA selector environment.

Mirrors cel-go's ``checker/checker.go`` closely enough to reject what Kubernetes rejects at
compile time, with cel-go's messages: undeclared references, undefined fields of ``device``,
overloads that match no argument types (``found no matching overload for '_==_' applied to
'(string, int)'``), heterogeneous list and map literals (``cel.HomogeneousAggregateLiterals``)
and comprehension ranges that are not lists or maps. Types flow into the code generator, which
specialises operations whose operand types are known.
"""

from __future__ import annotations

from typing import Any

from gpucluster.dra.cel import ast
from gpucluster.dra.cel import types as t
from gpucluster.dra.cel.errors import CelCompileError
from gpucluster.dra.cel.library import DECLS, LIST_DECLS, UNSUPPORTED_FUNCTIONS, Overload
from gpucluster.dra.cel.parser import qualified_name
from gpucluster.dra.cel.values import TYPE_IDENTIFIERS, Uint

# The attribute value type: apiservercel.AnyType ("any") bounded by DeviceAttributeMaxValueLength.
ATTRIBUTE_TYPE = t.ANY
ATTRIBUTES_TYPE = t.map_of(t.STRING, t.map_of(t.STRING, ATTRIBUTE_TYPE))
CAPACITY_TYPE = t.map_of(t.STRING, t.map_of(t.STRING, t.QUANTITY))
# DRAListTypeAttributes on: DynType, so that macros (exists, all, ...) and `in` work on lists.
LIST_ATTRIBUTES_TYPE = t.map_of(t.STRING, t.map_of(t.STRING, t.DYN))

_INDEX_DECLS = [
    Overload("list_index", (t.list_of(t.A), t.INT), t.A),
    Overload("map_index", (t.map_of(t.A, t.B), t.A), t.B),
    Overload("optional_list_index_int", (t.optional_of(t.list_of(t.A)), t.INT), t.optional_of(t.A)),
    Overload("optional_map_index_value", (t.optional_of(t.map_of(t.A, t.B)), t.A), t.optional_of(t.B)),
]
_OPT_INDEX_DECLS = [
    Overload("list_optindex_optional_int", (t.list_of(t.A), t.INT), t.optional_of(t.A)),
    Overload("map_optindex_optional_value", (t.map_of(t.A, t.B), t.A), t.optional_of(t.B)),
    Overload("optional_list_optindex_optional_int", (t.optional_of(t.list_of(t.A)), t.INT), t.optional_of(t.A)),
    Overload("optional_map_optindex_optional_value", (t.optional_of(t.map_of(t.A, t.B)), t.A), t.optional_of(t.B)),
]


def device_fields(consumable_capacity: bool, list_type_attributes: bool = False) -> dict[str, t.Type]:
    attributes = LIST_ATTRIBUTES_TYPE if list_type_attributes else ATTRIBUTES_TYPE
    fields = {"driver": t.STRING, "attributes": attributes, "capacity": CAPACITY_TYPE}
    if consumable_capacity:
        fields["allowMultipleAllocations"] = t.BOOL
    return fields


def const_type(value: Any) -> t.Type:
    if value is None:
        return t.NULL
    if isinstance(value, bool):
        return t.BOOL
    if isinstance(value, Uint):
        return t.UINT
    if isinstance(value, int):
        return t.INT
    if isinstance(value, float):
        return t.DOUBLE
    if isinstance(value, str):
        return t.STRING
    if isinstance(value, bytes):
        return t.BYTES
    raise TypeError(f"unexpected constant {value!r}")


class Checker:
    def __init__(self, text: str, consumable_capacity: bool, list_type_attributes: bool = False) -> None:
        self.text = text
        self.fields = device_fields(consumable_capacity, list_type_attributes)
        self.decls = {**DECLS, **LIST_DECLS} if list_type_attributes else DECLS
        self.mapping = t.Mapping()
        self.counter = 0
        self.nodes: list[ast.Node] = []

    # -- helpers ---------------------------------------------------------------------------
    def error(self, node: ast.Node, message: str) -> CelCompileError:
        return CelCompileError(self.text, node.line, node.column, message)

    def fresh(self) -> t.Type:
        self.counter += 1
        return t.Type(f"_var{self.counter}")

    def set(self, node: ast.Node, typ: t.Type) -> t.Type:
        node.type = typ
        self.nodes.append(node)
        return typ

    def sub(self, typ: t.Type) -> t.Type:
        return t.substitute(self.mapping, typ, False)

    def assignable(self, t1: t.Type, t2: t.Type) -> bool:
        m = t.is_assignable(self.mapping, t1, t2)
        if m is None:
            return False
        self.mapping = m
        return True

    def fmt(self, typ: t.Type) -> str:
        return str(t.substitute(self.mapping, typ, True))

    # -- entry point -----------------------------------------------------------------------
    def check_root(self, node: ast.Node) -> t.Type:
        scope: dict[str, t.Type] = {"device": t.DEVICE}
        self.check(node, scope)
        for n in self.nodes:
            assert n.type is not None
            n.type = t.substitute(self.mapping, n.type, True)
        assert node.type is not None
        return node.type

    def check(self, node: ast.Node, scope: dict[str, t.Type]) -> t.Type:
        method = getattr(self, "_" + type(node).__name__)
        typ: t.Type = method(node, scope)
        return self.set(node, typ)

    # -- nodes -----------------------------------------------------------------------------
    def _Const(self, node: ast.Const, scope: dict[str, t.Type]) -> t.Type:
        return const_type(node.value)

    def _Ident(self, node: ast.Ident, scope: dict[str, t.Type]) -> t.Type:
        if node.name in scope:
            return scope[node.name]
        if node.name in TYPE_IDENTIFIERS:
            inner = {"list": t.list_of(t.DYN), "map": t.map_of(t.DYN, t.DYN)}.get(node.name, t.Type(node.name))
            if node.name == "null_type":
                inner = t.NULL
            return t.type_of(inner)
        raise self.error(node, f"undeclared reference to '{node.name}' (in container '')")

    def _select_type(self, node: ast.Node, operand_type: t.Type, field: str, optional: bool) -> t.Type:
        operand_type = self.sub(operand_type)
        target = operand_type
        was_optional = False
        if target.kind == "optional_type":
            target = target.params[0]
            was_optional = True
        if target.kind == "map":
            result = target.params[1]
        elif target == t.DEVICE:
            if field not in self.fields:
                raise self.error(node, f"undefined field '{field}'")
            result = self.fields[field]
        elif target.kind in ("kubernetes.Quantity", "kubernetes.Semver"):
            raise self.error(node, f"undefined field '{field}'")
        elif target.is_param:
            self.assignable(t.DYN, target)
            result = t.DYN
        elif t.is_dyn_or_error(target):
            result = t.DYN
        else:
            raise self.error(node, f"type '{self.fmt(target)}' does not support field selection")
        return t.optional_of(result) if (was_optional or optional) else result

    def _Select(self, node: ast.Select, scope: dict[str, t.Type]) -> t.Type:
        operand_type = self.check(node.operand, scope)
        return self._select_type(node, operand_type, node.field, node.optional)

    def _Has(self, node: ast.Has, scope: dict[str, t.Type]) -> t.Type:
        operand_type = self.sub(self.check(node.operand, scope))
        target = operand_type.params[0] if operand_type.kind == "optional_type" else operand_type
        if target.kind == "map" or t.is_dyn_or_error(target):
            return t.BOOL
        if target.is_param:
            self.assignable(t.DYN, target)
            return t.BOOL
        if target == t.DEVICE:
            if node.field not in self.fields:
                raise self.error(node, f"undefined field '{node.field}'")
            return t.BOOL
        raise self.error(node, f"type '{self.fmt(target)}' does not support field selection")

    def _Index(self, node: ast.Index, scope: dict[str, t.Type]) -> t.Type:
        operand = self.check(node.operand, scope)
        index = self.check(node.index, scope)
        decls = _OPT_INDEX_DECLS if node.optional else _INDEX_DECLS
        name = "_[?_]" if node.optional else "_[_]"
        typ, _ = self.resolve(node, name, decls, [operand, index], member=False)
        return typ

    def _ListLit(self, node: ast.ListLit, scope: dict[str, t.Type]) -> t.Type:
        elem: t.Type | None = None
        for i, element in enumerate(node.elements):
            et = self.sub(self.check(element, scope))
            if i in node.optional_indices:
                if et.kind == "optional_type":
                    et = et.params[0]
                elif not t.is_dyn(et):
                    raise self.error(element, f"expected type '{t.optional_of(et)}' but found '{self.fmt(et)}'")
            elem = self.join(element, elem, et)
        return t.list_of(elem if elem is not None else self.fresh())

    def join(self, node: ast.Node, previous: t.Type | None, current: t.Type) -> t.Type:
        if previous is None:
            return current
        if self.assignable(previous, current):
            return t.most_general(previous, current)
        raise self.error(node, f"expected type '{self.fmt(previous)}' but found '{self.fmt(current)}'")

    def _MapLit(self, node: ast.MapLit, scope: dict[str, t.Type]) -> t.Type:
        key_type: t.Type | None = None
        value_type: t.Type | None = None
        for key, value, optional in node.entries:
            kt = self.sub(self.check(key, scope))
            key_type = self.join(key, key_type, kt)
            vt = self.sub(self.check(value, scope))
            if optional:
                if vt.kind == "optional_type":
                    vt = vt.params[0]
                elif not t.is_dyn(vt):
                    raise self.error(value, f"expected type '{t.optional_of(vt)}' but found '{self.fmt(vt)}'")
            value_type = self.join(value, value_type, vt)
        if key_type is None or value_type is None:
            return t.map_of(self.fresh(), self.fresh())
        return t.map_of(key_type, value_type)

    def _StructLit(self, node: ast.StructLit, scope: dict[str, t.Type]) -> t.Type:
        raise self.error(node, f"undeclared reference to '{node.name}' (in container '')")

    def _Bind(self, node: ast.Bind, scope: dict[str, t.Type]) -> t.Type:
        init = self.check(node.init, scope)
        inner = dict(scope)
        inner[node.var] = init
        return self.check(node.body, inner)

    def _Comprehension(self, node: ast.Comprehension, scope: dict[str, t.Type]) -> t.Type:
        range_type = self.sub(self.check(node.iter_range, scope))
        macro = node.macro
        inner = dict(scope)
        if macro in ("optMap", "optFlatMap"):
            if range_type.kind == "optional_type":
                var_type = range_type.params[0]
            elif t.is_dyn_or_error(range_type):
                var_type = t.DYN
            else:
                raise self.error(
                    node, f"found no matching overload for '{macro}' applied to '({self.fmt(range_type)})'"
                )
            inner[node.var] = var_type
            body = self.sub(self.check(node.body, inner))
            if macro == "optMap":
                return t.optional_of(body)
            if body.kind != "optional_type" and not t.is_dyn_or_error(body):
                raise self.error(node.body, f"expected type 'optional_type' but found '{self.fmt(body)}'")
            return body
        var2_type: t.Type | None = None
        if range_type.kind == "list":
            var_type = range_type.params[0]
            if node.var2 is not None:
                var_type, var2_type = t.INT, range_type.params[0]
        elif range_type.kind == "map":
            var_type = range_type.params[0]
            var2_type = range_type.params[1]
        elif t.is_dyn_or_error(range_type) or range_type.is_param:
            self.assignable(t.DYN, range_type)
            var_type = var2_type = t.DYN
        else:
            raise self.error(
                node.iter_range,
                f"expression of type '{self.fmt(range_type)}' cannot be range of a comprehension "
                "(must be list, map, or dynamic)",
            )
        inner[node.var] = var_type
        if node.var2 is not None:
            assert var2_type is not None
            inner[node.var2] = var2_type
        if node.filter is not None:
            self.expect_bool(node.filter, self.check(node.filter, inner))
        body = self.check(node.body, inner)
        if macro in ("all", "exists", "exists_one", "filter"):
            self.expect_bool(node.body, body)
            if macro == "filter":
                return t.list_of(var_type)
            return t.BOOL
        if macro in ("map", "transformList"):
            return t.list_of(self.sub(body))
        # transformMap
        return t.map_of(var_type, self.sub(body))

    def expect_bool(self, node: ast.Node, typ: t.Type) -> None:
        if not self.assignable(typ, t.BOOL):
            raise self.error(node, f"expected type 'bool' but found '{self.fmt(typ)}'")

    def _Call(self, node: ast.Call, scope: dict[str, t.Type]) -> t.Type:
        name = node.function
        if name in ("_&&_", "_||_"):
            for arg in node.args:
                self.expect_bool(arg, self.check(arg, scope))
            return t.BOOL
        target = node.target
        if target is not None:
            prefix = qualified_name(target)
            root: ast.Node = target
            while isinstance(root, ast.Select):
                root = root.operand
            if prefix is not None and isinstance(root, ast.Ident) and root.name not in scope:
                qualified = f"{prefix}.{name}"
                if qualified in DECLS or qualified in UNSUPPORTED_FUNCTIONS:
                    node.function = qualified
                    node.target = None
                    return self._Call(node, scope)
        if name in UNSUPPORTED_FUNCTIONS:
            raise self.error(node, f"function '{name}' is not supported by this CEL implementation")
        if name not in self.decls:
            raise self.error(node, f"undeclared reference to '{name}' (in container '')")
        arg_types = [self.check(arg, scope) for arg in node.args]
        if target is not None:
            arg_types.insert(0, self.check(target, scope))
        typ, overloads = self.resolve(node, name, self.decls[name], arg_types, member=target is not None)
        node.overloads = overloads
        return typ

    def resolve(
        self, node: ast.Node, name: str, decls: list[Overload], arg_types: list[t.Type], member: bool
    ) -> tuple[t.Type, tuple[str, ...]]:
        result: t.Type | None = None
        matched: list[str] = []
        for overload in decls:
            if overload.member != member and name not in ("_[_]", "_[?_]"):
                continue
            fresh: dict[str, t.Type] = {}
            params = list(overload.params)
            res = overload.result
            if any(t.has_params(p) for p in params) or t.has_params(res):
                fresh = {"A": self.fresh(), "B": self.fresh()}
                params = [t.rename_params(p, fresh) for p in params]
                res = t.rename_params(res, fresh)
            m = t.is_assignable_list(self.mapping, arg_types, params)
            if m is None:
                continue
            self.mapping = m
            matched.append(overload.id)
            res = t.substitute(self.mapping, res, False)
            if result is None:
                result = res
            elif not t.is_dyn(result) and res != result:
                result = t.DYN
        if result is None:
            shown = [self.fmt(a) for a in arg_types]
            signature = f"{shown[0]}.({', '.join(shown[1:])})" if member else f"({', '.join(shown)})"
            raise self.error(node, f"found no matching overload for '{name}' applied to '{signature}'")
        return result, tuple(matched)


def check(text: str, root: ast.Node, consumable_capacity: bool, list_type_attributes: bool = False) -> t.Type:
    """Type-check ``root`` in place (each node's ``type``) and return the expression's type.

    ``list_type_attributes`` (DRAListTypeAttributes): attribute values are ``dyn`` and
    ``includes`` is declared."""
    return Checker(text, consumable_capacity, list_type_attributes).check_root(root)
