"""Defaults and validation of the built-in kinds (the parts this project relies on).

Much less than kube-apiserver's validation: names, the required fields of pods and workloads,
selector/template agreement, ResourceClaim spec immutability and the adminAccess namespace rule.
"""

from __future__ import annotations

import ipaddress
import json
import re
from typing import Any

from gpucluster.clusterstate import ADMIN_ACCESS_LABEL
from gpucluster.sandbox.apiserver import podspec
from gpucluster.sandbox.apiserver.podspec import DecodeError
from gpucluster.sandbox.apiserver.selectors import label_value_errors, qualified_name_errors, subdomain_errors

Obj = dict[str, Any]
Cause = tuple[str, str, str]

DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS1035_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")

_SUBDOMAIN_MSG = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must "
    "start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is "
    "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
)
_LABEL_MSG = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and "
    "end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is "
    "'[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
)
_DNS1035_MSG = (
    "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic "
    "character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for "
    "validation is '[a-z]([-a-z0-9]*[a-z0-9])?')"
)

# Resources whose names are DNS labels / DNS-1035 labels rather than subdomains.
_LABEL_NAMES = {("", "namespaces")}
_DNS1035_NAMES = {("", "services")}
# Names that are path segments only (RBAC names may contain ':').
_PATH_SEGMENT_NAMES = {
    ("rbac.authorization.k8s.io", "roles"),
    ("rbac.authorization.k8s.io", "rolebindings"),
    ("rbac.authorization.k8s.io", "clusterroles"),
    ("rbac.authorization.k8s.io", "clusterrolebindings"),
}


def path_segment_errors(name: str) -> list[str]:
    """path.IsValidPathSegmentName: RBAC names (and role references) are path segments only."""
    if name in (".", ".."):
        return [f"may not be '{name}'"]
    return [f"may not contain '{c}'" for c in ("/", "%") if c in name]


def name_causes(group: str, plural: str, name: str) -> list[Cause]:
    key = (group, plural)
    if key in _PATH_SEGMENT_NAMES:
        return [
            ("FieldValueInvalid", "metadata.name", f"Invalid value: {go_json(name)}: {m}")
            for m in path_segment_errors(name)
        ]
    if key in _DNS1035_NAMES:
        if len(name) > 63 or not DNS1035_LABEL.match(name):
            return [("FieldValueInvalid", "metadata.name", f'Invalid value: "{name}": {_DNS1035_MSG}')]
        return []
    if key in _LABEL_NAMES:
        if len(name) > 63 or not DNS1123_LABEL.match(name):
            return [("FieldValueInvalid", "metadata.name", f'Invalid value: "{name}": {_LABEL_MSG}')]
        return []
    if len(name) > 253 or not DNS1123_SUBDOMAIN.match(name):
        return [("FieldValueInvalid", "metadata.name", f'Invalid value: "{name}": {_SUBDOMAIN_MSG}')]
    return []


# ---------------------------------------------------------------- apimachinery's value checks


def go_json(value: Any) -> str:
    """How a field error prints its bad value: Go's json.Marshal (compact, HTML characters escaped)."""
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def label_selector_causes(selector: Any, path: str) -> list[Cause]:
    """ValidateLabelSelector (label values checked too): matchLabels keys and values, each
    requirement's operator, values and key."""
    if not isinstance(selector, dict):
        return []
    causes: list[Cause] = []
    match_labels = selector.get("matchLabels")
    for key, value in sorted(match_labels.items()) if isinstance(match_labels, dict) else []:
        causes += [
            ("FieldValueInvalid", f"{path}.matchLabels", f"Invalid value: {go_json(key)}: {m}")
            for m in qualified_name_errors(str(key))
        ]
        causes += [
            ("FieldValueInvalid", f"{path}.matchLabels", f"Invalid value: {go_json(value)}: {m}")
            for m in label_value_errors(str(value))
        ]
    expressions = selector.get("matchExpressions")
    for i, expr in enumerate(expressions if isinstance(expressions, list) else []):
        where = f"{path}.matchExpressions[{i}]"
        expr = expr if isinstance(expr, dict) else {}
        operator, values = str(expr.get("operator") or ""), expr.get("values") or []
        if operator in ("In", "NotIn"):
            if not values:
                causes.append(
                    (
                        "FieldValueRequired",
                        f"{where}.values",
                        "Required value: must be specified when `operator` is 'In' or 'NotIn'",
                    )
                )
        elif operator in ("Exists", "DoesNotExist"):
            if values:
                causes.append(
                    (
                        "FieldValueForbidden",
                        f"{where}.values",
                        "Forbidden: may not be specified when `operator` is 'Exists' or 'DoesNotExist'",
                    )
                )
        else:
            causes.append(
                (
                    "FieldValueInvalid",
                    f"{where}.operator",
                    f"Invalid value: {go_json(operator)}: not a valid selector operator",
                )
            )
        key = str(expr.get("key") or "")
        causes += [
            ("FieldValueInvalid", f"{where}.key", f"Invalid value: {go_json(key)}: {m}")
            for m in qualified_name_errors(key)
        ]
        for j, value in enumerate(values if isinstance(values, list) else []):
            causes += [
                ("FieldValueInvalid", f"{where}.values[{j}]", f"Invalid value: {go_json(value)}: {m}")
                for m in label_value_errors(str(value))
            ]
    return causes


# ---------------------------------------------------------------- defaults


