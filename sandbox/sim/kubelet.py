"""Simulated GPU nodes: Node registration, the NVIDIA DRA kubelet plugin's ResourceSlices, and a
kubelet that starts bound pods.

* ``plan_nodes`` turns ``--nodes/--gpus-per-node/--mix`` into node plans (model, GPU count, MIG
  layout) and ``register_nodes`` creates the Nodes (``gpucluster.sandbox.sim.gpunodes.node_object``:
  NFD and GPU Feature Discovery labels, ``feature.node.kubernetes.io/pci-10de.present=true``).
* ``SlicePublisher``: while a pod of a DaemonSet named ``nvidia-dra-driver-kubelet-plugin`` (any
  namespace) runs on a simulated node (phase Running, not being deleted), the node publishes the
  slice the GPU kubelet plugin publishes (``node_slices``: one pool named after the node, created
  with ``generateName: <node>-gpu.nvidia.com-``, owned by the stored Node's uid); with a
  ``compute-domains`` container in the pod, fabric-attached nodes (GB200) also publish the
  compute-domain slice. When no such pod runs there any more, its slices are deleted at once
  (the kubelet waits 30 s for a restarting plugin). With ``follow_pods=False`` (the workload,
  scheduler or kubelet simulation is off, so no daemon pod would ever run) the DaemonSet's
  selection stands in for its pods: its template's nodeSelector, required node affinity and
  tolerations (plus the DaemonSet controller's defaults) against the node's labels and taints.
* ``Kubelet``: a pod bound to an existing node (``spec.nodeName``) whose claims are allocated and
  reserved for it becomes Running and Ready (conditions, container statuses, pod and host IPs,
  start time). A pod asking for extended resources the node does not have is rejected as the
  kubelet's admission does (phase Failed, reason ``OutOf<resource>``).
"""

from __future__ import annotations

import datetime as dt
import hashlib
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpucluster import timestamps
from gpucluster.kube import predicates
from gpucluster.sandbox.apiserver.core import ApiCore, Context
from gpucluster.sandbox.apiserver.errors import ApiError
from gpucluster.sandbox.apiserver.store import DELETED, Event
from gpucluster.sandbox.sim import gpunodes as simulate
from gpucluster.sandbox.sim import process
from gpucluster.sandbox.sim.base import Controller, Obj, Retry, meta
from gpucluster.sandbox.sim.events import EventRecorder
from gpucluster.sandbox.sim.process import ProcessRuntime

KUBELET_PLUGIN = "nvidia-dra-driver-kubelet-plugin"
OUR_DRIVERS = (simulate.GPU_DRIVER, simulate.COMPUTE_DOMAIN_DRIVER)
NODES = ("", "nodes")
PODS = ("", "pods")
DAEMONSETS = ("apps", "daemonsets")
SLICES = ("resource.k8s.io", "resourceslices")
CLAIMS = ("resource.k8s.io", "resourceclaims")
SECRETS = ("", "secrets")
CONFIGMAPS = ("", "configmaps")

# MIG layouts of the "-mig" mix entries: every other GPU (minor 0, 2, ...) is partitioned,
# alternating between seven 1g devices and a 3g + 2g + 1g split.
MIG_LAYOUTS: tuple[tuple[str, ...], ...] = (
    ("1g.10gb",) * 7,
    ("3g.40gb", "2g.20gb", "1g.10gb"),
)
GB200_MIG_LAYOUTS: tuple[tuple[str, ...], ...] = (
    ("1g.23gb",) * 7,
    ("2g.47gb", "1g.23gb", "1g.23gb"),
)


