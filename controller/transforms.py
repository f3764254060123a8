"""What the controller keeps of each object it watches: the fields its code reads, nothing else.

Like client-go's informer transforms (``SetTransform``, ``metav1.PartialObjectMetadata``), each
reflector passes every object, listed or watched, through the transform of its kind before it is
cached (:func:`transform_for`); the writes whose answers go back into the cache (node labels, a
deletion's answer) go through the same one. The kept strings are interned and the small maps they
repeat shared (:mod:`gpucluster.kube.compact`), so the cache must be treated as read-only.

Who reads what, by kind. A reader that starts needing a dropped field must add it here;
tests/controller/test_transforms.py runs the readers on trimmed and on full objects and expects
the same answers.

**Node**: ``metadata.name``, ``metadata.resourceVersion``, ``metadata.labels``.

* the node labeller (controller/labeller.py, controller/nodes.py ``label_patch``) and the
  deletion's unlabelling (controller/plan.py): name, labels;
* controller/runtime.py (work-queue keys, the nodes a relist still shows): name;
* explanations (controller/explain.py sends the nodes to the allocator): gpucluster/dra/model.py
  ``node_from_object`` reads name and labels (node selectors of slices); the worker's cluster
  fingerprint (gpucluster/dra/worker.py) kind, name and resourceVersion.

Dropped: uid, annotations, ownerReferences, finalizers, managedFields, ``spec`` (taints, podCIDR,
providerID) and ``status`` (capacity, allocatable, conditions, addresses, images, nodeInfo,
daemonEndpoints, volumes): no reader, and the heartbeats that change them change nothing kept.
Such an event is dropped by the reflector before it is trimmed (:func:`node_unchanged`): the
cached node, its resourceVersion included, stays as it was, and no handler is told.

**ResourceSlice**: ``metadata.name``, ``metadata.resourceVersion``, the whole ``spec``.

* explanations: the allocator parses the spec (gpucluster/dra/pools.py ``parse_slice``: driver,
  pool, node selection, devices with attributes, capacity, counters, taints);
* the inventory (controller/status.py ``inventory``): driver, nodeName, device type and productName;
* the published MIG profiles (gpucluster/claimtemplates.py ``published``: stranded and declined
  pods, the provisioner's bounds): driver, device profile attributes;
* controller/affected.py ``spec_fingerprint`` (which pods a slice event concerns): the spec.

Dropped: uid, generateName, labels, ownerReferences, creationTimestamp, managedFields.

**Pod** (pending pods; the provisioner's translated pods):

* metadata: name, namespace, uid and resourceVersion (keys, Events' involvedObject, deletion
  preconditions, memos), creationTimestamp (the provisioner's order), deletionTimestamp, labels
  (the opt-out label), ownerReferences (stranded pods' controller), and of the annotations only
  those read: the mirror-pod mark, the opt-out, the webhook's record of the original requests
  (``translated-from``) and of its templates (``claim-templates``);
* spec: nodeName, resourceClaims, schedulingGates (the provisioner removes the claim-templates
  gate, gpucluster/claimtemplates.py), and of each container and init container its name, resources
  and restartPolicy (the translation, gpucluster/translate.py ``_analyse``, and
  gpucluster/claimtemplates.py ``original_pod_spec``);
* status: phase, conditions (PodScheduled), resourceClaimStatuses.

Dropped: managedFields, every other annotation (``kubectl.kubernetes.io/last-applied-configuration``
is often the larger part of a pod), the containers' images, commands, env, probes and mounts,
volumes, and status of containers, IPs and times.

**ResourceClaim**: metadata (name, namespace, uid, resourceVersion, ownerReferences), the whole
``spec``, and ``status.allocation`` and ``status.reservedFor``.

* explanations: the allocator parses the spec of a waiting claim and the allocation of the others
  (gpucluster/dra/claims.py, allocator.py ``_in_use``); controller/explain.py ``claim_users``
  ownerReferences and reservedFor; Events on claims their metadata;
* controller/holders.py (the finalizer's wait, the driver label kept on nodes in use),
  controller/nodes.py, the inventory: the allocation's results and reservedFor;
* controller/affected.py ``requested_classes``: the requests' classes.

Dropped: labels, annotations, finalizers, managedFields, ``status.devices`` (per-device
conditions and network data).

**Everything else** (GPUCluster, ClusterPolicy, Namespace, DeviceClass, the operands we own):
the object without ``metadata.managedFields``. There are few of them, and the owned kinds (the
DeviceClasses among them) are compared field by field with what we apply (controller/drift.py).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from gpucluster.clusterstate import KubeObject
from gpucluster.kube.compact import Compactor
from gpucluster.kube.reflector import strip_managed_fields
from gpucluster.policy import TRANSLATE_LABEL, WEBHOOK_CONFIG
from gpucluster.translate import DEFAULT_CONFIG, TEMPLATES_ANNOTATION

Transform = Callable[[KubeObject], KubeObject]

MIRROR_ANNOTATION = "kubernetes.io/config.mirror"
POD_ANNOTATIONS = frozenset(
    {MIRROR_ANNOTATION, TRANSLATE_LABEL, DEFAULT_CONFIG.annotation, WEBHOOK_CONFIG.annotation, TEMPLATES_ANNOTATION}
)
POD_METADATA = (
    "name", "namespace", "uid", "resourceVersion", "creationTimestamp", "deletionTimestamp", "labels",
    "ownerReferences",
)  # fmt: skip
CONTAINER_FIELDS = ("name", "resources", "restartPolicy")
CLAIM_METADATA = ("name", "namespace", "uid", "resourceVersion", "ownerReferences")

# One table for every cache of the process: a string or map the slices repeat is held once.
compact = Compactor()


def _pick(mapping: Mapping[str, Any], keys: Iterable[str]) -> dict[str, Any]:
    return {key: mapping[key] for key in keys if key in mapping}


def _head(obj: Mapping[str, Any], meta: Iterable[str]) -> KubeObject:
    """``apiVersion``, ``kind`` and the ``meta`` fields of the metadata (a map of its own, never shared)."""
    out = {key: compact(obj[key]) for key in ("apiVersion", "kind") if key in obj}
    metadata = obj.get("metadata")
    if isinstance(metadata, dict):
        out["metadata"] = {key: compact(metadata[key]) for key in meta if key in metadata}
    elif metadata is not None:
        out["metadata"] = metadata  # not a map: as it is, readers check
    return out


def _part(out: KubeObject, obj: Mapping[str, Any], key: str, trim: Callable[[dict[str, Any]], Any]) -> None:
    """``out[key]``: ``obj[key]`` trimmed and compacted (as it is when it is not a map)."""
    if key in obj:
        value = obj[key]
        out[key] = compact(trim(value)) if isinstance(value, dict) else value


NODE_METADATA = ("name", "resourceVersion", "labels")


def trim_node(obj: KubeObject) -> KubeObject:
    return _head(obj, NODE_METADATA)


_ABSENT = object()


def node_unchanged(cached: KubeObject, obj: KubeObject) -> bool:
    """Whether ``obj``, a Node as watched, differs from ``cached`` (as :func:`trim_node` kept it) in
    nothing but its resourceVersion: a heartbeat, which changes only the status. Compared on the
    untrimmed object, so that a heartbeat costs a few comparisons and no copy; the fields compared
    are the ones trim_node keeps (tests/controller/test_transforms.py holds the two together)."""
    for key in ("apiVersion", "kind"):
        if cached.get(key, _ABSENT) != obj.get(key, _ABSENT):
            return False
    meta, kept = obj.get("metadata"), cached.get("metadata")
    if type(meta) is not dict or type(kept) is not dict:
        return False
    return all(meta.get(k, _ABSENT) == kept.get(k, _ABSENT) for k in NODE_METADATA if k != "resourceVersion")


def trim_resource_slice(obj: KubeObject) -> KubeObject:
    out = _head(obj, ("name", "resourceVersion"))
    _part(out, obj, "spec", lambda spec: spec)
    return out


def _container(container: Any) -> Any:
    return _pick(container, CONTAINER_FIELDS) if isinstance(container, dict) else container


def _pod_spec(spec: dict[str, Any]) -> dict[str, Any]:
    out = _pick(spec, ("nodeName", "resourceClaims", "schedulingGates"))
    for key in ("initContainers", "containers"):
        if key in spec:
            containers = spec[key]
            out[key] = [_container(c) for c in containers] if isinstance(containers, list) else containers
    return out


def trim_pod(obj: KubeObject) -> KubeObject:
    out = _head(obj, POD_METADATA)
    metadata = obj.get("metadata")
    annotations = metadata.get("annotations") if isinstance(metadata, dict) else None
    if isinstance(annotations, dict):
        kept = {k: v for k, v in annotations.items() if k in POD_ANNOTATIONS}
        if kept:
            out["metadata"]["annotations"] = compact(kept)
    elif annotations is not None:
        out["metadata"]["annotations"] = annotations  # not a map: as it is, readers check
    _part(out, obj, "spec", _pod_spec)
    _part(out, obj, "status", lambda status: _pick(status, ("phase", "conditions", "resourceClaimStatuses")))
    return out


def trim_resource_claim(obj: KubeObject) -> KubeObject:
    out = _head(obj, CLAIM_METADATA)
    _part(out, obj, "spec", lambda spec: spec)
    _part(out, obj, "status", lambda status: _pick(status, ("allocation", "reservedFor")))
    return out


TRANSFORMS: Mapping[str, Transform] = {
    "Node": trim_node,
    "Pod": trim_pod,
    "ResourceSlice": trim_resource_slice,
    "ResourceClaim": trim_resource_claim,
}


# Kinds whose watch events often change nothing kept: a node's status is updated by its kubelet
# (conditions, images, volumes), which must not cost the controller more than a look.
UNCHANGED: Mapping[str, Callable[[KubeObject, KubeObject], bool]] = {"Node": node_unchanged}


def transform_for(kind: str) -> Transform:
    """What the controller caches of an object of ``kind`` (see the module docstring)."""
    return TRANSFORMS.get(kind, strip_managed_fields)


def unchanged_for(kind: str) -> Callable[[KubeObject, KubeObject], bool] | None:
    """For the reflector of ``kind``: whether a watched object changes nothing its transform keeps."""
    return UNCHANGED.get(kind)
