"""Shared pieces of the operand renderers: cluster facts, errors, images, metadata and workloads.

Everything here is pure: a renderer gets the GPUCluster model and the :class:`ClusterFacts` and
returns plain Kubernetes dicts. Maps the user wrote (labels, annotations) are emitted with sorted
keys, so equal specs render byte-identical objects whatever the key order in the CR.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpucluster.api import gpucluster as gc
from gpucluster.api import images
from gpucluster.api.base import EnvVar, ResourceRequirements
from gpucluster.errors import InputError

Obj = dict[str, Any]

# The label every object of an operand carries; the reconciler finds (and prunes) by it.
STATE_LABEL = "nvidia.com/gpu-operator.state"
STATE_DRA_DRIVER = "state-dra-driver"
STATE_DCGM = "state-dcgm"
STATE_DCGM_EXPORTER = "state-dcgm-exporter"
STATE_DRA_VALIDATION = "state-dra-validation"
# In apply order.
STATES = (STATE_DRA_DRIVER, STATE_DCGM, STATE_DCGM_EXPORTER, STATE_DRA_VALIDATION)

MANAGED_BY = "gpucluster"
PART_OF = "gpucluster"
DEFAULT_NAMESPACE = "gpu-operator"
DEFAULT_PRIORITY_CLASS = "system-node-critical"

# resource.k8s.io/v1 is served from Kubernetes 1.34, the minimum the DRA model supports.
RESOURCE_API_VERSION = "resource.k8s.io/v1"
DEVICE_CLASS_GPU = "gpu.nvidia.com"

# Operator environment variables naming operand images (upstream GPU Operator's names).
DRA_DRIVER_IMAGE_ENV = "DRA_DRIVER_IMAGE"
DCGM_EXPORTER_IMAGE_ENV = "DCGM_EXPORTER_IMAGE"
DCGM_IMAGE_ENV = "DCGM_IMAGE"
VALIDATOR_IMAGE_ENV = "VALIDATOR_IMAGE"
IMAGE_ENV_NAMES = (DRA_DRIVER_IMAGE_ENV, DCGM_EXPORTER_IMAGE_ENV, DCGM_IMAGE_ENV, VALIDATOR_IMAGE_ENV)


@dataclass(frozen=True)
class ClusterFacts:
    """What the renderers need to know about the cluster and the operator, as plain data.

    ``env`` holds the operator's environment (only the image variables are read); ``owner_uid``
    overrides ``metadata.uid`` of the GPUCluster for owner references (without either, objects get
    no owner reference). ``kubernetes_version`` (for example ``"1.34.2"``) is informational: the
    renderers always target resource.k8s.io/v1, and the reconciler checks the minimum version.
    """

    namespace: str = DEFAULT_NAMESPACE
    env: Mapping[str, str] = field(default_factory=dict)
    service_monitor_crd: bool = False
    openshift: bool = False
    kubernetes_version: str | None = None
    owner_uid: str | None = None

    @classmethod
    def from_environ(cls, environ: Mapping[str, str], **facts: Any) -> ClusterFacts:
        """Facts whose ``env`` holds the image variables of ``environ`` (an ``os.environ``)."""
        env = {name: environ[name] for name in IMAGE_ENV_NAMES if environ.get(name)}
        return cls(env=env, **facts)


class RenderError(InputError):
    """The GPUCluster cannot be rendered; the message starts with the offending field path."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(f"{path}: {message}")
        self.path = path
        self.detail = message


# --- images ----------------------------------------------------------------------------------

# The distribution reference grammar (gpucluster.api.images, which the model checks specs with).
_DOMAIN_RE = re.compile(rf"^{images.DOMAIN}$")
_PATH_COMPONENT_RE = re.compile(rf"^{images.PATH_COMPONENT}$")
_TAG_RE = re.compile(rf"^{images.TAG}$")
_SHA256_RE = re.compile(rf"^{images.SHA256}$")
_DIGEST_RE = re.compile(rf"^{images.DIGEST}$")


def _name_ok(name: str, *, need_path: bool = True) -> bool:
    """A repository name: ``[host[:port]/]path/components``; with ``need_path`` at least one
    path component (a full image name), without it a bare registry host is fine too."""
    parts = name.split("/")
    first = parts[0]
    if "." in first or ":" in first or first == "localhost":
        if not _DOMAIN_RE.match(first):
            return False
        parts = parts[1:]
        if not parts:
            return not need_path
    return all(_PATH_COMPONENT_RE.match(part) for part in parts)


