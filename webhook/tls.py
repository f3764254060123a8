"""Serving TLS: TLS 1.2 with AEAD suites only or TLS 1.3, and a certificate pair reloaded from disk.

Each poll reads ``tls.crt`` and ``tls.key`` once, validates those bytes (they parse, the key is
the certificate's, the dates hold, the certificate names the Service) and, when they pass, builds
a fresh SSLContext from *the same bytes* (written to an anonymous memfd, never re-read from the
files, so a write between two reads cannot leave a certificate with another key). The listening
context hands each handshake to the live pair's context from its SNI callback, which OpenSSL calls
for every ClientHello (with or without SNI): a swap affects only handshakes that start afterwards,
so requests in flight are never dropped, and an RSA pair replacing an ECDSA one cannot leave the
old certificate behind in a second key slot.

A pair that is expired, not yet valid, expires within the margin, or is not for the Service's DNS
names never replaces a good live pair: an error names why and the live pair keeps serving. A live
pair that nears expiry is logged as an error (again hourly) and reported by
:meth:`ReloadingTLS.expiry_warning` and :meth:`ReloadingTLS.seconds_to_expiry` (a metric; the
webhook also sends an event and sets a GPUCluster condition, :mod:`gpucluster.webhook.expiry`), but it is
still served and the replica stays ready: a certificate that is still valid still works, and the
renewal (a third of the lifetime ahead) is what prevents expiry. Only a pair that clients would
refuse now (expired, not yet valid, not for the Service) is :meth:`ReloadingTLS.problem`, which
``/readyz`` fails on.

Two listening contexts share the live pair: :attr:`ReloadingTLS.context` for reviews, which with
client authentication on (:meth:`ReloadingTLS.require_client_certificates`) makes the handshake
fail without a certificate from the client CA, and :attr:`ReloadingTLS.health_context` for probes
and metrics, which asks for none (the kubelet presents none).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import hashlib
import logging
import math
import os
import ssl
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import serialization

log = logging.getLogger("gpucluster.webhook.tls")

# TLS 1.2 suites: forward-secret AEAD only (what Go's crypto/tls and kube-apiserver prefer); the
# CBC-mode suites OpenSSL enables by default are left out. TLS 1.3 suites are all AEAD already.
TLS12_CIPHERS = "ECDHE+AESGCM:ECDHE+CHACHA20"

DEFAULT_POLL_INTERVAL = 10.0  # controller-runtime's certwatcher polls every 10 s
DEFAULT_EXPIRY_MARGIN = 24 * 3600.0  # the rotator renews 30 days ahead: a day left means it failed
_REPEAT_ERROR_EVERY = 3600.0  # a standing problem is logged again hourly, not at every poll


def server_context() -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.set_ciphers(TLS12_CIPHERS)
    ctx.options |= ssl.OP_NO_RENEGOTIATION | ssl.OP_CIPHER_SERVER_PREFERENCE
    ctx.set_alpn_protocols(["http/1.1"])
    return ctx


class PairError(ValueError):
    """The bytes are not a usable certificate and key pair (cannot be served at all)."""


@dataclass(frozen=True)
class Pair:
    """A parsed, internally consistent pair: the exact bytes and what the leaf certificate says."""

    cert_pem: bytes
    key_pem: bytes
    not_before: dt.datetime
    not_after: dt.datetime
    dns_names: tuple[str, ...]
    serial: int


def parse_pair(cert_pem: bytes, key_pem: bytes) -> Pair:
    """Parse the chain and key and check the key is the leaf's; raises PairError naming the problem."""
    try:
        chain = x509.load_pem_x509_certificates(cert_pem)
    except ValueError as exc:
        raise PairError(f"certificate does not parse: {exc}") from None
    try:
        key = serialization.load_pem_private_key(key_pem, password=None)
    except (ValueError, TypeError) as exc:
        raise PairError(f"key does not parse: {exc}") from None
    leaf = chain[0]
    spki = serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    if leaf.public_key().public_bytes(*spki) != key.public_key().public_bytes(*spki):
        raise PairError("key does not match the certificate")
    try:
        san = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        names = tuple(san.get_values_for_type(x509.DNSName))
    except x509.ExtensionNotFound:
        names = ()
    return Pair(cert_pem, key_pem, leaf.not_valid_before_utc, leaf.not_valid_after_utc, names, leaf.serial_number)


def _covers(pattern: str, name: str) -> bool:
    """RFC 6125 matching: exact, or a wildcard standing for exactly one left-most label."""
    pattern, name = pattern.lower().rstrip("."), name.lower().rstrip(".")
    if pattern.startswith("*."):
        head, _, rest = name.partition(".")
        return bool(head) and rest == pattern[2:]
    return pattern == name


def pair_problems(pair: Pair, *, now: dt.datetime, required_names: Sequence[str], margin: float) -> list[str]:
    """Why ``pair`` must not be served (empty when it is good): dates, margin, names."""
    return [text for _, text in _graded_problems(pair, now=now, required_names=required_names, margin=margin)]