@dataclass(frozen=True)
class NodePlan:
    name: str
    model: str
    gpus: int
    mig: Mapping[int, tuple[str, ...]] = field(default_factory=dict)

    def node(self, seed: int = 0) -> Obj:
        return simulate.node_object(self.name, self.model, self.gpus, mig_gpus=self.mig, seed=seed)

    def slices(self, owner_uid: str, *, compute_domains: bool, seed: int = 0) -> list[Obj]:
        out = simulate.node_slices(self.name, self.model, self.gpus, mig_gpus=self.mig, seed=seed, owner_uid=owner_uid)
        if compute_domains and simulate.GPU_MODELS[self.model].fabric_attached:
            out.append(simulate.compute_domain_slice(self.name, seed=seed, owner_uid=owner_uid))
        for s in out:
            s["metadata"].pop("name", None)  # the API server names it from generateName
        return out


@dataclass(frozen=True)
class MixEntry:
    model: str
    mig: bool
    gpus: int | None


def parse_mix(text: str) -> list[MixEntry]:
    """``h100,a100-mig,l4:4,gb200`` -> entries (model key, MIG, optional GPU count). Raises ValueError."""
    entries = []
    for raw in text.split(","):
        item = raw.strip().lower()
        if not item:
            continue
        name, _, count = item.partition(":")
        mig = name.endswith("-mig")
        model = name.removesuffix("-mig").upper()
        if model not in simulate.GPU_MODELS:
            known = ", ".join(k.lower() for k in simulate.GPU_MODELS)
            raise ValueError(f"unknown GPU model {name!r} (known: {known}, each optionally with -mig and :count)")
        if mig and not simulate.GPU_MODELS[model].mig_capable:
            raise ValueError(f"{model} does not support MIG")
        gpus = None
        if count:
            if not count.isdigit() or not 0 < int(count) <= 64:
                raise ValueError(f"{item!r}: the GPU count must be between 1 and 64")
            gpus = int(count)
        entries.append(MixEntry(model, mig, gpus))
    if not entries:
        raise ValueError("empty mix")
    return entries


def plan_nodes(count: int, gpus_per_node: int, mix: Sequence[MixEntry], *, prefix: str = "gpu-node") -> list[NodePlan]:
    """Node ``i`` gets ``mix[i % len(mix)]``."""
    plans = []
    for i in range(count):
        entry = mix[i % len(mix)]
        gpus = entry.gpus if entry.gpus is not None else gpus_per_node
        mig: dict[int, tuple[str, ...]] = {}
        if entry.mig:
            layouts = GB200_MIG_LAYOUTS if entry.model == "GB200" else MIG_LAYOUTS
            for k, minor in enumerate(range(0, gpus, 2)):
                mig[minor] = layouts[k % len(layouts)]
        plans.append(NodePlan(simulate.node_name(i, prefix=prefix), entry.model, gpus, mig))
    return plans


async def register_nodes(core: ApiCore, plans: Iterable[NodePlan], *, seed: int = 0) -> int:
    """Create the Nodes that do not exist yet (as the kubelets register them)."""
    rt = core.registry.get("", "v1", "nodes")
    assert rt is not None
    ctx = Context(user={"username": "system:node", "groups": ["system:nodes"]}, field_manager="kubelet")
    created = 0
    for plan in plans:
        if core.store.get(NODES, "", plan.name) is not None:
            continue
        await core.create(rt, "", plan.node(seed), ctx, managed=False)
        created += 1
    return created


def _selects(ds: Obj, node: Obj) -> bool:
    if meta(ds).get("deletionTimestamp"):
        return False
    template_spec = ((ds.get("spec") or {}).get("template") or {}).get("spec") or {}
    return predicates.filter_node(template_spec, node, daemon=True) is None


def _wants_compute_domains(ds: Obj) -> bool:
    template_spec = ((ds.get("spec") or {}).get("template") or {}).get("spec") or {}
    return any(c.get("name") == "compute-domains" for c in template_spec.get("containers") or [])


def plugin_pod(pod: Obj) -> tuple[str, bool] | None:
    """(node, runs the compute-domains container) for a running pod of the kubelet-plugin DaemonSet."""
    md = meta(pod)
    spec = pod.get("spec") or {}
    if md.get("deletionTimestamp") or not spec.get("nodeName"):
        return None
    if (pod.get("status") or {}).get("phase") != "Running":
        return None
    if not any(
        ref.get("kind") == "DaemonSet" and ref.get("name") == KUBELET_PLUGIN and ref.get("controller")
        for ref in md.get("ownerReferences") or []
    ):
        return None
    compute_domains = any(c.get("name") == "compute-domains" for c in spec.get("containers") or [])
    return str(spec["nodeName"]), compute_domains