def _container_defaults(c: Obj) -> None:
    c.setdefault("terminationMessagePath", "/dev/termination-log")
    c.setdefault("terminationMessagePolicy", "File")
    image = str(c.get("image") or "")
    if "imagePullPolicy" not in c:
        tag = image.rsplit("/", 1)[-1]
        latest = "@" not in tag and (":" not in tag or tag.endswith(":latest"))
        c["imagePullPolicy"] = "Always" if latest else "IfNotPresent"
    c.setdefault("resources", {})
    for p in c.get("ports") or []:
        p.setdefault("protocol", "TCP")


def pod_spec_defaults(spec: Obj) -> None:
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("securityContext", {})
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("enableServiceLinks", True)
    spec.setdefault("preemptionPolicy", "PreemptLowerPriority")
    spec.setdefault("priority", 0)
    if spec.get("serviceAccountName") and not spec.get("serviceAccount"):
        spec["serviceAccount"] = spec["serviceAccountName"]
    for key in ("containers", "initContainers"):
        for c in spec.get(key) or []:
            if isinstance(c, dict):
                _container_defaults(c)


def _requests_from_limits(spec: Obj) -> None:
    """SetDefaults_Pod: a (init) container's missing requests are its limits (pods only, not templates)."""
    for key in ("containers", "initContainers"):
        for c in spec.get(key) or []:
            res = c.get("resources") if isinstance(c, dict) else None
            if not isinstance(res, dict):
                continue
            limits = res.get("limits")
            if not isinstance(limits, dict) or not limits:
                continue
            requests = res.get("requests")
            if not isinstance(requests, dict):
                requests = res["requests"] = {}
            for name, value in limits.items():
                requests.setdefault(name, value)


def _template_defaults(obj: Obj) -> None:
    template = (obj.get("spec") or {}).get("template")
    if isinstance(template, dict):
        template.setdefault("metadata", {})
        pod_spec_defaults(template.setdefault("spec", {}))


def _qos(spec: Obj) -> str:
    containers = list(spec.get("containers") or []) + list(spec.get("initContainers") or [])
    requests_any = False
    guaranteed = True
    for c in containers:
        res = c.get("resources") or {}
        req, lim = res.get("requests") or {}, res.get("limits") or {}
        if req or lim:
            requests_any = True
        for r in ("cpu", "memory"):
            if r not in lim or (r in req and str(req[r]) != str(lim[r])):
                guaranteed = False
    if not requests_any:
        return "BestEffort"
    return "Guaranteed" if guaranteed else "Burstable"


class ServiceIPs:
    """ClusterIP allocation from 10.96.0.0/12, like the service IP allocator."""

    def __init__(self, cidr: str = "10.96.0.0/12") -> None:
        self.network = ipaddress.ip_network(cidr)
        self.next = 10
        self.used: set[str] = {str(self.network.network_address + 1)}

    def allocate(self) -> str:
        while True:
            ip = str(self.network.network_address + self.next)
            self.next += 1
            if ip not in self.used:
                self.used.add(ip)
                return ip


def _strategy_defaults(spec: Obj, key: str, max_unavailable: int | str, max_surge: int | str) -> None:
    """SetDefaults_Deployment/_DaemonSet for the update strategy: type RollingUpdate, and a rolling
    update's missing maxUnavailable and maxSurge. A rollingUpdate of another type keeps its missing
    values as 0 (the round trip through the internal type, whose IntOrStrings are no pointers)."""
    strategy = spec.get(key)
    if strategy is None:
        strategy = spec[key] = {}
    if not isinstance(strategy, dict):
        return
    if not strategy.get("type"):
        strategy["type"] = "RollingUpdate"
    rolling = strategy.get("rollingUpdate")
    if rolling is None and strategy["type"] == "RollingUpdate":
        rolling = strategy["rollingUpdate"] = {}
    if not isinstance(rolling, dict):
        return
    defaults = (max_unavailable, max_surge) if strategy["type"] == "RollingUpdate" else (0, 0)
    for field_name, default in zip(("maxUnavailable", "maxSurge"), defaults, strict=True):
        if rolling.get(field_name) is None:
            rolling[field_name] = default


