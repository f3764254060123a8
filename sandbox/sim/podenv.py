"""What a kubelet computes for a container before it starts it: which program runs, its argv, its
environment and the files of its volumes. Pure functions over the pod and the objects it refers
to; ``process.py`` does the I/O.

* Images: a repository ending in ``/gpucluster`` runs the installed gpucluster command (the
  image entrypoint ``gpucluster``), ``registry.k8s.io/kubectl`` the local kubectl; more can be
  added (``entrypoints``). Kubernetes semantics: ``command`` replaces the entrypoint, ``args``
  are appended to it.
* Environment: ``envFrom`` then ``env`` (later wins), ``$(VAR)`` expanded against what is
  defined so far (``$$`` escapes, unknown references stay as written), ``fieldRef``,
  ``resourceFieldRef`` (limits/requests, divisor 1), ``secretKeyRef``, ``configMapKeyRef``
  (``optional``).
* Mount paths are remapped into the pod directory: every occurrence of a mount path at a path
  boundary in command, args and env values becomes ``<poddir><mountPath>``.
"""

from __future__ import annotations

import base64
import re
import shutil
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

Obj = dict[str, Any]

SERVICEACCOUNT_PATH = "/var/run/secrets/kubernetes.io/serviceaccount"
GPUCLUSTER_SUFFIX = "/gpucluster"
KUBECTL_REPOSITORY = "registry.k8s.io/kubectl"


class ConfigError(Exception):
    """The container cannot be configured yet (CreateContainerConfigError): a missing Secret key..."""


def repository(image: str) -> str:
    """``ghcr.io/gpucluster/gpucluster:0.1.0@sha256:..`` -> ``ghcr.io/gpucluster/gpucluster``."""
    name = image.partition("@")[0]
    head, sep, last = name.rpartition("/")
    return head + sep + last.split(":", 1)[0]


def gpucluster_command() -> list[str]:
    """The installed gpucluster command of this interpreter (the same install as the sandbox)."""
    return [sys.executable, "-m", "gpucluster.cli"]


def kubectl_command() -> list[str] | None:
    found = shutil.which("kubectl") or ("/usr/bin/kubectl" if Path("/usr/bin/kubectl").exists() else None)
    return [found] if found else None


@dataclass(frozen=True)
class Entrypoint:
    """How an image runs locally: the program standing for the image's entrypoint ``name``."""

    name: str
    argv: tuple[str, ...]
    kubeconfig: bool = False
    """Write an in-cluster kubeconfig and set KUBECONFIG (kubectl does not read the remapped path)."""


def default_entrypoints() -> list[tuple[Callable[[str], bool], Entrypoint]]:
    out: list[tuple[Callable[[str], bool], Entrypoint]] = [
        (
            lambda repo: repo.endswith(GPUCLUSTER_SUFFIX) or repo == "gpucluster",
            Entrypoint("gpucluster", tuple(gpucluster_command())),
        )
    ]
    kubectl = kubectl_command()
    if kubectl:
        out.append((lambda repo: repo == KUBECTL_REPOSITORY, Entrypoint("kubectl", tuple(kubectl), kubeconfig=True)))
    return out


def entrypoint_for(
    image: str, extra: Mapping[str, Sequence[str]], defaults: Iterable[tuple[Callable[[str], bool], Entrypoint]]
) -> Entrypoint | None:
    """The local program for ``image``, or None (the pod stays simulated). ``extra`` maps a
    repository to an argv (tests: ``{"example.com/python": [sys.executable]}``)."""
    repo = repository(image)
    if repo in extra:
        argv = tuple(extra[repo])
        return Entrypoint(Path(argv[0]).name, argv)
    for matches, entry in defaults:
        if matches(repo):
            return entry
    return None


def pod_runs_locally(pod: Obj, extra: Mapping[str, Sequence[str]], defaults: Sequence[Any]) -> bool:
    """A pod runs as processes when every container (init included) has a local program."""
    spec = pod.get("spec") or {}
    containers = [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]
    return bool(containers) and all(entrypoint_for(str(c.get("image") or ""), extra, defaults) for c in containers)


