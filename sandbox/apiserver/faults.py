"""Fault injection for tests: failing requests, timeouts, added latency.

Rules match a resource by plural (``pods``), ``group/plural`` (``apps/deployments``) or ``*``,
optionally only some verbs (get, list, watch, create, update, patch, delete, deletecollection).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from gpucluster.sandbox.apiserver import errors
from gpucluster.sandbox.apiserver.errors import ApiError

Obj = dict[str, Any]

_REASONS = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    409: "Conflict",
    410: "Expired",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
}


@dataclass
class Fault:
    resource: str
    verbs: frozenset[str]
    remaining: int  # < 0: forever
    code: int = 0  # an HTTP status to answer with
    timeout: float = 0.0  # seconds to hang before answering 504
    latency: float = 0.0  # seconds added, then the request proceeds
    message: str = ""
    hits: int = field(default=0)

    def matches(self, group: str, plural: str, verb: str) -> bool:
        if self.verbs and verb not in self.verbs:
            return False
        return self.resource in ("*", plural, f"{group}/{plural}")

    def error(self, group: str, plural: str, name: str) -> ApiError:
        if self.timeout:
            return errors.timeout()
        if self.code == 409:
            return errors.stale(group, plural, name or "unknown")
        if self.code == 410:
            return errors.gone(self.message or "too old resource version: 1 (2)")
        if self.code == 429:
            return ApiError(
                429,
                "TooManyRequests",
                self.message or "too many requests, please try again later",
                details={"retryAfterSeconds": 1},
                retry_after=1,
            )
        reason = _REASONS.get(self.code, "InternalError")
        message = self.message or (
            "Internal error occurred: injected fault" if self.code == 500 else f"injected fault ({self.code})"
        )
        return ApiError(self.code, reason, message)

    def describe(self) -> Obj:
        return {
            "resource": self.resource,
            "verbs": sorted(self.verbs),
            "remaining": self.remaining,
            "code": self.code,
            "timeout": self.timeout,
            "latency": self.latency,
            "hits": self.hits,
        }


class Faults:
    """The fault rules of one server; thread-safe so tests can add rules from any thread."""

    def __init__(self) -> None:
        self._rules: list[Fault] = []
        self._lock = threading.Lock()

    def fail_next(
        self, resource: str = "*", code: int = 500, count: int = 1, *, verbs: Iterable[str] = (), message: str = ""
    ) -> Fault:
        """The next ``count`` matching requests answer ``code`` (409, 410, 429, 500, 503 ...)."""
        return self._add(Fault(resource, frozenset(verbs), count, code=code, message=message))

    def timeout_next(
        self, resource: str = "*", count: int = 1, *, seconds: float = 5.0, verbs: Iterable[str] = ()
    ) -> Fault:
        """The next ``count`` matching requests hang ``seconds`` and then answer 504."""
        return self._add(Fault(resource, frozenset(verbs), count, timeout=seconds))

    def add_latency(self, seconds: float, resource: str = "*", *, count: int = -1, verbs: Iterable[str] = ()) -> Fault:
        """Delay matching requests by ``seconds`` (forever unless ``count``)."""
        return self._add(Fault(resource, frozenset(verbs), count, latency=seconds))

    def _add(self, fault: Fault) -> Fault:
        with self._lock:
            self._rules.append(fault)
        return fault

    def clear(self) -> None:
        with self._lock:
            self._rules.clear()

    def rules(self) -> list[Obj]:
        with self._lock:
            return [f.describe() for f in self._rules]

    def take(self, group: str, plural: str, verb: str) -> tuple[float, Fault | None]:
        """(latency to add, failing rule or None) for one request; consumes counted rules."""
        latency = 0.0
        failing: Fault | None = None
        with self._lock:
            for rule in list(self._rules):
                if not rule.matches(group, plural, verb):
                    continue
                if rule.latency:
                    latency += rule.latency
                elif failing is None:
                    failing = rule
                else:
                    continue
                rule.hits += 1
                if rule.remaining > 0:
                    rule.remaining -= 1
                    if rule.remaining == 0:
                        self._rules.remove(rule)
        return latency, failing

    def configure(self, spec: Obj) -> Fault:
        """Add a rule from the admin endpoint's JSON: {"resource", "code"|"timeout"|"latency", "count", "verbs"}."""
        resource = str(spec.get("resource", "*"))
        verbs = [str(v) for v in spec.get("verbs") or []]
        count = int(spec.get("count", 1))
        if spec.get("latency"):
            return self.add_latency(float(spec["latency"]), resource, count=int(spec.get("count", -1)), verbs=verbs)
        if spec.get("timeout"):
            return self.timeout_next(resource, count, seconds=float(spec["timeout"]), verbs=verbs)
        return self.fail_next(
            resource, int(spec.get("code", 500)), count, verbs=verbs, message=str(spec.get("message", ""))
        )
