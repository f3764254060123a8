"""Object metadata and pod spec validation, in kube-apiserver 1.34's order and words.

``metadata_causes`` is ValidateObjectMeta's label and annotation part (every kind);
``template_causes`` ValidatePodTemplateSpec (labels, annotations, then the pod spec);
``pod_spec_causes`` ValidatePodSpec (pkg/apis/core/validation/validation.go) for the fields this
project's operands and tests set: volumes (names, hostPath paths), containers then init
containers (name, image, env names, volume mounts, resources), the pod security context (user and
group IDs, sysctls, fsGroupChangePolicy, seccomp and AppArmor profiles, supplementalGroupsPolicy,
seLinuxChangePolicy), tolerations, priorityClassName and overhead. Maps are walked in insertion
order where Go's are random: cases that must agree name one bad key per map.
"""

from __future__ import annotations

import json
from typing import Any

from gpucluster.dra.quantity import Quantity, QuantityError
from gpucluster.sandbox.apiserver.selectors import label_value_errors, qualified_name_errors, subdomain_errors

Obj = dict[str, Any]
Cause = tuple[str, str, str]

QUANTITY_REGEXP = "^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$"
TOTAL_ANNOTATION_SIZE = 256 * (1 << 10)
MAX_ID = 2**31 - 1
SYSCTL_PATTERN = r"^([a-z0-9]([-_a-z0-9]*[a-z0-9])?[\./])*[a-z0-9]([-_a-z0-9]*[a-z0-9])?$"

_DNS1123_LABEL_MSG = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and "
    "end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is "
    "'[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
)


class DecodeError(ValueError):
    """The body cannot be decoded into the Go type at all (kube-apiserver answers 400, not 422)."""


def go_json(value: Any) -> str:
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def _invalid(path: str, value: Any, message: str) -> Cause:
    return ("FieldValueInvalid", path, f"Invalid value: {go_json(value)}: {message}")


def _not_supported(path: str, value: Any, supported: tuple[str, ...]) -> Cause:
    shown = ", ".join(go_json(s) for s in supported)
    return ("FieldValueNotSupported", path, f"Unsupported value: {go_json(value)}: supported values: {shown}")


def _required(path: str, detail: str = "") -> Cause:
    return ("FieldValueRequired", path, f"Required value: {detail}" if detail else "Required value")


# --- metadata -----------------------------------------------------------------------------------


def label_causes(labels: Any, path: str) -> list[Cause]:
    """ValidateLabels: each key a qualified name, each value a label value."""
    causes: list[Cause] = []
    for key, value in labels.items() if isinstance(labels, dict) else ():
        causes += [_invalid(path, key, m) for m in qualified_name_errors(str(key))]
        causes += [_invalid(path, value, m) for m in label_value_errors(str(value))]
    return causes


def annotation_causes(annotations: Any, path: str) -> list[Cause]:
    """ValidateAnnotations: keys qualified names once lower-cased; 256 KiB in all."""
    if not isinstance(annotations, dict):
        return []
    causes: list[Cause] = []
    for key in annotations:
        causes += [_invalid(path, key, m) for m in qualified_name_errors(str(key).lower())]
    size = sum(len(str(k)) + len(str(v)) for k, v in annotations.items())
    if size > TOTAL_ANNOTATION_SIZE:
        causes.append(("FieldValueTooLong", path, f"Too long: may not be more than {TOTAL_ANNOTATION_SIZE} bytes"))
    return causes


def metadata_causes(metadata: Any) -> list[Cause]:
    """The labels and annotations of an object's metadata (any kind, custom resources too)."""
    if not isinstance(metadata, dict):
        return []
    return label_causes(metadata.get("labels"), "metadata.labels") + annotation_causes(
        metadata.get("annotations"), "metadata.annotations"
    )


def template_causes(template: Any, path: str) -> list[Cause]:
    """ValidatePodTemplateSpec: ``<path>.labels`` and ``<path>.annotations`` (no ``.metadata``), then the spec."""
    template = template if isinstance(template, dict) else {}
    metadata = template.get("metadata") or {}
    causes = label_causes(metadata.get("labels"), f"{path}.labels")
    causes += annotation_causes(metadata.get("annotations"), f"{path}.annotations")
    return causes + pod_spec_causes(template.get("spec"), f"{path}.spec")


# --- quantities and resources -------------------------------------------------------------------


def quantity(value: Any) -> Quantity:
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise DecodeError(f"quantities must match the regular expression '{QUANTITY_REGEXP}'")
    try:
        return Quantity.parse(value if isinstance(value, str) else json.dumps(value))
    except QuantityError:
        raise DecodeError(f"quantities must match the regular expression '{QUANTITY_REGEXP}'") from None


