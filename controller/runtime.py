"""The controller process: informers, three keyed reconcilers on work queues, leader election, health.

All replicas keep their caches warm; only the Lease holder runs the workers. A watch event
queues the key of the work it touches (:mod:`gpucluster.kube.workqueue`: deduplicated, never two
workers on one key, rate-limited retries):

* ``gpucluster`` (the singleton's operands and status, controller/reconcile.py): events of the
  GPUClusters, ClusterPolicies, the operator namespace, the objects we own, and of slices and
  claims (the inventory). One worker; reconciles at least ``min_interval`` apart; requeued as the
  reconciler asks (5 s while not ready, 60 s when ready); failures back off 0.5 s doubling to
  ``max_backoff``, and after ``report_failures_after`` in a row show in status.
* ``nodes`` (labels, controller/labeller.py): a node's own events, and claims allocated on it;
  ``node_workers`` at once (each a label write; the client's QPS and burst, when set, bound their
  rate: gpucluster/kube/client.py ``Throttle``). A node event that changes nothing cached of the
  node (a heartbeat: status only; the echo of our own label write) never gets here: its reflector
  drops it (controller/transforms.py ``node_unchanged``).
* ``pods`` (pending pods: explanations, stranded pods): a pod's own events, and the pods a
  claim, slice or class event concerns (a claim's own pods, or every waiting pod when devices were
  taken or freed; for slices and classes, controller/affected.py); the allocator runs in the
  worker process, with a deadline, never on the event loop.
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

import aiohttp
from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from gpucluster.api.gpucluster import SINGLETON_NAME
from gpucluster.claimtemplates import published
from gpucluster.clusterstate import ClusterState, KubeObject, metadata
from gpucluster.controller.affected import pods_for_class_change, pods_for_slice_change, spec_fingerprint
from gpucluster.controller.explain import REASON as EXPLAIN_REASON
from gpucluster.controller.explain import Explainer, claim_users
from gpucluster.controller.holders import allocated_devices
from gpucluster.controller.labeller import NodeLabeller
from gpucluster.controller.nodes import device_nodes
from gpucluster.controller.provision import DEFAULT_GRACE_PERIOD, Provisioner
from gpucluster.controller.reconcile import Api, Reconciler, owned_resources
from gpucluster.controller.status import PERMISSION_DENIED
from gpucluster.controller.stranded import StrandedPods
from gpucluster.controller.transforms import transform_for, unchanged_for
from gpucluster.errors import InputError
from gpucluster.kube.client import Kube, KubeError
from gpucluster.kube.reflector import RESOURCES, Reflector, Resource, forbidden_permission
from gpucluster.kube.workqueue import (
    BucketRateLimiter,
    ItemExponentialFailureRateLimiter,
    MaxOfRateLimiter,
    QueueMetrics,
    WorkQueue,
    default_rate_limiter,
    run_workers,
)

log = logging.getLogger("gpucluster.controller")
T = TypeVar("T")

WATCHED = ["GPUCluster", "ClusterPolicy", "Node", "Namespace", "ResourceSlice", "ResourceClaim", "DeviceClass"]
# Only pending pods matter (explanations); a field selector keeps the cache small.
PENDING_PODS = Resource("Pod", "/api/v1/pods", field_selector="status.phase=Pending")


# Label writes in flight at once (each a node's key on the nodes queue). Against the sandbox (one
# event loop) 8 keep it busy and 16 only queue in it: 5,000 nodes took 7-11 s with 8 and 11-17 s
# with 16 (2 cores, shared). An API server slower per write (etcd's commit: 10 ms is 800 writes a
# second from 8) is given more with --node-workers; a client-side limit (--kube-api-qps) bounds
# the rate, and the API server's priority and fairness the concurrency it grants us.
DEFAULT_NODE_WORKERS = 8

# What each pass runs, as the `reconciler` label names it.
RECONCILERS = ("gpucluster", "nodes", "explanations", "stranded")
DURATION_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


def error_reason(exc: BaseException) -> str:
    """A small, bounded label value: the API's reason (Conflict, InternalError, ...), else the kind of failure."""
    if isinstance(exc, KubeError):
        return exc.reason or f"HTTP{exc.status}"
    if isinstance(exc, TimeoutError):
        return "Timeout"
    if isinstance(exc, OSError | aiohttp.ClientError):
        return "ConnectionError"
    return "InternalError"  # a bug of ours: logged with its traceback


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
        self.queues = QueueMetrics(registry, prefix="gpucluster_controller_")
        for name in RECONCILERS:  # every series exists from the start (rate() needs a zero)
            for result in ("ok", "error"):
                self.reconciles.labels(name, result)
            self.duration.labels(name)
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
        node_workers: int = DEFAULT_NODE_WORKERS,
    ) -> None:
        self.kube = kube
        self.report_failures_after = report_failures_after
        self.namespace = namespace
        self.state = ClusterState()
        self.reconciler = Reconciler(Api(kube), self.state, namespace=namespace, env=dict(env or {}))
        self.explainer = Explainer(self.state)
        self.min_interval = min_interval
        self.node_workers = node_workers
        self.metrics = Metrics()
        queues = self.metrics.queues
        cluster_limiter = MaxOfRateLimiter(ItemExponentialFailureRateLimiter(0.5, max_backoff), BucketRateLimiter())
        self.clusters: WorkQueue[str] = WorkQueue("gpucluster", cluster_limiter, metrics=queues)
        # Nodes: client-go's per-key back-off, under a bucket sized for thousands of nodes (a 5 s API
        # blip during the first labelling of 10,000 nodes must not spread their retries over 1,000 s).
        node_limiter = MaxOfRateLimiter(ItemExponentialFailureRateLimiter(0.005, 60.0), BucketRateLimiter(500.0, 10000))
        self.nodes: WorkQueue[str] = WorkQueue("nodes", node_limiter, metrics=queues)
        self.pods: WorkQueue[str] = WorkQueue("pods", default_rate_limiter(cap=60.0), metrics=queues)
        self.labeller = NodeLabeller(
            self.state, self.reconciler.api.write, dict(env or {}),
            active=lambda: self.reconciler.operands.active, on_settled=lambda: self.clusters.add(SINGLETON_NAME),
        )  # fmt: skip
        self.reconciler.peers.unlabelled_nodes = lambda: len(self.labeller.pending)
        self.reconciler.peers.label_errors = lambda: self.labeller.errors
        self._was_active = False
        self._saw_deletion = False  # the GPUCluster was seen being deleted (no new claim templates)
        self._elector_task: asyncio.Task[None] | None = None
        self._failures = 0
        self._clusters_seen: dict[str, tuple[Any, ...]] = {}  # what of a GPUCluster a reconcile reads
        self._claim_devices: dict[str, frozenset[tuple[str, str, str]]] = {}  # claim -> devices it was allocated
        self._specs: dict[tuple[str, str], bytes] = {}  # (kind, name) of a slice or class -> its spec
        self._profiles: frozenset[str] | None = published(self.state).mig_profiles
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
            kube, event=self.reconciler.api.event, leads=self._leads, grace_period=template_grace_period,
            registry=registry, accepting=self._accepting_templates, cluster=self.state,
        )  # fmt: skip
        self.reconciler.peers.provisioned_templates = self.provisioner.owned
        self.stranded = StrandedPods(self.state, namespace, delete=delete_stranded_pods, registry=registry)

    def _resources(self) -> list[Resource]:
        owned = owned_resources(self.namespace)
        # DeviceClasses are both ours and read for explanations: watch them all.
        return [RESOURCES[k] for k in WATCHED] + [r for r in owned if r.kind not in WATCHED] + [PENDING_PODS]

    # ------------------------------------------------------------------ events -> keys

    def resync(self) -> None:
        """Reconcile the GPUCluster again now (level-triggered: nothing is lost by asking twice)."""
        self.clusters.add(SINGLETON_NAME)

    def _node(self, name: str) -> None:
        if self.labeller.wants(name):
            self.nodes.add(name)

    def _all_nodes(self) -> None:
        for node in self.state.list("Node"):
            self._node(str(metadata(node).get("name")))

    def _all_pods(self) -> None:
        for pod in self.state.list("Pod"):
            self.pods.add(_object_key(pod))

    def _on_event(self, type_: str, obj: KubeObject) -> None:
        kind = str(obj.get("kind") or "")
        if kind == "Node":
            self._node(str(metadata(obj).get("name")))
        elif kind == "Pod":
            self.pods.add(_object_key(obj))
        elif kind == "Namespace":
            if metadata(obj).get("name") == self.namespace:
                self.resync()
        elif kind == "ResourceClaim":
            self.resync()  # the inventory
            # A node's driver label stays while its devices are in use: look at the nodes of the
            # claim now and before (a deallocation clears them in one update).
            key = _object_key(obj)
            devices = frozenset() if type_ == "DELETED" else allocated_devices(obj)
            before = self._claim_devices.pop(key, frozenset())
            for node in device_nodes(devices | before):
                self._node(node)
            if devices != before:
                self._all_pods()  # devices taken or freed: every waiting pod's answer may change
            else:
                for pod in claim_users(obj, self.state.list("Pod")):
                    self.pods.add(pod)  # created, or its status changed: only its own pods
            if devices:
                self._claim_devices[key] = devices
        elif kind == "GPUCluster":
            # Like controller-runtime's GenerationChangedPredicate (plus finalizers, deletion,
            # labels, annotations): our own status writes do not trigger another reconcile.
            name = str(metadata(obj).get("name"))
            seen = _cluster_fingerprint(obj)
            if type_ == "DELETED":
                self._clusters_seen.pop(name, None)
                self.resync()
            elif self._clusters_seen.get(name) != seen:
                self._clusters_seen[name] = seen
                self.resync()
        elif kind in ("ResourceSlice", "DeviceClass"):
            if kind == "ResourceSlice":
                self.provisioner.slices_changed()  # it reads this cache's slices (published MIG profiles)
            name = str(metadata(obj).get("name"))
            spec = None if type_ == "DELETED" else spec_fingerprint(obj)
            spec_before = self._specs.pop((kind, name), None)
            if spec is not None:
                self._specs[(kind, name)] = spec
            if spec == spec_before:
                return  # a relist or a metadata change: no answer and no inventory changes
            self.resync()
            pods = self.state.list("Pod")
            if kind == "DeviceClass":
                affected = pods_for_class_change(name, pods, self.state)
            else:
                profiles, self._profiles = self._profiles, published(self.state).mig_profiles
                affected = pods_for_slice_change(pods, profiles_changed=profiles != self._profiles)
            for key in affected:
                self.pods.add(key)
        else:  # ClusterPolicy, the objects we own
            self.resync()

    def _on_list(self, kind: str) -> None:
        if kind == "Node":
            # Nodes deleted while the watch was down are not waited for.
            self.labeller.forget_except({str(metadata(node).get("name")) for node in self.state.list("Node")})
            self._all_nodes()
        elif kind == "Pod":
            self._all_pods()
        else:
            if kind in ("ResourceClaim", "ResourceSlice", "DeviceClass"):
                self._all_pods()  # events may have been missed: every answer may have changed
            if kind in ("ResourceSlice", "DeviceClass"):
                self._specs = {k: v for k, v in self._specs.items() if k[0] != kind}
                self._specs.update(
                    ((kind, str(metadata(o).get("name"))), fp)
                    for o in self.state.list(kind)
                    if (fp := spec_fingerprint(o)) is not None
                )
                if kind == "ResourceSlice":
                    self._profiles = published(self.state).mig_profiles
                    self.provisioner.slices_changed()
            self.resync()

    # ------------------------------------------------------------------ syncs

    async def _timed(self, name: str, work: Awaitable[T]) -> T:
        """Run one reconciler's sync, measured and counted under ``reconciler=name``."""
        started = time.monotonic()
        try:
            result = await work
        except Exception as exc:
            self.metrics.reconciles.labels(name, "error").inc()
            self.metrics.errors.labels(name, error_reason(exc)).inc()
            raise
        finally:
            self.metrics.duration.labels(name).observe(time.monotonic() - started)
        self.metrics.reconciles.labels(name, "ok").inc()
        self.metrics.last_success.labels(name).set(time.time())
        return result

    async def _sync_cluster(self, key: str) -> float:
        started = time.monotonic()
        before, status_before = self.reconciler.api.writes, self.reconciler.status.writes
        try:
            requeue = await self._timed("gpucluster", self.reconciler.reconcile())
            self._failures = 0
        except Exception as exc:
            self._failures += 1
            if isinstance(exc, KubeError | OSError | TimeoutError | aiohttp.ClientError):
                log.warning("reconcile failed error=%s failures=%d", exc, self._failures)
            else:
                log.exception("reconcile failed failures=%d", self._failures)
            # A transient fault is retried quietly; a persistent one shows in status (Error=True).
            if self._failures >= self.report_failures_after:
                await self.reconciler.report_failure(exc, self._failures)
            await self._hold(started)  # a failing reconcile is spaced out too
            raise
        finally:
            self.passes += 1
            self.metrics.writes.inc(self.reconciler.api.writes - before)
            self.metrics.status_writes.inc(self.reconciler.status.writes - status_before)
            cluster = self.state.get("GPUCluster", SINGLETON_NAME)
            ready = cluster is not None and (cluster.get("status") or {}).get("state") == "ready"
            self.metrics.ready.set(1 if ready else 0)
        if self.reconciler.operands.active and not self._was_active:
            self._all_nodes()  # operands rendered: label the GPU nodes
        self._was_active = self.reconciler.operands.active
        await self._hold(started)
        return requeue

    async def _hold(self, started: float) -> None:
        """Hold the key a moment: events meanwhile coalesce into one more reconcile, not many; a
        reconcile that took long is followed by as long a pause, so that on a large cluster it
        never takes more than half of the event loop from the node and pod workers."""
        elapsed = time.monotonic() - started
        await asyncio.sleep(min(max(self.min_interval - elapsed, elapsed), 2.0))

    async def _sync_node(self, name: str) -> None:
        before = self.reconciler.api.writes
        try:
            await self._timed("nodes", self.labeller.sync(name))
        finally:
            self.metrics.writes.inc(self.reconciler.api.writes - before)

    async def _sync_pod(self, key: str) -> float | None:
        namespace, _, name = key.partition("/")
        pod = self.state.get("Pod", name, namespace)
        await self._timed("stranded", self.stranded.check(pod, key, self.reconciler.api.event, self.reconciler.delete))
        found, requeue = await self._timed("explanations", self.explainer.explain(pod, key))
        if found is not None:
            explained, claims, reason = found
            for obj in (explained, *claims):
                await self.reconciler.api.event(obj, "Warning", EXPLAIN_REASON, reason)
        return requeue

    # ------------------------------------------------------------------ health

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

    def _accepting_templates(self) -> bool:
        """No claim templates are created while the GPUCluster is being deleted, nor after: its
        finalizer deletes ours, and its DeviceClasses are gone, so a new claim could not be allocated."""
        cluster = self.state.get("GPUCluster", SINGLETON_NAME)
        if cluster is None:
            # Gone after a deletion this process saw (an uninstall: the operator is about to go too,
            # and a template made now would outlive it): not until a GPUCluster exists again.
            return not self._saw_deletion
        self._saw_deletion = bool(metadata(cluster).get("deletionTimestamp"))
        return not self._saw_deletion

    async def _wait_synced(self, kinds: list[str], stop: asyncio.Event | None = None) -> None:
        reported = ""
        while not self.state.synced(kinds):
            if stop is not None and stop.is_set():
                return  # SIGTERM before the caches synced: stop (and release the Lease) now
            problems = [p for p in self.problems() if p.startswith("cannot ")]
            message = "; ".join(problems)
            # Nothing is reconciled until every cache syncs: say why on the GPUCluster when we can.
            if message and message != reported and self._leads() and self.state.synced(["GPUCluster"]):
                cluster = self.state.get("GPUCluster", SINGLETON_NAME)
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

    # ------------------------------------------------------------------ run

    async def run(self, stop: asyncio.Event) -> None:
        resources = self._resources()
        self.reflectors = [
            Reflector(
                self.kube,
                r,
                self.state,
                on_event=self._on_event,
                on_list=self._on_list,
                transform=transform_for(r.kind),
                unchanged=unchanged_for(r.kind),
            )
            for r in resources
        ]
        tasks: list[asyncio.Task[Any]] = [asyncio.create_task(r.run()) for r in self.reflectors]
        tasks.append(asyncio.create_task(self.provisioner.run(stop)))
        elector = None
        elector_task: asyncio.Task[None] | None = None
        if self.leader_election:
            from gpucluster.controller.leader import LEASE_NAME, LeaderElector

            elector = LeaderElector(
                self.kube, self.namespace, LEASE_NAME, self.identity,
                on_transition=lambda leading: self.metrics.leader.set(1 if leading else 0),
            )  # fmt: skip
            self.elector = elector
            elector_task = asyncio.create_task(elector.run(stop))
            self._elector_task = elector_task
        try:
            await self._wait_synced([r.kind for r in resources], stop)
            await self._lead(stop, elector)
        finally:
            for queue in (self.clusters, self.nodes, self.pods):
                queue.shut_down()
            if elector_task is not None:
                # On a graceful stop the elector releases the Lease (the other replica takes over at
                # once); give it a moment before cancelling what is left.
                if stop.is_set():
                    with contextlib.suppress(Exception, asyncio.CancelledError):  # an elector that died
                        await asyncio.wait_for(asyncio.shield(elector_task), 2.0)
                tasks.append(elector_task)
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _lead(self, stop: asyncio.Event, elector: Any) -> None:
        """Run the workers while this replica holds the Lease (always, without leader election)."""
        stopper = asyncio.create_task(stop.wait())
        try:
            while not stop.is_set():
                if elector is not None and not elector.is_leader.is_set():
                    waiter = asyncio.create_task(elector.is_leader.wait())
                    await asyncio.wait({waiter, stopper}, return_when=asyncio.FIRST_COMPLETED)
                    waiter.cancel()
                    continue
                if elector is None:
                    self.metrics.leader.set(1)
                # Leading from now: everything is looked at once (the queues also hold what
                # arrived while following).
                self._was_active = False
                self._failures = 0
                self.resync()
                self._all_pods()
                workers = [
                    asyncio.create_task(run_workers(self.clusters, self._sync_cluster, on_error=_quiet)),
                    asyncio.create_task(
                        run_workers(self.nodes, self._sync_node, workers=self.node_workers, on_error=_log("nodes"))
                    ),
                    asyncio.create_task(run_workers(self.pods, self._sync_pod, workers=2, on_error=_log("pods"))),
                ]
                watch: set[asyncio.Future[Any]] = {stopper, *workers}
                lost: asyncio.Task[None] | None = None
                if elector is not None:
                    lost = asyncio.create_task(_lost(elector, self._elector_task))
                    watch.add(lost)
                await asyncio.wait(watch, return_when=asyncio.FIRST_COMPLETED)
                for task in workers:
                    task.cancel()
                if lost is not None:
                    lost.cancel()
                await asyncio.gather(*workers, return_exceptions=True)
                failed = [t.exception() for t in workers if t.done() and not t.cancelled() and t.exception()]
                for exc in failed:
                    log.error("a worker stopped: %r", exc)
                if failed and not stop.is_set():
                    await asyncio.sleep(1.0)  # then start the workers again, without spinning
        finally:
            stopper.cancel()


