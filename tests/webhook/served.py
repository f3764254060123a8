"""Reviews posted to the webhook's server (through aiohttp's test client) on a cluster view, which
holds the server's kept answers; the full path on a fresh view, to check them against; and a record
of the reviews the server decoded whole rather than answered from a kept answer."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

import gpucluster.webhook.server as server
from gpucluster.clusterstate import ClusterState
from gpucluster.policy import Settings
from gpucluster.webhook.admission import Admission, admit

NAMESPACE = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ml"}}
HEADERS = {"Content-Type": "application/json"}


def post(
    bodies: list[bytes], state: ClusterState, *, settings: Settings | None = None, path: str = "mutate"
) -> tuple[list[tuple[int, Any]], str]:
    """Each review's status and answer (JSON when 200, else the text), in order, and /metrics after them."""

    async def run() -> tuple[list[tuple[int, Any]], str]:
        answers = []
        async with TestClient(TestServer(server.build_app(state, settings or Settings()))) as client:
            for body in bodies:
                resp = await client.post(f"/{path}", data=body, headers=HEADERS)
                answers.append((resp.status, await resp.json() if resp.status == 200 else await resp.text()))
            metrics = await (await client.get("/metrics")).text()
        return answers, metrics

    return asyncio.run(run())


def fresh(body: bytes) -> Admission:
    """The full path's answer on a view that has answered nothing yet."""
    return admit(body, path="mutate", cluster=ClusterState.from_objects([NAMESPACE]), settings=Settings())


class Decodes:
    """The reviews the server decodes whole from now on (its kept answers spare the others that)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.bodies: list[bytes] = []
        real = server.decode_review

        def recorded(body: bytes | str) -> Any:
            self.bodies.append(body if isinstance(body, bytes) else body.encode())
            return real(body)

        monkeypatch.setattr(server, "decode_review", recorded)
