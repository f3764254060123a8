"""AdmissionReview ``admission.k8s.io/v1`` in and out.

The request is decoded into a plain dataclass; a rule answers with a :class:`Verdict`; the
response is built here, so that every response echoes ``uid``, ``apiVersion`` and ``kind``,
validating responses never carry a patch, and a mutating response's patch is computed by diffing
the object exactly as received with the mutated one.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Literal

import orjson

from gpucluster.jsonutil import diff

API_VERSION = "admission.k8s.io/v1"
KIND = "AdmissionReview"
MAX_WARNING_LENGTH = 119  # "Warnings under 120 characters"; the API server truncates longer ones

Operation = Literal["CREATE", "UPDATE", "DELETE", "CONNECT"]
_OPERATIONS = ("CREATE", "UPDATE", "DELETE", "CONNECT")


class ReviewDecodeError(ValueError):
    """The body is not an AdmissionReview we can answer: HTTP 400."""


# Not frozen, though nothing changes it: a frozen dataclass of these fields costs 1.5 us more to
# make, on every review.
@dataclass(slots=True)
class AdmissionRequest:
    """The fields of an AdmissionRequest the rules read (read-only by convention)."""

    uid: str
    group: str
    version: str
    kind: str
    resource: str
    sub_resource: str
    operation: Operation
    name: str
    namespace: str
    obj: dict[str, Any] | None
    old_obj: dict[str, Any] | None
    dry_run: bool
    user: str
    review_api_version: str = API_VERSION
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def gvk(self) -> str:
        return f"{self.group}/{self.version}/{self.kind}" if self.group else f"{self.version}/{self.kind}"


def _string(value: Any, where: str, *, required: bool = False) -> str:
    if isinstance(value, str) and (value or not required):  # the usual case first
        return value
    if value is None and not required:
        return ""
    raise ReviewDecodeError(f"{where} must be a non-empty string" if required else f"{where} must be a string")


def _object(value: Any, where: str) -> dict[str, Any] | None:
    if value is None or isinstance(value, dict):
        return value
    raise ReviewDecodeError(f"{where} must be an object")


def _check_kind(obj: dict[str, Any] | None, where: str, group: str, version: str, kind: str) -> None:
    """The API server encodes the object as ``request.kind``; a review saying otherwise is not one it sent.

    Every object the API server encodes has an object (or no) ``metadata``; rules read it without
    checking its type again.
    """
    if obj is None:
        return
    metadata = obj.get("metadata")
    if metadata is not None and not isinstance(metadata, dict):
        raise ReviewDecodeError(f"{where}.metadata must be an object, got {type(metadata).__name__}")
    api_version = f"{group}/{version}" if group else version
    got_kind, got_version = obj.get("kind"), obj.get("apiVersion")
    if got_kind is not None and got_kind != kind:
        raise ReviewDecodeError(f"{where}.kind is {got_kind!r} but request.kind.kind is {kind!r}")
    if got_version is not None and version and got_version != api_version:
        raise ReviewDecodeError(f"{where}.apiVersion is {got_version!r} but request.kind is {api_version!r}")


def decode_review(body: bytes | str) -> AdmissionRequest:
    """Decode an AdmissionReview; anything we cannot answer raises :class:`ReviewDecodeError`."""
    try:
        review = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise ReviewDecodeError(f"body is not JSON: {exc}") from None
    if not isinstance(review, dict):
        raise ReviewDecodeError("body must be a JSON object (an AdmissionReview)")
    api_version, kind = review.get("apiVersion"), review.get("kind")
    if kind != KIND or api_version not in (API_VERSION, "admission.k8s.io/v1beta1"):
        raise ReviewDecodeError(f"expected apiVersion {API_VERSION} kind {KIND}, got {api_version} {kind}")
    request = review.get("request")
    if not isinstance(request, dict):
        raise ReviewDecodeError("AdmissionReview has no request")
    get = request.get
    uid = get("uid")
    if not isinstance(uid, str) or not uid:
        uid = _string(uid, "request.uid", required=True)
    kind_ref = get("kind")
    if type(kind_ref) is not dict:
        kind_ref = _object(kind_ref, "request.kind") or {}
    operation = get("operation")
    if operation not in _OPERATIONS:
        raise ReviewDecodeError(f"request.operation must be one of {', '.join(_OPERATIONS)}, got {operation!r}")
    kind, group, version = kind_ref.get("kind"), kind_ref.get("group"), kind_ref.get("version")
    # The usual review in one test; a field of another type gets its error below.
    if not (type(kind) is str and kind and type(group) is str and type(version) is str):
        kind = _string(kind, "request.kind.kind", required=True)
        group = _string(group, "request.kind.group")
        version = _string(version, "request.kind.version")
    obj, old_obj = get("object"), get("oldObject")
    if obj is not None:
        if type(obj) is not dict:
            raise ReviewDecodeError("request.object must be an object")
        _check_kind(obj, "request.object", group, version, kind)
    if old_obj is not None:
        if type(old_obj) is not dict:
            raise ReviewDecodeError("request.oldObject must be an object")
        _check_kind(old_obj, "request.oldObject", group, version, kind)
    dry_run = get("dryRun", False)
    if not isinstance(dry_run, bool):
        raise ReviewDecodeError("request.dryRun must be a boolean")
    resource, user_info = get("resource"), get("userInfo")
    resource = resource.get("resource") if type(resource) is dict else _object(resource, "request.resource")
    user = user_info.get("username") if type(user_info) is dict else _object(user_info, "request.userInfo")
    sub_resource, name, namespace = get("subResource"), get("name"), get("namespace")
    return AdmissionRequest(
        uid,
        group,
        version,
        kind,
        resource if type(resource) is str else _string(resource, "request.resource.resource"),
        sub_resource if type(sub_resource) is str else _string(sub_resource, "request.subResource"),
        operation,
        name if type(name) is str else _string(name, "request.name"),
        namespace if type(namespace) is str else _string(namespace, "request.namespace"),
        obj,
        old_obj,
        dry_run,
        user if type(user) is str else _string(user, "request.userInfo.username"),
        str(api_version),
        request,
    )


@dataclass(frozen=True)
class Patch:
    """An RFC 6902 JSON patch, the one form a mutation takes: its operations, and its wire form
    (base64 of its JSON)."""

    ops: tuple[dict[str, Any], ...]

    @classmethod
    def between(cls, original: dict[str, Any] | None, patched: dict[str, Any]) -> Patch:
        """The operations turning ``original`` (None: nothing) into ``patched``."""
        return cls(tuple(diff(original or {}, patched)))

    @cached_property
    def encoded(self) -> str:
        return encode_patch(list(self.ops))


@dataclass
class Verdict:
    """A rule's answer; a mutation is its ``patch`` of the received object."""

    allowed: bool = True
    code: int = 200
    reason: str = ""
    message: str = ""
    warnings: list[str] = field(default_factory=list)
    patch: Patch | None = None
    # Objects the admitted object refers to that the controller provisions once it exists
    # (ResourceClaimTemplates of a translated pod); the webhook itself creates nothing.
    creates: list[dict[str, Any]] = field(default_factory=list)
    outcome: str = ""  # for metrics and logs: allowed, denied, mutated, warned, skipped

    @classmethod
    def allow(cls, *warnings: str, outcome: str = "allowed") -> Verdict:
        return cls(warnings=list(warnings), outcome=outcome if not warnings else "warned")

    @classmethod
    def deny(cls, message: str, *, code: int = 403, reason: str = "Forbidden") -> Verdict:
        return cls(allowed=False, code=code, reason=reason, message=message, outcome="denied")

    @classmethod
    def invalid(cls, message: str) -> Verdict:
        return cls.deny(message, code=422, reason="Invalid")


