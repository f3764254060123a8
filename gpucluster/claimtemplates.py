"""Which ResourceClaimTemplates a translated pod may have: re-derived, never read from the pod.

The webhook translates a pod at admission and records the original requests in
``gpucluster.nvidia.com/translated-from`` (``{"containers": {name: {resource: quantity}}}``). The
controller must not create what a pod's annotations *say*: anyone who may create a pod may write
them, and the controller creates under its own rights. So it re-derives the templates with the
same pure translation the webhook runs, from the recorded requests and the pod's own containers
(names, order, init containers and sidecars), and the same bounds (:func:`bound_problems`: at
most :data:`MAX_DEVICES_PER_POD` devices, MIG profiles the cluster publishes). The result is what
an honest GPU request of that pod would have been given, whatever the annotations say.

Shared by the webhook (the bounds) and the controller (the bounds and the re-derivation); no I/O.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gpucluster.clusterstate import ClusterState, metadata
from gpucluster.policy import WEBHOOK_CONFIG
from gpucluster.translate import Translation, TranslationConfig, mig_profile, translate_pod_spec

__all__ = [
    "CLAIM_TEMPLATES_GATE",
    "MAX_DEVICES_PER_POD",
    "NVIDIA_GPU_DRIVER",
    "Published",
    "bound_problems",
    "expected_templates",
    "gate_ops",
    "gated",
    "original_pod_spec",
    "published",
    "scheduling_gates",
    "ungate_ops",
]

NVIDIA_GPU_DRIVER = "gpu.nvidia.com"

# No pod gets more devices than this through translation: a typo (nvidia.com/gpu: 800) or a
# hostile pod must not make the controller provision without bound.
MAX_DEVICES_PER_POD = 64

# The scheduling gate the webhook puts on a translated pod whose templates its view does not show
# yet, and the controller removes once every one of them exists with the spec the pod asked for.
# kube-controller-manager makes a pod's claims from whatever template has the name, gated or not:
# while a name is taken by another spec (a template created between admission and ours), the gate
# keeps the pod from running on devices it did not ask for.
CLAIM_TEMPLATES_GATE = "gpucluster.nvidia.com/claim-templates"

# The record of one container: a few resources with their quantities as written.
_MAX_RECORD_BYTES = 16 * 1024


@dataclass(frozen=True)
class Published:
    """What the cluster view says exists: None where the view knows nothing (offline, no driver yet).

    DeviceClasses are not looked up: a translation only ever names the configured NVIDIA classes.
    """

    mig_profiles: frozenset[str] | None


def _published(cluster: ClusterState) -> Published:
    profiles: set[str] = set()
    nvidia_devices = False
    for rs in cluster.list("ResourceSlice"):
        spec = rs.get("spec")
        if not isinstance(spec, dict) or spec.get("driver") != NVIDIA_GPU_DRIVER:
            continue
        for device in spec.get("devices") or []:
            nvidia_devices = True
            attrs = device.get("attributes") if isinstance(device, dict) else None
            profile = (attrs or {}).get("profile") or (attrs or {}).get(f"{NVIDIA_GPU_DRIVER}/profile")
            if isinstance(profile, dict) and isinstance(profile.get("string"), str):
                profiles.add(profile["string"])
    return Published(frozenset(profiles) if nvidia_devices else None)


def published(cluster: ClusterState) -> Published:
    """The MIG profiles of the view, recomputed only when its ResourceSlices changed (other kinds'
    churn, templates and namespaces, leaves the index alone)."""
    return cluster.derived("published-mig-profiles", _published, kinds=("ResourceSlice",))


DRA_MODEL_KINDS = ("GPUCluster", "DeviceClass", "ResourceSlice")


def dra_model_absent(cluster: ClusterState) -> str | None:
    """Why no DRA model serves NVIDIA GPUs in the view, or None when one does or the view cannot tell.

    A translated pod's claims are allocated only where the DRA model runs: a GPUCluster (which
    deploys the driver and the DeviceClasses), a DeviceClass a translation names, or NVIDIA devices
    published in ResourceSlices (a DRA driver installed on its own). Where none of these exists
    (the chart installed with gpuCluster.enabled=false; a device-plugin cluster, with or without a
    ClusterPolicy), the device plugin or nothing serves ``nvidia.com/gpu``, and a translated pod
    would wait forever. A static view (a file) or one not yet synced cannot tell: as before.
    """
    if cluster.static or not cluster.synced(DRA_MODEL_KINDS):
        return None
    return cluster.derived("dra-model-absent", _dra_model_absent, kinds=(*DRA_MODEL_KINDS, "ClusterPolicy"))


def _dra_model_absent(cluster: ClusterState) -> str | None:
    if cluster.list("GPUCluster"):
        return None
    if any(cluster.get("DeviceClass", name) is not None for name in WEBHOOK_CONFIG.device_classes):
        return None
    if published(cluster).mig_profiles is not None:
        return None
    policies = sorted(str(metadata(p).get("name")) for p in cluster.list("ClusterPolicy"))
    if policies:
        return f"the cluster runs the device-plugin model (ClusterPolicy {policies[0]}) and no GPUCluster"
    return "no GPUCluster, NVIDIA DeviceClass or NVIDIA ResourceSlice: nothing would allocate its claims"


def bound_problems(
    translation: Translation, cluster: ClusterState, config: TranslationConfig, *, complete: bool = False
) -> list[str]:
    """Why a translation asks for more than may be requested: MIG profiles no node publishes, too many devices.

    ``complete``: the view is a synced cache of every ResourceSlice (the controller's), so a view
    without NVIDIA devices means no node publishes any MIG profile. Otherwise (the webhook's view
    while the driver starts, an offline review) it means nothing is known, and MIG is not bounded.
    """
    known = published(cluster)
    if complete and known.mig_profiles is None:
        known = Published(frozenset())
    problems = []
    total = sum(translation.devices.values())
    if total > MAX_DEVICES_PER_POD:
        problems.append(f"the pod asks for {total} devices (at most {MAX_DEVICES_PER_POD} are translated)")
    if known.mig_profiles is not None and config.mig_prefix:
        unknown = sorted(
            mig_profile(r[len(config.mig_prefix) :])
            for r in translation.resources
            if r.startswith(config.mig_prefix) and r not in config.mapping
        )
        unknown = [p for p in unknown if p not in known.mig_profiles]
        if unknown:
            problems.append(f"no node publishes MIG profile {', '.join(unknown)}")
    return problems


def _record(raw: Any) -> tuple[dict[str, dict[str, str]] | None, str | None]:
    if not isinstance(raw, str):
        return None, "the pod has no record of its original GPU requests"
    if len(raw) > _MAX_RECORD_BYTES:
        return None, "the record of its original GPU requests is too large"
    try:
        value = json.loads(raw)
    except ValueError:
        return None, "the record of its original GPU requests is not JSON"
    containers = value.get("containers") if isinstance(value, dict) else None
    if (
        not isinstance(value, dict)
        or set(value) != {"containers"}
        or not isinstance(containers, dict)
        or not all(
            isinstance(k, str)
            and isinstance(v, dict)
            and all(isinstance(r, str) and isinstance(q, str) for r, q in v.items())
            for k, v in containers.items()
        )
    ):
        return None, 'the record of its original GPU requests is not {"containers": {name: {resource: quantity}}}'
    return containers, None


def container_shapes(pod_spec: Mapping[str, Any]) -> list[tuple[str, str, Any]]:
    """What :func:`original_pod_spec` reads of a translated pod's containers, in order: ``(list,
    name, restartPolicy)`` of each that is a map (the restartPolicy of an init container only,
    else None)."""
    out = []
    for key in ("initContainers", "containers"):
        for c in pod_spec.get(key) or []:
            if isinstance(c, Mapping):
                out.append((key, str(c.get("name", "")), c.get("restartPolicy") if key == "initContainers" else None))
    return out


def original_pod_spec(
    pod_spec: Mapping[str, Any], record: Any, config: TranslationConfig = WEBHOOK_CONFIG
) -> tuple[dict[str, Any] | None, str | None]:
    """The pod spec as far as a translation reads it, rebuilt from a translated pod and its record.

    Every container keeps its name, its place and whether it is a sidecar; it asks for exactly the
    recorded quantities (as limits) and nothing else. ``(None, why)`` when the record is not one a
    translation writes or names containers the pod does not have.
    """
    containers, why = _record(record)
    if containers is None:
        return None, why
    rebuilt: dict[str, Any] = {"initContainers": [], "containers": []}
    seen: set[str] = set()
    for key, name, restart_policy in container_shapes(pod_spec):
        entry: dict[str, Any] = {"name": name}
        if restart_policy is not None:
            entry["restartPolicy"] = restart_policy
        asked = containers.get(name)
        if asked:
            unknown = [r for r in asked if config.resolve(r) is None]
            if unknown:
                return None, f"the record names {unknown[0]}, which gpucluster does not translate"
            entry["resources"] = {"limits": dict(asked)}
        seen.add(name)
        rebuilt[key].append(entry)
    missing = sorted(set(containers) - seen)
    if missing:
        return None, f"the record names container {missing[0]}, which the pod does not have"
    return rebuilt, None


def expected_templates(
    pod: Mapping[str, Any], cluster: ClusterState, config: TranslationConfig = WEBHOOK_CONFIG, *, complete: bool = True
) -> tuple[dict[str, dict[str, Any]], str | None]:
    """``{content-addressed name: spec}`` of the templates the webhook's translation gives ``pod``
    (re-derived from its recorded original requests, within the webhook's bounds and the view's
    published MIG profiles), or ``({}, why not)``."""
    meta = metadata(pod)
    annotations = meta.get("annotations") if isinstance(meta.get("annotations"), dict) else {}
    spec = pod.get("spec") if isinstance(pod.get("spec"), dict) else {}
    original, why = original_pod_spec(spec or {}, (annotations or {}).get(config.annotation), config)
    if original is None:
        return {}, why
    namespace = str(meta.get("namespace") or "") or None
    translation = translate_pod_spec(original, namespace=namespace, config=config)
    if not translation.changed:
        first = translation.problems[0] if translation.problems else "they ask for no device"
        return {}, f"its recorded requests are not translated ({first})"
    bounds = bound_problems(translation, cluster, config, complete=complete)
    if bounds:
        return {}, "; ".join(bounds)
    return {str(t["metadata"]["name"]): t["spec"] for t in translation.templates}, None


def scheduling_gates(pod: Mapping[str, Any]) -> list[Any]:
    """The pod's ``spec.schedulingGates`` as it holds them (a list; empty when absent or malformed)."""
    spec = pod.get("spec")
    gates = spec.get("schedulingGates") if isinstance(spec, dict) else None
    return gates if isinstance(gates, list) else []


