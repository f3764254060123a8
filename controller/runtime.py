"""The controller process: informers, a rate-limited reconcile loop, leader election, health.

All replicas keep their caches warm; only the Lease holder reconciles. Any watched change marks
the singleton dirty; reconciles are serialized, at least ``min_interval`` apart, retried with
exponential backoff on errors, and requeued as the reconciler asks (5 s while not ready, 60 s
when ready).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
from collections.abc import Awaitable, Mapping
from typing import Any, TypeVar

from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from controller.explain import REASON as EXPLAIN_REASON
from controller.explain import Explainer
from controller.provision import DEFAULT_GRACE_PERIOD, Provisioner
from controller.reconcile import Reconciler, owned_resources
from controller.status import PERMISSION_DENIED
from controller.stranded import StrandedPods
from gpucluster.clusterstate import ClusterState
from gpucluster.errors import InputError
from gpucluster.kube.client import Kube, KubeError
from gpucluster.kube.reflector import RESOURCES, Reflector, Resource, forbidden_permission

log = logging.getLogger("gpucluster.controller")
T = TypeVar("T")

WATCHED = ["GPUCluster", "ClusterPolicy", "Node", "Namespace", "ResourceSlice", "ResourceClaim", "DeviceClass"]
# Only pending pods matter (explanations); a field selector keeps the cache small.
PENDING_PODS = Resource("Pod", "/api/v1/pods", field_selector="status.phase=Pending")


# What each pass runs, as the `reconciler` label names it.
RECONCILERS = ("gpucluster", "explanations", "stranded")
DURATION_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


def error_reason(exc: BaseException) -> str:
    """A small, bounded label value: the API's reason (Conflict, InternalError, ...), else the kind of failure."""
    if isinstance(exc, KubeError):
        return exc.reason or f"HTTP{exc.status}"
    if isinstance(exc, TimeoutError):
        return "Timeout"
    return "ConnectionError"


