"""``gpucluster explain pod/NAME | claim/NAME | -f FILE`` against the configured cluster.

Reads through the API only what the allocator needs: the claims to explain (a pod's come from
``spec.resourceClaims``), DeviceClasses, ResourceSlices, the allocated ResourceClaims (devices in
use) and the Nodes the pod could use (its ``nodeName``, ``nodeSelector`` as a label selector on the
list, then its required node affinity). Imported only when ``explain`` talks to a cluster, so the
offline commands never load the Kubernetes client.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gpucluster.dra.gates import supported_version
from gpucluster.errors import InputError
from gpucluster.kube import predicates
from gpucluster.kube.client import Kube, KubeError

Obj = dict[str, Any]
_DRA = "/apis/resource.k8s.io/v1"


@dataclass
class LiveInput:
    """What ``explain`` needs, read from the cluster."""

    claims: list[Obj]
    cluster: list[Obj]
    subject: str  # "pod ns/name", "claim ns/name" or the file, for messages
    kubernetes_version: str  # the server's minor version when the allocator supports it
    restricted: bool = False  # the pod's nodeName, nodeSelector or node affinity limits the nodes
    notes: list[str] = field(default_factory=list)


def parse_target(target: str) -> tuple[str, str]:
    """``pod/NAME`` or ``claim/NAME`` (kubectl's spellings of the kinds accepted) -> (kind, name)."""
    kind, sep, name = target.partition("/")
    kinds = {
        "pod": "pod",
        "pods": "pod",
        "po": "pod",
        "claim": "claim",
        "resourceclaim": "claim",
        "resourceclaims": "claim",
    }
    if not sep or not name or kind.lower() not in kinds:
        raise InputError(f"{target!r}: expected pod/NAME or claim/NAME")
    return kinds[kind.lower()], name


async def read(
    *,
    kubeconfig: str | None,
    namespace: str | None,
    target: str | None,
    claim_objects: list[Obj] | None,
    subject: str = "",
) -> LiveInput:
    if target is not None:
        parse_target(target)  # bad input is said before any cluster is contacted
    kube = await Kube.connect(kubeconfig)
    try:
        return await _read(kube, namespace or _default_namespace(kubeconfig), target, claim_objects, subject)
    except KubeError as exc:
        raise InputError(_api_message(exc)) from None
    except OSError as exc:  # connection refused, DNS, TLS
        raise InputError(f"cannot reach the cluster: {' '.join(str(exc).split())}") from None
    finally:
        await kube.close()


def _default_namespace(kubeconfig: str | None) -> str:
    """The current context's namespace (kubectl's default), else ``default``."""
    try:
        from kubernetes.config import kube_config

        _, current = kube_config.list_kube_config_contexts(config_file=kubeconfig)
        return str((current.get("context") or {}).get("namespace") or "default")
    except Exception:  # in-cluster or no kubeconfig: kubectl's default
        return "default"


def _api_message(exc: KubeError) -> str:
    if exc.status == 404:
        return str(exc.body.get("message") or exc)
    return str(exc)


async def _read(
    kube: Kube, namespace: str, target: str | None, claim_objects: list[Obj] | None, subject: str
) -> LiveInput:
    pod: Obj | None = None
    notes: list[str] = []
    if target is not None:
        kind, name = parse_target(target)
        if kind == "pod":
            pod = await kube.get(f"/api/v1/namespaces/{namespace}/pods/{name}")
            claims, notes = await _pod_claims(kube, pod)
            subject = f"pod {namespace}/{name}"
        else:
            claims = [await kube.get(f"{_DRA}/namespaces/{namespace}/resourceclaims/{name}")]
            subject = f"claim {namespace}/{name}"
    else:
        claims = [_defaulted(o, namespace) for o in claim_objects or []]

    spec: Mapping[str, Any] = (pod or {}).get("spec") or {}
    node_query: list[tuple[str, str]] = []
    selector = spec.get("nodeSelector") or {}
    if selector:
        node_query.append(("labelSelector", ",".join(f"{k}={v}" for k, v in sorted(selector.items()))))
    if spec.get("nodeName"):
        node_query.append(("fieldSelector", f"metadata.name={spec['nodeName']}"))
    classes, slices, allocated, nodes, version = await asyncio.gather(
        _list(kube, f"{_DRA}/deviceclasses", "DeviceClass"),
        _list(kube, f"{_DRA}/resourceslices", "ResourceSlice"),
        _list(kube, f"{_DRA}/resourceclaims", "ResourceClaim"),
        _list(kube, "/api/v1/nodes", "Node", node_query),
        kube.get("/version"),
    )
    restricted = bool(node_query or (spec.get("affinity") or {}).get("nodeAffinity"))
    if pod is not None:
        nodes = [n for n in nodes if predicates.matches_node_affinity(spec, n)]
        # Slices of nodes the pod cannot use would make the allocator try those nodes too.
        names = {str((n.get("metadata") or {}).get("name")) for n in nodes}
        slices = [s for s in slices if not (s.get("spec") or {}).get("nodeName") or s["spec"]["nodeName"] in names]
    in_use = [c for c in allocated if (c.get("status") or {}).get("allocation")]
    return LiveInput(
        claims=claims,
        cluster=[*classes, *slices, *nodes, *in_use],
        subject=subject,
        kubernetes_version=supported_version(version),
        restricted=restricted,
        notes=notes,
    )


def _defaulted(obj: Obj, namespace: str) -> Obj:
    """A claim from a file: the namespace -n (or the context) gives when it names none, as kubectl does."""
    metadata = dict(obj.get("metadata") or {})
    metadata.setdefault("namespace", namespace)
    return {**obj, "metadata": metadata}


async def _pod_claims(kube: Kube, pod: Obj) -> tuple[list[Obj], list[str]]:
    """The pod's claims, in spec.resourceClaims order: a named claim as it is; a template's
    generated claim (status.resourceClaimStatuses) when it exists, else the template's spec."""
    metadata = pod.get("metadata") or {}
    namespace = str(metadata.get("namespace") or "default")
    name = str(metadata.get("name"))
    entries = (pod.get("spec") or {}).get("resourceClaims") or []
    if not entries:
        raise InputError(f"pod {namespace}/{name} has no spec.resourceClaims: it asks for no DRA devices")
    generated = {
        str(s.get("name")): s.get("resourceClaimName")
        for s in (pod.get("status") or {}).get("resourceClaimStatuses") or []
    }
    claims: list[Obj] = []
    notes: list[str] = []
    for entry in entries:
        claim_name = entry.get("resourceClaimName") or generated.get(str(entry.get("name")))
        if claim_name:
            claims.append(await kube.get(f"{_DRA}/namespaces/{namespace}/resourceclaims/{claim_name}"))
        elif entry.get("resourceClaimTemplateName"):
            template = entry["resourceClaimTemplateName"]
            obj = await kube.get(f"{_DRA}/namespaces/{namespace}/resourceclaimtemplates/{template}")
            claims.append(obj)
            notes.append(f"claim {entry.get('name')}: not generated yet, explained from template {template}")
        else:
            raise InputError(f"pod {namespace}/{name}: resourceClaims entry {entry.get('name')!r} names no claim")
    return claims, notes


async def _list(kube: Kube, path: str, kind: str, query: list[tuple[str, str]] | None = None) -> list[Obj]:
    """Every item of a list, page by page, each with its kind (lists leave it out)."""
    items: list[Obj] = []
    token = ""
    while True:
        page = await kube.get(path, [*(query or []), ("limit", "500"), *([("continue", token)] if token else [])])
        items.extend({"kind": kind, **item} for item in page.get("items") or [])
        token = str((page.get("metadata") or {}).get("continue") or "")
        if not token:
            return items
