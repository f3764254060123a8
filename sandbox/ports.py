"""Loopback ports for the processes the sandbox, the tests and the benchmarks start."""

from __future__ import annotations

import random
import socket
from pathlib import Path

__all__ = ["free_port"]


def _ephemeral_range() -> tuple[int, int]:
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32768, 60999  # Linux's default


def free_port() -> int:
    """A loopback port free now, chosen below the kernel's ephemeral range when there is room.

    A port the kernel hands out for ``bind(0)`` is one it may also hand to any outgoing
    connection before the component we start binds it; below the range only another
    listener can take it, and ``ControlPlane.up`` retries that rare case.
    """
    low, _ = _ephemeral_range()
    floor = 20000
    if low - floor >= 1000:
        for _ in range(64):
            port = random.randrange(floor, low)
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                try:
                    s.bind(("127.0.0.1", port))
                except OSError:
                    continue
                return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