class Metrics:
    """What a Prometheus user charts, per reconciler: passes (by result), durations, errors by reason,
    the time of the last success; and the work queue's depth and how long work waited in it."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        registry = self.registry
        self.reconciles = Counter(
            "gpucluster_controller_reconciles", "Reconcile passes.", ["reconciler", "result"], registry=registry
        )
        self.duration = Histogram(
            "gpucluster_controller_reconcile_duration_seconds", "Reconcile duration.", ["reconciler"],
            buckets=DURATION_BUCKETS, registry=registry,
        )  # fmt: skip
        self.errors = Counter(
            "gpucluster_controller_reconcile_errors", "Failed reconciles by reason.", ["reconciler", "reason"],
            registry=registry,
        )  # fmt: skip
        self.last_success = Gauge(
            "gpucluster_controller_last_successful_reconcile_timestamp_seconds",
            "Unix time of the last successful reconcile.", ["reconciler"], registry=registry,
        )  # fmt: skip
        self.queue_depth = Gauge(
            "gpucluster_controller_workqueue_depth", "Keys waiting to be reconciled.", ["name"], registry=registry
        )
        self.queue_latency = Histogram(
            "gpucluster_controller_workqueue_queue_duration_seconds",
            "How long a key waited in the queue before its reconcile started.", ["name"],
            buckets=DURATION_BUCKETS, registry=registry,
        )  # fmt: skip
        for name in RECONCILERS:  # every series exists from the start (rate() needs a zero)
            for result in ("ok", "error"):
                self.reconciles.labels(name, result)
            self.duration.labels(name)
        self.queue_depth.labels("gpucluster").set(0)
        self.writes = Counter(
            "gpucluster_controller_api_writes", "API writes made by reconciles.", registry=self.registry
        )
        self.status_writes = Counter(
            "gpucluster_controller_status_writes", "GPUCluster status writes.", registry=self.registry
        )
        self.leader = Gauge(
            "gpucluster_controller_leader", "1 while this replica holds the lease.", registry=self.registry
        )
        self.ready = Gauge(
            "gpucluster_controller_gpucluster_ready", "1 when the GPUCluster is ready.", registry=self.registry
        )


class Controller:
    def __init__(
        self,
        kube: Kube,
        *,
        namespace: str = "gpu-operator",
        env: Mapping[str, str] | None = None,
        min_interval: float = 0.2,
        identity: str | None = None,
        leader_election: bool = True,
        template_grace_period: float = DEFAULT_GRACE_PERIOD,
        delete_stranded_pods: bool = False,
        report_failures_after: int = 3,
        max_backoff: float = 8.0,
    ) -> None:
        self.kube = kube
        self.report_failures_after = report_failures_after
        self.max_backoff = max_backoff
        self.namespace = namespace
        self.state = ClusterState()
        self.reconciler = Reconciler(kube, self.state, namespace=namespace, env=dict(env or {}))
        self.explainer = Explainer(self.state)
        self.min_interval = min_interval
        self.metrics = Metrics()
        self.dirty = asyncio.Event()
        self._dirty_since: float | None = None  # when the pending work was first asked for
        self.synced = False
        self.reflectors: list[Reflector] = []
        self.elector: Any = None
        self.passes = 0
        self.identity = identity or f"{socket.gethostname()}-{os.getpid()}"
        self.leader_election = leader_election
        # Claim templates of translated pods (the webhook creates nothing) and pods stranded
        # untranslated while the webhook was down: see controller/provision.py, controller/stranded.py.
        registry = self.metrics.registry
        self.provisioner = Provisioner(
            kube, event=self.reconciler.event, leads=self._leads, grace_period=template_grace_period, registry=registry
        )
        self.stranded = StrandedPods(self.state, namespace, delete=delete_stranded_pods, registry=registry)

    def _resources(self) -> list[Resource]:
        owned = owned_resources(self.namespace)
        # DeviceClasses are both ours and read for explanations: watch them all.
        return [RESOURCES[k] for k in WATCHED] + [r for r in owned if r.kind not in WATCHED] + [PENDING_PODS]

    def _on_event(self, kind: str, obj: dict[str, Any]) -> None:
        self._mark_dirty()

    def _mark_dirty(self) -> None:
        if self._dirty_since is None:
            self._dirty_since = time.monotonic()
            self.metrics.queue_depth.labels("gpucluster").set(1)
        self.dirty.set()

    async def _timed(self, name: str, work: Awaitable[T]) -> T:
        """Run one reconciler's part of a pass, measured and counted under ``reconciler=name``."""
        started = time.monotonic()
        try:
            result = await work
        except (KubeError, OSError, TimeoutError) as exc:
            self.metrics.reconciles.labels(name, "error").inc()
            self.metrics.errors.labels(name, error_reason(exc)).inc()
            raise
        finally:
            self.metrics.duration.labels(name).observe(time.monotonic() - started)
        self.metrics.reconciles.labels(name, "ok").inc()
        self.metrics.last_success.labels(name).set(time.time())
        return result

    async def _explain(self) -> None:
        for pod, claims, reason in await self.explainer.explanations_offloaded():
            for obj in (pod, *claims):
                await self.reconciler.event(obj, "Warning", EXPLAIN_REASON, reason)

    def problems(self) -> list[str]:
        """Why the caches cannot be trusted: refusals (403 first) of the reflectors, one line each."""
        out = []
        for reflector in sorted(
            [*self.reflectors, *self.provisioner.reflectors], key=lambda r: r.error is None or r.error.status != 403
        ):
            exc = reflector.error
            if exc is None:
                continue
            if exc.status == 403:
                out.append(f"cannot {forbidden_permission(exc, reflector.resource)}")
            else:
                out.append(f"{reflector.resource.kind}: {exc}")
        return out

    def ready(self) -> tuple[bool, str]:
        problems = self.problems()
        if problems:
            return False, "; ".join(problems)
        if not self.synced:
            return False, "caches not synced"
        return True, "ok"

    def _leads(self) -> bool:
        return self.elector is None or self.elector.is_leader.is_set()

    async def _wait_synced(self, kinds: list[str], stop: asyncio.Event | None = None) -> None:
        reported = ""
        while not self.state.synced(kinds):
            if stop is not None and stop.is_set():
                return  # SIGTERM before the caches synced: stop (and release the Lease) now
            problems = [p for p in self.problems() if p.startswith("cannot ")]
            message = "; ".join(problems)
            # Nothing is reconciled until every cache syncs: say why on the GPUCluster when we can.
            if message and message != reported and self._leads() and self.state.synced(["GPUCluster"]):
                cluster = self.state.get("GPUCluster", "gpu-cluster")
                if cluster is not None:
                    try:
                        await self.reconciler.set_status(
                            cluster, state="notReady", reason=PERMISSION_DENIED,
                            message=f"the operator's RBAC is missing permissions: {message}",
                        )  # fmt: skip
                        reported = message
                    except (KubeError, OSError, TimeoutError) as exc:
                        log.warning("cannot report missing permissions on the GPUCluster error=%s", exc)
            await asyncio.sleep(0.05 if not problems else 1.0)
        self.synced = True

    async def run(self, stop: asyncio.Event) -> None:
        resources = self._resources()
        self.reflectors = [Reflector(self.kube, r, self.state, on_event=self._on_event) for r in resources]
        tasks: list[asyncio.Task[Any]] = [asyncio.create_task(r.run()) for r in self.reflectors]
        tasks.append(asyncio.create_task(self.provisioner.run(stop)))
        elector = None
        elector_task: asyncio.Task[None] | None = None
        if self.leader_election:
            from controller.leader import LeaderElector

            elector = LeaderElector(
                self.kube, self.namespace, "gpucluster-controller", self.identity,
                on_transition=lambda leading: self.metrics.leader.set(1 if leading else 0),
            )  # fmt: skip
            self.elector = elector
            elector_task = asyncio.create_task(elector.run(stop))

        async def wake_on_stop() -> None:
            await stop.wait()
            self.dirty.set()

        tasks.append(asyncio.create_task(wake_on_stop()))
        try:
            await self._wait_synced([r.kind for r in resources], stop)
            await self._loop(stop, elector)
        finally:
            if elector_task is not None:
                # On a graceful stop the elector releases the Lease (the other replica takes over at
                # once); give it a moment before cancelling what is left.
                if stop.is_set():
                    with contextlib.suppress(TimeoutError, asyncio.CancelledError):
                        await asyncio.wait_for(asyncio.shield(elector_task), 2.0)
                tasks.append(elector_task)
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _loop(self, stop: asyncio.Event, elector: Any) -> None:
        backoff = 0.5
        failures = 0
        next_run = 0.0
        while not stop.is_set():
            if elector is not None and not elector.is_leader.is_set():
                waiter = asyncio.create_task(elector.is_leader.wait())
                stopper = asyncio.create_task(stop.wait())
                await asyncio.wait({waiter, stopper}, return_when=asyncio.FIRST_COMPLETED)
                waiter.cancel()
                stopper.cancel()
                continue
            if elector is None:
                self.metrics.leader.set(1)
            timeout = max(0.0, next_run - time.monotonic())
            if not self.dirty.is_set() and timeout > 0:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.dirty.wait(), timeout)
            if stop.is_set():
                return
            self.dirty.clear()
            started = time.monotonic()
            queued = self._dirty_since
            self._dirty_since = None
            self.metrics.queue_depth.labels("gpucluster").set(0)
            if queued is not None:
                self.metrics.queue_latency.labels("gpucluster").observe(started - queued)
            before = self.reconciler.writes
            status_before = self.reconciler.status_writes
            try:
                requeue = await self._timed("gpucluster", self.reconciler.reconcile())
                await self._timed("explanations", self._explain())
                await self._timed("stranded", self.stranded.run_pass(self.reconciler.event, self.reconciler.delete))
                backoff, failures = 0.5, 0
            except (KubeError, OSError, TimeoutError) as exc:
                log.warning("reconcile failed error=%s retry_in=%.1fs", exc, backoff)
                failures += 1
                # A transient fault is retried quietly; a persistent one shows in status (Error=True).
                if failures >= self.report_failures_after:
                    await self.reconciler.report_failure(exc, failures)
                # Capped low: the pass after the fault clears turns the status back within seconds.
                requeue, backoff = backoff, min(backoff * 2, self.max_backoff)
            self.passes += 1
            self.metrics.writes.inc(self.reconciler.writes - before)
            self.metrics.status_writes.inc(self.reconciler.status_writes - status_before)
            cluster = self.state.get("GPUCluster", "gpu-cluster")
            self.metrics.ready.set(1 if cluster and (cluster.get("status") or {}).get("state") == "ready" else 0)
            next_run = time.monotonic() + requeue
            await asyncio.sleep(max(0.0, self.min_interval - (time.monotonic() - started)))