class SlicePublisher(Controller):
    """Publishes a simulated node's ResourceSlices while the DRA kubelet-plugin DaemonSet selects it."""

    name = "slice-publisher"
    username = "system:serviceaccount:nvidia-dra-driver:nvidia-dra-driver-kubeletplugin"
    field_manager = "gpu.nvidia.com"
    backoff_max = 2.0

    def __init__(self, core: ApiCore, plans: Iterable[NodePlan], *, seed: int = 0, follow_pods: bool = False) -> None:
        super().__init__(core)
        self.plans = {p.name: p for p in plans}
        self.seed = seed
        self.follow_pods = follow_pods
        self._slices: dict[str, set[str]] = {}  # node -> names of our drivers' slices
        self._plugins: dict[str, dict[tuple[str, str], bool]] = {}  # node -> running plugin pods -> compute domains
        self._plugin_node: dict[tuple[str, str], str] = {}

    def initial_keys(self) -> Iterable[Hashable]:
        for s in self.core.store.iter(SLICES):
            self._index(s, present=True)
        if self.follow_pods:
            for pod in self.core.store.iter(PODS):
                self._index_pod(pod, present=True)
        return sorted(self.plans, key=_natural)

    def _index_pod(self, pod: Obj, *, present: bool) -> list[str]:
        """Track running kubelet-plugin pods; returns the nodes whose plugin pods changed."""
        key = (str(meta(pod).get("namespace")), str(meta(pod).get("name")))
        before = self._plugin_node.pop(key, None)
        was = self._plugins.get(before or "", {}).pop(key, None) if before is not None else None
        if before is not None and not self._plugins.get(before):
            self._plugins.pop(before, None)
        running = plugin_pod(pod) if present else None
        if running is not None:
            node, compute_domains = running
            self._plugin_node[key] = node
            self._plugins.setdefault(node, {})[key] = compute_domains
            if before == node and was == compute_domains:
                return []
            return [n for n in (before, node) if n is not None]
        return [before] if before is not None else []

    def _index(self, s: Obj, *, present: bool) -> str | None:
        spec = s.get("spec") or {}
        node = spec.get("nodeName")
        if not node or spec.get("driver") not in OUR_DRIVERS:
            return None
        names = self._slices.setdefault(str(node), set())
        if present:
            names.add(str(meta(s)["name"]))
        else:
            names.discard(str(meta(s)["name"]))
        return str(node)

    def on_event(self, event: Event) -> None:
        if event.resource == SLICES:
            node = self._index(event.obj, present=event.type != DELETED)
            if node in self.plans and event.type == DELETED:
                self.enqueue(node)  # deleted by someone else: publish again if still selected
        elif event.resource == PODS:
            if self.follow_pods:
                for node in self._index_pod(event.obj, present=event.type != DELETED):
                    if node in self.plans:
                        self.enqueue(node)
        elif event.resource == DAEMONSETS:
            if self.follow_pods or meta(event.obj).get("name") != KUBELET_PLUGIN:
                return
            old = event.old
            if old is not None and event.type != DELETED:
                same = (old.get("spec") or {}).get("template") == (event.obj.get("spec") or {}).get("template")
                if same and bool(meta(old).get("deletionTimestamp")) == bool(meta(event.obj).get("deletionTimestamp")):
                    return
            for name in self.plans:
                self.enqueue(name)
        elif event.resource == NODES:
            name = str(meta(event.obj).get("name"))
            if name not in self.plans:
                return
            if event.type == DELETED or predicates.node_changed(event.old, event.obj):
                self.enqueue(name)

    def _plugin_daemonsets(self) -> list[Obj]:
        out = []
        for ds in self.core.store.iter(DAEMONSETS):
            if meta(ds).get("name") == KUBELET_PLUGIN:
                out.append(ds)
        return out

    async def sync(self, key: Any) -> None:
        name = str(key)
        plan = self.plans.get(name)
        node = self.core.store.get(NODES, "", name)
        if plan is None or node is None:
            return
        if self.follow_pods:
            plugins = self._plugins.get(name) or {}
            publish, compute_domains = bool(plugins), any(plugins.values())
        else:
            selecting = [ds for ds in self._plugin_daemonsets() if _selects(ds, node)]
            publish, compute_domains = bool(selecting), any(_wants_compute_domains(ds) for ds in selecting)
        existing = [s for n in sorted(self._slices.get(name, ())) if (s := self.core.store.get(SLICES, "", n))]
        rt = self.rt("resource.k8s.io", "v1", "resourceslices")
        ctx = self.context()
        uid = str(meta(node).get("uid"))
        if not publish:
            for s in existing:
                await self._delete(rt, s, ctx)
            return
        wanted = plan.slices(uid, compute_domains=compute_domains, seed=self.seed)
        have: dict[str, Obj] = {}
        for s in existing:
            owners = meta(s).get("ownerReferences") or []
            driver = str((s.get("spec") or {}).get("driver"))
            if not any(o.get("uid") == uid for o in owners) or driver in have:
                await self._delete(rt, s, ctx)  # a previous incarnation of the node, or a duplicate
                continue
            have[driver] = s
        wanted_drivers = {str(w["spec"]["driver"]) for w in wanted}
        for driver, s in have.items():
            if driver not in wanted_drivers:
                await self._delete(rt, s, ctx)
        for w in wanted:
            if str(w["spec"]["driver"]) not in have:
                await self.core.create(rt, "", w, ctx, managed=False)

    async def _delete(self, rt: Any, s: Obj, ctx: Context) -> None:
        try:
            await self.core.delete(rt, "", str(meta(s)["name"]), {}, ctx)
        except ApiError as exc:
            if exc.code != 404:
                raise