_STANDARD_CONTAINER = ("cpu", "memory", "ephemeral-storage")
# helper.standardResources (IsStandardResourceName), hugepages aside.
_STANDARD = (
    *_STANDARD_CONTAINER,
    *("requests.cpu", "requests.memory", "requests.ephemeral-storage", "requests.storage"),
    *("limits.cpu", "limits.memory", "limits.ephemeral-storage"),
    *("pods", "quotas", "services", "replicationcontrollers", "resourcequotas", "secrets", "configmaps"),
    *("persistentvolumeclaims", "storage", "services.nodeports", "services.loadbalancers"),
)
HUGEPAGES = "hugepages-"


def is_native(name: str) -> bool:
    """helper.IsNativeResource: no domain, or kubernetes.io's."""
    return "/" not in name or "kubernetes.io/" in name


def is_extended(name: str) -> bool:
    """helper.IsExtendedResourceName: a domain of its own, and a qualified name after 'requests.'."""
    if is_native(name) or name.startswith("requests."):
        return False
    return not qualified_name_errors("requests." + name)


def _overcommit_allowed(name: str) -> bool:
    return is_native(name) and not name.startswith(HUGEPAGES)


def _resource_name_causes(name: str, path: str) -> list[Cause]:
    """validateContainerResourceName."""
    causes = [_invalid(path, name, m) for m in qualified_name_errors(name)]
    if (
        not causes
        and "/" not in name
        and not (name in _STANDARD or name.startswith(("hugepages-", "requests.hugepages-")))
    ):
        causes.append(_invalid(path, name, "must be a standard resource type or fully qualified"))
    if "/" not in name:
        if not (name in _STANDARD_CONTAINER or name.startswith(HUGEPAGES)):
            causes.append(_invalid(path, name, "must be a standard resource for containers"))
    elif not is_native(name) and not is_extended(name):
        causes.append(_invalid(path, name, "doesn't follow extended resource name standard"))
    return causes


def _quantity_causes(name: str, q: Quantity, path: str) -> list[Cause]:
    """ValidateResourceQuantityValue, then the hugepage size check."""
    causes: list[Cause] = []
    if q.sign() < 0:
        causes.append(("FieldValueInvalid", path, f'Invalid value: "{q}": must be greater than or equal to 0'))
    if is_extended(name) and q.value.denominator != 1:
        causes.append(("FieldValueInvalid", path, f'Invalid value: "{q}": must be an integer'))
    if name.startswith(HUGEPAGES) and not _whole_pages(name, q):
        causes.append(
            ("FieldValueInvalid", path, f'Invalid value: "{q}": {q} is not positive integer multiple of {name}')
        )
    return causes


