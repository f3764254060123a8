"""Lease-based leader election (coordination.k8s.io/v1), as client-go's leaderelection does.

The holder renews the Lease every ``retry_period``; a candidate takes it over once the record
has not changed for ``leaseDurationSeconds``, measured on the candidate's own monotonic clock
from when it last saw the record change (never from the ``renewTime`` another host wrote, so a
skewed clock cannot make a live lease look expired). Writes carry the Lease's resourceVersion,
so two candidates never both win: one gets a 409. A leader that sees another holder, or cannot
renew within ``renew_deadline``, stops leading at once; on a graceful stop it releases the
Lease (empty holder), so that the other replica takes over within a retry period.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging
import time
from collections.abc import Callable
from typing import Any

from gpucluster import timestamps
from gpucluster.kube.client import Kube, KubeError

log = logging.getLogger("gpucluster.controller.leader")


LEASE_NAME = "gpucluster-controller"  # in the operator's namespace; the chart's post-delete hook removes it


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def _fmt(t: dt.datetime) -> str:
    return timestamps.rfc3339_micro(t)


def _parse(value: str | None) -> dt.datetime | None:
    if not value:
        return None
    try:
        return timestamps.parse(value)
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
        monotonic: Callable[[], float] = time.monotonic,
        on_transition: Callable[[bool], None] | None = None,
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
        self.monotonic = monotonic
        self.on_transition = on_transition
        self.is_leader = asyncio.Event()
        self.is_follower = asyncio.Event()  # the complement, for waiting on a loss
        self.is_follower.set()
        self._last_renew: float | None = None
        # The last record seen and when (local monotonic clock) it was first seen.
        self._observed: Any = None
        self._observed_at = 0.0
        self._other_holder = False

    def _set_leader(self, leading: bool) -> None:
        if leading == self.is_leader.is_set():
            return
        if leading:
            log.info("became leader identity=%s lease=%s/%s", self.identity, self.namespace, self.name)
            self.is_leader.set()
            self.is_follower.clear()
        else:
            log.warning("lost leadership identity=%s", self.identity)
            self.is_leader.clear()
            self.is_follower.set()
        if self.on_transition is not None:
            self.on_transition(leading)

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
        now = self.monotonic()
        if spec != self._observed:
            self._observed, self._observed_at = dict(spec), now
        duration = float(spec.get("leaseDurationSeconds") or self.lease_duration)
        expired = now - self._observed_at > duration
        self._other_holder = bool(holder) and holder != self.identity
        if self._other_holder and not expired:
            return False
        transitions = int(spec.get("leaseTransitions") or 0) + (0 if holder == self.identity else 1)
        acquired = spec.get("acquireTime") if holder == self.identity else None
        lease["spec"] = self._spec(transitions, acquired)
        try:
            written = await self.kube.request("PUT", f"{self.path}/{self.name}", body=lease)
        except KubeError as exc:
            if exc.status == 409:
                return False
            raise
        self._observed, self._observed_at = dict(written.get("spec") or lease["spec"]), self.monotonic()
        self._other_holder = False
        return True

    async def run(self, stop: asyncio.Event) -> None:
        """Contend for the lease until ``stop``; ``is_leader`` is set while this process holds it."""
        while not stop.is_set():
            # One attempt is bounded as client-go bounds a renew by RenewDeadline: a request that
            # hangs must not keep this replica leading past the Lease's expiry.
            budget = self.renew_deadline
            if self.is_leader.is_set() and self._last_renew is not None:
                budget = max(0.1, self.renew_deadline - (self.monotonic() - self._last_renew))
            try:
                ok = await asyncio.wait_for(self.try_acquire_or_renew(), budget)
            except TimeoutError:
                log.warning("lease attempt timed out after %.1fs", budget)
                ok = False
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # any client failure (aiohttp's disconnects are not OSError)
                log.warning("lease error error=%s", exc)
                ok = False
            now = self.monotonic()
            if ok:
                self._last_renew = now
                self._set_leader(True)
            elif self.is_leader.is_set() and (
                self._other_holder or self._last_renew is None or now - self._last_renew > self.renew_deadline
            ):
                self._set_leader(False)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), self.retry_period)
        if self.is_leader.is_set():
            await self.release()

    async def release(self) -> None:
        """Give the lease up on shutdown so the other replica takes over at once (best effort, 2 s)."""
        self._set_leader(False)

        async def give_up() -> None:
            lease = await self.kube.get(f"{self.path}/{self.name}")
            if (lease.get("spec") or {}).get("holderIdentity") == self.identity:
                now = _fmt(self.clock())
                lease["spec"]["holderIdentity"] = ""
                lease["spec"]["leaseDurationSeconds"] = 1
                lease["spec"]["renewTime"] = now
                lease["spec"]["acquireTime"] = now
                await self.kube.request("PUT", f"{self.path}/{self.name}", body=lease)

        try:
            await asyncio.wait_for(give_up(), 2.0)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.warning("lease release failed error=%s", exc)
