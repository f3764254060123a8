"""The server answers a translated pod with a patch only: it has no way to create anything."""

from __future__ import annotations

import inspect
import json
from typing import Any

import jsonpatch
from aiohttp.test_utils import TestClient, TestServer

from gpucluster.clusterstate import ClusterState
from gpucluster.policy import Settings
from gpucluster.translate import TEMPLATES_ANNOTATION, TRANSLATED_LABEL
from gpucluster.webhook import server
from gpucluster.webhook.review import decode_patch
from gpucluster.webhook.server import build_app
from tests.webhook.pods import container, pod
from tests.webhook.reviews import review


async def _post(body: dict[str, Any]) -> dict[str, Any]:
    app = build_app(ClusterState.from_objects([]), Settings())
    async with TestClient(TestServer(app)) as client:
        resp = await client.post("/mutate", data=json.dumps(body), headers={"Content-Type": "application/json"})
        assert resp.status == 200
        result: dict[str, Any] = await resp.json()
        return result


def test_the_server_has_no_creator() -> None:
    assert "creator" not in inspect.signature(build_app).parameters
    assert not hasattr(server, "CREATOR_KEY")


async def test_translated_pod_is_labelled_and_records_its_templates() -> None:
    body = review(pod(container("cuda", {"nvidia.com/gpu": "1"})), namespace="ml")
    out = await _post(body)
    patched = jsonpatch.apply_patch(body["request"]["object"], decode_patch(out))
    meta = patched["metadata"]
    assert meta["labels"][TRANSLATED_LABEL] == "true"
    specs = json.loads(meta["annotations"][TEMPLATES_ANNOTATION])
    [ref] = patched["spec"]["resourceClaims"]
    assert list(specs) == [ref["resourceClaimTemplateName"]]


async def test_dry_run_is_translated_the_same() -> None:
    out = await _post(review(pod(container("cuda", {"nvidia.com/gpu": "1"})), namespace="ml", dry_run=True))
    assert out["response"]["patchType"] == "JSONPatch"