def bind_address() -> str:
    """Where servers listen: all interfaces, or the pod's own address when a sandbox process kubelet gives one."""
    return os.environ.get("GPUCLUSTER_BIND_ADDRESS") or "0.0.0.0"


def health_app(controller: Controller) -> web.Application:
    async def healthz(request: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    async def readyz(request: web.Request) -> web.Response:
        ok, detail = controller.ready()
        return web.Response(status=200 if ok else 503, text=f"{detail}\n")

    async def metrics(request: web.Request) -> web.Response:
        return web.Response(body=generate_latest(controller.metrics.registry), content_type="text/plain")

    app = web.Application()
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/metrics", metrics)
    return app


async def run_controller(
    kube: Kube,
    namespace: str,
    env: Mapping[str, str],
    stop: asyncio.Event,
    *,
    health_port: int | None = None,
    leader_election: bool = True,
    template_grace_period: float = DEFAULT_GRACE_PERIOD,
    delete_stranded_pods: bool = False,
    allocator_options: Mapping[str, Any] | None = None,
) -> Controller:
    """Run the controller until ``stop`` is set; serves /healthz, /readyz, /metrics on ``health_port``.

    ``allocator_options`` (kubernetes_version, feature_gates) are what pending pods are explained with.
    """
    controller = Controller(
        kube, namespace=namespace, env=env, leader_election=leader_election,
        template_grace_period=template_grace_period, delete_stranded_pods=delete_stranded_pods,
    )  # fmt: skip
    controller.explainer.allocator_options = dict(allocator_options or {})
    runner = None
    if health_port is not None:
        runner = web.AppRunner(health_app(controller), access_log=None)
        await runner.setup()
        try:
            await web.TCPSite(runner, bind_address(), health_port).start()
        except OSError as exc:
            await runner.cleanup()
            raise InputError(f"cannot listen on {bind_address()}:{health_port}: {exc.strerror or exc}") from None
    try:
        await controller.run(stop)
    finally:
        if runner is not None:
            await runner.cleanup()
    return controller
