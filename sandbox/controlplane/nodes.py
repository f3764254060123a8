"""The kubelet stand-in of the real control plane: simulated GPU nodes against a real kube-apiserver.

One process serves every simulated node, each under its own node identity
(``system:node:<name>`` in ``system:nodes``, so the Node authorizer and NodeRestriction judge it
as they judge a kubelet). Per node it:

* registers the Node (NFD and GPU Feature Discovery labels, ``gpucluster.sandbox.sim.gpunodes``) and renews
  its Lease in ``kube-node-lease`` every 10 s, as a kubelet does, so the node lifecycle controller
  keeps it Ready;
* watches the pods bound to it (``spec.nodeName``). A pod whose claims are allocated and reserved
  for it starts: pods of the project's own image run as local processes
  (``gpucluster.sandbox.sim.process.ProcessRuntime``: volumes, projected service-account tokens from the
  TokenRequest API, probes, restarts, logs), others are reported Running and Ready at once. A pod
  with a deletionTimestamp is stopped within its grace period and deleted with grace 0;
* serves the kubelet API's container logs for kube-apiserver (:mod:`.kubeletapi`), so
  ``kubectl logs`` reads a process pod's log;
* (once for all nodes) proxies each Service's ClusterIP to its ready pods (:mod:`.proxy`);
* publishes the node's NVIDIA ResourceSlices while a pod of the DRA kubelet-plugin DaemonSet runs
  there, under the simulated DRA driver's identity, which has only a DRA kubelet plugin's rights.

Run as ``python -m gpucluster.sandbox.controlplane.nodes --pki-dir D --nodes N ...`` by
:class:`sandbox.controlplane.cluster.ControlPlane`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import logging
import signal
from collections.abc import Hashable
from pathlib import Path
from typing import Any

from gpucluster import timestamps
from gpucluster.clusterstate import ClusterState
from gpucluster.clusterstate import metadata as meta
from gpucluster.kube.client import Kube, KubeError
from gpucluster.kube.reflector import Reflector, Resource
from gpucluster.kube.workqueue import ItemExponentialFailureRateLimiter, WorkQueue, run_workers
from gpucluster.sandbox.controlplane import kubeletapi, pki
from gpucluster.sandbox.controlplane.proxy import ServiceProxy
from gpucluster.sandbox.sim import process
from gpucluster.sandbox.sim.images import ImageStore
from gpucluster.sandbox.sim.kubelet import (
    NodePlan,
    claim_names,
    image_id,
    parse_mix,
    plan_nodes,
    plugin_pod,
    reserved_for,
    running_status,
    seconds_left,
    terminated_status,
)

Obj = dict[str, Any]
log = logging.getLogger("sandbox.controlplane.nodes")

LEASE_SECONDS = 40
RENEW_EVERY = 10.0
OBJECT_REFRESH = 5.0
"""How often the secrets and config maps a process pod reads are fetched again (the kubelet's
TTL-based object cache)."""
PLUGIN_RULES = [
    # What NVIDIA's DRA driver chart grants its kubelet plugin (and no more).
    {"apiGroups": ["resource.k8s.io"], "resources": ["resourceslices"], "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"]},
    {"apiGroups": ["resource.k8s.io"], "resources": ["resourceclaims"], "verbs": ["get"]},
    {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]},
]  # fmt: skip
OUR_DRIVERS = ("gpu.nvidia.com", "compute-domain.nvidia.com")


def plans(count: int, gpus_per_node: int, mix: str) -> list[NodePlan]:
    return plan_nodes(count, gpus_per_node, parse_mix(mix))


def now_rfc3339() -> str:
    return timestamps.rfc3339()


def now_micro() -> str:
    return timestamps.rfc3339_micro()


def node_address(index: int) -> str:
    """A simulated node's InternalIP: a loopback address no pod gets (pods draw 127.1-254.x.y), so
    whatever kube-apiserver dials for a node (logs, exec) stays on this machine."""
    return f"127.0.1.{1 + index}"


def registration(plan: NodePlan, kubelet_version: str, index: int = 0, kubelet_port: int = 10250) -> Obj:
    """The Node a kubelet registers: the simulated node without what the API server assigns."""
    node = plan.node()
    md = node["metadata"]
    for key in ("uid", "creationTimestamp"):
        md.pop(key, None)
    status = node["status"]
    status["addresses"] = [
        {"type": "InternalIP", "address": node_address(index)},
        {"type": "Hostname", "address": plan.name},
    ]
    status["daemonEndpoints"] = {"kubeletEndpoint": {"Port": kubelet_port}}
    status["nodeInfo"]["kubeletVersion"] = f"v{kubelet_version}"
    stamp = now_rfc3339()
    for condition in status.get("conditions") or []:
        condition["lastHeartbeatTime"] = stamp
        condition["lastTransitionTime"] = stamp
    return node


async def install_plugin_rbac(admin: Kube) -> None:
    """The simulated DRA driver's RBAC, as its chart installs it."""
    name = "gpucluster-simulated-dra-kubelet-plugin"
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": name},
        "rules": PLUGIN_RULES,
    }
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": pki.DRA_PLUGIN.user}],
    }  # fmt: skip
    for plural, obj in (("clusterroles", role), ("clusterrolebindings", binding)):
        path = f"/apis/rbac.authorization.k8s.io/v1/{plural}/{name}"
        await admin.request(
            "PATCH", path, query=[("fieldManager", "gpucluster-sandbox"), ("force", "true")],
            body=obj, content_type="application/apply-patch+yaml",
        )  # fmt: skip


