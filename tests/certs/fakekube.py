"""A small in-memory API server double for the certificate I/O: Secrets, webhook configurations,
EndpointSlices; resourceVersions, 409 on a stale PUT, JSON patch with ``test``."""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

import jsonpatch

from gpucluster.kube.client import KubeError

Obj = dict[str, Any]


class FakeKube:
    def __init__(self) -> None:
        self.objects: dict[str, Obj] = {}
        self.version = 0
        self.calls: list[tuple[str, str]] = []
        self.forbidden: set[str] = set()  # path prefixes answered 403

    def _bump(self, obj: Obj) -> Obj:
        self.version += 1
        obj.setdefault("metadata", {})["resourceVersion"] = str(self.version)
        return obj

    def put_object(self, path: str, obj: Obj) -> None:
        self.objects[path] = self._bump(copy.deepcopy(obj))

    async def request(
        self,
        method: str,
        path: str,
        *,
        query: Sequence[tuple[str, str]] = (),
        body: Any = None,
        content_type: str = "application/json",
        timeout: float | None = 30.0,
    ) -> Obj:
        self.calls.append((method, path))
        if any(path.startswith(p) for p in self.forbidden):
            raise KubeError(403, {"reason": "Forbidden", "message": "forbidden"}, method, path)
        if method == "GET" and path.endswith("/endpointslices"):
            selector = dict(query).get("labelSelector", "")
            items = [
                copy.deepcopy(o)
                for p, o in self.objects.items()
                if p.startswith(path + "/")
                and f"kubernetes.io/service-name={o['metadata']['labels']['kubernetes.io/service-name']}" == selector
            ]
            return {"items": items}
        if method == "GET":
            if path not in self.objects:
                raise KubeError(404, {"reason": "NotFound", "message": "not found"}, method, path)
            return copy.deepcopy(self.objects[path])
        if method == "POST":
            name = body["metadata"]["name"]
            target = f"{path}/{name}"
            if target in self.objects:
                raise KubeError(409, {"reason": "AlreadyExists", "message": "exists"}, method, path)
            self.put_object(target, body)
            return copy.deepcopy(self.objects[target])
        if method == "PUT":
            if path not in self.objects:
                raise KubeError(404, {"reason": "NotFound", "message": "not found"}, method, path)
            current = self.objects[path]["metadata"]["resourceVersion"]
            if body["metadata"].get("resourceVersion") not in (None, current):
                raise KubeError(409, {"reason": "Conflict", "message": "modified"}, method, path)
            self.put_object(path, body)
            return copy.deepcopy(self.objects[path])
        if method == "PATCH":
            assert content_type == "application/json-patch+json"
            if path not in self.objects:
                raise KubeError(404, {"reason": "NotFound", "message": "not found"}, method, path)
            try:
                patched = jsonpatch.apply_patch(self.objects[path], body)
            except jsonpatch.JsonPatchTestFailed:
                raise KubeError(422, {"reason": "Invalid", "message": "test failed"}, method, path) from None
            self.put_object(path, patched)
            return copy.deepcopy(self.objects[path])
        raise AssertionError(f"unexpected {method} {path}")

    async def close(self) -> None:
        return None