def apply_defaults(group: str, plural: str, obj: Obj, ips: ServiceIPs | None = None) -> None:
    """Defaults of a new or updated object of a built-in kind (in place)."""
    spec = obj.get("spec")
    if (group, plural) == ("", "pods"):
        if not isinstance(spec, dict):
            return
        pod_spec_defaults(spec)
        _requests_from_limits(spec)
        spec.setdefault("serviceAccountName", "default")
        spec.setdefault("serviceAccount", spec["serviceAccountName"])
        spec.setdefault(
            "tolerations",
            [
                {
                    "key": "node.kubernetes.io/not-ready",
                    "operator": "Exists",
                    "effect": "NoExecute",
                    "tolerationSeconds": 300,
                },
                {
                    "key": "node.kubernetes.io/unreachable",
                    "operator": "Exists",
                    "effect": "NoExecute",
                    "tolerationSeconds": 300,
                },
            ],
        )
    elif (group, plural) == ("apps", "deployments"):
        obj.setdefault("spec", {})
        s = obj["spec"]
        s.setdefault("replicas", 1)
        s.setdefault("revisionHistoryLimit", 10)
        s.setdefault("progressDeadlineSeconds", 600)
        _strategy_defaults(s, "strategy", "25%", "25%")
        _template_defaults(obj)
    elif (group, plural) == ("apps", "daemonsets"):
        obj.setdefault("spec", {})
        s = obj["spec"]
        s.setdefault("revisionHistoryLimit", 10)
        _strategy_defaults(s, "updateStrategy", 1, 0)
        _template_defaults(obj)
    elif (group, plural) == ("", "services"):
        obj.setdefault("spec", {})
        s = obj["spec"]
        s.setdefault("type", "ClusterIP")
        s.setdefault("sessionAffinity", "None")
        if s["type"] != "ExternalName":
            if not s.get("clusterIP") and ips is not None:
                s["clusterIP"] = ips.allocate()
            if s.get("clusterIP"):
                s.setdefault("clusterIPs", [s["clusterIP"]])
            s.setdefault("ipFamilies", ["IPv4"])
            s.setdefault("ipFamilyPolicy", "SingleStack")
            s.setdefault("internalTrafficPolicy", "Cluster")
        for p in s.get("ports") or []:
            p.setdefault("protocol", "TCP")
            if "targetPort" not in p and "port" in p:
                p["targetPort"] = p["port"]
    elif group == RBAC_GROUP:
        rbac_defaults(plural, obj)
    elif (group, plural) == ("batch", "jobs"):
        job_defaults(obj)
    elif (group, plural) == ("batch", "cronjobs"):
        cronjob_defaults(obj)
    elif (group, plural) == ("", "secrets"):
        obj.setdefault("type", "Opaque")
    elif (group, plural) == ("", "namespaces"):
        obj.setdefault("spec", {}).setdefault("finalizers", ["kubernetes"])
        labels = obj.setdefault("metadata", {}).setdefault("labels", {})
        labels["kubernetes.io/metadata.name"] = obj["metadata"]["name"]
    elif (group, plural) in (("resource.k8s.io", "resourceclaims"), ("resource.k8s.io", "resourceclaimtemplates")):
        claim_spec = (
            spec if plural == "resourceclaims" else ((spec or {}).get("spec") if isinstance(spec, dict) else None)
        )
        if isinstance(claim_spec, dict):
            for req in (claim_spec.get("devices") or {}).get("requests") or []:
                for sub in ([req.get("exactly")] if isinstance(req.get("exactly"), dict) else []) + list(
                    req.get("firstAvailable") or []
                ):
                    sub.setdefault("allocationMode", "ExactCount")
                    if sub["allocationMode"] == "ExactCount":
                        sub.setdefault("count", 1)
                    for t in sub.get("tolerations") or []:
                        t.setdefault("operator", "Equal")


# Labels kube-apiserver puts on a Job's pod template when it generates the selector
# (pkg/registry/batch/job/strategy.go generateSelector); the selector matches only the
# controller-uid one.
JOB_NAME_LABEL = "batch.kubernetes.io/job-name"
LEGACY_JOB_NAME_LABEL = "job-name"
CONTROLLER_UID_LABEL = "batch.kubernetes.io/controller-uid"
LEGACY_CONTROLLER_UID_LABEL = "controller-uid"


def job_spec_defaults(spec: Obj) -> None:
    """SetDefaults_Job's spec part (also what a CronJob's Job gets when the Job is created)."""
    if spec.get("completions") is None and spec.get("parallelism") is None:
        spec["completions"] = 1
        spec["parallelism"] = 1
    spec.setdefault("parallelism", 1)
    if spec.get("backoffLimit") is None:
        spec["backoffLimit"] = 2147483647 if spec.get("backoffLimitPerIndex") is not None else 6
    spec.setdefault("completionMode", "NonIndexed")
    spec.setdefault("suspend", False)
    spec.setdefault("manualSelector", False)
    policy = spec.get("podFailurePolicy")
    if isinstance(policy, dict):
        for rule in policy.get("rules") or []:
            for pattern in (rule.get("onPodConditions") or []) if isinstance(rule, dict) else []:
                if isinstance(pattern, dict):
                    pattern.setdefault("status", "True")
    spec.setdefault("podReplacementPolicy", "Failed" if policy is not None else "TerminatingOrFailed")


def job_defaults(obj: Obj) -> None:
    """Defaults of a Job, then the generated selector and template labels (unless manualSelector)."""
    spec = obj.setdefault("spec", {})
    if not isinstance(spec, dict):
        return
    md = obj.setdefault("metadata", {})
    template = spec.get("template")
    template_labels = ((template or {}).get("metadata") or {}).get("labels") if isinstance(template, dict) else None
    if template_labels and not md.get("labels"):
        md["labels"] = dict(template_labels)
    job_spec_defaults(spec)
    _template_defaults(obj)
    uid, name = md.get("uid"), md.get("name")
    if spec.get("manualSelector") is True or not uid or not isinstance(spec.get("template"), dict):
        return
    labels = spec["template"].setdefault("metadata", {})
    labels = labels.setdefault("labels", {}) if isinstance(labels, dict) else {}
    if not isinstance(labels, dict):
        return
    for key in (LEGACY_JOB_NAME_LABEL, JOB_NAME_LABEL):
        labels.setdefault(key, name)
    for key in (LEGACY_CONTROLLER_UID_LABEL, CONTROLLER_UID_LABEL):
        labels.setdefault(key, uid)
    selector = spec.get("selector")
    if selector is None:
        selector = spec["selector"] = {}
    if isinstance(selector, dict):
        match = selector.get("matchLabels")
        if match is None:
            match = selector["matchLabels"] = {}
        if isinstance(match, dict):
            match.setdefault(CONTROLLER_UID_LABEL, uid)


def cronjob_defaults(obj: Obj) -> None:
    spec = obj.setdefault("spec", {})
    if not isinstance(spec, dict):
        return
    spec.setdefault("concurrencyPolicy", "Allow")
    spec.setdefault("suspend", False)
    spec.setdefault("successfulJobsHistoryLimit", 3)
    spec.setdefault("failedJobsHistoryLimit", 1)
    job_template = spec.get("jobTemplate")
    if isinstance(job_template, dict):
        job_template.setdefault("metadata", {})
        _template_defaults(job_template)


