"""Helpers called by generated programs for operations whose operand types are only known at
run time (``dyn``/``any`` values such as device attributes)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, NoReturn

from gpucluster.dra.cel.errors import CelRuntimeError
from gpucluster.dra.cel.values import (
    Optional,
    Uint,
    map_find,
    no_such_key,
    no_such_overload,
    type_name,
)
from gpucluster.dra.cel.view import EMPTY_MAP, DeviceView, DomainMap

_GO_TYPE_NAMES = {
    "int": "types.Int",
    "uint": "types.Uint",
    "double": "types.Double",
    "bool": "types.Bool",
    "string": "types.String",
    "bytes": "types.Bytes",
    "null_type": "types.Null",
    "kubernetes.Semver": "cel.Semver",
    "kubernetes.Quantity": "cel.Quantity",
    "optional_type": "*types.Optional",
    "type": "*types.Type",
    "kubernetes.DRADevice": "*types.baseMap",
}


def not_iterable(value: Any) -> NoReturn:
    name = type_name(value)
    raise CelRuntimeError(f"got '{_GO_TYPE_NAMES.get(name, name)}', expected iterable type")


def iterate(value: Any) -> Iterable[Any]:
    """The iteration order of a comprehension range: list elements or map keys."""
    if isinstance(value, (list, dict)):
        return value
    not_iterable(value)


def iterate2(value: Any) -> Iterable[tuple[Any, Any]]:
    """(index, element) of a list or (key, value) of a map, for two-variable comprehensions."""
    if isinstance(value, list):
        return enumerate(value)
    if isinstance(value, dict):
        return value.items()
    not_iterable(value)


def select(obj: Any, field: str) -> Any:
    """``obj.field`` on a value whose type is only known at run time."""
    if type(obj) is dict:
        if field in obj:
            return obj[field]
        no_such_key(field)
    if type(obj) is DomainMap:
        return obj.get(field, EMPTY_MAP)
    if isinstance(obj, DeviceView):
        return obj.field(field)
    if isinstance(obj, dict):
        if field in obj:
            return obj[field]
        no_such_key(field)
    if type(obj) is Optional:
        return opt_select(obj, field)
    no_such_overload()


def has(obj: Any, field: str) -> bool:
    """``has(obj.field)``."""
    if type(obj) is DomainMap:
        # Kubernetes' map wrapper reports every domain as present to field tests.
        return True
    if isinstance(obj, dict):
        return field in obj
    if isinstance(obj, DeviceView):
        value = obj.field(field)
        return bool(value) if not isinstance(value, dict) else len(value) > 0
    if type(obj) is Optional:
        return obj.has_value and has(obj.value, field)
    no_such_overload()


def index(obj: Any, key: Any) -> Any:
    """``obj[key]``."""
    if type(obj) is list:
        tk = type(key)
        if tk is int or tk is Uint:
            i = int(key)
        elif tk is float:
            if not key.is_integer():
                raise CelRuntimeError(f"unsupported index value {key} in list")
            i = int(key)
        else:
            raise CelRuntimeError(f"unsupported index type '{type_name(key)}' in list")
        if 0 <= i < len(obj):
            return obj[i]
        raise CelRuntimeError(f"index out of bounds: {i}")
    if type(obj) is DomainMap:
        found, value = map_find(obj, key)
        return value if found else EMPTY_MAP
    if isinstance(obj, dict):
        found, value = map_find(obj, key)
        if found:
            return value
        no_such_key(key)
    if type(obj) is Optional:
        return opt_index(obj, key)
    no_such_overload("_[_]")


def opt_select(obj: Any, field: str) -> Optional:
    """``obj.?field``, and ``obj.field`` when obj is optional."""
    if type(obj) is Optional:
        if not obj.has_value:
            return Optional.NONE
        obj = obj.value
    if type(obj) is DomainMap:
        return Optional(obj.get(field, EMPTY_MAP))
    if isinstance(obj, dict):
        return Optional(obj[field]) if field in obj else Optional.NONE
    if isinstance(obj, DeviceView):
        return Optional(obj.field(field)) if has(obj, field) else Optional.NONE
    no_such_overload()


def opt_index(obj: Any, key: Any) -> Optional:
    """``obj[?key]``, and ``obj[key]`` when obj is optional."""
    if type(obj) is Optional:
        if not obj.has_value:
            return Optional.NONE
        obj = obj.value
    if type(obj) is list:
        try:
            return Optional(index(obj, key))
        except CelRuntimeError as exc:
            if exc.message.startswith("index out of bounds"):
                return Optional.NONE
            raise
    if type(obj) is DomainMap:
        found, value = map_find(obj, key)
        return Optional(value if found else EMPTY_MAP)
    if isinstance(obj, dict):
        found, value = map_find(obj, key)
        return Optional(value) if found else Optional.NONE
    no_such_overload("_[?_]")


def optional_elements(elements: list[tuple[bool, Any]]) -> list[Any]:
    """A list literal with ``?elem`` entries: absent optionals are skipped."""
    out: list[Any] = []
    for is_optional, value in elements:
        if is_optional:
            if type(value) is not Optional:
                no_such_overload()
            if value.has_value:
                out.append(value.value)
        else:
            out.append(value)
    return out


def build_map(entries: list[tuple[bool, Any, Any]]) -> dict[Any, Any]:
    """A map literal; duplicate keys and unsupported key types are errors, as in cel-go."""
    out: dict[Any, Any] = {}
    for is_optional, key, value in entries:
        if type(key) not in (str, int, Uint, bool):
            raise CelRuntimeError(f"unsupported key type: {type_name(key)}")
        if is_optional:
            if type(value) is not Optional:
                no_such_overload()
            if not value.has_value:
                continue
            value = value.value
        if map_find(out, key)[0]:
            raise CelRuntimeError(f"Failed with repeated key: {key}")
        out[key] = value
    return out
