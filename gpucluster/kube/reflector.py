"""List-then-watch reflectors that keep a :class:`ClusterState` current, as client-go's do.

A reflector lists (paginated), then watches from the list's resourceVersion with bookmarks; a
410 Gone, or an ERROR event carrying one, makes it relist; other failures back off and retry.
A resource the server does not serve (a CRD not installed) counts as an empty, synced kind and
is looked for again later, so the webhook can be ready on a cluster without ClusterPolicy.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable
from dataclasses import dataclass

import aiohttp

from gpucluster.clusterstate import ClusterState, KubeObject
from gpucluster.kube.client import Kube, KubeError

log = logging.getLogger("gpucluster.kube.reflector")


@dataclass(frozen=True)
class Resource:
    """A kind and the collection path that serves it, e.g. ``/apis/resource.k8s.io/v1/resourceslices``.

    ``label_selector`` and ``field_selector`` narrow what is listed and watched. ``batch``: the
    watch takes its events in batches at most that many seconds apart (:meth:`Kube.watch`).
    """

    kind: str
    path: str
    label_selector: str = ""
    field_selector: str = ""
    batch: float = 0.0

    def query(self) -> list[tuple[str, str]]:
        out = []
        if self.label_selector:
            out.append(("labelSelector", self.label_selector))
        if self.field_selector:
            out.append(("fieldSelector", self.field_selector))
        return out


NODE_WATCH_BATCH = 0.02  # seconds

RESOURCES: dict[str, Resource] = {
    r.kind: r
    for r in (
        Resource("Namespace", "/api/v1/namespaces"),
        # Node heartbeats: thousands of events a second on a large cluster, none the controller
        # acts on (controller/transforms.py node_unchanged); a label change is seen 20 ms later.
        Resource("Node", "/api/v1/nodes", batch=NODE_WATCH_BATCH),
        Resource("ClusterPolicy", "/apis/nvidia.com/v1/clusterpolicies"),
        Resource("GPUCluster", "/apis/nvidia.com/v1alpha1/gpuclusters"),
        Resource("NVIDIADriver", "/apis/nvidia.com/v1alpha1/nvidiadrivers"),
        Resource("DeviceClass", "/apis/resource.k8s.io/v1/deviceclasses"),
        Resource("ResourceSlice", "/apis/resource.k8s.io/v1/resourceslices"),
        Resource("ResourceClaim", "/apis/resource.k8s.io/v1/resourceclaims"),
        Resource("ResourceClaimTemplate", "/apis/resource.k8s.io/v1/resourceclaimtemplates"),
    )
}


def strip_managed_fields(obj: KubeObject) -> KubeObject:
    """Drop ``metadata.managedFields`` before caching, as controller-runtime's
    ``TransformStripManagedFields``: nothing read from a cache uses them, and they are often
    the larger part of a small object (a third of a ResourceSlice)."""
    meta = obj.get("metadata")
    if isinstance(meta, dict):
        meta.pop("managedFields", None)
    return obj


class Gone(Exception):
    """The watch's resourceVersion is too old: relist."""


