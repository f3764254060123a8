"""Templates are created before a translated pod is admitted; never on dryRun; failure degrades safely."""

from __future__ import annotations

import json
from typing import Any

from aiohttp.test_utils import TestClient, TestServer

from gpucluster.clusterstate import ClusterState
from tests.webhook.pods import container, pod
from tests.webhook.reviews import review
from webhook.server import build_app
from webhook.settings import Settings


async def _post(creator: Any, body: dict[str, Any]) -> dict[str, Any]:
    app = build_app(ClusterState.from_objects([]), Settings(), creator=creator)
    async with TestClient(TestServer(app)) as client:
        resp = await client.post("/mutate", data=json.dumps(body), headers={"Content-Type": "application/json"})
        assert resp.status == 200
        result: dict[str, Any] = await resp.json()
        return result


async def test_templates_are_created_before_the_answer() -> None:
    created: list[dict[str, Any]] = []

    async def creator(objs: list[dict[str, Any]]) -> None:
        created.extend(objs)

    out = await _post(creator, review(pod(container("cuda", {"nvidia.com/gpu": "1"})), namespace="ml"))
    assert out["response"]["patchType"] == "JSONPatch"
    assert [o["kind"] for o in created] == ["ResourceClaimTemplate"]


async def test_dry_run_creates_nothing() -> None:
    created: list[dict[str, Any]] = []

    async def creator(objs: list[dict[str, Any]]) -> None:
        created.extend(objs)

    out = await _post(creator, review(pod(container("cuda", {"nvidia.com/gpu": "1"})), namespace="ml", dry_run=True))
    assert out["response"]["patchType"] == "JSONPatch"
    assert created == []


async def test_failed_creation_leaves_the_pod_untranslated_with_a_warning() -> None:
    async def creator(objs: list[dict[str, Any]]) -> None:
        raise RuntimeError("forbidden")

    out = await _post(creator, review(pod(container("cuda", {"nvidia.com/gpu": "1"})), namespace="ml"))
    resp = out["response"]
    assert resp["allowed"] is True and "patch" not in resp
    assert resp["warnings"][0].startswith("not translated: could not create gpucluster-gpu-1-")
