"""DaemonSet and Deployment status, computed from node selection (no pods are created).

The DaemonSet controller and the Deployment/ReplicaSet controllers are not simulated pod by pod:
their status is what they would report once every pod they create is running, written through
the ``status`` subresource (so watches and ``kubectl rollout status`` see it):

* DaemonSet: ``desiredNumberScheduled`` is the number of nodes the pod template would run on
  (nodeSelector, required node affinity, tolerations plus the DaemonSet controller's default
  tolerations against the node taints); current, ready, available and updated equal it,
  ``numberMisscheduled`` is 0, ``observedGeneration`` is the generation.
* Deployment: ``replicas`` from the spec; when at least one node fits the pod template, every
  replica is ready, available and updated (conditions Available=True MinimumReplicasAvailable,
  Progressing=True NewReplicaSetAvailable); otherwise none is (Available=False
  MinimumReplicasUnavailable, Progressing=True ReplicaSetUpdated, ``unavailableReplicas``).

Daemon pods are not created because nothing in this project reads them and a thousand-node
sandbox would otherwise hold thousands of pods; ``SlicePublisher`` treats "the DaemonSet selects
the node" as "its pod runs there", which is consistent with this status.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Hashable, Iterable
from typing import Any

from sandbox.apiserver.store import DELETED, Event
from sandbox.sim import predicates
from sandbox.sim.base import Controller, Obj, meta

NODES = ("", "nodes")
DAEMONSETS = ("apps", "daemonsets")
DEPLOYMENTS = ("apps", "deployments")
_TIME_KEYS = ("lastUpdateTime", "lastTransitionTime")


def _template_spec(obj: Obj) -> Obj:
    spec: Obj = ((obj.get("spec") or {}).get("template") or {}).get("spec") or {}
    return spec


def template_hash(obj: Obj) -> str:
    """A stable pod-template-hash-like suffix for ReplicaSet names in messages."""
    raw = json.dumps((obj.get("spec") or {}).get("template") or {}, sort_keys=True).encode()
    digest = hashlib.sha256(raw).digest()
    alphabet = "bcdfghjklmnpqrstvwxz2456789"
    return "".join(alphabet[b % len(alphabet)] for b in digest[:10])


def daemonset_status(ds: Obj, nodes: Iterable[Obj]) -> Obj:
    spec = _template_spec(ds)
    desired = sum(1 for n in nodes if predicates.filter_node(spec, n, daemon=True) is None)
    status: Obj = {
        "currentNumberScheduled": desired,
        "desiredNumberScheduled": desired,
        "numberAvailable": desired,
        "numberMisscheduled": 0,
        "numberReady": desired,
        "observedGeneration": meta(ds).get("generation", 1),
        "updatedNumberScheduled": desired,
    }
    if not desired:
        status.pop("numberAvailable")  # omitempty, as upstream serialises zero
    return status


def deployment_status(deploy: Obj, nodes: Iterable[Obj], old: Obj | None, now: str) -> Obj:
    spec = deploy.get("spec") or {}
    replicas = int(spec.get("replicas", 1) or 0)
    fits = any(predicates.filter_node(_template_spec(deploy), n) is None for n in nodes)
    ready = replicas if fits else 0
    rs = f"{meta(deploy).get('name')}-{template_hash(deploy)}"
    status: Obj = {"observedGeneration": meta(deploy).get("generation", 1)}
    if replicas:
        status.update(replicas=replicas, updatedReplicas=replicas)
        if ready:
            status.update(readyReplicas=ready, availableReplicas=ready)
        else:
            status["unavailableReplicas"] = replicas
    if ready >= replicas:
        available = ("True", "MinimumReplicasAvailable", "Deployment has minimum availability.")
        progressing = ("True", "NewReplicaSetAvailable", f'ReplicaSet "{rs}" has successfully progressed.')
    else:
        available = ("False", "MinimumReplicasUnavailable", "Deployment does not have minimum availability.")
        progressing = ("True", "ReplicaSetUpdated", f'ReplicaSet "{rs}" is progressing.')
    previous = {c.get("type"): c for c in (old or {}).get("conditions") or []}
    conditions = []
    for ctype, (cstatus, reason, message) in (("Available", available), ("Progressing", progressing)):
        before = previous.get(ctype) or {}
        same = before.get("status") == cstatus and before.get("reason") == reason and before.get("message") == message
        transition = before.get("lastTransitionTime") if before.get("status") == cstatus else None
        conditions.append(
            {
                "type": ctype,
                "status": cstatus,
                "lastUpdateTime": before.get("lastUpdateTime") if same else now,
                "lastTransitionTime": transition or now,
                "reason": reason,
                "message": message,
            }
        )
    status["conditions"] = conditions
    return status


def _strip_times(status: Any) -> Any:
    if not isinstance(status, dict):
        return status
    out = dict(status)
    if "conditions" in out:
        out["conditions"] = [{k: v for k, v in c.items() if k not in _TIME_KEYS} for c in out["conditions"] or []]
    return out


class WorkloadStatus(Controller):
    """Keeps DaemonSet and Deployment status in line with the nodes (see the module docstring)."""

    name = "workloads"
    username = "system:serviceaccount:kube-system:daemon-set-controller"
    field_manager = "kube-controller-manager"

    def initial_keys(self) -> Iterable[Hashable]:
        for resource in (DAEMONSETS, DEPLOYMENTS):
            for obj in self.core.store.iter(resource):
                yield (resource, meta(obj).get("namespace"), meta(obj).get("name"))

    def on_event(self, event: Event) -> None:
        if event.resource in (DAEMONSETS, DEPLOYMENTS):
            if event.type == DELETED:
                return
            old = event.old
            if (
                old is not None
                and meta(old).get("generation") == meta(event.obj).get("generation")
                and old.get("status")
                and event.obj.get("status") == old.get("status")
            ):
                return  # metadata-only change
            md = meta(event.obj)
            self.enqueue((event.resource, md.get("namespace"), md.get("name")))
        elif event.resource == NODES:
            if event.type != DELETED and not predicates.node_changed(event.old, event.obj):
                return
            for key in self.initial_keys():
                self.enqueue(key)

    async def sync(self, key: Any) -> None:
        resource, ns, name = key
        obj = self.core.store.get(resource, str(ns), str(name))
        if obj is None or meta(obj).get("deletionTimestamp"):
            return
        nodes = list(self.core.store.iter(NODES))
        current = obj.get("status") or {}
        if resource == DAEMONSETS:
            status = daemonset_status(obj, nodes)
            rt = self.rt("apps", "v1", "daemonsets")
        else:
            status = deployment_status(obj, nodes, current, self.core.now())
            rt = self.rt("apps", "v1", "deployments")
        merged = {**current, **status}
        if resource == DAEMONSETS and "numberAvailable" not in status:
            merged.pop("numberAvailable", None)
        if resource == DEPLOYMENTS:
            for k in ("readyReplicas", "availableReplicas", "unavailableReplicas", "replicas", "updatedReplicas"):
                if k not in status:
                    merged.pop(k, None)
        if _strip_times(merged) == _strip_times(current):
            return
        body = {**obj, "status": merged}
        await self.core.update(rt, str(ns), str(name), body, self.context(), subresource="status")