class NodeRunner:
    """One simulated node: registration, lease, pods, ResourceSlices."""

    def __init__(
        self, plan: NodePlan, kube: Kube, plugin: Kube, runtime: process.ProcessRuntime | None, version: str, index: int
    ) -> None:
        self.plan = plan
        self.index = index
        self.kubelet_port = 0  # the kubelet API's, once it listens
        self._kubelet_api: Any = None  # its aiohttp AppRunner
        self.name = plan.name
        self.kube = kube
        self.plugin = plugin
        self.runtime = runtime
        self.version = version
        self.state = ClusterState()
        self.queue: WorkQueue[Hashable] = WorkQueue(f"node-{self.name}", ItemExponentialFailureRateLimiter(0.1, 5.0))
        self.node: Obj = {}
        self.objects: dict[tuple[str, str, str], Obj | None] = {}  # (namespace, plural, name) -> object
        self._published: list[str] = []
        self._plugin_running = (False, False)  # (a plugin pod runs here, it runs compute domains)

    # -------------------------------------------------------------- node

    async def register(self) -> None:
        body = registration(self.plan, self.version, self.index, self.kubelet_port)
        try:
            self.node = await self.kube.request("POST", "/api/v1/nodes", body=body)
        except KubeError as exc:
            if exc.status != 409:
                raise
            self.node = await self.kube.get(f"/api/v1/nodes/{self.name}")
            patch = {"status": body["status"]}
            self.node = await self.kube.request(
                "PATCH", f"/api/v1/nodes/{self.name}/status", body=patch, content_type="application/merge-patch+json"
            )
        log.info("registered node=%s uid=%s", self.name, meta(self.node).get("uid"))

    async def renew_lease(self) -> None:
        path = f"/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{self.name}"
        while True:
            lease: Obj = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {
                    "name": self.name,
                    "namespace": "kube-node-lease",
                    "ownerReferences": [
                        {"apiVersion": "v1", "kind": "Node", "name": self.name, "uid": meta(self.node).get("uid")}
                    ],
                },
                "spec": {"holderIdentity": self.name, "leaseDurationSeconds": LEASE_SECONDS, "renewTime": now_micro()},
            }
            try:
                try:
                    current = await self.kube.get(path)
                    lease["metadata"]["resourceVersion"] = meta(current).get("resourceVersion")
                    await self.kube.request("PUT", path, body=lease)
                except KubeError as exc:
                    if exc.status != 404:
                        raise
                    await self.kube.request(
                        "POST", "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases", body=lease
                    )
            except Exception as exc:  # the next renewal tries again, as the kubelet's lease controller
                log.warning("lease renewal failed node=%s error=%s", self.name, exc)
            await asyncio.sleep(RENEW_EVERY)

    # -------------------------------------------------------------- pods

    def on_pod(self, kind: str, pod: Obj) -> None:
        self.queue.add((str(meta(pod).get("namespace")), str(meta(pod).get("name"))))
        self._track_plugin()

    def on_pods_listed(self, kind: str) -> None:
        for pod in self.state.list("Pod"):
            self.queue.add((str(meta(pod).get("namespace")), str(meta(pod).get("name"))))
        if self.runtime is not None:
            for key in list(self.runtime.pods):
                self.queue.add(key)
        self._track_plugin()

    def _track_plugin(self) -> None:
        running = [p for pod in self.state.list("Pod") if (p := plugin_pod(pod)) is not None and p[0] == self.name]
        now = (bool(running), any(cd for _, cd in running))
        if now != self._plugin_running:
            self._plugin_running = now
            self.queue.add("slices")

    async def sync(self, key: Hashable) -> None:
        if key == "slices":
            await self.sync_slices()
            return
        assert isinstance(key, tuple)
        ns, name = str(key[0]), str(key[1])
        pod = self.state.get("Pod", name, ns)
        running = self.runtime.get((ns, name)) if self.runtime is not None else None
        if running is not None and (pod is None or meta(pod).get("uid") != running.uid):
            assert self.runtime is not None
            self.runtime.forget((ns, name))
            running = None
        if pod is None:
            return
        if running is not None:
            for type_, reason, message in running.take_events():
                await self.event(pod, type_, reason, message)
        now = now_rfc3339()
        if meta(pod).get("deletionTimestamp"):
            await self.stop_pod(pod, running, now)
            return
        if running is not None:
            await self.write_status(pod, process.pod_status(pod, running, now, image_id))
            return
        if (pod.get("status") or {}).get("phase") not in (None, "Pending"):
            return
        names = claim_names(pod)
        if names is None:
            return  # the resourceclaim controller has not created the pod's claims yet
        for claim_name in names:
            try:
                claim = await self.kube.get(f"/apis/resource.k8s.io/v1/namespaces/{ns}/resourceclaims/{claim_name}")
            except KubeError as exc:
                if exc.status in (403, 404):
                    self.queue.add_after(key, 1.0)
                    return
                raise
            if not (claim.get("status") or {}).get("allocation") or not reserved_for(claim, pod):
                self.queue.add_after(key, 1.0)  # NodePrepareResources would fail: try again
                return
        if self.runtime is not None and self.runtime.runs(pod) and not (pod.get("spec") or {}).get("hostNetwork"):
            await self.fetch_objects(pod)
            started = self.runtime.start(pod, self.host_ip)
            await self.write_status(pod, process.pod_status(pod, started, now, image_id))
            return
        await self.write_status(pod, running_status(pod, self.node, now))

    @property
    def host_ip(self) -> str:
        for address in (self.node.get("status") or {}).get("addresses") or []:
            if address.get("type") == "InternalIP":
                return str(address.get("address"))
        return "127.0.0.1"

    async def stop_pod(self, pod: Obj, running: process.PodRuntime | None, now: str) -> None:
        md = meta(pod)
        if running is not None:
            if not running.finished:
                running.terminate(seconds_left(md.get("deletionTimestamp"), dt.datetime.now(dt.UTC)))
                if not running.finished:
                    await self.write_status(pod, process.pod_status(pod, running, now, image_id))
                    return  # the runtime notifies once its processes are down
            status = process.pod_status(pod, running, now, image_id)
        else:
            status = terminated_status(pod, now)
        await self.write_status(pod, status)
        path = f"/api/v1/namespaces/{md['namespace']}/pods/{md['name']}"
        body = {
            "apiVersion": "v1",
            "kind": "DeleteOptions",
            "gracePeriodSeconds": 0,
            "preconditions": {"uid": md.get("uid")},
        }
        try:
            await self.kube.request("DELETE", path, body=body)
        except KubeError as exc:
            if exc.status not in (404, 409):
                raise

    async def write_status(self, pod: Obj, status: Obj) -> None:
        if status == pod.get("status"):
            return
        md = meta(pod)
        path = f"/api/v1/namespaces/{md['namespace']}/pods/{md['name']}/status"
        patch = {"metadata": {"uid": md.get("uid")}, "status": status}
        try:
            updated = await self.kube.request("PATCH", path, body=patch, content_type="application/merge-patch+json")
        except KubeError as exc:
            if exc.status == 404:
                return
            raise
        self.state.upsert("Pod", updated)

    async def event(self, pod: Obj, type_: str, reason: str, message: str) -> None:
        md = meta(pod)
        ns = str(md.get("namespace"))
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": f"{md.get('name')}.", "namespace": ns},
            "involvedObject": {"apiVersion": "v1", "kind": "Pod", "namespace": ns, "name": md.get("name"), "uid": md.get("uid")},
            "type": type_, "reason": reason, "message": message[:1024],
            "source": {"component": "kubelet", "host": self.name},
            "firstTimestamp": now_rfc3339(), "lastTimestamp": now_rfc3339(), "count": 1,
            "reportingComponent": "kubelet", "reportingInstance": self.name,
        }  # fmt: skip
        with contextlib.suppress(KubeError):
            await self.kube.request("POST", f"/api/v1/namespaces/{ns}/events", body=body)

    # -------------------------------------------------------------- secrets, config maps, tokens

    def lookup(self, namespace: str, plural: str, name: str) -> Obj | None:
        return self.objects.get((namespace, plural, name))

    async def fetch_objects(self, pod: Obj) -> None:
        """Fetch what the pod's volumes and env read, as the node may once the pod is bound to it."""
        ns = str(meta(pod).get("namespace"))
        for plural, name in referenced(pod):
            try:
                self.objects[(ns, plural, name)] = await self.kube.get(f"/api/v1/namespaces/{ns}/{plural}/{name}")
            except KubeError as exc:
                if exc.status not in (403, 404):
                    raise
                self.objects[(ns, plural, name)] = None

    async def refresh_objects(self) -> None:
        while True:
            await asyncio.sleep(OBJECT_REFRESH)
            if self.runtime is None:
                continue
            for (ns, name), runtime in list(self.runtime.pods.items()):
                pod = self.state.get("Pod", name, ns)
                if pod is None:
                    continue
                before = {k: v for k, v in self.objects.items() if k[0] == ns}
                with contextlib.suppress(Exception):
                    await self.fetch_objects(pod)
                for key, value in self.objects.items():
                    if key[0] == ns and before.get(key) != value:
                        runtime.refresh(key[1], key[2])

    async def issue_token(self, pod: Obj, source: Obj, ttl: int) -> str:
        md, spec = meta(pod), pod.get("spec") or {}
        account = str(spec.get("serviceAccountName") or "default")
        body: Obj = {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {
                "expirationSeconds": ttl,
                "boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": md.get("name"), "uid": md.get("uid")},
            },
        }
        if source.get("audience"):
            body["spec"]["audiences"] = [str(source["audience"])]
        path = f"/api/v1/namespaces/{md.get('namespace')}/serviceaccounts/{account}/token"
        answer = await self.kube.request("POST", path, body=body)
        return str((answer.get("status") or {}).get("token") or "")

    # -------------------------------------------------------------- ResourceSlices

    async def sync_slices(self) -> None:
        publish, compute_domains = self._plugin_running
        base = "/apis/resource.k8s.io/v1/resourceslices"
        listed = await self.plugin.get(base, [("fieldSelector", f"spec.nodeName={self.name}")])
        existing = [s for s in listed.get("items") or [] if (s.get("spec") or {}).get("driver") in OUR_DRIVERS]
        uid = str(meta(self.node).get("uid"))
        wanted = self.plan.slices(uid, compute_domains=compute_domains) if publish else []
        wanted_drivers = {str(w["spec"]["driver"]) for w in wanted}
        have: set[str] = set()
        for s in existing:
            driver = str(s["spec"]["driver"])
            owned = any(o.get("uid") == uid for o in meta(s).get("ownerReferences") or [])
            if driver in wanted_drivers and owned and driver not in have:
                have.add(driver)
                continue
            with contextlib.suppress(KubeError):
                await self.plugin.request("DELETE", f"{base}/{meta(s)['name']}")
        for w in wanted:
            if str(w["spec"]["driver"]) not in have:
                await self.plugin.request("POST", base, body=w)
        log.info("slices node=%s published=%s", self.name, sorted(wanted_drivers))

    # -------------------------------------------------------------- run

    async def serve_kubelet_api(self, pki_dir: Path) -> None:
        def pod(namespace: str, name: str) -> Obj | None:
            return self.state.get("Pod", name, namespace)

        runtime = self.runtime

        def logs(namespace: str, name: str, container: str, previous: bool) -> Any:
            return runtime.log_file(namespace, name, container, previous=previous) if runtime is not None else None

        ctx = kubeletapi.server_context(
            pki_dir / f"kubelet-{self.name}.crt", pki_dir / f"kubelet-{self.name}.key", pki_dir / "ca.crt"
        )
        self._kubelet_api, self.kubelet_port = await kubeletapi.serve(
            kubeletapi.app(pod, logs), node_address(self.index), ctx
        )

    async def run(self) -> None:
        await self.register()
        pods = Resource("Pod", "/api/v1/pods", field_selector=f"spec.nodeName={self.name}")
        reflector = Reflector(self.kube, pods, self.state, on_event=self.on_pod, on_list=self.on_pods_listed)
        await asyncio.gather(
            reflector.run(),
            self.renew_lease(),
            self.refresh_objects(),
            run_workers(self.queue, self.sync, on_error=lambda key, exc: log.warning("sync %s failed: %s", key, exc)),
        )


