"""No lock-out by idle peers: legitimate reviews are answered within 1 s while 1,100 connections sit
idle, with and without client authentication; per-peer caps; the connection table's choices."""

from __future__ import annotations

import asyncio
import json
import ssl
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from gpucluster.certs.authority import new_ca, new_serving_cert
from gpucluster.clusterstate import ClusterState
from gpucluster.policy import Settings
from gpucluster.webhook.clientauth import DEFAULT_ALLOWED_NAMES, protect
from gpucluster.webhook.connections import ConnectionTable, Slot, victim
from gpucluster.webhook.server import METRICS_KEY, ServerLimits, build_app, serve
from gpucluster.webhook.tls import ReloadingTLS
from tests.webhook.reviews import clusterpolicy, gpucluster, review
from tests.webhook.test_client_auth import client_pair
from tests.webhook.test_server_hardening import closed_by_server, head, write_pair

pytestmark = pytest.mark.integration  # starts servers or processes: `make unit` leaves it out

BODY = json.dumps(review(gpucluster())).encode()
IDLE = 1100


# ---------------------------------------------------------------- the table (pure)


def test_the_victim_is_the_least_busy_then_the_most_crowded_peer_then_the_oldest() -> None:
    slots = [
        Slot("api", "answering", 0.0),
        Slot("api", "idle", 1.0),
        Slot("x", "reading", 0.5),
        Slot("x", "fresh", 3.0),
        Slot("y", "fresh", 2.0),
        Slot("x", "handshake", 9.0),
    ]
    per_peer = {"api": 2, "x": 3, "y": 1}
    assert victim(slots, per_peer) is slots[5]  # handshaking first, however young
    slots.pop()
    per_peer["x"] = 2
    assert victim(slots, per_peer) is slots[3]  # fresh: x holds as many as api but more than y
    slots.pop(3)
    assert victim(slots, per_peer) is slots[3]  # y's fresh one
    slots.pop(3)
    assert victim(slots, per_peer) is slots[1]  # idle before reading
    assert victim([Slot("api", "answering", 0.0)], {"api": 1}) is None


def test_a_peer_at_its_cap_only_displaces_its_own_and_is_refused_when_they_are_all_answering() -> None:
    table = ConnectionTable(limit=10, per_peer_limit=2)
    evicted: list[str] = []
    a1, _ = table.admit("a", 0.0, lambda: evicted.append("a1"))
    a2, _ = table.admit("b", 0.0, lambda: evicted.append("b1"))
    a3, _ = table.admit("a", 1.0, lambda: evicted.append("a2"))
    assert a1 and a2 and a3
    slot, decision = table.admit("a", 2.0)
    assert slot is not None and decision.why == "peer" and evicted == ["a1"]  # not b's
    assert table.per_peer == {"a": 2, "b": 1} and table.open == 3
    for s in table.by_peer["a"]:
        s.stage = "answering"
    slot, decision = table.admit("a", 3.0)
    assert slot is None and not decision.admitted and decision.why == "peer"
    assert table.admit("b", 3.0)[0] is not None  # b has room of its own
    table.leave(a2)
    table.leave(a2)  # idempotent
    assert table.per_peer == {"a": 2, "b": 1}


# ---------------------------------------------------------------- against the live server


class Live:
    def __init__(self, tmp: Path, client_auth: bool) -> None:
        self.ca = new_ca()
        self.client_ca = new_ca()
        write_pair(tmp, new_serving_cert(self.ca, ["localhost"], ip_addresses=["127.0.0.1"]))
        self.tls = ReloadingTLS(tmp / "tls.crt", tmp / "tls.key")
        self.app = build_app(
            ClusterState.from_objects([clusterpolicy()]), Settings(), tls=self.tls, limits=ServerLimits()
        )
        self.cert = client_pair(self.client_ca, tmp, "apiserver") if client_auth else None
        if client_auth:
            protect(self.app, self.tls, self.client_ca.cert_pem.decode(), DEFAULT_ALLOWED_NAMES)
        self.port = self.health_port = 0
        self.stop = asyncio.Event()

    def context(self, *, certificate: bool = True) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cadata=self.ca.cert_pem.decode())
        if certificate and self.cert:
            ctx.load_cert_chain(*self.cert)
        return ctx

    def metric(self, name: str, **labels: str) -> float:
        return float(self.app[METRICS_KEY].registry.get_sample_value(name, labels) or 0.0)