def _graded_problems(
    pair: Pair, *, now: dt.datetime, required_names: Sequence[str], margin: float
) -> list[tuple[int, str]]:
    """(severity, text): 2 for what makes clients refuse the pair now, 1 for nearing expiry."""
    problems = []
    if now < pair.not_before:
        problems.append((2, f"not valid before {pair.not_before.isoformat()}"))
    left = (pair.not_after - now).total_seconds()
    if left <= 0:
        problems.append((2, f"expired at {pair.not_after.isoformat()}"))
    elif left < margin:
        problems.append((1, f"expires at {pair.not_after.isoformat()}, in less than {margin:.0f}s"))
    missing = [n for n in required_names if not any(_covers(p, n) for p in pair.dns_names)]
    if missing:
        problems.append((2, f"not for {', '.join(missing)} (names {', '.join(pair.dns_names) or 'none'})"))
    return problems


def _severity(problems: list[tuple[int, str]]) -> int:
    return max((grade for grade, _ in problems), default=0)


def require_certificate(ctx: ssl.SSLContext, ca_pem: str) -> None:
    """Make handshakes on ``ctx`` fail unless the client presents a certificate ``ca_pem`` verifies."""
    ctx.verify_mode = ssl.CERT_REQUIRED
    ctx.load_verify_locations(cadata=ca_pem)


