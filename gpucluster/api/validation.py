"""Validate API objects against the models, with errors phrased as the API server phrases them.

Every problem names its field path (``spec.draDriver.gpus.kubeletPlugin.healthcheck.port``) so a
user can find it; unknown fields are warnings, as kubectl's field validation reports them.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

from gpucluster.api import gpucluster as gc
from gpucluster.api import images
from gpucluster.api import kubefields as kf

M = TypeVar("M", bound=BaseModel)


@dataclass(frozen=True)
class FieldProblem:
    """One problem at one field path."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}" if self.path else self.message


# Union branches and constrained types appear in pydantic's error locations; they are not fields.
_BRANCH = re.compile(r"^(int|str|bool|float|none|constrained-(str|int)|[a-z-]+\[.*\])$")
_TYPE_NAMES = {
    "bool_type": "boolean",
    "int_type": "integer",
    "int_from_float": "integer",
    "float_type": "number",
    "string_type": "string",
    "dict_type": "object",
    "model_type": "object",
    "model_attributes_type": "object",
    "list_type": "array",
}


def field_path(loc: tuple[int | str, ...]) -> str:
    """``('spec', 'env', 0, 'name')`` -> ``spec.env[0].name``."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif not _BRANCH.match(part):
            out += f".{part}" if out else part
    return out


def _show(value: Any) -> str:
    try:
        return json.dumps(value)
    except (TypeError, ValueError):
        return repr(value)


_PATTERN_MESSAGES = {
    kf.LABEL_VALUE: kf.LABEL_VALUE_MESSAGE,
    kf.DNS_SUBDOMAIN: "must be a lowercase RFC 1123 subdomain: lowercase alphanumerics, '-' or '.', "
    "starting and ending with an alphanumeric (e.g. example.com)",
    kf.ENV_NAME: "a valid environment variable name must consist only of printable ASCII characters other than '='",
    kf.SYSCTL_NAME: f"must be a sysctl name matching {kf.SYSCTL_NAME}",
    kf.LOCAL_DESCENDING_PATH: "must be a relative path without '..'",
    kf.UNPADDED: "must be non-empty and not padded with whitespace",
    kf.HOST_PATH: kf.HOST_PATH_MESSAGE,
    kf.ABSOLUTE_PATH_WITHOUT_BACKSTEPS: "must be an absolute path without '..'",
    kf.PROMETHEUS_LABEL_NAME: "must be a Prometheus label name: ASCII letters, digits and '_', not starting with a digit",
    f"^$|{images.REPOSITORY}": images.REPOSITORY_MESSAGE,
    f"^$|{images.VERSION}": images.VERSION_MESSAGE,
}


def _message(error: ErrorDetails) -> str:
    kind = error["type"]
    ctx = error.get("ctx", {})
    value = error.get("input")
    if kind == "missing":
        return "Required value"
    if kind == "kube_invalid":
        return str(ctx["message"])
    if kind in _TYPE_NAMES:
        return f"Invalid value: {_show(value)}: must be of type {_TYPE_NAMES[kind]}"
    if kind == "literal_error":
        expected = ctx.get("expected", "")
        supported = expected.replace(" or ", ", ").replace("'", '"')
        return f"Unsupported value: {_show(value)}: supported values: {supported}"
    if kind in ("less_than_equal", "less_than"):
        bound = ctx.get("le", ctx.get("lt"))
        return f"Invalid value: {_show(value)}: must be less than or equal to {bound}"
    if kind in ("greater_than_equal", "greater_than"):
        bound = ctx.get("ge", ctx.get("gt"))
        return f"Invalid value: {_show(value)}: must be greater than or equal to {bound}"
    if kind == "string_pattern_mismatch":
        pattern = ctx.get("pattern")
        if pattern == kf.NON_NEGATIVE_QUANTITY:
            return f"Invalid value: {_show(value)}: must be a non-negative quantity such as 500m, 2, 1.5Gi or 1e3"
        if pattern in _PATTERN_MESSAGES:
            return f"Invalid value: {_show(value)}: {_PATTERN_MESSAGES[pattern]}"
        if pattern == gc.MAX_UNAVAILABLE_PATTERN:
            return (
                f"Invalid value: {_show(value)}: must be a positive number or a percentage from 1% to 100% "
                "(the operand DaemonSets have maxSurge 0)"
            )
        return f"Invalid value: {_show(value)}: must match the pattern {pattern}"
    if kind == "string_too_long":
        return f"Too long: may not be more than {ctx.get('max_length')} characters"
    if kind == "string_too_short":
        return f"Invalid value: {_show(value)}: must be at least {ctx.get('min_length')} characters"
    return f"Invalid value: {_show(value)}: {error['msg']}"


def problems_from(exc: ValidationError, prefix: tuple[int | str, ...] = ()) -> list[FieldProblem]:
    """One problem per field path; of a union's failed branches, the most telling one."""
    by_path: dict[str, list[ErrorDetails]] = {}
    for error in exc.errors(include_url=False):
        by_path.setdefault(field_path(prefix + tuple(error["loc"])), []).append(error)
    problems = []
    for path, errors in by_path.items():
        specific = [e for e in errors if e["type"] not in _TYPE_NAMES]
        if specific:
            problems.append(FieldProblem(path, _message(specific[0])))
        elif len(errors) > 1:
            types = " or ".join(dict.fromkeys(_TYPE_NAMES[e["type"]] for e in errors))
            problems.append(FieldProblem(path, f"Invalid value: {_show(errors[0].get('input'))}: must be {types}"))
        else:
            problems.append(FieldProblem(path, _message(errors[0])))
    return problems


