"""Create the objects a mutation depends on (ResourceClaimTemplates) before the pod is admitted."""

from __future__ import annotations

from typing import Any

from gpucluster.kube.client import Kube, KubeError
from gpucluster.kube.paths import collection_path, object_path


class CreateConflict(Exception):
    """An object of that name exists with different content (a user's, not ours)."""


def kube_creator(kube: Kube) -> Any:
    async def create(objects: list[dict[str, Any]]) -> None:
        for obj in objects:
            meta = obj.get("metadata") or {}
            path = collection_path(obj["apiVersion"], obj["kind"], meta.get("namespace"))
            try:
                await kube.request("POST", path, body=obj, query=[("fieldManager", "gpucluster")])
            except KubeError as exc:
                if exc.status != 409:
                    raise
                existing = await kube.get(object_path(obj))
                if existing.get("spec") != obj.get("spec"):
                    raise CreateConflict(
                        f"{obj['kind']} {meta.get('namespace')}/{meta.get('name')} exists with another spec"
                    ) from None

    return create
