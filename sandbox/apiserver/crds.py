"""CustomResourceDefinitions: served resource types, structural pruning, defaulting, validation
(OpenAPI v3 value checks and ``x-kubernetes-validations`` CEL rules through celpy)."""

from __future__ import annotations

import json
import re
from functools import lru_cache
from typing import Any

from gpucluster.api.structural import apply_defaults
from gpucluster.sandbox.apiserver.resources import ResourceType

Obj = dict[str, Any]
Cause = tuple[str, str, str]  # (reason, field, message)

CRD_GROUP = "apiextensions.k8s.io"


# ---------------------------------------------------------------- CRD objects


def crd_causes(crd: Obj) -> list[Cause]:
    """Validation of a CRD object itself (the parts that decide how it is served)."""
    causes: list[Cause] = []
    spec = crd.get("spec") or {}
    names = spec.get("names") or {}
    group = spec.get("group") or ""
    plural = names.get("plural") or ""
    name = (crd.get("metadata") or {}).get("name", "")
    if not group:
        causes.append(("FieldValueRequired", "spec.group", "Required value"))
    if not plural:
        causes.append(("FieldValueRequired", "spec.names.plural", "Required value"))
    if not names.get("kind"):
        causes.append(("FieldValueRequired", "spec.names.kind", "Required value"))
    if group and plural and name != f"{plural}.{group}":
        causes.append(
            ("FieldValueInvalid", "metadata.name", f'Invalid value: "{name}": must be spec.names.plural+"."+spec.group')
        )
    if spec.get("scope") not in ("Namespaced", "Cluster"):
        causes.append(
            (
                "FieldValueNotSupported",
                "spec.scope",
                f'Unsupported value: "{spec.get("scope", "")}": supported values: "Cluster", "Namespaced"',
            )
        )
    versions = spec.get("versions") or []
    if not versions:
        causes.append(
            (
                "FieldValueRequired",
                "spec.versions",
                "Required value: must have exactly one version marked as storage version",
            )
        )
    elif sum(1 for v in versions if v.get("storage")) != 1:
        causes.append(
            (
                "FieldValueInvalid",
                "spec.versions",
                "Invalid value: must have exactly one version marked as storage version",
            )
        )
    for i, v in enumerate(versions):
        schema = ((v.get("schema") or {}).get("openAPIV3Schema")) or None
        for rule_path, rule in _rules(schema or {}, f"spec.versions[{i}].schema.openAPIV3Schema"):
            try:
                _compile(rule)
            except Exception as exc:  # celpy raises its own error types
                causes.append(
                    ("FieldValueInvalid", rule_path, f"Invalid value: {json.dumps(rule)}: compilation failed: {exc}")
                )
    return causes


def _rules(schema: Obj, path: str) -> list[tuple[str, str]]:
    out = [
        (f"{path}.x-kubernetes-validations[{i}].rule", r.get("rule", ""))
        for i, r in enumerate(schema.get("x-kubernetes-validations") or [])
    ]
    for name, child in (schema.get("properties") or {}).items():
        out += _rules(child, f"{path}.properties[{name}]")
    if isinstance(schema.get("items"), dict):
        out += _rules(schema["items"], f"{path}.items")
    if isinstance(schema.get("additionalProperties"), dict):
        out += _rules(schema["additionalProperties"], f"{path}.additionalProperties")
    return out


def crd_defaults(crd: Obj) -> Obj:
    spec = crd.setdefault("spec", {})
    names = spec.setdefault("names", {})
    if names.get("kind"):
        names.setdefault("singular", str(names["kind"]).lower())
        names.setdefault("listKind", f"{names['kind']}List")
    spec.setdefault("conversion", {"strategy": "None"})
    for v in spec.get("versions") or []:
        v.setdefault("served", True)
        v.setdefault("storage", False)
    return crd