def _whole_pages(name: str, q: Quantity) -> bool:
    """helper.IsHugePageResourceValueDivisible (Value() rounds up)."""
    try:
        page = Quantity.parse(name[len(HUGEPAGES) :])
    except QuantityError:
        return False
    if page.sign() <= 0 or page.value.denominator != 1:
        return False
    value = -((-q.value.numerator) // q.value.denominator)
    return value % int(page.value) == 0


def resources_causes(resources: Any, path: str) -> list[Cause]:
    """ValidateResourceRequirements: names, non-negative (integer for extended) quantities, hugepages
    in whole pages and with cpu or memory, requests at most (non-overcommitable: equal to) limits."""
    if not isinstance(resources, dict):
        return []
    causes: list[Cause] = []
    raw_limits = resources.get("limits")
    raw_requests = resources.get("requests")
    raw_limits = raw_limits if isinstance(raw_limits, dict) else {}
    raw_requests = raw_requests if isinstance(raw_requests, dict) else {}
    limits = {name: quantity(raw) for name, raw in raw_limits.items()}
    requests = {name: quantity(raw) for name, raw in raw_requests.items()}
    for name, q in limits.items():
        where = f"{path}.limits[{name}]"
        causes += _resource_name_causes(name, where) + _quantity_causes(name, q, where)
    for name, q in requests.items():
        where = f"{path}.requests[{name}]"
        causes += _resource_name_causes(name, where)
        causes += [c for c in _quantity_causes(name, q, where) if "multiple of" not in c[2]]
        limit = limits.get(name)
        if limit is not None:
            if q != limit and not _overcommit_allowed(name):
                causes.append(_invalid(f"{path}.requests", str(q), f"must be equal to {name} limit of {limit}"))
            elif q > limit:
                causes.append(
                    _invalid(f"{path}.requests", str(q), f"must be less than or equal to {name} limit of {limit}")
                )
        elif not _overcommit_allowed(name):
            causes.append(_required(f"{path}.limits", "Limit must be set for non overcommitable resources"))
        if name.startswith(HUGEPAGES) and not _whole_pages(name, q):
            causes.append(
                ("FieldValueInvalid", where, f'Invalid value: "{q}": {q} is not positive integer multiple of {name}')
            )
    names = set(limits) | set(requests)
    if any(n.startswith(HUGEPAGES) for n in names) and not names & {"cpu", "memory"}:
        causes.append(("FieldValueForbidden", path, "Forbidden: HugePages require cpu or memory"))
    return causes


# --- volumes, containers ----------------------------------------------------------------------------


def _backstep(path: str) -> bool:
    return ".." in path.replace("\\", "/").split("/")


def _volumes(volumes: Any, path: str) -> tuple[set[str], list[Cause]]:
    """ValidateVolumes for names and hostPath paths: the names of the valid volumes, and the causes."""
    names: set[str] = set()
    causes: list[Cause] = []
    for i, volume in enumerate(volumes if isinstance(volumes, list) else []):
        if not isinstance(volume, dict):
            continue
        where = f"{path}[{i}]"
        own: list[Cause] = []
        host_path = volume.get("hostPath")
        if isinstance(host_path, dict):
            value = str(host_path.get("path") or "")
            if not value:
                own.append(_required(f"{where}.hostPath.path"))
            elif _backstep(value):
                own.append(_invalid(f"{where}.hostPath.path", value, "must not contain '..'"))
        name = str(volume.get("name") or "")
        if not name:
            own.append(_required(f"{where}.name"))
        elif name in names:
            own.append(("FieldValueDuplicate", f"{where}.name", f"Duplicate value: {go_json(name)}"))
        if own:
            causes += own
        else:
            names.add(name)
    return names, causes


def _env_causes(env: Any, path: str) -> list[Cause]:
    """ValidateEnv with 1.34's relaxed names: printable ASCII but '='."""
    causes: list[Cause] = []
    for i, var in enumerate(env if isinstance(env, list) else []):
        name = str((var or {}).get("name") or "") if isinstance(var, dict) else ""
        where = f"{path}[{i}].name"
        if not name:
            causes.append(_required(where))
        elif any(not 32 <= ord(c) <= 126 or c == "=" for c in name):
            causes.append(
                _invalid(
                    where,
                    name,
                    "a valid environment variable name must consist only of printable ASCII characters other than '='",
                )
            )
    return causes


def _mount_causes(mounts: Any, volumes: set[str], path: str) -> list[Cause]:
    """ValidateVolumeMounts: a known volume, a mount path, each mount path once."""
    causes: list[Cause] = []
    seen: set[str] = set()
    for i, mount in enumerate(mounts if isinstance(mounts, list) else []):
        if not isinstance(mount, dict):
            continue
        where = f"{path}[{i}]"
        name = str(mount.get("name") or "")
        if not name:
            causes.append(_required(f"{where}.name"))
        if name not in volumes:
            causes.append(("FieldValueNotFound", f"{where}.name", f"Not found: {go_json(name)}"))
        mount_path = str(mount.get("mountPath") or "")
        if not mount_path:
            causes.append(_required(f"{where}.mountPath"))
        if mount_path in seen:
            causes.append(_invalid(f"{where}.mountPath", mount_path, "must be unique"))
        seen.add(mount_path)
    return causes


def _container_causes(container: Any, volumes: set[str], path: str) -> list[Cause]:
    """validateContainerCommon for the fields checked here."""
    if not isinstance(container, dict):
        return []
    causes: list[Cause] = []
    name = container.get("name")
    if not name:
        causes.append(_required(f"{path}.name"))
    elif not _dns1123_label(str(name)):
        causes.append(("FieldValueInvalid", f"{path}.name", f'Invalid value: "{name}": {_DNS1123_LABEL_MSG}'))
    if not container.get("image"):
        causes.append(_required(f"{path}.image"))
    causes += _env_causes(container.get("env"), f"{path}.env")
    causes += _mount_causes(container.get("volumeMounts"), volumes, f"{path}.volumeMounts")
    causes += resources_causes(container.get("resources"), f"{path}.resources")
    return causes


def _dns1123_label(value: str) -> bool:
    import re

    return len(value) <= 63 and re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", value) is not None


# --- the pod security context -------------------------------------------------------------------


def _id_causes(value: Any, path: str) -> list[Cause]:
    if isinstance(value, int) and not isinstance(value, bool) and not 0 <= value <= MAX_ID:
        return [("FieldValueInvalid", path, f"Invalid value: {value}: must be between 0 and {MAX_ID}, inclusive")]
    return []


def _normalized_sysctl(name: str) -> str:
    """sysctl.NormalizeName: a name whose first separator is '/' swaps '/' and '.'."""
    first = next((i for i, c in enumerate(name) if c in "./"), -1)
    if first == -1 or name[first] == ".":
        return name
    return name.translate(str.maketrans("./", "/."))


def _sysctl_causes(sysctls: Any, host_network: bool, host_ipc: bool, path: str) -> list[Cause]:
    import re

    causes: list[Cause] = []
    seen: set[str] = set()
    for i, sysctl in enumerate(sysctls if isinstance(sysctls, list) else []):
        name = str((sysctl or {}).get("name") or "") if isinstance(sysctl, dict) else ""
        where = f"{path}[{i}].name"
        if not name:
            causes.append(_required(where))
        elif len(name) > 253 or not re.fullmatch(SYSCTL_PATTERN, name):
            causes.append(_invalid(where, name, f"must have at most 253 characters and match regex {SYSCTL_PATTERN}"))
        elif name in seen:
            causes.append(("FieldValueDuplicate", where, f"Duplicate value: {go_json(name)}"))
        normalized = _normalized_sysctl(name)
        if host_network and normalized.startswith("net."):
            causes.append(_invalid(where, name, "may not be specified when 'hostNetwork' is true"))
        elif host_ipc and (
            normalized == "kernel.sem" or normalized.startswith(("kernel.shm", "kernel.msg", "fs.mqueue."))
        ):
            causes.append(_invalid(where, name, "may not be specified when 'hostIPC' is true"))
        seen.add(name)
    return causes


_PROFILE_TYPES = ("Localhost", "RuntimeDefault", "Unconfined")


def _seccomp_causes(profile: Any, path: str) -> list[Cause]:
    if not isinstance(profile, dict):
        return []
    causes: list[Cause] = []
    kind = profile.get("type") or ""
    if not kind:
        causes.append(_required(f"{path}.type", "type is required when seccompProfile is set"))
    elif kind not in _PROFILE_TYPES:
        causes.append(_not_supported(f"{path}.type", kind, _PROFILE_TYPES))
    local = profile.get("localhostProfile")
    where = f"{path}.localhostProfile"
    if kind == "Localhost":
        if local is None:
            causes.append(_required(where, "must be set when seccomp type is Localhost"))
        elif str(local).startswith("/"):
            causes.append(_invalid(where, local, "must be a relative path"))
        elif _backstep(str(local)):
            causes.append(_invalid(where, local, "must not contain '..'"))
    elif local is not None:
        shown = {"Type": kind, "LocalhostProfile": local}
        causes.append(_invalid(where, shown, "can only be set when seccomp type is Localhost"))
    return causes


def _apparmor_causes(profile: Any, path: str) -> list[Cause]:
    if not isinstance(profile, dict):
        return []
    kind = profile.get("type") or ""
    local = profile.get("localhostProfile")
    where = f"{path}.localhostProfile"
    if kind == "Localhost":
        if not local:
            return [_required(where, "must be set when AppArmor type is Localhost")]
        causes: list[Cause] = []
        if str(local).strip() != local:
            causes.append(_invalid(where, local, "must not be padded with whitespace"))
        if len(str(local).encode()) > 4095:
            causes.append(("FieldValueTooLong", where, "Too long: may not be more than 4095 bytes"))
        return causes
    if kind in ("RuntimeDefault", "Unconfined"):
        return [_invalid(where, local, "can only be set when AppArmor type is Localhost")] if local is not None else []
    if not kind:
        return [_required(f"{path}.type", "type is required when appArmorProfile is set")]
    return [_not_supported(f"{path}.type", kind, _PROFILE_TYPES)]


def security_context_causes(context: Any, spec: Obj, path: str) -> list[Cause]:
    """validatePodSpecSecurityContext."""
    if not isinstance(context, dict):
        return []
    causes = _id_causes(context.get("fsGroup"), f"{path}.fsGroup")
    causes += _id_causes(context.get("runAsUser"), f"{path}.runAsUser")
    causes += _id_causes(context.get("runAsGroup"), f"{path}.runAsGroup")
    for i, gid in enumerate(context.get("supplementalGroups") or []):
        causes += _id_causes(gid, f"{path}.supplementalGroups[{i}]")
    if context.get("sysctls"):
        causes += _sysctl_causes(
            context["sysctls"], bool(spec.get("hostNetwork")), bool(spec.get("hostIPC")), f"{path}.sysctls"
        )
    policy = context.get("fsGroupChangePolicy")
    if policy is not None and policy not in ("OnRootMismatch", "Always"):
        causes.append(_not_supported(f"{path}.fsGroupChangePolicy", policy, ("Always", "OnRootMismatch")))
    causes += _seccomp_causes(context.get("seccompProfile"), f"{path}.seccompProfile")
    causes += _apparmor_causes(context.get("appArmorProfile"), f"{path}.appArmorProfile")
    groups = context.get("supplementalGroupsPolicy")
    if groups is not None and groups not in ("Merge", "Strict"):
        causes.append(_not_supported(f"{path}.supplementalGroupsPolicy", groups, ("Merge", "Strict")))
    selinux = context.get("seLinuxChangePolicy")
    if selinux is not None and selinux != "Recursive":  # MountOption needs SELinuxMount, off in 1.34
        causes.append(_not_supported(f"{path}.seLinuxChangePolicy", selinux, ("Recursive",)))
    return causes


# --- tolerations --------------------------------------------------------------------------------

_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")


def toleration_causes(tolerations: Any, path: str) -> list[Cause]:
    """ValidateTolerations."""
    causes: list[Cause] = []
    for i, toleration in enumerate(tolerations if isinstance(tolerations, list) else []):
        if not isinstance(toleration, dict):
            continue
        where = f"{path}[{i}]"
        key = str(toleration.get("key") or "")
        operator = str(toleration.get("operator") or "")
        value = str(toleration.get("value") or "")
        effect = str(toleration.get("effect") or "")
        if key:
            causes += [_invalid(f"{where}.key", key, m) for m in qualified_name_errors(key)]
        if not key and operator != "Exists":
            causes.append(
                _invalid(
                    f"{where}.operator",
                    operator,
                    'operator must be Exists when `key` is empty, which means "match all values and all keys"',
                )
            )
        if toleration.get("tolerationSeconds") is not None and effect != "NoExecute":
            causes.append(
                _invalid(f"{where}.effect", effect, "effect must be 'NoExecute' when `tolerationSeconds` is set")
            )
        if operator in ("Equal", ""):
            errors = label_value_errors(value)
            if errors:
                causes.append(_invalid(f"{where}.operator", value, ";".join(errors)))
        elif operator == "Exists":
            if value:
                causes.append(_invalid(f"{where}.operator", value, "value must be empty when `operator` is 'Exists'"))
        else:
            causes.append(_not_supported(f"{where}.operator", operator, ("Equal", "Exists")))
        if effect and effect not in _EFFECTS:
            causes.append(_not_supported(f"{where}.effect", effect, _EFFECTS))
    return causes


# --- the pod spec -------------------------------------------------------------------------------


def pod_spec_causes(spec: Any, path: str) -> list[Cause]:
    """ValidatePodSpec, in its order, for the fields listed in the module docstring."""
    if not isinstance(spec, dict):
        return [_required(path)]
    volumes, causes = _volumes(spec.get("volumes"), f"{path}.volumes")
    containers = spec.get("containers")
    containers = containers if isinstance(containers, list) else []
    if not containers:
        causes.append(_required(f"{path}.containers"))
    names: set[str] = set()
    for i, container in enumerate(containers):
        where = f"{path}.containers[{i}]"
        causes += _container_causes(container, volumes, where)
        name = str((container or {}).get("name") or "") if isinstance(container, dict) else ""
        if name and name in names:
            causes.append(("FieldValueDuplicate", f"{where}.name", f'Duplicate value: "{name}"'))
        names.add(name)
    for i, container in enumerate(spec.get("initContainers") or []):
        where = f"{path}.initContainers[{i}]"
        causes += _container_causes(container, volumes, where)
        name = str((container or {}).get("name") or "") if isinstance(container, dict) else ""
        if name and name in names:
            causes.append(("FieldValueDuplicate", f"{where}.name", f'Duplicate value: "{name}"'))
        elif name:
            names.add(name)
    causes += security_context_causes(spec.get("securityContext"), spec, f"{path}.securityContext")
    if spec.get("tolerations"):
        causes += toleration_causes(spec["tolerations"], f"{path}.tolerations")
    priority = spec.get("priorityClassName")
    if priority:
        causes += [_invalid(f"{path}.priorityClassName", priority, m) for m in subdomain_errors(str(priority))]
    for name, raw in (spec.get("overhead") or {}).items() if isinstance(spec.get("overhead"), dict) else ():
        q = quantity(raw)
        if q.sign() < 0:
            causes.append(
                (
                    "FieldValueInvalid",
                    f"{path}.overhead[{name}]",
                    f'Invalid value: "{q}": must be greater than or equal to 0',
                )
            )
    return causes