def gated(pod: Mapping[str, Any]) -> bool:
    """Whether the pod still carries :data:`CLAIM_TEMPLATES_GATE`."""
    return any(isinstance(g, dict) and g.get("name") == CLAIM_TEMPLATES_GATE for g in scheduling_gates(pod))


def gate_ops(spec: Mapping[str, Any]) -> list[dict[str, Any]]:
    """JSON patch operations that add :data:`CLAIM_TEMPLATES_GATE` to a pod spec (none when it is
    there, or when ``spec.nodeName`` is set: the API server refuses gates on a bound pod)."""
    if spec.get("nodeName"):
        return []
    gates = spec.get("schedulingGates")
    gate = {"name": CLAIM_TEMPLATES_GATE}
    if isinstance(gates, list):
        if any(isinstance(g, dict) and g.get("name") == CLAIM_TEMPLATES_GATE for g in gates):
            return []
        return [{"op": "add", "path": "/spec/schedulingGates/-", "value": gate}]
    return [{"op": "add", "path": "/spec/schedulingGates", "value": [gate]}]


def ungate_ops(pod: Mapping[str, Any]) -> list[dict[str, Any]]:
    """JSON patch operations that remove :data:`CLAIM_TEMPLATES_GATE` from the pod, guarded by a
    test of that very entry: if the gates changed since the pod was read, the patch fails (422)
    rather than remove another one. Empty when the pod is not gated."""
    for index, gate in enumerate(scheduling_gates(pod)):
        if isinstance(gate, dict) and gate.get("name") == CLAIM_TEMPLATES_GATE:
            path = f"/spec/schedulingGates/{index}"
            return [
                {"op": "test", "path": f"{path}/name", "value": CLAIM_TEMPLATES_GATE},
                {"op": "remove", "path": path},
            ]
    return []
