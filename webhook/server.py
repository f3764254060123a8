"""The admission webhook's HTTPS server (the only aiohttp code of the webhook).

Routes: ``POST /validate`` and ``POST /mutate`` (every resource we handle, dispatched on the
review's kind), ``GET /healthz``, ``GET /readyz`` (TLS loaded and the cluster view synced) and
``GET /metrics``. Bodies must be ``application/json`` and at most :data:`MAX_BODY_BYTES`.

Hostile or broken clients are bounded like kube-apiserver's and controller-runtime's Go servers
(:class:`ServerLimits`): a connection must deliver a complete request header within the read-header
timeout (32 s) of connecting or of sending the first byte of its next request, a request body within
the body timeout, and an idle keep-alive connection is closed after the idle timeout (90 s). The TLS
handshake gets the read-header timeout too. Past ``max_connections`` open connections, new ones are
*refused*, not queued: answered ``503`` with ``Retry-After: 1`` and closed (the API server then
applies the hook's failure policy at once instead of waiting out its timeout in a queue). A client
that disconnects mid-request costs one DEBUG line; malformed HTTP one DEBUG line too.

Connections are admitted from the accept on through a connection table (:mod:`gpucluster.webhook.connections`):
a total cap and a cap per peer address, and a full replica makes room by closing the connection
doing the least (handshaking, silent, idle) rather than refusing the new one; only when every
connection in reach is answering a review is a new one refused (closed at once). A connection
must finish its TLS handshake and send the first byte of a request within the first-byte timeout
(5 s). With client authentication on, the review port's handshake requires a client certificate
(:mod:`gpucluster.webhook.clientauth`); ``/healthz``, ``/readyz`` and ``/metrics`` are then served without one
on the health port (``health_port``), which never serves reviews.

Claim reviews run in a thread, because their rule waits for the allocator's worker pool
(:mod:`gpucluster.webhook.feasibility`); every other review is answered on the event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import signal
import socket
import ssl
import struct
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import orjson
from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError
from aiohttp.web_protocol import RequestHandler, RequestPayloadError
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from gpucluster.clusterstate import ClusterState
from gpucluster.policy import Settings
from gpucluster.webhook import cached_answers
from gpucluster.webhook.admission import Path, admit_request
from gpucluster.webhook.connections import ConnectionTable, Slot
from gpucluster.webhook.metrics import WebhookMetrics
from gpucluster.webhook.review import ReviewDecodeError, decode_review
from gpucluster.webhook.tls import ReloadingTLS

log = logging.getLogger("gpucluster.webhook")

# An AdmissionReview carries the object and, on UPDATE, the old object; etcd caps an object at
# 1.5 MiB, so 6 MiB leaves room for both plus JSON overhead.
MAX_BODY_BYTES = 6 * 1024 * 1024

# Reviews whose rule may wait for the allocator worker: answered in a thread, off the event loop.
OFFLOADED = frozenset({("resource.k8s.io", "ResourceClaim"), ("resource.k8s.io", "ResourceClaimTemplate")})


@dataclass(frozen=True)
class ServerLimits:
    """Connection limits (flags of ``gpucluster webhook``); defaults are kube-apiserver's where it has one."""

    read_header_timeout: float = 32.0  # from the accept: handshake and the first request's head
    read_body_timeout: float = 30.0  # the longest timeoutSeconds a webhook can have: a later body is useless
    idle_timeout: float = 90.0
    max_connections: int = 1000
    # Ours, not Go's: the API server sends its review as soon as it connects, so a connection that
    # has not finished its handshake and sent a byte of a request within this long only holds a slot.
    first_byte_timeout: float = 5.0
    max_connections_per_peer: int = 250  # one peer address's share of max_connections
    # Claim reviews answered at once; each waits for the allocator pool (webhook.feasibility),
    # which bounds the work to the replica's cores. A thread mostly waits on a pipe.
    claim_review_threads: int = 64


