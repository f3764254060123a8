"""Optional caller authentication against the live server: reviews need a client certificate from the CA."""

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

from certs.authority import KeyPair, new_ca, new_serving_cert
from gpucluster.clusterstate import ClusterState
from gpucluster.policy import Settings
from tests.webhook.pods import container, pod
from tests.webhook.reviews import review
from webhook.clientauth import ClientAuthError, load_ca_bundle, protect
from webhook.server import build_app, serve
from webhook.tls import ReloadingTLS


def client_pair(ca: KeyPair, tmp: Path, name: str) -> tuple[Path, Path]:
    ca_cert = x509.load_pem_x509_certificate(ca.cert_pem)
    ca_key = serialization.load_pem_private_key(ca.key_pem, None)
    assert isinstance(ca_key, ec.EllipticCurvePrivateKey)
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kube-apiserver")]))
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

    def write_pair(self) -> None:
        pair = new_serving_cert(self.serving_ca, ["localhost"], ip_addresses=["127.0.0.1"])
        (self.tmp / "tls.crt").write_bytes(pair.cert_pem)
        (self.tmp / "tls.key").write_bytes(pair.key_pem)

    async def post(self, path: str, cert: tuple[Path, Path] | None) -> int:
        ctx = ssl.create_default_context(cadata=self.serving_ca.cert_pem.decode())
        if cert:
            ctx.load_cert_chain(*cert)
        reader, writer = await asyncio.open_connection("127.0.0.1", self.port, ssl=ctx, server_hostname="localhost")
        body = json.dumps(review(pod(container("cuda", {"nvidia.com/gpu": "1"})), namespace="ml")).encode()
        method = "POST" if path != "/readyz" else "GET"
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


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[Server]:
    srv = Server(tmp_path)
    app = build_app(ClusterState.from_objects([]), Settings(), tls=srv.tls)
    protect(app, srv.tls, load_ca_bundle(tmp_path / "client-ca.crt"))
    started: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    stop = asyncio.Event()
    task = asyncio.create_task(
        serve(app, srv.tls, host="127.0.0.1", port=0, stop=stop, shutdown_timeout=1, on_started=started.set_result)
    )
    srv.port = await asyncio.wait_for(started, 10)
    try:
        yield srv
    finally:
        stop.set()
        await asyncio.wait_for(task, 10)


async def test_reviews_need_a_certificate_from_the_ca(server: Server) -> None:
    good = client_pair(server.client_ca, server.tmp, "good")
    assert await server.post("/mutate", good) == 200
    assert await server.post("/mutate", None) == 401
    assert await server.post("/validate", None) == 401
    assert await server.post("/readyz", None) == 200  # the kubelet's probes present no certificate


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
    assert await server.post("/mutate", None) == 401


def test_unusable_bundles_are_refused(tmp_path: Path) -> None:
    (tmp_path / "empty.pem").write_text("")
    (tmp_path / "junk.pem").write_text("-----BEGIN CERTIFICATE-----\nnope\n-----END CERTIFICATE-----\n")
    for name in ("empty.pem", "junk.pem", "missing.pem"):
        with pytest.raises(ClientAuthError):
            load_ca_bundle(tmp_path / name)
