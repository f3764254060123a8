"""What the differential cases share: a case table runner, the part of an answer both servers must
agree on, and a recording HTTPS admission webhook both can call.

A ``Case`` is setup ``Step``s (each must succeed, or find its object there already) and the judged
step; ``answer(api, case, tokens)`` runs it on one backend and returns its ``outcome``: of an error
the code, reason, message and details (name, group, kind, causes), of a plain-text answer the
text, of a success the code and what ``case.keep`` picks from the body. ``Recorder`` answers every
AdmissionReview with ``allowed: true`` and keeps the requests by path, so a case reads what one
backend sent (``recorder.take(path)``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from tests.realkube.api import Api
from tests.review_server import ReviewServer

Obj = dict[str, Any]


def outcome(status: int, body: Obj, keep: Callable[[Obj], Any] | None = None) -> Obj:
    """The essential answer: an error's Status fields, or a success's code and ``keep(body)``."""
    if body.get("kind") == "Status" and body.get("status") == "Failure":
        details = body.get("details") or {}
        return {
            "code": status,
            "reason": body.get("reason"),
            "message": body.get("message"),
            "details": {k: details[k] for k in ("name", "group", "kind", "causes") if k in details},
        }
    if "raw" in body:  # a plain-text answer
        return {"code": status, "text": body["raw"]}
    return {"code": status, "kept": keep(body) if keep is not None else None}


@dataclass(frozen=True)
class Step:
    method: str
    path: str
    body: Any = None
    content_type: str = "application/json"
    headers: dict[str, str] = field(default_factory=dict)
    as_account: str = ""
    """Speak as this ServiceAccount (a key of the tokens given to ``answer``), not as the admin."""


@dataclass(frozen=True)
class Case:
    id: str
    step: Step
    setup: tuple[Step, ...] = ()
    keep: Callable[[Obj], Any] | None = None
    """What of a successful answer must agree (nothing but the code when None)."""


def send(api: Api, step: Step, tokens: dict[str, str]) -> tuple[int, Obj]:
    token = tokens[step.as_account] if step.as_account else None
    return api.request(
        step.method, step.path, step.body, content_type=step.content_type, token=token, headers=step.headers
    )


def answer(api: Api, case: Case, tokens: dict[str, str]) -> Obj:
    """Run ``case`` on ``api``: its setup (created or already there), then its step's outcome."""
    for step in case.setup:
        status, body = send(api, step, tokens)
        assert 200 <= status < 300 or status == 409, f"{api.name}: setup {step.method} {step.path}: {status} {body}"
    status, body = send(api, case.step, tokens)
    return outcome(status, body, case.keep)


class Recorder(ReviewServer):
    """An HTTPS admission webhook on 127.0.0.1 that allows everything and records each request."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._seen: dict[str, list[Obj]] = {}
        super().__init__(self._record, "agreement-webhook")

    def _record(self, request: Obj, path: str) -> Obj:
        with self._lock:
            self._seen.setdefault(path, []).append(request)
        return {}

    def start(self) -> Recorder:
        super().start()
        return self

    def take(self, path: str) -> list[Obj]:
        """The requests received on ``path`` since the last take, oldest first."""
        with self._lock:
            return self._seen.pop(path, [])

    def wait(self, path: str, poke: Callable[[], object], timeout: float = 30.0) -> None:
        """Poke until ``path`` is called (kube-apiserver picks new configurations up a moment later)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            poke()
            if self.take(path):
                return
            time.sleep(0.2)
        raise AssertionError(f"webhook {path} was never called within {timeout} s")


@contextmanager
def recording_webhook() -> Iterator[Recorder]:
    recorder = Recorder().start()
    try:
        yield recorder
    finally:
        recorder.stop()
