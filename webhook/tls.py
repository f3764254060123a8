"""Serving TLS: TLS 1.2+ only, certificate and key reloaded from disk when they change.

The same SSLContext stays bound to the listening socket; loading a new chain into it affects
only handshakes that start afterwards, so requests in flight are never dropped. A pair that does
not load (a half-written Secret update, a key that does not match) is ignored until it does.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import ssl
from pathlib import Path

log = logging.getLogger("gpucluster.webhook.tls")


def server_context() -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.set_alpn_protocols(["http/1.1"])
    return ctx


class ReloadingTLS:
    """An SSLContext serving the pair at ``cert_file``/``key_file``, reloaded when their bytes change."""

    def __init__(self, cert_file: Path, key_file: Path, *, poll_interval: float = 10.0) -> None:
        self.cert_file = cert_file
        self.key_file = key_file
        self.poll_interval = poll_interval
        self.context = server_context()
        self.loaded = False
        self.reloads = 0
        self._digest = b""

    def _read(self) -> tuple[bytes, bytes] | None:
        try:
            return self.cert_file.read_bytes(), self.key_file.read_bytes()
        except OSError as exc:
            log.warning("tls material unreadable cert=%s error=%s", self.cert_file, exc)
            return None

    def reload_if_changed(self) -> bool:
        """Load the pair if its bytes changed and it is valid; True when a new pair was loaded."""
        pair = self._read()
        if pair is None:
            return False
        digest = hashlib.sha256(pair[0] + b"\0" + pair[1]).digest()
        if digest == self._digest:
            return False
        try:
            server_context().load_cert_chain(self.cert_file, self.key_file)  # check before swapping
            self.context.load_cert_chain(self.cert_file, self.key_file)
        except (ssl.SSLError, OSError, ValueError) as exc:
            log.error("tls material invalid, keeping the previous pair cert=%s error=%s", self.cert_file, exc)
            return False
        self._digest = digest
        if self.loaded:
            self.reloads += 1
            log.info("tls material reloaded cert=%s", self.cert_file)
        self.loaded = True
        return True

    async def watch(self) -> None:
        """Poll for changes until cancelled (Secret volume updates swap a symlink, so poll the bytes)."""
        while True:
            await asyncio.sleep(self.poll_interval)
            self.reload_if_changed()
