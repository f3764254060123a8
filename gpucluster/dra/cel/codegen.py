"""Compile a checked CEL AST into Python source, then into a function ``f(device) -> value``.

Every CEL expression becomes one Python expression, except the constructs that must catch
errors or branch (``&&``, ``||``, comprehensions, ``cel.bind``, dynamic ternaries), which
become small module-level functions that receive the device and the variables in scope.
Operations whose operand types the checker knows are emitted as plain Python (``a == b`` on
two strings, ``len(x)`` on a list); ``dyn`` operands go through the generic helpers of
:mod:`.runtime`, :mod:`.values` and :mod:`.library`, often behind an inline fast path for the
common runtime type. ``device.attributes["domain"].name`` with constant domain and name becomes
one call on the :class:`~gpucluster.dra.cel.view.DeviceView`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, NoReturn

from gpucluster.dra.cel import ast, library, runtime, values
from gpucluster.dra.cel import types as t
from gpucluster.dra.cel.checker import ATTRIBUTES_TYPE, CAPACITY_TYPE
from gpucluster.dra.cel.errors import CelCompileError, CelRuntimeError
from gpucluster.dra.cel.regex import RegexError, parse_regex
from gpucluster.dra.cel.view import EMPTY_MAP
from gpucluster.dra.quantity import Quantity, QuantityError
from gpucluster.dra.semver import Semver, SemverError

# Prefix of an environment entry that names a device domain rather than a Python variable.
_ALIAS = "\x00alias\x00"
_PRIMS = {"int": int, "string": str, "bool": bool, "double": float, "bytes": bytes}
_DEVICE_MAP_TYPES = (ATTRIBUTES_TYPE, CAPACITY_TYPE)
_REL_OPS = {"_<_": "<", "_<=_": "<=", "_>_": ">", "_>=_": ">="}
_REL_FNS = {"_<_": values.lt, "_<=_": values.le, "_>_": values.gt, "_>=_": values.ge}


def _possibly_device_map(typ: t.Type | None) -> bool:
    return typ is None or typ in _DEVICE_MAP_TYPES or t.is_dyn(typ)


def _not_bool(result: Any) -> NoReturn:
    name = values.type_name(result)
    raise CelRuntimeError(
        f"CEL result of type {name} could not be converted to bool: must evaluate to bool, not {name}"
    )


class Generator:
    def __init__(self, text: str) -> None:
        self.text = text
        self.namespace: dict[str, Any] = {
            "_Err": CelRuntimeError,
            "_MISS": EMPTY_MAP,
            "_EMPTY": EMPTY_MAP,
            "_rt": runtime,
            "_v": values,
            "_lib": library,
            "_Q": Quantity,
            "_S": Semver,
            "_Opt": values.Optional,
            "_nokey": values.no_such_key,
            "_nso": values.no_such_overload,
            "_ovf": values.int_overflow,
            "_eq": values.equals,
            "_not_bool": _not_bool,
        }
        self.const_ids: dict[tuple[type, Any], str] = {}
        self.functions: list[str] = []
        self.counter = 0
        self.reads: set[tuple[str, ...]] = set()
        # Calls of functions whose every exit is ``return True``, ``return False`` or a raise,
        # with the statements that do the same inline: a root call of one is inlined into the
        # entry function (one Python call per device fewer).
        self.inlinable: dict[str, tuple[str, list[str]]] = {}

    # -- bookkeeping -----------------------------------------------------------------------
    def tmp(self) -> str:
        self.counter += 1
        return f"_t{self.counter}"

    def const(self, value: Any) -> str:
        # Other values by id(): they stay referenced from self.namespace for the Generator's
        # life (one compile), so an id cannot be reused while this map exists.
        key = (type(value), value if isinstance(value, (str, int, float, bytes, bool)) else id(value))
        name = self.const_ids.get(key)
        if name is None:
            self.counter += 1
            name = f"_c{self.counter}"
            self.const_ids[key] = name
            self.namespace[name] = value
        return name

    def error(self, node: ast.Node, message: str) -> CelCompileError:
        return CelCompileError(self.text, node.line, node.column, message)

    def literal(self, value: Any) -> str:
        if value is None or value is True or value is False:
            return repr(value)
        if type(value) is int or type(value) is str or type(value) is bytes:
            return repr(value)
        if type(value) is float and math.isfinite(value):
            return repr(value)
        return self.const(value)

    def function(self, params: list[str], body: list[str]) -> str:
        self.counter += 1
        name = f"_f{self.counter}"
        lines = [f"def {name}({', '.join(params)}):"] + ["    " + line for line in body]
        self.functions.append("\n".join(lines))
        return name

    @staticmethod
    def params(env: dict[str, str]) -> list[str]:
        return ["d", *sorted(v for v in set(env.values()) - {"d"} if not v.startswith(_ALIAS))]

    def call_fn(self, name: str, *args: str) -> str:
        fn = library.IMPLS[name]
        return f"{self.const(fn)}({', '.join(args)})"

    # -- entry -----------------------------------------------------------------------------
    def compile(self, root: ast.Node) -> Callable[[Any], bool]:
        """The entry function ``_evaluate(d)``: the expression's bool verdict or CelRuntimeError.

        A root that became a call ``_fN(d)`` of a function returning only True/False has its
        body inlined into the entry function: one Python call per device fewer.
        """
        body = self.expr(root, {"device": "d"})
        found = self.inlinable.get(body)
        inlined = None
        if found is not None:
            fn, inlined = found
            self.functions = [f for f in self.functions if not f.startswith(f"def {fn}(")]
            core = ["    " + line for line in inlined]
        else:
            core = [f"    _r = {body}"]
        entry = [
            "def _evaluate(d):",
            "    try:",
            *("    " + line for line in core),
            "    except _Err:",
            "        raise",
            "    except RecursionError:",
            "        raise _Err('evaluation recursion limit exceeded') from None",
            "    except Exception as _x:  # a defect here must not take the caller down",
            "        raise _Err(f'internal error evaluating CEL expression: {_x!r}') from _x",
        ]
        if inlined is None:
            entry += ["    if _r is True or _r is False:", "        return _r", "    _not_bool(_r)"]
        source = "\n\n".join([*self.functions, "\n".join(entry)]) + "\n"
        self.source = source
        try:
            code = compile(source, "<cel>", "exec")
        except (SyntaxError, RecursionError, MemoryError, ValueError):
            raise self.error(root, "expression too complex to compile") from None
        exec(code, self.namespace)
        evaluate: Callable[[Any], bool] = self.namespace["_evaluate"]
        return evaluate

    # -- expressions -----------------------------------------------------------------------
    def expr(self, node: ast.Node, env: dict[str, str]) -> str:
        method = getattr(self, "_" + type(node).__name__)
        result: str = method(node, env)
        return result

    def _Const(self, node: ast.Const, env: dict[str, str]) -> str:
        return self.literal(node.value)

    def _Ident(self, node: ast.Ident, env: dict[str, str]) -> str:
        if node.name in env:
            name = env[node.name]
            if name.startswith(_ALIAS):
                kind, domain = name[len(_ALIAS) :].split("\x00", 1)
                self.reads.add((kind, domain))
                return f"d.{'attr' if kind == 'attributes' else 'cap'}_domain({domain!r})"
            if node.name == "device" and name == "d":
                self.reads.add(("device",))
            return name
        return self.const(values.TYPE_IDENTIFIERS[node.name])

    # device.attributes["domain"] / device.capacity["domain"] with a constant domain, or a
    # cel.bind variable bound to one
    def _device_domain(self, node: ast.Node, env: dict[str, str]) -> tuple[str, str] | None:
        if isinstance(node, ast.Ident):
            name = env.get(node.name, "")
            if name.startswith(_ALIAS):
                kind, domain = name[len(_ALIAS) :].split("\x00", 1)
                return kind, domain
            return None
        if (
            isinstance(node, ast.Index)
            and not node.optional
            and isinstance(node.index, ast.Const)
            and type(node.index.value) is str
            and isinstance(node.operand, ast.Select)
            and not node.operand.optional
            and node.operand.field in ("attributes", "capacity")
            and isinstance(node.operand.operand, ast.Ident)
            and node.operand.operand.name == "device"
            and env.get("device") == "d"
        ):
            return node.operand.field, node.index.value
        return None

    def _device_value(self, operand: ast.Node, ident: str, env: dict[str, str], test: bool) -> str | None:
        found = self._device_domain(operand, env)
        if found is None:
            return None
        kind, domain = found
        self.reads.add((kind, domain, ident))
        method = {
            ("attributes", False): "attr_value",
            ("attributes", True): "has_attr",
            ("capacity", False): "cap_value",
            ("capacity", True): "has_cap",
        }[(kind, test)]
        return f"d.{method}({domain!r}, {ident!r})"

    def _Select(self, node: ast.Select, env: dict[str, str]) -> str:
        operand = node.operand
        if not node.optional:
            fast = self._device_value(operand, node.field, env, test=False)
            if fast is not None:
                return fast
        op_type = operand.type
        if (
            isinstance(operand, ast.Ident)
            and operand.name == "device"
            and env.get("device") == "d"
            and not node.optional
        ):
            self.reads.add((node.field,))
            attr = {"allowMultipleAllocations": "allow_multiple_allocations"}.get(node.field, node.field)
            return f"d.{attr}"
        x = self.expr(operand, env)
        if node.optional or (op_type is not None and op_type.kind == "optional_type"):
            return f"_rt.opt_select({x}, {node.field!r})"
        if op_type == t.DEVICE:
            attr = {"allowMultipleAllocations": "allow_multiple_allocations"}.get(node.field, node.field)
            return f"{x}.{attr}"
        if op_type is not None and op_type.kind == "map" and not _possibly_device_map(op_type):
            v = self.tmp()
            return f"({v} if ({v} := {x}.get({node.field!r}, _MISS)) is not _MISS else _nokey({node.field!r}))"
        return f"_rt.select({x}, {node.field!r})"

    def _Has(self, node: ast.Has, env: dict[str, str]) -> str:
        fast = self._device_value(node.operand, node.field, env, test=True)
        if fast is not None:
            return fast
        op_type = node.operand.type
        x = self.expr(node.operand, env)
        if op_type is not None and op_type.kind == "map" and not _possibly_device_map(op_type):
            return f"({node.field!r} in {x})"
        return f"_rt.has({x}, {node.field!r})"

    def _Index(self, node: ast.Index, env: dict[str, str]) -> str:
        operand = node.operand
        if not node.optional and isinstance(node.index, ast.Const) and type(node.index.value) is str:
            fast = self._device_value(operand, node.index.value, env, test=False)
            if fast is not None:
                return fast
        found = self._device_domain(node, env)
        if found is not None:
            kind, domain = found
            self.reads.add((kind, domain))
            return f"d.{'attr' if kind == 'attributes' else 'cap'}_domain({domain!r})"
        x = self.expr(operand, env)
        k = self.expr(node.index, env)
        op_type = operand.type
        if node.optional or (op_type is not None and op_type.kind == "optional_type"):
            return f"_rt.opt_index({x}, {k})"
        if (
            op_type is not None
            and op_type.kind == "map"
            and op_type.params[0] == t.STRING
            and node.index.type == t.STRING
            and not _possibly_device_map(op_type)
        ):
            v, key = self.tmp(), self.tmp()
            return f"({v} if ({v} := {x}.get(({key} := {k}), _MISS)) is not _MISS else _nokey({key}))"
        return f"_rt.index({x}, {k})"

    def _ListLit(self, node: ast.ListLit, env: dict[str, str]) -> str:
        items = [self.expr(e, env) for e in node.elements]
        if not node.optional_indices:
            return "[" + ", ".join(items) + "]"
        pairs = ", ".join(f"({i in node.optional_indices}, {item})" for i, item in enumerate(items))
        return f"_rt.optional_elements([{pairs}])"

    def _MapLit(self, node: ast.MapLit, env: dict[str, str]) -> str:
        entries = ", ".join(f"({opt}, {self.expr(k, env)}, {self.expr(v, env)})" for k, v, opt in node.entries)
        return f"_rt.build_map([{entries}])"

    def _StructLit(self, node: ast.StructLit, env: dict[str, str]) -> str:
        raise self.error(node, f"undeclared reference to '{node.name}' (in container '')")

    def _Bind(self, node: ast.Bind, env: dict[str, str]) -> str:
        found = self._device_domain(node.init, env)
        if found is not None:
            # cel.bind(a, device.attributes["dom"], body): the init cannot fail and reads
            # nothing until used, so the body is compiled with `a` standing for that domain
            # (`a.name` becomes one attr_value call on the view, as if written out in full).
            inner = dict(env)
            inner[node.var] = _ALIAS + "\x00".join(found)
            return self.expr(node.body, inner)
        init = self.expr(node.init, env)
        inner = dict(env)
        self.counter += 1
        var = inner[node.var] = f"v{self.counter}_{node.var}"
        body = self.expr(node.body, inner)
        params = self.params(inner)
        fn = self.function(params, [f"return {body}"])
        args = [init if p == var else p for p in params]
        return f"{fn}({', '.join(args)})"

    # -- comprehensions --------------------------------------------------------------------
    def _Comprehension(self, node: ast.Comprehension, env: dict[str, str]) -> str:
        names_only = None
        if node.var2 is None and node.macro not in ("optMap", "optFlatMap"):
            names_only = self._device_domain(node.iter_range, env)
        if names_only is not None:
            # Iterating the names of a constant device domain: the view lists them without
            # building the domain's map (a map is always iterable, so no check is lost).
            kind, domain = names_only
            self.reads.add((kind, domain))
            rng = f"d.{'attr' if kind == 'attributes' else 'cap'}_names({domain!r})"
        else:
            rng = self.expr(node.iter_range, env)
        inner = dict(env)
        self.counter += 1
        var = inner[node.var] = f"v{self.counter}_{node.var}"
        var2 = None
        if node.var2 is not None:
            self.counter += 1
            var2 = inner[node.var2] = f"v{self.counter}_{node.var2}"
        body = self.expr(node.body, inner)
        flt = self.expr(node.filter, inner) if node.filter is not None else None
        outer_params = self.params(env)
        params = [*outer_params, "_r"]
        macro = node.macro
        lines: list[str] = []
        if macro in ("optMap", "optFlatMap"):
            lines += [
                "if _r.__class__ is not _Opt: _nso()",
                "if not _r.has_value: return _Opt.NONE",
                f"{var} = _r.value",
                f"return _Opt({body})" if macro == "optMap" else f"_o = {body}",
            ]
            if macro == "optFlatMap":
                lines += ["if _o.__class__ is not _Opt: _nso()", "return _o"]
            fn = self.function(params, lines)
            return f"{fn}({', '.join(outer_params)}, {rng})"
        if var2:
            loop = f"for {var}, {var2} in _rt.iterate2(_r):"
        else:
            loop = f"for {var} in {'_r' if names_only is not None else '_rt.iterate(_r)'}:"
        body_is_bool = node.body.type == t.BOOL
        # A body not typed bool (dyn, an attribute) must still give a bool: checked per element.
        check = [] if body_is_bool else ["if _b is not True and _b is not False: _nso()"]
        if macro in ("all", "exists") and self._safe(node.body):
            # A body that cannot fail needs no error bookkeeping.
            stop, keep = ("False", "True") if macro == "all" else ("True", "False")
            lines += [loop, f"    if {body} is {stop}: return {stop}", f"return {keep}"]
        elif macro in ("all", "exists"):
            stop, keep = ("False", "True") if macro == "all" else ("True", "False")
            lines += [
                "_e = None",
                loop,
                "    try:",
                f"        _b = {body}",
                *("        " + line for line in check),
                "    except _Err as _x:",
                "        if _e is None: _e = _x",
                "        continue",
                f"    if _b is {stop}: return {stop}",
                "if _e is not None: raise _e",
                f"return {keep}",
            ]
        elif macro == "exists_one":
            lines += [
                "_n = 0",
                loop,
                f"    _b = {body}",
                *("    " + line for line in check),
                "    if _b is True: _n += 1",
                "return _n == 1",
            ]
        elif macro == "filter":
            lines += [
                "_o = []",
                loop,
                f"    _b = {body}",
                *("    " + line for line in check),
                f"    if _b is True: _o.append({var})",
                "return _o",
            ]
        elif macro in ("map", "transformList", "transformMap"):
            is_map = macro == "transformMap"
            lines.append("_o = {}" if is_map else "_o = []")
            lines.append(loop)
            indent = "    "
            if flt is not None:
                lines.append(f"    _p = {flt}")
                lines.append("    if _p is not True:")
                lines.append("        if _p is not False: _nso()")
                lines.append("        continue")
            lines.append(f"{indent}_o[{var}] = {body}" if is_map else f"{indent}_o.append({body})")
            lines.append("return _o")
        else:  # pragma: no cover - the parser creates no other macro
            raise self.error(node, f"unsupported macro {macro}")
        fn = self.function(params, lines)
        call = f"{fn}({', '.join(outer_params)}, {rng})"
        if macro in ("all", "exists") and outer_params == ["d"]:
            self.inlinable[call] = (fn, [f"_r = {rng}", *lines])
        return call

    # -- calls -----------------------------------------------------------------------------
    def _Call(self, node: ast.Call, env: dict[str, str]) -> str:
        name = node.function
        if name in ("_&&_", "_||_"):
            return self._logical(node, env, name == "_&&_")
        if name == "_?_:_":
            return self._conditional(node, env)
        if name in ("_==_", "_!=_"):
            return self._equality(node, env, name == "_!=_")
        if name in _REL_OPS:
            return self._relational(node, env, name)
        special = _SPECIAL.get(name)
        if special is not None:
            result = special(self, node, env)
            if result is not None:
                return result
        args = [self.expr(a, env) for a in ([node.target] if node.target is not None else []) + node.args]
        if name == "sum":
            target_type = node.target.type if node.target is not None else None
            elem = target_type.params[0].kind if target_type is not None and target_type.kind == "list" else ""
            args.append({"uint": "_v.Uint(0)", "double": "0.0"}.get(elem, "0"))
        return self.call_fn(name, *args)

    def _logical(self, node: ast.Call, env: dict[str, str], is_and: bool) -> str:
        stop, keep = ("False", "True") if is_and else ("True", "False")
        op = "_&&_" if is_and else "_||_"
        terms = [self.expr(a, env) for a in node.args]
        if all(self._safe(a) for a in node.args):
            joiner = " and " if is_and else " or "
            return "(" + joiner.join(terms) + ")"
        lines = ["_e = None"]
        for arg, term in zip(node.args, terms, strict=True):
            lines += ["try:", f"    _b = {term}", f"    if _b is {stop}: return {stop}"]
            if arg.type != t.BOOL:
                lines += [f"    if _b is not {keep}: _nso({op!r})"]
            lines += ["except _Err as _x:", "    if _e is None: _e = _x"]
        lines += ["if _e is not None: raise _e", f"return {keep}"]
        fn = self.function(self.params(env), lines)
        call = f"{fn}({', '.join(self.params(env))})"
        if self.params(env) == ["d"]:
            self.inlinable[call] = (fn, lines)
        return call

    def _safe(self, node: ast.Node) -> bool:
        """Whether evaluating the node can never raise (so `and`/`or` need no error handling)."""
        if isinstance(node, ast.Const):
            return type(node.value) is bool
        if isinstance(node, ast.Call) and node.function in ("_&&_", "_||_"):
            return all(self._safe(a) for a in node.args)
        if isinstance(node, ast.Call) and node.function == "!_":
            return self._safe(node.args[0])
        if isinstance(node, ast.Call) and node.function in ("_==_", "_!=_"):
            a, b = node.args
            return (
                a.type == b.type
                and a.type is not None
                and a.type.kind in ("string", "int", "bool")
                and all(self._safe_value(x) for x in (a, b))
            )
        return False

    def _safe_value(self, node: ast.Node) -> bool:
        if isinstance(node, (ast.Const, ast.Ident)):
            return True
        if isinstance(node, ast.Select) and isinstance(node.operand, ast.Ident) and node.operand.name == "device":
            return node.field in ("driver", "allowMultipleAllocations")
        return False

    def _conditional(self, node: ast.Call, env: dict[str, str]) -> str:
        cond, a, b = node.args
        c = self.expr(cond, env)
        x = self.expr(a, env)
        y = self.expr(b, env)
        if cond.type == t.BOOL:
            return f"({x} if {c} else {y})"
        lines = [f"_c = {c}", f"if _c is True: return {x}", f"if _c is False: return {y}", "_nso('_?_:_')"]
        fn = self.function(self.params(env), lines)
        return f"{fn}({', '.join(self.params(env))})"

    def _equality(self, node: ast.Call, env: dict[str, str], negate: bool) -> str:
        a, b = node.args
        x = self.expr(a, env)
        y = self.expr(b, env)
        ta, tb = a.type, b.type
        result: str
        if (
            ta is not None
            and ta == tb
            and (ta.kind in _PRIMS or ta.kind in ("uint", "kubernetes.Quantity", "kubernetes.Semver"))
        ):
            result = f"({x} == {y})"
        elif isinstance(b, ast.Const) and type(b.value) in (str, int, float, bool) and ta is not None and t.is_dyn(ta):
            v = self.tmp()
            cls = type(b.value).__name__
            result = f"({v} == {y} if ({v} := {x}).__class__ is {cls} else _eq({v}, {y}))"
        else:
            result = f"_eq({x}, {y})"
        return f"(not {result})" if negate else result

    def _relational(self, node: ast.Call, env: dict[str, str], name: str) -> str:
        a, b = node.args
        x = self.expr(a, env)
        y = self.expr(b, env)
        op = _REL_OPS[name]
        ta, tb = a.type, b.type
        if ta is not None and ta == tb and ta.kind in ("int", "string", "uint", "bool", "bytes"):
            return f"({x} {op} {y})"
        if isinstance(b, ast.Const) and type(b.value) in (int, str) and ta is not None and t.is_dyn(ta):
            v = self.tmp()
            cls = type(b.value).__name__
            fn = self.const(_REL_FNS[name])
            return f"({v} {op} {y} if ({v} := {x}).__class__ is {cls} else {fn}({v}, {y}))"
        return f"{self.const(_REL_FNS[name])}({x}, {y})"

    # Specialised calls; returning None falls back to the generic implementation.
    def _arith(self, node: ast.Call, env: dict[str, str], op: str) -> str | None:
        if len(node.args) != 2:
            return None
        a, b = node.args
        if a.type == t.INT and b.type == t.INT:
            x, y = self.expr(a, env), self.expr(b, env)
            v = self.tmp()
            return f"({v} if -9223372036854775808 <= ({v} := {x} {op} {y}) <= 9223372036854775807 else _ovf())"
        if (
            a.type == b.type
            and a.type is not None
            and (a.type.kind in ("double", "string", "bytes") or (op == "+" and a.type.kind == "list"))
        ):
            return f"({self.expr(a, env)} {op} {self.expr(b, env)})"
        return None

    def _call_in(self, node: ast.Call, env: dict[str, str]) -> str | None:
        elem, container = node.args
        if isinstance(container, ast.ListLit) and not container.elements:
            # cel-go plans `x in []` as a constant false: x is never evaluated, so an error in it
            # does not surface.
            return "False"
        if isinstance(elem, ast.Const) and type(elem.value) is str:
            fast = self._device_value(container, elem.value, env, test=True)
            if fast is not None:
                return fast
        ct = container.type
        if (
            ct is not None
            and elem.type == t.STRING
            and ct.kind in ("list", "map")
            and ct.params[0] == t.STRING
            and not _possibly_device_map(ct)
        ):
            return f"({self.expr(elem, env)} in {self.expr(container, env)})"
        return None

    def _call_size(self, node: ast.Call, env: dict[str, str]) -> str | None:
        arg = node.target if node.target is not None else node.args[0]
        if arg.type is not None and arg.type.kind in ("string", "bytes", "list", "map"):
            return f"len({self.expr(arg, env)})"
        return None

    def _compare_call(self, node: ast.Call, env: dict[str, str], fmt: str) -> str | None:
        target = node.target
        if target is None or len(node.args) != 1:
            return None
        arg = node.args[0]
        x = self.expr(target, env)
        y = self.expr(arg, env)
        if target.type == t.QUANTITY and arg.type == t.QUANTITY:
            return fmt.format(f"{self.const(library.quantity_cmp)}({x}, {y})")
        if target.type == t.SEMVER and arg.type == t.SEMVER:
            return fmt.format(f"{self.const(library.semver_cmp)}({x}, {y})")
        if arg.type == t.SEMVER and target.type is not None and t.is_dyn(target.type):
            v = self.tmp()
            generic = self.const(library.compare_to)
            fast = self.const(library.semver_cmp)
            return fmt.format(f"({fast}({v}, {y}) if ({v} := {x}).__class__ is _S else {generic}({v}, {y}))")
        return fmt.format(f"{self.const(library.compare_to)}({x}, {y})")

    def _call_compareTo(self, node: ast.Call, env: dict[str, str]) -> str | None:
        return self._compare_call(node, env, "{}")

    def _call_isGreaterThan(self, node: ast.Call, env: dict[str, str]) -> str | None:
        return self._compare_call(node, env, "({} > 0)")

    def _call_isLessThan(self, node: ast.Call, env: dict[str, str]) -> str | None:
        return self._compare_call(node, env, "({} < 0)")

    def _string_test(self, node: ast.Call, env: dict[str, str], method: str) -> str | None:
        """``s.startsWith(p)`` and friends: str methods when the target is (or turns out) a string."""
        target = node.target
        if target is None or len(node.args) != 1 or node.args[0].type != t.STRING:
            return None
        x, y = self.expr(target, env), self.expr(node.args[0], env)
        call = f"({y} in {{}})" if method == "contains" else f"{{}}.{method}({y})"
        if target.type == t.STRING:
            return call.format(x)
        if target.type is not None and t.is_dyn(target.type):
            v = self.tmp()
            generic = self.call_fn(node.function, v, y)
            return f"({call.format(v)} if ({v} := {x}).__class__ is str else {generic})"
        return None

    def _regex_arg(self, node: ast.Node) -> str | None:
        if isinstance(node, ast.Const) and type(node.value) is str:
            try:
                regex = parse_regex(node.value)
            except RegexError as exc:
                raise self.error(node, f"invalid regular expression: {exc}: `{node.value}`") from None
            return self.const(regex)
        return None

    def _call_matches(self, node: ast.Call, env: dict[str, str]) -> str | None:
        subject, pattern = (node.target, node.args[0]) if node.target is not None else node.args
        regex = self._regex_arg(pattern)
        if regex is None:
            return None
        x = self.expr(subject, env)
        if subject.type == t.STRING:
            return f"({regex}.search({x}) is not None)"
        v = self.tmp()
        return f"({regex}.search({v}) is not None if ({v} := {x}).__class__ is str else _nso('matches'))"

    def _call_find(self, node: ast.Call, env: dict[str, str]) -> str | None:
        if node.target is not None:
            self._regex_arg(node.args[0])
        return None

    def _call_findAll(self, node: ast.Call, env: dict[str, str]) -> str | None:
        if node.target is not None:
            self._regex_arg(node.args[0])
        return None

    def _fold(self, node: ast.Call, fn: Callable[[], Any], errors: tuple[type[Exception], ...]) -> str | None:
        if not all(isinstance(a, ast.Const) for a in node.args) or node.target is not None:
            return None
        try:
            return self.const(fn())
        except errors:
            return None  # a runtime error, as in Kubernetes

    def _call_quantity(self, node: ast.Call, env: dict[str, str]) -> str | None:
        return self._fold(
            node,
            lambda: library.quantity(*(a.value for a in node.args if isinstance(a, ast.Const))),
            (CelRuntimeError, QuantityError),
        )

    def _call_semver(self, node: ast.Call, env: dict[str, str]) -> str | None:
        return self._fold(
            node,
            lambda: library.semver(*(a.value for a in node.args if isinstance(a, ast.Const))),
            (CelRuntimeError, SemverError),
        )

    def _call_dyn(self, node: ast.Call, env: dict[str, str]) -> str | None:
        return self.expr(node.args[0], env)


_SPECIAL: dict[str, Callable[[Generator, ast.Call, dict[str, str]], str | None]] = {
    "_+_": lambda g, n, e: g._arith(n, e, "+"),
    "_-_": lambda g, n, e: g._arith(n, e, "-"),
    "_*_": lambda g, n, e: g._arith(n, e, "*"),
    "@in": Generator._call_in,
    "size": Generator._call_size,
    "compareTo": Generator._call_compareTo,
    "isGreaterThan": Generator._call_isGreaterThan,
    "isLessThan": Generator._call_isLessThan,
    "matches": Generator._call_matches,
    "startsWith": lambda g, n, e: g._string_test(n, e, "startswith"),
    "endsWith": lambda g, n, e: g._string_test(n, e, "endswith"),
    "contains": lambda g, n, e: g._string_test(n, e, "contains"),
    "find": Generator._call_find,
    "findAll": Generator._call_findAll,
    "quantity": Generator._call_quantity,
    "semver": Generator._call_semver,
    "dyn": Generator._call_dyn,
}
