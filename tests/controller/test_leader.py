"""Lease leader election against the sandbox and the real control plane: one leader at a time, hand-over when it stops."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import pytest

from gpucluster.controller.leader import LeaderElector
from gpucluster.kube.client import Kube, KubeError
from gpucluster.sandbox.server import Sandbox
from tests.e2e.backends import SANDBOX, backends
from tests.kit.fakekube import FakeKube

pytestmark = pytest.mark.integration  # starts servers or processes: `make unit` leaves it out

LEASE = "/apis/coordination.k8s.io/v1/namespaces/gpu-operator/leases/gpucluster-controller"


@pytest.fixture(params=backends())
async def kube(request: pytest.FixtureRequest) -> AsyncIterator[Kube]:
    """The sandbox, or the real control plane (shared by the module; the lease is removed after each test)."""
    if request.param != SANDBOX:
        plane = request.getfixturevalue("bare_kube")
        client = await Kube.connect(str(plane.admin_kubeconfig))
        try:
            yield client
        finally:
            with contextlib.suppress(KubeError):
                await client.request("DELETE", LEASE)
            await client.close()
        return
    sandbox = Sandbox()
    await sandbox.start()
    client = await Kube.connect(str(sandbox.kubeconfig_path))
    await client.request(
        "POST",
        "/api/v1/namespaces",
        body={"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "gpu-operator"}},
    )
    try:
        yield client
    finally:
        await client.close()
        await sandbox.stop()


async def _renewed(kube: Kube, holder: str, *, times: int, timeout: float = 10.0) -> None:
    """Until ``holder`` has renewed the lease ``times`` times (seen as new renewTimes), at most ``timeout`` s."""
    seen: set[str] = set()
    async with asyncio.timeout(timeout):
        while len(seen) < times:
            lease = await kube.get(LEASE)
            assert lease["spec"]["holderIdentity"] == holder, lease["spec"]
            seen.add(str(lease["spec"].get("renewTime")))
            await asyncio.sleep(0.02)


def elector(kube: Kube, identity: str) -> LeaderElector:
    return LeaderElector(kube, "gpu-operator", "gpucluster-controller", identity,
                         lease_duration=1.0, renew_deadline=0.8, retry_period=0.1)  # fmt: skip


async def test_one_leader_and_hand_over(kube: Kube) -> None:
    a, b = elector(kube, "replica-a"), elector(kube, "replica-b")
    stop_a, stop_b = asyncio.Event(), asyncio.Event()
    task_a = asyncio.create_task(a.run(stop_a))
    await asyncio.wait_for(a.is_leader.wait(), 5)
    task_b = asyncio.create_task(b.run(stop_b))
    # While a renews its lease several times over (b tries at every retry period meanwhile),
    # b must not lead: waited for by what the lease shows, not by a fixed sleep.
    await _renewed(kube, "replica-a", times=4)
    assert a.is_leader.is_set() and not b.is_leader.is_set()
    stop_a.set()  # the leader shuts down and releases the lease
    await task_a
    await asyncio.wait_for(b.is_leader.wait(), 5)
    lease = await kube.get("/apis/coordination.k8s.io/v1/namespaces/gpu-operator/leases/gpucluster-controller")
    assert lease["spec"]["holderIdentity"] == "replica-b"
    assert lease["spec"]["leaseTransitions"] >= 1
    stop_b.set()
    await task_b


async def test_a_crashed_leader_is_replaced_after_the_lease_expires(kube: Kube) -> None:
    a, b = elector(kube, "replica-a"), elector(kube, "replica-b")
    task_a = asyncio.create_task(a.run(asyncio.Event()))
    await asyncio.wait_for(a.is_leader.wait(), 5)
    task_a.cancel()  # killed: no release
    await asyncio.gather(task_a, return_exceptions=True)
    stop_b = asyncio.Event()
    task_b = asyncio.create_task(b.run(stop_b))
    await asyncio.wait_for(b.is_leader.wait(), 5)
    stop_b.set()
    await task_b


def flaky() -> FakeKube:
    """A client whose first call drops the connection (an aiohttp error, not an OSError), then hangs."""
    import aiohttp

    client = FakeKube()
    client.fail("*", "", aiohttp.ServerDisconnectedError(), times=1)
    client.on("*", "", lambda call: asyncio.Event().wait())  # a renew that never returns
    return client


async def test_a_dropped_connection_does_not_kill_the_elector_and_a_hung_renew_steps_down() -> None:
    client = flaky()
    candidate = LeaderElector(client, "gpu-operator", "gpucluster-controller", "replica-a",
                              lease_duration=1.0, renew_deadline=0.3, retry_period=0.05)  # fmt: skip
    candidate._set_leader(True)  # leading when the trouble starts
    candidate._last_renew = candidate.monotonic()
    stop = asyncio.Event()
    task = asyncio.create_task(candidate.run(stop))
    # The hung renew is cut at the renew deadline: no longer the leader, well before the Lease expires.
    await asyncio.wait_for(candidate.is_follower.wait(), 2)
    assert not task.done() and len(client.calls) >= 2  # still contending after the disconnect
    stop.set()
    await asyncio.wait_for(task, 5)
    assert {c.method for c in client.calls} == {"GET"}  # no renewal got past reading the Lease
