"""Kube.watch against the sandbox's HTTP watch stream: every event, whatever its size and however
the stream's chunks cut the lines."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from gpucluster.kube.client import Kube
from gpucluster.sandbox.server import Sandbox

CONFIGMAPS = "/api/v1/namespaces/default/configmaps"


def configmap(name: str, size: int) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"blob": "x" * size}}


async def test_events_larger_than_aiohttps_line_limit_and_bursts_of_small_ones_all_arrive(sandbox: Sandbox) -> None:
    # Events of hundreds of KiB arrive in many chunks; small ones several to a chunk.
    kube = await Kube.connect(str(sandbox.kubeconfig_path))
    try:
        listed = await kube.get(CONFIGMAPS)
        sizes = {"small-0": 10, "big": 300 * 1024, **{f"small-{i}": 10 for i in range(1, 40)}, "bigger": 900 * 1024}
        seen: list[tuple[str, str, int]] = []

        async def watch() -> None:
            query = [("resourceVersion", listed["metadata"]["resourceVersion"])]
            async for event in kube.watch(CONFIGMAPS, query, timeout=30):
                obj = event["object"]
                seen.append((event["type"], obj["metadata"]["name"], len(obj["data"]["blob"])))
                if len(seen) == len(sizes):
                    return

        watcher = asyncio.create_task(watch())
        for name, size in sizes.items():
            await kube.request("POST", CONFIGMAPS, body=configmap(name, size))
        async with asyncio.timeout(20):
            await watcher
        assert seen == [("ADDED", name, size) for name, size in sizes.items()]
    finally:
        await kube.close()


async def test_an_event_beyond_the_bound_ends_the_watch_with_a_clear_error(sandbox: Sandbox, monkeypatch: Any) -> None:
    import gpucluster.kube.client as client

    monkeypatch.setattr(client, "MAX_WATCH_EVENT_BYTES", 100 * 1024)
    kube = await Kube.connect(str(sandbox.kubeconfig_path))
    try:
        listed = await kube.get(CONFIGMAPS)
        await kube.request("POST", CONFIGMAPS, body=configmap("huge", 300 * 1024))
        query = [("resourceVersion", listed["metadata"]["resourceVersion"])]
        with pytest.raises(
            ValueError, match=r"watch /api/v1/namespaces/default/configmaps: an event of more than 102400"
        ):
            async with asyncio.timeout(20):
                async for _ in kube.watch(CONFIGMAPS, query, timeout=30):
                    pass
    finally:
        await kube.close()


async def test_a_batched_watch_takes_what_arrived_while_it_paused_in_one_read(
    sandbox: Sandbox, monkeypatch: Any
) -> None:
    import gpucluster.kube.client as client

    # The connection itself is left unread during the pause (not only the events left unparsed).
    reading: list[bool] = []
    pause = client._pause_reading

    async def watched_pause(response: Any, seconds: float) -> None:
        transport = response.connection.transport
        paused = asyncio.create_task(pause(response, seconds))
        await asyncio.sleep(seconds / 2)
        reading.append(transport.is_reading())
        await paused
        reading.append(transport.is_reading() or transport.is_closing())

    monkeypatch.setattr(client, "_pause_reading", watched_pause)
    kube = await Kube.connect(str(sandbox.kubeconfig_path))
    try:
        listed = await kube.get(CONFIGMAPS)
        arrived: dict[str, float] = {}
        first = asyncio.Event()

        async def watch() -> None:
            query = [("resourceVersion", listed["metadata"]["resourceVersion"])]
            async for event in kube.watch(CONFIGMAPS, query, timeout=30, batch=0.5):
                arrived[event["object"]["metadata"]["name"]] = asyncio.get_running_loop().time()
                first.set()
                if len(arrived) == 6:
                    return

        watcher = asyncio.create_task(watch())
        await kube.request("POST", CONFIGMAPS, body=configmap("first", 10))
        async with asyncio.timeout(10):
            await first.wait()
        started = asyncio.get_running_loop().time()
        for i in range(5):  # while the watch does not read
            await kube.request("POST", CONFIGMAPS, body=configmap(f"then-{i}", 10))
        async with asyncio.timeout(10):
            await watcher
        later = [arrived[f"then-{i}"] for i in range(5)]
        assert asyncio.get_running_loop().time() - started < 5
        assert min(later) - arrived["first"] >= 0.45  # not read before the pause ended
        assert max(later) - min(later) < 0.05  # all five in the read after it
        assert reading[:2] == [False, True]  # not reading during the first pause, reading after it
    finally:
        await kube.close()