CLUSTER_KEY: web.AppKey[ClusterState] = web.AppKey("cluster", ClusterState)
SETTINGS_KEY: web.AppKey[Settings] = web.AppKey("settings", Settings)
METRICS_KEY: web.AppKey[WebhookMetrics] = web.AppKey("metrics", WebhookMetrics)
TLS_KEY: web.AppKey[ReloadingTLS | None] = web.AppKey("tls")
LIMITS_KEY: web.AppKey[ServerLimits] = web.AppKey("limits", ServerLimits)
THREADS_KEY: web.AppKey[ThreadPoolExecutor] = web.AppKey("threads", ThreadPoolExecutor)


class InFlight:
    """Counts reviews being answered, so that shutdown can wait for them and readiness can drop first."""

    def __init__(self) -> None:
        self.count = 0
        self.draining = False
        self._idle: asyncio.Event | None = None  # made by wait_idle only: entering and leaving stay two additions

    def __enter__(self) -> None:
        self.count += 1

    def __exit__(self, *_: object) -> None:
        self.count -= 1
        if self.count == 0 and self._idle is not None:
            self._idle.set()

    async def wait_idle(self, timeout: float) -> bool:
        if self.count == 0:
            return True
        self._idle = asyncio.Event()
        try:
            await asyncio.wait_for(self._idle.wait(), timeout)
        except TimeoutError:
            return False
        finally:
            self._idle = None
        return True


INFLIGHT_KEY: web.AppKey[InFlight] = web.AppKey("inflight", InFlight)


def _handler(path: Path) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    async def handle(request: web.Request) -> web.StreamResponse:
        protocol = request.protocol
        if isinstance(protocol, _Connection):
            protocol.slot.stage = "answering"  # never displaced by a new connection now
        try:
            with request.app[INFLIGHT_KEY]:
                return await _answer(request)
        finally:
            if isinstance(protocol, _Connection) and protocol.slot.stage == "answering":
                protocol.slot.stage, protocol.slot.since = "idle", asyncio.get_running_loop().time()

    async def _answer(request: web.Request) -> web.StreamResponse:
        app = request.app
        metrics = app[METRICS_KEY]
        started = time.perf_counter()
        headers = request.headers
        # The exact header the API server sends is checked without aiohttp's parse of it.
        if headers.get("Content-Type") != "application/json" and request.content_type != "application/json":
            metrics.rejected.labels(path, "415").inc()
            return web.Response(status=415, text="Content-Type must be application/json\n")
        # The API server never compresses a review (nor names an encoding); a compressed body is
        # at most a decompression bomb.
        encoding = headers.get("Content-Encoding")
        if encoding is not None and (encoding := encoding.strip().lower()) != "identity":
            metrics.rejected.labels(path, "415").inc()
            return await _answer_and_close(
                request, 415, f"Content-Encoding {encoding} is not accepted: send the review uncompressed\n"
            )
        try:
            if request.content.is_eof():  # the usual case: the body came with the header, no timer needed
                body = await request.read()
            else:
                async with asyncio.timeout(app[LIMITS_KEY].read_body_timeout):
                    body = await request.read()
        except web.HTTPRequestEntityTooLarge:
            metrics.rejected.labels(path, "413").inc()
            return web.Response(status=413, text=f"body larger than {MAX_BODY_BYTES} bytes\n")
        except TimeoutError:
            metrics.closed.labels("body-timeout").inc()
            log.debug("connection closed: body not received in time path=%s peer=%s", path, request.remote)
            return await _answer_and_close(request, 408, "request body not received in time\n")
        except (ConnectionError, RequestPayloadError, HttpProcessingError) as exc:
            metrics.closed.labels("client-gone").inc()
            log.debug("client went away mid-request path=%s peer=%s error=%r", path, request.remote, exc)
            return web.Response(status=400)  # nobody is left to read it
        cluster, settings = app[CLUSTER_KEY], app[SETTINGS_KEY]
        # A workload's next pod: its answer was given before, and is found without decoding the pod.
        keyed = cached_answers.answer_key(body) if path == "mutate" else None
        kept = cached_answers.AnswerSlot(keyed, cluster, settings) if keyed is not None else None
        if kept is not None and (found := kept.found) is not None:
            elapsed = time.perf_counter() - started
            metrics.observe(found.rule, "CREATE", found.outcome, path, elapsed)
            ids = kept.keyed
            _log_review(
                path, ids.uid, "Pod", "CREATE", ids.namespace, ids.name, found.outcome, elapsed, " (answered before)"
            )
            return web.Response(body=kept.answer(found), content_type="application/json")
        try:
            review = decode_review(body)
        except ReviewDecodeError as exc:
            metrics.rejected.labels(path, "400").inc()
            return web.Response(status=400, text=f"cannot decode AdmissionReview: {exc}\n")
        if (review.group, review.kind) in OFFLOADED:
            answer = functools.partial(admit_request, review, path=path, cluster=cluster, settings=settings)
            admission = await asyncio.get_running_loop().run_in_executor(app[THREADS_KEY], answer)
        else:
            admission = admit_request(review, path=path, cluster=cluster, settings=settings)
        elapsed = time.perf_counter() - started
        outcome = admission.verdict.outcome or ("allowed" if admission.verdict.allowed else "denied")
        metrics.observe(admission.rule, admission.request.operation, outcome, path, elapsed)
        req = admission.request
        _log_review(path, req.uid, req.kind, req.operation, req.namespace, req.name, outcome, elapsed)
        encoded = orjson.dumps(admission.response)
        if kept is not None and admission.hook is not None and outcome != "error":
            kept.keep(encoded, admission.rule, outcome)
        return web.Response(body=encoded, content_type="application/json")

    return handle


