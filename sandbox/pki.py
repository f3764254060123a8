"""The sandbox API server's CA and serving certificate, written to its state directory."""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from pathlib import Path

from certs.authority import KeyPair, new_ca, new_serving_cert


@dataclass(frozen=True)
class ServerPKI:
    ca: KeyPair
    serving: KeyPair
    ca_file: Path
    cert_file: Path
    key_file: Path

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
    return ServerPKI(ca, serving, ca_file, cert_file, key_file)