def _natural(name: str) -> tuple[str, int]:
    head, _, tail = name.rpartition("-")
    return (head, int(tail)) if tail.isdigit() else (name, -1)


def _ip(*parts: object) -> str:
    digest = hashlib.sha256("/".join(str(p) for p in parts).encode()).digest()
    return f"10.{64 + digest[0] % 64}.{digest[1]}.{1 + digest[2] % 254}"


def claim_names(pod: Obj) -> list[str] | None:
    """Names of the ResourceClaims the pod uses; None while a generated claim is not known yet."""
    spec = pod.get("spec") or {}
    statuses = {s.get("name"): s for s in (pod.get("status") or {}).get("resourceClaimStatuses") or []}
    out = []
    for entry in spec.get("resourceClaims") or []:
        if entry.get("resourceClaimName"):
            out.append(str(entry["resourceClaimName"]))
        elif entry.get("resourceClaimTemplateName"):
            status = statuses.get(entry.get("name"))
            if status is None:
                return None
            if status.get("resourceClaimName"):
                out.append(str(status["resourceClaimName"]))
    return out


def reserved_for(claim: Obj, pod: Obj) -> bool:
    uid = meta(pod).get("uid")
    return any(
        r.get("resource") == "pods" and r.get("uid") == uid
        for r in (claim.get("status") or {}).get("reservedFor") or []
    )