def _reference_ok(reference: str) -> bool:
    """A full image reference: name, optional ``:tag``, optional ``@digest``."""
    name, _, digest = reference.partition("@")
    if digest and not _DIGEST_RE.match(digest):
        return False
    slash = name.rfind("/")
    colon = name.rfind(":")
    if colon > slash:
        name, tag = name[:colon], name[colon + 1 :]
        if not _TAG_RE.match(tag):
            return False
    return len(name) <= 255 and _name_ok(name)


def _split_reference(reference: str) -> tuple[str, str]:
    """``registry/path/name[:tag][@digest]`` -> (``registry/path``, ``name``); the tag and digest are dropped."""
    name = reference.partition("@")[0]
    slash = name.rfind("/")
    colon = name.rfind(":")
    if colon > slash:
        name = name[:colon]
    repository, _, image = name.rpartition("/")
    return repository, image


def resolve_image(
    path: str,
    what: str,
    repository: str | None,
    image: str | None,
    version: str | None,
    env_name: str,
    env: Mapping[str, str],
) -> str:
    """The image reference of an operand, as upstream's ``image.ImagePath`` resolves it.

    ``repository``/``image``/``version`` from the CR first (all three, joined with ``@`` when
    the version is a ``sha256:`` digest, else ``:``; or ``image`` alone as a full reference),
    then the operator's ``env_name`` environment variable. ``path`` is the spec field
    (``spec.draDriver``) that errors name. ``version`` alone (what ``--set ...version=`` gives)
    rolls the operator's default image to that version: same repository and image name.
    """
    if version and not repository and not image:
        default = env.get(env_name, "")
        if default and _reference_ok(default):
            repository, image = _split_reference(default)
    if repository or version:
        for name, value in (("repository", repository), ("image", image), ("version", version)):
            if not value:
                raise RenderError(
                    f"{path}.{name}",
                    f"Required value: {path}.repository, {path}.image and {path}.version must all be set "
                    f"(repository={repository or ''!r}, image={image or ''!r}, version={version or ''!r})",
                )
        assert repository and image and version
        if not _name_ok(repository, need_path=False):
            raise RenderError(
                f"{path}.repository",
                f'Invalid value: "{repository}": must be a registry and repository such as nvcr.io/nvidia '
                "(lowercase path, no trailing slash)",
            )
        if not _PATH_COMPONENT_RE.match(image):
            raise RenderError(
                f"{path}.image", f'Invalid value: "{image}": must be a lowercase image name such as dcgm-exporter'
            )
        if version.startswith("sha256:"):
            if not _SHA256_RE.match(version):
                raise RenderError(
                    f"{path}.version", f'Invalid value: "{version}": a sha256 digest must be 64 lowercase hex digits'
                )
            return f"{repository}/{image}@{version}"
        if not _TAG_RE.match(version):
            raise RenderError(
                f"{path}.version",
                f'Invalid value: "{version}": must be an image tag (letters, digits, _ . -; at most 128) '
                "or a sha256: digest",
            )
        return f"{repository}/{image}:{version}"
    if image:
        if not _reference_ok(image):
            raise RenderError(f"{path}.image", f'Invalid value: "{image}": not a valid image reference')
        return image
    from_env = env.get(env_name, "")
    if from_env:
        if not _reference_ok(from_env):
            raise RenderError(
                f"{path}.version",
                f'no image for {what} in the GPUCluster, and the operator\'s {env_name}="{from_env}" '
                "is not a valid image reference",
            )
        return from_env
    raise RenderError(
        f"{path}.version",
        f"Required value: no image for {what}: set {path}.repository, {path}.image and {path}.version, "
        f"or the operator's {env_name} environment variable",
    )


# --- host paths ------------------------------------------------------------------------------

# Host paths end up in hostPath volumes and in the shell-sourced driver-ready file: keep them plain.
_HOST_PATH_RE = re.compile(r"^/[A-Za-z0-9._/+@:=,~-]*$")


@dataclass(frozen=True)
class HostPaths:
    """``spec.hostPaths``, checked and normalized (absolute, no trailing slash)."""

    root_fs: str
    driver_install_dir: str
    kubelet_root_dir: str

    @property
    def kubelet_plugins(self) -> str:
        return posixpath.join(self.kubelet_root_dir, "plugins")

    @property
    def kubelet_plugins_registry(self) -> str:
        return posixpath.join(self.kubelet_root_dir, "plugins_registry")

    @property
    def kubelet_pod_resources(self) -> str:
        return posixpath.join(self.kubelet_root_dir, "pod-resources")