def crd_status(crd: Obj, now: str, old_status: Obj | None) -> Obj:
    spec = crd.get("spec") or {}
    names = dict(spec.get("names") or {})
    stored = list((old_status or {}).get("storedVersions") or [])
    for v in spec.get("versions") or []:
        if v.get("storage") and v.get("name") not in stored:
            stored.append(v["name"])
    previous = {c.get("type"): c for c in (old_status or {}).get("conditions") or []}

    def cond(kind: str, reason: str, message: str) -> Obj:
        keep = previous.get(kind)
        when = keep["lastTransitionTime"] if keep and keep.get("status") == "True" else now
        return {"type": kind, "status": "True", "lastTransitionTime": when, "reason": reason, "message": message}

    return {
        "conditions": [
            cond("NamesAccepted", "NoConflicts", "no conflicts found"),
            cond("Established", "InitialNamesAccepted", "the initial names have been accepted"),
        ],
        "acceptedNames": names,
        "storedVersions": stored,
    }


def resource_types(crd: Obj) -> list[ResourceType]:
    spec = crd.get("spec") or {}
    names = spec.get("names") or {}
    storage = next((v["name"] for v in spec.get("versions") or [] if v.get("storage")), "")
    out = []
    for v in spec.get("versions") or []:
        if not v.get("served", True):
            continue
        subresources = v.get("subresources") or {}
        sub = tuple(s for s in ("status", "scale") if s in subresources)
        out.append(
            ResourceType(
                group=spec["group"],
                version=v["name"],
                plural=names["plural"],
                kind=names["kind"],
                namespaced=spec.get("scope") == "Namespaced",
                singular=names.get("singular", ""),
                short_names=tuple(names.get("shortNames") or ()),
                categories=tuple(names.get("categories") or ()),
                list_kind=names.get("listKind", ""),
                subresources=sub,
                generation=True,
                status_on_create="status" not in subresources,
                schema=(v.get("schema") or {}).get("openAPIV3Schema"),
                printer_columns=list(v.get("additionalPrinterColumns") or []),
                custom=True,
                storage_version=storage,
            )
        )
    return out


# ---------------------------------------------------------------- custom resources


def prune(value: Any, schema: Obj, *, root: bool = False, dropped: list[str] | None = None, path: str = "") -> Any:
    """Drop fields the structural schema does not specify (unless x-kubernetes-preserve-unknown-fields);
    the paths of dropped fields are appended to ``dropped``."""
    if isinstance(value, dict):
        keep = {"apiVersion", "kind", "metadata"} if schema.get("x-kubernetes-embedded-resource") or root else set()
        props: Obj = schema.get("properties") or {}
        extra = schema.get("additionalProperties")
        preserve = bool(schema.get("x-kubernetes-preserve-unknown-fields"))
        out = {}
        for key, child in value.items():
            child_path = f"{path}.{key}" if path else key
            if key in props:
                out[key] = (
                    child
                    if (root and key == "metadata")
                    else prune(child, props[key], dropped=dropped, path=child_path)
                )
            elif isinstance(extra, dict):
                out[key] = prune(child, extra, dropped=dropped, path=child_path)
            elif key in keep or preserve or extra is True:
                out[key] = child
            elif dropped is not None:
                dropped.append(child_path)
        return out
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        return [prune(v, schema["items"], dropped=dropped, path=f"{path}[{i}]") for i, v in enumerate(value)]
    return value


def default(obj: Obj, schema: Obj) -> Obj:
    out = apply_defaults(obj, schema)
    assert isinstance(out, dict)
    return out


def _render(value: Any) -> str:
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict):
        return '"object"'
    if isinstance(value, list):
        return '"array"'
    if value is None:
        return '"null"'
    return str(value)


