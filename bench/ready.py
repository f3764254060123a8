"""Waiting for a process the bench started to say it is ready."""

from __future__ import annotations

import ssl
import time
import urllib.request


def wait_ready(url: str, timeout: float, context: ssl.SSLContext | None = None) -> None:
    """Poll ``url`` (a ``/readyz``) until it answers 200; RuntimeError after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=5, context=context) as response:
                if response.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.1)
    raise RuntimeError(f"{url} was not ready within {timeout:.0f} s")
