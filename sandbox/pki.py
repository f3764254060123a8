"""The sandbox API server's CA and serving certificate, written to its state directory, and the
client certificate it presents to admission webhooks (CN ``kube-apiserver-webhook-client``, from a
CA of its own, ``webhook-client-ca.crt``), as kube-apiserver does with an AdmissionConfiguration
``kubeConfigFile``: a webhook started with ``--client-ca-file`` set to that CA can verify it."""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from pathlib import Path

from gpucluster.certs.authority import KeyPair, new_ca, new_client_cert, new_serving_cert

WEBHOOK_CLIENT_NAME = "kube-apiserver-webhook-client"


@dataclass(frozen=True)
class ServerPKI:
    ca: KeyPair
    serving: KeyPair
    ca_file: Path
    cert_file: Path
    key_file: Path
    webhook_client_ca_file: Path
    webhook_client_cert_file: Path
    webhook_client_key_file: Path

    def server_context(self) -> ssl.SSLContext:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        ctx.set_alpn_protocols(["http/1.1"])
        ctx.load_cert_chain(self.cert_file, self.key_file)
        return ctx

    def client_context(self) -> ssl.SSLContext:
        """A client context trusting only this CA (for in-process clients and tests)."""
        return ssl.create_default_context(cafile=str(self.ca_file))


def create(directory: Path, host: str) -> ServerPKI:
    ca = new_ca("gpucluster-sandbox-ca")
    names = [
        "localhost",
        "kubernetes",
        "kubernetes.default",
        "kubernetes.default.svc",
        "kubernetes.default.svc.cluster.local",
    ]
    ips = ["127.0.0.1", "::1"]
    if host not in ips and host not in ("0.0.0.0", "::", "localhost"):
        try:
            import ipaddress

            ipaddress.ip_address(host)
            ips.append(host)
        except ValueError:
            names.append(host)
    serving = new_serving_cert(ca, names, ip_addresses=ips)
    directory.mkdir(parents=True, exist_ok=True)
    ca_file, cert_file, key_file = directory / "ca.crt", directory / "apiserver.crt", directory / "apiserver.key"
    ca_file.write_bytes(ca.cert_pem)
    cert_file.write_bytes(serving.cert_pem)
    key_file.write_bytes(serving.key_pem)
    key_file.chmod(0o600)
    client_ca = new_ca("gpucluster-sandbox-webhook-client-ca")
    client = new_client_cert(client_ca, WEBHOOK_CLIENT_NAME)
    client_ca_file = directory / "webhook-client-ca.crt"
    client_cert, client_key = directory / "apiserver-webhook-client.crt", directory / "apiserver-webhook-client.key"
    client_ca_file.write_bytes(client_ca.cert_pem)
    client_cert.write_bytes(client.cert_pem)
    client_key.write_bytes(client.key_pem)
    client_key.chmod(0o600)
    return ServerPKI(ca, serving, ca_file, cert_file, key_file, client_ca_file, client_cert, client_key)
