"""Leader election as client-go does it: release on stop, skew-proof expiry, the gauge on every transition."""

from __future__ import annotations

import asyncio
import datetime as dt

import pytest

from gpucluster.controller.leader import LeaderElector
from gpucluster.controller.runtime import Controller
from gpucluster.kube.client import Kube
from tests.controller import test_leader as base

pytestmark = pytest.mark.integration  # starts servers or processes: `make unit` leaves it out
kube = base.kube  # the sandbox fixture
LEASE = "/apis/coordination.k8s.io/v1/namespaces/gpu-operator/leases/gpucluster-controller"


def elector(kube: Kube, identity: str, **kwargs: object) -> LeaderElector:
    options: dict[str, object] = {"lease_duration": 30.0, "renew_deadline": 20.0, "retry_period": 0.1, **kwargs}
    return LeaderElector(kube, "gpu-operator", "gpucluster-controller", identity, **options)  # type: ignore[arg-type]


async def test_a_stopped_leader_hands_over_long_before_the_lease_would_expire(kube: Kube) -> None:
    a, b = elector(kube, "replica-a"), elector(kube, "replica-b")
    stop_a, stop_b = asyncio.Event(), asyncio.Event()
    task_a = asyncio.create_task(a.run(stop_a))
    await asyncio.wait_for(a.is_leader.wait(), 5)
    task_b = asyncio.create_task(b.run(stop_b))
    stop_a.set()
    await task_a
    await asyncio.wait_for(b.is_leader.wait(), 3)  # the lease lasts 30 s: only a release explains this
    stop_b.set()
    await task_b


async def test_a_skewed_clock_never_makes_a_live_lease_look_expired(kube: Kube) -> None:
    a = elector(kube, "replica-a", lease_duration=1.0, renew_deadline=0.8)

    def skewed() -> dt.datetime:
        return dt.datetime.now(dt.UTC) + dt.timedelta(seconds=40)

    b = elector(kube, "replica-b", lease_duration=1.0, renew_deadline=0.8, clock=skewed)
    stop = asyncio.Event()
    task_a = asyncio.create_task(a.run(stop))
    await asyncio.wait_for(a.is_leader.wait(), 5)
    attempts = 0
    original = b.try_acquire_or_renew

    async def counted() -> bool:
        nonlocal attempts
        attempts += 1
        return await original()

    b.try_acquire_or_renew = counted  # type: ignore[method-assign]
    task_b = asyncio.create_task(b.run(stop))
    deadline = asyncio.get_running_loop().time() + 10
    # B sees A's renewTime 40 s in its past on every look; it must still wait for the record to stop changing.
    while attempts < 25:
        assert not b.is_leader.is_set(), "two leaders"
        assert asyncio.get_running_loop().time() < deadline
        await asyncio.sleep(0.02)
    assert a.is_leader.is_set()
    stop.set()
    await asyncio.gather(task_a, task_b)


async def test_a_leader_that_sees_another_holder_steps_down_at_once(kube: Kube) -> None:
    transitions: list[bool] = []
    a = elector(kube, "replica-a", on_transition=transitions.append)
    stop = asyncio.Event()
    task = asyncio.create_task(a.run(stop))
    await asyncio.wait_for(a.is_leader.wait(), 5)
    lease = await kube.get(LEASE)
    lease["spec"]["holderIdentity"] = "replica-x"
    await kube.request("PUT", LEASE, body=lease)
    deadline = asyncio.get_running_loop().time() + 3  # well inside renew_deadline (20 s)
    while a.is_leader.is_set():
        assert asyncio.get_running_loop().time() < deadline
        await asyncio.sleep(0.02)
    assert transitions == [True, False]
    stop.set()
    await task


async def test_the_controller_releases_the_lease_and_drops_the_gauge_on_a_graceful_stop(kube: Kube) -> None:
    controller = Controller(kube, namespace="gpu-operator", identity="replica-a", min_interval=0.05)
    stop = asyncio.Event()
    task = asyncio.create_task(controller.run(stop))
    deadline = asyncio.get_running_loop().time() + 10
    while controller.elector is None or not controller.elector.is_leader.is_set():
        assert asyncio.get_running_loop().time() < deadline
        await asyncio.sleep(0.02)
    assert controller.metrics.leader._value.get() == 1
    stop.set()
    await asyncio.wait_for(task, 5)
    lease = await kube.get(LEASE)
    assert lease["spec"]["holderIdentity"] == ""
    assert controller.metrics.leader._value.get() == 0
