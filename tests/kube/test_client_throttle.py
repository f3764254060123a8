"""Client-side rate limiting, as client-go's rest.Config QPS and Burst: every request takes a
token; beyond the burst, requests wait for theirs; a negative QPS is no limit."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from gpucluster.errors import InputError
from gpucluster.kube.client import DEFAULT_BURST, DEFAULT_QPS, Kube, Throttle, rate_limit


class Response:
    status = 200

    async def read(self) -> bytes:
        return b'{"kind": "Node"}'


class Api:
    """What :class:`Kube` calls of the official client, answering at once."""

    def __init__(self) -> None:
        self.sent = 0

    async def param_serialize(self, method: str, path: str, **kwargs: Any) -> tuple[Any, ...]:
        return method, path, {}, None, None

    async def call_api(self, *args: Any, **kwargs: Any) -> Response:
        self.sent += 1
        return Response()


def test_client_go_meaning_of_the_settings() -> None:
    assert rate_limit(-1, 0) is None and rate_limit() is None
    default = rate_limit(0, 0)
    assert default is not None and (default.qps, default.burst) == (DEFAULT_QPS, DEFAULT_BURST) == (5.0, 10)
    set_ = rate_limit(200, 400)
    assert set_ is not None and (set_.qps, set_.burst) == (200, 400)
    with pytest.raises(InputError):
        rate_limit(10, -1)


async def test_requests_beyond_the_burst_wait_for_their_tokens() -> None:
    api = Api()
    kube = Kube(api, Throttle(qps=50, burst=2))  # type: ignore[arg-type]
    started = time.perf_counter()
    await asyncio.gather(*(kube.request("PATCH", f"/api/v1/nodes/n{i}", body={}) for i in range(6)))
    elapsed = time.perf_counter() - started
    assert api.sent == 6
    assert elapsed >= 4 / 50 * 0.9  # two at once, then one each 20 ms
    assert kube.throttle is not None and kube.throttle.waited > 0


async def test_no_limit_sends_at_once() -> None:
    api = Api()
    kube = Kube(api)  # type: ignore[arg-type]
    started = time.perf_counter()
    await asyncio.gather(*(kube.request("GET", "/api/v1/nodes") for _ in range(100)))
    assert api.sent == 100 and time.perf_counter() - started < 0.5
