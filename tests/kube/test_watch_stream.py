"""Kube.watch splits the stream into events itself: whatever chunks the bytes arrive in, it yields
every complete event once, in order, and leaves an event the stream's end cut off."""

from __future__ import annotations

import asyncio
import itertools
import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from gpucluster.kube.client import Kube

EVENTS = [
    {"type": "ADDED", "object": {"metadata": {"name": "a"}}},
    {"type": "MODIFIED", "object": {"metadata": {"name": "b", "labels": {"x": "y" * 300}}}},
    {"type": "DELETED", "object": {"metadata": {"name": "c"}}},
    {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "7"}}},
]


class _Content:
    def __init__(self, chunks: list[bytes]) -> None:
        self.chunks = chunks

    async def readany(self) -> bytes:
        await asyncio.sleep(0)
        return self.chunks.pop(0) if self.chunks else b""


class _Response:
    def __init__(self, chunks: list[bytes]) -> None:
        self.content = _Content(chunks)
        self.connection = None
        self.released = False

    def release(self) -> None:
        self.released = True


class _Resp:
    status = 200

    def __init__(self, chunks: list[bytes]) -> None:
        self.response = _Response(chunks)


def chunked(stream: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(stream) + 1) for c in cuts} | {0, len(stream)})
    return [stream[a:b] for a, b in itertools.pairwise(points) if b > a]


async def events_of(chunks: list[bytes]) -> tuple[list[Any], bool]:
    resp = _Resp(chunks)
    kube = Kube(api=None)  # type: ignore[arg-type]

    async def send(*args: Any, **kwargs: Any) -> _Resp:
        return resp

    kube._send = send  # type: ignore[method-assign]
    out = [event async for event in kube.watch("/api/v1/nodes", [])]
    return out, resp.response.released


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.integers(min_value=0, max_value=10_000), max_size=12),
    st.lists(st.sampled_from([b"\n", b" \n", b"\r\n"]), max_size=3),
    st.booleans(),
)
def test_any_chunking_yields_every_complete_event_once_in_order(
    cuts: list[int], blanks: list[bytes], cut_off: bool
) -> None:
    lines = [json.dumps(e).encode() + b"\n" for e in EVENTS]
    stream = b"".join(lines[:2]) + b"".join(blanks) + b"".join(lines[2:])
    if cut_off:
        stream += b'{"type": "ADDED", "object": {"metad'  # the stream ended inside an event
    out, released = asyncio.run(events_of(chunked(stream, cuts)))
    assert out == EVENTS and released