def initial_status(group: str, plural: str, obj: Obj, now: str) -> Obj | None:
    """The status the server sets on create for kinds whose create ignores the given status."""
    if (group, plural) in (("batch", "jobs"), ("batch", "cronjobs")):
        return {}
    if (group, plural) == ("policy", "poddisruptionbudgets"):
        # PodDisruptionBudgetStatus's integers have no omitempty: an empty status reads as zeros.
        return {"disruptionsAllowed": 0, "currentHealthy": 0, "desiredHealthy": 0, "expectedPods": 0}
    if (group, plural) == ("", "pods"):
        return {"phase": "Pending", "qosClass": _qos(obj.get("spec") or {})}
    if (group, plural) == ("", "services"):
        return {"loadBalancer": {}}
    if (group, plural) == ("", "namespaces"):
        return {"phase": "Active"}
    return None


# ---------------------------------------------------------------- validation


def _selector_matches(selector: Obj | None, labels: Obj) -> bool:
    if not selector:
        return False
    for k, v in (selector.get("matchLabels") or {}).items():
        if labels.get(k) != v:
            return False
    for expr in selector.get("matchExpressions") or []:
        op, key, values = expr.get("operator"), expr.get("key"), expr.get("values") or []
        if (
            (op == "In" and labels.get(key) not in values)
            or (op == "NotIn" and labels.get(key) in values)
            or (op == "Exists" and key not in labels)
            or (op == "DoesNotExist" and key in labels)
        ):
            return False
    return True


def _workload_causes(obj: Obj) -> list[Cause]:
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return [("FieldValueRequired", "spec", "Required value")]
    causes: list[Cause] = []
    selector = spec.get("selector")
    labels = ((spec.get("template") or {}).get("metadata") or {}).get("labels") or {}
    if not selector:
        causes.append(("FieldValueRequired", "spec.selector", "Required value"))
    elif not (selector.get("matchLabels") or selector.get("matchExpressions")):
        causes.append(
            ("FieldValueInvalid", "spec.selector", 'Invalid value: "null": empty selector is invalid for deployment')
        )
    elif not _selector_matches(selector, labels):
        causes.append(
            (
                "FieldValueInvalid",
                "spec.template.metadata.labels",
                f"Invalid value: {labels}: `selector` does not match template `labels`",
            )
        )
    causes += podspec.template_causes(spec.get("template"), "spec.template")
    return causes


def _admin_access_paths(claim_spec: Any, prefix: str) -> list[str]:
    out: list[str] = []
    if not isinstance(claim_spec, dict):
        return out
    for i, req in enumerate((claim_spec.get("devices") or {}).get("requests") or []):
        exactly = req.get("exactly")
        if isinstance(exactly, dict) and exactly.get("adminAccess"):
            out.append(f"{prefix}.devices.requests[{i}].exactly.adminAccess")
        for j, sub in enumerate(req.get("firstAvailable") or []):
            if isinstance(sub, dict) and sub.get("adminAccess"):
                out.append(f"{prefix}.devices.requests[{i}].firstAvailable[{j}].adminAccess")
    return out


def _nonnegative(spec: Obj, fields: tuple[str, ...], path: str) -> list[Cause]:
    causes: list[Cause] = []
    for f in fields:
        v = spec.get(f)
        if isinstance(v, int) and not isinstance(v, bool) and v < 0:
            causes.append(
                ("FieldValueInvalid", f"{path}.{f}", f"Invalid value: {v}: must be greater than or equal to 0")
            )
    return causes


def _go_map(labels: Any) -> str:
    """How Go's %v prints a map[string]string in a field error (keys sorted)."""
    if not isinstance(labels, dict):
        return "map[string]string(nil)"
    inner = ", ".join(f"{json.dumps(str(k))}:{json.dumps(str(v))}" for k, v in sorted(labels.items()))
    return f"map[string]string{{{inner}}}"


def _job_template_causes(template: Any, path: str) -> list[Cause]:
    if not isinstance(template, dict):
        return [("FieldValueRequired", path, "Required value")]
    causes = podspec.template_causes(template, path)
    policy = (template.get("spec") or {}).get("restartPolicy") if isinstance(template.get("spec"), dict) else None
    if policy not in ("OnFailure", "Never"):
        causes.append(
            (
                "FieldValueNotSupported",
                f"{path}.spec.restartPolicy",
                f'Unsupported value: "{policy or ""}": supported values: "OnFailure", "Never"',
            )
        )
    return causes


