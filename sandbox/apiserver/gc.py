"""In-process controllers of the control plane: the garbage collector (owner references,
background/foreground/orphan propagation, dangling owners) and the namespace lifecycle controller.

Both follow the store's event bus (``Store.subscribe``) and act through ``ApiCore`` like any client,
so their writes produce ordinary watch events. ``idle()`` waits until they have nothing left to do.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import logging
from typing import Any

from gpucluster.sandbox.apiserver.core import NAMESPACES, ApiCore, Context
from gpucluster.sandbox.apiserver.errors import ApiError
from gpucluster.sandbox.apiserver.resources import ResourceType
from gpucluster.sandbox.apiserver.store import DELETED, Event, ResourceKey

Obj = dict[str, Any]
log = logging.getLogger("sandbox.gc")

_CTX_USER = {
    "username": "system:serviceaccount:kube-system:generic-garbage-collector",
    "groups": ["system:serviceaccounts"],
}


class GarbageCollector:
    def __init__(self, core: ApiCore) -> None:
        self.core = core
        self.queue: asyncio.Queue[tuple[str, ResourceKey, Obj]] = asyncio.Queue()
        self._task: asyncio.Task[None] | None = None
        self._busy = False
        self._unsubscribe = core.store.subscribe(self._on_event)

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="sandbox-gc")

    async def stop(self) -> None:
        self._unsubscribe()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def idle(self, timeout: float = 5.0) -> None:
        """Wait until every queued change has been processed (for tests)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while self.queue.qsize() or self._busy:
            if loop.time() > deadline:
                raise TimeoutError("garbage collector still busy")
            await asyncio.sleep(0.005)

    def _on_event(self, event: Event) -> None:
        md = event.obj.get("metadata") or {}
        if event.type == DELETED:
            self.queue.put_nowait(("deleted", event.resource, event.obj))
            ns = md.get("namespace")
            if ns:
                ns_obj = self.core.store.get(NAMESPACES, "", ns)
                if ns_obj is not None and ns_obj["metadata"].get("deletionTimestamp"):
                    self.queue.put_nowait(("deleting", NAMESPACES, ns_obj))
            return
        if md.get("ownerReferences"):
            self.queue.put_nowait(("owners", event.resource, event.obj))
        if md.get("deletionTimestamp"):
            self.queue.put_nowait(("deleting", event.resource, event.obj))

    async def _run(self) -> None:
        while True:
            kind, resource, obj = await self.queue.get()
            self._busy = True
            try:
                if kind == "deleted":
                    await self._owner_gone(obj)
                elif kind == "owners":
                    await self._check_owners(resource, obj)
                else:
                    await self._deleting(resource, obj)
            except ApiError as exc:
                if exc.code not in (404, 409):
                    log.warning("gc: %s %s: %s", kind, obj.get("metadata", {}).get("name"), exc.message)
            except Exception:  # a controller must survive anything
                log.exception("gc: unexpected error")
            finally:
                self._busy = not self.queue.empty()

    def _rt(self, resource: ResourceKey) -> ResourceType | None:
        for rt in self.core.registry:
            if rt.key == resource and rt.version == rt.storage_version:
                return rt
        return None

    def _ctx(self) -> Context:
        return Context(user=_CTX_USER, field_manager="generic-garbage-collector")

    async def _delete(self, resource: ResourceKey, obj: Obj, policy: str) -> None:
        rt = self._rt(resource)
        if rt is None:
            return
        md = obj["metadata"]
        await self.core.delete(
            rt,
            md.get("namespace", ""),
            md["name"],
            {"propagationPolicy": policy, "preconditions": {"uid": md.get("uid")}},
            self._ctx(),
        )

    async def _set_owner_refs(self, resource: ResourceKey, obj: Obj, refs: list[Obj]) -> None:
        rt = self._rt(resource)
        if rt is None:
            return
        md = obj["metadata"]
        current = self.core.store.get(resource, md.get("namespace", ""), md["name"])
        if current is None or current["metadata"].get("uid") != md.get("uid"):
            return
        new = copy.deepcopy(current)
        if refs:
            new["metadata"]["ownerReferences"] = refs
        else:
            new["metadata"].pop("ownerReferences", None)
        await self.core.update(rt, md.get("namespace", ""), md["name"], new, self._ctx())

    async def _remove_finalizer(self, resource: ResourceKey, obj: Obj, finalizer: str) -> None:
        rt = self._rt(resource)
        if rt is None:
            return
        md = obj["metadata"]
        current = self.core.store.get(resource, md.get("namespace", ""), md["name"])
        if current is None or finalizer not in (current["metadata"].get("finalizers") or []):
            return
        new = copy.deepcopy(current)
        new["metadata"]["finalizers"] = [f for f in new["metadata"]["finalizers"] if f != finalizer]
        await self.core.update(rt, md.get("namespace", ""), md["name"], new, self._ctx())

    def _live(self, resource: ResourceKey, obj: Obj) -> Obj | None:
        md = obj["metadata"]
        current = self.core.store.get(resource, md.get("namespace", ""), md["name"])
        if current is None or current["metadata"].get("uid") != md.get("uid"):
            return None
        return current

    async def _check_owners(self, resource: ResourceKey, obj: Obj) -> None:
        """Dependents whose owners are all gone are deleted; dangling references are dropped."""
        current = self._live(resource, obj)
        if current is None or current["metadata"].get("deletionTimestamp"):
            return
        refs = list(current["metadata"].get("ownerReferences") or [])
        alive = [r for r in refs if self.core.store.by_uid(str(r.get("uid", ""))) is not None]
        if len(alive) == len(refs):
            return
        if not alive:
            await self._delete(resource, current, "Background")
        else:
            await self._set_owner_refs(resource, current, alive)

    async def _owner_gone(self, owner: Obj) -> None:
        uid = str(owner["metadata"].get("uid", ""))
        for resource, dep in self.core.store.dependents(uid):
            await self._check_owners(resource, dep)
        # A deleted dependent may unblock an owner in foreground deletion.
        for ref in owner["metadata"].get("ownerReferences") or []:
            found = self.core.store.by_uid(str(ref.get("uid", "")))
            if found is not None and "foregroundDeletion" in (found[1]["metadata"].get("finalizers") or []):
                await self._deleting(found[0], found[1])

    async def _deleting(self, resource: ResourceKey, obj: Obj) -> None:
        current = self._live(resource, obj)
        if current is None:
            return
        md = current["metadata"]
        finalizers = md.get("finalizers") or []
        uid = str(md.get("uid", ""))
        if resource == NAMESPACES:
            await self._namespace_cleanup(current)
            return
        if "orphan" in finalizers:
            for dep_resource, dep in self.core.store.dependents(uid):
                refs = [r for r in dep["metadata"].get("ownerReferences") or [] if r.get("uid") != uid]
                await self._set_owner_refs(dep_resource, dep, refs)
            await self._remove_finalizer(resource, current, "orphan")
            return
        if "foregroundDeletion" in finalizers:
            blocking = 0
            for dep_resource, dep in self.core.store.dependents(uid):
                ref: Obj = next((r for r in dep["metadata"].get("ownerReferences") or [] if r.get("uid") == uid), {})
                if ref.get("blockOwnerDeletion"):
                    blocking += 1
                if not dep["metadata"].get("deletionTimestamp"):
                    await self._delete(dep_resource, dep, "Foreground")
            if blocking == 0:
                await self._remove_finalizer(resource, current, "foregroundDeletion")

    async def _namespace_cleanup(self, namespace: Obj) -> None:
        ns = namespace["metadata"]["name"]
        seen: set[ResourceKey] = set()
        for rt in self.core.registry:
            if not rt.namespaced or rt.key in seen or rt.version != rt.storage_version:
                continue
            seen.add(rt.key)
            for obj in list(self.core.store.iter(rt.key, ns)):
                if not obj["metadata"].get("deletionTimestamp"):
                    with contextlib.suppress(ApiError):
                        await self.core.delete(
                            rt, ns, obj["metadata"]["name"], {"propagationPolicy": "Background"}, self._ctx()
                        )
        if any(True for key in seen for _ in self.core.store.iter(key, ns)):
            return  # objects held by finalizers: checked again whenever one of them goes
        current = self._live(NAMESPACES, namespace)
        if current is None or current["metadata"].get("finalizers"):
            return
        self.core.store.delete(NAMESPACES, "", ns)