def _log_review(
    path: str,
    uid: str,
    kind: str,
    operation: str,
    namespace: str,
    name: str,
    outcome: str,
    elapsed: float,
    note: str = "",
) -> None:
    """One line per review refused or failed, and per review at DEBUG."""
    if log.isEnabledFor(logging.DEBUG) or outcome in ("denied", "error"):
        log.info(
            "review path=%s uid=%s kind=%s op=%s ns=%s name=%s outcome=%s ms=%.2f%s",
            path, uid, kind, operation, namespace, name, outcome, elapsed * 1000, note,
        )  # fmt: skip


async def _answer_and_close(request: web.Request, status: int, text: str) -> web.StreamResponse:
    """Send a short answer and drop the connection (no lingering read of a body that is not coming)."""
    response = web.Response(status=status, text=text)
    response.force_close()
    with contextlib.suppress(ConnectionError):
        await response.prepare(request)
        await response.write_eof()
    request.protocol.force_close()
    return response


@web.middleware
async def _no_reviews_on_the_health_port(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    protocol = request.protocol
    if request.path in ("/validate", "/mutate") and isinstance(protocol, _Connection) and not protocol.reviews:
        return web.Response(status=404, text="reviews are not served on the health port\n")
    return await handler(request)


async def _healthz(request: web.Request) -> web.Response:
    return web.Response(text="ok\n")


async def _readyz(request: web.Request) -> web.Response:
    tls = request.app[TLS_KEY]
    problems = []
    if request.app[INFLIGHT_KEY].draining:
        problems.append("shutting down")
    problem = tls.problem() if tls is not None else None
    if problem:
        problems.append(problem)
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
    limits: ServerLimits | None = None,
) -> web.Application:
    """The aiohttp application (TLS and the connection limits are applied by :func:`serve`)."""
    limits = limits or ServerLimits()
    # No middleware of ours on the review path (each is two more coroutines per review): serve()
    # adds _no_reviews_on_the_health_port when it opens a health port.
    app = web.Application(client_max_size=MAX_BODY_BYTES)
    app[CLUSTER_KEY] = cluster
    app[SETTINGS_KEY] = settings
    app[METRICS_KEY] = WebhookMetrics()
    app[TLS_KEY] = tls
    app[INFLIGHT_KEY] = InFlight()
    app[LIMITS_KEY] = limits
    threads = ThreadPoolExecutor(max_workers=limits.claim_review_threads, thread_name_prefix="webhook-review")
    app[THREADS_KEY] = threads

    async def stop_threads(_: web.Application) -> None:
        threads.shutdown(wait=False, cancel_futures=True)

    app.on_cleanup.append(stop_threads)
    if tls is not None:
        app[METRICS_KEY].certificate_expiry.set_function(tls.seconds_to_expiry)
    app.router.add_post("/validate", _handler("validate"))
    app.router.add_post("/mutate", _handler("mutate"))
    app.router.add_get("/healthz", _healthz)
    app.router.add_get("/readyz", _readyz)
    app.router.add_get("/metrics", _metrics)
    return app


