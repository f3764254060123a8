"""The server against hostile and broken clients: real sockets, real TLS, small timeouts.

Slow-loris headers, a handshake never started, idle keep-alive, a trickled body, a client that
vanishes mid-body, malformed HTTP, more connections than the cap, compressed bodies, and TLS 1.2
CBC suites. tests/webhook/test_lockout.py has the lock-out by idle peers and the per-peer caps.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import logging
import re
import shutil
import ssl
import time
import zlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from gpucluster.certs.authority import KeyPair, new_ca, new_serving_cert
from gpucluster.clusterstate import ClusterState
from gpucluster.policy import Settings
from gpucluster.webhook.server import METRICS_KEY, ServerLimits, build_app, serve
from gpucluster.webhook.tls import ReloadingTLS
from tests.webhook.reviews import clusterpolicy, gpucluster, review

FAST = ServerLimits(
    read_header_timeout=0.6, read_body_timeout=0.6, idle_timeout=1.2, max_connections=200, first_byte_timeout=0.6
)
BODY = json.dumps(review(gpucluster())).encode()


@dataclass
class Live:
    """A webhook served on loopback by :func:`webhook.server.serve`."""

    ca: KeyPair
    dir: Path
    tls: ReloadingTLS
    app: object
    port: int = 0
    stop: asyncio.Event = field(default_factory=asyncio.Event)

    def client_context(self) -> ssl.SSLContext:
        return ssl.create_default_context(cadata=self.ca.cert_pem.decode())

    def metric(self, name: str, **labels: str) -> float:
        registry = self.app[METRICS_KEY].registry  # type: ignore[index]
        value = registry.get_sample_value(name, labels)
        return float(value or 0.0)


def write_pair(directory: Path, pair: KeyPair) -> None:
    (directory / "tls.crt").write_bytes(pair.cert_pem)
    (directory / "tls.key").write_bytes(pair.key_pem)


async def start(
    tmp: Path,
    limits: ServerLimits = FAST,
    cluster: ClusterState | None = None,
    settings: Settings | None = None,
    **tls_options: object,
) -> tuple[Live, asyncio.Task[None]]:
    ca = new_ca()
    write_pair(tmp, new_serving_cert(ca, ["localhost"], ip_addresses=["127.0.0.1"]))
    tls = ReloadingTLS(tmp / "tls.crt", tmp / "tls.key", poll_interval=0.05, **tls_options)  # type: ignore[arg-type]
    cluster = cluster or ClusterState.from_objects([clusterpolicy()])
    app = build_app(cluster, settings or Settings(), tls=tls, limits=limits)
    live = Live(ca, tmp, tls, app)
    started: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    task = asyncio.create_task(
        serve(app, tls, host="127.0.0.1", port=0, stop=live.stop, on_started=started.set_result, shutdown_timeout=2)
    )
    live.port = await asyncio.wait_for(started, 10)
    return live, task


@pytest.fixture
async def live(tmp_path: Path) -> AsyncIterator[Live]:
    srv, task = await start(tmp_path)
    yield srv
    srv.stop.set()
    await asyncio.wait_for(task, 10)


def head(length: int, *, keep_alive: bool = True) -> bytes:
    connection = "keep-alive" if keep_alive else "close"
    return (
        f"POST /validate HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
        f"Content-Length: {length}\r\nConnection: {connection}\r\n\r\n"
    ).encode()


async def closed_by_server(reader: asyncio.StreamReader, within: float) -> bytes:
    """Everything the server sends until it closes the connection (fails if it does not within ``within``)."""
    data = b""
    async with asyncio.timeout(within):
        while True:
            try:
                chunk = await reader.read(65536)
            except (ConnectionError, ssl.SSLError):
                return data
            if not chunk:
                return data
            data += chunk


async def review_ok(srv: Live) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", srv.port, ssl=srv.client_context())
    writer.write(head(len(BODY), keep_alive=False) + BODY)
    answer = await closed_by_server(reader, 5)
    writer.close()
    assert answer.startswith(b"HTTP/1.1 200") and b'"allowed":false' in answer


def no_tracebacks(caplog: pytest.LogCaptureFixture) -> None:
    noisy = [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR]
    assert not noisy, [f"{r.name} {r.levelname} {r.getMessage()}" for r in noisy]


async def test_slow_loris_headers_are_dropped_at_the_header_timeout(
    live: Live, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    ctx = live.client_context()
    conns = [await asyncio.open_connection("127.0.0.1", live.port, ssl=ctx) for _ in range(50)]
    opened = time.monotonic()
    for _, writer in conns:
        writer.write(b"POST /validate HTTP/1.1\r\nHost: localhost\r\nContent-Le")
    await asyncio.gather(*(w.drain() for _, w in conns))
    await review_ok(live)  # an honest client is served meanwhile
    answers = await asyncio.gather(*(closed_by_server(r, 5) for r, _ in conns))
    elapsed = time.monotonic() - opened
    assert answers == [b""] * 50  # dropped, not answered
    assert FAST.read_header_timeout * 0.8 <= elapsed < FAST.read_header_timeout + 3
    assert live.metric("gpucluster_webhook_connections_closed_total", reason="header-timeout") == 50
    for _, writer in conns:
        writer.close()
    no_tracebacks(caplog)


async def test_a_handshake_never_started_is_dropped(live: Live, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    reader, writer = await asyncio.open_connection("127.0.0.1", live.port)  # plain TCP, says nothing
    opened = time.monotonic()
    assert await closed_by_server(reader, 5) == b""
    assert time.monotonic() - opened >= FAST.read_header_timeout * 0.8
    writer.close()
    no_tracebacks(caplog)


async def test_idle_keep_alive_is_closed_and_the_next_header_has_its_own_deadline(live: Live) -> None:
    ctx = live.client_context()
    reader, writer = await asyncio.open_connection("127.0.0.1", live.port, ssl=ctx)
    writer.write(head(len(BODY)) + BODY)
    status = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
    assert status.startswith(b"HTTP/1.1 200") and b"Connection: close" not in status
    idle_from = time.monotonic()
    await closed_by_server(reader, 5)
    assert FAST.idle_timeout * 0.8 <= time.monotonic() - idle_from < FAST.idle_timeout + 3
    writer.close()

    # After a first request, half of the next header: the header deadline (0.6 s), not the idle one (1.2 s).
    reader, writer = await asyncio.open_connection("127.0.0.1", live.port, ssl=ctx)
    writer.write(head(len(BODY)) + BODY)
    await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
    writer.write(b"POST /validate HTTP/1.1\r\nHo")
    started = time.monotonic()
    await closed_by_server(reader, 5)
    assert time.monotonic() - started < FAST.idle_timeout
    writer.close()


async def test_a_trickled_body_gets_408_and_the_connection_is_dropped(live: Live) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", live.port, ssl=live.client_context())
    writer.write(head(len(BODY)) + BODY[:20])
    started = time.monotonic()
    answer = await closed_by_server(reader, 5)
    assert answer.startswith(b"HTTP/1.1 408") and b"body not received in time" in answer
    assert FAST.read_body_timeout * 0.8 <= time.monotonic() - started < FAST.read_body_timeout + 3
    assert live.metric("gpucluster_webhook_connections_closed_total", reason="body-timeout") == 1
    writer.close()


async def test_a_client_gone_mid_body_is_one_debug_line(live: Live, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    for _ in range(3):
        _, writer = await asyncio.open_connection("127.0.0.1", live.port, ssl=live.client_context())
        writer.write(head(len(BODY)) + BODY[:50])
        await writer.drain()
        writer.transport.abort()  # gone without a goodbye
    async with asyncio.timeout(5):
        while live.metric("gpucluster_webhook_connections_closed_total", reason="client-gone") < 3:
            await asyncio.sleep(0.01)
    await review_ok(live)
    no_tracebacks(caplog)
    gone = [r for r in caplog.records if "client went away" in r.getMessage()]
    assert len(gone) == 3 and all(r.levelno == logging.DEBUG for r in gone)


async def test_malformed_http_gets_400_without_a_traceback(live: Live, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    for garbage in (
        b"POST /validate HTTP/1.1\r\nHost localhost\r\n\r\n",
        b"POST /validate HTTP/1.1\r\nContent-Length: -5\r\n\r\n",
        b"\x16\x03\x01 not http at all\r\n\r\n",
        b"GET /" + b"a" * 20000 + b" HTTP/1.1\r\n\r\n",
    ):
        reader, writer = await asyncio.open_connection("127.0.0.1", live.port, ssl=live.client_context())
        writer.write(garbage)
        answer = await closed_by_server(reader, 5)
        writer.close()
        assert answer.split(b" ", 2)[1] == b"400", answer[:80]
    no_tracebacks(caplog)


@pytest.mark.parametrize("encoding", ["gzip", "deflate", "GZIP"])
async def test_a_compressed_body_is_refused_with_415(live: Live, encoding: str) -> None:
    body = gzip.compress(BODY) if encoding.lower() == "gzip" else zlib.compress(BODY)
    request = head(len(body)).replace(b"\r\n\r\n", f"\r\nContent-Encoding: {encoding}\r\n\r\n".encode())
    reader, writer = await asyncio.open_connection("127.0.0.1", live.port, ssl=live.client_context())
    writer.write(request + body)
    answer = await closed_by_server(reader, 5)
    writer.close()
    assert (
        answer.startswith(b"HTTP/1.1 415") and f"Content-Encoding {encoding.lower()} is not accepted".encode() in answer
    )
    assert live.metric("gpucluster_webhook_rejected_requests_total", path="validate", code="415") == 1


@pytest.mark.parametrize("encoding", ["identity", " Identity "])
async def test_a_body_sent_as_identity_is_answered(live: Live, encoding: str) -> None:
    # Naming no encoding at all, the API server's way, is the usual case; "identity" is the same.
    request = head(len(BODY), keep_alive=False).replace(
        b"\r\n\r\n", f"\r\nContent-Encoding: {encoding}\r\n\r\n".encode()
    )
    reader, writer = await asyncio.open_connection("127.0.0.1", live.port, ssl=live.client_context())
    writer.write(request + BODY)
    answer = await closed_by_server(reader, 5)
    writer.close()
    assert answer.startswith(b"HTTP/1.1 200"), answer[:80]
    assert live.metric("gpucluster_webhook_rejected_requests_total", path="validate", code="415") == 0


@pytest.mark.parametrize("metadata", ["x", [1], 7])
async def test_metadata_that_is_not_an_object_gets_400_not_an_internal_error(
    live: Live, caplog: pytest.LogCaptureFixture, metadata: object
) -> None:
    document = review(gpucluster())
    document["request"]["object"]["metadata"] = metadata
    body = json.dumps(document).encode()
    reader, writer = await asyncio.open_connection("127.0.0.1", live.port, ssl=live.client_context())
    writer.write(head(len(body), keep_alive=False) + body)
    answer = await closed_by_server(reader, 5)
    writer.close()
    assert answer.startswith(b"HTTP/1.1 400") and b"request.object.metadata must be an object" in answer
    no_tracebacks(caplog)


async def test_a_full_replica_makes_room_by_closing_a_silent_connection(tmp_path: Path) -> None:
    srv, task = await start(tmp_path, ServerLimits(max_connections=3))
    try:
        ctx = srv.client_context()
        held = [await asyncio.open_connection("127.0.0.1", srv.port, ssl=ctx) for _ in range(3)]
        async with asyncio.timeout(5):
            while srv.metric("gpucluster_webhook_open_connections") < 3:
                await asyncio.sleep(0.01)
        await review_ok(srv)  # served: the oldest silent connection made room
        assert srv.metric("gpucluster_webhook_connections_closed_total", reason="evicted") == 1
        assert srv.metric("gpucluster_webhook_connections_closed_total", reason="refused") == 0
        assert await closed_by_server(held[0][0], 5) == b""  # the oldest one went
        for _, w in held:
            w.close()
    finally:
        srv.stop.set()
        await asyncio.wait_for(task, 10)


def _tls12(ciphers: str, ca: KeyPair) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cadata=ca.cert_pem.decode())
    ctx.minimum_version = ctx.maximum_version = ssl.TLSVersion.TLSv1_2
    ctx.set_ciphers(ciphers)
    return ctx


async def test_tls_1_2_offers_aead_suites_only(live: Live) -> None:
    cbc = "ECDHE-ECDSA-AES128-SHA:ECDHE-ECDSA-AES256-SHA:ECDHE-ECDSA-AES128-SHA256:ECDHE-ECDSA-AES256-SHA384"
    with pytest.raises((ssl.SSLError, ConnectionError)):  # a handshake_failure alert, or the reset after it
        await asyncio.open_connection("127.0.0.1", live.port, ssl=_tls12(cbc, live.ca))
    for aead in ("ECDHE-ECDSA-AES128-GCM-SHA256", "ECDHE-ECDSA-AES256-GCM-SHA384", "ECDHE-ECDSA-CHACHA20-POLY1305"):
        _, writer = await asyncio.open_connection("127.0.0.1", live.port, ssl=_tls12(aead, live.ca))
        assert writer.get_extra_info("cipher")[0] == aead
        writer.close()
    _, writer = await asyncio.open_connection("127.0.0.1", live.port, ssl=live.client_context())
    assert writer.get_extra_info("ssl_object").version() == "TLSv1.3"
    writer.close()


@pytest.mark.skipif(shutil.which("openssl") is None, reason="no openssl binary")
async def test_openssl_s_client_cannot_negotiate_a_cbc_suite(live: Live) -> None:
    async def s_client(*args: str) -> tuple[int, str]:
        proc = await asyncio.create_subprocess_exec(
            "openssl", "s_client", "-connect", f"127.0.0.1:{live.port}", "-tls1_2", *args,
            stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
        )  # fmt: skip
        out, _ = await asyncio.wait_for(proc.communicate(), 20)
        return proc.returncode or 0, out.decode(errors="replace")

    for cbc in ("ECDHE-ECDSA-AES128-SHA", "ECDHE-ECDSA-AES256-SHA384", "ECDHE-RSA-AES128-SHA256"):
        code, out = await s_client("-cipher", cbc)
        # No suite in common: nothing negotiated (asyncio closes without flushing OpenSSL's alert).
        assert code != 0 and re.search(r"Cipher is \(NONE\)|Cipher\s*:\s*0000", out), out[-400:]
    code, out = await s_client("-cipher", "ECDHE-ECDSA-AES128-GCM-SHA256")
    assert code == 0 and "Cipher is ECDHE-ECDSA-AES128-GCM-SHA256" in out, out[-400:]