def argv_for(container: Obj, entry: Entrypoint, env: Mapping[str, str], remap: Callable[[str], str]) -> list[str]:
    """command replaces the entrypoint, args follow it; ``$(VAR)`` expanded, mount paths remapped.
    A command naming the entrypoint (``gpucluster``, ``/usr/bin/kubectl``) runs the local program."""
    command = [expand(remap(str(c)), env) for c in container.get("command") or []]
    args = [expand(remap(str(a)), env) for a in container.get("args") or []]
    if not command:
        return [*entry.argv, *args]
    if Path(command[0]).name == entry.name:
        return [*entry.argv, *command[1:], *args]
    return [*command, *args]


# --------------------------------------------------------------------------- $(VAR) expansion

_REF = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")


def expand(text: str, env: Mapping[str, str]) -> str:
    """Kubernetes' ``expansion.Expand``: ``$(VAR)`` -> value when defined, ``$$`` -> ``$``."""

    def sub(m: re.Match[str]) -> str:
        if m.group(0) == "$$":
            return "$"
        name = m.group(1)
        return env[name] if name in env else m.group(0)

    return _REF.sub(sub, text)


# --------------------------------------------------------------------------- env


@dataclass(frozen=True)
class PodContext:
    """What field references and volumes read besides the pod: other objects, IPs."""

    pod: Obj
    pod_ip: str
    host_ip: str
    lookup: Callable[[str, str], Obj | None]
    """(kind "secrets"/"configmaps", name) -> the object in the pod's namespace, or None."""


def field_value(pod: Obj, path: str, pod_ip: str, host_ip: str) -> str:
    md, spec = pod.get("metadata") or {}, pod.get("spec") or {}
    simple = {
        "metadata.name": md.get("name"),
        "metadata.namespace": md.get("namespace"),
        "metadata.uid": md.get("uid"),
        "spec.nodeName": spec.get("nodeName"),
        "spec.serviceAccountName": spec.get("serviceAccountName"),
        "status.podIP": pod_ip,
        "status.podIPs": pod_ip,
        "status.hostIP": host_ip,
        "status.hostIPs": host_ip,
    }
    if path in simple:
        return str(simple[path] or "")
    m = re.fullmatch(r"metadata\.(labels|annotations)\['([^']*)'\]", path)
    if m:
        return str((md.get(m.group(1)) or {}).get(m.group(2), ""))
    if path in ("metadata.labels", "metadata.annotations"):
        values = md.get(path.split(".")[1]) or {}
        return "\n".join(f'{k}="{v}"' for k, v in sorted(values.items()))
    raise ConfigError(f'unsupported fieldPath: "{path}"')


def _decoded(secret: Obj, key: str) -> str | None:
    if key in (secret.get("stringData") or {}):
        return str(secret["stringData"][key])
    raw = (secret.get("data") or {}).get(key)
    if raw is None:
        return None
    return base64.b64decode(raw).decode(errors="replace")


def _key_ref(ctx: PodContext, ref: Obj, kind: str) -> str | None:
    name, key = str(ref.get("name") or ""), str(ref.get("key") or "")
    obj = ctx.lookup(kind, name)
    label = "secret" if kind == "secrets" else "configmap"
    ns = (ctx.pod.get("metadata") or {}).get("namespace")
    if obj is None:
        if ref.get("optional"):
            return None
        raise ConfigError(f'{label} "{name}" not found')
    value = _decoded(obj, key) if kind == "secrets" else (obj.get("data") or {}).get(key)
    if value is None:
        if ref.get("optional"):
            return None
        raise ConfigError(f"couldn't find key {key} in {'Secret' if kind == 'secrets' else 'ConfigMap'} {ns}/{name}")
    return str(value)


def _resource_value(container: Obj, ref: Obj) -> str:
    resource = str(ref.get("resource") or "")
    section, _, name = resource.partition(".")
    value = ((container.get("resources") or {}).get(section) or {}).get(name)
    if value is None:
        return "0"
    return str(value)