def referenced(pod: Obj) -> list[tuple[str, str]]:
    """(plural, name) of every Secret and ConfigMap the pod's volumes and env read, and its ServiceAccount."""
    spec = pod.get("spec") or {}
    out: set[tuple[str, str]] = {("serviceaccounts", str(spec.get("serviceAccountName") or "default"))}
    for volume in spec.get("volumes") or []:
        if (secret := volume.get("secret")) and secret.get("secretName"):
            out.add(("secrets", str(secret["secretName"])))
        if (cm := volume.get("configMap")) and cm.get("name"):
            out.add(("configmaps", str(cm["name"])))
        for source in (volume.get("projected") or {}).get("sources") or []:
            if (secret := source.get("secret")) and secret.get("name"):
                out.add(("secrets", str(secret["name"])))
            if (cm := source.get("configMap")) and cm.get("name"):
                out.add(("configmaps", str(cm["name"])))
    for container in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]:
        for source in container.get("envFrom") or []:
            if (secret := source.get("secretRef")) and secret.get("name"):
                out.add(("secrets", str(secret["name"])))
            if (cm := source.get("configMapRef")) and cm.get("name"):
                out.add(("configmaps", str(cm["name"])))
        for env in container.get("env") or []:
            ref = env.get("valueFrom") or {}
            if (secret := ref.get("secretKeyRef")) and secret.get("name"):
                out.add(("secrets", str(secret["name"])))
            if (cm := ref.get("configMapKeyRef")) and cm.get("name"):
                out.add(("configmaps", str(cm["name"])))
    return sorted(out)


