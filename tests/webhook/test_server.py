"""The HTTPS server: routes, TLS 1.2+, certificate reload, limits, readiness, metrics, shutdown."""

from __future__ import annotations

import asyncio
import json
import ssl
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from gpucluster.certs.authority import KeyPair, new_ca, new_serving_cert
from gpucluster.clusterstate import ClusterState
from gpucluster.policy import Settings
from gpucluster.webhook.server import INFLIGHT_KEY, MAX_BODY_BYTES, build_app, serve
from gpucluster.webhook.tls import ReloadingTLS
from tests.webhook.reviews import clusterpolicy, gpucluster, review


def write_pair(directory: Path, pair: KeyPair) -> None:
    (directory / "tls.crt").write_bytes(pair.cert_pem)
    (directory / "tls.key").write_bytes(pair.key_pem)


class Server:
    def __init__(self, tmp: Path, cluster: ClusterState) -> None:
        self.ca = new_ca()
        self.dir = tmp
        write_pair(tmp, new_serving_cert(self.ca, ["localhost"], ip_addresses=["127.0.0.1"]))
        self.tls = ReloadingTLS(tmp / "tls.crt", tmp / "tls.key", poll_interval=0.05)
        self.app = build_app(cluster, Settings(), tls=self.tls)
        self.stop = asyncio.Event()
        self.port = 0
        self.task: asyncio.Task[None] | None = None

    def client_context(self) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cadata=self.ca.cert_pem.decode())
        return ctx

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[Server]:
    srv = Server(tmp_path, ClusterState.from_objects([clusterpolicy()]))
    started = asyncio.get_running_loop().create_future()
    srv.task = asyncio.create_task(
        serve(
            srv.app, srv.tls, host="127.0.0.1", port=0, stop=srv.stop, on_started=started.set_result, shutdown_timeout=2
        )
    )
    srv.port = await asyncio.wait_for(started, 10)
    yield srv
    srv.stop.set()
    await asyncio.wait_for(srv.task, 10)


async def post(srv: Server, path: str, body: bytes, content_type: str = "application/json") -> tuple[int, Any]:
    async with (
        aiohttp.ClientSession() as session,
        session.post(
            srv.url + path, data=body, headers={"Content-Type": content_type}, ssl=srv.client_context()
        ) as resp,
    ):
        text = await resp.text()
        return resp.status, (json.loads(text) if resp.content_type == "application/json" else text)


async def test_validate_over_https_denies_gpucluster_beside_clusterpolicy(server: Server) -> None:
    status, body = await post(server, "/validate", json.dumps(review(gpucluster())).encode())
    assert status == 200
    assert body["response"]["allowed"] is False
    assert "one GPU management model" in body["response"]["status"]["message"]


async def test_bad_requests_get_4xx_with_a_message(server: Server) -> None:
    status, text = await post(server, "/validate", b"{not json")
    assert status == 400 and "cannot decode AdmissionReview" in text
    status, text = await post(server, "/mutate", b"{}", content_type="text/plain")
    assert status == 415 and "application/json" in text
    status, text = await post(server, "/validate", b" " * (MAX_BODY_BYTES + 1))
    assert status == 413


async def test_health_readiness_and_metrics(server: Server) -> None:
    ctx = server.client_context()
    await post(server, "/validate", json.dumps(review(gpucluster())).encode())
    async with aiohttp.ClientSession() as session:
        async with session.get(server.url + "/healthz", ssl=ctx) as resp:
            assert resp.status == 200
        async with session.get(server.url + "/readyz", ssl=ctx) as resp:
            assert resp.status == 200
        async with session.get(server.url + "/metrics", ssl=ctx) as resp:
            text = await resp.text()
    assert (
        'gpucluster_webhook_reviews_total{operation="CREATE",outcome="denied",rule="gpuclusters.validate.gpucluster.nvidia.com"} 1.0'
        in text
    )
    assert "gpucluster_webhook_review_duration_seconds_bucket" in text


async def test_readyz_waits_for_the_cluster_view(tmp_path: Path) -> None:
    from aiohttp.test_utils import TestClient, TestServer

    cluster = ClusterState()  # nothing synced yet
    app = build_app(cluster, Settings())
    async with TestClient(TestServer(app)) as client:
        resp = await client.get("/readyz")
        assert resp.status == 503 and "cluster view not synced" in await resp.text()
        for kind in ("Namespace", "Node", "ClusterPolicy", "GPUCluster", "NVIDIADriver", "DeviceClass",
                     "ResourceSlice", "ResourceClaim", "ResourceClaimTemplate"):  # fmt: skip
            cluster.mark_synced(kind)
        assert (await client.get("/readyz")).status == 200


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
async def test_only_tls_1_2_and_newer(server: Server) -> None:
    ctx = server.client_context()
    ctx.maximum_version = ssl.TLSVersion.TLSv1_1
    ctx.minimum_version = ssl.TLSVersion.TLSv1
    ctx.set_ciphers("ALL:@SECLEVEL=0")
    with pytest.raises((ssl.SSLError, OSError)):
        await asyncio.open_connection("127.0.0.1", server.port, ssl=ctx)


async def _peer_serial(srv: Server, ca: KeyPair) -> int:
    ctx = ssl.create_default_context(cadata=ca.cert_pem.decode())
    _, writer = await asyncio.open_connection("127.0.0.1", srv.port, ssl=ctx)
    der = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
    writer.close()
    from cryptography import x509

    return x509.load_der_x509_certificate(der).serial_number


async def test_certificate_is_reloaded_without_a_restart(server: Server) -> None:
    first = await _peer_serial(server, server.ca)
    new_pair = new_serving_cert(server.ca, ["localhost"], ip_addresses=["127.0.0.1"])
    write_pair(server.dir, new_pair)
    async with asyncio.timeout(5):  # the watcher polls every 0.05 s
        while not server.tls.reloads:
            await asyncio.sleep(0.01)
    assert server.tls.reloads == 1
    second = await _peer_serial(server, server.ca)
    assert second == new_pair.certificate.serial_number != first


async def test_a_broken_pair_keeps_the_previous_certificate(server: Server) -> None:
    before = await _peer_serial(server, server.ca)
    (server.dir / "tls.key").write_bytes(new_ca().key_pem)  # key of another certificate
    assert server.tls.reload_if_changed() is False
    assert await _peer_serial(server, server.ca) == before


async def test_shutdown_finishes_in_flight_requests(server: Server) -> None:
    body = json.dumps(review(gpucluster())).encode()
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port, ssl=server.client_context())
    head = (
        f"POST /validate HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    ).encode()
    writer.write(head + body[:10])
    await writer.drain()
    inflight = server.app[INFLIGHT_KEY]
    async with asyncio.timeout(5):  # the handler is now waiting for the rest of the body
        while inflight.count < 1:
            await asyncio.sleep(0.01)
    server.stop.set()
    async with asyncio.timeout(5):  # shutdown has begun: the listener refuses new connections
        while True:
            try:
                _, probe = await asyncio.open_connection("127.0.0.1", server.port)
            except OSError:
                break
            probe.close()
            await asyncio.sleep(0.01)
    assert inflight.draining and inflight.count == 1
    writer.write(body[10:])
    await writer.drain()
    response = await asyncio.wait_for(reader.read(), 5)
    writer.close()
    assert response.startswith(b"HTTP/1.1 200")
    assert b'"allowed":false' in response
    # and the listener is closed: new connections are refused
    await asyncio.wait_for(server.task, 10) if server.task else None
    with pytest.raises(OSError):
        await asyncio.open_connection("127.0.0.1", server.port, ssl=server.client_context())
