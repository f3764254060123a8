"""Optional caller authentication: reviews only from clients with an allowed certificate from a given CA.

kube-apiserver presents a client certificate to a webhook only when its AdmissionConfiguration
names a ``kubeConfigFile`` whose entry for the webhook's Service carries one; otherwise it
presents nothing, so this is off unless a CA is configured (``--client-ca-file``).

With it on, the review port's handshake *requires* a certificate the CA verifies
(``CERT_REQUIRED``): a peer without one never completes the handshake, so it never holds a
connection slot past the short first-byte timeout. The probes and ``/metrics`` are served without
client authentication on the health port (``--health-port``), because the kubelet's HTTPS probes
present no certificate.

Like kube-apiserver's ``--requestheader-allowed-names``, a verified certificate is not enough:
its subject common name must be one of ``allowed_names`` (``--client-allowed-names``); an empty
list allows any certificate the CA verifies. With a cluster CA as the client CA every kubelet and
every user certificate it signed would otherwise pass: ``/validate`` and ``/mutate`` answer them
403 naming the common name. A CA of its own for the webhook's callers is better still.
"""

from __future__ import annotations

import logging
import ssl
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

from aiohttp import web

from gpucluster.webhook.tls import ReloadingTLS

log = logging.getLogger("gpucluster.webhook")

PROTECTED_PATHS = ("/validate", "/mutate")
# The name the sandbox's and the real control plane's API servers present, and the default:
# a certificate made for calling this webhook, not one any other component holds.
DEFAULT_ALLOWED_NAMES = ("kube-apiserver-webhook-client",)
ALLOWED_NAMES_KEY: web.AppKey[frozenset[str]] = web.AppKey("client-allowed-names", frozenset)


class ClientAuthError(ValueError):
    """The CA bundle cannot be used (unreadable, or no certificate in it)."""


def load_ca_bundle(path: Path) -> str:
    """The PEM text of ``path``, checked to hold at least one certificate OpenSSL accepts."""
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise ClientAuthError(f"{path}: cannot read the client CA bundle: {exc}") from None
    probe = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        probe.load_verify_locations(cadata=text)
    except (ssl.SSLError, ValueError) as exc:
        raise ClientAuthError(f"{path}: not a PEM CA bundle: {exc}") from None
    if not probe.get_ca_certs():
        raise ClientAuthError(f"{path}: holds no CA certificate")
    return text


def parse_allowed_names(text: str) -> tuple[str, ...]:
    """``--client-allowed-names``: comma-separated common names; '' allows any verified certificate."""
    return tuple(dict.fromkeys(n.strip() for n in text.split(",") if n.strip()))


def common_name(peercert: dict[str, Any] | None) -> str | None:
    """The (last) commonName of a certificate as ``SSLSocket.getpeercert()`` returns it."""
    name = None
    for rdn in (peercert or {}).get("subject", ()):
        for key, value in rdn:
            if key == "commonName":
                name = str(value)
    return name


def refusal(peercert: dict[str, Any] | None, allowed: frozenset[str]) -> tuple[int, str] | None:
    """(status, text) for a review caller that must be refused, or None (pure)."""
    if not peercert:
        return 401, "a client certificate from the configured CA is required\n"
    if not allowed:
        return None
    cn = common_name(peercert)
    if cn in allowed:
        return None
    return 403, (
        f"client certificate CN={cn or '(none)'} is not allowed to call this webhook "
        f"(allowed: {', '.join(sorted(allowed))})\n"
    )


def require_client_certificates(
    app: web.Application, tls: ReloadingTLS, ca_pem: str, allowed_names: Sequence[str] = DEFAULT_ALLOWED_NAMES
) -> None:
    """Require client certificates from ``ca_pem`` at the handshake, and one of ``allowed_names`` for reviews.

    Call before the app is served (the middleware list freezes when the server starts).
    """
    tls.require_client_certificates(ca_pem)
    app[ALLOWED_NAMES_KEY] = frozenset(allowed_names)
    app.middlewares.append(_require_certificate)
    log.info(
        "webhook client authentication on: reviews need a client certificate from the configured CA allowed_names=%s",
        ",".join(sorted(allowed_names)) or "(any)",
    )


def protect(
    app: web.Application, tls: ReloadingTLS, ca_pem: str | None, allowed_names: Sequence[str] = DEFAULT_ALLOWED_NAMES
) -> None:
    """:func:`require_client_certificates` when a CA is configured; nothing otherwise."""
    if ca_pem:
        require_client_certificates(app, tls, ca_pem, allowed_names)


@web.middleware
async def _require_certificate(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    if request.path in PROTECTED_PATHS:
        transport = request.transport
        peer = transport.get_extra_info("peercert") if transport is not None else None
        refused = refusal(peer, request.app[ALLOWED_NAMES_KEY])
        if refused is not None:
            status, text = refused
            from gpucluster.webhook.server import METRICS_KEY  # the server imports nothing of this module

            request.app[METRICS_KEY].rejected.labels(request.path.strip("/"), str(status)).inc()
            log.debug("review refused peer=%s status=%d %s", request.remote, status, text.strip())
            return web.Response(status=status, text=text)
    return await handler(request)
