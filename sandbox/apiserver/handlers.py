"""The HTTP layer: routes kube-apiserver URLs to ``ApiCore`` and encodes the answers.

JSON (and YAML request bodies) only: a client asking for protobuf alone gets 406, one that
accepts JSON too gets JSON. ``Accept: application/json;as=Table;v=v1;g=meta.k8s.io`` gets a Table.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import orjson
import yaml
from aiohttp import web

from gpucluster.sandbox.apiserver import (
    auth,
    discovery,
    errors,
    openapi,
    openapi_proto,
    podlogs,
    protobuf,
    rbac,
    schemas,
    tables,
)
from gpucluster.sandbox.apiserver.core import APPLY_PATCH, RETURNS_DELETED_OBJECT, ApiCore, Context
from gpucluster.sandbox.apiserver.errors import ApiError
from gpucluster.sandbox.apiserver.faults import Faults
from gpucluster.sandbox.apiserver.resources import ResourceType
from gpucluster.sandbox.apiserver.selectors import FieldLabels, ListOptions, field_labels, go_bool, list_options
from gpucluster.sandbox.apiserver.store import BOOKMARK, ERROR

Obj = dict[str, Any]
log = logging.getLogger("sandbox.apiserver")

TABLE_MEDIA = "application/json;as=Table;v=v1;g=meta.k8s.io"
PUBLIC_PATHS = {"/healthz", "/livez", "/readyz"}
USER = web.RequestKey("sandbox.user", auth.UserInfo)  # who sent the request
WRITE_OPTIONS = ("dryRun", "fieldManager", "fieldValidation")  # query parameters admission sees as options


@dataclass
class ServerOptions:
    token: str
    git_version: str = "v1.34.2"
    server_address: str = "127.0.0.1:6443"
    bookmark_interval: float = 60.0
    default_watch_timeout: float = 1800.0
    on_restart: Callable[[], Awaitable[None]] | None = None
    pod_log: Callable[[str, str, str, bool], Any] | None = None
    """(namespace, pod, container, previous) -> a log file (``podlogs.LogSource``) or None."""
    extra: dict[str, Any] = field(default_factory=dict)


def _json_bytes(body: Any, pretty: bool) -> bytes:
    if pretty:
        return (json.dumps(body, indent=2) + "\n").encode()
    try:
        return orjson.dumps(body) + b"\n"  # every response: the fast encoder where it can
    except TypeError:  # an integer beyond 64 bits, a key that is not a string: as json writes it
        return (json.dumps(body, separators=(",", ":")) + "\n").encode()


def _is_pretty(request: web.Request) -> bool:
    value = request.query.get("pretty", "")
    return value.lower() in ("true", "1") or (value == "" and "pretty" in request.query)


def respond(request: web.Request, body: Any, status: int = 200, *, warnings: list[str] | None = None) -> web.Response:
    headers = {"Content-Type": "application/json", "Cache-Control": "no-cache, private"}
    resp = web.Response(body=_json_bytes(body, _is_pretty(request)), status=status, headers=headers)
    for w in warnings or []:
        # RFC 7234 quoted-string, as kube-apiserver writes it; client-go drops malformed warnings.
        text = w.replace("\\", "\\\\").replace('"', '\\"')
        resp.headers.add("Warning", f'299 - "{text}"')
    return resp


def error_response(request: web.Request, err: ApiError) -> web.Response:
    resp = respond(request, err.status(), err.code, warnings=err.warnings)
    if err.retry_after is not None:
        resp.headers["Retry-After"] = str(err.retry_after)
    return resp


def _accept(request: web.Request) -> str:
    """ "table", "json", or raise 406."""
    accept = request.headers.get("Accept", "") or "*/*"
    ok_json = False
    for part in accept.split(","):
        media, *params = [p.strip() for p in part.split(";")]
        options = dict(p.split("=", 1) for p in params if "=" in p)
        if (
            media in ("application/json", "*/*", "application/*")
            and options.get("as") == "Table"
            and options.get("g") == "meta.k8s.io"
            and options.get("v") in ("v1", "v1beta1")
        ):
            return "table"
        if media in ("application/json", "*/*", "application/*") and "as" not in options:
            ok_json = True
        if media in ("application/yaml", "text/plain"):
            ok_json = True
    if ok_json:
        return "json"
    raise errors.not_acceptable(accept)


_INT64 = (-(2**63), 2**63 - 1)


def _go_number(text: str) -> int | float:
    """A JSON integer as kube-apiserver's unstructured decoding keeps it: an int64, or else a float64
    (so an integer field given 10**30 is "number", not an int the store cannot hold)."""
    value = int(text)
    return value if _INT64[0] <= value <= _INT64[1] else float(value)


def _decode_body(raw: bytes, content_type: str) -> Any:
    if content_type == protobuf.MEDIA_TYPE:
        return protobuf.decode(raw)
    if not raw.strip():
        return None
    try:
        if "yaml" in content_type:
            return yaml.safe_load(raw)
        return json.loads(raw, parse_int=_go_number)
    except (json.JSONDecodeError, yaml.YAMLError, UnicodeDecodeError) as exc:
        if "json" in content_type or not content_type:
            # kubectl sometimes sends YAML-looking JSON; be lenient like the universal deserializer
            try:
                return yaml.safe_load(raw)
            except yaml.YAMLError:
                pass
        raise errors.bad_request(f"error decoding request body: {exc}") from None


def _openapi_media(request: web.Request, protobuf_types: tuple[str, ...]) -> str:
    """ "protobuf" or "json" for an OpenAPI document, in the client's order of preference; else 406."""
    accept = request.headers.get("Accept", "") or "*/*"
    for part in accept.split(","):
        media = part.split(";", 1)[0].strip()
        if media in protobuf_types:
            return "protobuf"
        if media in ("application/json", "*/*", "application/*"):
            return "json"
    raise errors.not_acceptable(accept)