async def _lost(elector: Any, task: asyncio.Task[None] | None) -> None:
    """Returns when ``elector`` no longer holds the Lease, or stopped renewing it (its task ended)."""
    follower = asyncio.ensure_future(elector.is_follower.wait())
    try:
        await asyncio.wait({follower, *([task] if task is not None else [])}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        follower.cancel()
    if task is not None and task.done():
        elector.is_leader.clear()  # nothing renews the Lease any more: stop leading
        elector.is_follower.set()


def _cluster_fingerprint(obj: KubeObject) -> tuple[Any, ...]:
    meta = metadata(obj)
    return (
        meta.get("uid"), meta.get("generation"), meta.get("deletionTimestamp"), tuple(meta.get("finalizers") or ()),
        repr(sorted((meta.get("labels") or {}).items())), repr(sorted((meta.get("annotations") or {}).items())),
    )  # fmt: skip


def _object_key(obj: KubeObject) -> str:
    """``namespace/name``: the key of a pod (or claim) on the work queues."""
    meta = metadata(obj)
    return f"{meta.get('namespace') or ''}/{meta.get('name')}"


def _quiet(key: str, exc: BaseException) -> None:
    return None  # the GPUCluster sync logs its own failures


def _log(queue: str) -> Any:
    def on_error(key: str, exc: BaseException) -> None:
        log.warning("sync failed queue=%s key=%s error=%s", queue, key, exc)

    return on_error


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
    node_workers: int = DEFAULT_NODE_WORKERS,
) -> Controller:
    """Run the controller until ``stop`` is set; serves /healthz, /readyz, /metrics on ``health_port``.

    ``allocator_options`` (kubernetes_version, feature_gates) are what pending pods are explained with.
    """
    controller = Controller(
        kube, namespace=namespace, env=env, leader_election=leader_election,
        template_grace_period=template_grace_period, delete_stranded_pods=delete_stranded_pods,
        node_workers=node_workers,
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