class Kubelet(Controller):
    """Starts pods bound to a node once their claims are allocated for them (simulated: Running
    and Ready at once; with a ``ProcessRuntime``, pods whose images have a local program run as
    processes), and stops them as a kubelet does: a pod with a deletionTimestamp is terminated
    within its grace period, reported in a terminal phase and deleted with grace 0."""

    name = "kubelet"
    username = "system:node"
    field_manager = "kubelet"

    def __init__(self, core: ApiCore, runtime: ProcessRuntime | None = None) -> None:
        super().__init__(core)
        self.runtime = runtime
        self.events = EventRecorder(core, "kubelet", self.context)
        if runtime is not None:
            runtime.notify = self.enqueue

    def start(self) -> None:
        super().start()
        self.core.pod_grace_period = self.grace_period

    async def stop(self) -> None:
        if self.core.pod_grace_period == self.grace_period:
            self.core.pod_grace_period = None
        await super().stop()
        if self.runtime is not None:
            await self.runtime.stop()

    def grace_period(self, pod: Obj, options: Obj) -> int | None:
        """The pod strategy's CheckGracefulDelete for pods this kubelet runs: a bound pod that is not
        terminal stops gracefully (the request's gracePeriodSeconds, else the pod's
        terminationGracePeriodSeconds, default 30); others go at once."""
        spec = pod.get("spec") or {}
        node = spec.get("nodeName")
        if not node or self.core.store.get(NODES, "", str(node)) is None:
            return None
        if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            return 0
        requested = options.get("gracePeriodSeconds")
        if requested is None:
            requested = spec.get("terminationGracePeriodSeconds")
        grace = 30 if requested is None else int(requested)
        return max(grace, 1) if requested is None or int(requested) != 0 else 0

    def initial_keys(self) -> Iterable[Hashable]:
        for pod in self.core.store.iter(PODS):
            if self._wants(pod) or self._stopping(pod):
                yield (meta(pod).get("namespace"), meta(pod).get("name"))

    @staticmethod
    def _wants(pod: Obj) -> bool:
        return bool((pod.get("spec") or {}).get("nodeName")) and (pod.get("status") or {}).get("phase") in (
            None,
            "Pending",
        )

    @staticmethod
    def _stopping(pod: Obj) -> bool:
        return bool((pod.get("spec") or {}).get("nodeName")) and bool(meta(pod).get("deletionTimestamp"))

    def on_event(self, event: Event) -> None:
        if event.resource == PODS:
            key = (str(meta(event.obj).get("namespace")), str(meta(event.obj).get("name")))
            ours = self.runtime is not None and self.runtime.get(key) is not None
            if ours or (event.type != DELETED and (self._wants(event.obj) or self._stopping(event.obj))):
                self.enqueue(key)
            return
        if event.resource in (SECRETS, CONFIGMAPS):
            if self.runtime is not None:
                md = meta(event.obj)
                self.runtime.object_changed(event.resource[1], str(md.get("namespace")), str(md.get("name")))
            return
        if event.type == DELETED:
            return
        if event.resource == CLAIMS:
            ns = meta(event.obj).get("namespace")
            for ref in (event.obj.get("status") or {}).get("reservedFor") or []:
                if ref.get("resource") == "pods":
                    self.enqueue((ns, ref.get("name")))
        elif event.resource == NODES and event.type == "ADDED":
            for pod in self.core.store.iter(PODS):
                if self._wants(pod) and (pod.get("spec") or {}).get("nodeName") == meta(event.obj).get("name"):
                    self.enqueue((meta(pod).get("namespace"), meta(pod).get("name")))

    async def sync(self, key: Any) -> None:
        ns, name = str(key[0]), str(key[1])
        pod = self.core.store.get(PODS, ns, name)
        running = self.runtime.get((ns, name)) if self.runtime is not None else None
        if running is not None and (pod is None or meta(pod).get("uid") != running.uid):
            assert self.runtime is not None
            self.runtime.forget((ns, name))  # gone (or replaced by a namesake): stop it, drop its files
            running = None
        if pod is None:
            return
        if running is not None:
            for type_, reason, message in running.take_events():
                await self.events.event(pod, "Pod", "v1", type_, reason, message)
        spec = pod.get("spec") or {}
        if not spec.get("nodeName"):
            return
        node = self.core.store.get(NODES, "", str(spec.get("nodeName")))
        if node is None:
            return  # the pod waits for its node (upstream: the pod GC deletes it eventually)
        now = self.core.now()
        if meta(pod).get("deletionTimestamp"):
            await self._stop_pod(pod, running, now)
            return
        if running is not None:
            await self._write_status(pod, process.pod_status(pod, running, now, image_id))
            return
        if not self._wants(pod):
            return
        missing = predicates.insufficient(spec, node)
        if missing:
            wanted = predicates.extended_requests(spec)[missing[0]]
            capacity = ((node.get("status") or {}).get("allocatable") or {}).get(missing[0], "0")
            status = {
                **(pod.get("status") or {}),
                "phase": "Failed",
                "reason": f"OutOf{missing[0]}",
                "message": f"Pod was rejected: Node didn't have enough resource: {missing[0]}, "
                f"requested: {wanted}, used: 0, capacity: {capacity}",
                "startTime": now,
            }
            await self._write_status(pod, status)
            return
        names = claim_names(pod)
        if names is None:
            raise Retry("waiting for the pod's ResourceClaims to be created")
        for claim_name in names:
            claim = self.core.store.get(CLAIMS, ns, claim_name)
            if claim is None or not (claim.get("status") or {}).get("allocation") or not reserved_for(claim, pod):
                return  # NodePrepareResources would fail; a claim event wakes us again
        if self.runtime is not None and self.runtime.runs(pod) and not spec.get("hostNetwork"):
            started = self.runtime.start(pod, host_ip(node))
            await self._write_status(pod, process.pod_status(pod, started, now, image_id))
            return
        await self._write_status(pod, running_status(pod, node, now))

    async def _stop_pod(self, pod: Obj, running: process.PodRuntime | None, now: str) -> None:
        """Terminate (processes: SIGTERM, SIGKILL after the grace period left), report the terminal
        status, then delete with grace 0 as the kubelet's status manager does."""
        md = meta(pod)
        if running is not None:
            if not running.finished:
                now_dt = self.core.clock() if self.core.clock else dt.datetime.now(dt.UTC)
                running.terminate(seconds_left(md.get("deletionTimestamp"), now_dt))
                if not running.finished:
                    await self._write_status(pod, process.pod_status(pod, running, now, image_id))
                    return  # the runtime wakes us once its processes are down
            status = process.pod_status(pod, running, now, image_id)
        else:
            status = terminated_status(pod, now)
        if status != pod.get("status"):
            pod = await self._write_status(pod, status)
        rt = self.rt("", "v1", "pods")
        try:
            await self.core.delete(
                rt,
                str(md["namespace"]),
                str(md["name"]),
                {"gracePeriodSeconds": 0, "preconditions": {"uid": md.get("uid")}},
                self.context(),
            )
        except ApiError as exc:
            if exc.code not in (404, 409):
                raise

    async def _write_status(self, pod: Obj, status: Obj) -> Obj:
        if status == pod.get("status"):
            return pod
        rt = self.rt("", "v1", "pods")
        md = meta(pod)
        body = {**pod, "status": status}
        return await self.core.update(
            rt, str(md["namespace"]), str(md["name"]), body, self.context(), subresource="status"
        )