def _openapi_response(request: web.Request, etag: str, body: bytes, media: str) -> web.Response:
    quoted = f'"{etag}"'
    # kube-apiserver labels the protobuf document application/octet-stream (Go's mime parser rejects the '@').
    headers = {
        "Content-Type": "application/octet-stream" if "protobuf" in media else media,
        "Etag": quoted,
        "Vary": "Accept",
        "Cache-Control": "no-cache, private",
    }
    if request.headers.get("If-None-Match") == quoted:
        return web.Response(status=304, headers=headers)
    resp = web.Response(body=body, headers=headers)
    if "gzip" in request.headers.get("Accept-Encoding", ""):
        resp.enable_compression()
    return resp


@dataclass
class Target:
    group: str
    version: str
    namespace: str | None
    plural: str
    name: str
    subresource: str


def _field_labels(rt: ResourceType) -> FieldLabels:
    return field_labels(rt.group, rt.version, rt.kind, custom=rt.custom, namespaced=rt.namespaced)


def parse_path(path: str) -> Target | None:
    parts = [p for p in path.split("/") if p]
    if not parts:
        return None
    if parts[0] == "api" and len(parts) >= 3:
        group, version, rest = "", parts[1], parts[2:]
    elif parts[0] == "apis" and len(parts) >= 4:
        group, version, rest = parts[1], parts[2], parts[3:]
    else:
        return None
    namespace: str | None = None
    if (
        rest[0] == "namespaces"
        and len(rest) >= 3
        and not (group == "" and len(rest) == 3 and rest[2] in ("status", "finalize"))
    ):
        namespace = rest[1]
        rest = rest[2:]
    if len(rest) > 3:
        return None
    plural = rest[0]
    name = rest[1] if len(rest) > 1 else ""
    sub = rest[2] if len(rest) > 2 else ""
    return Target(group, version, namespace, plural, name, sub)