@pytest.fixture(params=["no-client-auth", "client-auth"])
async def live(tmp_path: Path, request: pytest.FixtureRequest) -> AsyncIterator[Live]:
    srv = Live(tmp_path, request.param == "client-auth")
    loop = asyncio.get_running_loop()
    started: asyncio.Future[int] = loop.create_future()
    health: asyncio.Future[int] = loop.create_future()
    task = asyncio.create_task(
        serve(
            srv.app,
            srv.tls,
            host="127.0.0.1",
            port=0,
            stop=srv.stop,
            on_started=started.set_result,
            shutdown_timeout=2,
            health_port=0,
            on_health_started=health.set_result,
        )
    )
    srv.port = await asyncio.wait_for(started, 10)
    srv.health_port = await asyncio.wait_for(health, 10)
    yield srv
    srv.stop.set()
    await asyncio.wait_for(task, 20)


async def _legitimate_review(srv: Live) -> float:
    started = time.monotonic()
    reader, writer = await asyncio.open_connection("127.0.0.1", srv.port, ssl=srv.context())
    writer.write(head(len(BODY), keep_alive=False) + BODY)
    answer = await closed_by_server(reader, 10)
    writer.close()
    assert answer.startswith(b"HTTP/1.1 200") and b'"allowed":false' in answer, answer[:120]
    return time.monotonic() - started


async def _idle(srv: Live, tls: bool) -> asyncio.StreamWriter | None:
    # With client authentication an idle peer cannot finish a handshake: it says nothing at all.
    try:
        _, writer = await asyncio.open_connection(
            "127.0.0.1", srv.port, ssl=srv.context(certificate=False) if tls else None
        )
    except (ConnectionError, ssl.SSLError):
        return None  # displaced during its own handshake by a later one of the same peer
    return writer


async def test_idle_connections_do_not_lock_out_the_api_server(live: Live) -> None:
    """The issue's lock-out: 1,100 idle connections against the 1,000 cap, 69 reviews meanwhile."""
    tls = live.cert is None  # without client auth they complete the handshake and hold slots
    idle = []
    for i in range(0, IDLE, 100):
        idle += await asyncio.gather(*(_idle(live, tls) for _ in range(min(100, IDLE - i))))
    latencies = []
    for _ in range(69):
        latencies.append(await _legitimate_review(live))
    opened_for = time.monotonic()
    assert max(latencies) < 1.0, sorted(latencies)[-5:]
    evicted = live.metric("gpucluster_webhook_connections_closed_total", reason="evicted")
    refused = live.metric("gpucluster_webhook_connections_closed_total", reason="refused")
    timed_out = live.metric("gpucluster_webhook_connections_closed_total", reason="first-byte-timeout")
    assert refused == 0
    assert evicted + timed_out >= IDLE - 1000  # the cap held: the silent ones made room
    assert live.metric("gpucluster_webhook_open_connections") <= 1000
    # Silent connections go at the first-byte timeout, whatever made room meanwhile.
    async with asyncio.timeout(15):
        while live.metric("gpucluster_webhook_open_connections") > 0:
            await asyncio.sleep(0.05)
    assert time.monotonic() - opened_for < 15
    for writer in idle:
        if writer is not None:
            writer.close()
    # Probes never needed a client certificate.
    reader, writer = await asyncio.open_connection("127.0.0.1", live.health_port, ssl=live.context(certificate=False))
    writer.write(b"GET /readyz HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
    assert (await closed_by_server(reader, 5)).startswith(b"HTTP/1.1 200")
    writer.close()


async def test_one_peer_address_cannot_take_more_than_its_share(tmp_path: Path) -> None:
    """A peer address at its cap displaces only its own connections, never another address's."""
    ca = new_ca()
    write_pair(tmp_path, new_serving_cert(ca, ["localhost"], ip_addresses=["127.0.0.1"]))
    tls = ReloadingTLS(tmp_path / "tls.crt", tmp_path / "tls.key")
    limits = ServerLimits(max_connections=20, max_connections_per_peer=5)
    app = build_app(ClusterState.from_objects([clusterpolicy()]), Settings(), tls=tls, limits=limits)
    stop = asyncio.Event()
    started: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    task = asyncio.create_task(serve(app, tls, host="0.0.0.0", port=0, stop=stop, on_started=started.set_result))
    port = await asyncio.wait_for(started, 10)
    try:
        ctx = ssl.create_default_context(cadata=ca.cert_pem.decode())
        other = await asyncio.open_connection("127.0.0.1", port, ssl=ctx, local_addr=("127.0.0.2", 0))
        crowd = [
            await asyncio.open_connection("127.0.0.1", port, ssl=ctx, local_addr=("127.0.0.3", 0)) for _ in range(12)
        ]
        registry = app[METRICS_KEY].registry
        assert registry.get_sample_value("gpucluster_webhook_open_connections") == 6  # 5 of the crowd + other
        other[1].write(head(len(BODY), keep_alive=False) + BODY)
        answer = await closed_by_server(other[0], 5)  # never displaced by the crowd
        assert answer.startswith(b"HTTP/1.1 200")
        for _, writer in crowd:
            writer.close()
    finally:
        stop.set()
        await asyncio.wait_for(task, 20)