def _job_causes(obj: Obj, old: Obj | None) -> list[Cause]:
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return [("FieldValueRequired", "spec", "Required value")]
    causes = _nonnegative(
        spec, ("parallelism", "completions", "activeDeadlineSeconds", "backoffLimit", "ttlSecondsAfterFinished"), "spec"
    )
    if spec.get("completionMode") not in ("NonIndexed", "Indexed"):
        causes.append(
            (
                "FieldValueNotSupported",
                "spec.completionMode",
                f'Unsupported value: "{spec.get("completionMode")}": supported values: "NonIndexed", "Indexed"',
            )
        )
    elif spec["completionMode"] == "Indexed" and spec.get("completions") is None:
        causes.append(("FieldValueRequired", "spec.completions", "Required value: when completion mode is Indexed"))
    template = spec.get("template")
    labels = ((template or {}).get("metadata") or {}).get("labels") if isinstance(template, dict) else None
    selector = spec.get("selector")
    uid = (obj.get("metadata") or {}).get("uid", "")
    if spec.get("manualSelector") is not True:
        if (labels or {}).get(CONTROLLER_UID_LABEL) != uid:
            causes.append(
                (
                    "FieldValueInvalid",
                    "spec.template.metadata.labels",
                    f"Invalid value: {_go_map(labels)}: must be '{CONTROLLER_UID_LABEL}: {uid}'",
                )
            )
        if selector != {"matchLabels": {CONTROLLER_UID_LABEL: uid}}:
            causes.append(
                ("FieldValueInvalid", "spec.selector", f"Invalid value: {selector}: `selector` not auto-generated")
            )
    elif not selector:
        causes.append(("FieldValueRequired", "spec.selector", "Required value"))
    elif not _selector_matches(selector, labels or {}):
        causes.append(
            (
                "FieldValueInvalid",
                "spec.template.metadata.labels",
                f"Invalid value: {_go_map(labels)}: `selector` does not match template `labels`",
            )
        )
    causes += _job_template_causes(template, "spec.template")
    if old is not None:
        old_spec = old.get("spec") or {}
        for f in ("selector", "completionMode", "podFailurePolicy"):
            if old_spec.get(f) != spec.get(f):
                causes.append(("FieldValueInvalid", f"spec.{f}", f"Invalid value: {spec.get(f)}: field is immutable"))
        # The pod template may change only while the Job is suspended (and has not started).
        if old_spec.get("template") != spec.get("template") and not (old_spec.get("suspend") and spec.get("suspend")):
            causes.append(("FieldValueInvalid", "spec.template", 'Invalid value: "object": field is immutable'))
    return causes


_CRON_FIELD = re.compile(r"^[0-9A-Za-z*?/,\-LW#]+$")


def _cronjob_causes(obj: Obj) -> list[Cause]:
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return [("FieldValueRequired", "spec", "Required value")]
    causes = _nonnegative(
        spec, ("startingDeadlineSeconds", "successfulJobsHistoryLimit", "failedJobsHistoryLimit"), "spec"
    )
    schedule = spec.get("schedule")
    if not schedule:
        causes.append(("FieldValueRequired", "spec.schedule", "Required value"))
    elif not (
        str(schedule).startswith("@")
        or (len(str(schedule).split()) == 5 and all(_CRON_FIELD.match(f) for f in str(schedule).split()))
    ):
        causes.append(
            (
                "FieldValueInvalid",
                "spec.schedule",
                f'Invalid value: "{schedule}": expected exactly 5 fields, found {len(str(schedule).split())}: {schedule}',
            )
        )
    if spec.get("concurrencyPolicy") not in ("Allow", "Forbid", "Replace"):
        causes.append(
            (
                "FieldValueNotSupported",
                "spec.concurrencyPolicy",
                f'Unsupported value: "{spec.get("concurrencyPolicy")}": supported values: "Allow", "Forbid", "Replace"',
            )
        )
    job_spec = (spec.get("jobTemplate") or {}).get("spec") if isinstance(spec.get("jobTemplate"), dict) else None
    if not isinstance(job_spec, dict):
        causes.append(("FieldValueRequired", "spec.jobTemplate.spec", "Required value"))
    else:
        causes += _nonnegative(
            job_spec,
            ("parallelism", "completions", "activeDeadlineSeconds", "backoffLimit", "ttlSecondsAfterFinished"),
            "spec.jobTemplate.spec",
        )
        causes += _job_template_causes(job_spec.get("template"), "spec.jobTemplate.spec.template")
    return causes


_PERCENT = re.compile(r"^[0-9]+%$")


def int_or_percent_causes(value: Any, path: str) -> list[Cause]:
    """ValidatePositiveIntOrPercent plus IsNotMoreThan100Percent (PDB minAvailable/maxUnavailable)."""
    if isinstance(value, bool):
        return [("FieldValueInvalid", path, f"Invalid value: {json.dumps(value)}: must be an integer or percentage")]
    if isinstance(value, int):
        if value < 0:
            return [("FieldValueInvalid", path, f"Invalid value: {value}: must be greater than or equal to 0")]
        return []
    if isinstance(value, str):
        if not _PERCENT.match(value):
            return [
                (
                    "FieldValueInvalid",
                    path,
                    f'Invalid value: "{value}": a valid percent string must be a numeric string followed by an '
                    "ending '%' (e.g. '1%',  or '93%', regex used for validation is '[0-9]+%')",
                )
            ]
        if int(value[:-1]) > 100:
            return [("FieldValueInvalid", path, f'Invalid value: "{value}": must not be greater than 100%')]
        return []
    return [("FieldValueInvalid", path, f"Invalid value: {json.dumps(value)}: must be an integer or percentage")]


def _pdb_causes(obj: Obj) -> list[Cause]:
    spec = obj.get("spec")
    if spec is None:
        return []
    if not isinstance(spec, dict):
        return [("FieldValueInvalid", "spec", "Invalid value: must be an object")]
    causes: list[Cause] = []
    if spec.get("minAvailable") is not None and spec.get("maxUnavailable") is not None:
        causes.append(
            ("FieldValueInvalid", "spec", 'Invalid value: "object": minAvailable and maxUnavailable cannot be both set')
        )
    for f in ("minAvailable", "maxUnavailable"):
        if spec.get(f) is not None:
            causes += int_or_percent_causes(spec[f], f"spec.{f}")
    policy = spec.get("unhealthyPodEvictionPolicy")
    if policy is not None and policy not in ("IfHealthyBudget", "AlwaysAllow"):
        causes.append(
            (
                "FieldValueNotSupported",
                "spec.unhealthyPodEvictionPolicy",
                f'Unsupported value: "{policy}": supported values: "AlwaysAllow", "IfHealthyBudget"',
            )
        )
    return causes


# ---------------------------------------------------------------- rolling updates (pkg/apis/apps/validation)


