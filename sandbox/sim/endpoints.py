"""The EndpointSlice and Endpoints controllers (kube-controller-manager's ``endpointslice`` and
``endpoint``): for every Service with a ``selector``, the pods it selects that have an IP.

EndpointSlices (``discovery.k8s.io/v1``, served by this module: ``ensure_endpointslices``) are
named ``<service>-<5 random>``, labelled ``kubernetes.io/service-name`` and
``endpointslice.kubernetes.io/managed-by: endpointslice-controller.k8s.io``, owned by the Service,
``addressType: IPv4``; one slice per distinct set of resolved ports (a named ``targetPort`` is
looked up in each pod's container ports; a pod lacking it is left out of that port's slice), each
endpoint with ``addresses: [podIP]``, ``conditions`` (``ready``: the pod is Ready and not being
deleted, ``serving``: Ready, ``terminating``), ``nodeName`` and ``targetRef``. The core/v1
Endpoints object of the same name gets ``subsets`` with ``addresses``/``notReadyAddresses``. No
slice size limit (upstream: 100 endpoints), no topology hints, no dual-stack.
"""

from __future__ import annotations

import json
from collections.abc import Hashable, Iterable
from typing import Any

from gpucluster.kube.predicates import pod_ready
from gpucluster.sandbox.apiserver.errors import ApiError
from gpucluster.sandbox.apiserver.resources import Registry, ResourceType
from gpucluster.sandbox.apiserver.store import DELETED, Event
from gpucluster.sandbox.sim.base import Controller, Obj, meta

SERVICES = ("", "services")
PODS = ("", "pods")
SLICES = ("discovery.k8s.io", "endpointslices")
ENDPOINTS = ("", "endpoints")
SERVICE_NAME_LABEL = "kubernetes.io/service-name"
MANAGED_BY_LABEL = "endpointslice.kubernetes.io/managed-by"
MANAGED_BY = "endpointslice-controller.k8s.io"


def ensure_endpointslices(registry: Registry) -> None:
    """Serve ``discovery.k8s.io/v1 endpointslices`` and ``v1 endpoints`` unless already served."""
    if registry.get("discovery.k8s.io", "v1", "endpointslices") is None:
        registry.add(ResourceType("discovery.k8s.io", "v1", "endpointslices", "EndpointSlice", True))
    if registry.get("", "v1", "endpoints") is None:
        registry.add(ResourceType("", "v1", "endpoints", "Endpoints", True, singular="endpoints", short_names=("ep",)))


def selects(service: Obj, pod: Obj) -> bool:
    selector = (service.get("spec") or {}).get("selector") or {}
    if not selector:
        return False
    labels = meta(pod).get("labels") or {}
    return all(labels.get(k) == v for k, v in selector.items())


def resolve_target_port(port: Obj, pod: Obj) -> int | None:
    """A service port's targetPort on one pod: a number (default: the port), or a container port name."""
    target = port.get("targetPort", port.get("port"))
    if isinstance(target, int):
        return target
    text = str(target)
    if text.isdigit():
        return int(text)
    protocol = port.get("protocol") or "TCP"
    for c in (pod.get("spec") or {}).get("containers") or []:
        for p in c.get("ports") or []:
            if p.get("name") == text and (p.get("protocol") or "TCP") == protocol:
                return int(p.get("containerPort") or 0) or None
    return None


def desired(service: Obj, pods: Iterable[Obj]) -> list[tuple[list[Obj], list[Obj]]]:
    """(ports, endpoints) per slice: pods grouped by their resolved ports."""
    groups: dict[str, tuple[list[Obj], list[Obj]]] = {}
    for pod in sorted(pods, key=lambda p: str(meta(p).get("name"))):
        status = pod.get("status") or {}
        ip = status.get("podIP")
        if not ip or status.get("phase") in ("Succeeded", "Failed"):
            continue
        ports = []
        for sp in (service.get("spec") or {}).get("ports") or []:
            number = resolve_target_port(sp, pod)
            if number is None:
                continue
            entry: Obj = {"port": number, "protocol": sp.get("protocol") or "TCP"}
            entry["name"] = str(sp.get("name") or "")
            if sp.get("appProtocol"):
                entry["appProtocol"] = sp["appProtocol"]
            ports.append(entry)
        terminating = bool(meta(pod).get("deletionTimestamp"))
        ready = pod_ready(pod)
        endpoint: Obj = {
            "addresses": [str(ip)],
            "conditions": {"ready": ready and not terminating, "serving": ready, "terminating": terminating},
            "targetRef": {
                "kind": "Pod",
                "namespace": meta(pod).get("namespace"),
                "name": meta(pod).get("name"),
                "uid": meta(pod).get("uid"),
            },
        }
        node = (pod.get("spec") or {}).get("nodeName")
        if node:
            endpoint["nodeName"] = node
        key = json.dumps(ports, sort_keys=True)
        groups.setdefault(key, (ports, []))[1].append(endpoint)
    return list(groups.values())


def endpoints_subsets(groups: list[tuple[list[Obj], list[Obj]]]) -> list[Obj]:
    subsets = []
    for ports, endpoints in groups:
        ready: list[Obj] = []
        not_ready: list[Obj] = []
        for e in endpoints:
            address: Obj = {"ip": e["addresses"][0], "targetRef": e["targetRef"]}
            if e.get("nodeName"):
                address["nodeName"] = e["nodeName"]
            if e["conditions"]["terminating"]:
                continue  # Endpoints leave terminating pods out
            (ready if e["conditions"]["ready"] else not_ready).append(address)
        subset: Obj = {"ports": [{k: v for k, v in p.items() if k != "name" or v} for p in ports]}
        if ready:
            subset["addresses"] = ready
        if not_ready:
            subset["notReadyAddresses"] = not_ready
        if ready or not_ready:
            subsets.append(subset)
    return subsets