BIND_ADDRESS_ENV = "GPUCLUSTER_BIND_ADDRESS"


def default_host() -> str:
    """$GPUCLUSTER_BIND_ADDRESS (the pod IP the sandbox's process kubelet gives a pod), else 0.0.0.0."""
    return os.environ.get(BIND_ADDRESS_ENV) or "0.0.0.0"


class _ServerLog(logging.LoggerAdapter):  # type: ignore[type-arg]
    """aiohttp's server logger, except that malformed requests and vanished clients, which aiohttp
    logs with a traceback, become one DEBUG line: they are the client's problem, not ours."""

    def log(self, level: int, msg: object, *args: object, exc_info: Any = None, **kwargs: Any) -> None:
        if isinstance(exc_info, HttpProcessingError | ConnectionError):
            log.debug("bad request or client gone error=%s", " ".join(str(exc_info).split()))
            return
        super().log(level, msg, *args, exc_info=exc_info, **kwargs)


_SERVER_LOG = _ServerLog(logging.getLogger("aiohttp.server"))


class _Connection(RequestHandler):
    """aiohttp's HTTP/1.1 connection plus the first-byte and read-header deadlines, its slot in the
    connection table and quiet client errors.

    Deadlines count from the accept, like Go's ``ReadHeaderTimeout`` (the handshake is part of
    them): the first byte of a request within ``first_byte_timeout``, its whole head within
    ``read_header_timeout``; on a kept-alive connection the head's deadline starts again with the
    first byte of each later request. aiohttp's own keep-alive timer (``idle_timeout``) closes
    connections idle between requests.
    """

    def __init__(
        self, manager: web.Server, *, loop: asyncio.AbstractEventLoop, limits: ServerLimits, table: ConnectionTable,
        slot: Slot, metrics: WebhookMetrics, reviews: bool, accepted: float,
    ) -> None:  # fmt: skip
        quiet: dict[str, Any] = {"access_log": None, "logger": _SERVER_LOG}  # no access log; see _ServerLog
        super().__init__(manager, loop=loop, keepalive_timeout=limits.idle_timeout, **quiet)
        self._limits = limits
        self._table = table
        self.slot = slot
        self._made = False
        self.reviews = reviews  # False on the health port: /validate and /mutate are not served there
        self._webhook_metrics = metrics
        self._header_timer: asyncio.TimerHandle | None = None
        self._accepted = accepted
        self._head_since: float | None = None  # when the request head being read began
        self._first_byte = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        if self.slot.gone:  # evicted while its handshake finished
            transport.close()
            return
        self._made = True
        self.slot.stage, self.slot.since = "fresh", self._loop.time()
        self.slot.evict = self._evicted
        super().connection_made(transport)
        self._head_since = self._accepted
        self._header_timer = self._loop.call_at(
            self._accepted + min(self._limits.first_byte_timeout, self._limits.read_header_timeout),
            self._header_timeout,
        )

    def _evicted(self) -> None:
        self._webhook_metrics.closed.labels("evicted").inc()
        log.debug("connection closed to make room stage=%s peer=%s", self.slot.stage, self.slot.peer)
        self.force_close()

    def connection_lost(self, exc: BaseException | None) -> None:
        self._table.leave(self.slot)
        if not self._made:
            return
        self._made = False
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if not self._made:
            return
        now = self._loop.time()
        self._first_byte = True
        if self.slot.stage in ("fresh", "idle"):
            self.slot.stage, self.slot.since = "reading", now
        if self._head_since is None:
            waiting = self._waiter
            if waiting is not None and not waiting.done():
                # The first bytes of the next request on a kept-alive connection: its deadline starts.
                self._head_since = now
        super().data_received(data)
        if self._messages:
            self._head_since = None  # a whole request head arrived

    # One timer per connection, not one per request: requests only record when their head began
    # (a clock read); the timer, when it fires, closes a connection whose head is late and is
    # otherwise set again for the earliest moment one could be.
    def _header_timeout(self) -> None:
        self._header_timer = None
        if self.transport is None:
            return
        now = self._loop.time()
        if not self._first_byte:
            if now >= self._accepted + self._limits.first_byte_timeout:
                self._webhook_metrics.closed.labels("first-byte-timeout").inc()
                log.debug("connection closed: no byte of a request in %gs", self._limits.first_byte_timeout)
                self.force_close()
                return
            self._header_timer = self._loop.call_at(
                self._accepted + self._limits.first_byte_timeout, self._header_timeout
            )
            return
        since = self._head_since
        if since is None or self._messages or now < since + self._limits.read_header_timeout:
            start = since if since is not None and not self._messages else now
            self._header_timer = self._loop.call_at(start + self._limits.read_header_timeout, self._header_timeout)
            return
        self._webhook_metrics.closed.labels("header-timeout").inc()
        log.debug("connection closed: no complete request header in %gs", self._limits.read_header_timeout)
        self.force_close()