def container_env(
    ctx: PodContext,
    container: Obj,
    base: Mapping[str, str],
    containers: Sequence[Obj] = (),
    remap: Callable[[str], str] = lambda text: text,
) -> dict[str, str]:
    """The container's environment: ``base`` (the kubelet's own variables), envFrom, env. Literal
    ``value``s get ``remap`` (mount paths) before ``$(VAR)`` expansion, so expanded values are not
    rewritten twice."""
    env = dict(base)
    for source in container.get("envFrom") or []:
        prefix = str(source.get("prefix") or "")
        for kind, field_name in (("configmaps", "configMapRef"), ("secrets", "secretRef")):
            ref = source.get(field_name)
            if not ref:
                continue
            obj = ctx.lookup(kind, str(ref.get("name") or ""))
            if obj is None:
                if ref.get("optional"):
                    continue
                raise ConfigError(f'{"secret" if kind == "secrets" else "configmap"} "{ref.get("name")}" not found')
            keys = sorted({*(obj.get("data") or {}), *(obj.get("stringData") or {})})
            for key in keys:
                value = _decoded(obj, key) if kind == "secrets" else str((obj.get("data") or {})[key])
                if value is not None:
                    env[prefix + key] = value
    for var in container.get("env") or []:
        name = str(var.get("name") or "")
        source = var.get("valueFrom")
        if not source:
            env[name] = expand(remap(str(var.get("value") or "")), env)
            continue
        if "fieldRef" in source:
            env[name] = field_value(ctx.pod, str(source["fieldRef"].get("fieldPath") or ""), ctx.pod_ip, ctx.host_ip)
        elif "resourceFieldRef" in source:
            target = container
            wanted = source["resourceFieldRef"].get("containerName")
            if wanted:
                target = next((c for c in containers if c.get("name") == wanted), container)
            env[name] = _resource_value(target, source["resourceFieldRef"])
        elif "secretKeyRef" in source:
            value = _key_ref(ctx, source["secretKeyRef"], "secrets")
            if value is not None:
                env[name] = value
        elif "configMapKeyRef" in source:
            value = _key_ref(ctx, source["configMapKeyRef"], "configmaps")
            if value is not None:
                env[name] = value
    return env


# --------------------------------------------------------------------------- mount paths


def remapper(pod_dir: Path, mount_paths: Iterable[str]) -> Callable[[str], str]:
    """A function rewriting every mount path (at a path boundary) in a string to ``pod_dir + path``."""
    paths = sorted({p.rstrip("/") for p in mount_paths if p and p.rstrip("/")}, key=len, reverse=True)
    if not paths:
        return lambda text: text
    pattern = re.compile(r"(?<![\w.\-/])(" + "|".join(re.escape(p) for p in paths) + r")(?=/|$|[^\w.\-])")
    root = str(pod_dir)
    return lambda text: pattern.sub(lambda m: root + m.group(1), text)


# --------------------------------------------------------------------------- volume files


@dataclass(frozen=True)
class VolumeFile:
    path: str
    data: bytes
    mode: int


def _items(data: Mapping[str, bytes], items: Sequence[Obj] | None, mode: int, optional: bool) -> list[VolumeFile]:
    if not items:
        return [VolumeFile(k, v, mode) for k, v in sorted(data.items())]
    out = []
    for item in items:
        key = str(item.get("key") or "")
        if key not in data:
            if optional:
                continue
            raise ConfigError(f"references non-existent key {key}")
        out.append(VolumeFile(str(item.get("path") or key), data[key], int(item.get("mode") or mode)))
    return out


def _secret_data(obj: Obj) -> dict[str, bytes]:
    out = {k: base64.b64decode(v) for k, v in (obj.get("data") or {}).items()}
    out.update({k: str(v).encode() for k, v in (obj.get("stringData") or {}).items()})
    return out


def _configmap_data(obj: Obj) -> dict[str, bytes]:
    out = {k: str(v).encode() for k, v in (obj.get("data") or {}).items()}
    out.update({k: base64.b64decode(v) for k, v in (obj.get("binaryData") or {}).items()})
    return out