async def serve(args: argparse.Namespace) -> None:
    directory = Path(args.pki_dir)
    ca_pem = (directory / "ca.crt").read_text()
    admin = await Kube.connect(str(directory / f"{pki.ADMIN.file}.kubeconfig"))
    try:
        await install_plugin_rbac(admin)
    finally:
        await admin.close()
    plugin = await Kube.connect(str(directory / f"{pki.DRA_PLUGIN.file}.kubeconfig"))
    runners = []
    store = ImageStore([Path(a) for a in args.image_archive]) if args.image_archive else None
    for index, plan in enumerate(plans(args.nodes, args.gpus_per_node, args.mix)):
        kube = await Kube.connect(str(directory / f"{pki.node_identity(plan.name).file}.kubeconfig"))
        runner = NodeRunner(plan, kube, plugin, None, args.version, index)
        if args.process_pods:
            runtime = process.ProcessRuntime(
                runner.lookup,
                runner.issue_token,
                process.RuntimeOptions(root=Path(args.pods_dir) / plan.name, images=store),
            )
            runtime.api = process.ApiEndpoint(str(kube.api.configuration.host), ca_pem)
            runtime.notify = runner.queue.add
            runner.runtime = runtime
        runners.append(runner)
    proxy = ServiceProxy(lambda: [pod for r in runners for pod in r.state.list("Pod")])
    services = ClusterState()
    service_reflector = Reflector(
        runners[0].kube, Resource("Service", "/api/v1/services"), services,
        on_event=proxy.on_service, on_list=lambda kind: proxy.on_list(services.list("Service")),
    )  # fmt: skip
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    for r in runners:
        await r.serve_kubelet_api(directory)
    tasks = [asyncio.create_task(r.run(), name=f"node-{r.name}") for r in runners]
    tasks.append(asyncio.create_task(service_reflector.run(), name="service-proxy"))
    waiter = asyncio.create_task(stop.wait())
    done, _ = await asyncio.wait([waiter, *tasks], return_when=asyncio.FIRST_COMPLETED)
    for task in tasks:
        task.cancel()
    for failed in done - {waiter}:
        if not failed.cancelled() and failed.exception() is not None:
            log.error("node agent failed: %r", failed.exception())
    await proxy.close()
    for r in runners:
        if r._kubelet_api is not None:
            await r._kubelet_api.cleanup()
        if r.runtime is not None:
            await r.runtime.stop()
        await r.kube.close()
    await plugin.close()


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m gpucluster.sandbox.controlplane.nodes")
    parser.add_argument("--pki-dir", required=True)
    parser.add_argument("--nodes", type=int, default=3)
    parser.add_argument("--gpus-per-node", type=int, default=8)
    parser.add_argument("--mix", default="h100")
    parser.add_argument("--version", required=True)
    parser.add_argument("--pods-dir", required=True)
    parser.add_argument("--no-process-pods", dest="process_pods", action="store_false")
    parser.add_argument("--image-archive", action="append", default=[], help="an OCI archive the nodes hold")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    asyncio.run(serve(args))


if __name__ == "__main__":
    main()
