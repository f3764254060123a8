"""The Kubernetes DRA CEL environment, compiled to Python closures.

``compile_selector(expression)`` type-checks a ``ResourceClaim`` CEL selector the way
Kubernetes does (``k8s.io/dynamic-resource-allocation/cel``) and compiles it once into Python
code; ``Program.evaluate(view)`` runs it for one device, where ``view`` comes from
``device_view(driver, device)`` or ``slice_views(resource_slice)``.
"""

from __future__ import annotations

from gpucluster.dra.cel.errors import CelCompileError, CelError, CelRuntimeError
from gpucluster.dra.cel.program import MAX_EXPRESSION_LENGTH, Program, compile_selector
from gpucluster.dra.cel.readkey import ReadKey, read_key
from gpucluster.dra.cel.view import (
    DeviceView,
    ListDeviceView,
    Shapes,
    attributes_conversion_error,
    conversion_error,
    device_view,
    list_attributes_conversion_error,
    list_conversion_error,
    slice_views,
)

__all__ = [
    "MAX_EXPRESSION_LENGTH",
    "CelCompileError",
    "CelError",
    "CelRuntimeError",
    "DeviceView",
    "ListDeviceView",
    "Program",
    "ReadKey",
    "Shapes",
    "attributes_conversion_error",
    "compile_selector",
    "conversion_error",
    "device_view",
    "list_attributes_conversion_error",
    "list_conversion_error",
    "read_key",
    "slice_views",
]
