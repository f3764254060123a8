"""ResourceClaim and ResourceClaimTemplate CREATE: selectors compile, adminAccess is allowed, and
claims that no device could ever satisfy get a warning.

Selectors compile in the Kubernetes DRA CEL environment (:mod:`gpucluster.dra.cel`); a compile
error or an expression over 10 KiB is denied with the request, selector index and position.
A selector reading an attribute that no device publishes aborts scheduling of every pod using it
(an unknown attribute is a runtime error), so it is warned about; so is a claim the allocator
cannot place on any node of the cluster, with one line saying why.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from gpucluster.clusterstate import ADMIN_ACCESS_LABEL, ClusterState
from gpucluster.dra import gates
from gpucluster.dra.cel import MAX_EXPRESSION_LENGTH, CelCompileError, compile_selector
from gpucluster.policy import Settings
from gpucluster.webhook.feasibility import shared_pool
from gpucluster.webhook.review import AdmissionRequest, Verdict, short_warning

# Claims the resourceclaim controller makes from a pod's template carry this annotation; the
# template was checked when it was created, so they are not checked again per pod.
POD_CLAIM_ANNOTATION = "resource.kubernetes.io/pod-claim-name"


def _claim_spec(obj: Mapping[str, Any], kind: str) -> Mapping[str, Any]:
    spec = obj.get("spec") if isinstance(obj.get("spec"), dict) else {}
    if kind == "ResourceClaimTemplate":
        inner = spec.get("spec") if isinstance(spec, dict) else None
        return inner if isinstance(inner, dict) else {}
    return spec or {}


def _requests(spec: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    devices = spec.get("devices")
    requests = devices.get("requests") if isinstance(devices, dict) else None
    return [r for r in requests if isinstance(r, dict)] if isinstance(requests, list) else []


def _selectors(spec: Mapping[str, Any]) -> Iterator[tuple[str, int, str]]:
    """(request name, selector index, expression) of every CEL selector, subrequests included."""
    for request in _requests(spec):
        name = str(request.get("name", ""))
        bodies: list[tuple[str, Any]] = [(name, request.get("exactly"))]
        for sub in request.get("firstAvailable") or []:
            if isinstance(sub, dict):
                bodies.append((f"{name}/{sub.get('name', '')}", sub))
        for label, body in bodies:
            if not isinstance(body, dict):
                continue
            for index, selector in enumerate(body.get("selectors") or []):
                cel = selector.get("cel") if isinstance(selector, dict) else None
                expression = cel.get("expression") if isinstance(cel, dict) else None
                if isinstance(expression, str):
                    yield label, index, expression


def _admin_access(spec: Mapping[str, Any]) -> list[str]:
    names = []
    for request in _requests(spec):
        exactly = request.get("exactly")
        if isinstance(exactly, dict) and exactly.get("adminAccess") is True:
            names.append(str(request.get("name", "")))
    return names


def published_attributes(cluster: ClusterState) -> dict[str, set[str]]:
    """Attribute names the cluster's devices publish, per domain."""
    attributes: dict[str, set[str]] = {}
    for resource_slice in cluster.list("ResourceSlice"):
        spec = resource_slice.get("spec") or {}
        driver = str(spec.get("driver") or "")
        for device in spec.get("devices") or []:
            for name in (device.get("attributes") or {}) if isinstance(device, dict) else ():
                domain, _, ident = name.partition("/") if "/" in name else (driver, "", name)
                attributes.setdefault(domain or driver, set()).add(ident)
    return attributes


def _unpublished(reads: frozenset[tuple[str, ...]], published: Mapping[str, set[str]]) -> list[str]:
    missing = []
    for read in sorted(reads):
        if len(read) == 3 and read[0] == "attributes":
            _, domain, ident = read
            if ident not in published.get(domain, set()):
                missing.append(f"{domain}/{ident}")
    return missing


def _why_not(claim: Mapping[str, Any], cluster: ClusterState, settings: Settings) -> str | None:
    """A warning when no node can ever satisfy the claim (or the check was cut short), else None.

    The allocator runs in the webhook's worker pool with a deadline (:mod:`gpucluster.webhook.feasibility`),
    with the settings' Kubernetes version and feature gates.
    """
    objects = [*cluster.list("ResourceSlice"), *cluster.list("DeviceClass"), *cluster.list("Node")]
    result = shared_pool().check(
        [dict(claim)],
        objects,
        kubernetes_version=settings.kubernetes_version,
        feature_gates=dict(settings.feature_gates),
    )
    if result.incomplete:
        return result.incomplete
    return f"unsatisfiable: {result.reason}" if result.reason else None


def validate_claim_request(request: AdmissionRequest, cluster: ClusterState, settings: Settings) -> Verdict:
    if request.operation != "CREATE" or request.obj is None:
        return Verdict.allow(outcome="skipped")
    obj = request.obj
    spec = _claim_spec(obj, request.kind)
    namespace = request.namespace or str((obj.get("metadata") or {}).get("namespace") or "")
    problems: list[str] = []
    reads: frozenset[tuple[str, ...]] = frozenset()
    # DRAConsumableCapacity declares device.allowMultipleAllocations in selectors;
    # DRAListTypeAttributes (1.36+) list attributes and includes().
    resolved = gates.resolve(settings.kubernetes_version, dict(settings.feature_gates))
    consumable = resolved[gates.CONSUMABLE_CAPACITY]
    lists = resolved.get(gates.LIST_TYPE_ATTRIBUTES, False)
    for name, index, expression in _selectors(spec):
        where = f"request {name}: selector #{index}"
        if len(expression.encode()) > MAX_EXPRESSION_LENGTH:
            problems.append(f"{where}: expression is {len(expression.encode())} bytes, longer than the 10 KiB limit")
            continue
        try:
            reads |= compile_selector(expression, consumable_capacity=consumable, list_type_attributes=lists).reads
        except CelCompileError as exc:
            problems.append(f"{where}: compile error at {exc.line}:{exc.column}: {exc.message}")
    if problems:
        return Verdict.invalid(f"{request.kind} {namespace}/{request.name}: " + "; ".join(problems))

    admin = _admin_access(spec)
    if admin:
        labels = cluster.namespace_labels(namespace) or {}
        if labels.get(ADMIN_ACCESS_LABEL) != "true":
            return Verdict.deny(
                f"request {', '.join(admin)} asks for adminAccess, which needs the namespace {namespace} to be "
                f'labelled {ADMIN_ACCESS_LABEL}="true": kubectl label namespace {namespace} {ADMIN_ACCESS_LABEL}=true'
            )

    meta = obj.get("metadata") or {}
    if request.kind == "ResourceClaim" and POD_CLAIM_ANNOTATION in (meta.get("annotations") or {}):
        return Verdict.allow()
    warnings = []
    if cluster.list("ResourceSlice"):
        missing = _unpublished(
            reads, cluster.derived("published-attributes", published_attributes, kinds=("ResourceSlice",))
        )
        if missing:
            warnings.append(
                short_warning(
                    f"no device publishes attribute {', '.join(missing)}: reading it fails scheduling of every pod"
                )
            )
        elif not admin:
            why = _why_not({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": request.name or "claim", "namespace": namespace}, "spec": spec}, cluster, settings)  # fmt: skip
            if why:
                warnings.append(short_warning(why))
    return Verdict.allow(*warnings)