def short_warning(text: str, *, prefix: str = "") -> str:
    """A warning the API server passes on whole: one line, under 120 characters.

    ``prefix + text`` when it fits; otherwise the prefix (what the warning is about: a container
    name, a field path) is shortened in its middle so that ``text`` (the reason) stays whole, and
    only a reason too long on its own loses its end.
    """
    prefix, text = " ".join(prefix.split()), " ".join(text.split())
    if prefix and not text:
        prefix, text = "", prefix
    whole = f"{prefix} {text}" if prefix else text
    if len(whole) <= MAX_WARNING_LENGTH:
        return whole
    room = MAX_WARNING_LENGTH - len(text) - 1  # the space between prefix and text
    if prefix and room >= 8:
        keep = room - 3
        head = (keep + 1) // 2
        return f"{prefix[:head]}...{prefix[len(prefix) - (keep - head) :]} {text}"
    return whole[: MAX_WARNING_LENGTH - 3] + "..."


def encode_patch(ops: list[dict[str, Any]]) -> str:
    """A JSON patch as an AdmissionResponse carries it: base64 of its JSON."""
    return base64.b64encode(orjson.dumps(ops)).decode()


def build_response(request: AdmissionRequest, verdict: Verdict, *, mutating: bool) -> dict[str, Any]:
    """The AdmissionReview the API server receives back."""
    response: dict[str, Any] = {"uid": request.uid, "allowed": verdict.allowed}
    if not verdict.allowed:
        response["status"] = {
            "metadata": {},
            "status": "Failure",
            "code": verdict.code,
            "reason": verdict.reason or "Forbidden",
            "message": verdict.message,
        }
    warnings = [short_warning(w) for w in verdict.warnings if w.strip()]
    if warnings:
        response["warnings"] = list(dict.fromkeys(warnings))
    if mutating and verdict.allowed and verdict.patch is not None and verdict.patch.ops:
        response["patchType"] = "JSONPatch"
        response["patch"] = verdict.patch.encoded
    return {"apiVersion": request.review_api_version, "kind": KIND, "response": response}


def decode_patch(response: dict[str, Any]) -> list[dict[str, Any]]:
    """The JSON patch a response carries (empty when none)."""
    encoded = response.get("response", {}).get("patch")
    if not encoded:
        return []
    ops: list[dict[str, Any]] = json.loads(base64.b64decode(encoded))
    return ops
