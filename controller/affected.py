"""Which pending pods a ResourceSlice or DeviceClass event can give another answer, so that the
pod workers' cost follows what changed rather than the size of the cluster.

A pod worker explains a pod waiting on its claims (the allocator over every slice and class) and
checks a pod left with extended resources (stranded or declined on purpose, which depends on
the MIG profiles the slices publish). So:

* an event that leaves an object's ``spec`` as it was (a relist, a label, managedFields) changes
  no answer;
* a slice whose devices changed concerns the pods with claims; the pods without claims only when
  the set of published MIG profiles changed with it;
* a class concerns the pods whose claims ask for it, and those whose claims do not all exist yet
  (what they will ask for is not known).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import orjson

from gpucluster.clusterstate import ClusterState, metadata
from gpucluster.controller.explain import pod_claims


def spec_fingerprint(obj: Mapping[str, Any] | None) -> bytes | None:
    """What of an object an answer can depend on (a digest of its ``spec``, key order aside: 16
    bytes kept per slice, not the spec's JSON); None when gone."""
    if obj is None:
        return None
    try:
        encoded = orjson.dumps(obj.get("spec"), option=orjson.OPT_SORT_KEYS)
    except TypeError:  # not JSON (a huge integer): compared as written, at worst one event too many
        encoded = repr(obj.get("spec")).encode()
    return hashlib.blake2b(encoded, digest_size=16).digest()


def pod_key(pod: Mapping[str, Any]) -> str:
    """``namespace/name``: the key of a pod on the work queue."""
    meta = metadata(pod)
    return f"{meta.get('namespace') or ''}/{meta.get('name')}"


def _has_claims(pod: Mapping[str, Any]) -> bool:
    spec = pod.get("spec")
    return isinstance(spec, dict) and bool(spec.get("resourceClaims"))


def pods_for_slice_change(pods: Iterable[Mapping[str, Any]], *, profiles_changed: bool) -> Iterator[str]:
    """The pods a slice whose devices changed concerns."""
    for pod in pods:
        if profiles_changed or _has_claims(pod):
            yield pod_key(pod)


def requested_classes(claim: Mapping[str, Any]) -> set[str]:
    """The DeviceClasses a ResourceClaim's requests name (resource.k8s.io v1 ``exactly`` and
    ``firstAvailable``, and v1beta1's class on the request itself)."""
    spec = claim.get("spec") if isinstance(claim.get("spec"), dict) else {}
    devices = (spec or {}).get("devices")
    requests = devices.get("requests") if isinstance(devices, dict) else None
    names: set[str] = set()
    for request in requests if isinstance(requests, list) else []:
        if not isinstance(request, dict):
            continue
        exactly = request.get("exactly")
        candidates = [request, exactly if isinstance(exactly, dict) else {}]
        subs = request.get("firstAvailable")
        candidates += [s for s in subs if isinstance(s, dict)] if isinstance(subs, list) else []
        names |= {str(c["deviceClassName"]) for c in candidates if c.get("deviceClassName")}
    return names


def pods_for_class_change(name: str, pods: Iterable[Mapping[str, Any]], state: ClusterState) -> Iterator[str]:
    """The pods a change of DeviceClass ``name`` concerns."""
    for pod in pods:
        if not _has_claims(pod):
            continue
        claims = pod_claims(pod, state)
        if claims is None or any(name in requested_classes(c) for c in claims):
            yield pod_key(pod)
