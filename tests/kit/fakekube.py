"""One in-memory kube-apiserver double behind the project's client interface.

:class:`FakeKube` is a :class:`gpucluster.kube.client.Kube` without a connection: ``request``,
``get`` (the base class's, which goes through ``request``), ``watch`` and ``close`` are answered
from memory, so it goes wherever production code takes a ``Kube`` (or a narrower protocol such as
``gpucluster.certs.inject.KubeAPI``).

As kube-apiserver does:

- every REST path the project uses (``/api/v1/...``, ``/apis/GROUP/VERSION/...``, namespaced or
  not, ``.../status``), for built-in and custom kinds alike. Objects are kept as given (no schema,
  no validation), every write with the next resourceVersion of one counter (the sandbox's store);
- create (POST, ``generateName`` too) sets the namespace from the path, uid, creationTimestamp and,
  for kinds that have one, ``metadata.generation`` (bumped when anything but metadata and status
  changes); an existing name is 409 AlreadyExists;
- PUT, PATCH (JSON patch, merge patch, strategic merge patch; server-side apply is approximated by
  a merge patch that creates a missing object, without field ownership) and DELETE (with
  ``preconditions``; finalizers hold the object, with a deletionTimestamp, until they are gone):
  404 NotFound, 409 Conflict on a stale resourceVersion (in a PUT body, or in what a patch leaves),
  422 on a failed JSON patch ``test``. A write to ``.../status`` changes the status only; a write to
  the object keeps the status of kinds with a status subresource (custom kinds are taken to have one);
- lists (``labelSelector``, ``fieldSelector``, ``limit``/``continue``) whose items carry no kind and
  apiVersion, as kube-apiserver's lists of built-in kinds; watches from a resourceVersion (from ""
  or "0": the current objects as ADDED first) that end after ``timeoutSeconds``;
- a refusal raises :class:`~gpucluster.kube.client.KubeError` with the HTTP status and a ``Status``
  body as kube-apiserver words it (the sandbox's :mod:`gpucluster.sandbox.apiserver.errors`), as the
  real client does.

Any other GET (``/version``, discovery) is answered from :attr:`FakeKube.served`, else 404.

For the test: :attr:`FakeKube.calls` records every request (:class:`Call`); :meth:`FakeKube.put` and
:meth:`FakeKube.object` write and read behind the client's back, as another writer would; and
:meth:`FakeKube.on` / :meth:`FakeKube.fail` hook a callable in before matching requests, to inject
a failure, race a write or hold a request.
"""

from __future__ import annotations

import asyncio
import base64
import copy
import dataclasses
import inspect
import json
import random
import uuid
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from gpucluster import timestamps
from gpucluster.kube.client import Kube, KubeError, KubeObject, Query
from gpucluster.kube.paths import object_path
from gpucluster.sandbox.apiserver import errors
from gpucluster.sandbox.apiserver.core import RETURNS_DELETED_OBJECT
from gpucluster.sandbox.apiserver.errors import ApiError
from gpucluster.sandbox.apiserver.handlers import Target, parse_path
from gpucluster.sandbox.apiserver.patch import json_patch, merge_patch, strategic_merge
from gpucluster.sandbox.apiserver.resources import Registry, ResourceType
from gpucluster.sandbox.apiserver.selectors import matches_fields, matches_labels, parse_fields, parse_labels
from gpucluster.sandbox.apiserver.store import Store, Watcher

JSON_PATCH = "application/json-patch+json"
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"
ANY = "*"
"""A hook's method that matches every method (WATCH included)."""

# The reason kube-apiserver gives with each status code (apimachinery's StatusReason).
REASONS = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    405: "MethodNotAllowed",
    409: "Conflict",
    410: "Expired",
    415: "UnsupportedMediaType",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
}
_NAME_CHARS = "bcdfghjklmnpqrstvwxz2456789"  # apiserver's generateName alphabet (utilrand)


@dataclass(frozen=True)
class Call:
    """One request as the client made it: ``method`` is the HTTP method, or WATCH for a watch."""

    method: str
    path: str
    query: tuple[tuple[str, str], ...] = ()
    body: Any = None
    content_type: str = "application/json"


Action = Callable[[Call], object]
"""A hook's callable: may raise (the request fails with it), write behind the client's back, or
return an awaitable that is awaited before the request is served (a held request)."""


