"""The admission webhook's HTTPS server (the only aiohttp code of the webhook).

Routes: ``POST /validate`` and ``POST /mutate`` (every resource we handle, dispatched on the
review's kind), ``GET /healthz``, ``GET /readyz`` (TLS loaded and the cluster view synced) and
``GET /metrics``. Bodies must be ``application/json`` and at most :data:`MAX_BODY_BYTES`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import time
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from gpucluster.clusterstate import ClusterState
from webhook.admission import Admission, Path, admit
from webhook.metrics import WebhookMetrics
from webhook.review import ReviewDecodeError, build_response, short_warning
from webhook.settings import Settings
from webhook.tls import ReloadingTLS

log = logging.getLogger("gpucluster.webhook")

# An AdmissionReview carries the object and, on UPDATE, the old object; etcd caps an object at
# 1.5 MiB, so 6 MiB leaves room for both plus JSON overhead.
MAX_BODY_BYTES = 6 * 1024 * 1024

# Creates the objects a rule asks for (ResourceClaimTemplates) before the request is allowed.
Creator = Callable[[list[dict[str, Any]]], Awaitable[None]]

CLUSTER_KEY: web.AppKey[ClusterState] = web.AppKey("cluster", ClusterState)
SETTINGS_KEY: web.AppKey[Settings] = web.AppKey("settings", Settings)
METRICS_KEY: web.AppKey[WebhookMetrics] = web.AppKey("metrics", WebhookMetrics)
TLS_KEY: web.AppKey[ReloadingTLS | None] = web.AppKey("tls")
CREATOR_KEY: web.AppKey[Creator | None] = web.AppKey("creator")


class InFlight:
    """Counts reviews being answered, so that shutdown can wait for them and readiness can drop first."""

    def __init__(self) -> None:
        self.count = 0
        self.draining = False
        self._idle = asyncio.Event()
        self._idle.set()

    def __enter__(self) -> None:
        self.count += 1
        self._idle.clear()

    def __exit__(self, *_: object) -> None:
        self.count -= 1
        if self.count == 0:
            self._idle.set()

    async def wait_idle(self, timeout: float) -> bool:
        try:
            await asyncio.wait_for(self._idle.wait(), timeout)
        except TimeoutError:
            return False
        return True


INFLIGHT_KEY: web.AppKey[InFlight] = web.AppKey("inflight", InFlight)


async def _create_before_allowing(admission: Admission, creator: Creator | None) -> Admission:
    """Create what the rule needs to exist before the object is admitted (never on dryRun)."""
    creates = admission.creates
    if not creates or admission.request.dry_run or creator is None or not admission.verdict.allowed:
        return admission
    try:
        await creator(creates)
    except Exception as exc:
        names = ", ".join(str((o.get("metadata") or {}).get("name")) for o in creates)
        log.error("create failed uid=%s objects=%s error=%r", admission.request.uid, names, exc)
        verdict = admission.verdict
        verdict.patched = None
        verdict.patch = None
        verdict.warnings = [short_warning(f"not translated: could not create {names}: {exc}")]
        verdict.outcome = "error"
        admission.response = build_response(admission.request, verdict, mutating=True)
    return admission


def _handler(path: Path) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    async def handle(request: web.Request) -> web.StreamResponse:
        with request.app[INFLIGHT_KEY]:
            return await _answer(request)

    async def _answer(request: web.Request) -> web.StreamResponse:
        app = request.app
        metrics = app[METRICS_KEY]
        started = time.perf_counter()
        if request.content_type != "application/json":
            metrics.rejected.labels(path, "415").inc()
            return web.Response(status=415, text="Content-Type must be application/json\n")
        try:
            body = await request.read()
        except web.HTTPRequestEntityTooLarge:
            metrics.rejected.labels(path, "413").inc()
            return web.Response(status=413, text=f"body larger than {MAX_BODY_BYTES} bytes\n")
        try:
            admission = admit(body, path=path, cluster=app[CLUSTER_KEY], settings=app[SETTINGS_KEY])
        except ReviewDecodeError as exc:
            metrics.rejected.labels(path, "400").inc()
            return web.Response(status=400, text=f"cannot decode AdmissionReview: {exc}\n")
        admission = await _create_before_allowing(admission, app[CREATOR_KEY])
        elapsed = time.perf_counter() - started
        outcome = admission.verdict.outcome or ("allowed" if admission.verdict.allowed else "denied")
        metrics.observe(admission.rule, admission.request.operation, outcome, path, elapsed)
        if log.isEnabledFor(logging.DEBUG) or outcome in ("denied", "error"):
            req = admission.request
            log.info(
                "review path=%s uid=%s kind=%s op=%s ns=%s name=%s outcome=%s ms=%.2f",
                path, req.uid, req.kind, req.operation, req.namespace, req.name, outcome, elapsed * 1000,
            )  # fmt: skip
        return web.Response(body=orjson.dumps(admission.response), content_type="application/json")

    return handle


async def _healthz(request: web.Request) -> web.Response:
    return web.Response(text="ok\n")


async def _readyz(request: web.Request) -> web.Response:
    tls = request.app[TLS_KEY]
    problems = []
    if request.app[INFLIGHT_KEY].draining:
        problems.append("shutting down")
    if tls is not None and not tls.loaded:
        problems.append("tls material not loaded")
    if not request.app[CLUSTER_KEY].synced():
        problems.append("cluster view not synced")
    if problems:
        return web.Response(status=503, text="; ".join(problems) + "\n")
    return web.Response(text="ok\n")


async def _metrics(request: web.Request) -> web.Response:
    data = generate_latest(request.app[METRICS_KEY].registry)
    return web.Response(body=data, headers={"Content-Type": CONTENT_TYPE_LATEST})


def build_app(
    cluster: ClusterState,
    settings: Settings,
    *,
    tls: ReloadingTLS | None = None,
    creator: Creator | None = None,
) -> web.Application:
    """The aiohttp application (TLS is applied by the site that serves it)."""
    app = web.Application(client_max_size=MAX_BODY_BYTES)
    app[CLUSTER_KEY] = cluster
    app[SETTINGS_KEY] = settings
    app[METRICS_KEY] = WebhookMetrics()
    app[TLS_KEY] = tls
    app[CREATOR_KEY] = creator
    app[INFLIGHT_KEY] = InFlight()
    app.router.add_post("/validate", _handler("validate"))
    app.router.add_post("/mutate", _handler("mutate"))
    app.router.add_get("/healthz", _healthz)
    app.router.add_get("/readyz", _readyz)
    app.router.add_get("/metrics", _metrics)
    return app


async def serve(
    app: web.Application,
    tls: ReloadingTLS,
    *,
    host: str = "0.0.0.0",
    port: int = 9443,
    shutdown_timeout: float = 20.0,
    shutdown_delay: float = 0.0,
    stop: asyncio.Event | None = None,
    on_started: Callable[[int], None] | None = None,
) -> None:
    """Serve until SIGTERM/SIGINT or ``stop``; in-flight requests finish before the process exits.

    On stop, /readyz turns 503 first and the listener stays open for ``shutdown_delay`` seconds,
    so that the Service stops routing to this replica; then the listener closes and the reviews
    in flight get up to ``shutdown_timeout`` seconds to finish.
    """
    tls.reload_if_changed()
    if not tls.loaded:
        raise RuntimeError(f"cannot load TLS material from {tls.cert_file} and {tls.key_file}")
    runner = web.AppRunner(app, shutdown_timeout=shutdown_timeout, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, port, ssl_context=tls.context)
    await site.start()
    bound = port
    server = getattr(site, "_server", None)
    if server is not None and server.sockets:
        bound = server.sockets[0].getsockname()[1]
    log.info("webhook serving host=%s port=%d", host, bound)
    if on_started is not None:
        on_started(bound)
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError):  # not the main thread
            loop.add_signal_handler(sig, stop.set)
    watcher = asyncio.create_task(tls.watch())
    try:
        await stop.wait()
    finally:
        inflight = app[INFLIGHT_KEY]
        inflight.draining = True
        log.info("webhook shutting down delay=%.1fs in_flight=%d", shutdown_delay, inflight.count)
        await asyncio.sleep(shutdown_delay)
        await site.stop()
        if not await inflight.wait_idle(shutdown_timeout):
            log.warning("shutdown timeout reached with %d reviews in flight", inflight.count)
        watcher.cancel()
        await runner.cleanup()