def host_paths(cluster: gc.GPUCluster) -> HostPaths:
    spec = cluster.spec.hostPaths

    def check(name: str, value: str) -> str:
        path = f"spec.hostPaths.{name}"
        if not value.startswith("/"):
            raise RenderError(path, f'Invalid value: "{value}": must be an absolute path')
        normalized = posixpath.normpath(value)
        if normalized.startswith("//"):
            normalized = "/" + normalized.lstrip("/")
        if not _HOST_PATH_RE.match(normalized) or ".." in normalized.split("/"):
            raise RenderError(
                path,
                f'Invalid value: "{value}": must be a plain absolute path '
                "(letters, digits and . _ - + @ : = , ~; no spaces, quotes or ..)",
            )
        return normalized

    return HostPaths(
        root_fs=check("rootFS", spec.rootFS),
        driver_install_dir=check("driverInstallDir", spec.driverInstallDir),
        kubelet_root_dir=check("kubeletRootDir", spec.kubeletRootDir),
    )


# --- small helpers ---------------------------------------------------------------------------


def sorted_map(*maps: Mapping[str, str] | None) -> dict[str, str]:
    """The maps merged left to right (later wins), keys sorted."""
    merged: dict[str, str] = {}
    for m in maps:
        if m:
            merged.update(m)
    return dict(sorted(merged.items()))


def feature_gates_value(gates: Mapping[str, bool] | None) -> str | None:
    """``FEATURE_GATES`` as the DRA driver reads it: sorted ``Name=true|false``, comma-joined."""
    if not gates:
        return None
    return ",".join(f"{name}={'true' if value else 'false'}" for name, value in sorted(gates.items()))


def env_value(name: str, value: str) -> Obj:
    return {"name": name, "value": value}


def env_field(name: str, field_path: str) -> Obj:
    return {"name": name, "valueFrom": {"fieldRef": {"fieldPath": field_path}}}


def merge_env(base: Iterable[Obj], user: Sequence[EnvVar] | None) -> list[Obj]:
    """``base`` with the user's variables applied: a user variable replaces the base one of the
    same name in place, new ones are appended in order, a repeated user name keeps its last value.
    Names stay unique, as server-side apply needs for this list map."""
    out: dict[str, Obj] = {entry["name"]: entry for entry in base}
    for var in user or ():
        out[var.name] = var.to_dict()
    return list(out.values())


def resources(spec: ResourceRequirements | None, claims: Sequence[str] = ()) -> Obj | None:
    """A container's ``resources``: the user's limits/requests (keys sorted) and DRA claims."""
    out: Obj = {}
    if spec is not None:
        if spec.limits:
            out["limits"] = dict(sorted(spec.limits.items()))
        if spec.requests:
            out["requests"] = dict(sorted(spec.requests.items()))
    if claims:
        out["claims"] = [{"name": name} for name in claims]
    return out or None


def pull_secrets(names: Sequence[str] | None) -> list[Obj] | None:
    if not names:
        return None
    return [{"name": name} for name in dict.fromkeys(names)]


def fresh(value: Any) -> Any:
    """A deep copy sharing no dict or list, not even between equal parts (unlike
    ``copy.deepcopy``): YAML output gets no anchors and callers may mutate any object."""
    if isinstance(value, dict):
        return {k: fresh(v) for k, v in value.items()}
    if isinstance(value, list):
        return [fresh(v) for v in value]
    return value


def detached(objs: list[Obj]) -> list[Obj]:
    return [fresh(obj) for obj in objs]


def prune(obj: Obj) -> Obj:
    """``obj`` without keys whose value is None (one level), keeping key order."""
    return {k: v for k, v in obj.items() if v is not None}


def admin_claim_template(ctx: Ctx, name: str, request: str, *, all_devices: bool) -> Obj:
    """A ResourceClaimTemplate for administrative access to GPUs: every GPU of the node
    (``allocationMode: All``) or exactly one. adminAccess needs the namespace label
    ``resource.kubernetes.io/admin-access: "true"``, which the reconciler sets."""
    exactly: Obj = {"deviceClassName": DEVICE_CLASS_GPU}
    if all_devices:
        exactly["allocationMode"] = "All"
    else:
        exactly["allocationMode"] = "ExactCount"
        exactly["count"] = 1
    exactly["adminAccess"] = True
    return {
        "apiVersion": RESOURCE_API_VERSION,
        "kind": "ResourceClaimTemplate",
        "metadata": ctx.meta(name),
        "spec": {"spec": {"devices": {"requests": [{"name": request, "exactly": exactly}]}}},
    }