@dataclass(eq=False)
class Hook:
    """Runs ``action`` before each request with this method (:data:`ANY`: all) on ``path`` or below
    it ("": every path), ``times`` times (None: until :meth:`FakeKube.off`)."""

    method: str
    path: str
    action: Action
    times: int | None = None

    def matches(self, call: Call) -> bool:
        if self.method not in (ANY, call.method):
            return False
        prefix = self.path.rstrip("/")
        return not prefix or call.path == prefix or call.path.startswith(prefix + "/")


class FakeKube(Kube):
    """An in-memory API server behind :class:`Kube`'s methods; see the module's docstring."""

    def __init__(self, objects: Iterable[Mapping[str, Any]] = (), *, served: Mapping[str, Any] | None = None) -> None:
        # Kube.__init__ is not called: there is no ApiClient, and nothing here opens a connection.
        self.store = Store()
        self.registry = Registry()
        self.served: dict[str, Any] = copy.deepcopy(dict(served or {}))
        """Answers to GETs of paths that are no resources: ``/version``, discovery documents."""
        self.calls: list[Call] = []
        self.hooks: list[Hook] = []
        for obj in objects:
            self.put(obj)

    def __repr__(self) -> str:
        return f"<FakeKube rv={self.store.rv} calls={len(self.calls)}>"

    def __eq__(self, other: object) -> bool:
        return self is other

    def __hash__(self) -> int:
        return id(self)

    # ------------------------------------------------------------------ for the test

    def put(self, obj: Mapping[str, Any], *, path: str | None = None) -> KubeObject:
        """Store ``obj`` as another writer would (created, or replaced whatever its resourceVersion),
        at ``path``, by default its own (:func:`gpucluster.kube.paths.object_path`, for the kinds
        that module knows). Not recorded in :attr:`calls`, no hooks. Returns what is stored."""
        where = self._object_target(path or object_path(obj))
        old = self._stored(where)
        new = self._prepare(where, copy.deepcopy(dict(obj)), old)
        if old is None:
            return copy.deepcopy(self.store.create(_key(where), new))
        return copy.deepcopy(self.store.update(_key(where), new))

    def object(self, path: str) -> KubeObject:
        """A copy of the object stored at ``path``; KeyError when there is none."""
        found = self._stored(self._object_target(path))
        if found is None:
            raise KeyError(path)
        return copy.deepcopy(found)

    def has(self, path: str) -> bool:
        return self._stored(self._object_target(path)) is not None

    def objects(self, path: str) -> list[KubeObject]:
        """Copies of the objects stored in the collection at ``path`` (in every namespace when the
        path names none), in namespace and name order."""
        where = parse_path(path)
        if where is None or where.name:
            raise ValueError(f"not the path of a collection: {path}")
        return [copy.deepcopy(obj) for obj in self.store.iter(_key(where), where.namespace)]

    def remove(self, path: str) -> None:
        """Delete the object at ``path`` behind the client's back (finalizers or not); KeyError when
        there is none."""
        where = self._object_target(path)
        if self._stored(where) is None:
            raise KeyError(path)
        self.store.delete(_key(where), where.namespace or "", where.name)

    def paths(self, method: str | None = None) -> list[str]:
        """The paths of the calls made (with ``method`` only, when given), in order."""
        return [c.path for c in self.calls if method in (None, c.method)]

    def on(self, method: str, path: str, action: Action, *, times: int | None = None) -> Hook:
        """Run ``action(call)`` before each matching request (see :class:`Hook`); returns the hook."""
        hook = Hook(method, path, action, times)
        self.hooks.append(hook)
        return hook

    def off(self, hook: Hook) -> None:
        if hook in self.hooks:
            self.hooks.remove(hook)

    def fail(
        self, method: str, path: str, error: int | BaseException, *, times: int | None = None, message: str = ""
    ) -> Hook:
        """Make matching requests fail: with a :class:`KubeError` of status ``error`` (a ``Status``
        body with its reason and ``message``), or by raising ``error`` itself (an ``OSError``: the
        connection)."""

        def refuse(call: Call) -> None:
            if isinstance(error, BaseException):
                raise error
            text = message or f"{call.method} {call.path} refused by the test"
            raise KubeError(error, ApiError(error, REASONS.get(error, ""), text).status(), call.method, call.path)

        return self.on(method, path, refuse, times=times)

    # ------------------------------------------------------------------ the client interface

    async def request(
        self,
        method: str,
        path: str,
        *,
        query: Query = (),
        body: Any = None,
        content_type: str = "application/json",
        timeout: float | None = 30.0,
    ) -> KubeObject:
        if isinstance(body, (str, bytes)):
            body = json.loads(body)  # as the real client, which sends JSON
        call = Call(method, path, tuple(query), copy.deepcopy(body), content_type)
        self.calls.append(call)
        await self._run_hooks(call)
        try:
            answer = self._serve(call)
        except ApiError as err:
            raise KubeError(err.code, err.status(), method, path) from None
        return copy.deepcopy(dict(answer))

    async def watch(
        self, path: str, query: Query, *, timeout: float | None = None, batch: float = 0.0
    ) -> AsyncIterator[KubeObject]:
        call = Call("WATCH", path, tuple(query))
        self.calls.append(call)
        await self._run_hooks(call)
        options = dict(query)
        try:
            watcher = self._watcher(path, options)
        except ApiError as err:
            raise KubeError(err.code, err.status(), "WATCH", path) from None
        loop = asyncio.get_running_loop()
        seconds = options.get("timeoutSeconds")
        deadline = loop.time() + float(seconds) if seconds else None
        try:
            while True:
                remaining = None if deadline is None else deadline - loop.time()
                if remaining is not None and remaining <= 0:
                    return
                try:
                    item = await watcher.next(remaining)
                except TimeoutError:
                    return  # the server ends a watch after timeoutSeconds
                if item is None:
                    return
                type_, obj = item
                yield {"type": type_, "object": copy.deepcopy(obj)}
        finally:
            watcher.stop()

    async def close(self) -> None:
        return None

    # ------------------------------------------------------------------ serving

    async def _run_hooks(self, call: Call) -> None:
        for hook in list(self.hooks):
            if not hook.matches(call):
                continue
            if hook.times is not None:
                hook.times -= 1
                if hook.times <= 0:
                    self.off(hook)
            result = hook.action(call)
            if inspect.isawaitable(result):
                await result

    def _serve(self, call: Call) -> Mapping[str, Any]:
        if call.method == "GET" and call.path in self.served:
            answer: Mapping[str, Any] = self.served[call.path]
            return answer
        where = parse_path(call.path)
        if where is None:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        if not where.name:
            if call.method == "GET":
                return self._list(where, dict(call.query))
            if call.method == "POST":
                return self._create(where, call.body)
        elif call.method == "GET":
            found = self._stored(where)
            if found is None:
                raise errors.not_found(where.group, where.plural, where.name)
            return found
        elif call.method == "PUT":
            return self._update(where, call.body)
        elif call.method == "PATCH":
            return self._patch(where, call.body, call.content_type, dict(call.query))
        elif call.method == "DELETE" and not where.subresource:
            return self._delete(where, call.body)
        raise errors.method_not_allowed()

    def _type(self, where: Target) -> ResourceType | None:
        """The built-in kind served there; None for a custom one."""
        return self.registry.get(where.group, where.version, where.plural)

    def _object_target(self, path: str) -> Target:
        where = parse_path(path)
        if where is None or not where.name or where.subresource:
            raise ValueError(f"not the path of an object: {path}")
        return where

    def _stored(self, where: Target) -> KubeObject | None:
        return self.store.get(_key(where), where.namespace or "", where.name)

    def _prepare(self, where: Target, new: KubeObject, old: KubeObject | None) -> KubeObject:
        """``new`` with what the server sets: name and namespace from the path, kind, apiVersion,
        uid, creationTimestamp and generation (kept from ``old`` on an update)."""
        rt = self._type(where)
        meta = new.get("metadata")
        if not isinstance(meta, dict):
            meta = new["metadata"] = {}
        meta["name"] = where.name
        if where.namespace:
            meta["namespace"] = where.namespace
        else:
            meta.pop("namespace", None)
        new.setdefault("apiVersion", f"{where.group}/{where.version}" if where.group else where.version)
        if rt is not None:
            new.setdefault("kind", rt.kind)
        generation = rt is None or rt.generation
        if old is None:
            meta.pop("resourceVersion", None)
            meta.setdefault("uid", str(uuid.uuid4()))
            meta.setdefault("creationTimestamp", timestamps.rfc3339())
            if generation:
                meta["generation"] = 1
            return new
        old_meta = old["metadata"]
        for key in ("uid", "creationTimestamp", "deletionTimestamp", "generation"):
            if key in old_meta:
                meta[key] = old_meta[key]
            else:
                meta.pop(key, None)
        if generation and _content(new) != _content(old):
            meta["generation"] = int(old_meta.get("generation") or 0) + 1
        return new

    def _create(self, where: Target, body: Any) -> KubeObject:
        if not isinstance(body, dict):
            raise errors.bad_request("the body of a create is an object")
        obj = copy.deepcopy(body)
        meta = obj.get("metadata")
        if not isinstance(meta, dict):
            meta = obj["metadata"] = {}
        if where.namespace and meta.get("namespace") not in (None, "", where.namespace):
            raise errors.bad_request(
                "the namespace of the provided object does not match the namespace sent on the request"
            )
        name = str(meta.get("name") or "")
        if not name and meta.get("generateName"):
            name = str(meta["generateName"]) + "".join(random.choices(_NAME_CHARS, k=5))
        if not name:
            rt = self._type(where)
            raise errors.invalid(
                where.group,
                rt.kind if rt else where.plural,
                "",
                [("FieldValueRequired", "metadata.name", "Required value: name or generateName is required")],
            )
        named = dataclasses.replace(where, name=name)
        return self.store.create(_key(named), self._prepare(named, obj, None))

    def _update(self, where: Target, body: Any) -> KubeObject:
        if not isinstance(body, dict):
            raise errors.bad_request("the body of an update is an object")
        named = str((body.get("metadata") or {}).get("name") or "")
        if named and named != where.name:
            raise errors.bad_request(
                f"the name of the object ({named}) does not match the name on the URL ({where.name})"
            )
        old = self._stored(where)
        if old is None:
            raise errors.not_found(where.group, where.plural, where.name)
        return self._write(where, copy.deepcopy(body), old)

    def _patch(self, where: Target, body: Any, content_type: str, query: Mapping[str, str]) -> KubeObject:
        kind = content_type.split(";")[0].strip()
        if kind == APPLY_PATCH and not query.get("fieldManager"):
            raise errors.bad_request(
                "PatchOptions.meta.k8s.io is invalid: fieldManager: Required value: is required for apply patch"
            )
        old = self._stored(where)
        if old is None:
            if kind == APPLY_PATCH and not where.subresource and isinstance(body, dict):
                applied = copy.deepcopy(body)
                applied["metadata"] = {**(applied.get("metadata") or {}), "name": where.name}
                return self._create(where, applied)
            raise errors.not_found(where.group, where.plural, where.name)
        if kind == JSON_PATCH:
            patched = json_patch(copy.deepcopy(old), body)
        elif kind in (MERGE_PATCH, APPLY_PATCH):
            patched = merge_patch(old, body)
        elif kind == STRATEGIC_MERGE_PATCH:
            patched = strategic_merge(old, body)
        else:
            raise ApiError(415, "UnsupportedMediaType", f"the body of the request was in an unknown format: {kind}")
        return self._write(where, patched, old)

    def _write(self, where: Target, new: KubeObject, old: KubeObject) -> KubeObject:
        """Replace ``old`` by ``new`` (a PUT body or a patched object): the resourceVersion it
        carries is a precondition; the status subresource's rule; system metadata."""
        wanted = (new.get("metadata") or {}).get("resourceVersion")
        if wanted not in (None, "") and str(wanted) != old["metadata"]["resourceVersion"]:
            raise errors.stale(where.group, where.plural, where.name)
        if where.subresource == "status":
            status = new.get("status")
            new = copy.deepcopy(old)
            new.pop("status", None)
            if status is not None:
                new["status"] = status
        elif where.subresource:
            raise errors.method_not_allowed()
        else:
            rt = self._type(where)
            if rt is None or rt.has_status:
                new.pop("status", None)
                if "status" in old:
                    new["status"] = copy.deepcopy(old["status"])
        plain = dataclasses.replace(where, subresource="")
        new = self._prepare(plain, new, old)
        meta = new["metadata"]
        if meta.get("deletionTimestamp") and not meta.get("finalizers"):
            self.store.update(_key(plain), new)
            return self.store.delete(_key(plain), plain.namespace or "", plain.name)
        return self.store.update(_key(plain), new)

    def _delete(self, where: Target, body: Any) -> KubeObject:
        old = self._stored(where)
        if old is None:
            raise errors.not_found(where.group, where.plural, where.name)
        meta = old["metadata"]
        preconditions = (body.get("preconditions") or {}) if isinstance(body, dict) else {}
        for field, have in (("uid", meta.get("uid")), ("resourceVersion", meta.get("resourceVersion"))):
            want = preconditions.get(field)
            if want and want != have:
                label = "UID" if field == "uid" else "ResourceVersion"
                raise errors.conflict(
                    where.group, where.plural, where.name,
                    f"Precondition failed: {label} in precondition: {want}, {label} in object meta: {have}",
                )  # fmt: skip
        if meta.get("finalizers"):
            held = copy.deepcopy(old)
            held["metadata"].setdefault("deletionTimestamp", timestamps.rfc3339())
            held["metadata"].setdefault("deletionGracePeriodSeconds", 0)
            return self.store.update(_key(where), held)
        final = self.store.delete(_key(where), where.namespace or "", where.name)
        if _key(where) in RETURNS_DELETED_OBJECT:
            return final
        details = {"name": where.name, "group": where.group, "kind": where.plural, "uid": meta.get("uid")}
        return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "details": details}

    def _selectors(self, where: Target, options: Mapping[str, str]) -> tuple[Any, Any]:
        rt = self._type(where)
        labels = parse_labels(options.get("labelSelector", ""))
        fields = parse_fields(
            options.get("fieldSelector", ""),
            where.group,
            rt.kind if rt else "",
            custom=rt is None,
            namespaced=rt.namespaced if rt else True,
            version=where.version,
        )
        return labels, fields

    def _list(self, where: Target, options: Mapping[str, str]) -> KubeObject:
        labels, fields = self._selectors(where, options)
        limit = int(options.get("limit") or 0)
        after: tuple[str, str] | None = None
        if options.get("continue"):
            try:
                namespace, name = json.loads(base64.urlsafe_b64decode(options["continue"]))
            except ValueError:
                raise errors.bad_request("continue key is not valid") from None
            after = (str(namespace), str(name))
        items: list[KubeObject] = []
        kind = ""
        more = False
        for obj in self.store.iter(_key(where), where.namespace, after=after):
            if not (matches_labels(labels, obj) and matches_fields(fields, obj)):
                continue
            if limit and len(items) == limit:
                more = True
                break
            kind = kind or str(obj.get("kind") or "")
            items.append({k: copy.deepcopy(v) for k, v in obj.items() if k not in ("kind", "apiVersion")})
        metadata: dict[str, Any] = {"resourceVersion": str(self.store.rv)}
        if more:
            last = items[-1]["metadata"]
            token = json.dumps([last.get("namespace", ""), last["name"]]).encode()
            metadata["continue"] = base64.urlsafe_b64encode(token).decode()
        rt = self._type(where)
        return {
            "kind": rt.list_kind if rt else f"{kind}List",
            "apiVersion": f"{where.group}/{where.version}" if where.group else where.version,
            "metadata": metadata,
            "items": items,
        }

    def _watcher(self, path: str, options: Mapping[str, str]) -> Watcher:
        where = parse_path(path)
        if where is None or where.name:
            raise errors.bad_request(f"not a collection to watch: {path}")
        labels, fields = self._selectors(where, options)
        since = options.get("resourceVersion", "")
        initial = since in ("", "0")
        try:
            version = None if initial else int(since)
        except ValueError:
            raise errors.bad_request(f"invalid resource version: {since}") from None
        return self.store.watch(
            _key(where), where.namespace, resource_version=version, labels=labels, fields=fields, initial=initial
        )


def _key(where: Target) -> tuple[str, str]:
    return (where.group, where.plural)


def _content(obj: Mapping[str, Any]) -> dict[str, Any]:
    """What a change of bumps metadata.generation: all but metadata and status."""
    return {k: v for k, v in obj.items() if k not in ("metadata", "status")}
