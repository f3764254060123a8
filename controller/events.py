"""The controller's Events: the shared recorder (:mod:`gpucluster.kube.events`, client-go's
correlation: a repeat bumps ``count`` and ``lastTimestamp`` of the Event recorded before, similar
messages are combined, a spam filter per object), written through the API.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from gpucluster.clusterstate import KubeObject
from gpucluster.kube.client import KubeError

log = logging.getLogger("gpucluster.controller")

COMPONENT = "gpucluster-controller"
Write = Callable[..., Awaitable[KubeObject]]


class KubeSink:
    """Creates and updates Events with ``write(method, path, body=..., content_type=...)``; best effort."""

    def __init__(self, write: Write) -> None:
        self.write = write

    async def create(self, event: dict[str, Any]) -> bool:
        try:
            await self.write("POST", f"/api/v1/namespaces/{event['metadata']['namespace']}/events", body=event)
        except Exception as exc:
            log.warning("event not recorded reason=%s error=%s", event.get("reason"), exc)
            return False
        return True

    async def update(self, namespace: str, name: str, changes: dict[str, Any]) -> bool | None:
        try:
            await self.write(
                "PATCH", f"/api/v1/namespaces/{namespace}/events/{name}", body=changes,
                content_type="application/merge-patch+json",
            )  # fmt: skip
        except Exception as exc:
            if isinstance(exc, KubeError) and exc.status == 404:
                return False
            log.warning("event not updated name=%s error=%s", name, exc)
            return None
        return True