def _int_or_string(value: Any) -> Any:
    """An IntOrString as Go holds it after decoding: an absent value is the integer 0."""
    return 0 if value is None else value


def _int_value(value: Any) -> int:
    """getIntOrPercentValue: a percentage's number, else IntValue() (a string is Atoi'd, 0 if it fails)."""
    if isinstance(value, str):
        text = value[:-1] if _PERCENT.match(value) else value
        return int(text) if re.fullmatch(r"[+-]?[0-9]+", text) else 0
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _positive_int_or_percent(value: Any, path: str) -> list[Cause]:
    """ValidatePositiveIntOrPercent."""
    if isinstance(value, str):
        if _PERCENT.match(value):
            return []
        return [
            (
                "FieldValueInvalid",
                path,
                f"Invalid value: {go_json(value)}: a valid percent string must be a numeric string followed by an "
                "ending '%' (e.g. '1%',  or '93%', regex used for validation is '[0-9]+%')",
            )
        ]
    if isinstance(value, int) and not isinstance(value, bool) and value < 0:
        return [("FieldValueInvalid", path, f"Invalid value: {value}: must be greater than or equal to 0")]
    return []


def _not_over_100_percent(value: Any, path: str) -> list[Cause]:
    """IsNotMoreThan100Percent."""
    if isinstance(value, str) and _PERCENT.match(value) and int(value[:-1]) > 100:
        return [("FieldValueInvalid", path, f"Invalid value: {go_json(value)}: must not be greater than 100%")]
    return []


def _rolling_update_json(rolling: Any) -> Any:
    if not isinstance(rolling, dict):
        return None
    return {
        "MaxUnavailable": _int_or_string(rolling.get("maxUnavailable")),
        "MaxSurge": _int_or_string(rolling.get("maxSurge")),
    }


def _daemonset_strategy_causes(strategy: Any) -> list[Cause]:
    """ValidateDaemonSetUpdateStrategy and ValidateRollingUpdateDaemonSet: percentages as strings only,
    at most 100%, and exactly one of maxSurge and maxUnavailable non-zero."""
    path = "spec.updateStrategy"
    strategy = strategy if isinstance(strategy, dict) else {}
    kind, rolling = strategy.get("type"), strategy.get("rollingUpdate")
    if kind == "OnDelete":
        return []
    if kind != "RollingUpdate":
        shown = {"Type": kind or "", "RollingUpdate": _rolling_update_json(rolling)}
        return [
            (
                "FieldValueNotSupported",
                path,
                f'Unsupported value: {go_json(shown)}: supported values: "RollingUpdate", "OnDelete"',
            )
        ]
    if not isinstance(rolling, dict):
        return [("FieldValueRequired", f"{path}.rollingUpdate", "Required value")]
    path += ".rollingUpdate"
    unavailable, surge = _int_or_string(rolling.get("maxUnavailable")), _int_or_string(rolling.get("maxSurge"))
    causes = _positive_int_or_percent(unavailable, f"{path}.maxUnavailable")
    causes += _positive_int_or_percent(surge, f"{path}.maxSurge")
    causes += _not_over_100_percent(unavailable, f"{path}.maxUnavailable")
    causes += _not_over_100_percent(surge, f"{path}.maxSurge")
    has_unavailable, has_surge = _int_value(unavailable) != 0, _int_value(surge) != 0
    if has_unavailable and has_surge:
        causes.append(
            (
                "FieldValueInvalid",
                f"{path}.maxSurge",
                f"Invalid value: {go_json(surge)}: may not be set when maxUnavailable is non-zero",
            )
        )
    elif not has_unavailable and not has_surge:
        causes.append(
            ("FieldValueRequired", f"{path}.maxUnavailable", "Required value: cannot be 0 when maxSurge is 0")
        )
    return causes


def _deployment_strategy_causes(strategy: Any) -> list[Cause]:
    """ValidateDeploymentStrategy and ValidateRollingUpdateDeployment: maxSurge and maxUnavailable
    not both 0, maxUnavailable at most 100%; no rollingUpdate with Recreate."""
    path = "spec.strategy"
    strategy = strategy if isinstance(strategy, dict) else {}
    kind, rolling = strategy.get("type"), strategy.get("rollingUpdate")
    if kind == "Recreate":
        if rolling is not None:
            return [
                (
                    "FieldValueForbidden",
                    f"{path}.rollingUpdate",
                    "Forbidden: may not be specified when strategy `type` is 'Recreate'",
                )
            ]
        return []
    if kind != "RollingUpdate":
        shown = {"Type": kind or "", "RollingUpdate": _rolling_update_json(rolling)}
        return [
            (
                "FieldValueNotSupported",
                path,
                f'Unsupported value: {go_json(shown)}: supported values: "Recreate", "RollingUpdate"',
            )
        ]
    if not isinstance(rolling, dict):
        return [
            ("FieldValueRequired", f"{path}.rollingUpdate", "Required value: this should be defaulted and never be nil")
        ]
    path += ".rollingUpdate"
    unavailable, surge = _int_or_string(rolling.get("maxUnavailable")), _int_or_string(rolling.get("maxSurge"))
    causes = _positive_int_or_percent(unavailable, f"{path}.maxUnavailable")
    causes += _positive_int_or_percent(surge, f"{path}.maxSurge")
    if _int_value(unavailable) == 0 and _int_value(surge) == 0:
        causes.append(
            (
                "FieldValueInvalid",
                f"{path}.maxUnavailable",
                f"Invalid value: {go_json(unavailable)}: may not be 0 when `maxSurge` is 0",
            )
        )
    causes += _not_over_100_percent(unavailable, f"{path}.maxUnavailable")
    return causes