def seconds_left(deletion_timestamp: Any, now: dt.datetime) -> float:
    """What remains of a pod's grace period at ``now`` (0 once over, or for an unreadable timestamp)."""
    try:
        when = timestamps.parse(str(deletion_timestamp))
    except ValueError:
        return 0.0
    return max((when - now).total_seconds(), 0.0)


def host_ip(node: Obj) -> str:
    return str(
        next(
            (
                a.get("address")
                for a in (node.get("status") or {}).get("addresses") or []
                if a.get("type") == "InternalIP"
            ),
            "10.0.0.1",
        )
    )


def terminated_status(pod: Obj, now: str) -> Obj:
    """A simulated pod after its containers stopped on deletion: they exit 0 on SIGTERM at once, so
    the pod is Succeeded (a pod that never started its containers: their status unknown, Failed)."""
    status = dict(pod.get("status") or {})
    if status.get("phase") in ("Succeeded", "Failed"):
        return status
    started = status.get("phase") == "Running"
    out = []
    for c in status.get("containerStatuses") or []:
        began = (c.get("state") or {}).get("running", {}).get("startedAt")
        terminated: Obj = (
            {"exitCode": 0, "reason": "Completed", "startedAt": began, "finishedAt": now}
            if started
            else {
                "exitCode": 137,
                "reason": "ContainerStatusUnknown",
                "message": "The container could not be located when the pod was terminated",
                "startedAt": None,
                "finishedAt": now,
            }
        )
        if c.get("containerID"):
            terminated["containerID"] = c["containerID"]
        out.append({**c, "ready": False, "started": False, "state": {"terminated": terminated}})
    conditions = []
    for cond in status.get("conditions") or []:
        if (
            cond.get("type") in ("Ready", "ContainersReady", "PodReadyToStartContainers")
            and cond.get("status") == "True"
        ):
            cond = {**cond, "status": "False", "lastTransitionTime": now}
            if cond["type"] != "PodReadyToStartContainers":
                cond["reason"] = "PodCompleted"
        conditions.append(cond)
    status.update(phase="Succeeded" if started else "Failed", conditions=conditions)
    if out:
        status["containerStatuses"] = out
    return status


