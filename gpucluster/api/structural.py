"""Structural-schema defaulting, as kube-apiserver applies a CRD's ``default`` values.

A missing field with a default gets a deep copy of it, and defaulting then continues inside the
value it got, so a ``default: {}`` object receives its own fields' defaults. Used to check that the
generated CRD defaults exactly as the models do, and by the sandbox API server.
"""

from __future__ import annotations

import copy
from typing import Any

Schema = dict[str, Any]


def apply_defaults(value: Any, schema: Schema) -> Any:
    """Return ``value`` with the schema's defaults applied (the input is not modified)."""
    if isinstance(value, dict):
        out = dict(value)
        properties: dict[str, Schema] = schema.get("properties", {})
        for name, child in properties.items():
            if name not in out and "default" in child:
                out[name] = copy.deepcopy(child["default"])
            if name in out:
                out[name] = apply_defaults(out[name], child)
        extra = schema.get("additionalProperties")
        if isinstance(extra, dict):
            for name in out:
                if name not in properties:
                    out[name] = apply_defaults(out[name], extra)
        return out
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        return [apply_defaults(item, schema["items"]) for item in value]
    return value