# ---------------------------------------------------------------- RBAC (pkg/apis/rbac/validation)

RBAC_GROUP = "rbac.authorization.k8s.io"


def rbac_defaults(plural: str, obj: Obj) -> None:
    """rbac/v1 defaults: a binding's roleRef.apiGroup, and the apiGroup of User and Group subjects."""
    if plural not in ("rolebindings", "clusterrolebindings"):
        return
    ref = obj.get("roleRef")
    if isinstance(ref, dict) and not ref.get("apiGroup"):
        ref["apiGroup"] = RBAC_GROUP
    subjects = obj.get("subjects")
    for subject in subjects if isinstance(subjects, list) else []:
        if isinstance(subject, dict) and not subject.get("apiGroup") and subject.get("kind") in ("User", "Group"):
            subject["apiGroup"] = RBAC_GROUP


def _strings_of(value: Any) -> list[str]:
    return [str(v) for v in value] if isinstance(value, list) else []


def policy_rule_causes(rule: Any, namespaced: bool, path: str) -> list[Cause]:
    """ValidatePolicyRule: verbs required; non-resource URLs only in ClusterRoles and never with
    apiGroups/resources/resourceNames; resource rules need apiGroups and resources."""
    rule = rule if isinstance(rule, dict) else {}
    causes: list[Cause] = []
    if not _strings_of(rule.get("verbs")):
        causes.append(("FieldValueRequired", f"{path}.verbs", "Required value: verbs must contain at least one value"))
    urls = _strings_of(rule.get("nonResourceURLs"))
    groups, resources = _strings_of(rule.get("apiGroups")), _strings_of(rule.get("resources"))
    if urls:
        shown = f"Invalid value: {go_json(urls)}"
        if namespaced:
            causes.append(
                (
                    "FieldValueInvalid",
                    f"{path}.nonResourceURLs",
                    f"{shown}: namespaced rules cannot apply to non-resource URLs",
                )
            )
        if groups or resources or _strings_of(rule.get("resourceNames")):
            causes.append(
                (
                    "FieldValueInvalid",
                    f"{path}.nonResourceURLs",
                    f"{shown}: rules cannot apply to both regular resources and non-resource URLs",
                )
            )
        return causes
    if not groups:
        causes.append(
            (
                "FieldValueRequired",
                f"{path}.apiGroups",
                "Required value: resource rules must supply at least one api group",
            )
        )
    if not resources:
        causes.append(
            (
                "FieldValueRequired",
                f"{path}.resources",
                "Required value: resource rules must supply at least one resource",
            )
        )
    return causes


def subject_causes(subject: Any, namespaced: bool, path: str) -> list[Cause]:
    """ValidateRoleBindingSubject: a name; ServiceAccounts by a DNS subdomain name, without apiGroup,
    with a namespace in ClusterRoleBindings; Users and Groups in the RBAC API group."""
    subject = subject if isinstance(subject, dict) else {}
    name, kind = str(subject.get("name") or ""), str(subject.get("kind") or "")
    api_group = str(subject.get("apiGroup") or "")
    causes: list[Cause] = []
    if not name:
        causes.append(("FieldValueRequired", f"{path}.name", "Required value"))
    if kind == "ServiceAccount":
        causes += [
            ("FieldValueInvalid", f"{path}.name", f"Invalid value: {go_json(name)}: {m}")
            for m in (subdomain_errors(name) if name else [])
        ]
        if api_group:
            causes.append(
                (
                    "FieldValueNotSupported",
                    f"{path}.apiGroup",
                    f'Unsupported value: {go_json(api_group)}: supported values: ""',
                )
            )
        if not namespaced and not subject.get("namespace"):
            causes.append(("FieldValueRequired", f"{path}.namespace", "Required value"))
    elif kind in ("User", "Group"):
        if api_group != RBAC_GROUP:
            causes.append(
                (
                    "FieldValueNotSupported",
                    f"{path}.apiGroup",
                    f'Unsupported value: {go_json(api_group)}: supported values: "{RBAC_GROUP}"',
                )
            )
    else:
        causes.append(
            (
                "FieldValueNotSupported",
                f"{path}.kind",
                f'Unsupported value: {go_json(kind)}: supported values: "ServiceAccount", "User", "Group"',
            )
        )
    return causes


def _role_ref(obj: Obj) -> Obj:
    """The internal RoleRef as a field error prints it."""
    ref = obj.get("roleRef")
    ref = ref if isinstance(ref, dict) else {}
    return {
        "APIGroup": str(ref.get("apiGroup") or ""),
        "Kind": str(ref.get("kind") or ""),
        "Name": str(ref.get("name") or ""),
    }