class EndpointSliceController(Controller):
    name = "endpointslice-controller"
    username = "system:serviceaccount:kube-system:endpointslice-controller"
    field_manager = "kube-controller-manager"

    def initial_keys(self) -> Iterable[Hashable]:
        return [(meta(s).get("namespace"), meta(s).get("name")) for s in self.core.store.iter(SERVICES)]

    def on_event(self, event: Event) -> None:
        md = meta(event.obj)
        if event.resource == SERVICES:
            self.enqueue((md.get("namespace"), md.get("name")))
        elif event.resource == PODS:
            if event.old is not None and event.type != DELETED and not _endpoint_changed(event.old, event.obj):
                return
            ns = str(md.get("namespace"))
            for service in self.core.store.iter(SERVICES, ns):
                if selects(service, event.obj) or (event.old is not None and selects(service, event.old)):
                    self.enqueue((ns, meta(service).get("name")))
        elif event.resource == SLICES:
            name = (md.get("labels") or {}).get(SERVICE_NAME_LABEL)
            if name and (md.get("labels") or {}).get(MANAGED_BY_LABEL) == MANAGED_BY:
                self.enqueue((md.get("namespace"), name))

    async def sync(self, key: Any) -> None:
        ns, name = str(key[0]), str(key[1])
        service = self.core.store.get(SERVICES, ns, name)
        existing = [
            s
            for s in self.core.store.iter(SLICES, ns)
            if (meta(s).get("labels") or {}).get(SERVICE_NAME_LABEL) == name
            and (meta(s).get("labels") or {}).get(MANAGED_BY_LABEL) == MANAGED_BY
        ]
        slices = self.rt("discovery.k8s.io", "v1", "endpointslices")
        ctx = self.context()
        if service is None or not (service.get("spec") or {}).get("selector") or meta(service).get("deletionTimestamp"):
            for s in existing:
                await self._delete(slices, s)
            leftover = self.core.store.get(ENDPOINTS, ns, name)
            endpoints_rt = self.core.registry.get("", "v1", "endpoints")
            if service is None and leftover is not None and endpoints_rt is not None:
                await self._delete(endpoints_rt, leftover)
            return
        pods = [p for p in self.core.store.iter(PODS, ns) if selects(service, p)]
        groups = desired(service, pods)
        if not groups:
            groups = [([], [])]  # upstream keeps one empty slice for a Service without endpoints
        owner = {
            "apiVersion": "v1",
            "kind": "Service",
            "name": name,
            "uid": meta(service).get("uid"),
            "controller": True,
            "blockOwnerDeletion": True,
        }
        labels = {**(meta(service).get("labels") or {}), SERVICE_NAME_LABEL: name, MANAGED_BY_LABEL: MANAGED_BY}
        labels.pop("service.kubernetes.io/headless", None)
        unused = list(existing)
        for ports, endpoints in groups:
            match = next((s for s in unused if (s.get("ports") or []) == ports), None) or (
                unused[0] if unused else None
            )
            body: Obj = {
                "apiVersion": "discovery.k8s.io/v1",
                "kind": "EndpointSlice",
                "addressType": "IPv4",
                "endpoints": endpoints,
                "ports": ports,
            }
            if match is None:
                body["metadata"] = {
                    "generateName": f"{name}-",
                    "namespace": ns,
                    "labels": labels,
                    "ownerReferences": [owner],
                }
                await self.core.create(slices, ns, body, ctx, managed=False)
                continue
            unused.remove(match)
            if (
                match.get("endpoints") == endpoints
                and match.get("ports") == ports
                and meta(match).get("labels") == labels
            ):
                continue
            new_md = {**meta(match), "labels": labels, "ownerReferences": [owner]}
            await self.core.update(slices, ns, str(new_md["name"]), {**body, "metadata": new_md}, ctx)
        for s in unused:
            await self._delete(slices, s)
        await self._sync_endpoints(service, groups)

    async def _sync_endpoints(self, service: Obj, groups: list[tuple[list[Obj], list[Obj]]]) -> None:
        rt = self.core.registry.get("", "v1", "endpoints")
        if rt is None:
            return
        md = meta(service)
        ns, name = str(md["namespace"]), str(md["name"])
        subsets = endpoints_subsets(groups)
        current = self.core.store.get(ENDPOINTS, ns, name)
        labels = dict(md.get("labels") or {})
        body: Obj = {"apiVersion": "v1", "kind": "Endpoints", "subsets": subsets}
        if current is None:
            body["metadata"] = {"name": name, "namespace": ns, "labels": labels}
            await self.core.create(rt, ns, body, self.context(), managed=False)
        elif (current.get("subsets") or []) != subsets or (meta(current).get("labels") or {}) != labels:
            body["metadata"] = {**meta(current), "labels": labels}
            await self.core.update(rt, ns, name, body, self.context())

    async def _delete(self, rt: ResourceType, obj: Obj) -> None:
        md = meta(obj)
        try:
            await self.core.delete(rt, str(md["namespace"]), str(md["name"]), {}, self.context())
        except ApiError as exc:
            if exc.code != 404:
                raise


def _endpoint_changed(old: Obj, new: Obj) -> bool:
    def view(p: Obj) -> Any:
        st = p.get("status") or {}
        return (
            meta(p).get("labels"),
            bool(meta(p).get("deletionTimestamp")),
            st.get("podIP"),
            st.get("phase"),
            pod_ready(p),
            (p.get("spec") or {}).get("nodeName"),
        )

    return bool(view(old) != view(new))