def image_id(image: str) -> str:
    """What a container runtime reports as imageID: ``<repository>@sha256:<digest>`` (the image's own
    digest when it names one; ``registry:port/repo:tag`` keeps the port)."""
    repository, _, digest = image.partition("@")
    if not digest:
        head, sep, last = repository.rpartition("/")
        repository = head + sep + last.split(":", 1)[0]
        digest = f"sha256:{hashlib.sha256(image.encode()).hexdigest()}"
    return f"{repository}@{digest}"


def running_status(pod: Obj, node: Obj, now: str) -> Obj:
    """The status a kubelet reports for a pod whose containers started and are ready."""
    md, spec = meta(pod), pod.get("spec") or {}
    status = dict(pod.get("status") or {})
    host_ip = next(
        (a.get("address") for a in (node.get("status") or {}).get("addresses") or [] if a.get("type") == "InternalIP"),
        "10.0.0.1",
    )
    pod_ip = host_ip if spec.get("hostNetwork") else _ip(md.get("namespace"), md.get("name"), md.get("uid"))
    scheduled = next((c for c in status.get("conditions") or [] if c.get("type") == "PodScheduled"), None)
    conditions = [
        {"type": "PodReadyToStartContainers", "status": "True", "lastProbeTime": None, "lastTransitionTime": now},
        {"type": "Initialized", "status": "True", "lastProbeTime": None, "lastTransitionTime": now},
        {"type": "Ready", "status": "True", "lastProbeTime": None, "lastTransitionTime": now},
        {"type": "ContainersReady", "status": "True", "lastProbeTime": None, "lastTransitionTime": now},
        scheduled or {"type": "PodScheduled", "status": "True", "lastProbeTime": None, "lastTransitionTime": now},
    ]

    def container_status(c: Obj, *, init: bool) -> Obj:
        digest = hashlib.sha256(f"{md.get('uid')}/{c.get('name')}".encode()).hexdigest()
        image = str(c.get("image") or "")
        out: Obj = {
            "name": c.get("name"),
            "image": image,
            "imageID": image_id(image),
            "containerID": f"containerd://{digest}",
            "restartCount": 0,
        }
        if init:
            out.update(
                ready=True,
                started=False,
                state={"terminated": {"exitCode": 0, "reason": "Completed", "startedAt": now, "finishedAt": now}},
            )
        else:
            out.update(ready=True, started=True, state={"running": {"startedAt": now}})
        return out

    status.update(
        phase="Running",
        conditions=conditions,
        hostIP=host_ip,
        hostIPs=[{"ip": host_ip}],
        podIP=pod_ip,
        podIPs=[{"ip": pod_ip}],
        startTime=status.get("startTime") or now,
        containerStatuses=[container_status(c, init=False) for c in spec.get("containers") or []],
    )
    if spec.get("initContainers"):
        status["initContainerStatuses"] = [container_status(c, init=True) for c in spec["initContainers"]]
    return status
