"""API errors shaped exactly like kube-apiserver's ``Status`` objects (apimachinery/pkg/api/errors)."""

from __future__ import annotations

from typing import Any

Obj = dict[str, Any]


class ApiError(Exception):
    """An error the server answers with a ``Status`` body and ``code``."""

    def __init__(
        self,
        code: int,
        reason: str,
        message: str,
        *,
        details: Obj | None = None,
        retry_after: int | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details
        self.retry_after = retry_after
        # Admission warnings gathered before the denial; kube-apiserver sends them with the error.
        self.warnings: list[str] = []

    def status(self) -> Obj:
        body: Obj = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
        }
        if self.reason:  # some server errors carry none (a failed server-side apply conversion)
            body["reason"] = self.reason
        if self.details is not None:
            body["details"] = self.details
        body["code"] = self.code
        return body


def _qualified(resource: str, group: str) -> str:
    return f"{resource}.{group}" if group else resource


def _details(name: str, group: str, kind: str, causes: list[Obj] | None = None) -> Obj:
    details: Obj = {}
    if name:
        details["name"] = name
    if group:
        details["group"] = group
    if kind:
        details["kind"] = kind
    if causes:
        details["causes"] = causes
    return details


def not_found(group: str, resource: str, name: str) -> ApiError:
    return ApiError(
        404,
        "NotFound",
        f'{_qualified(resource, group)} "{name}" not found',
        details=_details(name, group, resource),
    )


def already_exists(group: str, resource: str, name: str) -> ApiError:
    return ApiError(
        409,
        "AlreadyExists",
        f'{_qualified(resource, group)} "{name}" already exists',
        details=_details(name, group, resource),
    )


def conflict(group: str, resource: str, name: str, why: str) -> ApiError:
    return ApiError(
        409,
        "Conflict",
        f'Operation cannot be fulfilled on {_qualified(resource, group)} "{name}": {why}',
        details=_details(name, group, resource),
    )


STALE = "the object has been modified; please apply your changes to the latest version and try again"


def stale(group: str, resource: str, name: str) -> ApiError:
    return conflict(group, resource, name, STALE)


def invalid(group: str, kind: str, name: str, causes: list[tuple[str, str, str]]) -> ApiError:
    """422 Invalid; ``causes`` are (type, field, message), type as FieldValueInvalid etc."""
    rendered = [{"reason": reason, "message": message, "field": field} for reason, field, message in causes]
    # the message lists each distinct error once (field.ErrorList.ToAggregate), the causes all of them
    parts = list(dict.fromkeys(f"{field}: {message}" if field else message for _, field, message in causes))
    joined = parts[0] if len(parts) == 1 else "[" + ", ".join(parts) + "]"
    return ApiError(
        422,
        "Invalid",
        f'{_qualified(kind, group)} "{name}" is invalid: {joined}',
        details=_details(name, group, kind, rendered),
    )


def bad_request(message: str) -> ApiError:
    return ApiError(400, "BadRequest", message)


def method_not_allowed(message: str = "the server does not allow this method on the requested resource") -> ApiError:
    return ApiError(405, "MethodNotAllowed", message, details={})


def not_acceptable(accept: str) -> ApiError:
    return ApiError(
        406,
        "NotAcceptable",
        f"only the following media types are accepted: application/json, application/yaml, application/json;as=Table;v=v1;g=meta.k8s.io (got {accept})",
    )


def gone(message: str) -> ApiError:
    return ApiError(410, "Expired", message)


def too_old(requested: int, oldest: int) -> ApiError:
    return ApiError(410, "Expired", f"too old resource version: {requested} ({oldest})")


def unauthorized() -> ApiError:
    return ApiError(401, "Unauthorized", "Unauthorized")


def forbidden(group: str, resource: str, name: str, why: str) -> ApiError:
    """apierrors.NewForbidden: without a name ``<resource> is forbidden: ...``, without a resource
    (a non-resource URL) ``forbidden: ...``."""
    if not resource:
        message = f"forbidden: {why}"
    elif name:
        message = f'{_qualified(resource, group)} "{name}" is forbidden: {why}'
    else:
        message = f"{_qualified(resource, group)} is forbidden: {why}"
    return ApiError(403, "Forbidden", message, details=_details(name, group, resource))


def internal(message: str) -> ApiError:
    return ApiError(
        500, "InternalError", f"Internal error occurred: {message}", details={"causes": [{"message": message}]}
    )


def timeout(message: str = "the server was unable to return a response in the time allotted") -> ApiError:
    return ApiError(504, "Timeout", message, details={})