def unknown_fields(model: BaseModel, path: str = "") -> list[str]:
    """Paths of fields the schema does not know; the API server would prune them."""
    found: list[str] = []
    if path != "metadata":  # ObjectMeta has many more fields than the few our rules type
        found += [f"{path}.{k}" if path else k for k in (model.model_extra or {})]
    for name in type(model).model_fields:
        value = getattr(model, name)
        child = f"{path}.{name}" if path else name
        if isinstance(value, BaseModel):
            found += unknown_fields(value, child)
        elif isinstance(value, list):
            for i, item in enumerate(value):
                if isinstance(item, BaseModel):
                    found += unknown_fields(item, f"{child}[{i}]")
    return found


@dataclass
class Validated:
    """The outcome of validating one object."""

    obj: gc.GPUCluster | None
    problems: list[FieldProblem]
    warnings: list[str]

    @property
    def ok(self) -> bool:
        return not self.problems


def validate_gpucluster(obj: Any) -> Validated:
    """Validate a GPUCluster as the CRD schema and its singleton rule would, and default it."""
    if not isinstance(obj, dict):
        return Validated(None, [FieldProblem("", "expected a GPUCluster object")], [])
    problems: list[FieldProblem] = []
    api_version, kind = obj.get("apiVersion"), obj.get("kind")
    if api_version != gc.API_VERSION or kind != gc.KIND:
        problems.append(
            FieldProblem("", f"expected apiVersion {gc.API_VERSION} kind {gc.KIND}, got {api_version} {kind}")
        )
        return Validated(None, problems, [])
    try:
        model = gc.GPUCluster.model_validate(obj)
    except ValidationError as exc:
        return Validated(None, problems_from(exc), [])
    name = model.metadata.name
    if name != gc.SINGLETON_NAME:
        shown = "Required value" if name is None else f"Invalid value: {_show(name)}"
        problems.append(FieldProblem("metadata.name", f"{shown}: {gc.SINGLETON_MESSAGE}"))
    warnings = [f'unknown field "{p}"' for p in unknown_fields(model)]
    return Validated(model, problems, warnings)


def validate_model(cls: type[M], obj: Any, prefix: tuple[int | str, ...] = ()) -> tuple[M | None, list[FieldProblem]]:
    """Validate ``obj`` as ``cls``; the problems name field paths under ``prefix``."""
    try:
        return cls.model_validate(obj), []
    except ValidationError as exc:
        return None, problems_from(exc, prefix)