def context_from(pair: Pair, client_ca: str | None = None) -> ssl.SSLContext:
    """A serving context loaded from exactly ``pair``'s bytes (an anonymous memfd; a 0700 temp dir elsewhere)."""
    ctx = server_context()
    if client_ca:
        require_certificate(ctx, client_ca)
    memfd = getattr(os, "memfd_create", None)
    if memfd is not None and os.path.isdir("/proc/self/fd"):
        fds = [memfd("gpucluster-tls-crt", os.MFD_CLOEXEC), memfd("gpucluster-tls-key", os.MFD_CLOEXEC)]
        try:
            for fd, data in zip(fds, (pair.cert_pem, pair.key_pem), strict=True):
                os.write(fd, data)
            ctx.load_cert_chain(f"/proc/self/fd/{fds[0]}", f"/proc/self/fd/{fds[1]}")
        finally:
            for fd in fds:
                os.close(fd)
        return ctx
    with tempfile.TemporaryDirectory(prefix="gpucluster-tls-") as scratch:  # mkdtemp: mode 0700
        for name, data in (("tls.crt", pair.cert_pem), ("tls.key", pair.key_pem)):
            fd = os.open(os.path.join(scratch, name), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            try:
                os.write(fd, data)
            finally:
                os.close(fd)
        ctx.load_cert_chain(os.path.join(scratch, "tls.crt"), os.path.join(scratch, "tls.key"))
    return ctx


def _utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


class ReloadingTLS:
    """Serves the pair at ``cert_file``/``key_file``; reloads it when the bytes change and the new pair is good.

    ``required_names`` are DNS names the certificate must cover (``<service>.<namespace>.svc``;
    empty: not checked); ``expiry_margin`` seconds before ``notAfter`` the live pair counts as
    nearly expired; ``poll_interval`` is how often :meth:`watch` looks at the files.
    """

    def __init__(
        self,
        cert_file: Path,
        key_file: Path,
        *,
        poll_interval: float = DEFAULT_POLL_INTERVAL,
        required_names: Sequence[str] = (),
        expiry_margin: float = DEFAULT_EXPIRY_MARGIN,
        clock: Callable[[], dt.datetime] = _utcnow,
    ) -> None:
        self.cert_file = cert_file
        self.key_file = key_file
        self.poll_interval = poll_interval
        self.required_names = tuple(required_names)
        self.expiry_margin = expiry_margin
        self.clock = clock
        self.context = server_context()  # the listening context: hands each handshake to the live one
        self.context.sni_callback = self._select
        self.health_context = server_context()  # the same pair, never a client certificate
        self.health_context.sni_callback = self._select_health
        self.live: Pair | None = None
        self.reloads = 0
        self.client_ca: str | None = None
        self._live_context: ssl.SSLContext | None = None
        self._live_auth_context: ssl.SSLContext | None = None
        self._digest = b""
        self._last_refusal: tuple[bytes, str] | None = None
        self._last_report: tuple[str, float] = ("", 0.0)

    @property
    def loaded(self) -> bool:
        return self.live is not None

    def _select(self, sslobj: ssl.SSLObject, server_name: str | None, ctx: ssl.SSLContext) -> None:
        live = self._live_auth_context if self.client_ca else self._live_context
        if live is not None:
            sslobj.context = live

    def _select_health(self, sslobj: ssl.SSLObject, server_name: str | None, ctx: ssl.SSLContext) -> None:
        live = self._live_context
        if live is not None:
            sslobj.context = live

    def require_client_certificates(self, ca_pem: str) -> None:
        """From now on a handshake on :attr:`context` needs a client certificate ``ca_pem`` verifies.

        OpenSSL copies the verify mode from the listening context when a connection starts and
        verifies against the store of the context the SNI callback switched to: both get the CA.
        """
        require_certificate(self.context, ca_pem)
        self.client_ca = ca_pem
        if self.live is not None:
            self._live_auth_context = context_from(self.live, ca_pem)

    def _graded_now(self) -> list[tuple[int, str]]:
        if self.live is None:
            return []
        return self._graded(self.live)

    def problems(self) -> list[str]:
        """Everything wrong with the live pair now, near expiry included (empty when it is good or none is loaded)."""
        return [text for _, text in self._graded_now()]

    def problem(self) -> str | None:
        """Why this replica cannot serve a certificate clients accept (one line for /readyz), or None.

        A certificate that merely nears expiry is no problem here: it still works (see :meth:`expiry_warning`).
        """
        if self.live is None:
            return "tls material not loaded"
        fatal = [text for grade, text in self._graded_now() if grade >= 2]
        return f"serving certificate {'; '.join(fatal)}" if fatal else None

    def expiry_warning(self) -> str | None:
        """The live certificate expires within the margin (still valid): one line, or None."""
        near = [text for grade, text in self._graded_now() if grade == 1]
        return f"serving certificate {'; '.join(near)}" if near else None

    def seconds_to_expiry(self) -> float:
        """Seconds until the live certificate's notAfter (negative once expired; NaN with none loaded)."""
        if self.live is None:
            return math.nan
        return (self.live.not_after - self.clock()).total_seconds()

    def _read(self) -> tuple[bytes, bytes] | None:
        try:
            return self.cert_file.read_bytes(), self.key_file.read_bytes()
        except OSError as exc:
            log.warning("tls material unreadable cert=%s error=%s", self.cert_file, exc)
            return None

    def _refuse(self, digest: bytes, why: str) -> None:
        if self._last_refusal != (digest, why):  # once per pair and reason, not at every poll
            log.error("tls material not loaded, keeping the live pair cert=%s reason=%s", self.cert_file, why)
            self._last_refusal = (digest, why)

    def reload_if_changed(self) -> bool:
        """Load the pair on disk if its bytes changed and it may replace the live one; True when loaded."""
        files = self._read()
        if files is None:
            return False
        digest = hashlib.sha256(files[0] + b"\0" + files[1]).digest()
        if digest == self._digest:
            return False
        try:
            pair = parse_pair(*files)
            graded = self._graded(pair)
            if self.live is not None and not self._better(pair, graded):
                self._refuse(digest, "; ".join(text for _, text in graded))
                return False
            context = context_from(pair)
            auth_context = context_from(pair, self.client_ca) if self.client_ca else None
        except (PairError, ssl.SSLError, OSError) as exc:
            self._refuse(digest, str(exc))
            return False
        first = self.live is None
        self._live_context, self._live_auth_context, self.live, self._digest = context, auth_context, pair, digest
        self._last_refusal = None
        problems = "; ".join(text for _, text in graded)
        if not first:
            self.reloads += 1
        if problems:  # the best there is (first load, or the live pair is worse): serve it, loudly
            log.error("tls material loaded with problems cert=%s problems=%s", self.cert_file, problems)
        elif not first:
            log.info(
                "tls material reloaded cert=%s serial=%x not_after=%s", self.cert_file, pair.serial, pair.not_after
            )
        self._last_report = (problems, time.monotonic())
        return True

    def _graded(self, pair: Pair) -> list[tuple[int, str]]:
        return _graded_problems(pair, now=self.clock(), required_names=self.required_names, margin=self.expiry_margin)

    def _better(self, new: Pair, graded: list[tuple[int, str]]) -> bool:
        """May ``new`` replace the live pair? A good pair always may; a bad one only over a worse one."""
        assert self.live is not None
        new_grade, live_grade = _severity(graded), _severity(self._graded(self.live))
        if new_grade == 0 or new_grade < live_grade:
            return True
        # both merely near expiry: the one that lasts longer
        return new_grade == live_grade == 1 and new.not_after > self.live.not_after

    def check_live(self) -> None:
        """Log an error when the live pair turns bad (nears expiry, expires), again hourly while it stays bad."""
        now = time.monotonic()
        current = "; ".join(self.problems())
        last, when = self._last_report
        if current and (current != last or now - when >= _REPEAT_ERROR_EVERY):
            log.error("serving certificate problem cert=%s problem=%s", self.cert_file, current)
            self._last_report = (current, now)
        elif not current and last:
            log.info("serving certificate good again cert=%s", self.cert_file)
            self._last_report = ("", now)

    async def watch(self) -> None:
        """Poll until cancelled (a Secret volume update swaps a symlink: poll the bytes, not inotify)."""
        while True:
            await asyncio.sleep(self.poll_interval)
            self.reload_if_changed()
            self.check_live()