# --- metadata and workloads ------------------------------------------------------------------


@dataclass(frozen=True)
class Ctx:
    """One operand's rendering context: the CR, the facts, the operand's state and app name."""

    cluster: gc.GPUCluster
    facts: ClusterFacts
    state: str
    app: str

    @property
    def namespace(self) -> str:
        return self.facts.namespace

    def labels(self, component: str | None = None) -> dict[str, str]:
        labels = {
            "app.kubernetes.io/name": self.app,
            "app.kubernetes.io/managed-by": MANAGED_BY,
            "app.kubernetes.io/part-of": PART_OF,
            STATE_LABEL: self.state,
        }
        if component:
            labels["app.kubernetes.io/component"] = component
        return dict(sorted(labels.items()))

    def owner_references(self) -> list[Obj] | None:
        uid = self.facts.owner_uid or self.cluster.metadata.uid
        if not uid:
            return None
        return [
            {
                "apiVersion": gc.API_VERSION,
                "kind": gc.KIND,
                "name": self.cluster.metadata.name or gc.SINGLETON_NAME,
                "uid": uid,
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ]

    def meta(
        self,
        name: str,
        *,
        namespaced: bool = True,
        component: str | None = None,
        extra_labels: Mapping[str, str] | None = None,
        annotations: Mapping[str, str] | None = None,
    ) -> Obj:
        """Object metadata: our labels win over ``extra_labels`` (user labels never break the
        state label or a selector); namespaced objects get the operator namespace."""
        meta: Obj = {"name": name}
        if namespaced:
            meta["namespace"] = self.namespace
        meta["labels"] = sorted_map(extra_labels, self.labels(component))
        if annotations:
            meta["annotations"] = sorted_map(annotations)
        owners = self.owner_references()
        if owners:
            meta["ownerReferences"] = owners
        return meta

    # -- workloads: every daemonsets.* setting is applied here, for every operand --

    def pod_spec(
        self,
        *,
        service_account: str,
        containers: list[Obj],
        node_selector: Mapping[str, str] | None = None,
        init_containers: list[Obj] | None = None,
        volumes: list[Obj] | None = None,
        resource_claims: list[Obj] | None = None,
        image_pull_secrets: Sequence[str] | None = None,
        affinity: Obj | None = None,
        base_tolerations: Sequence[Obj] = (),
        host_network: bool = False,
        host_pid: bool = False,
        automount_token: bool | None = None,
    ) -> Obj:
        ds = self.cluster.spec.daemonsets
        tolerations = [*base_tolerations, *(t.to_dict() for t in ds.tolerations or ())]
        spec: Obj = {
            "priorityClassName": ds.priorityClassName or DEFAULT_PRIORITY_CLASS,
            "serviceAccountName": service_account,
            "automountServiceAccountToken": automount_token,
            "securityContext": ds.podSecurityContext.to_dict() if ds.podSecurityContext else None,
            "hostNetwork": True if host_network else None,
            "dnsPolicy": "ClusterFirstWithHostNet" if host_network else None,
            "hostPID": True if host_pid else None,
            "nodeSelector": dict(sorted(node_selector.items())) if node_selector else None,
            "affinity": affinity,
            "tolerations": tolerations or None,
            "imagePullSecrets": pull_secrets(image_pull_secrets),
            "resourceClaims": resource_claims,
            "initContainers": init_containers,
            "containers": containers,
            "volumes": volumes,
        }
        return prune(spec)

    def _template(
        self,
        selector: Mapping[str, str],
        component: str | None,
        pod_spec: Obj,
        annotations: Mapping[str, str] | None,
    ) -> Obj:
        ds = self.cluster.spec.daemonsets
        metadata: Obj = {"labels": sorted_map(ds.labels, self.labels(component), selector)}
        pod_annotations = sorted_map(ds.annotations, annotations)
        if pod_annotations:
            metadata["annotations"] = pod_annotations
        return {"metadata": metadata, "spec": pod_spec}

    def _workload_meta(self, name: str, component: str | None, selector: Mapping[str, str]) -> Obj:
        ds = self.cluster.spec.daemonsets
        return self.meta(
            name,
            component=component,
            extra_labels=sorted_map(ds.labels, selector),
            annotations=ds.annotations,
        )

    def daemonset(
        self,
        name: str,
        pod_spec: Obj,
        *,
        component: str | None = None,
        default_max_unavailable: str | None = None,
        pod_annotations: Mapping[str, str] | None = None,
    ) -> Obj:
        """A DaemonSet selecting its pods by ``app: <name>``, with ``daemonsets.*`` applied:
        labels and annotations (object and pods), updateStrategy and rollingUpdate; the pod spec
        got priorityClassName, tolerations and podSecurityContext from :meth:`pod_spec`."""
        ds = self.cluster.spec.daemonsets
        selector = {"app": name}
        strategy: Obj = {"type": ds.updateStrategy}
        if ds.updateStrategy == "RollingUpdate":
            max_unavailable: int | str | None = default_max_unavailable
            if ds.rollingUpdate is not None and ds.rollingUpdate.maxUnavailable is not None:
                max_unavailable = gc.daemonset_max_unavailable(ds.rollingUpdate.maxUnavailable)
            if max_unavailable is not None:
                strategy["rollingUpdate"] = {"maxUnavailable": max_unavailable}
        return {
            "apiVersion": "apps/v1",
            "kind": "DaemonSet",
            "metadata": self._workload_meta(name, component, selector),
            "spec": {
                "selector": {"matchLabels": selector},
                "updateStrategy": strategy,
                "template": self._template(selector, component, pod_spec, pod_annotations),
            },
        }

    def deployment(self, name: str, pod_spec: Obj, *, component: str | None = None, replicas: int = 1) -> Obj:
        """A Deployment with the ``daemonsets.*`` labels, annotations and pod settings applied
        (updateStrategy is a DaemonSet setting and does not apply)."""
        selector = {"app": name}
        return {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": self._workload_meta(name, component, selector),
            "spec": {
                "replicas": replicas,
                "selector": {"matchLabels": selector},
                "template": self._template(selector, component, pod_spec, None),
            },
        }

    # -- common object shapes --

    def service_account(self, name: str, component: str | None = None) -> Obj:
        return {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": self.meta(name, component=component)}

    def cluster_role(self, name: str, rules: list[Obj], component: str | None = None) -> Obj:
        return {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": self.meta(name, namespaced=False, component=component),
            "rules": rules,
        }

    def role(self, name: str, rules: list[Obj], component: str | None = None) -> Obj:
        return {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": self.meta(name, component=component),
            "rules": rules,
        }

    def binding(self, kind: str, name: str, role: str, service_account: str, component: str | None = None) -> Obj:
        """A RoleBinding or ClusterRoleBinding of ``role`` (same kind family) to a service account."""
        cluster = kind == "ClusterRoleBinding"
        return {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": kind,
            "metadata": self.meta(name, namespaced=not cluster, component=component),
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole" if cluster else "Role",
                "name": role,
            },
            "subjects": [{"kind": "ServiceAccount", "name": service_account, "namespace": self.namespace}],
        }

    def dcgm_scc(self, name: str, description: str, *, host_pid: bool) -> list[Obj]:
        """On OpenShift, the SecurityContextConstraints of a DCGM pod (host network and ports,
        privileged) for its own ServiceAccount ``name``; nothing elsewhere."""
        if not self.facts.openshift:
            return []
        return [self.scc(name, [name], description=description, host_network=True, host_pid=host_pid, host_ports=True)]

    def scc(
        self,
        name: str,
        service_accounts: Sequence[str],
        *,
        description: str,
        host_network: bool,
        host_pid: bool,
        host_ports: bool,
    ) -> Obj:
        """An OpenShift SecurityContextConstraints granting privileged, host-path access."""
        return {
            "apiVersion": "security.openshift.io/v1",
            "kind": "SecurityContextConstraints",
            "metadata": {
                **self.meta(name, namespaced=False),
                "annotations": {"kubernetes.io/description": description},
            },
            "allowHostDirVolumePlugin": True,
            "allowHostIPC": False,
            "allowHostNetwork": host_network,
            "allowHostPID": host_pid,
            "allowHostPorts": host_ports,
            "allowPrivilegeEscalation": True,
            "allowPrivilegedContainer": True,
            "allowedCapabilities": ["*"],
            "fsGroup": {"type": "RunAsAny"},
            "readOnlyRootFilesystem": False,
            "runAsUser": {"type": "RunAsAny"},
            "seLinuxContext": {"type": "RunAsAny"},
            "seccompProfiles": ["*"],
            "supplementalGroups": {"type": "RunAsAny"},
            "users": [f"system:serviceaccount:{self.namespace}:{sa}" for sa in service_accounts],
            "volumes": ["*"],
        }


def rule(groups: Sequence[str], resources: Sequence[str], verbs: Sequence[str]) -> Obj:
    return {"apiGroups": list(groups), "resources": list(resources), "verbs": list(verbs)}


READ = ("get", "list", "watch")
