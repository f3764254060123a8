"""Optional caller authentication against the live server: reviews need an allowed client certificate
from the CA at the handshake; probes and metrics are served without one on the health port."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import ssl
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from gpucluster.certs.authority import KeyPair, new_ca, new_serving_cert
from gpucluster.clusterstate import ClusterState
from gpucluster.policy import Settings
from gpucluster.webhook.clientauth import (
    DEFAULT_ALLOWED_NAMES,
    ClientAuthError,
    load_ca_bundle,
    parse_allowed_names,
    protect,
)
from gpucluster.webhook.server import build_app, serve
from gpucluster.webhook.tls import ReloadingTLS
from tests.webhook.pods import container, pod
from tests.webhook.reviews import review


def client_pair(ca: KeyPair, tmp: Path, name: str, cn: str = DEFAULT_ALLOWED_NAMES[0]) -> tuple[Path, Path]:
    ca_cert = x509.load_pem_x509_certificate(ca.cert_pem)
    ca_key = serialization.load_pem_private_key(ca.key_pem, None)
    assert isinstance(ca_key, ec.EllipticCurvePrivateKey)
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    crt, pem = tmp / f"{name}.crt", tmp / f"{name}.key"
    crt.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    pem.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return crt, pem


class Server:
    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.serving_ca = new_ca()
        self.client_ca = new_ca()
        self.write_pair()
        self.tls = ReloadingTLS(tmp / "tls.crt", tmp / "tls.key")
        self.tls.reload_if_changed()
        (tmp / "client-ca.crt").write_bytes(self.client_ca.cert_pem)
        self.port = 0
        self.health_port = 0

    def write_pair(self) -> None:
        pair = new_serving_cert(self.serving_ca, ["localhost"], ip_addresses=["127.0.0.1"])
        (self.tmp / "tls.crt").write_bytes(pair.cert_pem)
        (self.tmp / "tls.key").write_bytes(pair.key_pem)

    async def post(self, path: str, cert: tuple[Path, Path] | None, *, health: bool = False) -> int:
        ctx = ssl.create_default_context(cadata=self.serving_ca.cert_pem.decode())
        if cert:
            ctx.load_cert_chain(*cert)
        port = self.health_port if health else self.port
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=ctx, server_hostname="localhost")
        except (ssl.SSLError, ConnectionError):
            return 0  # TLS 1.2 and some TLS 1.3 timings: the handshake itself fails
        body = json.dumps(review(pod(container("cuda", {"nvidia.com/gpu": "1"})), namespace="ml")).encode()
        method = "POST" if path not in ("/readyz", "/metrics") else "GET"
        writer.write(
            f"{method} {path} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body) if method == 'POST' else 0}\r\nConnection: close\r\n\r\n".encode()
            + (body if method == "POST" else b"")
        )
        await writer.drain()
        try:
            status = await reader.readline()
        except (ssl.SSLError, ConnectionError):
            status = b""  # TLS 1.3 reports a refused client certificate after the handshake
        writer.close()
        return int(status.split()[1]) if status else 0  # 0: the server dropped the connection


@pytest.fixture(params=["default"])
async def server(tmp_path: Path, request: pytest.FixtureRequest) -> AsyncIterator[Server]:
    srv = Server(tmp_path)
    app = build_app(ClusterState.from_objects([]), Settings(), tls=srv.tls)
    allowed = DEFAULT_ALLOWED_NAMES if request.param == "default" else parse_allowed_names(request.param)
    protect(app, srv.tls, load_ca_bundle(tmp_path / "client-ca.crt"), allowed)
    loop = asyncio.get_running_loop()
    started: asyncio.Future[int] = loop.create_future()
    health: asyncio.Future[int] = loop.create_future()
    stop = asyncio.Event()
    task = asyncio.create_task(
        serve(
            app,
            srv.tls,
            host="127.0.0.1",
            port=0,
            stop=stop,
            shutdown_timeout=1,
            on_started=started.set_result,
            health_port=0,
            on_health_started=health.set_result,
        )
    )
    srv.port = await asyncio.wait_for(started, 10)
    srv.health_port = await asyncio.wait_for(health, 10)
    try:
        yield srv
    finally:
        stop.set()
        await asyncio.wait_for(task, 10)


async def test_reviews_need_a_certificate_from_the_ca(server: Server) -> None:
    good = client_pair(server.client_ca, server.tmp, "good")
    assert await server.post("/mutate", good) == 200
    # Without a certificate the handshake fails: the connection never holds a slot.
    assert await server.post("/mutate", None) == 0
    assert await server.post("/validate", None) == 0
    assert await server.post("/readyz", None) == 0
    # The health port: probes and metrics without a certificate, never a review.
    assert await server.post("/readyz", None, health=True) == 200
    assert await server.post("/metrics", None, health=True) == 200
    assert await server.post("/mutate", None, health=True) == 404
    assert await server.post("/mutate", good, health=True) == 404


async def test_a_certificate_of_another_name_from_the_ca_is_refused(server: Server) -> None:
    for cn in ("system:node:node-1", "kubernetes-admin", "kube-apiserver"):
        foreign = client_pair(server.client_ca, server.tmp, cn.replace(":", "-"), cn=cn)
        assert await server.post("/mutate", foreign) == 403, cn
        assert await server.post("/validate", foreign) == 403, cn


@pytest.mark.parametrize("server", ["", "system:node:node-1,other"], indirect=True)
async def test_allowed_names_can_be_any_or_a_list(server: Server) -> None:
    node = client_pair(server.client_ca, server.tmp, "node", cn="system:node:node-1")
    assert await server.post("/mutate", node) == 200


async def test_a_certificate_from_another_ca_fails_the_handshake(server: Server) -> None:
    stranger = client_pair(new_ca(), server.tmp, "stranger")
    try:
        status = await server.post("/mutate", stranger)
    except (ssl.SSLError, ConnectionError):
        status = 0  # TLS 1.2: the handshake itself fails
    assert status == 0


async def test_verification_survives_a_serving_certificate_reload(server: Server) -> None:
    good = client_pair(server.client_ca, server.tmp, "good")
    server.write_pair()
    assert server.tls.reload_if_changed()
    assert await server.post("/mutate", good) == 200
    assert await server.post("/mutate", None) == 0


def test_unusable_bundles_are_refused(tmp_path: Path) -> None:
    (tmp_path / "empty.pem").write_text("")
    (tmp_path / "junk.pem").write_text("-----BEGIN CERTIFICATE-----\nnope\n-----END CERTIFICATE-----\n")
    for name in ("empty.pem", "junk.pem", "missing.pem"):
        with pytest.raises(ClientAuthError):
            load_ca_bundle(tmp_path / name)


def test_webhook_flags_for_client_auth_and_connections_are_checked(tmp_path: Path) -> None:
    import argparse

    from gpucluster.cli import webhook as command
    from gpucluster.errors import InputError

    def run(*argv: str) -> None:
        parser = argparse.ArgumentParser(prog="gpucluster")
        command.register(parser.add_subparsers(dest="command", required=True))
        command.run(parser.parse_args(["webhook", "--self-signed", "--cluster", str(cluster), *argv]))

    cluster = tmp_path / "cluster.yaml"
    cluster.write_text("apiVersion: v1\nkind: List\nitems: []\n")
    (tmp_path / "ca.crt").write_bytes(new_ca().cert_pem)
    with pytest.raises(InputError, match="--client-ca-file needs --health-port: kubelet probes present no client"):
        run("--client-ca-file", str(tmp_path / "ca.crt"))
    with pytest.raises(InputError, match="--health-port 9443: must be between 1 and 65535 and not --port"):
        run("--health-port", "9443")
    with pytest.raises(InputError, match="--max-connections-per-peer 0: must be at least 1"):
        run("--max-connections-per-peer", "0")
    with pytest.raises(InputError, match="--feasibility-processes 0: must be at least 1"):
        run("--feasibility-processes", "0")
    assert parse_allowed_names(" a, b ,,a") == ("a", "b") and parse_allowed_names("") == ()
