"""Loud signals of a serving certificate that nears expiry, without losing the service while it still works.

Each poll, a replica with a cluster connection compares its live certificate with the margin
(``--cert-expiry-margin``, :meth:`webhook.tls.ReloadingTLS.expiry_warning`) and, while it is
within it or unusable (:meth:`~webhook.tls.ReloadingTLS.problem`):

- records a Warning Event on the GPUCluster ``gpu-cluster``, reason ``WebhookCertificateExpiring``
  (still valid) or ``WebhookCertificateInvalid`` (expired, not yet valid, not for the Service),
  when the problem appears or changes and again hourly (the ERROR log and the
  ``gpucluster_webhook_certificate_expiry_seconds`` metric are :mod:`gpucluster.webhook.tls`'s);
- sets the GPUCluster condition ``WebhookCertificateValid`` to ``False`` with that reason and the
  replica's name; once the certificate is good again the condition turns ``True`` (reason
  ``Valid``). A cluster that never had a problem gets no such condition.

The controller keeps conditions it does not own when it writes the status; the webhook's write is
a merge patch guarded by the object's resourceVersion, so a concurrent controller write makes it
try again at the next poll, never drop the controller's conditions.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from collections.abc import Mapping, Sequence
from typing import Any

from gpucluster import timestamps
from gpucluster.clusterstate import ClusterState
from gpucluster.kube.client import Kube, KubeError
from gpucluster.kube.events import EventRecorder
from gpucluster.webhook.tls import ReloadingTLS

log = logging.getLogger("gpucluster.webhook")

CONDITION = "WebhookCertificateValid"
EXPIRING = "WebhookCertificateExpiring"
INVALID = "WebhookCertificateInvalid"
VALID = "Valid"
GPUCLUSTER = "gpu-cluster"
STATUS_PATH = f"/apis/nvidia.com/v1alpha1/gpuclusters/{GPUCLUSTER}/status"
COMPONENT = "gpucluster-webhook"
REPEAT_EVERY = 3600.0


def _now() -> str:
    return timestamps.rfc3339()


def signal(tls_problem: str | None, expiry_warning: str | None, replica: str) -> tuple[str, str] | None:
    """(reason, message) of the current problem, or None when the certificate is good (pure)."""
    if tls_problem:
        return INVALID, f"replica {replica}: {tls_problem}; the API server refuses it: renew it now"
    if expiry_warning:
        return EXPIRING, (
            f"replica {replica}: {expiry_warning}; still served, but its renewal has not happened: "
            "check the certificate rotator (or cert-manager) and its logs"
        )
    return None


def desired_conditions(
    conditions: Sequence[Mapping[str, Any]], problem: tuple[str, str] | None, generation: int, now: str
) -> list[dict[str, Any]] | None:
    """The GPUCluster's conditions with ours set, or None when nothing needs writing (pure)."""
    current = [dict(c) for c in conditions if isinstance(c, Mapping)]
    old = next((c for c in current if c.get("type") == CONDITION), None)
    if problem is None and old is None:
        return None  # never had a problem: no condition
    status, (reason, message) = ("False", problem) if problem else ("True", (VALID, "the serving certificate is valid"))
    if old is not None and (old.get("status"), old.get("reason"), old.get("message")) == (status, reason, message):
        return None
    since = (
        str(old["lastTransitionTime"]) if old and old.get("status") == status and old.get("lastTransitionTime") else now
    )
    new = {
        "type": CONDITION, "status": status, "reason": reason, "message": message[:32768],
        "lastTransitionTime": since, "observedGeneration": generation,
    }  # fmt: skip
    return [new if c.get("type") == CONDITION else c for c in current] if old else [*current, new]


class _Sink:
    """Creates and updates Events through the webhook's client; best effort."""

    def __init__(self, kube: Kube) -> None:
        self.kube = kube

    async def create(self, event: dict[str, Any]) -> bool:
        try:
            await self.kube.request("POST", f"/api/v1/namespaces/{event['metadata']['namespace']}/events", body=event)
        except (KubeError, OSError) as exc:
            log.warning("event not recorded reason=%s error=%s", event.get("reason"), exc)
            return False
        return True

    async def update(self, namespace: str, name: str, changes: dict[str, Any]) -> bool | None:
        try:
            await self.kube.request(
                "PATCH", f"/api/v1/namespaces/{namespace}/events/{name}", body=changes,
                content_type="application/merge-patch+json",
            )  # fmt: skip
        except KubeError as exc:
            return False if exc.status == 404 else None
        except OSError:
            return None
        return True


class ExpiryReporter:
    """Sends the Event and sets the condition (best effort: failures are logged, never raised)."""

    def __init__(self, kube: Kube, cluster: ClusterState, tls: ReloadingTLS, *, replica: str | None = None) -> None:
        self.kube = kube
        self.cluster = cluster
        self.tls = tls
        self.replica = replica or socket.gethostname()
        self.recorder = EventRecorder(_Sink(kube), COMPONENT, now=_now, instance=self.replica)
        self._last: tuple[tuple[str, str] | None, float] = (None, 0.0)

    async def report_once(self) -> None:
        problem = signal(self.tls.problem(), self.tls.expiry_warning(), self.replica)
        gpucluster = self.cluster.get("GPUCluster", GPUCLUSTER)
        if gpucluster is None:
            return
        last, when = self._last
        now = time.monotonic()
        if problem is not None and (problem != last or now - when >= REPEAT_EVERY):
            await self.recorder.record(gpucluster, "Warning", problem[0], problem[1])
            self._last = (problem, now)
        elif problem is None:
            self._last = (None, now)
        meta = gpucluster.get("metadata") or {}
        status = gpucluster.get("status") if isinstance(gpucluster.get("status"), dict) else {}
        conditions = desired_conditions(
            (status or {}).get("conditions") or [], problem, int(meta.get("generation") or 0), _now()
        )
        if conditions is None:
            return
        body = {"metadata": {"resourceVersion": meta.get("resourceVersion")}, "status": {"conditions": conditions}}
        try:
            result = await self.kube.request(
                "PATCH", STATUS_PATH, body=body, content_type="application/merge-patch+json"
            )
        except (KubeError, OSError) as exc:  # a conflict, RBAC, the API down: again at the next poll
            log.warning("webhook certificate condition not written error=%s", exc)
            return
        result.setdefault("kind", "GPUCluster")
        self.cluster.upsert("GPUCluster", result)

    async def run(self, interval: float) -> None:
        while True:
            try:
                await self.report_once()
            except Exception as exc:  # best effort: the log and the metric still say it
                log.warning("webhook certificate report failed error=%r", exc)
            await asyncio.sleep(interval)
