"""An in-memory view of the cluster objects our rules and reconcilers read.

Plain data: filled from a file (``--cluster FILE``) or kept current by watches in the I/O layer.
Rules only read it, so a pod admission never makes an API call.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar, cast

KubeObject = dict[str, Any]

# kind -> apiVersion of the kinds the rules read; the key of a kind's objects is (namespace, name).
KINDS: Mapping[str, str] = {
    "Namespace": "v1",
    "Node": "v1",
    "ClusterPolicy": "nvidia.com/v1",
    "GPUCluster": "nvidia.com/v1alpha1",
    "NVIDIADriver": "nvidia.com/v1alpha1",
    "DeviceClass": "resource.k8s.io/v1",
    "ResourceSlice": "resource.k8s.io/v1",
    "ResourceClaim": "resource.k8s.io/v1",
    "ResourceClaimTemplate": "resource.k8s.io/v1",
}


# The namespace label Kubernetes requires before a claim there may use adminAccess.
ADMIN_ACCESS_LABEL = "resource.kubernetes.io/admin-access"


def metadata(obj: Mapping[str, Any] | None) -> Mapping[str, Any]:
    """``obj.metadata``, or an empty mapping when it is missing or not an object."""
    meta = (obj or {}).get("metadata")
    return meta if isinstance(meta, dict) else {}


def object_key(obj: Mapping[str, Any]) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return (str(meta.get("namespace") or ""), str(meta.get("name") or ""))


T = TypeVar("T")


class ClusterState:
    """Objects by kind, with a generation counter that derived indexes can key their caches on."""

    def __init__(self) -> None:
        self._objects: dict[str, dict[tuple[str, str], KubeObject]] = {kind: {} for kind in KINDS}
        self._synced: set[str] = set()
        self._lock = threading.Lock()
        self.generation = 0
        self._kind_generations: dict[str, int] = {}
        self._derived: dict[str, tuple[Any, Any]] = {}
        # A static view holds what it was given (a file, a test's objects): that an object is not
        # in it says nothing of the cluster. A view kept by list and watch says it is absent.
        self.static = False

    def derived(self, key: str, build: Callable[[ClusterState], T], kinds: Iterable[str] | None = None) -> T:
        """``build(self)``, kept on this view until it changes: any change, or with ``kinds`` only a
        change of those kinds (an index of ResourceSlices survives template churn). A cache kept on
        the view, not process-wide: two views whose counters agree are never mixed up."""
        stamp: Any = self.generation if kinds is None else tuple(self._kind_generations.get(k, 0) for k in kinds)
        found = self._derived.get(key)
        if found is not None and found[0] == stamp:
            return cast(T, found[1])
        value = build(self)
        self._derived[key] = (stamp, value)
        return value

    def kind_generation(self, kind: str) -> int:
        """A counter that moves whenever an object of ``kind`` changes."""
        return self._kind_generations.get(kind, 0)

    def _changed(self, kind: str) -> None:
        self.generation += 1
        self._kind_generations[kind] = self._kind_generations.get(kind, 0) + 1

    @classmethod
    def from_objects(cls, objects: Iterable[Mapping[str, Any]]) -> ClusterState:
        """A static view (offline use, tests, benchmarks): every kind counts as synced."""
        state = cls()
        state.static = True
        by_kind: dict[str, list[KubeObject]] = {kind: [] for kind in KINDS}
        for obj in objects:
            kind = obj.get("kind")
            if isinstance(kind, str):
                by_kind.setdefault(kind, []).append(dict(obj))
        for kind, items in by_kind.items():
            state.replace(kind, items)
        return state

    def replace(self, kind: str, objects: Iterable[KubeObject]) -> None:
        """Set every object of ``kind`` (a fresh list); marks the kind synced."""
        with self._lock:
            self._objects[kind] = {object_key(o): o for o in objects}
            self._synced.add(kind)
            self._changed(kind)

    def upsert(self, kind: str, obj: KubeObject) -> None:
        with self._lock:
            self._objects.setdefault(kind, {})[object_key(obj)] = obj
            self._changed(kind)

    def delete(self, kind: str, obj: Mapping[str, Any]) -> None:
        with self._lock:
            self._objects.setdefault(kind, {}).pop(object_key(obj), None)
            self._changed(kind)

    def list(self, kind: str) -> list[KubeObject]:
        return list(self._objects.get(kind, {}).values())

    def get(self, kind: str, name: str, namespace: str = "") -> KubeObject | None:
        return self._objects.get(kind, {}).get((namespace, name))

    def synced(self, kinds: Iterable[str] | None = None) -> bool:
        wanted = set(KINDS if kinds is None else kinds)
        return wanted <= self._synced

    def mark_synced(self, kind: str) -> None:
        with self._lock:
            self._synced.add(kind)

    def namespace_labels(self, name: str) -> dict[str, str] | None:
        """Labels of namespace ``name``, or None when the namespace is not known."""
        ns = self.get("Namespace", name)
        if ns is None:
            return None
        labels = (ns.get("metadata") or {}).get("labels") or {}
        return {str(k): str(v) for k, v in labels.items()}
