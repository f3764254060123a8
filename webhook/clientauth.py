"""Optional caller authentication: reviews only from clients with a certificate from a given CA.

kube-apiserver presents a client certificate to a webhook only when its AdmissionConfiguration
names a ``kubeConfigFile`` whose entry for the webhook's Service carries one; otherwise it
presents nothing, so this is off unless a CA is configured (``--client-ca-file``).

The handshake asks for a certificate and verifies any that is offered against the CA
(``CERT_OPTIONAL``: an untrusted certificate fails the handshake); ``/validate`` and ``/mutate``
then answer 401 to a connection that offered none. ``/healthz``, ``/readyz`` and ``/metrics`` stay
open, because the kubelet's HTTPS probes present no certificate.

The serving context hands each handshake to the live certificate pair's context (see
``webhook.tls``), and OpenSSL verifies the peer against the store of the context the handshake
ends up on: every live context gets the CA too, the first time it serves a handshake.
"""

from __future__ import annotations

import logging
import ssl
from collections.abc import Awaitable, Callable
from pathlib import Path

from aiohttp import web

from webhook.tls import ReloadingTLS

log = logging.getLogger("gpucluster.webhook")

PROTECTED_PATHS = ("/validate", "/mutate")
_MARK = "_gpucluster_client_ca"


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


def _trust(ctx: ssl.SSLContext, ca_pem: str) -> None:
    if getattr(ctx, _MARK, None) == ca_pem:
        return
    ctx.verify_mode = ssl.CERT_OPTIONAL
    ctx.load_verify_locations(cadata=ca_pem)
    setattr(ctx, _MARK, ca_pem)


def require_client_certificates(app: web.Application, tls: ReloadingTLS, ca_pem: str) -> None:
    """Verify client certificates against ``ca_pem`` and refuse reviews from clients without one.

    Call before the app is served (the middleware list freezes when the server starts).
    """
    listening = tls.context
    _trust(listening, ca_pem)
    select = listening.sni_callback

    def select_and_trust(sslobj: ssl.SSLObject, server_name: str, ctx: ssl.SSLContext) -> int | None:
        result = select(sslobj, server_name, ctx) if select is not None else None
        _trust(sslobj.context, ca_pem)  # the live pair's context verifies the peer
        return result

    listening.sni_callback = select_and_trust
    app.middlewares.append(_require_certificate)
    log.info("webhook client authentication on: reviews need a client certificate from the configured CA")


def protect(app: web.Application, tls: ReloadingTLS, ca_pem: str | None) -> None:
    """:func:`require_client_certificates` when a CA is configured; nothing otherwise."""
    if ca_pem:
        require_client_certificates(app, tls, ca_pem)


@web.middleware
async def _require_certificate(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    if request.path in PROTECTED_PATHS:
        transport = request.transport
        peer = transport.get_extra_info("peercert") if transport is not None else None
        if not peer:
            return web.Response(status=401, text="a client certificate from the configured CA is required\n")
    return await handler(request)
