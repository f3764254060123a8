"""Lease-based leader election (coordination.k8s.io/v1), as client-go's leaderelection does.

The holder renews the Lease every ``retry_period``; a candidate takes it over once
``renewTime + leaseDurationSeconds`` has passed without renewal. Writes carry the Lease's
resourceVersion, so two candidates never both win: one gets a 409.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging
from collections.abc import Callable
from typing import Any

from gpucluster.kube.client import Kube, KubeError

log = logging.getLogger("gpucluster.controller.leader")


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def _fmt(t: dt.datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _parse(value: str | None) -> dt.datetime | None:
    if not value:
        return None
    try:
        return dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


class LeaderElector:
    def __init__(
        self,
        kube: Kube,
        namespace: str,
        name: str,
        identity: str,
        *,
        lease_duration: float = 15.0,
        renew_deadline: float = 10.0,
        retry_period: float = 2.0,
        clock: Callable[[], dt.datetime] = _now,
    ) -> None:
        self.kube = kube
        self.path = f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases"
        self.namespace = namespace
        self.name = name
        self.identity = identity
        self.lease_duration = lease_duration
        self.renew_deadline = renew_deadline
        self.retry_period = retry_period
        self.clock = clock
        self.is_leader = asyncio.Event()
        self._last_renew: dt.datetime | None = None

    def _spec(self, transitions: int, acquired: str | None) -> dict[str, Any]:
        now = _fmt(self.clock())
        return {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": int(self.lease_duration),
            "acquireTime": acquired or now,
            "renewTime": now,
            "leaseTransitions": transitions,
        }

    async def try_acquire_or_renew(self) -> bool:
        try:
            lease = await self.kube.get(f"{self.path}/{self.name}")
        except KubeError as exc:
            if exc.status != 404:
                raise
            body = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": self.name, "namespace": self.namespace},
                "spec": self._spec(0, None),
            }
            try:
                await self.kube.request("POST", self.path, body=body)
            except KubeError as create_exc:
                if create_exc.status == 409:
                    return False
                raise
            return True
        spec = lease.get("spec") or {}
        holder = spec.get("holderIdentity")
        renewed = _parse(spec.get("renewTime")) or _parse(spec.get("acquireTime"))
        duration = float(spec.get("leaseDurationSeconds") or self.lease_duration)
        expired = renewed is None or (self.clock() - renewed).total_seconds() > duration
        if holder and holder != self.identity and not expired:
            return False
        transitions = int(spec.get("leaseTransitions") or 0) + (0 if holder == self.identity else 1)
        acquired = spec.get("acquireTime") if holder == self.identity else None
        lease["spec"] = self._spec(transitions, acquired)
        try:
            await self.kube.request("PUT", f"{self.path}/{self.name}", body=lease)
        except KubeError as exc:
            if exc.status == 409:
                return False
            raise
        return True

    async def run(self, stop: asyncio.Event) -> None:
        """Contend for the lease until ``stop``; ``is_leader`` is set while this process holds it."""
        while not stop.is_set():
            try:
                ok = await self.try_acquire_or_renew()
            except (KubeError, OSError, TimeoutError) as exc:
                log.warning("lease error error=%s", exc)
                ok = False
            now = self.clock()
            if ok:
                self._last_renew = now
                if not self.is_leader.is_set():
                    log.info("became leader identity=%s lease=%s/%s", self.identity, self.namespace, self.name)
                    self.is_leader.set()
            elif self.is_leader.is_set() and (
                self._last_renew is None or (now - self._last_renew).total_seconds() > self.renew_deadline
            ):
                log.warning("lost leadership identity=%s", self.identity)
                self.is_leader.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), self.retry_period)
        if self.is_leader.is_set():
            await self.release()

    async def release(self) -> None:
        """Give the lease up on shutdown so the other replica takes over at once."""
        self.is_leader.clear()
        try:
            lease = await self.kube.get(f"{self.path}/{self.name}")
            if (lease.get("spec") or {}).get("holderIdentity") == self.identity:
                lease["spec"]["holderIdentity"] = ""
                lease["spec"]["leaseDurationSeconds"] = 1
                await self.kube.request("PUT", f"{self.path}/{self.name}", body=lease)
        except (KubeError, OSError) as exc:
            log.warning("lease release failed error=%s", exc)
