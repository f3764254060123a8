"""Fuzzing the live server: reviews of every kind we serve, with random values spliced into random
places, posted over TLS to both paths. Decodable input never gets a 5xx or a traceback; an
undecodable body gets a 400."""

from __future__ import annotations

import asyncio
import json
import logging
import random
import ssl
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.webhook.pods import container, pod
from tests.webhook.reviews import gpucluster, nvidiadriver, review
from tests.webhook.test_server_hardening import no_tracebacks, start

JUNK: list[Any] = [None, True, 0, -1, 2**70, 1.5, "", "x" * 300, "nvidia.com/gpu", [], [None], {}, {"a": {}}, "1e3"]


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(value, dict):
        for key, item in value.items():
            out += _paths(item, (*prefix, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            out += _paths(item, (*prefix, index))
    return out


def _splice(doc: Any, path: tuple[Any, ...], value: Any) -> Any:
    if not path:
        return value
    node = doc
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return doc


def _seeds() -> list[dict[str, Any]]:
    gpu_pod = pod(container("cuda", {"nvidia.com/gpu": "2"}), container("mig", {"nvidia.com/mig-1g.10gb": "1"}))
    claim = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "c", "namespace": "ml"},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]}},
    }
    return [
        review(gpu_pod, kind="Pod", namespace="ml"),
        review(gpucluster()),
        review(nvidiadriver()),
        review(claim, kind="ResourceClaim", namespace="ml"),
    ]


async def test_random_reviews_never_get_a_5xx_or_a_traceback(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    rng = random.Random(1234)
    srv, task = await start(tmp_path)
    ctx = ssl.create_default_context(cadata=srv.ca.cert_pem.decode())
    statuses: dict[int, int] = {}
    try:
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=ctx)) as session:
            for _ in range(300):
                seed = rng.choice(_seeds())
                doc = json.loads(json.dumps(seed))
                for _ in range(rng.randint(1, 3)):
                    doc = _splice(doc, rng.choice(_paths(doc)), json.loads(json.dumps(rng.choice(JUNK))))
                path = rng.choice(["/mutate", "/validate"])
                async with session.post(f"https://127.0.0.1:{srv.port}{path}", json=doc) as resp:
                    statuses[resp.status] = statuses.get(resp.status, 0) + 1
                    assert resp.status < 500, (resp.status, await resp.text(), doc)
            async with session.post(
                f"https://127.0.0.1:{srv.port}/mutate", data=b"{not json", headers={"Content-Type": "application/json"}
            ) as resp:
                assert resp.status == 400
    finally:
        srv.stop.set()
        await asyncio.wait_for(task, 10)
    assert statuses.get(200, 0) > 100, statuses  # most mutations still decode as reviews
    no_tracebacks(caplog)