def _close_if_cancelled(conn: socket.socket, task: asyncio.Task[None]) -> None:
    if task.cancelled():
        conn.close()


class _Listener:
    """What :class:`aiohttp.web.BaseSite` needs of an ``asyncio.Server``, for our own accept loop."""

    def __init__(self, sock: socket.socket, accepting: asyncio.Task[None], handshakes: set[asyncio.Task[None]]) -> None:
        self.sockets = [sock]
        self._accepting = accepting
        self._handshakes = handshakes

    def close(self) -> None:
        self._accepting.cancel()
        for task in list(self._handshakes):
            task.cancel()
        self.sockets[0].close()

    async def wait_closed(self) -> None:
        with contextlib.suppress(asyncio.CancelledError):
            await self._accepting


class _Site(web.BaseSite):
    """A TLS listener whose connections are :class:`_Connection`, admitted through a
    :class:`~webhook.connections.ConnectionTable` from the accept on (aiohttp's TCPSite has no hooks for that).

    The accept loop is ours so that a connection counts, and can be displaced, while its handshake
    is still running: the handshake, which ``ssl_context`` may make require a client certificate,
    must finish within the first-byte timeout.
    """

    def __init__(
        self, runner: web.AppRunner, host: str, port: int, *, ssl_context: Any, limits: ServerLimits,
        metrics: WebhookMetrics, reviews: bool = True, table: ConnectionTable | None = None,
    ) -> None:  # fmt: skip
        super().__init__(runner, ssl_context=ssl_context, backlog=512)
        self._host, self._port, self._limits, self._webhook_metrics = host, port, limits, metrics
        self.reviews = reviews
        self.table = table or ConnectionTable(limits.max_connections, limits.max_connections_per_peer)
        self._handshakes: set[asyncio.Task[None]] = set()
        if reviews:
            metrics.connections.set_function(lambda: self.table.open)

    @property
    def name(self) -> str:
        return f"https://{self._host}:{self._port}"

    @property
    def bound_port(self) -> int:
        if self._server is not None and self._server.sockets:  # type: ignore[attr-defined]
            return int(self._server.sockets[0].getsockname()[1])  # type: ignore[attr-defined]
        return self._port

    async def start(self) -> None:
        await super().start()
        loop = asyncio.get_running_loop()
        infos = await loop.getaddrinfo(self._host, self._port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        family, kind, proto, _, address = infos[0]
        sock = socket.socket(family, kind, proto)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(address)
            sock.listen(self._backlog)
            sock.setblocking(False)
        except OSError:
            sock.close()
            raise
        self._server = _Listener(sock, loop.create_task(self._accept(sock)), self._handshakes)  # type: ignore[assignment]

    async def _accept(self, sock: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                conn, address = await loop.sock_accept(sock)
            except OSError as exc:  # out of file descriptors, a connection reset before accept
                self._webhook_metrics.closed.labels("accept-failed").inc()
                log.warning("accept failed error=%s", exc)
                await asyncio.sleep(0.05)
                continue
            peer = str(address[0]) if isinstance(address, tuple) else str(address)
            now = loop.time()
            pending: list[asyncio.Task[None]] = []
            slot, decision = self.table.admit(peer, now, functools.partial(self._evict_handshake, pending))
            if slot is None:
                self._webhook_metrics.closed.labels("refused").inc()
                log.debug("connection refused: %s cap reached, every connection busy peer=%s", decision.why, peer)
                with contextlib.suppress(OSError):
                    conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                conn.close()
                continue
            task = loop.create_task(self._handshake(conn, slot, now))
            pending.append(task)
            self._handshakes.add(task)
            task.add_done_callback(self._handshakes.discard)
            task.add_done_callback(functools.partial(_close_if_cancelled, conn))  # also before it ran

    async def _handshake(self, conn: socket.socket, slot: Slot, accepted: float) -> None:
        loop = asyncio.get_running_loop()
        manager = self._runner.server
        assert manager is not None
        table = self.table

        def connection() -> _Connection:
            return _Connection(
                manager, loop=loop, limits=self._limits, table=table, slot=slot, metrics=self._webhook_metrics,
                reviews=self.reviews, accepted=accepted,
            )  # fmt: skip

        try:
            await loop.connect_accepted_socket(
                connection, conn, ssl=self._ssl_context, ssl_handshake_timeout=self._limits.first_byte_timeout,
                ssl_shutdown_timeout=5.0,
            )  # fmt: skip
        except asyncio.CancelledError:
            conn.close()
            if slot.gone:  # evicted: the table let it go already
                return
            table.leave(slot)
            raise  # the listener is closing
        except (OSError, ssl.SSLError, TimeoutError, ConnectionError) as exc:
            table.leave(slot)
            conn.close()
            # asyncio aborts a late handshake with "SSL handshake is taking longer than ..."
            late = isinstance(exc, TimeoutError) or "taking longer" in str(exc)
            reason = "first-byte-timeout" if late else "handshake-failed"
            self._webhook_metrics.closed.labels(reason).inc()
            log.debug("connection closed in the TLS handshake peer=%s error=%s", slot.peer, exc)

    def _evict_handshake(self, pending: list[asyncio.Task[None]]) -> None:
        self._webhook_metrics.closed.labels("evicted").inc()
        for task in pending:
            task.cancel()


async def serve(
    app: web.Application,
    tls: ReloadingTLS,
    *,
    host: str | None = None,
    port: int = 9443,
    shutdown_timeout: float = 20.0,
    shutdown_delay: float = 0.0,
    stop: asyncio.Event | None = None,
    on_started: Callable[[int], None] | None = None,
    health_port: int | None = None,
    on_health_started: Callable[[int], None] | None = None,
) -> None:
    """Serve until SIGTERM/SIGINT or ``stop``; in-flight requests finish before the process exits.

    ``host`` defaults to :func:`default_host`. On stop, /readyz turns 503 first and the listener
    stays open for ``shutdown_delay`` seconds, so that the Service stops routing to this replica;
    then the listener closes and the reviews in flight get up to ``shutdown_timeout`` seconds.
    """
    host = host or default_host()
    tls.reload_if_changed()
    if not tls.loaded:
        raise RuntimeError(f"cannot load TLS material from {tls.cert_file} and {tls.key_file}")
    tls.check_live()
    if health_port is not None:
        app.middlewares.insert(0, _no_reviews_on_the_health_port)  # the outermost, before client authentication
    runner = web.AppRunner(app, shutdown_timeout=shutdown_timeout, access_log=None)
    await runner.setup()
    site = _Site(runner, host, port, ssl_context=tls.context, limits=app[LIMITS_KEY], metrics=app[METRICS_KEY])
    await site.start()
    bound = site.bound_port
    log.info("webhook serving host=%s port=%d client_auth=%s", host, bound, bool(tls.client_ca))
    if health_port is not None:
        health = _Site(
            runner, host, health_port, ssl_context=tls.health_context, limits=app[LIMITS_KEY],
            metrics=app[METRICS_KEY], reviews=False,
        )  # fmt: skip
        await health.start()
        log.info("webhook health and metrics serving host=%s port=%d", host, health.bound_port)
        if on_health_started is not None:
            on_health_started(health.bound_port)
    # The allocator workers start on first use (each claim check starts the one it needs): a
    # replica that never reviews a claim holds no copies of the cluster, and only as many as the
    # reviews in flight at once need.
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
        for running in list(runner.sites):
            await running.stop()
        if not await inflight.wait_idle(shutdown_timeout):
            log.warning("shutdown timeout reached with %d reviews in flight", inflight.count)
        watcher.cancel()
        await runner.cleanup()