class ApiHandlers:
    def __init__(self, core: ApiCore, faults: Faults, options: ServerOptions) -> None:
        self.core = core
        self.faults = faults
        self.options = options
        self.openapi = openapi.OpenAPI(core.registry, options.git_version)
        self.requests = 0
        self._streams: set[web.StreamResponse] = set()

    # ------------------------------------------------------------ app

    def app(self) -> web.Application:
        app = web.Application(middlewares=[self._middleware], client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self.dispatch)
        return app

    @web.middleware
    async def _middleware(
        self, request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        self.requests += 1
        try:
            if request.path not in PUBLIC_PATHS:
                answer = await self._access(request)
                if answer is not None:
                    return answer
            return await handler(request)
        except ApiError as err:
            return error_response(request, err)
        except (ConnectionResetError, asyncio.CancelledError):
            raise
        except Exception as exc:
            log.exception("unhandled error serving %s %s", request.method, request.path)
            return error_response(request, errors.internal(str(exc)))

    async def _access(self, request: web.Request) -> web.StreamResponse | None:
        """Authentication (401), RBAC for everyone but system:masters (403), and the answers of the
        TokenRequest/review APIs; the identity goes to ``request[USER]`` for ``_context``."""
        header = request.headers.get("Authorization", "")
        token = header[7:].strip() if header.lower().startswith("bearer ") else ""
        authn, authz = self.core.authn, self.core.authz
        if authn is None:  # a bare ApiCore: the configured token is the only identity
            if not token or not hmac.compare_digest(token.encode(), self.options.token.encode()):
                raise errors.unauthorized()
            return None
        user = authn.authenticate(token)
        if user is None:
            raise errors.unauthorized()
        if authz is not None:  # Impersonate-* headers (403 without the impersonate verb)
            try:
                user = rbac.impersonate(authz, user, request.headers.items())
            except rbac.ImpersonationError as exc:
                return web.Response(status=500, text=exc.text(request.raw_path), content_type="text/plain")
        request[USER] = user
        if user.privileged and not rbac.may_be_review(request.path):
            return None  # the admin path: nothing more to decide
        info = rbac.request_info(request.method, request.path, request.query)
        if authz is not None and not user.privileged:
            authz.check(user, info)
        if authz is not None and rbac.is_review(info):
            body = _decode_body(await request.read(), request.content_type)
            return respond(request, rbac.review(authn, authz, user, info, body), 201)
        return None

    async def dispatch(self, request: web.Request) -> web.StreamResponse:
        path = request.path.rstrip("/") or "/"
        if path in PUBLIC_PATHS:
            return web.Response(text="ok", content_type="text/plain")
        if request.method != "GET" and not path.startswith(("/api/", "/apis/", "/sandbox/")):
            raise errors.method_not_allowed()
        if path == "/version":
            return respond(request, discovery.version_info(self.options.git_version))
        if path == "/api":
            return respond(request, discovery.api_versions(self.options.server_address))
        if path == "/apis":
            return respond(request, discovery.group_list(self.core.registry))
        if path == "/openapi/v2":
            protobuf_wanted = _openapi_media(request, openapi_proto.MEDIA_TYPES) == "protobuf"
            etag, body = self.openapi.v2(protobuf_wanted)
            media = openapi_proto.MEDIA_TYPES[0] if protobuf_wanted else "application/json"
            return _openapi_response(request, etag, body, media)
        if path == "/openapi/v3":
            _openapi_media(request, ())
            return respond(request, self.openapi.root())
        if path.startswith("/openapi/v3/"):
            _openapi_media(request, ())
            doc = self.openapi.document(path[len("/openapi/v3/") :])
            if doc is None:
                raise ApiError(404, "NotFound", "the server could not find the requested resource", details={})
            return _openapi_response(request, doc[0], doc[1], "application/json")
        if path.startswith("/sandbox/"):
            return await self.admin(request, path)
        parts = [p for p in path.split("/") if p]
        if parts[0] == "api" and len(parts) == 2:
            return self._resource_list(request, "", parts[1])
        if parts[0] == "apis" and len(parts) == 2:
            group = discovery.api_group(self.core.registry, parts[1])
            if group is None:
                raise ApiError(404, "NotFound", "the server could not find the requested resource", details={})
            return respond(request, group)
        if parts[0] == "apis" and len(parts) == 3:
            return self._resource_list(request, parts[1], parts[2])
        target = parse_path(path)
        if target is None:
            raise ApiError(404, "NotFound", "the server could not find the requested resource", details={})
        return await self.resource(request, target)

    def _resource_list(self, request: web.Request, group: str, version: str) -> web.Response:
        doc = discovery.resource_list(self.core.registry, group, version)
        if doc is None:
            raise ApiError(404, "NotFound", "the server could not find the requested resource", details={})
        return respond(request, doc)

    # ------------------------------------------------------------ admin

    async def admin(self, request: web.Request, path: str) -> web.StreamResponse:
        if path == "/sandbox/faults":
            if request.method == "GET":
                return respond(request, {"faults": self.faults.rules()})
            if request.method == "POST":
                spec = _decode_body(await request.read(), request.content_type) or {}
                if not isinstance(spec, dict):
                    raise errors.bad_request("a fault is a JSON object")
                return respond(request, self.faults.configure(spec).describe(), 201)
            if request.method == "DELETE":
                self.faults.clear()
                return respond(request, {"faults": []})
        if path == "/sandbox/restart" and request.method == "POST":
            if self.options.on_restart is not None:
                await self.options.on_restart()
            return respond(request, {"restarted": True})
        raise ApiError(404, "NotFound", "the server could not find the requested resource", details={})

    # ------------------------------------------------------------ resources

    def _context(self, request: web.Request) -> Context:
        q = request.query
        dry = q.getall("dryRun", [])
        for value in dry:
            if value != "All":
                raise errors.invalid(
                    "meta.k8s.io",
                    "CreateOptions",
                    "",
                    [("FieldValueNotSupported", "dryRun", f'Unsupported value: "{value}": supported values: "All"')],
                )
        validation = q.get("fieldValidation", "Warn") or "Warn"
        if validation not in ("Strict", "Warn", "Ignore"):
            raise errors.bad_request(
                f'fieldValidation: Unsupported value: "{validation}": supported values: "Ignore", "Strict", "Warn"'
            )
        return Context(
            dry_run=bool(dry),
            field_manager=q.get("fieldManager", ""),
            user_agent=request.headers.get("User-Agent", ""),
            user=request[USER].to_obj() if USER in request else auth.ADMIN.to_obj(),
            field_validation=validation,
            options={k: q.getall(k) if k == "dryRun" else q[k] for k in WRITE_OPTIONS if q.get(k)},
        )

    def _verb(self, request: web.Request, target: Target) -> str:
        method = request.method
        watch = "watch" in request.query and go_bool(request.query["watch"])
        if method == "GET":
            if target.name:
                return "watch" if watch else "get"
            return "watch" if watch else "list"
        if method == "POST":
            return "create" if not target.name else "post"
        if method == "PUT":
            return "update"
        if method == "PATCH":
            return "patch"
        if method == "DELETE":
            return "delete" if target.name else "deletecollection"
        return method.lower()

    async def resource(self, request: web.Request, target: Target) -> web.StreamResponse:
        rt = self.core.registry.get(target.group, target.version, target.plural)
        if rt is None:
            raise ApiError(404, "NotFound", "the server could not find the requested resource", details={})
        if target.namespace is not None and not rt.namespaced:
            raise ApiError(404, "NotFound", "the server could not find the requested resource", details={})
        if target.subresource and target.subresource not in rt.subresources:
            raise ApiError(404, "NotFound", "the server could not find the requested resource", details={})
        if rt.key == ("", "pods") and target.subresource == "log" and target.namespace and request.method == "GET":
            return await podlogs.serve(request, self.core, self.options.pod_log, target.namespace, target.name)
        verb = self._verb(request, target)
        allowed = {"get", "list", "watch", "create", "update", "patch", "delete", "deletecollection"}
        if target.subresource:
            allowed = {"get", "update", "patch"}
        if verb not in allowed or (not target.subresource and verb not in rt.verbs):
            raise errors.method_not_allowed()
        latency, fault = self.faults.take(rt.group, rt.plural, verb)
        if latency:
            await asyncio.sleep(latency)
        if fault is not None:
            if fault.timeout:
                await asyncio.sleep(fault.timeout)
            err = fault.error(rt.group, rt.plural, target.name)
            if verb == "watch" and fault.code == 410:
                return await self._watch_error(request, err)
            raise err
        namespace = target.namespace if rt.namespaced else ""
        if verb in ("list", "watch") and not target.name:
            return await self._list_or_watch(request, rt, target.namespace if rt.namespaced else None, verb)
        if verb == "watch":
            return await self._list_or_watch(request, rt, namespace, verb, name=target.name)
        if rt.namespaced and not namespace and verb not in ("list", "deletecollection"):
            raise ApiError(404, "NotFound", "the server could not find the requested resource", details={})
        ctx = self._context(request)
        if verb == "get":
            obj = self.core.get(rt, namespace or "", target.name)
            return await self._render_one(request, rt, obj)
        if verb == "create":
            raw = await request.read()
            if "json" in request.content_type:
                schemas.check_duplicate_fields(rt.kind, rt.version, raw, ctx.field_validation, ctx.warnings)
            body = _decode_body(raw, request.content_type)
            if body is None:
                raise errors.bad_request("the body of the request was empty")
            obj = await self.core.create(rt, namespace or "", body, ctx)
            return respond(request, obj, 201, warnings=ctx.warnings)
        if verb == "update":
            raw = await request.read()
            if "json" in request.content_type:
                schemas.check_duplicate_fields(rt.kind, rt.version, raw, ctx.field_validation, ctx.warnings)
            body = _decode_body(raw, request.content_type)
            if body is None:
                raise errors.bad_request("the body of the request was empty")
            obj = await self.core.update(rt, namespace or "", target.name, body, ctx, subresource=target.subresource)
            return respond(request, obj, 200, warnings=ctx.warnings)
        if verb == "patch":
            content_type = request.content_type
            body = _decode_body(await request.read(), "yaml" if content_type == APPLY_PATCH else content_type)
            if body is None:
                raise errors.bad_request("the body of the request was empty")
            force = request.query.get("force", "").lower() in ("true", "1")
            obj, created = await self.core.patch(
                rt, namespace or "", target.name, content_type, body, ctx, subresource=target.subresource, force=force
            )
            return respond(request, obj, 201 if created else 200, warnings=ctx.warnings)
        if verb == "delete":
            options = await self._delete_options(request)
            obj, deleted = await self.core.delete(rt, namespace or "", target.name, options, ctx)
            if deleted and rt.key not in RETURNS_DELETED_OBJECT and not rt.custom:
                details: Obj = {"name": target.name, "kind": rt.plural, "uid": obj["metadata"].get("uid")}
                if rt.group:
                    details = {
                        "name": target.name,
                        "group": rt.group,
                        "kind": rt.plural,
                        "uid": obj["metadata"].get("uid"),
                    }
                return respond(
                    request,
                    {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "details": details},
                    warnings=ctx.warnings,
                )
            return respond(request, obj, 200, warnings=ctx.warnings)
        if verb == "deletecollection":
            options = await self._delete_options(request)
            opts = list_options(request.query, _field_labels(rt))
            items = await self.core.delete_collection(
                rt, target.namespace if rt.namespaced else None, options, ctx, labels=opts.labels, fields=opts.fields
            )
            if rt.key in RETURNS_DELETED_OBJECT or rt.custom:
                return respond(
                    request, {"kind": rt.list_kind, "apiVersion": rt.api_version, "metadata": {}, "items": items}
                )
            return respond(
                request,
                {
                    "kind": "Status",
                    "apiVersion": "v1",
                    "metadata": {},
                    "status": "Success",
                    "details": {"group": rt.group, "kind": rt.plural},
                },
            )
        raise errors.method_not_allowed()

    async def _delete_options(self, request: web.Request) -> Obj:
        body = _decode_body(await request.read(), request.content_type) or {}
        if not isinstance(body, dict):
            raise errors.bad_request("DeleteOptions must be an object")
        q = request.query
        if "propagationPolicy" in q:
            body["propagationPolicy"] = q["propagationPolicy"]
        if "orphanDependents" in q:
            body["orphanDependents"] = q["orphanDependents"].lower() == "true"
        if "gracePeriodSeconds" in q:
            body["gracePeriodSeconds"] = int(q["gracePeriodSeconds"])
        return body

    async def _render_one(self, request: web.Request, rt: ResourceType, obj: Obj) -> web.Response:
        if _accept(request) == "table":
            include = request.query.get("includeObject", "Metadata")
            return respond(
                request,
                tables.table(
                    rt,
                    [obj],
                    include_object=include,
                    list_meta={"resourceVersion": obj["metadata"].get("resourceVersion", "")},
                ),
            )
        return respond(request, obj)

    async def _list_or_watch(
        self, request: web.Request, rt: ResourceType, namespace: str | None, verb: str, *, name: str = ""
    ) -> web.StreamResponse:
        q = request.query
        opts = list_options(q, _field_labels(rt), watch=verb == "watch", name=name)
        mode = _accept(request)
        if verb == "watch":
            return await self._watch(request, rt, namespace, opts, mode)
        result = self.core.list(
            rt,
            namespace,
            labels=opts.labels,
            fields=opts.fields,
            limit=max(0, opts.limit),
            continue_token=opts.continue_token,
            resource_version=opts.resource_version,
            resource_version_match=opts.resource_version_match,
        )
        meta: Obj = {"resourceVersion": result.resource_version}
        if result.continue_token:
            meta["continue"] = result.continue_token
        if mode == "table":
            include = q.get("includeObject", "Metadata")
            return respond(request, tables.table(rt, result.items, include_object=include, list_meta=meta))
        return respond(
            request, {"kind": rt.list_kind, "apiVersion": rt.api_version, "metadata": meta, "items": result.items}
        )

    async def _watch_error(self, request: web.Request, err: ApiError) -> web.StreamResponse:
        resp = web.StreamResponse(
            status=200, headers={"Content-Type": "application/json", "Cache-Control": "no-cache, private"}
        )
        await resp.prepare(request)
        await resp.write(_json_bytes({"type": ERROR, "object": err.status()}, False))
        await resp.write_eof()
        return resp

    async def _watch(
        self, request: web.Request, rt: ResourceType, namespace: str | None, opts: ListOptions, mode: str
    ) -> web.StreamResponse:
        q = request.query
        bookmarks = opts.allow_watch_bookmarks
        send_initial = opts.send_initial_events
        timeout = self.options.default_watch_timeout
        if opts.timeout_seconds:
            timeout = float(opts.timeout_seconds)
        watcher = self.core.watch(
            rt,
            namespace,
            resource_version=opts.resource_version,
            labels=opts.labels,
            fields=opts.fields,
            send_initial_events=send_initial,
        )
        initial_left = watcher.queue.qsize() if send_initial and bookmarks else -1
        resp = web.StreamResponse(
            status=200,
            headers={
                "Content-Type": "application/json",
                "Cache-Control": "no-cache, private",
                "Transfer-Encoding": "chunked",
            },
        )
        include = q.get("includeObject", "Metadata")
        headers_sent = False
        self._streams.add(resp)
        try:
            await resp.prepare(request)
            loop = asyncio.get_running_loop()
            deadline = loop.time() + timeout
            last_bookmark = loop.time()
            if initial_left == 0:
                await resp.write(self._bookmark(rt, initial_end=True))
            interval = self.options.bookmark_interval
            while True:
                now = loop.time()
                remaining = deadline - now
                if remaining <= 0:
                    break
                wait = min(remaining, max(last_bookmark + interval - now, 0.001)) if bookmarks else remaining
                try:
                    item = await watcher.next(timeout=wait)
                except TimeoutError:
                    if bookmarks and loop.time() >= last_bookmark + interval - 0.001 and not watcher.pending():
                        await resp.write(self._bookmark(rt))
                        last_bookmark = loop.time()
                    continue
                if item is None:
                    break
                kind, obj = item
                if kind == ERROR:
                    await resp.write(_json_bytes({"type": ERROR, "object": obj}, False))
                    break
                out = self.core.to_version(rt, obj)
                if mode == "table":
                    out = tables.table(
                        rt,
                        [out],
                        include_object=include,
                        list_meta={"resourceVersion": obj["metadata"].get("resourceVersion", "")},
                        headers=not headers_sent,
                    )
                    headers_sent = True
                await resp.write(_json_bytes({"type": kind, "object": out}, False))
                if initial_left > 0:
                    initial_left -= 1
                    if initial_left == 0:
                        await resp.write(self._bookmark(rt, initial_end=True))
                        last_bookmark = loop.time()
            with contextlib.suppress(ConnectionResetError, RuntimeError):
                await resp.write_eof()
        except (ConnectionResetError, asyncio.CancelledError):
            pass
        finally:
            watcher.stop()
            self._streams.discard(resp)
        return resp

    def _bookmark(self, rt: ResourceType, *, initial_end: bool = False) -> bytes:
        md: Obj = {"resourceVersion": str(self.core.store.rv)}
        if initial_end:
            md["annotations"] = {"k8s.io/initial-events-end": "true"}
        return _json_bytes(
            {"type": BOOKMARK, "object": {"kind": rt.kind, "apiVersion": rt.api_version, "metadata": md}}, False
        )