def _type_name(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return "null"


_INT32 = (-(2**31), 2**31 - 1)


# Schema errors after which kube-apiserver evaluates no CEL rule (apiextensions' hasBlockingErr:
# a wrong type, an unsupported value, or a bound the rules' cost estimate relies on).
_BLOCKING = ("FieldValueTypeInvalid", "FieldValueNotSupported", "FieldValueTooLong", "FieldValueTooMany")
_NOT_CHECKED: Cause = (
    "FieldValueInvalid",
    "<nil>",
    "Invalid value: null: some validation rules were not checked because the object was invalid; "
    "correct the existing errors to complete validation",
)


def _has_rules(schema: Any) -> bool:
    if isinstance(schema, dict):
        return bool(schema.get("x-kubernetes-validations")) or any(_has_rules(v) for v in schema.values())
    if isinstance(schema, list):
        return any(_has_rules(v) for v in schema)
    return False


def validate(value: Any, schema: Obj, path: str = "", old: Any = None, *, has_old: bool = False) -> list[Cause]:
    """OpenAPI v3 value validation, then the CEL rules (none after a blocking schema error, which
    is then said once); field paths as kube-apiserver writes them."""
    causes: list[Cause] = []
    lists: list[Cause] = []
    rules: list[Cause] = []
    _validate(value, schema, path, old, has_old, causes, root=True, lists=lists, rules=rules)
    causes += lists  # structurallisttype.ValidateListSetsAndMaps comes after the schema's checks
    if any(reason in _BLOCKING for reason, _, _ in causes):
        return [*causes, _NOT_CHECKED] if _has_rules(schema) else causes
    return causes + rules


def _validate(
    value: Any,
    schema: Obj,
    path: str,
    old: Any,
    has_old: bool,
    causes: list[Cause],
    *,
    root: bool = False,
    lists: list[Cause],
    rules: list[Cause],
) -> None:
    label = path or "<nil>"
    where = path or "body"
    if value is None:
        if not schema.get("nullable") and schema.get("type"):
            causes.append(
                (
                    "FieldValueTypeInvalid",
                    label,
                    f'Invalid value: "null": {where} in body must be of type {schema["type"]}: "null"',
                )
            )
        return
    kind = schema.get("type")
    if schema.get("x-kubernetes-int-or-string"):
        if not isinstance(value, int | str) or isinstance(value, bool):
            causes.append(
                (
                    "FieldValueTypeInvalid",
                    label,
                    f'Invalid value: "{_type_name(value)}": {where} in body must be of type integer,string: "{_type_name(value)}"',
                )
            )
            return
    elif kind:
        have = _type_name(value)
        ok = have == kind or (kind == "number" and have == "integer")
        if not ok:
            causes.append(
                (
                    "FieldValueTypeInvalid",
                    label,
                    f'Invalid value: "{have}": {where} in body must be of type {kind}: "{have}"',
                )
            )
            return
    if "enum" in schema and value not in schema["enum"]:
        supported = ", ".join(_render(v) for v in schema["enum"])
        causes.append(
            ("FieldValueNotSupported", label, f"Unsupported value: {_render(value)}: supported values: {supported}")
        )
    if isinstance(value, str):
        # kube-openapi's string validator stops at the first failure: maxLength, minLength, pattern.
        string_causes: list[Cause] = []
        if "maxLength" in schema and len(value) > schema["maxLength"]:
            string_causes.append(
                ("FieldValueTooLong", label, f"Too long: may not be more than {schema['maxLength']} bytes")
            )
        elif "minLength" in schema and len(value) < schema["minLength"]:
            string_causes.append(
                (
                    "FieldValueInvalid",
                    label,
                    f"Invalid value: {_render(value)}: {where} in body should be at least {schema['minLength']} chars long",
                )
            )
        elif "pattern" in schema and not _pattern(schema["pattern"]).search(value):
            string_causes.append(
                (
                    "FieldValueInvalid",
                    label,
                    f"Invalid value: {_render(value)}: {where} in body should match '{schema['pattern']}'",
                )
            )
        causes += string_causes
    if isinstance(value, int | float) and not isinstance(value, bool):
        if schema.get("format") == "int32" and isinstance(value, int) and not _INT32[0] <= value <= _INT32[1]:
            causes.append(
                ("FieldValueInvalid", label, f"Invalid value: {value}: {where} in body must be of type int32")
            )
        if "minimum" in schema:
            lo = schema["minimum"]
            if value < lo or (schema.get("exclusiveMinimum") and value == lo):
                op = "greater than" if schema.get("exclusiveMinimum") else "greater than or equal to"
                causes.append(
                    ("FieldValueInvalid", label, f"Invalid value: {value}: {where} in body should be {op} {lo}")
                )
        if "maximum" in schema:
            hi = schema["maximum"]
            if value > hi or (schema.get("exclusiveMaximum") and value == hi):
                op = "less than" if schema.get("exclusiveMaximum") else "less than or equal to"
                causes.append(
                    ("FieldValueInvalid", label, f"Invalid value: {value}: {where} in body should be {op} {hi}")
                )
    if isinstance(value, list):
        if "maxItems" in schema and len(value) > schema["maxItems"]:
            causes.append(
                ("FieldValueTooMany", label, f"Too many: {len(value)}: must have at most {schema['maxItems']} items")
            )
        if "minItems" in schema and len(value) < schema["minItems"]:
            causes.append(
                (
                    "FieldValueInvalid",
                    label,
                    f"Invalid value: {len(value)}: {where} in body should have at least {schema['minItems']} items",
                )
            )
        lists += _list_type_causes(value, schema, path)
        items = schema.get("items")
        if isinstance(items, dict):
            old_items = old if isinstance(old, list) else []
            for i, item in enumerate(value):
                _validate(
                    item,
                    items,
                    f"{path}[{i}]",
                    old_items[i] if i < len(old_items) else None,
                    i < len(old_items) and has_old,
                    causes,
                    lists=lists,
                    rules=rules,
                )
    if isinstance(value, dict):
        for req in schema.get("required") or []:
            if req not in value:
                child = f"{path}.{req}" if path else req
                causes.append(("FieldValueRequired", child, "Required value"))
        props = schema.get("properties") or {}
        extra = schema.get("additionalProperties")
        old_map = old if isinstance(old, dict) else {}
        for key, child_value in value.items():
            child_schema = props.get(key)
            if child_schema is None and isinstance(extra, dict):
                child_schema = extra
            if child_schema is None or (root and key == "metadata"):
                continue
            child_path = f"{path}.{key}" if path else key
            _validate(
                child_value,
                child_schema,
                child_path,
                old_map.get(key),
                has_old and key in old_map,
                causes,
                lists=lists,
                rules=rules,
            )
    for rule in schema.get("x-kubernetes-validations") or []:
        cause = _check_rule(rule, value, old, has_old, path, root=root, declared=str(schema.get("type") or ""))
        if cause:
            rules.append(cause)


def _list_type_causes(value: list[Any], schema: Obj, path: str) -> list[Cause]:
    """x-kubernetes-list-type map and set: an item whose key (or value) came before is a
    Duplicate, named by its index and its key fields (apiextensions' listtype validation)."""
    kind = schema.get("x-kubernetes-list-type")
    if kind not in ("map", "set"):
        return []
    keys = list(schema.get("x-kubernetes-list-map-keys") or [])
    seen: set[str] = set()
    causes: list[Cause] = []
    for i, item in enumerate(value):
        if kind == "map":
            if not isinstance(item, dict):
                continue
            shown = {k: item[k] for k in sorted(keys) if k in item}
        else:
            shown = item
        key = json.dumps(shown, sort_keys=True, separators=(",", ":"))
        if key in seen:
            causes.append(("FieldValueDuplicate", f"{path}[{i}]", f"Duplicate value: {key}"))
        seen.add(key)
    return causes


@lru_cache(maxsize=512)
def _pattern(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern)


def _quantity_library() -> dict[str, Any]:
    """Kubernetes' CEL quantity library (k8s.io/apiserver/pkg/cel/library/quantity.go), which
    kube-apiserver offers CRD rules: ``quantity``, ``isQuantity`` and the Quantity methods."""
    from celpy import celtypes
    from celpy.evaluation import CELEvalError

    from gpucluster.dra.quantity import Quantity, QuantityError

    def parse(text: Any) -> Quantity:
        if not isinstance(text, str):
            raise CELEvalError("no such overload")
        try:
            return Quantity.parse(str(text))
        except QuantityError as exc:
            raise CELEvalError(str(exc)) from None

    def is_quantity(text: Any) -> Any:
        try:
            parse(text)
        except CELEvalError:
            return celtypes.BoolType(False)
        return celtypes.BoolType(True)

    def operand(value: Any) -> Quantity:
        if isinstance(value, Quantity):
            return value
        if isinstance(value, int) and not isinstance(value, bool):
            return Quantity.from_int(int(value))
        raise CELEvalError("no such overload")

    def as_integer(q: Quantity) -> Any:
        try:
            return celtypes.IntType(q.as_integer())
        except QuantityError:
            raise CELEvalError("cannot convert value to integer") from None

    library: dict[str, Any] = {
        "quantity": parse,
        "isQuantity": is_quantity,
        "sign": lambda q: celtypes.IntType(operand(q).sign()),
        "isInteger": lambda q: celtypes.BoolType(operand(q).is_integer()),
        "asInteger": lambda q: as_integer(operand(q)),
        "asApproximateFloat": lambda q: celtypes.DoubleType(operand(q).as_approximate_float()),
        "compareTo": lambda q, other: celtypes.IntType(operand(q).cmp(operand(other))),
        "isLessThan": lambda q, other: celtypes.BoolType(operand(q).cmp(operand(other)) < 0),
        "isGreaterThan": lambda q, other: celtypes.BoolType(operand(q).cmp(operand(other)) > 0),
        "add": lambda q, other: operand(q).add(operand(other)),
        "sub": lambda q, other: operand(q).sub(operand(other)),
    }

    def as_value(fn: Any) -> Any:
        """celpy wants errors as values (so that ``false && quantity('x')`` is false): an error
        argument passes through, a raised error is returned."""

        def call(*args: Any) -> Any:
            for arg in args:
                if isinstance(arg, CELEvalError):
                    return arg
            try:
                return fn(*args)
            except CELEvalError as exc:
                return exc

        return call

    return {name: as_value(fn) for name, fn in library.items()}


@lru_cache(maxsize=1)
def _library() -> dict[str, Any]:
    return _quantity_library()


@lru_cache(maxsize=512)
def _compile(rule: str) -> Any:
    import celpy

    env = celpy.Environment()
    return env.program(env.compile(rule), functions=_library())


def _cel_self(value: Any, root: bool) -> Any:
    if root and isinstance(value, dict):
        md = value.get("metadata") or {}
        value = {**value, "metadata": {k: md[k] for k in ("name", "generateName") if k in md}}
    return value


def _check_rule(
    rule: Obj, value: Any, old: Any, has_old: bool, path: str, *, root: bool, declared: str
) -> Cause | None:
    """One rule on ``value``; a failure shows the schema's declared type as its value, as
    kube-apiserver's (``"object"``, ``"string"``, ``""`` for an int-or-string)."""
    from celpy import json_to_cel  # type: ignore[attr-defined]

    text = str(rule.get("rule", ""))
    transition = "oldSelf" in text
    if transition and not has_old:
        return None
    activation: Obj = {"self": json_to_cel(_cel_self(value, root))}
    if transition:
        activation["oldSelf"] = json_to_cel(_cel_self(old, root))
    field = path
    if rule.get("fieldPath"):
        field = f"{path}{rule['fieldPath']}"
    label = field or "<nil>"
    reason = str(rule.get("reason") or "FieldValueInvalid")
    try:
        result = _compile(text).evaluate(activation)
    except Exception as exc:  # evaluation errors are reported, never raised
        return (
            "FieldValueInvalid",
            label,
            f"Invalid value: {_render(declared)}: {text}: error evaluating rule: {exc}",
        )
    if isinstance(result, Exception):
        return (
            "FieldValueInvalid",
            label,
            f"Invalid value: {_render(declared)}: {text}: error evaluating rule: {result}",
        )
    if bool(result):
        return None
    message = str(rule.get("message") or f"failed rule: {text}")
    if reason == "FieldValueForbidden":
        return (reason, label, f"Forbidden: {message}")
    if reason == "FieldValueRequired":
        return (reason, label, f"Required value: {message}")
    if reason == "FieldValueDuplicate":
        return (reason, label, f"Duplicate value: {message}")
    return ("FieldValueInvalid", label, f"Invalid value: {_render(declared)}: {message}")
