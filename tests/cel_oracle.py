"""A reference evaluator built on cel-python's interpreter (``celpy``), for tests and benchmarks.

It evaluates a selector against a :class:`DeviceView` with celpy, after converting the device
to celpy values and registering the Kubernetes quantity and semver functions. It is slow
(hundreds of microseconds per device) and is never used to decide anything; the differential
tests compare it with the compiled programs where celpy agrees with Kubernetes.

Known divergences of celpy from cel-go/Kubernetes (avoided by the differential corpus):
no type checker (ill-typed expressions fail at run time or not at all), no heterogeneous
numeric equality (``dyn(1) == 1.0`` is an error), Python ``re`` instead of RE2 for
``matches``, and Quantity/Semver compared with ``==`` to another type give false instead of
``no such overload``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import celpy
from celpy import celtypes

from gpucluster.dra.cel.view import DeviceView
from gpucluster.dra.quantity import Quantity
from gpucluster.dra.semver import Semver


class _DomainMap(celtypes.MapType):
    """Unknown domains read as empty maps, as in Kubernetes."""

    def __missing__(self, key: Any) -> Any:
        return celtypes.MapType({})


def to_celpy(value: Any) -> Any:
    if value is True or value is False:
        return celtypes.BoolType(value)
    if isinstance(value, int):
        return celtypes.IntType(value)
    if isinstance(value, str):
        return celtypes.StringType(value)
    if isinstance(value, float):
        return celtypes.DoubleType(value)
    if isinstance(value, (Quantity, Semver)):
        return value
    if isinstance(value, list):
        return celtypes.ListType([to_celpy(v) for v in value])
    if isinstance(value, dict):
        return celtypes.MapType({to_celpy(k): to_celpy(v) for k, v in value.items()})
    raise TypeError(f"cannot convert {value!r}")


def activation(view: DeviceView) -> dict[str, Any]:
    """celpy's activation for one device: ``{"device": map}``."""
    device = celtypes.MapType(
        {
            celtypes.StringType("driver"): celtypes.StringType(view.driver),
            celtypes.StringType("attributes"): _DomainMap(
                {celtypes.StringType(k): to_celpy(v) for k, v in view.attributes.items()}
            ),
            celtypes.StringType("capacity"): _DomainMap(
                {celtypes.StringType(k): to_celpy(v) for k, v in view.capacity.items()}
            ),
            celtypes.StringType("allowMultipleAllocations"): celtypes.BoolType(view.allow_multiple_allocations),
        }
    )
    return {"device": device}


def _compare(a: Any, b: Any) -> int:
    if isinstance(a, Quantity) and isinstance(b, Quantity):
        return a.cmp(b)
    if isinstance(a, Semver) and isinstance(b, Semver):
        return a.compare(b)
    raise TypeError("no such overload")


FUNCTIONS: dict[str, Callable[..., Any]] = {
    "quantity": lambda s: Quantity.parse(str(s)),
    "semver": lambda s, n=False: Semver.parse(str(s), normalize=bool(n)),
    "compareTo": lambda a, b: celtypes.IntType(_compare(a, b)),
    "isGreaterThan": lambda a, b: celtypes.BoolType(_compare(a, b) > 0),
    "isLessThan": lambda a, b: celtypes.BoolType(_compare(a, b) < 0),
    "major": lambda v: celtypes.IntType(v.major),
    "minor": lambda v: celtypes.IntType(v.minor),
    "patch": lambda v: celtypes.IntType(v.patch),
    "sign": lambda q: celtypes.IntType(q.sign()),
}

_ENV: celpy.Environment | None = None


class OracleProgram:
    def __init__(self, expression: str) -> None:
        global _ENV
        if _ENV is None:
            _ENV = celpy.Environment()
        self.expression = expression
        self._program = _ENV.program(_ENV.compile(expression), functions=FUNCTIONS)

    def evaluate_activation(self, act: dict[str, Any]) -> Any:
        """The raw celpy result (a celpy value, or a CELEvalError value)."""
        return self._program.evaluate(act)

    def evaluate(self, view: DeviceView) -> bool | Exception:
        """True/False, or the exception describing an evaluation error."""
        try:
            result = self._program.evaluate(activation(view))
        except Exception as exc:
            return exc
        if isinstance(result, celtypes.BoolType):
            return bool(result)
        if isinstance(result, Exception):
            return result
        return TypeError(f"non-bool result {result!r}")
