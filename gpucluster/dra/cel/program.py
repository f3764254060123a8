"""``compile_selector``: parse, type-check, estimate the cost of, and compile a DRA selector."""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import Any, Final

from gpucluster.dra.cel import types as t
from gpucluster.dra.cel.checker import check
from gpucluster.dra.cel.codegen import Generator
from gpucluster.dra.cel.cost import COST_LIMIT, UNBOUNDED, estimate_cost, is_unbounded
from gpucluster.dra.cel.errors import CelCompileError
from gpucluster.dra.cel.parser import parse
from gpucluster.dra.cel.view import DeviceView

# resourceapi.CELSelectorExpressionMaxLength
MAX_EXPRESSION_LENGTH: Final = 10 * 1024


class Program:
    """A compiled selector; ``evaluate(view)`` is the selector's verdict for one device.

    ``reads`` lists what the expression may read from ``device``: ``("attributes", domain,
    name)`` and ``("capacity", domain, name)`` for constant lookups, ``("attributes", domain)``
    / ``("capacity", domain)`` for a whole domain, ``("attributes",)`` / ``("capacity",)``,
    ``("driver",)``, ``("allowMultipleAllocations",)`` and ``("device",)`` (the whole device).
    Two devices that agree on everything in ``reads`` get the same result.
    """

    __slots__ = ("consumable_capacity", "evaluate", "expression", "max_cost", "reads", "source")

    #: ``evaluate(view)``: True when the device matches; CelRuntimeError when evaluation fails
    #: (also for a non-bool result). The generated function itself, not a method wrapping it:
    #: one Python call per device.
    evaluate: Callable[[DeviceView], bool]

    def __init__(
        self,
        expression: str,
        fn: Callable[[Any], bool],
        reads: frozenset[tuple[str, ...]],
        max_cost: float,
        source: str,
        consumable_capacity: bool,
    ) -> None:
        self.expression = expression
        self.evaluate = fn
        self.reads = reads
        self.max_cost = max_cost
        self.source = source
        self.consumable_capacity = consumable_capacity

    def __repr__(self) -> str:
        return f"Program({self.expression!r})"


_lock = threading.Lock()


@functools.lru_cache(maxsize=4096)
def _compile(
    expression: str, consumable_capacity: bool, estimate: bool = True, list_type_attributes: bool = False
) -> Program:
    if len(expression) > MAX_EXPRESSION_LENGTH:
        raise CelCompileError(
            expression,
            1,
            1,
            f"expression too long: may not be more than {MAX_EXPRESSION_LENGTH} bytes (was {len(expression)})",
        )
    root = parse(expression)
    try:
        out_type = check(expression, root, consumable_capacity, list_type_attributes)
    except RecursionError:
        raise CelCompileError(expression, 1, 1, "expression recursion limit exceeded") from None
    # With DRAListTypeAttributes an attribute is dyn, not any: an attribute as the result is dyn.
    if out_type != t.BOOL and out_type != t.ANY and not (list_type_attributes and out_type == t.DYN):
        raise CelCompileError(expression, 1, 1, f"must evaluate to bool or the unknown type, not {out_type}")
    cost = estimate_cost(root) if estimate else UNBOUNDED
    if estimate and (is_unbounded(cost) or cost > COST_LIMIT):
        raise CelCompileError(
            expression,
            1,
            1,
            "too complex, exceeds cost limit"
            + ("" if is_unbounded(cost) else f" (estimated cost {int(cost)}, limit {COST_LIMIT})"),
        )
    gen = Generator(expression)
    with _lock:
        fn = gen.compile(root)
    return Program(expression, fn, frozenset(gen.reads), cost, gen.source, consumable_capacity)


def compile_selector(
    expression: str,
    *,
    consumable_capacity: bool = False,
    disable_cost_estimation: bool = False,
    list_type_attributes: bool = False,
) -> Program:
    """Compile a DRA CEL selector (cached by expression text and flags).

    ``consumable_capacity`` declares ``device.allowMultipleAllocations`` (the
    DRAConsumableCapacity feature); without it, referring to that field is a compile error.
    ``disable_cost_estimation`` skips the worst-case cost check (Kubernetes'
    ``Options.DisableCostEstimation``; ``max_cost`` is then unbounded).
    ``list_type_attributes`` (DRAListTypeAttributes, 1.36 alpha): attribute values are ``dyn``
    (lists allowed in macros and ``in``) and ``<value>.includes(<arg>)`` is declared; evaluate
    such programs on views built with ``list_type_attributes=True``.
    Raises CelCompileError with the line and column of the problem.
    """
    if list_type_attributes:
        return _compile(expression, consumable_capacity, not disable_cost_estimation, True)
    return _compile(expression, consumable_capacity, not disable_cost_estimation)