def _rbac_object_causes(plural: str, obj: Obj) -> list[Cause]:
    """ValidateRole, ValidateClusterRole, ValidateRoleBinding, ValidateClusterRoleBinding (beyond metadata)."""
    causes: list[Cause] = []
    if plural in ("roles", "clusterroles"):
        rules = obj.get("rules")
        for i, rule in enumerate(rules if isinstance(rules, list) else []):
            causes += policy_rule_causes(rule, plural == "roles", f"rules[{i}]")
        aggregation = obj.get("aggregationRule")
        if plural == "clusterroles" and isinstance(aggregation, dict):
            selectors = aggregation.get("clusterRoleSelectors")
            selectors = selectors if isinstance(selectors, list) else []
            if not selectors:
                causes.append(
                    (
                        "FieldValueRequired",
                        "aggregationRule.clusterRoleSelectors",
                        "Required value: at least one clusterRoleSelector required if aggregationRule is non-nil",
                    )
                )
            for i, selector in enumerate(selectors):
                where = f"aggregationRule.clusterRoleSelectors[{i}]"
                found = label_selector_causes(selector, where)
                causes += found
                if found:  # LabelSelectorAsSelector fails on the same selectors
                    causes.append(("FieldValueInvalid", where, "Invalid value: null: invalid label selector."))
        return causes
    ref = _role_ref(obj)
    if ref["APIGroup"] != RBAC_GROUP:
        causes.append(
            (
                "FieldValueNotSupported",
                "roleRef.apiGroup",
                f'Unsupported value: {go_json(ref["APIGroup"])}: supported values: "{RBAC_GROUP}"',
            )
        )
    kinds = ("Role", "ClusterRole") if plural == "rolebindings" else ("ClusterRole",)
    if ref["Kind"] not in kinds:
        supported = ", ".join(f'"{k}"' for k in kinds)
        causes.append(
            (
                "FieldValueNotSupported",
                "roleRef.kind",
                f"Unsupported value: {go_json(ref['Kind'])}: supported values: {supported}",
            )
        )
    if not ref["Name"]:
        causes.append(("FieldValueRequired", "roleRef.name", "Required value"))
    causes += [
        ("FieldValueInvalid", "roleRef.name", f"Invalid value: {go_json(ref['Name'])}: {m}")
        for m in path_segment_errors(ref["Name"])
    ]
    subjects = obj.get("subjects")
    for i, subject in enumerate(subjects if isinstance(subjects, list) else []):
        causes += subject_causes(subject, plural == "rolebindings", f"subjects[{i}]")
    return causes


def rbac_causes(plural: str, obj: Obj, old: Obj | None) -> list[Cause]:
    """What the RBAC strategies' Validate/ValidateUpdate answer. An update validates the new object
    twice (ValidateUpdate calls ValidateXUpdate, which validates it again: kube-apiserver lists such
    causes twice, its message once) and refuses a changed roleRef."""
    causes = _rbac_object_causes(plural, obj)
    if old is None:
        return causes
    causes = causes + causes
    if plural in ("rolebindings", "clusterrolebindings") and _role_ref(old) != _role_ref(obj):
        causes.append(
            ("FieldValueInvalid", "roleRef", f"Invalid value: {go_json(_role_ref(obj))}: cannot change roleRef")
        )
    return causes


def causes_for(group: str, plural: str, obj: Obj, old: Obj | None, namespace_obj: Obj | None) -> list[Cause]:
    """Validation errors of a built-in object (create when ``old`` is None, else update).

    A value the Go type cannot even hold (an unparsable quantity) is a 400 decoding error instead.
    """
    try:
        return _causes_for(group, plural, obj, old, namespace_obj)
    except DecodeError as err:
        from gpucluster.sandbox.apiserver import errors

        kind, version = str(obj.get("kind", "")), str(obj.get("apiVersion", "")).rpartition("/")[2]
        raise errors.bad_request(f'{kind} in version "{version}" cannot be handled as a {kind}: {err}') from None


def _causes_for(group: str, plural: str, obj: Obj, old: Obj | None, namespace_obj: Obj | None) -> list[Cause]:
    key = (group, plural)
    if key == ("batch", "jobs"):
        return _job_causes(obj, old)
    if key == ("batch", "cronjobs"):
        return _cronjob_causes(obj)
    if key == ("policy", "poddisruptionbudgets"):
        return _pdb_causes(obj)
    if key == ("", "pods"):
        return podspec.pod_spec_causes(obj.get("spec"), "spec")
    if key[0] == RBAC_GROUP and key[1] in ("roles", "clusterroles", "rolebindings", "clusterrolebindings"):
        return rbac_causes(plural, obj, old)
    if key in (("apps", "deployments"), ("apps", "daemonsets")):
        causes = _workload_causes(obj)
        spec = obj.get("spec")
        if isinstance(spec, dict) and plural == "deployments":
            causes += _deployment_strategy_causes(spec.get("strategy"))
        elif isinstance(spec, dict):
            causes += _daemonset_strategy_causes(spec.get("updateStrategy"))
        if old is not None and (old.get("spec") or {}).get("selector") != (obj.get("spec") or {}).get("selector"):
            causes.append(
                (
                    "FieldValueInvalid",
                    "spec.selector",
                    f"Invalid value: {(obj.get('spec') or {}).get('selector')}: field is immutable",
                )
            )
        return causes
    if key in (("resource.k8s.io", "resourceclaims"), ("resource.k8s.io", "resourceclaimtemplates")):
        causes = []
        claim_spec = obj.get("spec") if plural == "resourceclaims" else (obj.get("spec") or {}).get("spec")
        prefix = "spec" if plural == "resourceclaims" else "spec.spec"
        labels = ((namespace_obj or {}).get("metadata") or {}).get("labels") or {}
        if labels.get(ADMIN_ACCESS_LABEL) != "true":
            ns = (obj.get("metadata") or {}).get("namespace", "")
            for path in _admin_access_paths(claim_spec, prefix):
                causes.append(
                    (
                        "FieldValueForbidden",
                        path,
                        f"Forbidden: admin access to devices requires the `{ADMIN_ACCESS_LABEL}: true` label on the containing namespace {ns}",
                    )
                )
        if old is not None and old.get("spec") != obj.get("spec"):
            causes.append(("FieldValueInvalid", "spec", 'Invalid value: "object": field is immutable'))
        return causes
    return []


def strip_for_generation(obj: Obj, has_status: bool) -> Obj:
    """The part of an object whose change bumps metadata.generation."""
    skip = {"metadata", "status"} if has_status else {"metadata"}
    return {k: v for k, v in obj.items() if k not in skip}