class Reflector:
    """Lists and watches ``resource`` into ``state``.

    ``transform`` is applied to every object before it is cached, listed or watched alike (a
    DELETED event's object too), as client-go's ``SetTransform``: what a cache holds of an object
    is what its readers need (the controller's are in controller/transforms.py). The default
    drops ``metadata.managedFields``. ``on_event`` is told the transformed object.

    ``unchanged(cached, obj)`` says whether a MODIFIED object changes nothing ``transform`` keeps
    but its resourceVersion (a node's heartbeat, which changes only its status, when only name and
    labels are kept). Such an event is dropped before it is transformed: the cached object stays,
    with its older resourceVersion, and ``on_event`` is not told (like an update predicate of
    controller-runtime, so nothing is queued). Readers then see the same object, by identity too,
    until something they read changes; the watch itself resumes from the event's version.
    """

    def __init__(
        self,
        kube: Kube,
        resource: Resource,
        state: ClusterState,
        *,
        page_size: int = 500,
        watch_timeout: int = 300,
        missing_retry: float = 30.0,
        on_event: Callable[[str, KubeObject], None] | None = None,
        on_list: Callable[[str], None] | None = None,
        transform: Callable[[KubeObject], KubeObject] = strip_managed_fields,
        unchanged: Callable[[KubeObject, KubeObject], bool] | None = None,
    ) -> None:
        self.kube = kube
        self.resource = resource
        self.state = state
        self.page_size = page_size
        self.watch_timeout = watch_timeout
        self.missing_retry = missing_retry
        self.on_event = on_event
        self.transform = transform
        self.unchanged = unchanged
        self.skipped = 0  # MODIFIED events that changed nothing kept (``unchanged``)
        self.on_list = on_list  # told the kind after every (re)list: the watch events between are lost
        self.lists = 0
        self.error: KubeError | None = None
        """The last refusal (403, 401, 5xx) while listing or watching; cleared by a successful list."""

    async def _list(self) -> str:
        items: list[KubeObject] = []
        cont = ""
        while True:
            query = [*self.resource.query(), ("limit", str(self.page_size))] + ([("continue", cont)] if cont else [])
            page = await self.kube.get(self.resource.path, query)
            kind = self.resource.kind
            api_version = str(page.get("apiVersion", ""))
            for item in page.get("items") or []:
                item.setdefault("kind", kind)  # list items arrive without kind/apiVersion
                item.setdefault("apiVersion", api_version)
                items.append(self._unchanged(item) or self.transform(item))
            meta = page.get("metadata") or {}
            del page  # the page as served is garbage before the next one arrives: only the transformed stay
            cont = str(meta.get("continue") or "")
            if not cont:
                self.state.replace(self.resource.kind, items)
                self.lists += 1
                if self.on_list is not None:
                    self.on_list(self.resource.kind)
                if self.error is not None:
                    log.info("reflector recovered kind=%s", self.resource.kind)
                self.error = None
                return str(meta.get("resourceVersion") or "")

    def _unchanged(self, item: KubeObject) -> KubeObject | None:
        """The cached copy of a listed object when it has the same resourceVersion: a relist (a
        watch expired) then costs no second copy of the cache while the old one is still held."""
        meta = item.get("metadata") or {}
        version = meta.get("resourceVersion")
        if not version:
            return None
        cached = self.state.get(self.resource.kind, str(meta.get("name") or ""), str(meta.get("namespace") or ""))
        if cached is not None and (cached.get("metadata") or {}).get("resourceVersion") == version:
            return cached
        return None

    async def _watch(self, resource_version: str) -> str:
        query = [
            *self.resource.query(),
            ("resourceVersion", resource_version),
            ("allowWatchBookmarks", "true"),
            ("timeoutSeconds", str(self.watch_timeout)),
        ]
        watched = self.kube.watch(self.resource.path, query, timeout=self.watch_timeout + 30, batch=self.resource.batch)
        async for event in watched:
            kind, obj = event.get("type"), event.get("object") or {}
            if kind == "ERROR":
                if obj.get("code") == 410:
                    raise Gone()
                raise KubeError(int(obj.get("code") or 500), obj, "WATCH", self.resource.path)
            resource_version = str((obj.get("metadata") or {}).get("resourceVersion") or resource_version)
            if kind == "BOOKMARK":
                continue
            obj.setdefault("kind", self.resource.kind)
            if kind == "MODIFIED" and self.unchanged is not None:
                meta = obj.get("metadata") or {}
                cached = self.state.get(
                    self.resource.kind, str(meta.get("name") or ""), str(meta.get("namespace") or "")
                )
                if cached is not None and self.unchanged(cached, obj):
                    self.skipped += 1
                    continue
            obj = self.transform(obj)
            if kind in ("ADDED", "MODIFIED"):
                self.state.upsert(self.resource.kind, obj)
            elif kind == "DELETED":
                self.state.delete(self.resource.kind, obj)
            if self.on_event is not None:
                self.on_event(str(kind), obj)
        return resource_version

    async def run(self) -> None:
        """Keep the kind current until cancelled."""
        backoff = 0.5
        resource_version = ""
        while True:
            try:
                if not resource_version:
                    resource_version = await self._list()
                resource_version = await self._watch(resource_version)
                backoff = 0.5
            except Gone:
                log.info("watch expired, relisting kind=%s", self.resource.kind)
                resource_version = ""
            except KubeError as exc:
                if exc.status == 404:
                    # Not served (CRD absent): an empty kind is the truth until it appears.
                    self.state.replace(self.resource.kind, [])
                    resource_version = ""
                    await asyncio.sleep(self.missing_retry)
                    continue
                if exc.status == 410:
                    resource_version = ""
                    continue
                if exc.status == 403:
                    # A missing RBAC right never heals by itself: name it, once per distinct refusal.
                    if self.error is None or str(self.error) != str(exc):
                        log.error(
                            "reflector forbidden kind=%s path=%s missing_permission=%r",
                            self.resource.kind, self.resource.path, forbidden_permission(exc, self.resource),
                        )  # fmt: skip
                else:
                    log.warning("reflector error kind=%s error=%s", self.resource.kind, exc)
                self.error = exc
                resource_version = ""
                await asyncio.sleep(backoff * (1 + random.random()))
                backoff = min(backoff * 2, 30.0)
            except (OSError, TimeoutError, aiohttp.ClientError) as exc:
                # A dropped connection (aiohttp's disconnects and payload errors are not OSError):
                # watch again from the last version seen.
                log.warning("reflector connection error kind=%s error=%r", self.resource.kind, exc)
                await asyncio.sleep(backoff * (1 + random.random()))
                backoff = min(backoff * 2, 30.0)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                # A malformed event or a failing handler: never let the cache freeze silently.
                log.warning("reflector error, relisting kind=%s error=%r", self.resource.kind, exc)
                resource_version = ""
                await asyncio.sleep(backoff * (1 + random.random()))
                backoff = min(backoff * 2, 30.0)


def forbidden_permission(exc: KubeError, resource: Resource) -> str:
    """The right a 403 says is missing, e.g. 'list services in API group "" in the namespace "x"'."""
    message = str(exc.body.get("message") or "")
    marker = " cannot "
    if marker in message:
        return message.split(marker, 1)[1]
    return f"list and watch {resource.path}"


async def run_reflectors(kube: Kube, state: ClusterState, kinds: list[str]) -> None:
    """Run reflectors for ``kinds``; kinds not watched count as synced and empty."""
    for kind in set(RESOURCES) - set(kinds):
        state.mark_synced(kind)
    await asyncio.gather(*(Reflector(kube, RESOURCES[k], state).run() for k in kinds))