def source_files(
    ctx: PodContext, source: Obj, default_mode: int, token: Callable[[Obj], str], ca_pem: str
) -> list[VolumeFile]:
    """Files of one Secret/ConfigMap/downwardAPI/serviceAccountToken source (a volume or a
    projection). ``token(source)`` issues a service-account token for a projected source."""
    if "secret" in source or "secretName" in source:
        spec = source.get("secret", source)
        name = str(spec.get("secretName") or spec.get("name") or "")
        obj = ctx.lookup("secrets", name)
        if obj is None:
            if spec.get("optional"):
                return []
            raise ConfigError(f'secret "{name}" not found')
        return _items(
            _secret_data(obj),
            spec.get("items"),
            int(spec.get("defaultMode") or default_mode),
            bool(spec.get("optional")),
        )
    if "configMap" in source:
        spec = source["configMap"]
        name = str(spec.get("name") or "")
        obj = ctx.lookup("configmaps", name)
        if obj is None and name == "kube-root-ca.crt":
            obj = {"data": {"ca.crt": ca_pem}}  # no root-CA publisher runs in the sandbox
        if obj is None:
            if spec.get("optional"):
                return []
            raise ConfigError(f'configmap "{name}" not found')
        return _items(
            _configmap_data(obj),
            spec.get("items"),
            int(spec.get("defaultMode") or default_mode),
            bool(spec.get("optional")),
        )
    if "downwardAPI" in source:
        out = []
        for item in source["downwardAPI"].get("items") or []:
            ref = item.get("fieldRef")
            if not ref:
                continue
            value = field_value(ctx.pod, str(ref.get("fieldPath") or ""), ctx.pod_ip, ctx.host_ip)
            out.append(VolumeFile(str(item.get("path")), value.encode(), int(item.get("mode") or default_mode)))
        return out
    if "serviceAccountToken" in source:
        spec = source["serviceAccountToken"]
        return [VolumeFile(str(spec.get("path") or "token"), token(spec).encode(), default_mode)]
    return []


def volume_files(ctx: PodContext, volume: Obj, token: Callable[[Obj], str], ca_pem: str) -> list[VolumeFile] | None:
    """The files of a Secret, ConfigMap, downwardAPI or projected volume; None for a directory
    volume (emptyDir, hostPath and the rest, which start empty here)."""
    mode = 0o644
    if "secret" in volume:
        return source_files(ctx, {"secret": volume["secret"]}, mode, token, ca_pem)
    if "configMap" in volume:
        return source_files(ctx, {"configMap": volume["configMap"]}, mode, token, ca_pem)
    if "downwardAPI" in volume:
        spec = volume["downwardAPI"]
        return source_files(ctx, {"downwardAPI": spec}, int(spec.get("defaultMode") or mode), token, ca_pem)
    if "projected" in volume:
        spec = volume["projected"]
        default = int(spec.get("defaultMode") or mode)
        out: list[VolumeFile] = []
        for source in spec.get("sources") or []:
            out.extend(source_files(ctx, source, default, token, ca_pem))
        return out
    return None


def service_account_volume(pod: Obj, service_account: Obj | None) -> Obj | None:
    """The ``kube-api-access-*`` volume kube-apiserver's ServiceAccount admission adds, when the pod
    has none of its own at the service-account path and automounting is not switched off."""
    spec = pod.get("spec") or {}
    automount = spec.get("automountServiceAccountToken")
    if automount is None and service_account is not None:
        automount = service_account.get("automountServiceAccountToken")
    if automount is False:
        return None
    for c in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]:
        if any(str(m.get("mountPath") or "").rstrip("/") == SERVICEACCOUNT_PATH for m in c.get("volumeMounts") or []):
            return None
    return {
        "name": "kube-api-access-sandbox",
        "projected": {
            "defaultMode": 0o644,
            "sources": [
                {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"fieldPath": "metadata.namespace"}}]}},
            ],
        },
    }
